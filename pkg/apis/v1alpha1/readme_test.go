package v1alpha1

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEManifestIsValid keeps the README's headline manifest a manifest
// that works as written: it parses and validates.
func TestREADMEManifestIsValid(t *testing.T) {
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const fence = "```yaml\n"
	start := strings.Index(string(data), fence)
	if start < 0 {
		t.Fatal("no yaml block in the README")
	}
	body := string(data[start+len(fence):])
	end := strings.Index(body, "```")
	if end < 0 {
		t.Fatal("unterminated yaml block in the README")
	}
	task, err := ParseManifest("features-block-a.yaml", []byte(body[:end]))
	if err != nil {
		t.Fatalf("the README's manifest: %v", err)
	}
	if task.Metadata.Name != "features-block-a" || len(task.Spec.Command) != 3 || !strings.Contains(task.Spec.Command[2], "--image_path images") {
		t.Fatalf("the README's manifest decoded as %+v", task.Spec.Command)
	}
}
