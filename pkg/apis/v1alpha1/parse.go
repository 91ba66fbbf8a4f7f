package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// Sentinel causes wrapped in a *SyntaxError.
var (
	// ErrEmptyManifest: the file holds no YAML document (empty, or only comments).
	ErrEmptyManifest = errors.New("empty manifest")
	// ErrNotMapping: the document is YAML but not a mapping, so it cannot be a Task.
	ErrNotMapping = errors.New("manifest is not a YAML mapping")
	// errTooComplex: aliases expand beyond maxNodes (a "billion laughs" file).
	errTooComplex = errors.New("manifest too complex: too many nodes after alias expansion")
)

// maxNodes bounds the nodes visited while decoding, aliases expanded. A var
// so that a test can lower it.
var maxNodes = 200_000

// ParseManifest decodes a manifest strictly, applies defaults (the name from
// fileName) and validates it.
//
// Errors: a *SyntaxError when data is not parseable YAML, is empty, or is
// not a mapping (such a file must never be rewritten); an ErrorList when it
// parses but breaks the schema (unknown field, duplicate key, wrong type,
// more than one document) or a rule (the task is then Rejected with reason
// InvalidSpec). The ErrorList holds every problem of the file, each with
// its line when known. On an ErrorList the returned Task is non-nil and
// holds whatever could be decoded (offending values dropped, defaults
// applied), so that its status can still be written.
//
// Decoding follows YAML 1.2 (yes/no/on/off are strings, not booleans), like
// editors do. Fields the user wrote explicitly as 0 (batch.min, batch.max,
// threads, minThreads) are not defaulted, so that a written 0 is reported.
func ParseManifest(fileName string, data []byte) (*Task, error) {
	root, err := parseRoot(data)
	if err != nil {
		return nil, err
	}
	d := &decoder{lines: map[string]int{}, present: map[string]bool{}, seen: map[*yaml.Node]int{}}
	if root.extra != nil {
		d.fail(&FieldError{Rule: RuleDocument, Detail: "a manifest holds exactly one Task, found another YAML document", Line: root.extra.Line})
	}
	tree, _ := d.value(root.node, taskType, "")
	t := &Task{}
	raw, err := json.Marshal(tree)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(t)
	}
	if err != nil {
		// The walk admits only what json decodes; reaching here is a bug
		// in the walk, reported rather than hidden.
		d.fail(&FieldError{Rule: RuleType, Detail: "cannot decode: " + err.Error()})
	}
	applyDefaults(t, fileName, func(path string) bool { return d.present[path] })
	for _, e := range Validate(t) {
		if d.suppressed(e.Path) {
			continue
		}
		e.Line = d.line(e.Path)
		d.errs = append(d.errs, e)
	}
	if len(d.errs) == 0 {
		return t, nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i].Line, d.errs[j].Line
		if (a == 0) != (b == 0) {
			return b == 0
		}
		return a < b
	})
	if d.spent != nil {
		// The budget error explains the others: show it first.
		rest := slices.DeleteFunc(slices.Clone(d.errs), func(e *FieldError) bool { return e == d.spent })
		d.errs = append(ErrorList{d.spent}, rest...)
	}
	if n := len(d.errs); n > MaxErrors {
		d.errs = append(d.errs[:MaxErrors:MaxErrors], &FieldError{
			Rule:   RuleTooMany,
			Detail: fmt.Sprintf("and %d more errors not shown", n-MaxErrors),
		})
	}
	return t, d.errs
}

// MaxErrors is the most problems ParseManifest lists for one file; beyond,
// a last entry with rule RuleTooMany counts the rest.
const MaxErrors = 50

// SyntaxError reports a manifest that is not parseable YAML.
//
// +kubebuilder:object:generate=false
type SyntaxError struct {
	// Line is the 1-based line of the error, 0 when unknown.
	Line int
	// Err is the parser's error.
	Err error
}

