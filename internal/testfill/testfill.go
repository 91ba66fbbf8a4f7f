// Package testfill fills a value for reflection tests: every field
// reachable from it gets a value that is not its zero value, so that a
// test comparing two renderings of it (the status emitter against the JSON
// form, get's index row against the task) fails when a field added later
// is forgotten by one of them.
package testfill

import (
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// maxDepth bounds the pointers followed, for recursive types.
const maxDepth = 6

// Fill sets every exported field reachable from ptr (a non-nil pointer) to
// a non-zero value: quantities 3Mi, times 2026-12-01T10:00:00Z, strings
// "x", numbers 7 (0.5 for floats), booleans true, one element per slice
// and map.
func Fill(ptr any) {
	fill(reflect.ValueOf(ptr).Elem(), 0)
}

func fill(v reflect.Value, depth int) {
	switch v.Interface().(type) {
	case resource.Quantity:
		v.Set(reflect.ValueOf(resource.MustParse("3Mi")))
		return
	case metav1.Time:
		v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))))
		return
	case intstr.IntOrString:
		// Its Type says which field holds the value: filled field by
		// field, it would name neither.
		v.Set(reflect.ValueOf(intstr.FromInt32(3)))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if depth > maxDepth {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
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
