package v1alpha1

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// typesSource is types.go itself: its field doc comments become the
// schema's descriptions, so they cannot drift apart.
//
//go:embed types.go
var typesSource string

// SchemaID is the $id of the generated schema.
const SchemaID = "https://lardon3d.io/schemas/task.schema.json"

// quantityPattern is Kubernetes' quantity syntax without a sign (every
// quantity of a manifest is non-negative).
const quantityPattern = `^\+?` + quantityBody

// quantityBody is a quantity after its sign. Unlike resource.ParseQuantity,
// it requires a number: "Mi" and "." are not quantities.
const quantityBody = `(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// quantityRE is the quantity syntax the decoder accepts, sign included
// (validation then refuses negative values with a clear message).
var quantityRE = regexp.MustCompile(`^[+-]?` + quantityBody)

// durationPattern is Go's time.ParseDuration syntax without a sign.
const durationPattern = `^\+?((([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(ns|us|µs|ms|s|m|h))+$|^\+?0$`

// JSONSchema generates the JSON Schema (draft-07) of a Task manifest from
// the Go types: json names, required fields (those without omitempty),
// additionalProperties false, oneOf for items, enums for class and phase,
// bounds from the validate tags, and the field doc comments of types.go as
// descriptions. The output is deterministic and ends with a newline;
// schemas/task.schema.json is this output (make schemas).
func JSONSchema() ([]byte, error) {
	docs, err := fieldDocs(typesSource)
	if err != nil {
		return nil, fmt.Errorf("json schema: parse types.go: %w", err)
	}
	g := &schemaGen{docs: docs, defs: map[string]any{}}
	root := g.object(taskType)
	root["$schema"] = "http://json-schema.org/draft-07/schema#"
	root["$id"] = SchemaID
	root["title"] = "lardon3d Task"
	root["description"] = "A batch task dropped into the lardon3d-controller spool directory."
	root["definitions"] = g.defs
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return append(b, '\n'), nil
}

type schemaGen struct {
	docs map[string]map[string]string // type name → field name → doc
	defs map[string]any
}

// ref returns a $ref to the definition of struct type t, generating it once.
func (g *schemaGen) ref(t reflect.Type) map[string]any {
	name := t.Name()
	if t.PkgPath() != taskType.PkgPath() {
		name = strings.ReplaceAll(t.String(), ".", "_")
	}
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = nil // reserve: breaks recursion
		g.defs[name] = g.object(t)
	}
	return map[string]any{"$ref": "#/definitions/" + name}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s := g.schema(f.Type)
		applyValidateTag(s, f.Tag.Get("validate"))
		if t == taskType && name == "status" {
			// An empty "status:" is null; the user may leave it.
			s = map[string]any{"anyOf": []any{map[string]any{"type": "null"}, s}}
		}
		if (t == reflect.TypeFor[TaskSpec]() && name == "command") || (t == reflect.TypeFor[Items]() && name == "files") {
			s["minItems"] = 1
		}
		if doc := g.docs[t.Name()][f.Name]; doc != "" && t.PkgPath() == taskType.PkgPath() {
			if _, isRef := s["$ref"]; isRef {
				// draft-07 ignores siblings of $ref.
				s = map[string]any{"allOf": []any{s}}
			}
			s["description"] = doc
		}
		props[name] = s
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
	}
	o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		o["required"] = required
	}
	if t == reflect.TypeFor[Items]() {
		var one []any
		for _, k := range []string{"count", "files", "glob"} {
			one = append(one, map[string]any{"required": []string{k}})
		}
		o["oneOf"] = one
	}
	return o
}

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case quantityType:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string", "pattern": quantityPattern},
			map[string]any{"type": "number", "minimum": 0},
		}}
	case durationType:
		return map[string]any{"type": "string", "pattern": durationPattern}
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case reflect.TypeFor[TaskClass]():
		return map[string]any{"type": "string", "enum": Classes}
	case reflect.TypeFor[Phase]():
		return map[string]any{"type": "string", "enum": Phases}
	case reflect.TypeFor[EstimateMode]():
		return map[string]any{"type": "string", "enum": EstimateModes}
	}
	switch t.Kind() {
	case reflect.Struct:
		return g.ref(t)
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Int32:
		return map[string]any{"type": "integer", "minimum": -1 << 31, "maximum": 1<<31 - 1}
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	}
	return map[string]any{}
}

// applyValidateTag copies the bounds and enums of a validate tag that a
// JSON Schema can say.
func applyValidateTag(s map[string]any, tag string) {
	for _, rule := range strings.Split(tag, ",") {
		key, param, _ := strings.Cut(rule, "=")
		switch key {
		case "min", "max":
			n, err := strconv.ParseInt(param, 10, 64)
			if err != nil {
				continue
			}
			if s["type"] == "integer" {
				s[map[string]string{"min": "minimum", "max": "maximum"}[key]] = n
			}
		case "eq":
			if s["type"] == "string" {
				s["const"] = param
			}
		case "dnsname":
			s["pattern"] = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
			s["maxLength"] = MaxNameLength
		case "envname":
			s["pattern"] = envNameRE.String()
		}
	}
}

// withoutMarkers is a doc comment without its kubebuilder marker lines
// (+kubebuilder:...: the CRD's rules, not words for people).
func withoutMarkers(doc string) string {
	lines := strings.Split(doc, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "+") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// fieldDocs maps type name → field name → the field's doc comment.
func fieldDocs(src string) (map[string]map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		m := map[string]string{}
		for _, fld := range st.Fields.List {
			if fld.Doc == nil {
				continue
			}
			doc := strings.Join(strings.Fields(withoutMarkers(fld.Doc.Text())), " ")
			for _, name := range fld.Names {
				m[name.Name] = doc
			}
		}
		out[ts.Name.Name] = m
		return false
	})
	return out, nil
}
