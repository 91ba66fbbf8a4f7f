package listing

import (
	"errors"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// A listing travels one File a line (appendFile): its fields separated by
// tabs; strings quoted as Go literals (strconv.Quote: no raw tab or
// newline), numbers in decimal. The fields: the manifest's base name; its
// kind ("-" no row: not parseable; "row"; "new": NotRead, a row of its
// name alone); its error ("" when none); then, with a row, the Row's
// fields in their order: "-" for an absent start or creation time, the contract and last
// batch as their count of numbers (0 when absent) then the numbers, the
// other lists as their length then their elements, labels sorted by key.
// A client splits ten thousand of them in a few milliseconds.

// The kinds of a File's line.
const (
	kindNoRow   = "-"
	kindRow     = "row"
	kindNotRead = "new"
)

// appendFile appends f's line (with its newline) to b.
func appendFile(b []byte, f *File) []byte {
	b = strconv.AppendQuote(b, filepath.Base(f.Path))
	kind := kindRow
	switch {
	case f.Row == nil:
		kind = kindNoRow
	case f.NotRead:
		kind = kindNotRead
	}
	b = append(b, '\t')
	b = append(b, kind...)
	b = append(b, '\t')
	msg := ""
	if f.Err != nil {
		msg = f.Err.Error()
	}
	b = strconv.AppendQuote(b, msg)
	if f.Row != nil {
		b = appendRow(b, f.Row)
	}
	return append(b, '\n')
}

// appendRow appends r's fields to b, each after a tab.
func appendRow(b []byte, r *Row) []byte {
	ints := func(b []byte, v ...int64) []byte {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		for _, x := range v {
			b = append(b, '\t')
			b = strconv.AppendInt(b, x, 10)
		}
		return b
	}
	for _, s := range []string{r.Name, r.Profile, string(r.Phase)} {
		b = append(b, '\t')
		b = strconv.AppendQuote(b, s)
	}
	for _, v := range []int64{r.Gen, r.Seq, r.Done, r.Total} {
		b = append(b, '\t')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, '\t')
	if c := r.Reservation; c != nil {
		b = ints(b, c.Batch, c.BatchRequested, c.Threads, c.Memory)
	} else {
		b = ints(b)
	}
	b = append(b, '\t')
	if lb := r.LastBatch; lb != nil {
		b = ints(b, lb.Index, lb.PeakMemory, lb.Size, lb.Start, lb.End, lb.ItemsReported, lb.Paused)
	} else {
		b = ints(b)
	}
	b = append(b, '\t')
	for _, t := range []*int64{r.Start, r.Created} {
		if t == nil {
			b = append(b, '-')
		} else {
			b = strconv.AppendInt(b, *t, 10)
		}
		b = append(b, '\t')
	}
	b = b[:len(b)-1]
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(len(r.Conditions)), 10)
	for _, c := range r.Conditions {
		b = append(b, '\t')
		b = strconv.AppendQuote(b, c)
	}
	keys := make([]string, 0, len(r.Labels))
	for k := range r.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	for _, k := range keys {
		b = append(b, '\t')
		b = strconv.AppendQuote(b, k)
		b = append(b, '\t')
		b = strconv.AppendQuote(b, r.Labels[k])
	}
	return b
}

// errBadLine is parseFile's error.
var errBadLine = errors.New("listing: bad line")

// parseFile parses one line of appendFile (without its newline), the
// file of a spool whose paths start with prefix (pathPrefix). Its Err, when any, is an error
// of the message alone.
func parseFile(prefix, line string) (File, error) {
	var f File
	var r Row
	pos, bad := 0, false // pos: where the next field starts, -1 past the last
	next := func() string {
		if pos < 0 {
			bad = true
			return ""
		}
		j := strings.IndexByte(line[pos:], '\t')
		if j < 0 {
			field := line[pos:]
			pos = -1
			return field
		}
		field := line[pos : pos+j]
		pos += j + 1
		return field
	}
	str := func() string {
		s, err := strconv.Unquote(next())
		bad = bad || err != nil
		return s
	}
	num := func() int64 {
		n, err := strconv.ParseInt(next(), 10, 64)
		bad = bad || err != nil
		return n
	}
	count := func() int {
		n := num()
		if n < 0 || n > int64(len(line)) { // more than the line's fields
			bad = true
			return 0
		}
		return int(n)
	}
	// ints reads a count, 0 (the part is absent) or len(dst), then as
	// many numbers into dst: the reverse of appendRow's ints.
	ints := func(dst ...*int64) bool {
		switch n := count(); n {
		case 0:
			return false
		case len(dst):
			for _, p := range dst {
				*p = num()
			}
			return true
		}
		bad = true
		return false
	}
	base := str()
	kind := next()
	if msg := str(); msg != "" {
		f.Err = errors.New(msg)
	}
	switch kind {
	case kindNoRow:
	case kindRow, kindNotRead:
		f.NotRead = kind == kindNotRead
		r.Name, r.Profile = str(), str()
		r.Phase = v1alpha1.Phase(str())
		r.Gen, r.Seq, r.Done, r.Total = num(), num(), num(), num()
		var c Contract
		if ints(&c.Batch, &c.BatchRequested, &c.Threads, &c.Memory) {
			r.Reservation = &c
		}
		var lb Batch
		if ints(&lb.Index, &lb.PeakMemory, &lb.Size, &lb.Start, &lb.End, &lb.ItemsReported, &lb.Paused) {
			r.LastBatch = &lb
		}
		for _, t := range []**int64{&r.Start, &r.Created} {
			if s := next(); s != "-" {
				n, err := strconv.ParseInt(s, 10, 64)
				bad = bad || err != nil
				*t = &n
			}
		}
		if n := count(); n > 0 {
			r.Conditions = make([]string, n)
			for k := range r.Conditions {
				r.Conditions[k] = str()
			}
		}
		if n := count(); n > 0 {
			r.Labels = make(map[string]string, n)
			for ; n > 0; n-- {
				k := str()
				r.Labels[k] = str()
			}
		}
		f.Row = &r
	default:
		bad = true
	}
	// A base name is one manifest's name in the directory: no path.
	if bad || pos >= 0 || !spool.IsManifestName(base) || strings.ContainsRune(base, filepath.Separator) {
		return File{}, errBadLine
	}
	f.Path = prefix + base
	return f, nil
}
