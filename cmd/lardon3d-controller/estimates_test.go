package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// TestEstimatesObjectsSpeakTheManifestsLanguage: estimates -o yaml and
// -o json name every field in lowerCamel (no Go names such as BatchCap
// or FixedBytes), print durations as Go durations ("1.5s", not
// nanoseconds) and suggest memory as quantities rounded up to a unit a
// person writes (30Mi, never 30188Ki), in the shape of spec.resources.
func TestEstimatesObjectsSpeakTheManifestsLanguage(t *testing.T) {
	est := []reconcile.ProfileEstimate{{
		Profile: "custom/colmap", State: "firm", Samples: 5, Total: 5,
		FittedFixed: 28 << 20, FittedPerItem: 1 << 20, FittedPerThread: 87 << 20,
		Costs: history.Costs{FixedBytes: 30188 << 10, PerItemBytes: 1<<20 + 5, PerThreadBytes: 90 << 20, BatchCap: 8},
		OK:    true, DurationFixed: 2 * time.Second, DurationPerItem: 1500 * time.Millisecond, EfficientBatch: 12,
		LastBatch: time.Unix(1700000000, 0).UTC(),
	}}
	for _, output := range []string{"yaml", "json"} {
		var b strings.Builder
		if err := printEstimates(&b, est, output); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		var objs []map[string]any
		data := []byte(out)
		if output == "yaml" {
			var err error
			if data, err = yaml.YAMLToJSON(data); err != nil {
				t.Fatal(err)
			}
		}
		if err := json.Unmarshal(data, &objs); err != nil || len(objs) != 1 {
			t.Fatalf("-o %s: %v\n%s", output, err, out)
		}
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			m, ok := v.(map[string]any)
			if !ok {
				return
			}
			for k, x := range m {
				if !regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`).MatchString(k) {
					t.Errorf("-o %s: field %s%s is not lowerCamel", output, prefix, k)
				}
				walk(prefix+k+".", x)
			}
		}
		walk("", objs[0])
		o := objs[0]
		if o["durationPerItem"] != "1.5s" || o["durationFixed"] != "2s" {
			t.Errorf("-o %s: durations %v, %v; want 1.5s, 2s", output, o["durationPerItem"], o["durationFixed"])
		}
		sug, _ := o["suggested"].(map[string]any)
		mem := func(k string) any {
			c, _ := sug[k].(map[string]any)
			return c["memory"]
		}
		if mem("fixed") != "30Mi" || mem("perItem") != "1.25Mi" || mem("perThread") != "90Mi" {
			t.Errorf("-o %s: suggested %v", output, sug)
		}
		if strings.Contains(out, "Ki") || strings.Contains(out, "1500000000") {
			t.Errorf("-o %s prints KiB or nanoseconds:\n%s", output, out)
		}
	}
}
