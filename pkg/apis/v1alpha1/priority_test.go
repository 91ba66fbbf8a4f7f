package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// spec.priority takes an integer or a class name, and keeps which it was.
func TestPriorityIsAnIntegerOrAClassName(t *testing.T) {
	for text, want := range map[string]intstr.IntOrString{
		"-5":          intstr.FromInt32(-5),
		"1000000000":  intstr.FromInt32(MaxPriority),
		"high":        intstr.FromString("high"),
		"'7'":         intstr.FromString("7"), // quoted, a name: only a class named 7 resolves it
		"batch-night": intstr.FromString("batch-night"),
	} {
		doc := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: x}\nspec:\n  command: ['true']\n  items: {count: 1}\n  priority: " + text + "\n"
		task, err := ParseManifest("x.yaml", []byte(doc))
		if err != nil || task.Spec.Priority == nil || *task.Spec.Priority != want {
			t.Errorf("priority: %s: got %+v, %v; want %+v", text, task.Spec.Priority, err, want)
		}
	}
}
