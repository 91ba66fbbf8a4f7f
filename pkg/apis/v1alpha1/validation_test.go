package v1alpha1

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// validTask is a defaulted task that passes validation.
func validTask() *Task {
	t := &Task{
		APIVersion: APIVersion,
		Kind:       KindTask,
		Metadata:   ObjectMeta{Name: "features-a"},
		Spec: TaskSpec{
			Class:   ClassFeatures,
			Command: []string{"colmap", "feature_extractor"},
			Items:   Items{Count: ptr[int64](10)},
		},
	}
	SetDefaults(t, "features-a.yaml")
	return t
}

func TestValidateValid(t *testing.T) {
	if errs := Validate(validTask()); errs != nil || errs.Err() != nil {
		t.Fatalf("valid task: %v", errs)
	}
	longest := validTask()
	longest.Metadata.Name = strings.Repeat("a", MaxNameLength) // NAME.log is 255 bytes
	if errs := Validate(longest); errs != nil {
		t.Fatalf("a name of %d characters: %v", MaxNameLength, errs)
	}
	bad := validTask()
	bad.Kind = ""
	if err := Validate(bad).Err(); err == nil {
		t.Fatal("ErrorList.Err() is nil for a non-empty list")
	}
}

func TestValidateMessages(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Task)
		want   []string // exact messages, in order
		rule   string   // Rule of the first error
	}{
		{"apiVersion", func(t *Task) { t.APIVersion = "v1" }, []string{`apiVersion: must be lardon3d.io/v1alpha1, got "v1"`}, RuleEnum},
		{"kind", func(t *Task) { t.Kind = "Pod" }, []string{`kind: must be Task, got "Pod"`}, RuleEnum},
		{"name missing", func(t *Task) { t.Metadata.Name = "" }, []string{`metadata.name: is required`}, RuleRequired},
		{"name upper case", func(t *Task) { t.Metadata.Name = "Block_A" }, []string{`metadata.name: must be a lower case name of at most 251 characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit, got "Block_A"`}, RuleFormat},
		{"name too long for its log file", func(t *Task) { t.Metadata.Name = strings.Repeat("a", 252) }, []string{`metadata.name: must be a lower case name of at most 251 characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit, got "` + strings.Repeat("a", 57) + `..."`}, RuleFormat},
		{"name too long", func(t *Task) { t.Metadata.Name = strings.Repeat("a", 254) }, []string{`metadata.name: must be a lower case name of at most 251 characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit, got "` + strings.Repeat("a", 57) + `..."`}, RuleFormat},
		{"strict without memory", func(t *Task) { t.Spec.Resources.Estimate = EstimateStrict }, []string{`spec.resources.estimate: strict needs a memory cost (fixed, perItem or perThread memory), got strict`}, RuleRequired},
		{"estimate", func(t *Task) { t.Spec.Resources.Estimate = "guess" }, []string{`spec.resources.estimate: must be one of declared|learned|strict, got "guess"`}, RuleEnum},
		{"profile", func(t *Task) { t.Spec.Resources.Profile = "COLMAP 640" }, []string{`spec.resources.profile: must be a lower case name of at most 251 characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit, got "COLMAP 640"`}, RuleFormat},
		{"class", func(t *Task) { t.Spec.Class = "feature" }, []string{`spec.class: must be one of import|thumbnails|exif|features|matching|sfm|depthmaps|mesh|texture|custom, got "feature"`}, RuleEnum},
		{"command missing", func(t *Task) { t.Spec.Command = nil }, []string{`spec.command: is required`}, RuleRequired},
		{"command empty program", func(t *Task) { t.Spec.Command = []string{"", "x"} }, []string{`spec.command[0]: must name the program to run, got ""`}, RuleRequired},
		{"items none", func(t *Task) { t.Spec.Items = Items{} }, []string{`spec.items: must set exactly one of count, files, glob, got none`}, RuleOneOf},
		{"items two", func(t *Task) { t.Spec.Items.Glob = "*.jpg" }, []string{`spec.items: must set exactly one of count, files, glob, got count and glob`}, RuleOneOf},
		{"items three", func(t *Task) { t.Spec.Items.Glob = "*.jpg"; t.Spec.Items.Files = []string{"a"} }, []string{`spec.items: must set exactly one of count, files, glob, got count and files and glob`}, RuleOneOf},
		{"count zero", func(t *Task) { *t.Spec.Items.Count = 0; t.Spec.Resources.Batch.Max = 0 }, []string{`spec.items.count: must be >= 1, got 0`, `spec.resources.batch.min: must be <= the item count (0), got 1`, `spec.resources.batch.max: must be >= batch.min (1), got 0`}, RuleRange},
		{"count cap", func(t *Task) { *t.Spec.Items.Count = MaxItemCount + 1 }, []string{`spec.items.count: must be <= 10000000, got 10000001`}, RuleRange},
		{"files empty list", func(t *Task) { t.Spec.Items = Items{Files: []string{}} }, []string{`spec.items.files: must not be empty`}, RuleRequired},
		{"files empty entry", func(t *Task) { t.Spec.Items = Items{Files: []string{"a.jpg", ""}}; t.Spec.Resources.Batch.Max = 2 }, []string{`spec.items.files[1]: must not be empty`}, RuleRequired},
		{"glob syntax", func(t *Task) { t.Spec.Items = Items{Glob: "images/[a.jpg"}; t.Spec.Resources.Batch.Max = 0 }, []string{`spec.items.glob: must be a valid glob pattern (*, ?, [a-z], ** for any depth, {a,b} for alternatives), got "images/[a.jpg"`}, RuleFormat},
		{"batch min zero", func(t *Task) { t.Spec.Resources.Batch.Min = 0 }, []string{`spec.resources.batch.min: must be >= 1, got 0`}, RuleRange},
		{"batch max below min", func(t *Task) { t.Spec.Resources.Batch.Max = 0 }, []string{`spec.resources.batch.max: must be >= batch.min (1), got 0`}, RuleRange},
		{"batch max below min 4", func(t *Task) { t.Spec.Resources.Batch.Min = 4; t.Spec.Resources.Batch.Max = 3 }, []string{`spec.resources.batch.max: must be >= batch.min (4), got 3`}, RuleRange},
		{"batch max above count", func(t *Task) { t.Spec.Resources.Batch.Max = 11 }, []string{`spec.resources.batch.max: must be <= the item count (10), got 11`}, RuleRange},
		{"batch min above count", func(t *Task) { t.Spec.Resources.Batch.Min = 12 }, []string{`spec.resources.batch.min: must be <= the item count (10), got 12`, `spec.resources.batch.max: must be >= batch.min (12), got 10`}, RuleRange},
		{"batch max negative", func(t *Task) { t.Spec.Items = Items{Glob: "*"}; t.Spec.Resources.Batch.Max = -1 }, []string{`spec.resources.batch.max: must be >= 0, got -1`, `spec.resources.batch.max: must be >= batch.min (1), got -1`}, RuleRange},
		{"threads zero", func(t *Task) { t.Spec.Resources.Threads = 0 }, []string{`spec.resources.threads: must be >= 1, got 0`}, RuleRange},
		{"threads cap", func(t *Task) { t.Spec.Resources.Threads = 5000 }, []string{`spec.resources.threads: must be <= 4096, got 5000`}, RuleRange},
		{"minThreads zero", func(t *Task) { t.Spec.Resources.MinThreads = 0 }, []string{`spec.resources.minThreads: must be >= 1, got 0`}, RuleRange},
		{"minThreads above threads", func(t *Task) { t.Spec.Resources.Threads = 2; t.Spec.Resources.MinThreads = 3 }, []string{`spec.resources.minThreads: must be <= threads (2), got 3`}, RuleRange},
		{"ioSlots negative", func(t *Task) { t.Spec.Resources.IOSlots = -1 }, []string{`spec.resources.ioSlots: must be >= 0, got -1`}, RuleRange},
		{"gpuSlots negative", func(t *Task) { t.Spec.Resources.GPUSlots = -2 }, []string{`spec.resources.gpuSlots: must be >= 0, got -2`}, RuleRange},
		{"memory negative", func(t *Task) { t.Spec.Resources.PerItem.Memory = qty("-2Mi") }, []string{`spec.resources.perItem.memory: must be >= 0, got -2Mi`}, RuleRange},
		{"gpu memory negative", func(t *Task) { t.Spec.Resources.Fixed.GPUMemory = qty("-1Gi") }, []string{`spec.resources.fixed.gpuMemory: must be >= 0, got -1Gi`}, RuleRange},
		{"perThread negative", func(t *Task) { t.Spec.Resources.PerThread.Memory = qty("-1") }, []string{`spec.resources.perThread.memory: must be >= 0, got -1`}, RuleRange},
		{"scratch negative", func(t *Task) { t.Spec.Resources.Scratch = qty("-1G") }, []string{`spec.resources.scratch: must be >= 0, got -1G`}, RuleRange},
		{"retries negative", func(t *Task) { t.Spec.Retries = -1 }, []string{`spec.retries: must be >= 0, got -1`}, RuleRange},
		{"retries cap", func(t *Task) { t.Spec.Retries = 101 }, []string{`spec.retries: must be <= 100, got 101`}, RuleRange},
		{"batchTimeout negative", func(t *Task) { t.Spec.BatchTimeout = &metav1.Duration{Duration: -time.Hour} }, []string{`spec.batchTimeout: must be >= 0, got -1h0m0s`}, RuleRange},
		{"dependsOn name", func(t *Task) { t.Spec.DependsOn = []string{"Import"} }, []string{`spec.dependsOn[0]: must be a lower case name of at most 251 characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit, got "Import"`}, RuleFormat},
		{"dependsOn self", func(t *Task) { t.Spec.DependsOn = []string{"import", "features-a"} }, []string{`spec.dependsOn[1]: must not name the task itself, got "features-a"`}, RuleSelfReference},
		{"dependsOn duplicate", func(t *Task) { t.Spec.DependsOn = []string{"import", "exif", "import"} }, []string{`spec.dependsOn[2]: must not repeat dependsOn[0], got "import"`}, RuleUnique},
		{"env name", func(t *Task) { t.Spec.Env = []EnvVar{{Name: "OMP-THREADS", Value: "1"}} }, []string{`spec.env[0].name: must be a variable name (letters, digits, '_', not starting with a digit), got "OMP-THREADS"`}, RuleFormat},
		{"env name missing", func(t *Task) { t.Spec.Env = []EnvVar{{Value: "1"}} }, []string{`spec.env[0].name: is required`}, RuleRequired},
		{"pod without image", func(t *Task) { t.Spec.Pod = &TaskPod{} }, []string{`spec.pod.image: is required`}, RuleRequired},
		{"pod pull policy", func(t *Task) { t.Spec.Pod = &TaskPod{Image: "a", ImagePullPolicy: "Sometimes"} }, []string{`spec.pod.imagePullPolicy: must be one of Always|IfNotPresent|Never, got "Sometimes"`}, RuleEnum},
		{"pod volume kinds", func(t *Task) {
			t.Spec.Pod = &TaskPod{Image: "a", Volumes: []PodVolume{{Name: "a", MountPath: "/a", ClaimName: "c", EmptyDir: true}, {Name: "b", MountPath: "/b"}}}
		}, []string{`spec.pod.volumes[0]: must set exactly one of claimName, hostPath, emptyDir, got claimName and emptyDir`, `spec.pod.volumes[1]: must set exactly one of claimName, hostPath, emptyDir, got none`}, RuleOneOf},
		{"pod volume duplicates", func(t *Task) {
			t.Spec.Pod = &TaskPod{Image: "a", Volumes: []PodVolume{{Name: "a", MountPath: "/a", EmptyDir: true}, {Name: "a", MountPath: "/a", EmptyDir: true}}}
		}, []string{`spec.pod.volumes[1].name: must not repeat volumes[0].name, got "a"`, `spec.pod.volumes[1].mountPath: must not repeat volumes[0].mountPath, got "/a"`}, RuleUnique},
		{"pod volume on the items", func(t *Task) {
			t.Spec.Pod = &TaskPod{Image: "a", Volumes: []PodVolume{{Name: "a", MountPath: PodItemsDir, EmptyDir: true}}}
		}, []string{`spec.pod.volumes[0].mountPath: must not be /var/run/lardon3d: the batch's items are mounted there, got "/var/run/lardon3d"`}, RuleRange},
		{"pod volume relative", func(t *Task) {
			t.Spec.Pod = &TaskPod{Image: "a", Volumes: []PodVolume{{Name: "Data", MountPath: "data", HostPath: "srv"}}}
		}, []string{`spec.pod.volumes[0].name: must be a lower case name of at most 63 characters (a-z, 0-9, '-'), starting and ending with a letter or digit, got "Data"`, `spec.pod.volumes[0].mountPath: must be an absolute path, got "data"`, `spec.pod.volumes[0].hostPath: must be an absolute path, got "srv"`}, RuleFormat},
		{"pod toleration", func(t *Task) {
			t.Spec.Pod = &TaskPod{Image: "a", Tolerations: []PodToleration{{Key: "k", Operator: "In"}}}
		}, []string{`spec.pod.tolerations[0].operator: must be one of Equal|Exists, got "In"`}, RuleEnum},
		{"pod runAsUser negative", func(t *Task) { t.Spec.Pod = &TaskPod{Image: "a", RunAsUser: ptr[int64](-1)} }, []string{`spec.pod.runAsUser: must be >= 0, got -1`}, RuleRange},
		{"env duplicate", func(t *Task) { t.Spec.Env = []EnvVar{{Name: "A"}, {Name: "B"}, {Name: "A"}} }, []string{`spec.env[2].name: must not repeat env[0].name, got "A"`}, RuleUnique},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task := validTask()
			tc.mutate(task)
			errs := Validate(task)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if errs[0].Rule != tc.rule {
				t.Errorf("rule %q, want %q", errs[0].Rule, tc.rule)
			}
			if errs[0].Line != 0 {
				t.Errorf("Validate gave line %d, want 0 (no source)", errs[0].Line)
			}
		})
	}
}

