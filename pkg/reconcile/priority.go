package reconcile

import (
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// priorityOf resolves spec.priority: an integer as is, a class name by
// the configuration's PriorityClasses, none as DefaultPriority. A class
// the configuration does not name is an error (the default is returned
// with it).
func (c *Controller) priorityOf(spec *v1alpha1.TaskSpec) (int64, error) {
	p := spec.Priority
	if p == nil {
		return c.cfg.DefaultPriority, nil
	}
	if p.Type == intstr.Int {
		return int64(p.IntVal), nil
	}
	if v, ok := c.cfg.PriorityClasses[p.StrVal]; ok {
		return v, nil
	}
	known := make([]string, 0, len(c.cfg.PriorityClasses))
	for k := range c.cfg.PriorityClasses {
		known = append(known, k)
	}
	slices.Sort(known)
	msg := "none is configured"
	if len(known) > 0 {
		msg = "the configured ones are " + strings.Join(known, ", ")
		if s, ok := v1alpha1.ClosestName(p.StrVal, known); ok {
			msg = "did you mean " + s + "? " + msg
		}
	}
	return c.cfg.DefaultPriority, fmt.Errorf("spec.priority: no priority class %q (%s)", p.StrVal, msg)
}

// spoolAccount is the account of a spool without one configured: its
// directory's owner's login name, else "uid N".
func spoolAccount(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return ""
	}
	uid := strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(uid); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + uid
}
