package v1alpha1

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// FuzzParseManifest checks, for any input: ParseManifest never panics; it
// returns either a *SyntaxError and no task, or an ErrorList and a task, or
// a task and no error; and a task parsed without error re-marshals
// (sigs.k8s.io/yaml.Marshal) and re-parses to an equal task (same marshaled
// bytes, semantically equal spec). Seeds: testdata/fuzz/FuzzParseManifest
// and every example manifest.
func FuzzParseManifest(f *testing.F) {
	for _, p := range exampleFiles(f) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(validManifest + controllerStatus))
	f.Add([]byte("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n  items: {files: [a, 'yes', '0o17', '1e3']}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := ParseManifest("fuzz.yaml", data)
		var se *SyntaxError
		var list ErrorList
		switch {
		case err == nil:
		case errors.As(err, &se):
			if task != nil {
				t.Fatal("task returned with a SyntaxError")
			}
			return
		case errors.As(err, &list):
			if task == nil || len(list) == 0 {
				t.Fatalf("ErrorList %v with task %v", list, task)
			}
			return
		default:
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		out, err := yaml.Marshal(task)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := ParseManifest("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", out, err)
		}
		out2, err := yaml.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the task:\n%s\n----\n%s", out, out2)
		}
		if !equality.Semantic.DeepEqual(task.Spec, again.Spec) || SpecHash(task.Spec) != SpecHash(again.Spec) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v", task.Spec, again.Spec)
		}
	})
}
