package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// ErrNotRewritable is wrapped by every error of ReplaceStatus and
// SetSpecPaused that means "this file cannot be edited safely": it is not a
// single YAML mapping in block style, or its layout is one the byte-exact
// editor does not handle. Such a file is never rewritten.
var ErrNotRewritable = errors.New("manifest cannot be rewritten safely")

// statusKey and specKey are the top-level keys the editors touch.
const (
	statusKey = "status"
	specKey   = "spec"
	pausedKey = "paused"
)

// doc is a manifest parsed for byte-exact editing.
type doc struct {
	src []byte
	// lines[i] is the byte offset where line i+1 starts (yaml.Node lines are 1-based).
	lines []int
	root  *yamlv3.Node
	// indent is the byte indentation of the top-level keys.
	indent int
	// nl is the line ending the file uses ("\r\n" or "\n").
	nl string
}

func notRewritable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNotRewritable}, args...)...)
}

// parseDoc parses src as one YAML document holding a block mapping.
func parseDoc(src []byte) (*doc, error) {
	if !utf8.Valid(src) {
		return nil, notRewritable("not valid UTF-8")
	}
	// YAML also breaks lines at a lone CR, NEL, LS and PS; the byte-offset
	// arithmetic below only knows LF and CRLF, so refuse the rest.
	for i, c := range src {
		if c == '\r' && (i+1 >= len(src) || src[i+1] != '\n') {
			return nil, notRewritable("lone carriage return at byte %d", i)
		}
	}
	if bytes.Contains(src, []byte("\u0085")) || bytes.Contains(src, []byte("\u2028")) || bytes.Contains(src, []byte("\u2029")) {
		return nil, notRewritable("unicode line separator")
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(src))
	var n yamlv3.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, notRewritable("empty document")
		}
		return nil, notRewritable("%v", err)
	}
	var extra yamlv3.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, notRewritable("more than one YAML document")
	}
	if n.Kind != yamlv3.DocumentNode || len(n.Content) != 1 {
		return nil, notRewritable("not a YAML document")
	}
	root := n.Content[0]
	if root.Kind != yamlv3.MappingNode {
		return nil, notRewritable("top level is not a mapping")
	}
	if root.Style&yamlv3.FlowStyle != 0 {
		return nil, notRewritable("top-level mapping in flow style")
	}
	if len(root.Content) == 0 {
		return nil, notRewritable("empty top-level mapping")
	}
	d := &doc{src: src, root: root, nl: "\n"}
	d.lines = append(d.lines, 0)
	if bytes.HasPrefix(src, []byte("\ufeff")) {
		d.lines[0] = 3 // the reader skips the BOM; columns of line 1 start after it
	}
	for i, c := range src {
		if c == '\n' {
			d.lines = append(d.lines, i+1)
		}
	}
	if i := bytes.IndexByte(src, '\n'); i > 0 && src[i-1] == '\r' {
		d.nl = "\r\n"
	}
	first, err := d.keyOffset(root.Content[0])
	if err != nil {
		return nil, err
	}
	d.indent = first - d.lines[root.Content[0].Line-1]
	for i := 0; i < len(root.Content); i += 2 {
		k := root.Content[i]
		off, err := d.keyOffset(k)
		if err != nil {
			return nil, err
		}
		if off-d.lines[k.Line-1] != d.indent {
			return nil, notRewritable("line %d: top-level key not aligned", k.Line)
		}
	}
	return d, nil
}

// keyOffset returns the byte offset of a block-mapping key that must be the
// first thing on its line (only spaces before it).
func (d *doc) keyOffset(k *yamlv3.Node) (int, error) {
	if k.Line < 1 || k.Line > len(d.lines) || k.Column < 1 {
		return 0, notRewritable("key without position")
	}
	ls := d.lines[k.Line-1]
	off := ls + k.Column - 1
	if off > len(d.src) {
		return 0, notRewritable("line %d: key position out of range", k.Line)
	}
	for _, c := range d.src[ls:off] {
		if c != ' ' {
			return 0, notRewritable("line %d: key is not the first thing on its line", k.Line)
		}
	}
	return off, nil
}

// lineStartOf returns the start of the line holding byte off.
func (d *doc) lineStartOf(off int) int {
	i := bytes.LastIndexByte(d.src[:off], '\n')
	if i < 0 {
		if bytes.HasPrefix(d.src, []byte("\ufeff")) && off >= 3 {
			return 3
		}
		return 0
	}
	return i + 1
}

