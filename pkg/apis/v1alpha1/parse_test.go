package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const validManifest = `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  labels: {project: castle}
spec:
  class: features
  command: ["colmap", "feature_extractor", "--image_list_path", "$(LARDON3D_ITEMS_FILE)"]
  workingDir: /data/castle
  env: [{name: OMP_PROC_BIND, value: "true"}]
  items:
    glob: "images/*.jpg"
  dependsOn: [import-block-a]
  resources:
    fixed:     {memory: 30Mi, gpuMemory: 0}
    perItem:   {memory: 2Mi,  gpuMemory: 0}
    perThread: {memory: 90Mi}
    batch:     {min: 1, max: 128}
    threads: 4
    minThreads: 1
    ioSlots: 1
    gpuSlots: 0
    scratch: 0
  retries: 2
  batchTimeout: 2h
  paused: false
`

// controllerStatus is a status block as the controller writes it.
const controllerStatus = `status:
  phase: Running
  observedGeneration: 3
  specHash: 0123456789abcdef
  queueSeq: 7
  reservation: {batch: 37, batchRequested: 128, threads: 4, memory: 2265Mi, gpuMemory: "0", ioSlots: 1, generation: 2, grantedAt: "2026-11-29T18:00:00Z"}
  progress: {itemsDone: 370, itemsTotal: 1200, batchesDone: 10}
  lastBatch: {index: 10, start: 370, size: 37, threads: 4, startTime: "2026-11-29T18:00:01Z", exitCode: 0, peakMemory: 1900Mi, attempt: 1}
  processGroup: {pgid: 4242, startTicks: 123456789}
  startTime: 2026-11-29T17:00:00Z
  logFile: /var/log/lardon3d/features-block-a.log
  conditions:
    - type: Admitted
      status: "False"
      reason: WaitingForMemory
      message: needs 4.1GiB for batch 1, 2.3GiB free after 2 reservations
      lastTransitionTime: "2026-11-29T18:00:00Z"
`

func mustParse(t *testing.T, name, data string) *Task {
	t.Helper()
	task, err := ParseManifest(name, []byte(data))
	if err != nil {
		t.Fatalf("ParseManifest(%s): %v", name, err)
	}
	return task
}

// parseErrors parses data and returns its ErrorList, failing otherwise.
func parseErrors(t *testing.T, data string) (*Task, ErrorList) {
	t.Helper()
	task, err := ParseManifest("t.yaml", []byte(data))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("ParseManifest: got %T %v, want an ErrorList", err, err)
	}
	if task == nil {
		t.Fatal("ParseManifest returned a nil task with an ErrorList")
	}
	return task, list
}

func TestParseValidAndDefaults(t *testing.T) {
	task := mustParse(t, "/spool/features-block-a.yaml", validManifest)
	if task.Metadata.Name != "features-block-a" {
		t.Errorf("name %q, want it from the file name", task.Metadata.Name)
	}
	if got := task.Spec.Resources.PerThread.Memory.String(); got != "90Mi" {
		t.Errorf("perThread.memory %s", got)
	}
	if task.Spec.BatchTimeout.Duration.String() != "2h0m0s" || task.Spec.Resources.Batch.Max != 128 {
		t.Errorf("batchTimeout %v, batch.max %d", task.Spec.BatchTimeout, task.Spec.Resources.Batch.Max)
	}

	min := mustParse(t, "x.yml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 12}\n")
	if min.Spec.Command[0] != "true" {
		t.Errorf("command %q", min.Spec.Command)
	}
}

