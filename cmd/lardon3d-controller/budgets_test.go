package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	if doc["cpuGate"] != "off" {
		t.Errorf("cpuGate %v with --load-threshold -1, want off", doc["cpuGate"])
	}
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
	if !strings.Contains(table, "CPU gate: off (--load-threshold or --cpu-pressure-threshold negative)") || strings.Contains(table, "threshold -") {
		t.Errorf("table with --load-threshold -1:\n%s", table)
	}
	if _, stderr, code := runInProcess(t, "budgets", "--spool", dir, "-o", "xml"); code != 2 || !strings.Contains(stderr, "want json or yaml") {
		t.Errorf("-o xml: exit %d %s", code, stderr)
	}
}

// TestBudgetsCPUGateFollowsPSIWhereTheKernelHasIt: the CPU gate's signal
// is CPU pressure when /proc/pressure/cpu can be read, the load average
// otherwise; either threshold negative turns it off; its bound is shown.
func TestBudgetsCPUGateFollowsPSIWhereTheKernelHasIt(t *testing.T) {
	dir := t.TempDir()
	want := "load"
	if _, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		want = "pressure"
	}
	for _, tc := range []struct {
		args    []string
		gate    string
		line    string
		maxWait float64 // cpuGateMaxWaitSeconds; 0: null
	}{
		{nil, want, map[string]string{"pressure": "CPU gate: CPU pressure (PSI) ", "load": "CPU gate: 1-minute load average"}[want], 30},
		{[]string{"--cpu-gate-max-wait", "45s"}, want, "waits at most 45s while none of our batches runs (--cpu-gate-max-wait)", 45},
		{[]string{"--cpu-gate-max-wait", "-1s"}, want, "no bound on its wait (--cpu-gate-max-wait negative)", 0},
		{[]string{"--cpu-pressure-threshold", "-1"}, "off", "CPU gate: off (--load-threshold or --cpu-pressure-threshold negative)", 0},
	} {
		js, stderr, code := runInProcess(t, append([]string{"budgets", "--spool", dir, "-o", "json"}, tc.args...)...)
		var doc struct {
			CPUGate  string   `json:"cpuGate"`
			MaxWait  *float64 `json:"cpuGateMaxWaitSeconds"`
			Pressure struct {
				CPUThreshold *float64 `json:"cpuThreshold"`
			} `json:"pressure"`
		}
		if err := json.Unmarshal([]byte(js), &doc); code != 0 || err != nil {
			t.Fatalf("%v: exit %d %v %s", tc.args, code, err, stderr)
		}
		if doc.CPUGate != tc.gate || (tc.gate == "pressure") != (doc.Pressure.CPUThreshold != nil && *doc.Pressure.CPUThreshold == 60) {
			t.Errorf("%v: cpuGate %q, cpuThreshold %v; want %q", tc.args, doc.CPUGate, doc.Pressure.CPUThreshold, tc.gate)
		}
		if (doc.MaxWait == nil) != (tc.maxWait == 0) || (doc.MaxWait != nil && *doc.MaxWait != tc.maxWait) {
			t.Errorf("%v: cpuGateMaxWaitSeconds %v, want %v (0: null)", tc.args, doc.MaxWait, tc.maxWait)
		}
		table, _, _ := runInProcess(t, append([]string{"budgets", "--spool", dir}, tc.args...)...)
		if !strings.Contains(table, tc.line) {
			t.Errorf("%v: table lacks %q:\n%s", tc.args, tc.line, table)
		}
	}
	// The config file takes the bound as a duration; a flag overrides it.
	cfg := filepath.Join(t.TempDir(), "budgets.yaml")
	if err := os.WriteFile(cfg, []byte("cpuGateMaxWait: 2m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for args, line := range map[string]string{"": "waits at most 2m0s while", "--cpu-gate-max-wait=5s": "waits at most 5s while"} {
		table, stderr, code := runInProcess(t, append([]string{"budgets", "--spool", dir, "--config", cfg}, strings.Fields(args)...)...)
		if code != 0 || !strings.Contains(table, line) {
			t.Errorf("--config with cpuGateMaxWait: 2m %s: exit %d %s, table lacks %q:\n%s", args, code, stderr, line, table)
		}
	}
}

// The table of a machine with an NVIDIA GPU (the fake nvidia-smi of
// hack/gpu-fake) adds what the driver says beyond the budget: the GPU's
// utilization and the processes using it; -o json stays the budgets'.
func TestBudgetsShowNvidiaSMIView(t *testing.T) {
	fake, err := filepath.Abs("../../hack/gpu-fake")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	dir := t.TempDir()
	table, stderr, code := runInProcess(t, "budgets", "--spool", dir, "--load-threshold", "-1")
	want := "\nNVIDIA GPUs (nvidia-smi):\n  nvidia:0 Fake GPU (GPU-00000000-fake): utilization 0%; no process\n"
	if code != 0 || !strings.Contains(table, want) || !strings.Contains(table, "gpu nvidia:0 memory") {
		t.Errorf("exit %d, table lacks %q:\n%s%s", code, want, table, stderr)
	}
	js, _, _ := runInProcess(t, "budgets", "--spool", dir, "-o", "json", "--load-threshold", "-1")
	if strings.Contains(js, "nvidia-smi") || !json.Valid([]byte(js)) {
		t.Errorf("-o json:\n%s", js)
	}
}
