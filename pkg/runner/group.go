package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// member is one process of a group, as read from /proc/PID/stat.
type member struct {
	pid        int
	state      string
	startTicks uint64
	rss        int64
	// cpu is its CPU time, user and system, the children it reaped
	// included.
	cpu time.Duration
}

// gone reports whether the process can no longer run or hold memory: a
// zombie, or dead. Zombies are not counted as survivors because their parent
// (possibly init, which may not reap in a container) owns their fate.
func (m member) gone() bool { return m.state == "Z" || m.state == "X" || m.state == "x" }

// stopped reports whether the process is stopped by a signal or a tracer.
func (m member) stopped() bool { return m.state != "" && stoppedState(m.state[0]) }

// stoppedState reports whether a /proc state letter is a stop by a signal
// ('T') or a tracer ('t').
func stoppedState(state byte) bool { return state == 'T' || state == 't' }

func memberOf(s procfs.ProcStat) member {
	return member{pid: s.PID, state: s.State, startTicks: s.Starttime, rss: int64(s.ResidentMemory()), cpu: cpuTime(s)}
}

// cpuTime is the CPU time of the process s is the stat of, user and
// system, the children it reaped included (/proc/PID/stat counts in
// USER_HZ, 100 on Linux).
func cpuTime(s procfs.ProcStat) time.Duration {
	return time.Duration(int64(s.UTime+s.STime)+int64(s.CUTime+s.CSTime)) * (time.Second / 100)
}

// groupMembers lists every process whose process group is pgid, with one
// read of the proc directory and one stat per process.
func groupMembers(fs procfs.FS, pgid int) ([]member, error) {
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []member
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // gone between the listing and the read
		}
		if st.PGRP == pgid {
			out = append(out, memberOf(st))
		}
	}
	return out, nil
}

// groupSampler sums the resident memory of a group. It remembers which pids
// of the last listing were outside the group and does not read them again:
// a process cannot join a group of another session. A pid the kernel gave
// out again since the last listing (between ns_last_pid then and now,
// round the wrap) names a new process and is judged again, whatever was
// remembered under it: with 32768 pids a busy machine reuses one between
// two samples. Not safe for concurrent use.
type groupSampler struct {
	fs      procfs.FS
	pgid    int
	outside map[int]bool // pid -> true when outside the group at the last listing
	next    map[int]bool
	// pgidOf asks the kernel for a process's group without parsing its
	// stat file; nil (fixture trees) reads the stat file instead.
	pgidOf func(pid int) (int, error)
	// lastPid returns the last pid the kernel gave out (ns_last_pid),
	// false when it cannot be read: then nothing remembered is trusted.
	// nil (fixture trees, where a reused pid vanishes first) trusts it.
	lastPid func() (int, bool)
	// prevLast is lastPid's answer before the last listing, -1 if none.
	prevLast int
	// esc, when set, collects the batch's processes outside the group:
	// a process seen for the first time outside it is the batch's when
	// its parent is (members, last) or its environment carries marker.
	// procRoot is where their stat and environ files are read.
	esc      *escapees
	marker   []byte
	procRoot string
	// since is the leader's start time in clock ticks: a process started
	// before it cannot be the batch's.
	since   uint64
	members map[int]bool // the batch's pids seen in this listing
	last    map[int]bool // and in the one before
	// cpu is the CPU time of the members of the last sample (cpuTime).
	cpu time.Duration
}

func newGroupSampler(fs procfs.FS, pgid int) *groupSampler {
	return &groupSampler{fs: fs, pgid: pgid, outside: map[int]bool{}, next: map[int]bool{},
		pgidOf: unix.Getpgid, lastPid: func() (int, bool) { return nsLastPid(procfs.DefaultMountPoint) }, prevLast: -1}
}

// givenSince returns whether pid may have been given out to a new process
// since the last listing: it lies in (prev, last], round the wrap when
// last < prev. Always true when either figure is unknown.
func givenSince(pid, prev, last int, known bool) bool {
	switch {
	case !known || prev < 0:
		return true
	case last >= prev:
		return pid > prev && pid <= last
	default: // wrapped round
		return pid > prev || pid <= last
	}
}