func TestParseDefaults(t *testing.T) {
	head := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n"
	for _, tc := range []struct {
		file, items string
		wantName    string
		wantMax     int64
	}{
		{"/spool/a.yaml", "  items: {count: 12}\n", "a", 12},
		{"b.yml", "  items: {files: [x, y, z]}\n", "b", 3},
		{"c.d.yaml", "  items: {glob: '*.jpg'}\n", "c.d", 0},
	} {
		task := mustParse(t, tc.file, head+tc.items)
		r := task.Spec.Resources
		if task.Metadata.Name != tc.wantName || task.Spec.Class != ClassCustom || r.Batch.Min != 1 || r.Batch.Max != tc.wantMax || r.Threads != 1 || r.MinThreads != 1 {
			t.Errorf("%s: name %q class %q batch %+v threads %d/%d", tc.file, task.Metadata.Name, task.Spec.Class, r.Batch, r.Threads, r.MinThreads)
		}
		again := *task
		SetDefaults(&again, "other.yaml")
		if SpecHash(again.Spec) != SpecHash(task.Spec) || again.Metadata.Name != task.Metadata.Name {
			t.Errorf("%s: SetDefaults is not idempotent", tc.file)
		}
	}
}

func TestParseExplicitZeroIsNotDefaulted(t *testing.T) {
	data := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n  items: {count: 4}\n  resources:\n    batch: {min: 1, max: 0}\n    threads: 0\n"
	_, list := parseErrors(t, data)
	want := "line 7: spec.resources.batch.max: must be >= batch.min (1), got 0; line 8: spec.resources.threads: must be >= 1, got 0"
	if list.Error() != want {
		t.Errorf("got  %s\nwant %s", list.Error(), want)
	}
}

func TestParseSchemaErrorsWithLines(t *testing.T) {
	head := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n  items: {count: 4}\n"
	tests := []struct {
		name, body string
		want       string // the whole ErrorList
		rule       string
	}{
		{"unknown field", "  resources:\n    perltem: {memory: 2Mi}\n", "line 7: spec.resources.perltem: unknown field, did you mean perItem?", RuleUnknownField},
		{"unknown top field", "statu: {}\n", "line 6: statu: unknown field, did you mean status?", RuleUnknownField},
		{"field names are case sensitive", "  Paused: true\n", "line 6: spec.Paused: unknown field, did you mean paused?", RuleUnknownField},
		{"unknown, nothing close", "  urgency: 3\n", "line 6: spec.urgency: unknown field", RuleUnknownField},
		{"priority out of range", "  priority: 2000000000\n", "line 6: spec.priority: must be an integer from -1000000000 to 1000000000 or the name of a priority class, got 2000000000", RuleType},
		{"priority not a name", "  priority: High_1\n", `line 6: spec.priority: must be an integer from -1000000000 to 1000000000 or the name of a priority class (a lower case name of at most 63 characters), got "High_1"`, RuleFormat},
		{"priority a list", "  priority: [1]\n", "line 6: spec.priority: must be an integer from -1000000000 to 1000000000 or the name of a priority class, got a list", RuleType},
		{"duplicate key", "  retries: 1\n  retries: 2\n", "line 7: spec.retries: duplicate key, first written at line 6", RuleDuplicateKey},
		{"duplicate label", "metadata:\n  labels:\n    a: x\n    a: y\n", "line 9: metadata.labels[a]: duplicate key, first written at line 8", RuleDuplicateKey},
		{"string for list", "  dependsOn: import\n", `line 6: spec.dependsOn: must be a list of strings, got "import"`, RuleType},
		{"number for string", "  workingDir: 12\n", `line 6: spec.workingDir: must be a string (quote values such as "true" or "1"), got 12`, RuleType},
		{"yes is not a boolean", "  paused: yes\n", `line 6: spec.paused: must be a boolean (true or false), got "yes"`, RuleType},
		{"string for integer", "  retries: two\n", `line 6: spec.retries: must be an integer of 32 bits, got "two"`, RuleType},
		{"int32 overflow", "  retries: 4294967296\n", `line 6: spec.retries: must be an integer of 32 bits, got 4294967296`, RuleType},
		{"float for integer", "  retries: 1.5\n", `line 6: spec.retries: must be an integer of 32 bits, got 1.5`, RuleType},
		{"bad quantity", "  resources:\n    fixed: {memory: 12Gb}\n", `line 7: spec.resources.fixed.memory: must be a quantity such as 512Mi, 4Gi or 1.5G (did you mean 12Gi?), got "12Gb"`, RuleType},
		{"list for quantity", "  resources:\n    scratch: [1]\n", `line 7: spec.resources.scratch: must be a quantity such as 512Mi, 4Gi or 1.5G, got a list`, RuleType},
		{"bad duration", "  batchTimeout: 2 hours\n", `line 6: spec.batchTimeout: must be a duration such as 90s, 30m or 2h, got "2 hours"`, RuleType},
		{"number for duration", "  batchTimeout: 60\n", `line 6: spec.batchTimeout: must be a duration such as 90s, 30m or 2h, got 60`, RuleType},
		{"mapping for string", "  class: {a: b}\n", `line 6: spec.class: must be a string (quote values such as "true" or "1"), got a mapping`, RuleType},
		{"env value number", "  env: [{name: A, value: 1}]\n", `line 6: spec.env[0].value: must be a string (quote values such as "true" or "1"), got 1`, RuleType},
		{"label value number", "metadata:\n  labels: {version: 2}\n", `line 7: metadata.labels[version]: must be a string (quote values such as "true" or "1"), got 2`, RuleType},
		{"status unknown field", "status:\n  phase: Done\n  progres: {}\n", "line 8: status.progres: unknown field, did you mean progress?", RuleUnknownField},
		{"status bad time", "status:\n  startTime: yesterday\n", `line 7: status.startTime: must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got "yesterday"`, RuleType},
		{"second document", "---\napiVersion: lardon3d.io/v1alpha1\n", "line 6: a manifest holds exactly one Task, found another YAML document", RuleDocument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, list := parseErrors(t, head+tc.body)
			if list.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", list.Error(), tc.want)
			}
			if list[0].Rule != tc.rule {
				t.Errorf("rule %q, want %q", list[0].Rule, tc.rule)
			}
		})
	}
}

