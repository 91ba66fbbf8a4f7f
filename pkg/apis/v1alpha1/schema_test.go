package v1alpha1

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"
	"time"
)

const committedSchema = "../../../schemas/task.schema.json"

// TestSchemaUpToDate fails when schemas/task.schema.json differs from what
// the Go types generate.
func TestSchemaUpToDate(t *testing.T) {
	got, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(committedSchema)
	if err != nil {
		t.Fatalf("read committed schema: %v (run `make schemas`)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("schemas/task.schema.json is stale: run `make schemas` (go run ./hack/schemagen -o schemas/task.schema.json) and commit it")
	}
}

func TestSchemaShape(t *testing.T) {
	b, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Required    []string `json:"required"`
		Additional  bool     `json:"additionalProperties"`
		Definitions map[string]struct {
			Additional *bool                      `json:"additionalProperties"`
			OneOf      []map[string][]string      `json:"oneOf"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Additional || len(s.Required) != 3 {
		t.Errorf("root: additionalProperties %v, required %v", s.Additional, s.Required)
	}
	for name, d := range s.Definitions {
		if d.Additional == nil || *d.Additional {
			t.Errorf("%s: additionalProperties must be false", name)
		}
	}
	items := s.Definitions["Items"]
	if len(items.OneOf) != 3 || items.OneOf[2]["required"][0] != "glob" {
		t.Errorf("items.oneOf = %v", items.OneOf)
	}
	for _, want := range []string{`"enum":["import",`, `"enum":["Pending",`, `"pattern":"^\\+?(([0-9]+`, `"perThread":`, `"description":"Threads is the number of threads wished`} {
		if !bytes.Contains(compact(t, b), []byte(want)) {
			t.Errorf("schema lacks %s", want)
		}
	}
	if _, ok := s.Definitions["Resources"].Properties["perltem"]; ok {
		t.Error("typo field in schema")
	}
}

func compact(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestSchemaPatternsAgreeWithParsers checks the schema's quantity and
// duration patterns accept exactly what the decoder accepts (signs aside:
// the schema refuses negative values, which validation refuses too).
func TestSchemaPatternsAgreeWithParsers(t *testing.T) {
	q := regexp.MustCompile(quantityPattern)
	for _, s := range []string{"0", "1", "512Mi", "4Gi", "1.5G", "1.", ".5", "+1", "1e3", "1E-3", "100m", "1k", "1K", "1KiB", "1Gb", "", ".", "1.5.5", "Mi", " 1", "1 ", "1Ei", "2n", "1i", "-1", "-.5Gi"} {
		// What the decoder accepts, as a memory quantity of a manifest.
		_, err := ParseManifest("t.yaml", []byte("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [x]\n  items: {count: 1}\n  resources: {scratch: '"+s+"'}\n"))
		if got, want := q.MatchString(s), err == nil; got != want {
			t.Errorf("quantity %q: pattern %v, decoder %v", s, got, want)
		}
	}
	d := regexp.MustCompile(durationPattern)
	for _, s := range []string{"0", "2h", "1h30m", "1.5h", "90s", "10ms", "5us", "5µs", "3ns", ".5s", "+1m", "1", "h", "", "1d", "1h 30m", "00"} {
		_, err := time.ParseDuration(s)
		if got, want := d.MatchString(s), err == nil; got != want {
			t.Errorf("duration %q: pattern %v, ParseDuration %v", s, got, want)
		}
	}
}