// docEnd returns where the document's content ends: the start of a
// document end (`...`) or start (`---`) marker after line, else len(src).
func (d *doc) docEnd(line int) int {
	for l := line; l < len(d.lines); l++ {
		s := d.lines[l]
		rest := d.src[s:]
		if bytes.HasPrefix(rest, []byte("...")) || bytes.HasPrefix(rest, []byte("---")) {
			if len(rest) == 3 || rest[3] == ' ' || rest[3] == '\t' || rest[3] == '\n' || rest[3] == '\r' {
				return s
			}
		}
	}
	return len(d.src)
}

// entryRange returns the byte range [start, end) of the top-level entry
// whose key is root.Content[i]: from the start of the key's line to the
// start of the next top-level key's line (or the document's end), minus the
// trailing blank lines and top-level comments, which belong to what follows.
func (d *doc) entryRange(i int) (start, end int, err error) {
	key := d.root.Content[i]
	off, err := d.keyOffset(key)
	if err != nil {
		return 0, 0, err
	}
	start = d.lines[key.Line-1]
	if i+2 < len(d.root.Content) {
		next := d.root.Content[i+2]
		if _, err := d.keyOffset(next); err != nil {
			return 0, 0, err
		}
		end = d.lines[next.Line-1]
	} else {
		end = d.docEnd(key.Line)
	}
	if end <= off {
		return 0, 0, notRewritable("line %d: entry shares its line with the next one", key.Line)
	}
	keyLineEnd := off
	if j := bytes.IndexByte(d.src[off:end], '\n'); j >= 0 {
		keyLineEnd = off + j + 1
	} else {
		keyLineEnd = end
	}
	for end > keyLineEnd {
		ls := d.lineStartOf(end - 1)
		if ls < keyLineEnd {
			break
		}
		line := bytes.TrimRight(d.src[ls:end], "\r\n")
		t := bytes.TrimLeft(line, " \t")
		if len(t) == 0 || (t[0] == '#' && len(line)-len(t) <= d.indent) {
			end = ls
			continue
		}
		break
	}
	return start, end, nil
}

// find returns the index in root.Content of the top-level key name, -1 when
// absent, or an error when it appears twice.
func find(m *yamlv3.Node, name string) (int, error) {
	at := -1
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind == yamlv3.ScalarNode && k.Value == name {
			if at >= 0 {
				return 0, notRewritable("key %q appears twice", name)
			}
			at = i
		}
	}
	return at, nil
}

// checkBlock is the self-check of the emitter: block, read the way every
// client reads a manifest (YAML to JSON), must be status's JSON form: one
// mapping whose only key is "status", holding the values json.Marshal
// gives for status (its numbers as the same JSON text).
func checkBlock(block []byte, status *v1alpha1.TaskStatus) error {
	j, err := yaml.YAMLToJSON(block)
	if err != nil {
		return notRewritable("self-check: status block does not decode: %v", err)
	}
	got, err := decodeJSON(j)
	m, ok := got.(map[string]any)
	if err != nil || !ok || len(m) != 1 {
		return notRewritable("self-check: status block is not one status entry")
	}
	want, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("marshal status: %w", err)
	}
	w, err := decodeJSON(want)
	if err != nil || !equalValues(m[statusKey], w) {
		return notRewritable("self-check: status block does not decode to the status")
	}
	return nil
}

// decodeJSON decodes data keeping numbers exact.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// edited is a status write-back: the new content, and where its status
// entry is (as statusRange(out) reports it), for the layout cache.
type edited struct {
	out        []byte
	start, end int
	// pad is the top-level indentation, nl the line ending.
	pad, nl string
}

// statusLayout is a version of a file whose status entry is known: the
// result of an earlier edit, whose user part (every byte but the status
// entry) passed the first write-back's self-check (replaceStatus).
type statusLayout struct {
	sum        [sha256.Size]byte
	start, end int
	pad, nl    string
}

func (e edited) layout() statusLayout {
	return statusLayout{sum: sha256.Sum256(e.out), start: e.start, end: e.end, pad: e.pad, nl: e.nl}
}

// userPart returns e.out without its status entry.
func (e edited) userPart() []byte { return splice(e.out, e.start, e.end, nil, nil) }