func (e *SyntaxError) Error() string { return "not parseable YAML: " + e.Err.Error() }

// Unwrap returns the parser's error.
func (e *SyntaxError) Unwrap() error { return e.Err }

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

type parsedRoot struct {
	node  *yaml.Node // the top mapping
	extra *yaml.Node // a second document, if any
}

// parseRoot parses data into a node tree and checks it is one mapping.
func parseRoot(data []byte) (parsedRoot, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return parsedRoot{}, &SyntaxError{Err: ErrEmptyManifest}
		}
		return parsedRoot{}, syntaxError(err)
	}
	var r parsedRoot
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return parsedRoot{}, syntaxError(err)
	default:
		r.extra = &second
	}
	n := &doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
			return parsedRoot{}, &SyntaxError{Line: n.Line, Err: ErrEmptyManifest}
		}
		return parsedRoot{}, &SyntaxError{Line: n.Line, Err: ErrNotMapping}
	}
	r.node = n
	return r, nil
}

func syntaxError(err error) *SyntaxError {
	se := &SyntaxError{Err: err}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		se.Line, _ = strconv.Atoi(m[1])
	}
	return se
}

var (
	taskType     = reflect.TypeFor[Task]()
	quantityType = reflect.TypeFor[resource.Quantity]()
	durationType = reflect.TypeFor[metav1.Duration]()
	// intOrStringType is spec.priority's: an integer or a name.
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	timeType        = reflect.TypeFor[metav1.Time]()
)

// decoder walks a YAML node tree along a Go type, collecting every schema
// problem with its line, and builds a JSON-shaped tree holding only the
// values that fit (the rest is dropped and its path remembered).
type decoder struct {
	errs    ErrorList
	lines   map[string]int     // path → line of its key or element
	present map[string]bool    // paths holding a non-null value
	bad     []string           // paths whose value was dropped
	seen    map[*yaml.Node]int // alias expansion depth guard
	nodes   int
	spent   *FieldError // the node budget error, once spent
}

func (d *decoder) fail(e *FieldError) { d.errs = append(d.errs, e) }

// tooComplex reports, once, that the node budget is spent.
func (d *decoder) tooComplex(path string, n *yaml.Node) {
	if d.spent == nil {
		d.failAt(path, n, RuleType, errTooComplex.Error(), "")
		d.spent = d.errs[len(d.errs)-1]
	}
	d.bad = append(d.bad, path)
}

func (d *decoder) failAt(path string, n *yaml.Node, rule, detail, value string) {
	d.bad = append(d.bad, path)
	d.fail(&FieldError{Path: path, Rule: rule, Detail: detail, Value: value, Line: n.Line})
}

// suppressed reports whether a validation error at path is a consequence of
// a value dropped by the walk (the path, one of its ancestors or one of its
// descendants was dropped).
func (d *decoder) suppressed(path string) bool {
	for _, b := range d.bad {
		if related(path, b) || related(b, path) {
			return true
		}
	}
	return false
}

// related reports whether anc is path or an ancestor of it.
func related(anc, path string) bool {
	if !strings.HasPrefix(path, anc) {
		return false
	}
	if len(path) == len(anc) || anc == "" {
		return true
	}
	c := path[len(anc)]
	return c == '.' || c == '['
}

// line returns the line of path, or of its nearest ancestor that was written.
func (d *decoder) line(path string) int {
	for {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return 0
		}
		path = path[:i]
	}
}

