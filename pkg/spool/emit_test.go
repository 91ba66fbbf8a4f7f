package spool

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/yaml"
	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// genString draws strings that exercise the scalar rules: words YAML 1.1
// reads as booleans or null, numbers, timestamps, indicators, quotes,
// control characters, line breaks and invalid UTF-8.
func genString(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"", "y", "No", "ON", "off", "True", "null", "~", "0x1f", "1e3", ".inf", "-", "- a", "a: b", "a #b", "#c", "'q'", `"d"`, "2026-11-29", "1:20", "<<", "&a", "*a", "!t", "|", ">", "%x", "@x", "`x", "{}", "[]", "a\nb", "\t", " lead", "trail ", "é", "\u2028", "\ufeff", "\x7f", "\x85", "\xff\xfe", "Running", "features-block-a", "/var/log/x.log", "9f2c1a", "123e45", "1e3", "0e0000", "0b0000", "0b1010ff", "batch 37 of 128, 4 threads", "a  b", "a ", "a, b", "a: b"}),
		rapid.StringMatching(`[0-9a-f]{5,12}`),
		rapid.StringMatching(`[A-Za-z][A-Za-z0-9 .,_/()+=;:#-]{0,12}`),
		rapid.String(),
		rapid.StringMatching(`[A-Za-z][A-Za-z0-9._/-]{0,12}`),
	).Draw(t, label)
}

func genTime(t *rapid.T, label string) metav1.Time {
	if rapid.Bool().Draw(t, label+"Zero") {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(rapid.Int64Range(0, 4102444800).Draw(t, label), 0).UTC())
}

func genTimePtr(t *rapid.T, label string) *metav1.Time {
	if rapid.Bool().Draw(t, label+"Nil") {
		return nil
	}
	tm := metav1.NewTime(time.Unix(rapid.Int64Range(0, 4102444800).Draw(t, label), 0).UTC())
	return &tm
}

func genQuantity(t *rapid.T, label string) *resource.Quantity {
	if rapid.Bool().Draw(t, label+"Nil") {
		return nil
	}
	// Parsed, as the controller's quantities are: a parsed quantity keeps
	// its canonical form through a round trip (NewQuantity(43000, BinarySI)
	// would come back as 43k, with any encoder).
	q := resource.MustParse(resource.NewQuantity(rapid.Int64Range(0, 1<<40).Draw(t, label), resource.BinarySI).String())
	return &q
}

func genStatus(t *rapid.T) *v1alpha1.TaskStatus {
	st := &v1alpha1.TaskStatus{
		Phase:              v1alpha1.Phase(genString(t, "phase")),
		ObservedGeneration: rapid.Int64().Draw(t, "gen"),
		SpecHash:           genString(t, "specHash"),
		QueueSeq:           rapid.Int64().Draw(t, "seq"),
		Progress: v1alpha1.Progress{
			ItemsDone: rapid.Int64().Draw(t, "done"), ItemsTotal: rapid.Int64().Draw(t, "total"),
			BatchesDone: rapid.Int64().Draw(t, "batches"), InputsHash: genString(t, "inputs"),
		},
		StartTime:      genTimePtr(t, "start"),
		CompletionTime: genTimePtr(t, "completion"),
		LogFile:        genString(t, "log"),
	}
	for i, n := 0, rapid.IntRange(0, 3).Draw(t, "conditions"); i < n; i++ {
		st.Conditions = append(st.Conditions, metav1.Condition{
			Type: genString(t, "type"), Status: metav1.ConditionStatus(genString(t, "status")),
			ObservedGeneration: rapid.Int64().Draw(t, "cgen"), LastTransitionTime: genTime(t, "ltt"),
			Reason: genString(t, "reason"), Message: genString(t, "message"),
		})
	}
	if rapid.Bool().Draw(t, "reservation") {
		st.Reservation = &v1alpha1.Contract{
			Batch: rapid.Int64().Draw(t, "batch"), BatchRequested: rapid.Int64().Draw(t, "requested"),
			Threads: rapid.Int32().Draw(t, "threads"), Memory: resource.MustParse(resource.NewQuantity(rapid.Int64Range(0, 1<<40).Draw(t, "mem"), resource.BinarySI).String()),
			GPUMemory: genQuantity(t, "gpu"), IOSlots: rapid.Int32().Draw(t, "io"), GPUSlots: rapid.Int32().Draw(t, "gpuSlots"),
			Scratch: genQuantity(t, "scratch"), ScratchDir: genString(t, "scratchDir"),
			Generation: rapid.Uint64().Draw(t, "generation"), GrantedAt: genTime(t, "granted"),
		}
	}
	if rapid.Bool().Draw(t, "lastBatch") {
		b := &v1alpha1.BatchRecord{
			Index: rapid.Int64().Draw(t, "index"), Start: rapid.Int64().Draw(t, "bstart"), Size: rapid.Int64().Draw(t, "size"),
			Threads: rapid.Int32().Draw(t, "bthreads"), StartTime: genTimePtr(t, "bst"), EndTime: genTimePtr(t, "bet"),
			Reason: genString(t, "breason"), PeakMemory: genQuantity(t, "peak"), Attempt: rapid.Int32().Draw(t, "attempt"),
		}
		if rapid.Bool().Draw(t, "exit") {
			c := rapid.Int32().Draw(t, "code")
			b.ExitCode = &c
		}
		st.LastBatch = b
	}
	if rapid.Bool().Draw(t, "pg") {
		st.ProcessGroup = &v1alpha1.ProcessGroupRef{PGID: rapid.Int().Draw(t, "pgid"), StartTicks: rapid.Uint64().Draw(t, "ticks")}
	}
	return st
}

