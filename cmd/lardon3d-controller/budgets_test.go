package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// keyPaths lists every key of a JSON document as a dotted path ([] for
// list elements), sorted.
func keyPaths(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			keyPaths(p, c, out)
		}
	case []any:
		for _, c := range x {
			keyPaths(prefix+"[]", c, out)
		}
	}
}

func TestBudgetsJSONAndYAMLHaveStableLowerCamelNames(t *testing.T) {
	dir := t.TempDir()
	js, stderr, code := runInProcess(t, "budgets", "--spool", dir, "-o", "json", "--load-threshold", "-1", "--scratch-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("-o json: %v\n%s", err, js)
	}
	keys := map[string]bool{}
	keyPaths("", doc, keys)
	var list []string
	for k := range keys {
		list = append(list, k)
		last := k[strings.LastIndex(k, ".")+1:]
		if last != "" && last[0] >= 'A' && last[0] <= 'Z' {
			t.Errorf("key %s is not lowerCamel", k)
		}
	}
	sort.Strings(list)
	golden(t, "budgets-keys", strings.Join(list, "\n")+"\n")
	if doc["source"] != "probed" || doc["load"].(map[string]any)["threshold"] != nil {
		t.Errorf("source %v, load.threshold %v; want probed and null (gate off)", doc["source"], doc["load"].(map[string]any)["threshold"])
	}
	ys, _, code := runInProcess(t, "budgets", "--spool", dir, "-o", "yaml", "--load-threshold", "-1", "--scratch-dir", dir)
	var ydoc map[string]any
	if err := yaml.Unmarshal([]byte(ys), &ydoc); code != 0 || err != nil {
		t.Fatalf("-o yaml: exit %d, %v\n%s", code, err, ys)
	}
	ykeys := map[string]bool{}
	keyPaths("", ydoc, ykeys)
	if fmt.Sprint(ykeys) != fmt.Sprint(keys) {
		t.Errorf("-o yaml keys differ from -o json:\n%v\n%v", ykeys, keys)
	}
	table, _, _ := runInProcess(t, "budgets", "--spool", dir, "--load-threshold", "-1")
	if !strings.Contains(table, "(load gate off)") || strings.Contains(table, "threshold -") {
		t.Errorf("table with --load-threshold -1:\n%s", table)
	}
	if _, stderr, code := runInProcess(t, "budgets", "--spool", dir, "-o", "xml"); code != 2 || !strings.Contains(stderr, "want json or yaml") {
		t.Errorf("-o xml: exit %d %s", code, stderr)
	}
}
