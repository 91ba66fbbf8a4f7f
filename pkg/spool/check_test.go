package spool

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// replaceStatusFullCheck is replaceStatus as it was before the placeholder
// check: the edit checked by decoding the whole edited file.
func replaceStatusFullCheck(src []byte, status *v1alpha1.TaskStatus) (edited, error) {
	return replaceStatusChecked(src, status, true)
}

// shapedStatus is a status whose block ends in each of the ways the
// emitter can end one, chosen by the bits of shape: progress (depth 2,
// plain), reservation (depth 2, plain), queueSeq (depth 1, plain), specHash
// (depth 1, plain or double-quoted), startTime (depth 1, double-quoted).
func shapedStatus(phase, msg string, shape byte) *v1alpha1.TaskStatus {
	st := fuzzStatus(phase, msg)
	st.QueueSeq = 0
	at := metav1.NewTime(time.Unix(1700000000, 0).UTC())
	if shape&1 != 0 {
		st.QueueSeq = 7
	}
	if shape&2 != 0 {
		st.Reservation = &v1alpha1.Contract{Batch: 3, BatchRequested: 8, Threads: 2, Memory: resource.MustParse("1Gi"), GrantedAt: at}
	}
	if shape&4 != 0 {
		st.SpecHash = "9f2c1a"
	}
	if shape&8 != 0 {
		st.SpecHash = strings.ToValidUTF8(msg, "?") // quoted unless plain-safe
	}
	if shape&16 != 0 {
		st.StartTime = &at
	}
	if shape&32 != 0 {
		st.LogFile = strings.ToValidUTF8(phase, "?")
	}
	if shape&64 != 0 {
		st.Conditions = nil
	}
	return st
}

// placeholderSeeds are the layouts the placeholder argument must survive.
var placeholderSeeds = []string{
	// status last, trailing comments and blank lines
	"kind: Task\nspec:\n  x: 1\nstatus:\n  phase: X\n# trailing\n\n# more\n",
	"kind: Task\nspec:\n  x: 1\nstatus:\n  phase: X\n  # deeper comment\n\n",
	// indented root mapping
	"  kind: Task\n  status:\n    phase: X\n  spec:\n    x: 1\n",
	"  kind: Task\n  spec:\n    x: 1\n",
	// CRLF, with and without a final line ending
	"kind: Task\r\nspec:\r\n  x: 1\r\nstatus:\r\n  phase: X\r\n",
	"kind: Task\r\nspec:\r\n  x: 1\r\n",
	"kind: Task\r\nstatus:\r\n  phase: X",
	// no final newline
	"kind: Task\nstatus:\n  phase: X",
	"kind: Task\nspec:\n  x: 1",
	"kind: Task\nspec: x",
	// lines after the entry: deeper, blank with tabs (the one-line
	// placeholder's counterexample), comments at odd indentations
	"status:\n  phase: X\n    deeper: 1\nspec: 1\n",
	"status: x\n   \t\nspec: 1\n",
	"status: x\n    \t\nspec: 1\n",
	"status: x\n     \t\nspec: 1\n",
	"status: x\n  \t\nspec: 1\n",
	"status: x\n\t\nspec: 1\n",
	"status: x\n  \t  \n\nspec: 1\n",
	"status: x\n  # c\n   \t\nspec: 1\n",
	" status: x\n  \t\n spec: 1\n",
	"status: x\n \t# c\nspec: 1\n",
	// flow-style status, status inside a flow value
	"spec: {x: 1}\nstatus: {phase: X, conditions: [{type: A}]}\nz: 1\n",
	"spec: {status: x}\nstatus: [1, 2]\n",
	// aliases into the old status, anchors around it
	"status: &s\n  phase: X\nspec:\n  copy: *s\n",
	"status: &p X\nspec: *p\n",
	"a: &a 1\nstatus: x\nb: *a\n",
	"a: &a {phase: X}\nstatus: *a\n",
	// document markers
	"---\nspec: 1\nstatus: x\n...\n",
	"--- \nspec: 1\n...\n# end\n",
	"spec: 1\n---\n",
	"%YAML 1.1\n---\nspec: 1\nstatus:\n  phase: X\n...\n",
	"spec: 1\n...",
	// BOM
	"\ufeffspec: 1\nstatus: x\n",
	"\ufeffstatus: x\nspec: 1\n",
	"\ufeffspec: 1\n",
	// tabs
	"spec: 1 \t# c\nstatus:\t x\n",
	"status: x\t\nspec: 1\n",
	"spec:\n  x: 1\t\n",
	// keys that are not plain strings
	"status: x\n!!binary c3RhdHVz: {x: x}\n",
	"!!binary c3RhdHVz: {x: x}\nspec: 1\n",
	"<<: {status: {x: x}}\nspec: 1\n",
	"spec: 1\n<<: {status: 1}\nstatus: y\n",
	"\"status\": x\nspec: 1\n",
	"1: x\nspec: 1\n",
	"? complex\n: x\nspec: 1\n",
	// what precedes an inserted block
	"spec: |\n  a\n",
	"spec: |\n",
	"spec: |+\n  a\n\n\n",
	"  spec: |1\n   a\n",
	"spec: >-\n  a\n\n",
	"spec: a\n  b\n",
	"spec: \"a\n  b\"\n",
	"spec:\n- a\n- b\n",
	"spec:\n  - a\n  -\n",
	"spec:\n  x:\n",
	"spec: # c\n  x: 1 # d\n# e\n",
	// the example manifest
	smallManifest,
}

