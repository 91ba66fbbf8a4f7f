package v1alpha1

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/go-playground/validator/v10"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxItemCount caps items.count.
const MaxItemCount = 10_000_000

// MaxNameLength bounds metadata.name: a DNS subdomain (253) less the
// ".log" of the task's log file, whose name may not exceed 255 bytes.
const MaxNameLength = 251

// ValidName reports whether s is a valid metadata.name: a DNS subdomain
// (lower case letters, digits, '-' and '.', starting and ending with a
// letter or digit: never "/", never ".." alone) of at most MaxNameLength.
func ValidName(s string) bool {
	return len(s) <= MaxNameLength && len(validation.IsDNS1123Subdomain(s)) == 0
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate is the package's validator, built once: struct tags in types.go
// plus the custom tags dnsname, envname and globpattern.
var validate = sync.OnceValue(func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(v.RegisterValidation("dnsname", func(fl validator.FieldLevel) bool {
		return ValidName(fl.Field().String())
	}))
	must(v.RegisterValidation("dnslabel", func(fl validator.FieldLevel) bool {
		return len(validation.IsDNS1123Label(fl.Field().String())) == 0
	}))
	must(v.RegisterValidation("priority", func(fl validator.FieldLevel) bool {
		p, ok := fl.Field().Interface().(intstr.IntOrString)
		return ok && PriorityValid(p)
	}))
	must(v.RegisterValidation("abspath", func(fl validator.FieldLevel) bool {
		return strings.HasPrefix(fl.Field().String(), "/")
	}))
	must(v.RegisterValidation("envname", func(fl validator.FieldLevel) bool {
		return envNameRE.MatchString(fl.Field().String())
	}))
	must(v.RegisterValidation("globpattern", func(fl validator.FieldLevel) bool {
		return doublestar.ValidatePattern(filepath.ToSlash(fl.Field().String()))
	}))
	return v
})

// Validate checks a (defaulted) task against every rule and returns all the
// problems, or nil. Paths are the user's (json names); lines are 0, since a
// Task carries no source: ParseManifest fills them in. Status is not
// validated: the controller owns it.
func Validate(t *Task) ErrorList {
	var errs ErrorList
	add := func(path, rule, detail, value string) {
		errs = append(errs, &FieldError{Path: path, Rule: rule, Detail: detail, Value: value})
	}
	if err := validate().Struct(t); err != nil {
		var ves validator.ValidationErrors
		if !errors.As(err, &ves) {
			add("", "internal", "validation failed: "+err.Error(), "")
		}
		for _, fe := range ves {
			errs = append(errs, translate(fe))
		}
	}

	s := &t.Spec
	if len(s.Command) == 0 {
		add("spec.command", RuleRequired, "is required", "")
	} else if s.Command[0] == "" {
		add("spec.command[0]", RuleRequired, "must name the program to run", `""`)
	}

	var set []string
	if s.Items.Count != nil {
		set = append(set, "count")
	}
	if s.Items.Files != nil {
		set = append(set, "files")
		if len(s.Items.Files) == 0 {
			add("spec.items.files", RuleRequired, "must not be empty", "")
		}
	}
	if s.Items.Glob != "" {
		set = append(set, "glob")
	}
	switch len(set) {
	case 0:
		add("spec.items", RuleOneOf, "must set exactly one of count, files, glob", "none")
	case 1:
	default:
		add("spec.items", RuleOneOf, "must set exactly one of count, files, glob", strings.Join(set, " and "))
	}

	r := &s.Resources
	b := r.Batch
	n, known := ItemCount(*s)
	if known && len(set) == 1 {
		if b.Min > n {
			add("spec.resources.batch.min", RuleRange, fmt.Sprintf("must be <= the item count (%d)", n), itoa(b.Min))
		}
		if b.Max > n {
			add("spec.resources.batch.max", RuleRange, fmt.Sprintf("must be <= the item count (%d)", n), itoa(b.Max))
		}
	}
	if (b.Max != 0 || known) && b.Max < b.Min {
		add("spec.resources.batch.max", RuleRange, fmt.Sprintf("must be >= batch.min (%d)", b.Min), itoa(b.Max))
	}
	if r.MinThreads > r.Threads && r.Threads >= 1 {
		add("spec.resources.minThreads", RuleRange, fmt.Sprintf("must be <= threads (%d)", r.Threads), itoa(int64(r.MinThreads)))
	}
	for _, q := range []struct {
		path string
		q    *resource.Quantity
	}{
		{"spec.resources.fixed.memory", r.Fixed.Memory},
		{"spec.resources.fixed.gpuMemory", r.Fixed.GPUMemory},
		{"spec.resources.perItem.memory", r.PerItem.Memory},
		{"spec.resources.perItem.gpuMemory", r.PerItem.GPUMemory},
		{"spec.resources.perThread.memory", r.PerThread.Memory},
		{"spec.resources.perThread.gpuMemory", r.PerThread.GPUMemory},
		{"spec.resources.scratch", r.Scratch},
	} {
		if q.q != nil && q.q.Sign() < 0 {
			add(q.path, RuleRange, "must be >= 0", q.q.String())
		}
	}
	if r.Estimate == EstimateStrict {
		stated := false
		for _, q := range []*resource.Quantity{r.Fixed.Memory, r.PerItem.Memory, r.PerThread.Memory} {
			stated = stated || (q != nil && q.Sign() > 0)
		}
		if !stated {
			// Strict runs the declared costs only: with none it would
			// reserve 0 B, which no task ever does.
			add("spec.resources.estimate", RuleRequired, "strict needs a memory cost (fixed, perItem or perThread memory)", string(r.Estimate))
		}
	}
	if s.BatchTimeout != nil && s.BatchTimeout.Duration < 0 {
		add("spec.batchTimeout", RuleRange, "must be >= 0", s.BatchTimeout.Duration.String())
	}

	firstDep := map[string]int{}
	for i, dep := range s.DependsOn {
		p := "spec.dependsOn[" + strconv.Itoa(i) + "]"
		if j, dup := firstDep[dep]; dup {
			add(p, RuleUnique, fmt.Sprintf("must not repeat dependsOn[%d]", j), strconv.Quote(dep))
			continue
		}
		firstDep[dep] = i
		if dep != "" && dep == t.Metadata.Name {
			add(p, RuleSelfReference, "must not name the task itself", strconv.Quote(dep))
		}
	}
	if p := s.Pod; p != nil {
		firstVol := map[string]int{}
		firstMount := map[string]int{}
		for i, v := range p.Volumes {
			at := "spec.pod.volumes[" + strconv.Itoa(i) + "]"
			var kinds []string
			if v.ClaimName != "" {
				kinds = append(kinds, "claimName")
			}
			if v.HostPath != "" {
				kinds = append(kinds, "hostPath")
			}
			if v.EmptyDir {
				kinds = append(kinds, "emptyDir")
			}
			if len(kinds) != 1 {
				got := strings.Join(kinds, " and ")
				if got == "" {
					got = "none"
				}
				add(at, RuleOneOf, "must set exactly one of claimName, hostPath, emptyDir", got)
			}
			if j, dup := firstVol[v.Name]; dup && v.Name != "" {
				add(at+".name", RuleUnique, fmt.Sprintf("must not repeat volumes[%d].name", j), strconv.Quote(v.Name))
			} else {
				firstVol[v.Name] = i
			}
			if j, dup := firstMount[v.MountPath]; dup && v.MountPath != "" {
				add(at+".mountPath", RuleUnique, fmt.Sprintf("must not repeat volumes[%d].mountPath", j), strconv.Quote(v.MountPath))
			} else {
				firstMount[v.MountPath] = i
			}
			if v.MountPath == PodItemsDir || strings.HasPrefix(v.MountPath, PodItemsDir+"/") {
				add(at+".mountPath", RuleRange, "must not be "+PodItemsDir+": the batch's items are mounted there", strconv.Quote(v.MountPath))
			}
		}
	}
	firstEnv := map[string]int{}
	for i, e := range s.Env {
		if j, dup := firstEnv[e.Name]; dup && e.Name != "" {
			add("spec.env["+strconv.Itoa(i)+"].name", RuleUnique, fmt.Sprintf("must not repeat env[%d].name", j), strconv.Quote(e.Name))
			continue
		}
		firstEnv[e.Name] = i
	}
	return errs
}

