package spool

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The status block is ours and has a fixed shape, so it is emitted
// directly (no YAML -> JSON -> YAML round trip). The output is what
// sigs.k8s.io/yaml.Marshal gave for the same status, field for field: the
// JSON field names in sorted order, the same omitempty rules, block style,
// sequences not indented under their key. Scalars are plain only when
// every YAML 1.1 and 1.2 reader takes them for the same string; anything
// else is a one-line double-quoted string. Every line of the block but
// "status:" is indented deeper than the top-level keys and none is blank
// or a comment, which the layout cache of write-back relies on.

// emitter appends a status block to buf.
type emitter struct {
	buf    []byte
	pad    string // the top-level indentation
	nl     string
	indent int // current depth below status (in steps of two spaces)
	// seqItem: the next key starts a sequence item ("- ").
	seqItem bool
	// shape, when not nil, gets the block with each scalar replaced by
	// its kind (see blockShape).
	shape []byte
}

// The kinds of scalar in a block's shape.
const (
	shapePlain  = 'P' // a string, plain (appendScalar)
	shapeQuoted = 'Q' // a string, double-quoted (appendScalar)
	shapeInt    = 'I'
	shapeTime   = 'T' // a time, double-quoted RFC 3339
	shapeNull   = 'N'
)

// appendStatusBlock appends "status:" and status, in block style, indented
// under pad, with line ending nl.
func appendStatusBlock(buf []byte, pad, nl string, st *v1alpha1.TaskStatus) []byte {
	block, _ := appendStatusBlockShape(buf, nil, pad, nl, st)
	return block
}

// appendStatusBlockShape is appendStatusBlock that also appends the
// block's shape to shape: the same bytes with every scalar replaced by its
// kind (shapePlain...), so that two blocks of one shape differ only in
// the values of their scalars.
func appendStatusBlockShape(buf, shape []byte, pad, nl string, st *v1alpha1.TaskStatus) (block, blockShape []byte) {
	e := &emitter{buf: buf, pad: pad, nl: nl, shape: shape}
	start := len(e.buf)
	e.buf = append(e.buf, pad...)
	e.buf = append(e.buf, "status:"...)
	e.mirror(start)
	e.end()
	e.indent = 1
	e.status(st)
	return e.buf, e.shape
}

// mirror copies what was appended to buf since start into the shape.
func (e *emitter) mirror(start int) {
	if e.shape != nil {
		e.shape = append(e.shape, e.buf[start:]...)
	}
}

// kind records a scalar of kind k in the shape.
func (e *emitter) kind(k byte) {
	if e.shape != nil {
		e.shape = append(e.shape, k)
	}
}

// key starts a line "key:" at the current depth.
func (e *emitter) key(k string) {
	start := len(e.buf)
	defer e.mirror(start)
	e.buf = append(e.buf, e.pad...)
	for i := 0; i < e.indent; i++ {
		if i == e.indent-1 && e.seqItem {
			e.buf = append(e.buf, "- "...)
			e.seqItem = false
			continue
		}
		e.buf = append(e.buf, "  "...)
	}
	e.buf = append(e.buf, k...)
	e.buf = append(e.buf, ':')
}

func (e *emitter) end() {
	e.buf = append(e.buf, e.nl...)
	if e.shape != nil {
		e.shape = append(e.shape, e.nl...)
	}
}

func (e *emitter) str(k, v string) {
	e.key(k)
	e.buf = append(e.buf, ' ')
	if plainSafe(v) {
		e.buf = append(e.buf, v...)
		e.kind(shapePlain)
	} else {
		e.buf = appendDoubleQuoted(e.buf, v)
		e.kind(shapeQuoted)
	}
	e.end()
}

func (e *emitter) strOmit(k, v string) {
	if v != "" {
		e.str(k, v)
	}
}

func (e *emitter) int(k string, v int64) {
	e.key(k)
	e.buf = append(e.buf, ' ')
	e.buf = strconv.AppendInt(e.buf, v, 10)
	e.kind(shapeInt)
	e.end()
}

func (e *emitter) intOmit(k string, v int64) {
	if v != 0 {
		e.int(k, v)
	}
}

func (e *emitter) uint(k string, v uint64) {
	e.key(k)
	e.buf = append(e.buf, ' ')
	e.buf = strconv.AppendUint(e.buf, v, 10)
	e.kind(shapeInt)
	e.end()
}

// time is a metav1.Time as its JSON form: RFC 3339 in UTC, or null.
func (e *emitter) time(k string, t metav1.Time) {
	e.key(k)
	if t.IsZero() {
		e.buf = append(e.buf, " null"...)
		e.kind(shapeNull)
	} else {
		e.buf = append(e.buf, ` "`...)
		e.buf = t.UTC().AppendFormat(e.buf, time.RFC3339)
		e.buf = append(e.buf, '"')
		e.kind(shapeTime)
	}
	e.end()
}

func (e *emitter) timeOmit(k string, t *metav1.Time) {
	if t != nil {
		e.time(k, *t)
	}
}

func (e *emitter) quantity(k string, q *resource.Quantity) {
	e.str(k, q.String())
}

func (e *emitter) quantityOmit(k string, q *resource.Quantity) {
	if q != nil {
		e.quantity(k, q)
	}
}

// open starts a nested mapping under k.
func (e *emitter) open(k string) {
	e.key(k)
	e.end()
	e.indent++
}

func (e *emitter) close() { e.indent-- }

