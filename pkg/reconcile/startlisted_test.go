package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// Tasks dropped before the controller starts are all in the queue before
// its first decision: the first batch is held to its share of memory
// beside the others, as every later one is. The items are globs over
// 1,500 files each, so each task takes the resolver a while: a queue that
// dispatched while the listing still arrived saw the first task alone and
// ran its 1,500 items (7.4 GiB) in one batch, leaving the task beside it
// what memory was left.
func TestFirstDecisionSeesTheWholeListing(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{ExitWhenDone: true, Queue: queue.Config{MaxParallel: 2}})
	h.logs = logs
	data := filepath.Join(h.dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 1500 {
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("%04d.bin", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		name := fmt.Sprintf("t%d", i)
		h.write(name+".yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: "+name+"}\nspec:\n"+
			"  command: [\"true\"]\n  items: {glob: \"data/*.bin\"}\n"+
			"  resources: {fixed: {memory: 100Mi}, perItem: {memory: 5Mi}}\n")
	}
	h.start()
	h.wait()
	var first string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"reason":"Admitted"`) {
			first = line
			break
		}
	}
	if first == "" {
		t.Fatalf("no admission logged:\n%s", logs.String())
	}
	// A half share of 8 GiB holds 750 items evened out over 1,500.
	if !strings.Contains(first, "batch 750 of") || !strings.Contains(first, "share of memory") {
		t.Fatalf("the first batch was not held to its share of memory beside the other tasks listed: %s", first)
	}
}
