package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// fakeNvidiaSMI answers the probe's two queries for one GPU of 4000 MiB:
// the device, and each process named gpu-user as using the MiB its
// environment's FAKE_VRAM_MIB says (what the CUDA driver would report
// for a process that allocated that much).
const fakeNvidiaSMI = `#!/bin/sh
case "$1" in
--query-gpu=*)
	echo "0, GPU-6a3e0c1d-fake, NVIDIA Fake H200, 4000, 0, 4000, 3" ;;
--query-compute-apps=*)
	for d in /proc/[0-9]*; do
		[ "$(cat "$d/comm" 2>/dev/null)" = gpu-user ] || continue
		mib=$(tr '\0' '\n' < "$d/environ" 2>/dev/null | sed -n 's/^FAKE_VRAM_MIB=//p')
		[ -n "$mib" ] && echo "GPU-6a3e0c1d-fake, ${d#/proc/}, $mib"
	done
	exit 0 ;;
*) echo "unexpected query: $*" >&2; exit 2 ;;
esac
`

// A GPU seen through nvidia-smi (a fake one, the driver's answers as they
// are printed): two tasks whose GPU memory contracts do not fit the GPU
// together never run at once; a batch that uses more than its contract is
// killed as GPUMemoryExceeded and retried under the need it showed, and
// its peaks are recorded in the status and the learned history; every
// batch sees only its GPU.
func TestGPUMemoryHeldToItsContract(t *testing.T) {
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "nvidia-smi"), []byte(fakeNvidiaSMI), 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fake, "gpu-user"), sleep, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	spool := newSpool(t)
	task := func(name, gpuMemory, used string) string {
		return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: " + name + "}\nspec:\n" +
			"  command: [sh, -c, 'echo \"visible=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER\"; exec gpu-user 5']\n" +
			"  env: [{name: FAKE_VRAM_MIB, value: '" + used + "'}]\n" +
			"  items: {count: 1}\n" +
			"  resources: {gpuSlots: 1, fixed: {memory: 64Mi, gpuMemory: " + gpuMemory + "}}\n"
	}
	// a and b: 3000 MiB each of the 3744 MiB the GPU gives (4000 less its
	// 256 MiB margin); over: 1 GiB reserved, 2500 MiB used.
	a := writeManifest(t, spool, "a.yaml", task("a", "3000Mi", "2000"))
	b := writeManifest(t, spool, "b.yaml", task("b", "3000Mi", "2000"))
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("controller exit %d", code)
	}
	ta, tb := readTask(t, a), readTask(t, b)
	for _, tk := range []*v1alpha1.Task{ta, tb} {
		lb := tk.Status.LastBatch
		if tk.Status.Phase != v1alpha1.PhaseDone || lb == nil || lb.PeakGPUMemory == nil || lb.PeakGPUMemory.Value() != 2000<<20 {
			t.Fatalf("task %s: phase %s, last batch %+v: want Done with a GPU peak of 2000MiB", tk.Metadata.Name, tk.Status.Phase, lb)
		}
	}
	la, lb := ta.Status.LastBatch, tb.Status.LastBatch
	if la.StartTime.Before(lb.EndTime) && lb.StartTime.Before(la.EndTime) {
		t.Errorf("a ran %v..%v and b %v..%v: their GPU memory does not fit together", la.StartTime, la.EndTime, lb.StartTime, lb.EndTime)
	}

	over := writeManifest(t, spool, "over.yaml", task("over", "1Gi", "2500"))
	c = startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("controller exit %d", code)
	}
	to := readTask(t, over)
	if to.Status.Phase != v1alpha1.PhaseDone || to.Status.LastBatch.Attempt != 2 || to.Status.LastBatch.PeakGPUMemory.Value() != 2500<<20 {
		t.Fatalf("over: phase %s, last batch %+v: want Done at the second attempt, GPU peak 2500MiB", to.Status.Phase, to.Status.LastBatch)
	}
	var low string
	for _, c := range to.Status.Conditions {
		if c.Type == v1alpha1.ConditionEstimateLow && c.Reason == v1alpha1.ReasonGPUMemoryExceeded {
			low = c.Message
		}
	}
	if !strings.Contains(low, "exceeded the contract 1.0GiB") || !strings.Contains(low, "suggested: resources: {fixed: {gpuMemory: ") {
		t.Errorf("over's EstimateTooLow: %q, want the GPU memory kill and a gpuMemory suggestion", low)
	}
	log, err := os.ReadFile(to.Status.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"GPUMemoryExceeded: GPU memory 2.4GiB on nvidia:0 exceeded the contract 1.0GiB by more than 10%",
		"visible=0 order=PCI_BUS_ID",
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("over's log lacks %q:\n%s", want, log)
		}
	}
	var killed, fine bool
	for _, recs := range testHistory(t, spool) {
		for _, r := range recs {
			if r.Task != "over" {
				continue
			}
			killed = killed || (r.KilledForGPUMemory && r.GPULimitBytes == 1<<30 && r.GPUMemoryBytes == 2500<<20)
			fine = fine || (r.Succeeded() && r.GPUMeasured && r.GPUMemoryBytes == 2500<<20 && r.GPULimitBytes >= 2500<<20)
		}
	}
	if !killed || !fine {
		t.Errorf("learned history of over: the kill recorded %v, the success with its need %v; want both", killed, fine)
	}
}
