package reconcile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// groupJournalName is the journal's file name in STATE/run.
const groupJournalName = "groups.jsonl"

// journalCompactAt is the size past which the journal is rewritten with
// the groups still in flight only.
const journalCompactAt = 1 << 20

// groupJournal records the process groups of the batches in flight in
// STATE/run/groups.jsonl, one JSON line per event: {"task":T,"start":G}
// when a batch's group is recorded (before the queue hears of the batch),
// {"end":{"pgid":P,"startTicks":S}} once every process of the group is
// gone. A restarted controller kills every group started and not ended
// (readGroupJournal). Thousands of short batches thus append two lines each
// to one open file instead of creating, renaming and unlinking a file
// each.
//
// The appends need no fsync: a crash of the machine takes the processes
// with it, and a kill -9 of the controller cannot tear a line (one
// write(2) to the page cache). A torn last line (a full disk) is skipped
// by the reader. Past journalCompactAt the journal is rewritten with the
// groups in flight only, through a temp file and a rename.
type groupJournal struct {
	path string

	mu     sync.Mutex
	f      *os.File // nil until the first record
	size   int64
	live   map[groupKey]journalLine
	closed bool // after close, each line opens and closes the file
}

// groupKey identifies a process group across pid reuse.
type groupKey struct {
	PGID       int    `json:"pgid"`
	StartTicks uint64 `json:"startTicks"`
}

// journalLine is one line of the journal: a start (Task and Start) or an
// end (End).
type journalLine struct {
	Task  string               `json:"task,omitempty"`
	Start *runner.ProcessGroup `json:"start,omitempty"`
	End   *groupKey            `json:"end,omitempty"`
}

func keyOf(pg runner.ProcessGroup) groupKey {
	return groupKey{PGID: pg.PGID, StartTicks: pg.StartTicks}
}

// newGroupJournal returns the journal of runDir (STATE/run), opened at its
// first record: Run has handled and removed what a previous controller
// left by then.
func newGroupJournal(runDir string) *groupJournal {
	return &groupJournal{path: filepath.Join(runDir, groupJournalName), live: map[groupKey]journalLine{}}
}

// started records the group of a batch of task.
func (j *groupJournal) started(task string, pg runner.ProcessGroup) error {
	l := journalLine{Task: task, Start: &pg}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.append(l); err != nil {
		return err
	}
	j.live[keyOf(pg)] = l
	return nil
}

// ended records that every process of the group is gone.
func (j *groupJournal) ended(pg runner.ProcessGroup) error {
	k := keyOf(pg)
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.live[k]; !ok {
		return nil
	}
	delete(j.live, k)
	if j.size >= journalCompactAt {
		return j.compact()
	}
	return j.append(journalLine{End: &k})
}

// append writes one line, opening the journal at the first one: the
// groups a journal kept from an earlier run (Run could not handle them)
// stay live, so that a compaction keeps them for the next start. j.mu
// held.
func (j *groupJournal) append(l journalLine) error {
	if j.f == nil {
		if !j.closed {
			left, _ := readGroupJournal(j.path)
			for _, ll := range left {
				if _, ok := j.live[keyOf(*ll.Start)]; !ok {
					j.live[keyOf(*ll.Start)] = ll
				}
			}
		}
		f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("group journal: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("group journal: %w", err)
		}
		j.f, j.size = f, st.Size()
	}
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	n, err := j.f.Write(append(data, '\n'))
	j.size += int64(n)
	if j.closed {
		// A batch that ended after Run returned.
		_ = j.f.Close()
		j.f = nil
	}
	if err != nil {
		return fmt.Errorf("group journal: %w", err)
	}
	return nil
}

// compact rewrites the journal with the groups in flight only. j.mu held.
func (j *groupJournal) compact() error {
	var buf bytes.Buffer
	for _, l := range j.live {
		data, err := json.Marshal(l)
		if err != nil {
			return err
		}
		buf.Write(data)
		buf.WriteByte('\n')
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o640); err != nil {
		return fmt.Errorf("group journal: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("group journal: %w", err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.size = nil, 0
	return nil
}

// close closes the journal file (the records stay); a line written after
// it opens the file for itself.
func (j *groupJournal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
}

// readGroupJournal returns the groups the journal at path has started and
// not ended, with their tasks; a missing journal has none. Lines that do
// not decode (a torn last line) are skipped; on a read error, the groups
// read so far come with it.
func readGroupJournal(path string) ([]journalLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	live := map[groupKey]journalLine{}
	var order []groupKey
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l journalLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch {
		case l.Start != nil:
			k := keyOf(*l.Start)
			if _, ok := live[k]; !ok {
				order = append(order, k)
			}
			live[k] = l
		case l.End != nil:
			delete(live, *l.End)
		}
	}
	var out []journalLine
	for _, k := range order {
		if l, ok := live[k]; ok {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}