// ReplaceStatus returns src with its top-level status block replaced by
// status (or removed when status is nil), every other byte unchanged. An
// absent block is added at the end of the document. The status is written
// in block style, indented two spaces under "status:", with the file's line
// endings; a file without a final newline keeps none when status was its
// last entry.
//
// It fails, wrapping ErrNotRewritable, when src is not one YAML document
// holding a block mapping, or when the edited file would not decode to the
// same top-level values and the new status (a self-check that guards
// against anchors, odd layouts and bugs): such a file is never rewritten.
func ReplaceStatus(src []byte, status *v1alpha1.TaskStatus) ([]byte, error) {
	e, err := replaceStatus(src, status)
	return e.out, err
}

// replaceStatus is ReplaceStatus, with where the new status entry is.
func replaceStatus(src []byte, status *v1alpha1.TaskStatus) (edited, error) {
	return replaceStatusChecked(src, status, false)
}

// replaceStatusChecked is replaceStatus; full makes it check the edit by
// decoding the whole edited file even where the placeholder check of
// check.go applies (the tests compare the two).
func replaceStatusChecked(src []byte, status *v1alpha1.TaskStatus, full bool) (edited, error) {
	d, err := parseDoc(src)
	if err != nil {
		return edited{}, err
	}
	at, err := find(d.root, statusKey)
	if err != nil {
		return edited{}, err
	}
	pad := strings.Repeat(" ", d.indent)
	var block []byte
	if status != nil {
		if block, err = emitChecked(pad, d.nl, status); err != nil {
			return edited{}, err
		}
	}
	// The edit is src[:start] + lead + block + src[end:].
	var start, end int
	var lead []byte
	trim := false // block loses its final line ending (end of a file without one)
	if at >= 0 {
		if start, end, err = d.entryRange(at); err != nil {
			return edited{}, err
		}
		if end == len(src) && len(src) > 0 && src[len(src)-1] != '\n' {
			block = bytes.TrimSuffix(block, []byte(d.nl))
			trim = true
		}
	} else {
		if status == nil {
			return edited{out: src, start: len(src), end: len(src), pad: pad, nl: d.nl}, nil
		}
		last := d.root.Content[len(d.root.Content)-2]
		start = d.docEnd(last.Line)
		end = start
		if start > 0 && src[start-1] != '\n' {
			lead = []byte(d.nl)
		}
	}
	out := splice(src, start, end, lead, block)
	checked, want := out, func(m map[string]any) error {
		delete(m, statusKey)
		return nil
	}
	if status != nil {
		if ph, value, ok := placeholder(d, block, trim); ok && !full {
			// See placeholder: the same splice with a small block of the
			// same shape checks the user's part as the edited file would.
			checked = splice(src, start, end, lead, ph)
			want = func(m map[string]any) error {
				m[statusKey] = value
				return nil
			}
		} else {
			want = func(m map[string]any) error {
				var v map[string]any
				if err := yamlv3.Unmarshal(block, &v); err != nil {
					return fmt.Errorf("decode status: %w", err)
				}
				m[statusKey] = v[statusKey]
				return nil
			}
		}
	}
	if err := verify(d.root, checked, want); err != nil {
		return edited{}, err
	}
	start += len(lead)
	return edited{out: out, start: start, end: start + len(block), pad: pad, nl: d.nl}, nil
}

// replaceStatusAt is replaceStatus for a version of a file whose layout is
// known (l.sum is the SHA-256 of src, checked by the caller): the status
// entry is replaced at its known place without parsing the file again, and
// only the new block is checked, since the bytes around it are the ones
// that passed the whole-file check of replaceStatus.
func replaceStatusAt(src []byte, l statusLayout, status *v1alpha1.TaskStatus) (edited, error) {
	if status == nil || l.start > l.end || l.end > len(src) {
		return replaceStatus(src, status)
	}
	block, err := emitChecked(l.pad, l.nl, status)
	if err != nil {
		return edited{}, err
	}
	if l.end == len(src) && len(src) > 0 && src[len(src)-1] != '\n' {
		block = bytes.TrimSuffix(block, []byte(l.nl))
	}
	out := splice(src, l.start, l.end, nil, block)
	return edited{out: out, start: l.start, end: l.start + len(block), pad: l.pad, nl: l.nl}, nil
}