// TestEmitStatusRoundTrip: the emitted block, read back the way the
// controller reads a manifest (sigs.k8s.io/yaml into the Go type), is the
// same status (compared as JSON); yaml.v3 reads it as the same values; it
// has the shape the layout cache relies on (every line below "status:"
// indented, none blank or a comment); and it is what sigs.k8s.io/yaml's
// encoder gives, up to the quoting of scalars.
func TestEmitStatusRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := genStatus(t)
		pad := rapid.SampledFrom([]string{"", "  "}).Draw(t, "pad")
		nl := rapid.SampledFrom([]string{"\n", "\r\n"}).Draw(t, "nl")
		block := appendStatusBlock(nil, pad, nl, st)
		var got struct {
			Status v1alpha1.TaskStatus `json:"status"`
		}
		if err := yaml.UnmarshalStrict(block, &got); err != nil {
			t.Fatalf("read back: %v\n%s", err, block)
		}
		g, _ := json.Marshal(got.Status)
		w, _ := json.Marshal(st)
		gv, _ := decodeJSON(g)
		wv, _ := decodeJSON(w)
		if !equalValues(gv, wv) {
			t.Fatalf("round trip:\ngot  %s\nwant %s\n%s", g, w, block)
		}
		if err := checkBlock(block, st); err != nil {
			t.Fatalf("self-check refuses a correct block: %v", err)
		}
		var v3 map[string]any
		if err := yamlv3.Unmarshal(block, &v3); err != nil {
			t.Fatalf("yaml.v3: %v\n%s", err, block)
		}
		lines := strings.Split(strings.TrimSuffix(string(block), nl), nl)
		if lines[0] != pad+"status:" {
			t.Fatalf("first line %q", lines[0])
		}
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, pad+"  ") || strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
				t.Fatalf("line %q breaks the block's shape\n%s", l, block)
			}
		}
		// Same keys and nesting as the encoder it replaces.
		old, err := yaml.Marshal(map[string]any{"status": st})
		if err != nil {
			return // not encodable by the old encoder either
		}
		var back struct {
			Status v1alpha1.TaskStatus `json:"status"`
		}
		if yaml.Unmarshal(old, &back) != nil {
			return
		}
		if b, _ := json.Marshal(back.Status); !bytes.Equal(b, g) {
			return // the old encoder loses this one (it turned U+0085 into a space)
		}
		var o, n map[string]any
		if err := yamlv3.Unmarshal(old, &o); err == nil {
			if err := yamlv3.Unmarshal(bytes.ReplaceAll(block, []byte("\r\n"), []byte("\n")), &n); err != nil || !equalValues(o, n) {
				t.Fatalf("differs from sigs.k8s.io/yaml's encoding:\n%s\n%s", old, block)
			}
		}
	})
}

// TestEmitMatchesOldEncoder: for a typical status the bytes are those the
// YAML -> JSON -> YAML encoder wrote, except for the quoting of a path and
// a quantity, so existing manifests keep their look.
func TestEmitMatchesOldEncoder(t *testing.T) {
	st := benchStatus()
	y, err := yaml.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	want.WriteString("status:\n")
	for _, l := range strings.SplitAfter(string(y), "\n") {
		if l != "" {
			want.WriteString("  " + l)
		}
	}
	w := strings.NewReplacer(`logFile: /var/log/lardon3d/features-block-a.log`, `logFile: "/var/log/lardon3d/features-block-a.log"`,
		`memory: 2265Mi`, `memory: "2265Mi"`).Replace(want.String())
	if got := string(emitStatus(st)); got != w {
		t.Fatalf("got\n%s\nwant\n%s", got, w)
	}
}
