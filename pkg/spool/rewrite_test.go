package spool

import (
	"errors"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// doneStatus renders as doneBlock.
var doneStatus = &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseDone}

const doneBlock = "status:\n  phase: Done\n  progress:\n    batchesDone: 0\n    itemsDone: 0\n    itemsTotal: 0\n"

func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

func TestReplaceStatus(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{{
		name: "absent: appended at the end",
		src:  "# head\napiVersion: v1 # trailing comment\nkind: Task\n\nspec:\n  command: ['a',  \"b\"]   # quoted\n",
		want: "# head\napiVersion: v1 # trailing comment\nkind: Task\n\nspec:\n  command: ['a',  \"b\"]   # quoted\n" + doneBlock,
	}, {
		name: "absent, no trailing newline",
		src:  "kind: Task\nspec:\n  x: 1",
		want: "kind: Task\nspec:\n  x: 1\n" + doneBlock,
	}, {
		name: "last, replaced",
		src:  "kind: Task\nstatus:\n  phase: Running\n  reservation: {batch: 3}\n",
		want: "kind: Task\n" + doneBlock,
	}, {
		name: "last, no trailing newline kept without",
		src:  "kind: Task\nstatus:\n  phase: Running",
		want: "kind: Task\n" + strings.TrimSuffix(doneBlock, "\n"),
	}, {
		name: "first key",
		src:  "status:\n  phase: Running\n# about kind\nkind: Task\n",
		want: doneBlock + "# about kind\nkind: Task\n",
	}, {
		name: "middle, trailing blank lines and top-level comment belong to the next key",
		src:  "kind: Task\nstatus:\n  phase: Running\n  # inside status\n\n\n# about spec\n\nspec:\n  x: 1\n",
		want: "kind: Task\n" + doneBlock + "\n\n# about spec\n\nspec:\n  x: 1\n",
	}, {
		name: "flow style",
		src:  "kind: Task\nstatus: {}\nspec: {x: 1}\n",
		want: "kind: Task\n" + doneBlock + "spec: {x: 1}\n",
	}, {
		name: "empty status",
		src:  "kind: Task\nstatus:\nspec:\n  x: 1\n",
		want: "kind: Task\n" + doneBlock + "spec:\n  x: 1\n",
	}, {
		name: "nested status keys under spec untouched",
		src:  "spec:\n  status: mine\n  env:\n  - name: status\n    value: \"status:\"\nstatus: {phase: Running}\n",
		want: "spec:\n  status: mine\n  env:\n  - name: status\n    value: \"status:\"\n" + doneBlock,
	}, {
		name: "CRLF",
		src:  crlf("kind: Task\nstatus:\n  phase: Running\n# c\nspec:\n  x: 1\n"),
		want: crlf("kind: Task\n" + doneBlock + "# c\nspec:\n  x: 1\n"),
	}, {
		name: "compact sequence value and comment on the key line",
		src:  "kind: Task\nstatus: # old\n- a\n- b\n...\n",
		want: "kind: Task\n" + doneBlock + "...\n",
	}, {
		name: "absent, document end marker",
		src:  "---\nkind: Task\n# tail comment\n...\n",
		want: "---\nkind: Task\n# tail comment\n" + doneBlock + "...\n",
	}, {
		name: "block scalar in status",
		src:  "kind: Task\nstatus: |\n  text\n\n  more\nspec: {}\n",
		want: "kind: Task\n" + doneBlock + "spec: {}\n",
	}, {
		name: "byte order mark",
		src:  "\ufeffstatus: old\nkind: Task\n",
		want: "\ufeff" + doneBlock + "kind: Task\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReplaceStatus([]byte(tt.src), doneStatus)
			if err != nil {
				t.Fatalf("ReplaceStatus: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tt.want)
			}
			again, err := ReplaceStatus(got, doneStatus)
			if err != nil || string(again) != string(got) {
				t.Fatalf("not idempotent: %q, %v", again, err)
			}
		})
	}
}

