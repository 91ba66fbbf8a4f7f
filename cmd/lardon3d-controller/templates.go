package main

// get -o jsonpath=TEMPLATE and -o custom-columns=SPEC (or
// custom-columns-file=FILE) print the objects -o json prints (the tasks,
// or {"items": [...]} for a list) through client-go's jsonpath, the
// package kubectl's printers evaluate templates with. kubectl's
// custom-columns printer itself is in k8s.io/kubectl (pkg/cmd/get), which
// brings k8s.io/cli-runtime, the API machinery's scheme and client-go's
// REST stack into a binary that links none of them
// (TestNodeVerbRunsTheCompanion; jsonpath alone is two small packages of
// client-go): the spec is parsed here as kubectl parses it, and each
// column evaluated with jsonpath as kubectl evaluates it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"

	"k8s.io/client-go/util/jsonpath"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// The -o values that take a template, before their argument.
const (
	outputJSONPath        = "jsonpath="
	outputColumns         = "custom-columns="
	outputColumnsFromFile = "custom-columns-file="
)

// templateOutput reports whether output is one of the -o values that
// take a template.
func templateOutput(output string) bool {
	for _, p := range []string{outputJSONPath, outputColumns, outputColumnsFromFile} {
		if strings.HasPrefix(output, p) {
			return true
		}
	}
	return false
}

// columnsOutput reports whether output prints custom columns.
func columnsOutput(output string) bool {
	return strings.HasPrefix(output, outputColumns) || strings.HasPrefix(output, outputColumnsFromFile)
}

// column is a custom column: its header and the jsonpath of its cells.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseTemplate parses a template -o value: the jsonpath of -o jsonpath=,
// or the columns of -o custom-columns=, one of which is nil. An error is
// a usage error.
func parseTemplate(output string) (*jsonpath.JSONPath, []column, error) {
	if tmpl, ok := strings.CutPrefix(output, outputJSONPath); ok {
		// kubectl get's --allow-missing-template-keys defaults to true.
		jp := jsonpath.New("output").AllowMissingKeys(true)
		if err := jp.Parse(tmpl); err != nil {
			return nil, nil, fmt.Errorf("-o jsonpath: error parsing %q: %w", tmpl, err)
		}
		return jp, nil, nil
	}
	var headers, paths []string
	if file, ok := strings.CutPrefix(output, outputColumnsFromFile); ok {
		var err error
		if headers, paths, err = readColumnsFile(file); err != nil {
			return nil, nil, fmt.Errorf("-o custom-columns-file: %w", err)
		}
	} else {
		spec, _ := strings.CutPrefix(output, outputColumns)
		if spec == "" {
			return nil, nil, errors.New("-o custom-columns= needs a spec: HEADER:.json.path,... (custom-columns=NAME:.metadata.name,PHASE:.status.phase)")
		}
		for _, part := range strings.Split(spec, ",") {
			header, path, ok := strings.Cut(part, ":")
			if !ok {
				return nil, nil, fmt.Errorf("-o custom-columns: unexpected spec %q, expected <header>:<json-path-expr>", part)
			}
			headers, paths = append(headers, header), append(paths, path)
		}
	}
	cols := make([]column, len(headers))
	for i := range headers {
		expr, err := relaxedJSONPath(paths[i])
		if err != nil {
			return nil, nil, fmt.Errorf("-o custom-columns: column %s: %w", headers[i], err)
		}
		jp := jsonpath.New(fmt.Sprintf("column%d", i)).AllowMissingKeys(true)
		if err := jp.Parse(expr); err != nil {
			return nil, nil, fmt.Errorf("-o custom-columns: column %s: error parsing %q: %w", headers[i], paths[i], err)
		}
		cols[i] = column{header: headers[i], path: jp}
	}
	return nil, cols, nil
}

