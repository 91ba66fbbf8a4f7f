package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// fuzzSeeds are manifests shaped like the ones users write.
var fuzzSeeds = []string{
	"# yaml-language-server: $schema=../schemas/task.schema.json\napiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: a # n\n  labels: {project: castle}\nspec:\n  command: [\"sh\", \"-c\", 'x']\n  items: {count: 3}\n  paused: false\n\n# controller below\nstatus:\n  phase: Running\n  conditions:\n  - type: Admitted\n    message: |-\n      two\n      lines\n",
	"status: {}\n# about spec\nspec:\n  status: keep\n  env:\n  - {name: status, value: \"status:\"}\n",
	"kind: Task\r\nstatus:\r\n  phase: X\r\n# c\r\nspec:\r\n  x: 1",
	"%YAML 1.1\n---\nspec:\n  env:\n  - {name: A, value: \"1\"}\n...\n",
	"a: |\n  x\n\nstatus: >\n  y\n\n\n# tail\nspec:\n  paused: true\n",
	"  kind: Task\n  spec:\n    x: 1\n  status:\n    phase: Done\n",
	"spec:\n  command:\n  - a\nstatus:\n- 1\n",
}

func fuzzStatus(phase, msg string) *v1alpha1.TaskStatus {
	return &v1alpha1.TaskStatus{
		Phase:      v1alpha1.Phase(strings.ToValidUTF8(phase, "?")),
		QueueSeq:   7,
		Conditions: []metav1.Condition{{Type: "Admitted", Status: metav1.ConditionFalse, Reason: "Wait", Message: strings.ToValidUTF8(msg, "?"), LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0).UTC())}},
	}
}

// checkEdit asserts the write-back properties: src[:start] and src[end:]
// survive verbatim; every top-level value but status decodes the same; the
// status decodes to want; and the edit is idempotent.
func checkEdit(t *testing.T, src, out []byte, want *v1alpha1.TaskStatus) {
	t.Helper()
	start, end, err := statusRange(src)
	if err != nil {
		t.Fatalf("statusRange: %v", err)
	}
	if !bytes.HasPrefix(out, src[:start]) || !bytes.HasSuffix(out, src[end:]) || len(out) < start+len(src)-end {
		t.Fatalf("bytes outside status changed:\nsrc %q\nout %q", src, out)
	}
	var before, after map[string]any
	if err := yamlv3.Unmarshal(src, &before); err != nil {
		t.Fatalf("decode src: %v", err)
	}
	if err := yamlv3.Unmarshal(out, &after); err != nil {
		t.Fatalf("decode out: %v\n%q", err, out)
	}
	delete(before, statusKey)
	delete(after, statusKey)
	if !equalValues(before, after) {
		t.Fatalf("values outside status changed:\n%v\n%v", before, after)
	}
	var got struct {
		Status v1alpha1.TaskStatus `json:"status"`
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode status: %v", err)
	}
	g, _ := json.Marshal(got.Status)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("status round trip:\ngot  %s\nwant %s", g, w)
	}
	if t1, err := v1alpha1.ParseManifest("f.yaml", src); err == nil {
		t2, err := v1alpha1.ParseManifest("f.yaml", out)
		if err != nil {
			t.Fatalf("parseable before, not after: %v", err)
		}
		s1, _ := json.Marshal(t1.Spec)
		s2, _ := json.Marshal(t2.Spec)
		if !bytes.Equal(s1, s2) {
			t.Fatalf("spec changed:\n%s\n%s", s1, s2)
		}
	}
	again, err := ReplaceStatus(out, want)
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("not idempotent: %v\n%q\n%q", err, out, again)
	}
}

// checkLayout asserts what the layout cache of write-back relies on: the
// status entry's range replaceStatus reports is the one statusRange finds
// in its output, and a second write through the known layout gives the
// bytes (and range) a full rewrite gives.
func checkLayout(t *testing.T, src []byte, st *v1alpha1.TaskStatus) {
	t.Helper()
	e, err := replaceStatus(src, st)
	if err != nil {
		t.Fatalf("replaceStatus: %v", err)
	}
	start, end, err := statusRange(e.out)
	if err != nil || start != e.start || end != e.end {
		t.Fatalf("reported status range [%d,%d), statusRange says [%d,%d) (%v)\n%q", e.start, e.end, start, end, err, e.out)
	}
	if got := e.userPart(); !bytes.Equal(got, userContent(e.out)) {
		t.Fatalf("user part %q, userContent %q", got, userContent(e.out))
	}
	next := *st
	next.Phase += "Next"
	next.Progress.ItemsDone++
	fast, err := replaceStatusAt(e.out, e.layout(), &next)
	if err != nil {
		t.Fatalf("replaceStatusAt: %v", err)
	}
	slow, err := replaceStatus(e.out, &next)
	if err != nil {
		t.Fatalf("replaceStatus of its own output: %v", err)
	}
	if !bytes.Equal(fast.out, slow.out) || fast.start != slow.start || fast.end != slow.end {
		t.Fatalf("known layout and full rewrite differ:\n%q [%d,%d)\n%q [%d,%d)", fast.out, fast.start, fast.end, slow.out, slow.start, slow.end)
	}
}

