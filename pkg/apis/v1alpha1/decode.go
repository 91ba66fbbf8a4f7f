package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// DecodeStrict decodes a YAML document into out (a pointer to a struct with
// json tags) with the manifest's own walk: every unknown key (with a "did
// you mean"), duplicate key and wrongly typed value is reported with its
// line, all at once, as an ErrorList. It applies no defaults and no
// validation: the controller's --config file uses it.
func DecodeStrict(data []byte, out any) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("DecodeStrict: want a pointer to a struct, got %T", out)
	}
	root, err := parseRoot(data)
	if err != nil {
		return err
	}
	d := &decoder{lines: map[string]int{}, present: map[string]bool{}, seen: map[*yaml.Node]int{}}
	if root.extra != nil {
		d.fail(&FieldError{Rule: RuleDocument, Detail: "the file holds exactly one YAML document, found another", Line: root.extra.Line})
	}
	tree, _ := d.value(root.node, rv.Elem().Type(), "")
	raw, err := json.Marshal(tree)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(out)
	}
	if err != nil {
		d.fail(&FieldError{Rule: RuleType, Detail: "cannot decode: " + err.Error()})
	}
	sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
	return d.errs.Err()
}

// unitPrefixes maps a lower-case unit letter to its decimal suffix.
var unitPrefixes = map[byte]string{'k': "k", 'm': "M", 'g': "G", 't': "T", 'p': "P", 'e': "E"}

// QuantityForms says what a quantity may look like, for error messages.
const QuantityForms = "a number, optionally with a binary suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or a decimal one k, M, G, T, P, E (powers of 1000), e.g. 512Mi, 8Gi or 1.5G"

// QuantitySuggestion guesses what a mistyped quantity meant: "4Gi" for
// "4GB", "4gb", "4 GiB" or "4g", "512Mi" for "512MB". ok is false when s
// looks like no quantity at all.
func QuantitySuggestion(s string) (string, bool) {
	t := strings.ReplaceAll(strings.TrimSpace(s), " ", "")
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || (i == 0 && (t[i] == '+' || t[i] == '-'))) {
		i++
	}
	num, unit := t[:i], strings.ToLower(t[i:])
	if num == "" || strings.Trim(num, "+-.") == "" {
		return "", false
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "b"), "i")
	if unit == "" {
		return "", false // "4B" is 4 bytes; no better guess
	}
	if len(unit) != 1 {
		return "", false
	}
	p, ok := unitPrefixes[unit[0]]
	if !ok {
		return "", false
	}
	out := num + strings.ToUpper(p) + "i"
	if _, err := resource.ParseQuantity(out); err != nil {
		return "", false
	}
	return out, true
}

// QuantityError explains why s is not a quantity: the forms accepted and,
// when one is likely, the quantity meant.
func QuantityError(s string) string {
	msg := "not a quantity; want " + QuantityForms
	if sug, ok := QuantitySuggestion(s); ok {
		q := mustQuantity(sug)
		msg = fmt.Sprintf("not a quantity; did you mean %s (%s bytes)? Want %s", sug, groupDigits(q.Value()), QuantityForms)
	}
	return msg
}

func mustQuantity(s string) resource.Quantity {
	q, _ := resource.ParseQuantity(s)
	return q
}

// groupDigits writes n with thin groups of three digits: 4,294,967,296.
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// RuleSmallQuantity: a memory amount below 1 KiB, almost always a number
// written without its unit (100 for 100Mi). A warning, not an error.
const RuleSmallQuantity = "smallQuantity"

// SmallMemory is the bound below which a memory amount is likely a
// missing unit.
const SmallMemory = 1024

// SmallMemoryWarning explains that q, of the field path, is likely a
// number missing its unit; "" when q is 0 or at least SmallMemory bytes.
func SmallMemoryWarning(q resource.Quantity) string {
	v := q.Value()
	if v <= 0 || v >= SmallMemory {
		return ""
	}
	return fmt.Sprintf("is only %d bytes, likely a number missing its unit (did you mean %dMi or %dGi?)", v, v, v)
}

// Warnings lists what is legal in t but almost certainly a mistake: a
// memory, GPU memory or scratch amount below 1 KiB (a number without its
// unit). The controller runs such a task as written.
func Warnings(t *Task) ErrorList {
	var out ErrorList
	check := func(path string, q *resource.Quantity) {
		if q == nil {
			return
		}
		if w := SmallMemoryWarning(*q); w != "" {
			out = append(out, &FieldError{Path: path, Rule: RuleSmallQuantity, Detail: w})
		}
	}
	r := t.Spec.Resources
	for _, c := range []struct {
		name string
		cost Cost
	}{{"fixed", r.Fixed}, {"perItem", r.PerItem}, {"perThread", r.PerThread}} {
		check("spec.resources."+c.name+".memory", c.cost.Memory)
		check("spec.resources."+c.name+".gpuMemory", c.cost.GPUMemory)
	}
	check("spec.resources.scratch", r.Scratch)
	return out
}