// TestParseReportsAllErrorsAtOnce checks one file with many problems gets
// every one of them, in line order, and a task holding what did decode.
func TestParseReportsAllErrorsAtOnce(t *testing.T) {
	data := `apiVersion: lardon3d.io/v1alpha2
kind: Task
metadata:
  name: Block_A
spec:
  class: feature
  command: "colmap feature_extractor"
  workingDir: /data/castle
  items:
    count: 10
    glob: "*.jpg"
  dependsOn: [a, a]
  resources:
    perltem: {memory: 2Mi}
    fixed: {memory: -1Gi}
    batch: {min: 1, max: 0}
    threads: 2
    minThreads: 3
    threads: 4
  retries: 101
  batchTimeout: soon
status:
`
	task, list := parseErrors(t, data)
	want := []string{
		`line 1: apiVersion: must be lardon3d.io/v1alpha1, got "lardon3d.io/v1alpha2"`,
		`line 4: metadata.name: must be a lower case name of at most 251 characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit, got "Block_A"`,
		`line 6: spec.class: must be one of import|thumbnails|exif|features|matching|sfm|depthmaps|mesh|texture|custom, got "feature"`,
		`line 7: spec.command: must be a list of strings, got "colmap feature_extractor"`,
		`line 9: spec.items: must set exactly one of count, files, glob, got count and glob`,
		`line 12: spec.dependsOn[1]: must not repeat dependsOn[0], got "a"`,
		`line 14: spec.resources.perltem: unknown field, did you mean perItem?`,
		`line 15: spec.resources.fixed.memory: must be >= 0, got -1Gi`,
		`line 16: spec.resources.batch.max: must be >= batch.min (1), got 0`,
		`line 18: spec.resources.minThreads: must be <= threads (2), got 3`,
		`line 19: spec.resources.threads: duplicate key, first written at line 17`,
		`line 20: spec.retries: must be <= 100, got 101`,
		`line 21: spec.batchTimeout: must be a duration such as 90s, 30m or 2h, got "soon"`,
	}
	if got := strings.Split(list.Error(), "; "); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	// What could be decoded is there; what could not is left zero.
	if task.Spec.WorkingDir != "/data/castle" || task.Metadata.Name != "Block_A" || task.Spec.Command != nil || task.Spec.Resources.Threads != 2 {
		t.Errorf("partial task: %+v", task)
	}
}