// TestPlaceholderTaken: for every kind of block end and the usual
// layouts, the placeholder check is the one made (else the comparison of
// FuzzPlaceholderCheck would compare the full check with itself), and it
// agrees with the full check.
func TestPlaceholderTaken(t *testing.T) {
	srcs := append([]string{smallManifest, string(benchManifest())}, fuzzSeeds...)
	for i, s := range srcs {
		d, err := parseDoc([]byte(s))
		if err != nil {
			t.Fatalf("src %d: %v", i, err)
		}
		for shape := 0; shape < 128; shape++ {
			st := shapedStatus("Running", "needs 4.1GiB\nfor batch 1", byte(shape))
			block := d.statusBlock(st)
			if _, _, ok := placeholder(d, block, false); !ok {
				t.Fatalf("src %d shape %d: no placeholder for\n%s", i, shape, block)
			}
			if _, _, ok := placeholder(d, bytes.TrimSuffix(block, []byte(d.nl)), true); !ok {
				t.Fatalf("src %d shape %d: no placeholder for the trimmed block", i, shape)
			}
			fast, err1 := replaceStatus([]byte(s), st)
			full, err2 := replaceStatusFullCheck([]byte(s), st)
			if err1 != nil || err2 != nil || !bytes.Equal(fast.out, full.out) {
				t.Fatalf("src %d shape %d: placeholder check %v, full check %v", i, shape, err1, err2)
			}
		}
	}
}