// SetSpecPaused returns src with spec.paused set to paused, every other
// byte unchanged: an existing plain scalar value is replaced in place, an
// absent key is added as the last entry of spec. It fails, wrapping
// ErrNotRewritable, when src has no block-style spec mapping, when
// spec.paused is not a plain scalar, or when the self-check fails.
func SetSpecPaused(src []byte, paused bool) ([]byte, error) {
	word := []byte("false")
	if paused {
		word = []byte("true")
	}
	return setSpecScalar(src, pausedKey, word, paused)
}

// SetSpecRetryToken returns src with spec.retryToken set to token, as
// SetSpecPaused does for spec.paused. token must be a plain YAML string
// (letters, digits, '-', '.', '_'), not one YAML reads as another type.
func SetSpecRetryToken(src []byte, token string) ([]byte, error) {
	return setSpecToken(src, retryTokenKey, token)
}

// SetSpecRestartToken returns src with spec.restartToken set to token, as
// SetSpecRetryToken does for spec.retryToken.
func SetSpecRestartToken(src []byte, token string) ([]byte, error) {
	return setSpecToken(src, restartTokenKey, token)
}

// setSpecToken sets spec.KEY to token, a plain YAML string.
func setSpecToken(src []byte, key, token string) ([]byte, error) {
	if !retryTokenRE().MatchString(token) {
		return nil, fmt.Errorf("%s %q: want letters first, then letters, digits, '-', '.', '_'", key, token)
	}
	return setSpecScalar(src, key, []byte(token), token)
}

