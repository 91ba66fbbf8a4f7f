package spool

import (
	"encoding/json"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/internal/testfill"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestEmitterWritesEveryStatusField: the hand-written emitter covers every
// field of TaskStatus, now and after any field is added.
func TestEmitterWritesEveryStatusField(t *testing.T) {
	var st v1alpha1.TaskStatus
	testfill.Fill(&st)
	block := appendStatusBlock(nil, "", "\n", &st)
	var got struct {
		Status v1alpha1.TaskStatus `json:"status"`
	}
	if err := yaml.UnmarshalStrict(block, &got); err != nil {
		t.Fatalf("read back: %v\n%s", err, block)
	}
	g, _ := json.Marshal(got.Status)
	w, _ := json.Marshal(&st)
	gv, _ := decodeJSON(g)
	wv, _ := decodeJSON(w)
	if !equalValues(gv, wv) {
		t.Fatalf("the emitter loses fields:\ngot  %s\nwant %s\n%s", g, w, block)
	}
}