// TestPlaceholderShape: the placeholder mirrors how the block ends (depth
// of the last line, style of its scalar, line ending), and its value is
// what yaml.v3 reads.
func TestPlaceholderShape(t *testing.T) {
	for _, tc := range []struct {
		src   string
		shape byte
		want  string
	}{
		{"a: 1\n", 0, "status:\n  p:\n    x: x\n"},                 // ends in progress: depth 2, plain
		{"a: 1\n", 1, "status:\n  x: x\n"},                         // queueSeq: depth 1, plain
		{"a: 1\n", 16, "status:\n  x: \"x\"\n"},                    // startTime: depth 1, quoted
		{"  a: 1\r\n", 2, "  status:\r\n    p:\r\n      x: x\r\n"}, // reservation, indented root, CRLF
	} {
		d, err := parseDoc([]byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		st := shapedStatus("Running", "m", tc.shape)
		ph, value, ok := placeholder(d, d.statusBlock(st), false)
		if !ok || string(ph) != tc.want {
			t.Errorf("%q shape %d: placeholder %q (%v), want %q", tc.src, tc.shape, ph, ok, tc.want)
			continue
		}
		var v3 map[string]any
		if err := yamlv3.Unmarshal(ph, &v3); err != nil || !equalValues(v3[statusKey], value) {
			t.Errorf("%q: placeholder value %v, yaml.v3 reads %v (%v)", tc.src, value, v3[statusKey], err)
		}
	}
	// Not of the emitter's shape: no placeholder, the full check is made.
	d, _ := parseDoc([]byte("a: 1\n"))
	for _, block := range []string{
		"status: {}\n",
		"status:\n",
		"status:\n  x: 1\nz: 2\n",
		"status:\n  x: 1\n\n",
		"status:\n  x: 1\n  - y\n",
		"status:\n   x: 1\n",
		"status:\n  x: &a 1\n",
		"status:\n  x: [1]\n",
		"status:\n  x: 'a'\n",
		"status:\n  x: 1",
	} {
		if ph, _, ok := placeholder(d, []byte(block), false); ok {
			t.Errorf("placeholder %q for %q", ph, block)
		}
	}
	for _, src := range []string{"!!binary c3RhdHVz: 1\n", "<<: {a: 1}\nb: 1\n", "1: a\n", "[a]: 1\nb: 2\n"} {
		d, err := parseDoc([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if ph, _, ok := placeholder(d, d.statusBlock(shapedStatus("R", "m", 0)), false); ok {
			t.Errorf("%q: placeholder %q for a file with a key that is not a plain string", src, ph)
		}
	}
}

// TestOneLinePlaceholderIsNotEnough keeps the comment of placeholder true:
// after a block ending at depth 2, a blank line of three spaces and a tab
// is refused by both parsers, and taken after a one-line placeholder; the
// placeholder of check.go refuses it, as the full check does.
func TestOneLinePlaceholderIsNotEnough(t *testing.T) {
	src := []byte("status: x\n   \t\nspec: 1\n")
	st := shapedStatus("Running", "m", 64) // ends with progress.itemsTotal
	if _, err := replaceStatusFullCheck(src, st); !errors.Is(err, ErrNotRewritable) {
		t.Fatalf("full check: %v, want refused", err)
	}
	if _, err := replaceStatus(src, st); !errors.Is(err, ErrNotRewritable) {
		t.Fatalf("placeholder check: %v, want refused", err)
	}
	d, err := parseDoc(src)
	if err != nil {
		t.Fatal(err)
	}
	oneLine := splice(src, 0, len("status: x\n"), nil, []byte("status:\n  phase: Pending\n"))
	if err := verify(d.root, oneLine, func(m map[string]any) error {
		m[statusKey] = map[string]any{"phase": "Pending"}
		return nil
	}); err != nil {
		t.Fatalf("the one-line placeholder is refused too (%v): the comment's example is wrong", err)
	}
}

// comparePlaceholder asserts that the placeholder check accepts src
// exactly when the full check does, with the same output.
func comparePlaceholder(t *testing.T, src []byte, st *v1alpha1.TaskStatus) {
	t.Helper()
	fast, err1 := replaceStatus(src, st)
	full, err2 := replaceStatusFullCheck(src, st)
	if (err1 == nil) != (err2 == nil) {
		t.Fatalf("placeholder check: %v\nfull check: %v\nsrc %q\nblock %q", err1, err2, src, emitStatus(st))
	}
	if err1 != nil {
		if !errors.Is(err1, ErrNotRewritable) {
			t.Fatalf("error does not wrap ErrNotRewritable: %v", err1)
		}
		return
	}
	if !bytes.Equal(fast.out, full.out) || fast.start != full.start || fast.end != full.end {
		t.Fatalf("outputs differ:\n%q [%d,%d)\n%q [%d,%d)", fast.out, fast.start, fast.end, full.out, full.start, full.end)
	}
}

func TestPlaceholderSeeds(t *testing.T) {
	for i, s := range append(append([]string{}, fuzzSeeds...), placeholderSeeds...) {
		for shape := 0; shape < 128; shape++ {
			t.Run(fmt.Sprintf("%d/%d", i, shape), func(t *testing.T) {
				comparePlaceholder(t, []byte(s), shapedStatus("Running", "needs 4.1GiB\nfor batch 1", byte(shape)))
			})
		}
	}
}

// FuzzPlaceholderCheck: for any file and any status, the placeholder check
// accepts exactly what the full check accepts, with identical output.
func FuzzPlaceholderCheck(f *testing.F) {
	for _, s := range append(append([]string{}, fuzzSeeds...), placeholderSeeds...) {
		for _, shape := range []byte{0, 1, 2, 16, 8, 64} {
			f.Add([]byte(s), "Running", "needs 4.1GiB\nfor batch 1", shape)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, phase, msg string, shape byte) {
		st := shapedStatus(phase, msg, shape)
		if _, err := yaml.Marshal(st); err != nil {
			return // not encodable (control characters): the caller's problem
		}
		comparePlaceholder(t, src, st)
	})
}

// TestPlaceholderAliasLimit: the one known difference between the checks
// (see placeholder) is in the safe direction. A file whose decoding is
// nearly all alias expansion is refused by the parsers' limit against
// alias bombs once expansions pass 99 % of the decoded nodes; the status
// block's nodes count, so as the padding grows the full check starts
// taking the file a little before the placeholder check does, and the
// placeholder check never takes one the full check refuses.
func TestPlaceholderAliasLimit(t *testing.T) {
	st := shapedStatus("Running", "m", 0)
	differ := 0
	for pad := 68; pad <= 82; pad++ {
		var b strings.Builder
		b.WriteString("status: [" + strings.Repeat("1, ", 10) + "1]\n")
		b.WriteString("p: [" + strings.Repeat("1, ", pad) + "1]\n")
		b.WriteString("a: &a [" + strings.Repeat("x, ", 9) + "x]\n")
		b.WriteString("c: &c [" + strings.Repeat("*a, ", 9) + "*a]\n")
		b.WriteString("e: &e [" + strings.Repeat("*c, ", 9) + "*c]\n")
		b.WriteString("b: [" + strings.Repeat("*e, ", 9) + "*e]\n")
		src := []byte(b.String())
		_, fast := replaceStatus(src, st)
		_, full := replaceStatusFullCheck(src, st)
		switch {
		case fast == nil && full != nil:
			t.Fatalf("pad %d: the placeholder check takes a file the full check refuses: %v", pad, full)
		case fast != nil && full == nil:
			if !strings.Contains(fast.Error(), "aliasing") {
				t.Fatalf("pad %d: only the full check takes the file, not for the alias limit: %v", pad, fast)
			}
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("no file at the alias limit that only the full check takes: the comment of placeholder is out of date")
	}
}

// TestCheckBlockRefuses: the emitter's self-check takes the block emitted
// for the status and refuses every block that reads as something else.
func TestCheckBlockRefuses(t *testing.T) {
	st := shapedStatus("Running", "m", 1|16)
	block := string(emitStatus(st))
	if err := checkBlock([]byte(block), st); err != nil {
		t.Fatalf("the emitted block is refused: %v\n%s", err, block)
	}
	for name, bad := range map[string]string{
		"another value":   strings.Replace(block, "phase: Running", "phase: Done", 1),
		"a number quoted": strings.Replace(block, "queueSeq: 7", `queueSeq: "7"`, 1),
		"a field missing": strings.Replace(block, "  queueSeq: 7\n", "", 1),
		"a field more":    strings.Replace(block, "  queueSeq: 7\n", "  queueSeq: 7\n  extra: 1\n", 1),
		"another entry":   block + "other: 1\n",
		"key in capitals": "Status:" + strings.TrimPrefix(block, "status:"),
		"null status":     "status: null\n",
		"not YAML":        block + "  - [\n",
	} {
		if err := checkBlock([]byte(bad), st); !errors.Is(err, ErrNotRewritable) {
			t.Errorf("%s: %v, want refused\n%s", name, err, bad)
		}
	}
}
