package runner

import (
	"bytes"
	"strconv"
)

// ProgressPrefix starts the line a command writes, on its standard output
// or error, to report how many of its batch's items it has finished:
// "LARDON3D_PROGRESS 12" (or "LARDON3D_PROGRESS 12/64"). The count is the
// batch's, not the task's; the last line wins. Nothing is committed by it:
// a batch's items are done only when the batch exits 0.
const ProgressPrefix = "LARDON3D_PROGRESS "

// progressLineMax bounds a progress line kept across two reads.
const progressLineMax = 128

// progressScanner finds the progress lines in a batch's output, fed in
// pieces however the writes cut it (scan). It is used under the output
// copier's mutex.
type progressScanner struct {
	size  int64  // items in the batch: reports are clamped to it
	line  []byte // a progress line not ended yet, at most progressLineMax
	skip  bool   // discard up to the next newline
	count int64  // the last count reported; -1 before any
}

// newProgressScanner scans the output of a batch of size items.
func newProgressScanner(size int64) progressScanner {
	return progressScanner{size: size, count: -1}
}

// scan takes the lines in b, the continuation of what was scanned before.
func (p *progressScanner) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		switch {
		case p.skip:
		case len(p.line)+len(chunk) > progressLineMax:
			p.line, p.skip = p.line[:0], true
		default:
			p.line = append(p.line, chunk...)
			if !isProgressPrefix(p.line) {
				p.line, p.skip = p.line[:0], true
			}
		}
		if i < 0 {
			return
		}
		if !p.skip {
			p.take(p.line)
		}
		p.line, p.skip = p.line[:0], false
		b = b[i+1:]
	}
}

// isProgressPrefix reports whether line may still become a progress line.
func isProgressPrefix(line []byte) bool {
	n := min(len(line), len(ProgressPrefix))
	return string(line[:n]) == ProgressPrefix[:n]
}

// take reads one complete line; anything but a well-formed report is
// ignored.
func (p *progressScanner) take(line []byte) {
	rest, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte(ProgressPrefix))
	if !ok {
		return
	}
	field, _, _ := bytes.Cut(bytes.TrimSpace(rest), []byte("/"))
	n, err := strconv.ParseInt(string(bytes.TrimSpace(field)), 10, 64)
	if err != nil {
		return
	}
	p.count = max(0, min(n, p.size))
}