// sample returns the group's resident bytes and the number of its live
// processes.
func (g *groupSampler) sample() (rss int64, live int, err error) {
	// The last pid is read before the listing: a pid given out after the
	// read is judged again at the next listing, one sample late at worst.
	last, known, prev := 0, true, g.prevLast
	if g.lastPid != nil {
		last, known = g.lastPid()
		g.prevLast = -1
		if known {
			g.prevLast = last
		}
	}
	fresh := func(pid int) bool { return g.lastPid != nil && givenSince(pid, prev, last, known) }
	procs, err := g.fs.AllProcs()
	if err != nil {
		return 0, 0, fmt.Errorf("list processes: %w", err)
	}
	clear(g.next)
	g.cpu = 0
	if g.esc != nil {
		g.last, g.members = g.members, g.last
		if g.members == nil {
			g.members = map[int]bool{}
		}
		clear(g.members)
	}
	for _, p := range procs {
		out, seen := g.outside[p.PID]
		if seen && fresh(p.PID) {
			out, seen = false, false // another process under the pid
		}
		if seen && out {
			g.next[p.PID] = true
			continue
		}
		// getpgid is one system call; parsing /proc/PID/stat for every
		// process of the machine is what made sampling expensive.
		escapee := false
		if g.pgidOf != nil {
			pg, err := g.pgidOf(p.PID)
			if err != nil {
				continue // ended since the listing
			}
			if pg != g.pgid {
				if !g.judge(p.PID, seen) {
					continue
				}
				escapee = true
			}
		}
		st, err := p.Stat()
		if err != nil {
			continue
		}
		if st.PGRP != g.pgid && !escapee {
			if g.pgidOf == nil { // a fixture tree: its stat file is the only word
				g.next[p.PID] = true
				continue
			}
			// In the group at getpgid, out of it at this read: it left
			// in between (setsid right after a fork), or its pid went to
			// another process. Judged as one seen for the first time, and
			// not remembered as outside: judged again at the next listing.
			if g.esc == nil {
				continue
			}
			if ours, _ := g.escaped(p.PID, false); !ours {
				continue
			}
		}
		g.next[p.PID] = false
		if g.members != nil {
			g.members[p.PID] = true
		}
		m := memberOf(st)
		if !m.gone() {
			live++
		}
		rss += m.rss
		g.cpu += m.cpu
	}
	g.outside, g.next = g.next, g.outside
	return rss, live, nil
}

// judge decides on pid, outside the group: true when it is the batch's
// (an escapee, counted). Otherwise it is remembered as outside, not read
// again, unless the verdict may change (see escaped).
func (g *groupSampler) judge(pid int, member bool) bool {
	if g.esc == nil {
		g.next[pid] = true
		return false
	}
	ours, final := g.escaped(pid, member)
	if !ours && final {
		g.next[pid] = true
	}
	return ours
}

// escaped reports whether pid, outside the group, is the batch's: known
// as such, a member at the last look (member), or one with a parent of
// the batch or the batch's marker in its environment (then remembered).
// final is false when a later look may say otherwise: its stat could not
// be read, or it started since the batch and showed no environment at all
// (the moment of an execve), not being a kernel thread.
func (g *groupSampler) escaped(pid int, member bool) (ours, final bool) {
	st, err := readStat(g.procRoot, pid)
	if err != nil {
		return false, false
	}
	if g.esc.has(pid, st.startTicks) {
		return true, true
	}
	if member || g.members[st.ppid] || g.last[st.ppid] {
		g.esc.add(pid, st.startTicks)
		return true, true
	}
	if len(g.marker) == 0 {
		return false, true
	}
	carries, nonEmpty := readsMarker(g.procRoot, pid, g.marker)
	if carries {
		g.esc.add(pid, st.startTicks)
		return true, true
	}
	return false, nonEmpty || st.kernel || st.startTicks < g.since
}

// StartTicks returns the start time of pid in clock ticks since boot,
// field 22 of procRoot/PID/stat: with the pid, it names a process across
// pid reuse (a batch's process group, the controller that published a
// file). It is read at every batch's start: one read and one field, not
// procfs's stat of the directory and parse of all 52 fields (5 % of a run
// of short tasks).
func StartTicks(procRoot string, pid int) (uint64, error) {
	st, err := readStat(procRoot, pid)
	return st.startTicks, err
}

// bootID is this boot's id, read once: it cannot change while the
// process lives.
var bootID = sync.OnceValue(func() string { return readBootID(procfs.DefaultMountPoint) })

// readBootID returns the kernel's boot id under the proc root, "" when it
// cannot be read.
func readBootID(procRoot string) string {
	b, err := kernfile.Read(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// signalGroup sends sig to every process of the group; a group that no
// longer exists is not an error.
func signalGroup(pgid int, sig unix.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, pgid, err)
	}
	return nil
}

// leftoverWait bounds how long KillLeftover waits for the killed processes
// to disappear.
const leftoverWait = 5 * time.Second

// KillLeftover kills what a previous controller left of a batch's process
// group, for a controller that restarts after a crash. The group is judged
// to be the recorded one when
//   - the boot id matches (when recorded), and
//   - the process whose pid is PGID, if it exists, has the recorded start
//     time: a different start time means the pid was reused by another
//     process, which is left alone (killed 0, no error); and
//   - every other process of the group started at or after StartTicks.
//
// Then the whole group gets SIGKILL, and KillLeftover waits (up to 5 s) for
// its processes to be gone; killed counts the live processes found.
//
// When the record names the batch's cgroup, every process still in it is
// killed first (whatever group or session it moved to) and the cgroup is
// removed.
func KillLeftover(pg ProcessGroup) (killed int, err error) {
	if pg.Cgroup != nil {
		n, err := killCgroup(*pg.Cgroup)
		killed += n
		if err != nil {
			return killed, err
		}
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return killed, fmt.Errorf("open procfs: %w", err)
	}
	n, err := killLeftover(fs, procfs.DefaultMountPoint, pg)
	return killed + n, err
}