// retryTokenRE is compiled on first use: its bounded repetition makes it
// some 850 allocations, which every start of the binary (each get, each
// verb) paid at package initialisation.
var retryTokenRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,62}$`)
})

const (
	retryTokenKey   = "retryToken"
	restartTokenKey = "restartToken"
)

// setSpecScalar sets spec.KEY to the plain scalar word, which decodes to
// value.
func setSpecScalar(src []byte, key string, word []byte, value any) ([]byte, error) {
	d, err := parseDoc(src)
	if err != nil {
		return nil, err
	}
	at, err := find(d.root, specKey)
	if err != nil {
		return nil, err
	}
	if at < 0 {
		return nil, notRewritable("no spec")
	}
	spec := d.root.Content[at+1]
	if spec.Kind != yamlv3.MappingNode || spec.Style&yamlv3.FlowStyle != 0 || len(spec.Content) == 0 {
		return nil, notRewritable("spec is not a block mapping")
	}
	pi, err := find(spec, key)
	if err != nil {
		return nil, err
	}
	var out []byte
	if pi >= 0 {
		v := spec.Content[pi+1]
		if v.Kind != yamlv3.ScalarNode || v.Style != 0 || v.Value == "" || v.Anchor != "" {
			return nil, notRewritable("spec.%s is not a plain scalar", key)
		}
		if v.Line < 1 || v.Line > len(d.lines) || v.Column < 1 {
			return nil, notRewritable("spec.%s without position", key)
		}
		off := d.lines[v.Line-1]
		for c := 1; c < v.Column; c++ {
			if off >= len(src) {
				return nil, notRewritable("spec.%s position out of range", key)
			}
			_, n := utf8.DecodeRune(src[off:])
			off += n
		}
		if !bytes.HasPrefix(src[off:], []byte(v.Value)) {
			return nil, notRewritable("line %d: spec.%s value not found", v.Line, key)
		}
		end := off + len(v.Value)
		if end < len(src) && !bytes.ContainsRune([]byte(" \t\r\n"), rune(src[end])) {
			return nil, notRewritable("line %d: spec.%s spans more than its text", v.Line, key)
		}
		out = splice(src, off, end, nil, word)
	} else {
		first := spec.Content[0]
		ko, err := d.keyOffset(first)
		if err != nil {
			return nil, err
		}
		indent := ko - d.lines[first.Line-1]
		if indent <= d.indent {
			return nil, notRewritable("line %d: spec entries not indented", first.Line)
		}
		_, end, err := d.entryRange(at)
		if err != nil {
			return nil, err
		}
		line := make([]byte, 0, indent+len(key)+len(word)+4)
		line = append(line, bytes.Repeat([]byte{' '}, indent)...)
		line = append(line, key+": "...)
		line = append(line, word...)
		var lead []byte
		if end > 0 && src[end-1] != '\n' {
			lead = []byte(d.nl) // end of a file without a final newline
		} else {
			line = append(line, d.nl...)
		}
		out = splice(src, end, end, lead, line)
	}
	if err := verify(d.root, out, func(m map[string]any) error {
		s, ok := m[specKey].(map[string]any)
		if !ok {
			return notRewritable("spec does not decode to a string-keyed mapping")
		}
		s[key] = value
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// splice returns src[:start] + lead + mid + src[end:] in a new slice.
func splice(src []byte, start, end int, lead, mid []byte) []byte {
	out := make([]byte, 0, len(src)-(end-start)+len(lead)+len(mid))
	out = append(out, src[:start]...)
	out = append(out, lead...)
	out = append(out, mid...)
	return append(out, src[end:]...)
}

// verify decodes src (the parsed original) and out, applies want to src's
// top-level mapping and checks that it equals out's (the edit changed
// exactly what it meant to) and that out converts to JSON as the reader
// needs.
func verify(src *yamlv3.Node, out []byte, want func(map[string]any) error) error {
	var before, after map[string]any
	if err := src.Decode(&before); err != nil {
		return notRewritable("decode: %v", err)
	}
	if err := want(before); err != nil {
		return err
	}
	if err := yamlv3.Unmarshal(out, &after); err != nil {
		return notRewritable("self-check: edited file does not decode: %v", err)
	}
	if !equalValues(before, after) {
		return notRewritable("self-check: edited file does not decode to the intended values")
	}
	// The reader (v1alpha1.ParseManifest, and every YAML-to-JSON client)
	// goes through JSON, which has no null, complex or duplicate-after-
	// conversion keys: a file it could not read back is not written.
	if _, err := yaml.YAMLToJSON(out); err != nil {
		return notRewritable("self-check: edited file has no JSON form: %v", err)
	}
	return nil
}

// equalMaps compares two decoded mappings with equalValues.
func equalMaps[K comparable](x, y map[K]any) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		w, ok := y[k]
		if !ok || !equalValues(v, w) {
			return false
		}
	}
	return true
}

// equalValues is reflect.DeepEqual where NaN equals NaN.
func equalValues(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		return ok && equalMaps(x, y)
	case map[any]any:
		y, ok := b.(map[any]any)
		return ok && equalMaps(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalValues(x[i], y[i]) {
				return false
			}
		}
		return true
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || (math.IsNaN(x) && math.IsNaN(y)))
	default:
		return reflect.DeepEqual(a, b)
	}
}

// statusRange reports the byte range of the status entry of src as
// ReplaceStatus sees it (start == end at the insertion point when absent).
// Tests use it to check that the bytes outside it are unchanged.
func statusRange(src []byte) (start, end int, err error) {
	d, err := parseDoc(src)
	if err != nil {
		return 0, 0, err
	}
	at, err := find(d.root, statusKey)
	if err != nil {
		return 0, 0, err
	}
	if at < 0 {
		p := d.docEnd(d.root.Content[len(d.root.Content)-2].Line)
		return p, p, nil
	}
	return d.entryRange(at)
}

// userContent returns src without its status entry: the part of the file
// the user owns. When src cannot be parsed for editing it is src itself.
func userContent(src []byte) []byte {
	if !MayHoldStatus(src) {
		return src // every new manifest: no parse at all
	}
	return userContentParsed(src)
}

// MayHoldStatus reports whether a YAML reading of src can find a key
// "status". A scalar's value is its bytes, but for the escapes of a
// double-quoted scalar (a backslash) and for UTF-16 text (NUL bytes in
// ASCII): without the word, a backslash or a NUL, no key is "status".
// (A !!binary key or an alias is no scalar "status" to find either.)
// False means that src holds no status entry at all.
// FuzzUserContentShortcut holds it to the parse.
func MayHoldStatus(src []byte) bool {
	return bytes.Contains(src, []byte(statusKey)) || bytes.IndexByte(src, '\\') >= 0 || bytes.IndexByte(src, 0) >= 0
}

// userContentParsed is userContent by a parse of src.
func userContentParsed(src []byte) []byte {
	start, end, err := statusRange(src)
	if err != nil || start == end {
		return src
	}
	return splice(src, start, end, nil, nil)
}
