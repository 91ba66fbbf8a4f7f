package runner

import (
	"bytes"
	"io"
	"os"
	"strconv"
)

// ProgressPrefix starts the line a command writes, on its standard output
// or error, to report how many of its batch's items it has finished:
// "LARDON3D_PROGRESS 12" (or "LARDON3D_PROGRESS 12/64"). The count is the
// batch's, not the task's; the last line wins. Nothing is committed by it:
// a batch's items are done only when the batch exits 0.
const ProgressPrefix = "LARDON3D_PROGRESS "

const (
	// progressReadMax bounds what one poll reads of the log; a command that
	// wrote more since the last poll is read from near its end only.
	progressReadMax = 1 << 20
	// progressTail is how much of the end is read after such a skip.
	progressTail = 64 << 10
	// progressLineMax bounds a progress line kept across two polls.
	progressLineMax = 128
)

// progressReader reads the progress lines a batch appends to its log. It
// reads through a descriptor of its own, from the log's size at the start
// of the batch, and only what was appended since the last poll. It is used
// by the batch's supervising goroutine alone.
type progressReader struct {
	path  string
	size  int64 // items in the batch: reports are clamped to it
	off   int64 // what was read of the log
	r     *os.File
	line  []byte // a progress line not ended yet, at most progressLineMax
	skip  bool   // discard up to the next newline
	count int64  // the last count reported; -1 before any
}

// newProgressReader reads the log at path from off.
func newProgressReader(path string, off, size int64) *progressReader {
	return &progressReader{path: path, off: off, size: size, count: -1}
}

// poll reads what the log gained since the last poll, whose size logSize
// the caller has just measured, and reports whether the count changed.
func (p *progressReader) poll(logSize int64) bool {
	if logSize <= p.off {
		return false
	}
	if p.r == nil {
		f, err := os.Open(p.path)
		if err != nil {
			return false
		}
		p.r = f
	}
	if logSize-p.off > progressReadMax {
		p.off, p.line, p.skip = logSize-progressTail, p.line[:0], true
	}
	buf := make([]byte, logSize-p.off)
	n, err := p.r.ReadAt(buf, p.off)
	if err != nil && err != io.EOF {
		return false
	}
	p.off += int64(n)
	before := p.count
	p.scan(buf[:n])
	return p.count != before
}

// scan takes the lines in b, the continuation of what was scanned before.
func (p *progressReader) scan(b []byte) {
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
func (p *progressReader) take(line []byte) {
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

// close releases the descriptor.
func (p *progressReader) close() {
	if p.r != nil {
		_ = p.r.Close()
		p.r = nil
	}
}
