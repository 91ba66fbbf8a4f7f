package registry

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const gib = int64(1) << 30

func TestDecide(t *testing.T) {
	solo := func(pid int, spools ...string) Claim {
		return Claim{PID: pid, UID: 1000, User: "alice", Spools: spools}
	}
	shared := func(pid int, capacity int64, spools ...string) Claim {
		return Claim{PID: pid, UID: 1000, User: "alice", Spools: spools, Share: true, MemoryCapacity: capacity}
	}
	tests := []struct {
		name     string
		live     []Claim
		want     Claim
		memory   int64
		err      error  // a sentinel, when not a *BusyError
		busyPID  int    // the Other of the *BusyError, 0 for none
		contains string // in the error's text
	}{
		{name: "alone", want: solo(1, "/a"), memory: 8 * gib},
		{name: "alone shared", want: shared(1, 4*gib, "/a"), memory: 8 * gib},
		{name: "share without capacity", want: shared(1, 0, "/a"), memory: 8 * gib, err: ErrShareNeedsCapacity},
		{name: "share without capacity, others live", live: []Claim{solo(2, "/b")}, want: shared(1, 0, "/a"), memory: 8 * gib, err: ErrShareNeedsCapacity},
		{name: "share, machine memory unknown", want: shared(1, gib, "/a"), contains: "memory is unknown"},
		{name: "own pid is no conflict", live: []Claim{solo(1, "/a")}, want: solo(1, "/a"), memory: 8 * gib},
		{name: "other runs", live: []Claim{solo(2, "/b")}, want: solo(1, "/a"), memory: 8 * gib, busyPID: 2,
			contains: "a controller already runs on this machine: pid 2 (user alice) serves /b: serve every spool from one controller"},
		{name: "other shares, this one not", live: []Claim{shared(2, gib, "/b")}, want: solo(1, "/a"), memory: 8 * gib, busyPID: 2, contains: "--share"},
		{name: "this one shares, other not", live: []Claim{solo(2, "/b")}, want: shared(1, gib, "/a"), memory: 8 * gib, busyPID: 2, contains: "--share"},
		{name: "other shares without capacity", live: []Claim{{PID: 2, Share: true}}, want: shared(1, gib, "/a"), memory: 8 * gib, busyPID: 2, contains: "--share"},
		{name: "spool served, both share and fit", live: []Claim{shared(2, gib, "/b", "/a")}, want: shared(1, gib, "/a"), memory: 8 * gib, busyPID: 2,
			contains: "serves /b, /a: /a is already served by it"},
		{name: "spool served by the second", live: []Claim{shared(2, gib, "/b"), solo(3, "/c")}, want: solo(1, "/c"), memory: 8 * gib, busyPID: 3, contains: "/c is already served"},
		{name: "both share and fit", live: []Claim{shared(2, 3*gib, "/b"), shared(3, 4*gib, "/c")}, want: shared(1, gib, "/a"), memory: 8 * gib},
		{name: "both share, fit exactly", live: []Claim{shared(2, 6*gib, "/b")}, want: shared(1, 2*gib, "/a"), memory: 8 * gib},
		{name: "both share, do not fit", live: []Claim{shared(1234, 6*gib, "/b")}, want: shared(1, 4*gib, "/a"), memory: 8 * gib, busyPID: 1234,
			contains: "pid 1234 declared 6 GiB, this one asks 4 GiB, the machine has 8 GiB"},
		{name: "three share, do not fit, names the biggest", live: []Claim{shared(2, 3*gib, "/b"), shared(3, 4*gib, "/c")}, want: shared(1, 1536<<20, "/a"), memory: 8 * gib, busyPID: 3,
			contains: "pid 2 declared 3 GiB, pid 3 declared 4 GiB, this one asks 1.5 GiB, the machine has 8 GiB"},
		{name: "damaged huge capacity does not overflow", live: []Claim{shared(2, 1<<62, "/b"), shared(3, 1<<62, "/c")}, want: shared(1, 1<<62, "/a"), memory: 8 * gib, busyPID: 2},
		{name: "unreadable live claim", live: []Claim{{PID: 7, UID: 1000}}, want: solo(1, "/a"), memory: 8 * gib, busyPID: 7,
			contains: "pid 7 (uid 1000) serves spools its claim does not name"},
		// Root's controller (the system service) counts root's claims only.
		{name: "root beside a user's", live: []Claim{solo(2, "/b")}, want: Claim{PID: 1, Spools: []string{"/a"}}, memory: 8 * gib},
		{name: "root beside a user's on its spool", live: []Claim{solo(2, "/a")}, want: Claim{PID: 1, Spools: []string{"/a"}}, memory: 8 * gib},
		{name: "root beside a user's unreadable claim", live: []Claim{{PID: 7, UID: 1000}}, want: Claim{PID: 1, Spools: []string{"/a"}}, memory: 8 * gib},
		{name: "root beside root's", live: []Claim{{PID: 2, Spools: []string{"/b"}}, solo(3, "/c")}, want: Claim{PID: 1, Spools: []string{"/a"}}, memory: 8 * gib, busyPID: 2},
		{name: "root sharing, users' capacities not counted", live: []Claim{shared(2, 6*gib, "/b")}, want: Claim{PID: 1, Spools: []string{"/a"}, Share: true, MemoryCapacity: 4 * gib}, memory: 8 * gib},
		{name: "a user beside root's", live: []Claim{{PID: 2, Spools: []string{"/b"}}}, want: solo(1, "/a"), memory: 8 * gib, busyPID: 2},
		{name: "command named", live: []Claim{{PID: 7, User: "bob", Spools: []string{"/b"}, Command: "lardon3d-controller run --spool /b"}}, want: solo(1, "/a"), memory: 8 * gib, busyPID: 7,
			contains: `pid 7 (user bob, started as "lardon3d-controller run --spool /b") serves /b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := decide(tt.live, tt.want, tt.memory)
			var busy *BusyError
			switch {
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
			case tt.busyPID != 0:
				if !errors.As(err, &busy) || busy.Other.PID != tt.busyPID {
					t.Fatalf("err = %v, want a *BusyError naming pid %d", err, tt.busyPID)
				}
			case tt.contains == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tt.contains != "" && (err == nil || errors.As(err, &busy)):
				t.Fatalf("err = %v, want a plain error", err)
			}
			if tt.contains != "" && !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q\nlacks %q", err, tt.contains)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 512: "512 B", 1024: "1 KiB", 1536: "1.5 KiB", 6 * gib: "6 GiB",
		8*gib - 1: "8 GiB", 7*gib + gib/4: "7.25 GiB", 1 << 62: "4 EiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBesideAndDisplaced(t *testing.T) {
	root := func(pid int, share bool, capacity int64) Claim {
		return Claim{PID: pid, Spools: []string{"/root"}, Share: share, MemoryCapacity: capacity}
	}
	user := func(pid, uid int, share bool, capacity int64) Claim {
		return Claim{PID: pid, UID: uid, Spools: []string{"/u"}, Share: share, MemoryCapacity: capacity}
	}
	tests := []struct {
		name      string
		live      []Claim
		mine      Claim
		displaced int // the PID of root's claim that displaces mine, 0 for none
	}{
		{name: "no root controller", live: []Claim{user(2, 1001, false, 0)}, mine: user(1, 1000, false, 0)},
		{name: "root's appears", live: []Claim{root(2, false, 0)}, mine: user(1, 1000, false, 0), displaced: 2},
		{name: "root's, among users'", live: []Claim{user(3, 1001, false, 0), root(5, false, 0)}, mine: user(1, 1000, false, 0), displaced: 5},
		{name: "both share and fit", live: []Claim{root(2, true, 4*gib)}, mine: user(1, 1000, true, 2*gib)},
		{name: "both share, do not fit", live: []Claim{root(2, true, 7*gib)}, mine: user(1, 1000, true, 2*gib), displaced: 2},
		{name: "root's does not share", live: []Claim{root(2, false, 0)}, mine: user(1, 1000, true, 2*gib), displaced: 2},
		{name: "root is never displaced", live: []Claim{root(2, false, 0)}, mine: root(1, false, 0)},
		{name: "its own pid", live: []Claim{{PID: 1}}, mine: user(1, 1000, false, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := displacedBy(tt.live, tt.mine, 8*gib)
			if ok != (tt.displaced != 0) || ok && c.PID != tt.displaced {
				t.Errorf("displacedBy = %+v, %v; want pid %d", c, ok, tt.displaced)
			}
		})
	}
	live := []Claim{root(2, false, 0), user(3, 1000, false, 0), user(4, 1001, false, 0), {PID: 1}}
	var pids []int
	for _, c := range beside(live, root(1, false, 0)) {
		pids = append(pids, c.PID)
	}
	if !slices.Equal(pids, []int{3, 4}) {
		t.Errorf("beside root's = %v, want the users' 3 and 4", pids)
	}
	if got := beside(live, user(5, 1000, false, 0)); len(got) != 0 {
		t.Errorf("beside a user's = %+v, want none: every claim counts for a user", got)
	}
}

// A claim is genuine only while its lock is held by the very process it
// names, as its owner, running a controller.
func TestGenuine(t *testing.T) {
	ctl := holder{pid: 10, uid: 1000, controller: true}
	for _, tt := range []struct {
		name         string
		owner, named int
		h            holder
		want         bool
	}{
		{"the controller it names", 1000, 10, ctl, true},
		{"root's", 0, 10, holder{pid: 10, uid: 0, controller: true}, true},
		{"no holder found", 1000, 10, holder{uid: -1}, false},
		{"held by another process", 1000, 11, ctl, false},
		{"held by another user's process", 0, 10, ctl, false},
		{"holder's user unknown", 1000, 10, holder{pid: 10, uid: -1, controller: true}, false},
		{"held by flock(1) or a script", 1000, 10, holder{pid: 10, uid: 1000}, false},
	} {
		if got := genuine(tt.owner, tt.named, tt.h); got != tt.want {
			t.Errorf("%s: genuine = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The controller's own binary is recognised by its build information;
// other programs (a shell, this test binary's copy under another name)
// are not.
func TestBuiltAsController(t *testing.T) {
	if builtAsController("/bin/sh") {
		t.Error("/bin/sh reads as a controller")
	}
	if builtAsController("/proc/self/exe") {
		t.Error("the registry's test binary reads as a controller")
	}
	bin := os.Getenv("LARDON3D_BIN")
	if bin == "" {
		t.Skip("LARDON3D_BIN unset: no controller binary to recognise (make unit sets it)")
	}
	if !builtAsController(filepath.Join(bin, "lardon3d-controller")) {
		t.Errorf("%s/lardon3d-controller does not read as a controller", bin)
	}
}
