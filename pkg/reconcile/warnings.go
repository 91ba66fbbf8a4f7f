package reconcile

import "github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"

// logWarnings logs what is legal in a new or edited spec but almost
// certainly a mistake (v1alpha1.Warnings); the task runs as written.
// REQUIRES: owner goroutine.
func (c *Controller) logWarnings(name, path string, t *v1alpha1.Task) {
	for _, w := range v1alpha1.Warnings(t) {
		c.log.Warn().Str("task", name).Str("file", path).Str("field", w.Path).Msg(w.Error())
	}
}
