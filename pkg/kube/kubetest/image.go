package kubetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// The programs busybox answers for in the test images, as /bin/NAME links.
var busyboxApplets = []string{
	"sh", "cat", "echo", "env", "sleep", "head", "tail", "ls", "wc", "dd",
	"true", "false", "test", "id", "printf", "grep", "seq", "mkdir", "rm",
}

// busyboxLayer is an uncompressed layer (a tar) holding the host's static
// busybox as /bin/busybox with its applets, each file of extra (path in the
// image → file on the host; in bin or usr/local/bin), /etc/passwd and
// /etc/group for root and nobody, and /tmp.
func busyboxLayer(extra map[string]string) ([]byte, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("a static busybox is needed for the test images (apt-get install busybox-static): %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	when := time.Unix(0, 0)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: when})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: when}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin", 0o755}, {"etc", 0o755}, {"tmp", 0o1777}, {"proc", 0o755}, {"sys", 0o755}, {"dev", 0o755},
		{"usr", 0o755}, {"usr/local", 0o755}, {"usr/local/bin", 0o755}} {
		if err := dir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	if err := file("bin/busybox", 0o755, bb); err != nil {
		return nil, err
	}
	for _, a := range busyboxApplets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: when}); err != nil {
			return nil, err
		}
	}
	for _, dst := range slices.Sorted(maps.Keys(extra)) {
		data, err := os.ReadFile(extra[dst])
		if err != nil {
			return nil, err
		}
		if err := file(strings.TrimPrefix(dst, "/"), 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\n")); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ociDescriptor is an OCI content descriptor.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

// writeOCIArchive writes, at path, an OCI image layout as a tar (what `ctr
// images import` reads) holding one linux/amd64 image named ref, made of
// layer (uncompressed), whose command is cmd.
func writeOCIArchive(path, ref string, layer []byte, cmd []string) error {
	blobs := map[string][]byte{}
	put := func(b []byte) string {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return d
	}
	layerDigest := put(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Cmd": cmd, "Env": []string{"PATH=/bin"}, "WorkingDir": "/"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	configDigest := put(config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        ociDescriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: configDigest, Size: int64(len(config))},
		"layers":        []ociDescriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return err
	}
	manifestDigest := put(manifest)
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []ociDescriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: manifestDigest, Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref},
			Platform:    map[string]string{"architecture": "amd64", "os": "linux"},
		}},
	})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	write := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	err = write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	if err == nil {
		err = write("index.json", index)
	}
	for d, b := range blobs {
		if err == nil {
			err = write("blobs/sha256/"+d[len("sha256:"):], b)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