// PodItemsDir is where a batch's Pod finds its items file ("items").
const PodItemsDir = "/var/run/lardon3d"

// PodPeakMemoryPrefix starts the line a batch Pod's wrapper
// (lardon3d-podwrap) appends to its container's termination message: the
// container's peak memory in bytes follows it.
const PodPeakMemoryPrefix = "lardon3d-peak-memory-bytes="

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// translate turns a validator error into a FieldError with the user's path.
func translate(fe validator.FieldError) *FieldError {
	path := fe.Namespace()
	if _, rest, ok := strings.Cut(path, "."); ok {
		path = rest // drop the root type name "Task"
	}
	e := &FieldError{Path: path, Value: formatValue(fe.Value())}
	switch fe.Tag() {
	case "required":
		e.Rule, e.Detail = RuleRequired, "is required"
		if strings.HasSuffix(path, "]") {
			e.Detail = "must not be empty"
		}
		if e.Value == `""` {
			e.Value = ""
		}
	case "eq":
		e.Rule, e.Detail = RuleEnum, "must be "+fe.Param()
	case "oneof":
		e.Rule, e.Detail = RuleEnum, "must be one of "+strings.ReplaceAll(fe.Param(), " ", "|")
	case "min":
		e.Rule, e.Detail = RuleRange, "must be >= "+fe.Param()
	case "max":
		e.Rule, e.Detail = RuleRange, "must be <= "+fe.Param()
	case "dnsname":
		e.Rule, e.Detail = RuleFormat, "must be a lower case name of at most "+strconv.Itoa(MaxNameLength)+" characters (a-z, 0-9, '-', '.'), starting and ending with a letter or digit"
	case "dnslabel":
		e.Rule, e.Detail = RuleFormat, "must be a lower case name of at most 63 characters (a-z, 0-9, '-'), starting and ending with a letter or digit"
	case "priority":
		e.Rule, e.Detail = RuleFormat, "must be an integer from -1000000000 to 1000000000 or the name of a priority class (a lower case name of at most 63 characters)"
	case "abspath":
		e.Rule, e.Detail = RuleFormat, "must be an absolute path"
	case "envname":
		e.Rule, e.Detail = RuleFormat, "must be a variable name (letters, digits, '_', not starting with a digit)"
	case "globpattern":
		e.Rule, e.Detail = RuleFormat, "must be a valid glob pattern (*, ?, [a-z], ** for any depth, {a,b} for alternatives)"
	default:
		e.Rule, e.Detail = fe.Tag(), "must satisfy "+fe.Tag()+" "+fe.Param()
	}
	return e
}

func formatValue(v any) string {
	if p, ok := v.(intstr.IntOrString); ok {
		return strconv.Quote(p.String())
	}
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return ""
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return ""
	}
	if rv.Kind() == reflect.String {
		s := rv.String()
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		return strconv.Quote(s)
	}
	return fmt.Sprint(rv.Interface())
}
