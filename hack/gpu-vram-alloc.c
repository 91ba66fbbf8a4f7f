/*
 * gpu-vram-alloc: allocates MIB MiB on the first visible CUDA device,
 * says so, holds it SECONDS seconds (default 10) and exits 0. No CUDA
 * toolkit needed: the driver's library is loaded with dlopen and the few
 * entry points used are declared here. hack/gpu-check.sh runs it as a
 * batch, to measure what the controller sees of a real GPU.
 *
 *   gcc -O2 -Wall -o bin/gpu-vram-alloc hack/gpu-vram-alloc.c -ldl
 *   bin/gpu-vram-alloc 1024 5
 *
 * Exit 2 when libcuda cannot be loaded or a call fails (the CUresult is
 * printed); 1 on bad arguments.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define CHUNK_MIB 256

static void *sym(void *lib, const char *name, const char *fallback) {
	void *f = dlsym(lib, name);
	if (!f && fallback)
		f = dlsym(lib, fallback);
	if (!f) {
		fprintf(stderr, "gpu-vram-alloc: libcuda has no %s\n", name);
		exit(2);
	}
	return f;
}

static void check(CUresult r, const char *what) {
	if (r != 0) {
		fprintf(stderr, "gpu-vram-alloc: %s failed: CUresult %d\n", what, r);
		exit(2);
	}
}

int main(int argc, char **argv) {
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: gpu-vram-alloc MIB [SECONDS]\n");
		return 1;
	}
	char *end;
	long mib = strtol(argv[1], &end, 10);
	if (*end != '\0' || end == argv[1] || mib < 0) {
		fprintf(stderr, "gpu-vram-alloc: bad MIB %s\n", argv[1]);
		return 1;
	}
	long secs = 10;
	if (argc == 3) {
		secs = strtol(argv[2], &end, 10);
		if (*end != '\0' || end == argv[2] || secs < 0) {
			fprintf(stderr, "gpu-vram-alloc: bad SECONDS %s\n", argv[2]);
			return 1;
		}
	}
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "gpu-vram-alloc: dlopen libcuda.so.1: %s\n", dlerror());
		return 2;
	}
	CUresult (*cuInit)(unsigned) = (CUresult (*)(unsigned))sym(lib, "cuInit", NULL);
	CUresult (*cuDeviceGet)(CUdevice *, int) = (CUresult (*)(CUdevice *, int))sym(lib, "cuDeviceGet", NULL);
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) =
	    (CUresult (*)(CUcontext *, unsigned, CUdevice))sym(lib, "cuCtxCreate_v2", "cuCtxCreate");
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) =
	    (CUresult (*)(CUdeviceptr *, size_t))sym(lib, "cuMemAlloc_v2", "cuMemAlloc");
	CUresult (*cuMemFree)(CUdeviceptr) = (CUresult (*)(CUdeviceptr))sym(lib, "cuMemFree_v2", "cuMemFree");
	long nchunks = (mib + CHUNK_MIB - 1) / CHUNK_MIB, held = 0;
	CUdeviceptr *chunks = calloc(nchunks ? nchunks : 1, sizeof *chunks);
	if (!chunks) {
		fprintf(stderr, "gpu-vram-alloc: out of host memory\n");
		return 2;
	}

	CUdevice dev;
	CUcontext ctx;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuCtxCreate(&ctx, 0, dev), "cuCtxCreate");
	for (long done = 0; done < mib;) {
		long n = mib - done < CHUNK_MIB ? mib - done : CHUNK_MIB;
		check(cuMemAlloc(&chunks[held], (size_t)n << 20), "cuMemAlloc");
		held++;
		done += n;
	}
	printf("allocated %ld MiB\n", mib);
	fflush(stdout);
	sleep((unsigned)secs);
	while (held > 0)
		check(cuMemFree(chunks[--held]), "cuMemFree");
	return 0; /* the driver frees the context with the process */
}