func TestParseStatus(t *testing.T) {
	for _, tail := range []string{"", "status:\n", "status: {}\n", "status: null\n"} {
		task := mustParse(t, "t.yaml", validManifest+tail)
		if task.Status.Phase != "" {
			t.Errorf("%q: phase %q", tail, task.Status.Phase)
		}
	}
	task := mustParse(t, "t.yaml", validManifest+controllerStatus)
	st := task.Status
	if st.Phase != PhaseRunning || st.Reservation == nil || st.Reservation.Memory.String() != "2265Mi" ||
		st.Progress.ItemsDone != 370 || st.LastBatch == nil || *st.LastBatch.ExitCode != 0 ||
		st.ProcessGroup.StartTicks != 123456789 || len(st.Conditions) != 1 || st.Conditions[0].Reason != "WaitingForMemory" ||
		st.StartTime == nil || st.StartTime.Hour() != 17 {
		t.Errorf("status decoded as %+v", st)
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		line       int
		is         error
	}{
		{"unclosed flow", "apiVersion: x\nspec: {command: [x\n", 1, nil},
		{"bad indent", "apiVersion: x\nkind: Task\n  spec: 1\n", 3, nil},
		{"tab", "a:\n\tb: 1\n", 2, nil},
		{"empty", "", 0, ErrEmptyManifest},
		{"comments only", "# nothing yet\n", 0, ErrEmptyManifest},
		{"null document", "~\n", 1, ErrEmptyManifest},
		{"a list", "- a\n- b\n", 1, ErrNotMapping},
		{"a scalar", "hello\n", 1, ErrNotMapping},
		{"second document broken", "kind: Task\n---\n[\n", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := ParseManifest("t.yaml", []byte(tc.data))
			var se *SyntaxError
			if !errors.As(err, &se) || task != nil {
				t.Fatalf("got %v, %T %v; want a nil task and a *SyntaxError", task, err, err)
			}
			if tc.line != 0 && se.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", se.Line, tc.line, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
		})
	}
}

// TestParseManyErrorsAreCapped feeds a mapping of 5,000 unknown keys,
// aliased into three places: the list stops at MaxErrors plus a count.
func TestParseManyErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n  items: {count: 1}\n  resources:\n    fixed: &m\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "      k%d: 1\n", i)
	}
	b.WriteString("    perItem: *m\n    perThread: *m\n")
	_, list := parseErrors(t, b.String())
	if len(list) != MaxErrors+1 {
		t.Fatalf("%d errors, want %d", len(list), MaxErrors+1)
	}
	last := list[MaxErrors]
	if last.Rule != RuleTooMany || last.Error() != "and 14950 more errors not shown" {
		t.Errorf("last entry %q (%s)", last.Error(), last.Rule)
	}
}

// TestParseNodeBudget checks a file expanding past maxNodes through
// aliases is refused instead of walked.
func TestParseNodeBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n  items: {count: 1}\n  env: &e\n")
	defer func(n int) { maxNodes = n }(maxNodes)
	maxNodes = 1000
	for i := range 200 {
		fmt.Fprintf(&b, "    - {name: V%d}\n", i)
	}
	b.WriteString("status:\n  conditions: *e\n")
	_, list := parseErrors(t, b.String())
	if !strings.Contains(list.Error(), "too many nodes") {
		t.Errorf("got %.300s", list.Error())
	}
}

func TestParseAliasesExpand(t *testing.T) {
	data := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: &cmd [x, y]\n  items: {count: 2}\n  env: [{name: A, value: &v hello}, {name: B, value: *v}]\n"
	task := mustParse(t, "t.yaml", data)
	if task.Spec.Env[1].Value != "hello" {
		t.Errorf("alias not expanded: %+v", task.Spec.Env)
	}
}

func BenchmarkParseManifest(b *testing.B) {
	data := []byte(validManifest + controllerStatus)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseManifest("features-block-a.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