// killCgroup kills what is left in a recorded cgroup and removes it; a
// cgroup already gone counts as empty. A record naming a cgroup that is not
// a batch's (its parent is not a "lardon3d-" subtree) is refused: the state
// directory must not be a way to kill another service's processes.
func killCgroup(ref cgroup.Ref) (int, error) {
	for _, d := range ref.Dirs {
		if !strings.HasPrefix(filepath.Base(filepath.Dir(d)), "lardon3d-") {
			return 0, fmt.Errorf("%w: recorded cgroup %s is not under a lardon3d subtree", ErrInvalidSpec, d)
		}
	}
	g, err := cgroup.Load(ref)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := g.Kill(leftoverWait)
	if err != nil {
		return n, fmt.Errorf("%w: %v", ErrLeftoverSurvived, err)
	}
	return n, g.Remove()
}

// KillLeftoverCgroups kills every process in the batch cgroups a previous
// controller left under the subtree t, and removes them. It returns how
// many live processes it found.
func KillLeftoverCgroups(t *cgroup.Tree) (int, error) {
	groups, err := t.Leftovers()
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, g := range groups {
		n, err := g.Kill(leftoverWait)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %v", ErrLeftoverSurvived, err))
			continue
		}
		if err := g.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

func killLeftover(fs procfs.FS, procRoot string, pg ProcessGroup) (int, error) {
	if pg.PGID <= 1 {
		return 0, fmt.Errorf("%w: process group %d", ErrInvalidSpec, pg.PGID)
	}
	if pg.BootID != "" {
		if cur := readBootID(procRoot); cur != "" && cur != pg.BootID {
			return 0, nil // another boot: nothing of the group can be left
		}
	}
	members, err := groupMembers(fs, pg.PGID)
	if err != nil {
		return 0, err
	}
	if ticks, err := StartTicks(procRoot, pg.PGID); err == nil && ticks != pg.StartTicks {
		return 0, nil // the pid was reused: not our group
	}
	live := 0
	for _, m := range members {
		if m.startTicks < pg.StartTicks {
			return 0, nil // older than the recorded leader: another group
		}
		if !m.gone() {
			live++
		}
	}
	if live == 0 {
		return 0, nil
	}
	deadline := time.Now().Add(leftoverWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		if err := signalGroup(pg.PGID, unix.SIGKILL); err != nil {
			return live, err
		}
		members, err := groupMembers(fs, pg.PGID)
		if err != nil {
			return live, err
		}
		left := 0
		for _, m := range members {
			if !m.gone() {
				left++
			}
		}
		if left == 0 {
			return live, nil
		}
		if time.Now().After(deadline) {
			return live, fmt.Errorf("%w: %d of process group %d", ErrLeftoverSurvived, left, pg.PGID)
		}
		time.Sleep(wait)
	}
}

// KillByEnv kills, with SIGKILL, every process of this user (same real
// uid as the caller) whose environment holds name=value, and the process
// groups they lead, except the caller's own group. A restarted controller
// without cgroups uses it with the variable every batch carries (its state
// directory) to reach what a crashed one left before the group could be
// recorded, or what left the group with setsid. A process of another user
// carrying the variable is never touched, nor its group. It returns how
// many processes it killed.
func KillByEnv(name, value string) (int, error) {
	if name == "" || value == "" {
		return 0, fmt.Errorf("%w: empty environment marker", ErrInvalidSpec)
	}
	return killByEnv(procfs.DefaultMountPoint, name+"="+value, 0)
}

// killByEnv is KillByEnv over the processes of procRoot, those with a pid
// above after only (0: all; all too when the kernel's pids wrapped round
// since after was given out).
func killByEnv(procRoot, entry string, after int) (int, error) {
	pids, err := pidsAfter(procRoot, after)
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	want := []byte(entry)
	self, ownGroup, uid := os.Getpid(), unix.Getpgrp(), uint32(os.Getuid())
	groups := map[int]bool{}
	found := 0
	for _, pid := range pids {
		if pid == self {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(procRoot, strconv.Itoa(pid)), &st) != nil || st.Uid != uid {
			continue // another user's process, whatever its environment
		}
		if !carriesMarker(procRoot, pid, want) {
			continue
		}
		found++
		// Only a group this process leads: a process that carries the
		// variable in someone's shell job must not take the job's other
		// processes with it.
		if pg, err := unix.Getpgid(pid); err == nil && pg == pid && pg > 1 && pg != ownGroup {
			groups[pg] = true
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for pg := range groups {
		_ = signalGroup(pg, unix.SIGKILL)
	}
	return found, nil
}
