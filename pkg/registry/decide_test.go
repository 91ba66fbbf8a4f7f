package registry

import (
	"errors"
	"strings"
	"testing"
)

const gib = int64(1) << 30

func TestDecide(t *testing.T) {
	solo := func(pid int, spools ...string) Claim { return Claim{PID: pid, User: "alice", Spools: spools} }
	shared := func(pid int, capacity int64, spools ...string) Claim {
		return Claim{PID: pid, User: "alice", Spools: spools, Share: true, MemoryCapacity: capacity}
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
