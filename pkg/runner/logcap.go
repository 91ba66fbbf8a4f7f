package runner

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// DefaultLogMaxBytes is Spec.LogMaxBytes's usual value (the controller's
// --log-max-size default): 32 MiB.
const DefaultLogMaxBytes = 32 << 20

// DefaultPidsMax is Spec.PidsMax's usual value (the controller's
// --pids-max default): the processes and threads of one batch together.
const DefaultPidsMax = 8192

// RotatedLogSuffix names the part of a task's log before its last
// rotation: LOG.1.
const RotatedLogSuffix = ".1"

// outputDrainWait bounds how long a batch that ended waits for its output
// to reach the log: a process outside the batch that inherited its
// standard output (and was not killed with it) would hold it forever.
const outputDrainWait = 2 * time.Second

// outputCopier is the only writer of a task's log while a batch runs. The
// batch's processes write their standard output and error to one pipe; the
// copier reads it, finds the progress lines on the way, and appends to the
// log, capped (Spec.LogMaxBytes): a write that would take the log past the
// cap first renames it to LOG.1 (replacing the part there) and starts a
// new one, so that a task's logs hold at most twice the cap and a read
// buffer. The runner's own lines go through it too (line). A write that
// fails (a full disk) drops that output and never blocks the batch; the
// count dropped is reported once the batch ends.
type outputCopier struct {
	path string
	max  int64
	done chan struct{}

	mu       sync.Mutex
	f        *os.File // nil once closed, or while a rotation failed
	size     int64
	progress progressScanner
	dropped  int64
	err      error // the first write or rotation error
}

// newOutputCopier appends to the log at path (opened, never through a
// link), rotating it first when it already holds more than max (0: no
// cap) so that each part starts at a batch's first line; items bounds the
// progress counts.
func newOutputCopier(path string, max, items int64) (*outputCopier, error) {
	f, err := openLog(path, false)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c := &outputCopier{path: path, max: max, done: make(chan struct{}), f: f, size: fi.Size(), progress: newProgressScanner(items)}
	if max > 0 && c.size > max {
		c.rotate()
	}
	return c, nil
}

// openLog opens the log at path for appending, never through a link; with
// fresh, a file already there is an error (a rotation's new part).
func openLog(path string, fresh bool) (*os.File, error) {
	flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if fresh {
		flags |= os.O_EXCL
	}
	return kernfile.OpenFile(path, flags, 0o644)
}

// run copies r, the read end of the batch's output pipe, until every
// writer closed it or r is closed.
func (c *outputCopier) run(r *os.File) {
	defer close(c.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.write(buf[:n], true)
		}
		if err != nil {
			return
		}
	}
}

// line appends one line of the runner's own.
func (c *outputCopier) line(s string) { c.write([]byte(s+"\n"), false) }

func (c *outputCopier) write(p []byte, output bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if output {
		c.progress.scan(p)
	}
	if c.max > 0 && c.size > 0 && c.size+int64(len(p)) > c.max {
		c.rotate()
	}
	if c.f == nil {
		c.dropped += int64(len(p))
		return
	}
	n, err := c.f.Write(p)
	c.size += int64(n)
	if err != nil {
		c.dropped += int64(len(p) - n)
		if c.err == nil {
			c.err = err
		}
	}
}

// rotate renames the log to LOG.1 and opens a new one. On failure the
// output is dropped until a later rotation succeeds: the cap holds.
// REQUIRES: c.mu held.
func (c *outputCopier) rotate() {
	if c.f != nil {
		_ = c.f.Close()
		c.f = nil
	}
	err := os.Rename(c.path, c.path+RotatedLogSuffix)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		var f *os.File
		if f, err = openLog(c.path, true); err == nil {
			c.f, c.size = f, 0
			_, _ = fmt.Fprintf(f, "=== log rotated at %s: what came before is in %s ===\n",
				time.Now().Format(time.RFC3339), c.path+RotatedLogSuffix)
			return
		}
	}
	if c.err == nil {
		c.err = fmt.Errorf("rotate the log: %w", err)
	}
}

// count is the last progress count the output reported (-1: none).
func (c *outputCopier) count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progress.count
}

// drain waits for the output to be copied, at most outputDrainWait, then
// stops reading r (r's end makes run return).
func (c *outputCopier) drain(r *os.File) {
	select {
	case <-c.done:
	case <-time.After(outputDrainWait):
		_ = r.Close()
		<-c.done
	}
}

// close reports the output dropped, then closes the log.
func (c *outputCopier) close() {
	c.mu.Lock()
	dropped, err := c.dropped, c.err
	c.mu.Unlock()
	if dropped > 0 {
		c.line(fmt.Sprintf("=== %d bytes of output were not written to the log: %v ===", dropped, err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		_ = c.f.Close()
		c.f = nil
	}
}
