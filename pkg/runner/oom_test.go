package runner

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The batch's own processes read their oom_score_adj: the leader, a child
// it forks once it started, and one forked at once (before the runner's
// write may have reached the leader), which a sample raises.
func TestBatchProcessesRunAheadOfUserProgramsForTheOOMKiller(t *testing.T) {
	for _, withCgroup := range []bool{false, true} {
		t.Run(map[bool]string{false: "group", true: "cgroup"}[withCgroup], func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "go")
			cmd := `sleep 300 & early=$!
while [ ! -e ` + gate + ` ]; do sleep 0.01; done
echo "leader $(cat /proc/self/oom_score_adj)"
sh -c 'echo "child $(cat /proc/self/oom_score_adj)"'
echo "early $early"
wait`
			s := testSpec(t, "sh", "-c", cmd)
			if withCgroup {
				s = cgSpec(t, testTree(t), "sh", "-c", cmd)
			}
			b := start(t, s)
			leader := b.Group().PGID
			if got, err := readOOMScoreAdj("/proc", leader); err != nil || got != BatchOOMScoreAdj {
				t.Fatalf("leader's oom_score_adj once Start returned = %d, %v; want %d", got, err, BatchOOMScoreAdj)
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var early int
			waitFor(t, "the batch's report", func() bool {
				log := readLog(t, s)
				i := strings.Index(log, "early ")
				if i < 0 {
					return false
				}
				early, _ = strconv.Atoi(strings.Fields(log[i+len("early "):])[0])
				return true
			}, func() string { return readLog(t, s) })
			log := readLog(t, s)
			for _, want := range []string{"leader 1000\n", "child 1000\n"} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, log)
				}
			}
			// Forked before the gate, perhaps before the runner's write:
			// a sample raises it.
			waitFor(t, "the early child raised", func() bool {
				got, err := readOOMScoreAdj("/proc", early)
				return err == nil && got == BatchOOMScoreAdj
			})
		})
	}
}

// A batch run as another user cannot lower its own score under the one
// root gave it (where the controller holds CAP_SYS_RESOURCE, which sets
// that floor), and never under 0: it cannot put itself behind the user's
// programs.
func TestBatchUserCannotLowerItsOOMScore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("runs a batch as uid 65534: needs root")
	}
	floor := hasCapSysResource(t)
	u, err := LookupUser(65534, 65534)
	if err != nil {
		t.Fatal(err)
	}
	s := testSpec(t, "sh", "-c", `echo -1 > /proc/self/oom_score_adj && echo below-zero
echo 999 > /proc/self/oom_score_adj && echo lowered; echo "now $(cat /proc/self/oom_score_adj)"`)
	s.User = u
	if err := os.Chmod(filepath.Dir(s.LogPath), 0o755); err != nil {
		t.Fatal(err)
	}
	b := start(t, s)
	b.Wait()
	log := readLog(t, s)
	if strings.Contains(log, "below-zero") {
		t.Fatalf("a batch of uid 65534 put itself behind the user's programs:\n%s", log)
	}
	if floor && (strings.Contains(log, "lowered") || !strings.Contains(log, "now 1000\n")) {
		t.Fatalf("a batch of uid 65534 lowered its oom_score_adj under the floor root set:\n%s", log)
	}
}

// hasCapSysResource reports whether this process holds CAP_SYS_RESOURCE
// (some containers drop it: root then can neither lower a score nor set
// a floor).
func hasCapSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n&(1<<24) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

func TestLowerOwnOOMScoreAdj(t *testing.T) {
	before, err := readOOMScoreAdj("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = SetOOMScoreAdj("/proc", os.Getpid(), before) })
	got, err := LowerOwnOOMScoreAdj()
	now, rerr := readOOMScoreAdj("/proc", os.Getpid())
	if rerr != nil {
		t.Fatal(rerr)
	}
	if got != now {
		t.Errorf("LowerOwnOOMScoreAdj says %d, /proc says %d", got, now)
	}
	if hasCapSysResource(t) {
		if err != nil || now != ControllerOOMScoreAdj {
			t.Errorf("with CAP_SYS_RESOURCE: %d, %v; want %d", now, err, ControllerOOMScoreAdj)
		}
	} else if err == nil || now != before {
		t.Errorf("without CAP_SYS_RESOURCE: %d, %v; want the error and %d kept", now, err, before)
	}
}
