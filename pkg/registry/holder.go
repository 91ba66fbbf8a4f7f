package registry

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// controllerMain is the main package of the lardon3d controller's binary,
// as its build information records it.
const controllerMain = "github.com/lardon3d/lardon3d-controller/cmd/lardon3d-controller"

// controllerName is the base name the controller's binary is installed
// under (the units, the README): all that a controller of another user
// can see of root's or another user's process is its command line.
const controllerName = "lardon3d-controller"

// holder is the process holding the exclusive flock of a claim file, as
// the kernel tells it.
type holder struct {
	// pid is the holder's process; 0 when no process holds it.
	pid int
	// uid is its effective user; -1 when unknown (the process is gone).
	uid int
	// controller says its program is a lardon3d controller.
	controller bool
}

// genuine says whether a live claim file owned by owner, naming the
// process named (its JSON's pid, else its file name's), is a controller's
// claim: its flock is held by that very process, running as the file's
// owner, whose program is a lardon3d controller. Anything else is ignored:
// a lock taken by `flock` or a script (a forged claim), a child that
// inherited the descriptor of a controller that died while it forked, a
// file of one user held by a process of another.
func genuine(owner, named int, h holder) bool {
	return h.pid > 0 && h.pid == named && h.uid == owner && h.controller
}

// lockHolder is flockHolder; unit tests that play several controllers in
// one process (fake PIDs) replace it.
var lockHolder = flockHolder

// flockHolder tells who holds the exclusive flock on the file of stat st
// (named, the PID the claim gives, is what unit tests' replacement
// answers): its PID from /proc/locks, its user and whether it is a
// controller from /proc/PID.
func flockHolder(st *syscall.Stat_t, _ int) holder {
	pid := flockPID(st)
	if pid <= 0 {
		return holder{uid: -1}
	}
	h := holder{pid: pid, uid: -1}
	if s, err := procfs.NewProc(pid); err == nil {
		if status, err := s.NewStatus(); err == nil {
			h.uid = int(status.UIDs[1])
		}
	}
	h.controller = isController(pid)
	return h
}

// flockPID is the process holding the exclusive flock on the file of stat
// st, from /proc/locks ("1: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0
// EOF"); 0 when it cannot be told.
func flockPID(st *syscall.Stat_t) int {
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[1] == "FLOCK" && f[3] == "WRITE" && f[5] == want {
			if pid, err := strconv.Atoi(f[4]); err == nil {
				return pid
			}
		}
	}
	return 0
}

// isController says whether process pid runs a lardon3d controller: the
// same executable as this process, or one whose Go build information
// names the controller's main package. Where its executable cannot be
// read (another user's process, seen by a controller that is not root:
// the kernel hides it), its command line must start with the
// controller's name; that the process could choose, so between users the
// registry is a rule among cooperating users, while root's controller
// judges every holder by its executable.
func isController(pid int) bool {
	exe := filepath.Join("/proc", strconv.Itoa(pid), "exe")
	fi, err := os.Stat(exe)
	if err == nil {
		if self, serr := os.Stat("/proc/self/exe"); serr == nil && os.SameFile(fi, self) {
			return true
		}
		return builtAsController(exe)
	}
	if !errors.Is(err, fs.ErrPermission) {
		return false
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	args, err := p.CmdLine()
	return err == nil && len(args) > 0 && filepath.Base(args[0]) == controllerName
}

// builtAsController says whether the Go build information of the
// executable exe names the controller's main package. The file may be
// any user's: a parser's panic on it is a no, never the reader's end.
func builtAsController(exe string) (yes bool) {
	defer func() {
		if recover() != nil {
			yes = false
		}
	}()
	info, err := buildinfo.ReadFile(exe)
	return err == nil && info.Path == controllerMain
}
