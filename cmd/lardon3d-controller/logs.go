package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// maxLogRead bounds what `logs` reads of a log file.
const maxLogRead = 64 << 20

// followPoll is how often `logs -f` looks at the log and the task.
const followPoll = 200 * time.Millisecond

// logsOptions are the flags of `logs`.
type logsOptions struct {
	tail   int
	follow bool
	batch  int
}

func newLogsCommand(g *globals) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME [--batch N] [--tail N] [-f]",
		Short: "Print a task's log (STATE/logs/NAME.log); -f follows it until the task is Done, Failed or Rejected",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.batch >= 0 && o.follow {
				return &exitError{code: 2, err: fmt.Errorf("--batch and -f: choose one")}
			}
			w := logWriter(cmd.OutOrStdout())
			if err := runLogs(cmd, g.spool, g.stateDir(), args[0], o, w); err != nil {
				return &exitError{code: 1, err: err}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&o.tail, "tail", -1, "print only the last N lines (-1: all)")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "follow the log until the task is terminal")
	cmd.Flags().IntVar(&o.batch, "batch", -1, "print only batch N's part of the log: its attempts since its last first attempt (describe lists the batches)")
	return cmd
}

// logWriter escapes the log for a terminal (as every other verb escapes
// what it prints); to a file or a pipe the log goes as it is.
func logWriter(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return escapingWriter{w}
		}
	}
	return w
}

// escapingWriter writes through safeText.
type escapingWriter struct{ w io.Writer }

func (e escapingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, safeText(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// runLogs prints the log of task name of the spool dir whose state
// directory is stateDir, then follows it if asked. The log is where the
// controller keeps it (reconcile.TaskLogPath), never where the manifest's
// status.logFile says: whoever writes the manifest could name any file.
func runLogs(cmd *cobra.Command, dir, stateDir, name string, o *logsOptions, w io.Writer) error {
	f, err := findTask(dir, name)
	if err != nil {
		return err
	}
	if !o.follow {
		if f.Task == nil {
			return fmt.Errorf("task %s has no log yet (phase %s)", f.Name(), f.Phase())
		}
		data, err := readTaskLog(stateDir, f.Name())
		if errors.Is(err, fs.ErrNotExist) {
			why := ""
			if r := f.Row.Reason(); r != "" {
				why = ", " + r
			}
			return fmt.Errorf("task %s has no log yet (phase %s%s): no batch has started", f.Name(), f.Phase(), why)
		}
		if err != nil {
			return err
		}
		if o.batch >= 0 {
			var ok bool
			if data, ok = batchSection(data, o.batch); !ok {
				return fmt.Errorf("task %s: no batch %d in its log %s", f.Name(), o.batch, reconcile.TaskLogPath(stateDir, f.Name()))
			}
		}
		_, err = w.Write(tailLines(data, o.tail))
		return err
	}
	return followLog(cmd, dir, stateDir, name, o.tail, w)
}

// followLog prints the log as it grows, until the task is terminal (and
// its log printed to the end) or the command's context ends.
func followLog(cmd *cobra.Command, dir, stateDir, name string, tail int, w io.Writer) error {
	var printed int64 = -1 // nothing yet: the first read honours --tail
	var task string
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		f, err := findTask(dir, name)
		if err != nil {
			return err
		}
		terminal := f.Task != nil && v1alpha1.IsTerminal(f.Task.Status.Phase)
		if f.Task != nil {
			if n := f.Name(); n != task {
				task, printed = n, -1
			}
			if printed, err = printNew(stateDir, task, printed, tail, w); err != nil {
				return err
			}
		}
		if terminal {
			return nil
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case <-tick.C:
		}
	}
}

// printNew prints what the log of task name in stateDir holds beyond its
// first printed bytes (all of it, tailed, when printed < 0) and returns
// the new count. A log shorter than what was printed started over: it is
// printed anew.
func printNew(stateDir, name string, printed int64, tail int, w io.Writer) (int64, error) {
	f, err := reconcile.OpenTaskLog(stateDir, name, false)
	if errors.Is(err, fs.ErrNotExist) {
		return printed, nil // not there yet
	}
	if err != nil {
		return printed, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() == printed {
		return printed, nil // unchanged: nothing to read
	}
	data, err := readAll(f)
	if err != nil {
		return printed, err
	}
	n := int64(len(data))
	switch {
	case printed < 0:
		_, err = w.Write(tailLines(data, tail))
	case n < printed:
		_, err = w.Write(data)
	default:
		_, err = w.Write(data[printed:])
	}
	return n, err
}

// readLog reads the log of task name in stateDir (rotated: the part
// rotated away) as reconcile.OpenTaskLog opens it: a regular file owned
// by this user or root, reached through no link, never a FIFO or a
// device; at most maxLogRead bytes.
func readLog(stateDir, name string, rotated bool) ([]byte, error) {
	f, err := reconcile.OpenTaskLog(stateDir, name, rotated)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	defer f.Close()
	return readAll(f)
}

// readAll reads f, a log, to its end: at most maxLogRead bytes.
func readAll(f *os.File) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxLogRead+1))
	if err != nil {
		return nil, fmt.Errorf("log %s: %w", f.Name(), err)
	}
	if len(data) > maxLogRead {
		return nil, fmt.Errorf("log %s: larger than %d bytes", f.Name(), maxLogRead)
	}
	return data, nil
}

// readTaskLog reads the whole log of task name in stateDir: the part
// rotated away (LOG.1, when there is one), then the log itself (run's
// --log-max-size).
func readTaskLog(stateDir, name string) ([]byte, error) {
	data, err := readLog(stateDir, name, false)
	if err != nil {
		return nil, err
	}
	older, err := readLog(stateDir, name, true)
	if err != nil {
		return data, nil // none yet, or unreadable: the log alone
	}
	return append(older, data...), nil
}

// tailLines is the last n lines of data (all of it when n < 0); a last
// line without a newline counts as a line.
func tailLines(data []byte, n int) []byte {
	if n < 0 {
		return data
	}
	if n == 0 {
		return nil
	}
	start := len(data)
	if start > 0 && data[start-1] == '\n' {
		start--
	}
	for range n {
		j := bytes.LastIndexByte(data[:start], '\n')
		if j < 0 {
			return data
		}
		start = j
	}
	return data[start+1:]
}