// readColumnsFile reads a custom-columns file as kubectl does: a line of
// headers, then a line of as many paths, separated by white space.
func readColumnsFile(file string) (headers, paths []string, err error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return nil, nil, fmt.Errorf("%s: missing header line; want a line of headers, then a line of as many paths, separated by white space", file)
	}
	headers = strings.Fields(sc.Text())
	if !sc.Scan() {
		return nil, nil, fmt.Errorf("%s: missing spec line; want a line of headers, then a line of as many paths, separated by white space", file)
	}
	paths = strings.Fields(sc.Text())
	if len(headers) != len(paths) {
		return nil, nil, fmt.Errorf("%s: %d headers and %d paths", file, len(headers), len(paths))
	}
	return headers, paths, nil
}

// relaxedPath is what a custom column's path may be: name1.name2,
// .name1.name2, {name1.name2} or {.name1.name2}.
var relaxedPath = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// relaxedJSONPath is a custom column's path as a jsonpath template,
// {.name1.name2}, as kubectl's RelaxedJSONPathExpression makes it.
func relaxedJSONPath(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	m := relaxedPath.FindStringSubmatch(path)
	if m == nil {
		return "", fmt.Errorf("unexpected path %q, expected name1.name2, .name1.name2, {name1.name2} or {.name1.name2}", path)
	}
	if m[1] != "" {
		return "{." + m[1] + "}", nil
	}
	return "{." + m[2] + "}", nil
}

// renderTemplate prints files' tasks through the template of output: as
// -o json would print them (the one task of a single name, else a list),
// for a jsonpath; a row per task, under a header unless noHeaders, for
// custom columns.
func renderTemplate(w io.Writer, p *tablePrinter, files []listing.File, output string, noHeaders, single bool) error {
	jp, cols, err := parseTemplate(output)
	if err != nil {
		return err
	}
	var tasks []*v1alpha1.Task
	for _, f := range files {
		if f.Task != nil {
			tasks = append(tasks, f.Task)
		}
	}
	if jp != nil {
		obj, err := jsonObject(listObject(tasks, single))
		if err != nil {
			return err
		}
		if err := jp.Execute(w, obj); err != nil {
			return fmt.Errorf("error executing jsonpath %q: %w", strings.TrimPrefix(output, outputJSONPath), err)
		}
		return nil
	}
	var lines []string
	if !noHeaders {
		headers := make([]string, len(cols))
		for i, c := range cols {
			headers[i] = cell(c.header)
		}
		lines = append(lines, strings.Join(headers, "\t"))
	}
	for _, t := range tasks {
		obj, err := jsonObject(t)
		if err != nil {
			return err
		}
		cells := make([]string, len(cols))
		for i, c := range cols {
			if cells[i], err = columnCell(c.path, obj); err != nil {
				return fmt.Errorf("column %s: %w", c.header, err)
			}
		}
		lines = append(lines, strings.Join(cells, "\t"))
	}
	_, err = io.WriteString(w, p.lay(lines))
	return err
}

// columnCell is a custom column's cell of obj, as kubectl prints it: the
// values found, comma-separated, or <none>.
func columnCell(path *jsonpath.JSONPath, obj any) (string, error) {
	results, err := path.FindResults(obj)
	if err != nil {
		return "", err
	}
	var values []string
	for _, r := range results {
		for _, v := range r {
			values = append(values, cell(fmt.Sprint(printable(v))))
		}
	}
	if len(values) == 0 {
		return "<none>", nil
	}
	return strings.Join(values, ","), nil
}

// printable is v's value, or nil for an invalid one.
func printable(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	return v.Interface()
}

// listObject is what -o json prints of tasks: the one task of a single
// name, else a list of them.
func listObject(tasks []*v1alpha1.Task, single bool) any {
	if single && len(tasks) == 1 {
		return tasks[0]
	}
	if tasks == nil {
		tasks = []*v1alpha1.Task{}
	}
	return map[string]any{"items": tasks}
}

// jsonObject is v as JSON decodes it, as kubectl's printers see an
// object: maps, slices, strings, bools, and numbers as int64 when whole
// (a memory amount prints 1073741824, not 1.073741824e+09) else float64.
func jsonObject(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return wholeNumbers(out), nil
}

// wholeNumbers replaces the json.Numbers in v by int64 or float64.
func wholeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = wholeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = wholeNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
