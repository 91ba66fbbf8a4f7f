package spool

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// fillAll sets every field reachable from v to a value that is not its
// zero value: a field added to the status and forgotten by the emitter
// then fails TestEmitterWritesEveryStatusField.
func fillAll(v reflect.Value, depth int) {
	switch v.Interface().(type) {
	case resource.Quantity:
		v.Set(reflect.ValueOf(resource.MustParse("3Mi")))
		return
	case metav1.Time:
		v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fillAll(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fillAll(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(k, depth+1)
		fillAll(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	}
}

// TestEmitterWritesEveryStatusField: the hand-written emitter covers every
// field of TaskStatus, now and after any field is added.
func TestEmitterWritesEveryStatusField(t *testing.T) {
	var st v1alpha1.TaskStatus
	fillAll(reflect.ValueOf(&st).Elem(), 0)
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