func TestReplaceStatusRemove(t *testing.T) {
	got, err := ReplaceStatus([]byte("kind: Task\nstatus:\n  phase: X\n# c\nspec: {}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kind: Task\n# c\nspec: {}\n"; string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestReplaceStatusRefuses(t *testing.T) {
	for name, src := range map[string]string{
		"empty":              "",
		"comment only":       "# nothing\n",
		"scalar":             "just text\n",
		"sequence":           "- a\n- b\n",
		"flow top level":     "{kind: Task, status: {}}\n",
		"broken yaml":        "kind: Task\nspec: [a,\n",
		"two documents":      "kind: Task\n---\nkind: Task\n",
		"duplicate status":   "status: {}\nkind: Task\nstatus: {}\n",
		"lone CR":            "kind: Task\rstatus: {}\n",
		"alias into status":  "status: &s {a: 1}\nspec: *s\n",
		"not utf-8":          "kind: \xff\n",
		"complex status key": "? status\n: x\nkind: Task\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ReplaceStatus([]byte(src), doneStatus)
			if !errors.Is(err, ErrNotRewritable) {
				t.Fatalf("got %q, %v; want ErrNotRewritable", got, err)
			}
		})
	}
}

func TestSetSpecPaused(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		paused bool
		want   string
	}{{
		name: "replace in place, comment kept", paused: true,
		src:  "spec:\n  paused: false   # pause me\n  x: 1\nstatus:\n  phase: Running\n",
		want: "spec:\n  paused: true   # pause me\n  x: 1\nstatus:\n  phase: Running\n",
	}, {
		name: "insert as last entry of spec", paused: true,
		src:  "spec:\n    command: [a]\n    # last\n\n# top\nstatus: {}\n",
		want: "spec:\n    command: [a]\n    # last\n    paused: true\n\n# top\nstatus: {}\n",
	}, {
		name: "insert at end of file without newline", paused: false,
		src:  "kind: Task\nspec:\n  x: 1",
		want: "kind: Task\nspec:\n  x: 1\n  paused: false",
	}, {
		name: "CRLF", paused: true,
		src:  crlf("spec:\n  x: 1\nstatus: {}\n"),
		want: crlf("spec:\n  x: 1\n  paused: true\nstatus: {}\n"),
	}, {
		name: "nested paused elsewhere untouched", paused: true,
		src:  "metadata:\n  labels: {paused: \"no\"}\nspec:\n  env:\n  - name: paused\n    value: x\n  paused: no\n",
		want: "metadata:\n  labels: {paused: \"no\"}\nspec:\n  env:\n  - name: paused\n    value: x\n  paused: true\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SetSpecPaused([]byte(tt.src), tt.paused)
			if err != nil {
				t.Fatalf("SetSpecPaused: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
	for name, src := range map[string]string{
		"no spec":     "kind: Task\n",
		"flow spec":   "spec: {x: 1}\n",
		"quoted":      "spec:\n  paused: \"true\"\n",
		"broken yaml": "spec: [\n",
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			if got, err := SetSpecPaused([]byte(src), true); !errors.Is(err, ErrNotRewritable) {
				t.Fatalf("got %q, %v; want ErrNotRewritable", got, err)
			}
		})
	}
}

func TestSetSpecRetryToken(t *testing.T) {
	src := "spec:\n  command: [a]   # keep\n  paused: true\nstatus:\n  phase: Failed\n"
	got, err := SetSpecRetryToken([]byte(src), "retry-20261201T103705.123Z")
	want := "spec:\n  command: [a]   # keep\n  paused: true\n  retryToken: retry-20261201T103705.123Z\nstatus:\n  phase: Failed\n"
	if err != nil || string(got) != want {
		t.Fatalf("insert: %v\n%q\nwant\n%q", err, got, want)
	}
	again, err := SetSpecRetryToken(got, "retry-2")
	if err != nil || string(again) != strings.Replace(want, "retry-20261201T103705.123Z", "retry-2", 1) {
		t.Fatalf("replace: %v\n%q", err, again)
	}
	for _, bad := range []string{"", "1", "true", "a b", "x: y", strings.Repeat("a", 64)} {
		if _, err := SetSpecRetryToken([]byte(src), bad); err == nil {
			t.Errorf("token %q accepted", bad)
		}
		if _, err := SetSpecRestartToken([]byte(src), bad); err == nil {
			t.Errorf("restart token %q accepted", bad)
		}
	}
	restart, err := SetSpecRestartToken(got, "restart-1")
	if err != nil || string(restart) != strings.Replace(want, "\nstatus:", "\n  restartToken: restart-1\nstatus:", 1) {
		t.Fatalf("restart token: %v\n%q", err, restart)
	}
}
