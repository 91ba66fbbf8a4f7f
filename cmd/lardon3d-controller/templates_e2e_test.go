package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGetJSONPathAndCustomColumns prints the tasks of a real controller's
// spool through -o jsonpath and -o custom-columns, as kubectl does: a
// list for several tasks ({.items[*]}), the task itself for one name,
// <none> for a path that finds nothing, whole numbers as integers.
func TestGetJSONPathAndCustomColumns(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "alpha.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: alpha, labels: {app: x}}
spec:
  command: ["true"]
  items: {count: 3}
  resources: {threads: 1, fixed: {memory: 1Gi}}
`)
	writeManifest(t, spool, "beta.yaml", waitTask("beta", "true", "y"))
	startController(t, spool)
	if out, code := runCLI(t, "wait", "--spool", spool, "--all", "--for=phase=Done"); code != 0 {
		t.Fatalf("wait --all: exit %d %q", code, out)
	}
	columnsFile := filepath.Join(t.TempDir(), "columns")
	if err := os.WriteFile(columnsFile, []byte("NAME   PHASE\n.metadata.name   {.status.phase}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "jsonpath={.items[*].metadata.name}"}, "alpha beta"},
		{[]string{"alpha", "-o", "jsonpath={.status.phase}/{.status.progress.itemsDone} {.spec.resources.fixed.memory}"}, "Done/3 1Gi"},
		{[]string{"beta", "alpha", "-o", "jsonpath={.items[*].status.phase}"}, "Done Done"},
		{[]string{"-o", `jsonpath={range .items[?(@.status.progress.itemsDone>1)]}{.metadata.name}{"\n"}{end}`}, "alpha\n"},
		{[]string{"-o", "custom-columns=NAME:.metadata.name,APP:.metadata.labels.app,DONE:status.progress.itemsDone,NONE:{.status.nothing}"},
			"NAME    APP   DONE   NONE\nalpha   x     3      <none>\nbeta    y     1      <none>\n"},
		{[]string{"-l", "app=y", "--no-headers", "-o", "custom-columns=NAME:.metadata.name,CMD:.spec.command[*]"}, "beta   sh,-c,true\n"},
		{[]string{"-o", "custom-columns-file=" + columnsFile}, "NAME    PHASE\nalpha   Done\nbeta    Done\n"},
	} {
		args := append([]string{"get", "--spool", spool, "--sort-by", "name"}, c.args...)
		if out, code := runCLI(t, args...); code != 0 || out != c.want {
			t.Errorf("%v: exit %d\n%q\nwant\n%q", args, code, out, c.want)
		}
	}
}