// value converts n to a JSON-shaped value for type t. ok is false when the
// value does not fit and was reported.
func (d *decoder) value(n *yaml.Node, t reflect.Type, path string) (v any, ok bool) {
	if d.nodes++; d.nodes > maxNodes {
		d.tooComplex(path, n)
		return nil, false
	}
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil || d.seen[n] > 0 {
			d.failAt(path, n, RuleType, "alias refers to itself", "")
			return nil, false
		}
		d.seen[n]++
		defer func(a *yaml.Node) { d.seen[a]-- }(n)
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, true
	}
	if path != "" {
		d.present[path] = true
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case quantityType:
		return d.quantity(n, path)
	case intOrStringType:
		if n.Kind == yaml.ScalarNode {
			var i int64
			switch {
			case n.ShortTag() == "!!int" && n.Decode(&i) == nil && i >= -MaxPriority && i <= MaxPriority:
				return i, true
			case n.ShortTag() == "!!str":
				return n.Value, true
			}
		}
		return d.typeError(n, path, "an integer from -1000000000 to 1000000000 or the name of a priority class")
	case durationType:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			if _, err := time.ParseDuration(n.Value); err == nil {
				return n.Value, true
			}
		}
		return d.typeError(n, path, "a duration such as 90s, 30m or 2h")
	case timeType:
		if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!str" || n.ShortTag() == "!!timestamp") {
			if _, err := time.Parse(time.RFC3339, n.Value); err == nil {
				return n.Value, true
			}
		}
		return d.typeError(n, path, "an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	switch t.Kind() {
	case reflect.Struct:
		return d.object(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if t.Elem().Kind() == reflect.String {
				return d.typeError(n, path, "a list of strings")
			}
			return d.typeError(n, path, "a list")
		}
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			d.lines[p] = c.Line
			if cv, ok := d.value(c, t.Elem(), p); ok {
				out[i] = cv
			}
		}
		return out, true
	case reflect.Map:
		return d.stringMap(n, t, path)
	case reflect.String:
		if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!str" || n.ShortTag() == "!!timestamp") {
			return n.Value, true
		}
		return d.typeError(n, path, "a string (quote values such as \"true\" or \"1\")")
	case reflect.Bool:
		var b bool
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" && n.Decode(&b) == nil {
			return b, true
		}
		return d.typeError(n, path, "a boolean (true or false)")
	case reflect.Int, reflect.Int32, reflect.Int64:
		var i int64
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && n.Decode(&i) == nil {
			bits := t.Bits()
			if i >= -(1<<(bits-1)) && i <= 1<<(bits-1)-1 {
				return i, true
			}
		}
		return d.typeError(n, path, fmt.Sprintf("an integer of %d bits", t.Bits()))
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		var u uint64
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && n.Decode(&u) == nil {
			if t.Bits() == 64 || u < 1<<t.Bits() {
				return u, true
			}
		}
		return d.typeError(n, path, fmt.Sprintf("a non-negative integer of %d bits", t.Bits()))
	case reflect.Float32, reflect.Float64:
		var f float64
		if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!float" || n.ShortTag() == "!!int") && n.Decode(&f) == nil {
			return f, true
		}
		return d.typeError(n, path, "a number")
	}
	return d.typeError(n, path, "a value of Go type "+t.String())
}

func (d *decoder) quantity(n *yaml.Node, path string) (any, bool) {
	if n.Kind == yaml.ScalarNode {
		s := n.Value
		switch n.ShortTag() {
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				s = strconv.FormatInt(i, 10)
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil {
				s = strconv.FormatFloat(f, 'g', -1, 64)
			}
		case "!!str":
		default:
			s = ""
		}
		if quantityRE.MatchString(s) {
			if _, err := resource.ParseQuantity(s); err == nil {
				return s, true
			}
		}
	}
	want := "a quantity such as 512Mi, 4Gi or 1.5G"
	if sug, ok := QuantitySuggestion(n.Value); ok && n.Kind == yaml.ScalarNode {
		want += " (did you mean " + sug + "?)"
	}
	return d.typeError(n, path, want)
}

func (d *decoder) typeError(n *yaml.Node, path, want string) (any, bool) {
	d.failAt(path, n, RuleType, "must be "+want, describeNode(n))
	return nil, false
}

// describeNode shows a node in an error message.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 60 {
			v = v[:57] + "..."
		}
		if n.ShortTag() == "!!str" {
			return strconv.Quote(v)
		}
		return v
	}
	return "an alias"
}

