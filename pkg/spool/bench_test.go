package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// benchManifest is a realistic 100-line manifest: comments, labels, env,
// files, resources, and a status block of a running task.
func benchManifest() []byte {
	var b strings.Builder
	b.WriteString("# yaml-language-server: $schema=../schemas/task.schema.json\n# Features for block A of the castle survey.\napiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: features-block-a   # default would be the file name\n  labels: {project: castle, block: a}\n  annotations:\n    owner: \"survey team\"\nspec:\n  class: features\n  command: [\"colmap\", \"feature_extractor\", \"--image_list_path\", \"$(LARDON3D_ITEMS_FILE)\"]\n  workingDir: /data/castle\n  env:\n  - {name: OMP_PROC_BIND, value: \"true\"}\n  - name: COLMAP_GPU\n    value: '0'\n  items:\n    files:\n")
	for i := 0; i < 40; i++ {
		b.WriteString("    - images/IMG_" + strings.Repeat("0", 4) + string(rune('A'+i%26)) + ".jpg\n")
	}
	b.WriteString("  dependsOn: [import-block-a]\n  resources:\n    fixed:     {memory: 30Mi, gpuMemory: 0}\n    perItem:   {memory: 2Mi,  gpuMemory: 0}\n    perThread: {memory: 90Mi}\n    batch:     {min: 1, max: 128}\n    threads: 4\n    minThreads: 1\n    ioSlots: 1\n  retries: 2\n  batchTimeout: 2h\n  paused: false\n\n# Written by the controller.\n")
	out, err := ReplaceStatus([]byte(b.String()), benchStatus())
	if err != nil {
		panic(err)
	}
	return out
}

func benchStatus() *v1alpha1.TaskStatus {
	at := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	return &v1alpha1.TaskStatus{
		Phase: v1alpha1.PhaseRunning, ObservedGeneration: 3, SpecHash: "9f2c1a", QueueSeq: 12,
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted, Message: "batch 37 of 128, 4 threads", LastTransitionTime: at},
			{Type: v1alpha1.ConditionDependenciesReady, Status: metav1.ConditionTrue, Reason: "Done", LastTransitionTime: at},
		},
		Reservation: &v1alpha1.Contract{Batch: 37, BatchRequested: 128, Threads: 4, Memory: resource.MustParse("2265Mi"), GrantedAt: at},
		Progress:    v1alpha1.Progress{ItemsDone: 370, ItemsTotal: 1200, BatchesDone: 10},
		StartTime:   &at,
		LogFile:     "/var/log/lardon3d/features-block-a.log",
	}
}

func BenchmarkWriteStatus(b *testing.B) {
	src := benchManifest()
	if n := strings.Count(string(src), "\n"); n < 95 || n > 110 {
		b.Fatalf("manifest has %d lines, want about 100", n)
	}
	st := benchStatus()
	b.Run("ReplaceStatus", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			st.Progress.ItemsDone++
			if _, err := ReplaceStatus(src, st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("KnownLayout", func(b *testing.B) {
		// The steady state: the file is the version the last write-back
		// produced, so its status entry is replaced without a parse.
		e, err := replaceStatus(src, st)
		if err != nil {
			b.Fatal(err)
		}
		l := e.layout()
		b.ReportAllocs()
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			st.Progress.ItemsDone++
			if _, err := replaceStatusAt(e.out, l, st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("File", func(b *testing.B) {
		dir := b.TempDir()
		path := filepath.Join(dir, "features-block-a.yaml")
		if err := os.WriteFile(path, src, 0o600); err != nil {
			b.Fatal(err)
		}
		sp, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			st.Progress.ItemsDone++
			if err := sp.WriteStatus(path, st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWriteStatuses is a group commit of 8 files (ns/op per group;
// per-file is ns/op / 8), to set beside BenchmarkWriteStatus/File (one
// file alone): the latency one write gains or loses by sharing its flushes.
func BenchmarkWriteStatuses(b *testing.B) {
	src := benchManifest()
	st := benchStatus()
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			sp, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			ws := make([]StatusWrite, n)
			for i := range ws {
				ws[i].Path = filepath.Join(dir, fmt.Sprintf("t%d.yaml", i))
				if err := os.WriteFile(ws[i].Path, src, 0o600); err != nil {
					b.Fatal(err)
				}
				ws[i].Status = st
			}
			b.ReportAllocs()
			for b.Loop() {
				st.Progress.ItemsDone++
				for _, err := range sp.WriteStatuses(ws) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
	}
}

// smallManifest is a trivial 10-line manifest without status: the first
// write-back into such a file costs the whole-file check, and its status
// block is bigger than the user's part.
const smallManifest = "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: t-00000\nspec:\n  command: [\"/bin/true\"]\n  items: {count: 1}\n  resources:\n    fixed: {memory: 1Mi}\n    threads: 1\n"

// BenchmarkReplaceStatusFirst is the first write-back into a small file
// (layout unknown: parse, emit, check).
func BenchmarkReplaceStatusFirst(b *testing.B) {
	src := []byte(smallManifest)
	st := benchStatus()
	b.ReportAllocs()
	for b.Loop() {
		st.Progress.ItemsDone++
		if _, err := ReplaceStatus(src, st); err != nil {
			b.Fatal(err)
		}
	}
}