// status emits the fields of TaskStatus in sorted JSON-name order.
func (e *emitter) status(st *v1alpha1.TaskStatus) {
	e.timeOmit("completionTime", st.CompletionTime)
	if len(st.Conditions) > 0 {
		e.key("conditions")
		e.end()
		e.indent++
		for i := range st.Conditions {
			c := &st.Conditions[i]
			e.seqItem = true
			e.time("lastTransitionTime", c.LastTransitionTime)
			e.str("message", c.Message)
			e.intOmit("observedGeneration", c.ObservedGeneration)
			e.str("reason", c.Reason)
			e.str("status", string(c.Status))
			e.str("type", c.Type)
		}
		e.indent--
	}
	e.timeOmit("creationTime", st.CreationTime)
	if b := st.LastBatch; b != nil {
		e.open("lastBatch")
		e.intOmit("attempt", int64(b.Attempt))
		e.timeOmit("endTime", b.EndTime)
		if b.ExitCode != nil {
			e.int("exitCode", int64(*b.ExitCode))
		}
		e.int("index", b.Index)
		if b.ItemsReported != nil {
			e.int("itemsReported", *b.ItemsReported)
		}
		e.intOmit("pausedSeconds", b.PausedSeconds)
		e.timeOmit("pausedSince", b.PausedSince)
		e.quantityOmit("peakGPUMemory", b.PeakGPUMemory)
		e.quantityOmit("peakMemory", b.PeakMemory)
		e.strOmit("reason", b.Reason)
		e.int("size", b.Size)
		e.int("start", b.Start)
		e.timeOmit("startTime", b.StartTime)
		e.intOmit("threads", int64(b.Threads))
		e.quantityOmit("workingSet", b.WorkingSet)
		e.close()
	}
	e.strOmit("logFile", st.LogFile)
	e.intOmit("observedGeneration", st.ObservedGeneration)
	e.strOmit("phase", string(st.Phase))
	if pg := st.ProcessGroup; pg != nil {
		e.open("processGroup")
		e.strOmit("cgroup", pg.Cgroup)
		e.int("pgid", int64(pg.PGID))
		e.uint("startTicks", pg.StartTicks)
		e.close()
	}
	e.open("progress")
	e.int("batchesDone", st.Progress.BatchesDone)
	e.strOmit("inputsHash", st.Progress.InputsHash)
	e.int("itemsDone", st.Progress.ItemsDone)
	e.int("itemsTotal", st.Progress.ItemsTotal)
	e.close()
	e.intOmit("queueSeq", st.QueueSeq)
	if r := st.Reservation; r != nil {
		e.open("reservation")
		e.int("batch", r.Batch)
		e.int("batchRequested", r.BatchRequested)
		if r.Generation != 0 {
			e.uint("generation", r.Generation)
		}
		e.quantityOmit("gpuMemory", r.GPUMemory)
		e.intOmit("gpuSlots", int64(r.GPUSlots))
		e.time("grantedAt", r.GrantedAt)
		e.intOmit("ioSlots", int64(r.IOSlots))
		e.quantity("memory", &r.Memory)
		e.quantityOmit("scratch", r.Scratch)
		e.strOmit("scratchDir", r.ScratchDir)
		e.int("threads", int64(r.Threads))
		e.close()
	}
	e.strOmit("specHash", st.SpecHash)
	e.timeOmit("startTime", st.StartTime)
	e.strOmit("taskName", st.TaskName)
}

// appendScalar appends s as a YAML scalar that every reader decodes to
// the string s (each invalid UTF-8 byte becomes U+FFFD, as in
// encoding/json: ranging over s yields utf8.RuneError for it).
func appendScalar(b []byte, s string) []byte {
	if plainSafe(s) {
		return append(b, s...)
	}
	return appendDoubleQuoted(b, s)
}

// plainSafe reports whether s can be a plain scalar that every reader
// (YAML 1.1 and 1.2) takes for the string s: a letter, then letters,
// digits, single spaces and . _ / - , ( ) + = ;, no trailing space, and
// not a word YAML 1.1 reads as a boolean or null (y, n, yes, no, on, off,
// true, false, null, in any case); or a lowercase hex digest (at least six
// hex digits, one of them a letter other than e, so never a number).
func plainSafe(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	if c := s[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return hexDigest(s)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '/', c == '-', c == ',', c == '(', c == ')', c == '+', c == '=', c == ';':
		case c == ' ' && s[i-1] != ' ' && i < len(s)-1:
		default:
			return false
		}
	}
	if len(s) <= 5 {
		switch strings.ToLower(s) {
		case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
			return false
		}
	}
	return true
}

// hexDigest reports whether s is lowercase hex, six digits or more, with a
// letter other than e (a number has none), not starting with 0b.
func hexDigest(s string) bool {
	if len(s) < 6 || (s[0] == '0' && s[1] == 'b') { // 0b...: a binary number in YAML 1.1
		return false
	}
	letter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c == 'e':
		case c >= 'a' && c <= 'f':
			letter = true
		default:
			return false
		}
	}
	return letter
}

// appendDoubleQuoted appends s as a one-line YAML double-quoted scalar:
// the quote, the backslash and every character YAML does not allow as it
// is (C0 and C1 controls, DEL, line and paragraph separators, the BOM,
// U+FFFE/U+FFFF) escaped.
func appendDoubleQuoted(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, `\"`...)
		case r == '\\':
			b = append(b, `\\`...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			b = append(b, '\\', 'x', hex[r>>4], hex[r&0xf])
		case r == 0x2028 || r == 0x2029 || r == 0xfeff || r == 0xfffe || r == 0xffff:
			b = append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// emitStatus returns the status block for tests and benchmarks.
func emitStatus(st *v1alpha1.TaskStatus) []byte {
	return bytes.Clone(appendStatusBlock(nil, "", "\n", st))
}