// mapEntries walks the pairs of a mapping node, reporting duplicate and
// non-scalar keys, and calls fn for every other pair.
func (d *decoder) mapEntries(n *yaml.Node, path string, child func(key string) string, fn func(key string, k, v *yaml.Node)) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if d.nodes++; d.nodes > maxNodes {
			d.tooComplex(path, n)
			return
		}
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.failAt(path, k, RuleType, "keys must be strings", describeNode(k))
			continue
		}
		if at, dup := first[k.Value]; dup {
			d.failAt(child(k.Value), k, RuleDuplicateKey, fmt.Sprintf("duplicate key, first written at line %d", at), "")
			continue
		}
		first[k.Value] = k.Line
		fn(k.Value, k, v)
	}
}

func (d *decoder) object(n *yaml.Node, t reflect.Type, path string) (any, bool) {
	if n.Kind != yaml.MappingNode {
		return d.typeError(n, path, "a mapping")
	}
	fields := jsonFields(t)
	child := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	out := map[string]any{}
	d.mapEntries(n, path, child, func(key string, k, v *yaml.Node) {
		p := child(key)
		f, ok := fields[key]
		if !ok {
			d.failAt(p, k, RuleUnknownField, unknownFieldDetail(key, fields), "")
			return
		}
		d.lines[p] = k.Line
		if val, ok := d.value(v, f.Type, p); ok {
			out[key] = val
		}
	})
	return out, true
}

func (d *decoder) stringMap(n *yaml.Node, t reflect.Type, path string) (any, bool) {
	if n.Kind != yaml.MappingNode {
		return d.typeError(n, path, "a mapping")
	}
	child := func(key string) string { return path + "[" + key + "]" }
	out := map[string]any{}
	d.mapEntries(n, path, child, func(key string, k, v *yaml.Node) {
		p := child(key)
		d.lines[p] = k.Line
		if val, ok := d.value(v, t.Elem(), p); ok {
			out[key] = val
		}
	})
	return out, true
}

// jsonField is a struct field seen through its json tag.
type jsonField struct {
	Name      string
	Type      reflect.Type
	OmitEmpty bool
	Index     int
}

// fieldsOf caches jsonFields per struct type (read-only once stored).
var fieldsOf sync.Map // reflect.Type -> map[string]jsonField

// jsonFields maps the json names of t's exported fields to the fields; the
// map is shared, never to be modified.
func jsonFields(t reflect.Type) map[string]jsonField {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]jsonField)
	}
	m, _ := fieldsOf.LoadOrStore(t, computeJSONFields(t))
	return m.(map[string]jsonField)
}

func computeJSONFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{
			Name:      name,
			Type:      f.Type,
			OmitEmpty: strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero"),
			Index:     i,
		}
	}
	return out
}

// unknownFieldDetail names the closest known field when there is one.
func unknownFieldDetail(key string, fields map[string]jsonField) string {
	best, bestDist := "", 3
	for name := range fields {
		dist := EditDistance(strings.ToLower(key), strings.ToLower(name))
		if dist < bestDist || (dist == bestDist && name < best) {
			best, bestDist = name, dist
		}
	}
	if best != "" {
		return "unknown field, did you mean " + best + "?"
	}
	return "unknown field"
}

// ClosestName is the candidate nearest to name, if one is near enough to
// be a typo of it: at most max(2, len/3) edits away. Ties go to the first
// in sorted order, so the suggestion does not depend on the candidates'
// order.
func ClosestName(name string, candidates []string) (string, bool) {
	limit := max(2, len([]rune(name))/3)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if c == name {
			continue
		}
		if d := EditDistance(name, c); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best, best != ""
}

// EditDistance is the Levenshtein distance between a and b, in runes: the
// measure of every "did you mean" (fields here, task names in the command
// line).
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