// TestFuzzSeedsRewritable keeps the seeds meaningful: each one is
// rewritten (not refused), and the properties hold for it.
func TestFuzzSeedsRewritable(t *testing.T) {
	for i, s := range fuzzSeeds {
		st := fuzzStatus("Pending", "two\nlines")
		out, err := ReplaceStatus([]byte(s), st)
		if err != nil {
			t.Fatalf("seed %d refused: %v", i, err)
		}
		checkEdit(t, []byte(s), out, st)
		checkLayout(t, []byte(s), st)
		if _, err := SetSpecPaused([]byte(s), true); err != nil && strings.Contains(s, "spec:\n ") {
			t.Fatalf("seed %d: SetSpecPaused refused: %v", i, err)
		}
	}
}

func FuzzReplaceStatus(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), "Running", "needs 4.1GiB\nfor batch 1")
	}
	f.Fuzz(func(t *testing.T, src []byte, phase, msg string) {
		st := fuzzStatus(phase, msg)
		if _, err := yaml.Marshal(st); err != nil {
			return // not encodable (control characters): the caller's problem
		}
		out, err := ReplaceStatus(src, st)
		if err != nil {
			if !errors.Is(err, ErrNotRewritable) {
				t.Fatalf("error does not wrap ErrNotRewritable: %v", err)
			}
			return
		}
		checkEdit(t, src, out, st)
		checkLayout(t, src, st)
	})
}

func FuzzSetSpecPaused(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, src []byte, paused bool) {
		out, err := SetSpecPaused(src, paused)
		if err != nil {
			if !errors.Is(err, ErrNotRewritable) {
				t.Fatalf("error does not wrap ErrNotRewritable: %v", err)
			}
			return
		}
		var before, after map[string]any
		if err := yamlv3.Unmarshal(src, &before); err != nil {
			t.Fatal(err)
		}
		if err := yamlv3.Unmarshal(out, &after); err != nil {
			t.Fatalf("decode out: %v\n%q", err, out)
		}
		spec, _ := after[specKey].(map[string]any)
		if spec[pausedKey] != paused {
			t.Fatalf("spec.paused = %v, want %v\n%q", spec[pausedKey], paused, out)
		}
		delete(spec, pausedKey)
		delete(before[specKey].(map[string]any), pausedKey)
		if !equalValues(before, after) {
			t.Fatalf("other values changed:\n%q\n%q", src, out)
		}
		// Only one run of bytes differs.
		p := 0
		for p < len(src) && p < len(out) && src[p] == out[p] {
			p++
		}
		s := 0
		for s < len(src)-p && s < len(out)-p && src[len(src)-1-s] == out[len(out)-1-s] {
			s++
		}
		if d := len(out) - p - s; d > 40 {
			t.Fatalf("edit touched %d bytes:\n%q\n%q", d, src, out)
		}
	})
}

// FuzzUserContentShortcut: where MayHoldStatus says no key can be
// "status", the parse finds none either (the user part is the file).
func FuzzUserContentShortcut(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		"apiVersion: v1\nkind: Task\n\"st\\x61tus\": {phase: Done}\n",
		"kind: Task\n\"\\u0073tatus\": x\n",
		"kind: Task\n!!binary c3RhdHVz: x\n",
		"kind: Task\n? sta\n  tus\n: x\n",
		"kind: Task\n? |-\n  sta\n  tus\n: x\n",
		"a: &k stat\nb: *k\n",
		"\xff\xfes\x00t\x00a\x00t\x00u\x00s\x00:\x00 \x00x\x00\n\x00",
		"{kind: Task, spec: {command: [\"true\"]}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if MayHoldStatus(src) {
			return
		}
		if got := userContentParsed(src); !bytes.Equal(got, src) {
			t.Fatalf("no word status, backslash or NUL in %q, but the parse found a status entry (user part %q)", src, got)
		}
	})
}
