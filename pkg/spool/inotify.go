package spool

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyMask is what the watcher asks the kernel about the spool
// directory. IN_CLOSE_WRITE is the event that says a writer is done (the
// reason this package reads inotify itself: fsnotify v1.10 keeps it
// unexported); no IN_MODIFY, since a file being written is not read
// before it is closed.
const inotifyMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// dirEvent is one inotify event of the spool directory.
type dirEvent struct {
	name string
	mask uint32
}

// closed reports whether the event says the file's writer is done with it:
// closed after writing, or renamed into place.
func (e dirEvent) closed() bool { return e.mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO) != 0 }

// errOverflow reports a kernel queue overflow: events were lost.
var errOverflow = errors.New("inotify queue overflow")

// errDirGone reports that the spool directory was removed or moved.
var errDirGone = errors.New("spool directory removed or moved")

// dirWatch reads inotify events of one directory on a goroutine.
type dirWatch struct {
	f      *os.File
	events chan dirEvent
	errs   chan error
}

func watchDir(dir string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, inotifyMask); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("inotify %s: %w", dir, err)
	}
	// Non-blocking and pollable: Read parks the goroutine, Close wakes it.
	w := &dirWatch{f: os.NewFile(uintptr(fd), "inotify"), events: make(chan dirEvent, 1024), errs: make(chan error, 1)}
	go w.read()
	return w, nil
}

// close stops the watch (a dirWatch with no file, whose channels are nil,
// watches nothing).
func (w *dirWatch) close() {
	if w.f != nil {
		_ = w.f.Close()
	}
}

func (w *dirWatch) read() {
	defer close(w.events)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.fail(err)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			name := string(nameBytes)
			for i := 0; i < len(name); i++ {
				if name[i] == 0 {
					name = name[:i]
					break
				}
			}
			switch {
			case raw.Mask&unix.IN_Q_OVERFLOW != 0:
				w.fail(errOverflow)
			case raw.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
				w.fail(errDirGone)
				return
			case name != "":
				w.events <- dirEvent{name: name, mask: raw.Mask}
			}
		}
	}
}

// fail reports err unless an error is already waiting to be read.
func (w *dirWatch) fail(err error) {
	select {
	case w.errs <- err:
	default:
	}
}