func TestValidateGlobMaxZeroIsAuto(t *testing.T) {
	task := validTask()
	task.Spec.Items = Items{Glob: "images/*.jpg"}
	task.Spec.Resources.Batch.Max = 0
	if errs := Validate(task); errs != nil {
		t.Fatalf("glob with batch.max 0 (the resolved count): %v", errs)
	}
}

func TestValidateStatusIgnored(t *testing.T) {
	task := validTask()
	task.Status = TaskStatus{Phase: "Bogus", Progress: Progress{ItemsDone: -3}}
	if errs := Validate(task); errs != nil {
		t.Fatalf("status is the controller's, not validated: %v", errs)
	}
}

func TestFieldErrorFormat(t *testing.T) {
	e := &FieldError{Path: "spec.resources.batch.max", Rule: RuleRange, Detail: "must be >= batch.min (1)", Value: "0", Line: 12}
	if got, want := e.Error(), "spec.resources.batch.max: must be >= batch.min (1), got 0"; got != want {
		t.Errorf("FieldError.Error() = %q, want %q", got, want)
	}
	l := ErrorList{e, {Path: "spec.command", Rule: RuleRequired, Detail: "is required"}, {Rule: RuleDocument, Detail: "two documents"}}
	if got, want := l.Error(), "line 12: spec.resources.batch.max: must be >= batch.min (1), got 0; spec.command: is required; two documents"; got != want {
		t.Errorf("ErrorList.Error() = %q, want %q", got, want)
	}
}

func TestEffectiveEstimate(t *testing.T) {
	for _, tc := range []struct {
		r    Resources
		want EstimateMode
	}{
		{Resources{}, EstimateLearned},
		{Resources{Fixed: Cost{Memory: qty("0")}}, EstimateLearned},
		{Resources{Fixed: Cost{GPUMemory: qty("1Gi")}}, EstimateLearned},
		{Resources{PerItem: Cost{Memory: qty("2Mi")}}, EstimateDeclared},
		{Resources{PerThread: Cost{Memory: qty("90Mi")}, Estimate: EstimateStrict}, EstimateStrict},
		{Resources{Fixed: Cost{Memory: qty("1Gi")}, Estimate: EstimateLearned}, EstimateLearned},
	} {
		if got := tc.r.EffectiveEstimate(); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.r, got, tc.want)
		}
	}
}
