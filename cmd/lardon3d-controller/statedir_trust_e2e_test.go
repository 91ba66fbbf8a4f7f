package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func needRootE2E(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: another user's files are made (CI runs as root)")
	}
}

func manifestFor(name, script string, count int) string {
	return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n  command: [sh, -c, '%s']\n  items: {count: %d}\n", name, script, count)
}

// planted is a state directory as an attacker with write access to the
// spool leaves it: owned by uid 65534, its logs/a.log and controller.lock
// links to files the controller's user owns.
func planted(t *testing.T, spool string) (victims []string) {
	t.Helper()
	sd := filepath.Join(spool, stateDirName)
	if err := os.MkdirAll(filepath.Join(sd, "logs"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{filepath.Join(sd, "logs", "a.log"), filepath.Join(sd, "controller.lock")} {
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
		victims = append(victims, victim)
	}
	for _, p := range []string{sd, filepath.Join(sd, "logs")} {
		if err := os.Lchown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	return victims
}

func untouched(t *testing.T, victims []string) {
	t.Helper()
	for _, v := range victims {
		if b, err := os.ReadFile(v); err != nil || string(b) != "precious\n" {
			t.Errorf("%s written through a planted link: %q, %v", v, b, err)
		}
	}
}

// A spool others can write (--allow-shared-spool) keeps its state outside
// it: a SPOOL/.lardon3d planted by another user, full of links to the
// controller's user's files, is never used, and the task runs.
func TestASharedSpoolKeepsItsStateWhereOthersCannotPlantLinks(t *testing.T) {
	needRootE2E(t)
	spool := newSpool(t)
	// The spool's group reaches it (t.TempDir makes 0700 directories).
	for d := filepath.Dir(spool); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(spool, 0, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(spool, 0o770); err != nil {
		t.Fatal(err)
	}
	victims := planted(t, spool)
	writeManifest(t, spool, "a.yaml", manifestFor("a", "echo ran", 1))
	c := startController(t, spool, "--allow-shared-spool")
	eventually(t, time.Minute, "a Done", func() bool {
		select {
		case <-c.done:
			t.Fatalf("the controller exited %d", c.code)
		default:
		}
		return phaseOf(t, filepath.Join(spool, "a.yaml")) == "Done"
	})
	untouched(t, victims)
	out, code := runCLI(t, "logs", "a", "--spool", spool)
	if code != 0 || !strings.Contains(out, "ran") {
		t.Errorf("logs a (exit %d) does not find the log kept outside the spool:\n%s", code, out)
	}
}

// A state directory someone else owns, or one that is a link, is refused
// at start with the reason; nothing is written through it.
func TestAStateDirectoryOfSomeoneElseIsRefusedAtStart(t *testing.T) {
	needRootE2E(t)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, spool string) []string
	}{
		{"owned by another user", planted},
		{"a link", func(t *testing.T, spool string) []string {
			elsewhere := t.TempDir()
			if err := os.Symlink(elsewhere, filepath.Join(spool, stateDirName)); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spool := newSpool(t)
			victims := tc.plant(t, spool)
			writeManifest(t, spool, "a.yaml", manifestFor("a", "echo ran", 1))
			c := startController(t, spool)
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				t.Fatal("the controller started on a state directory it does not own alone")
			}
			if c.code == 0 || !strings.Contains(c.stderr.String(), "state directory") {
				t.Errorf("exit %d, output does not name the state directory:\n%s", c.code, tail(c.stderr.String(), 2000))
			}
			untouched(t, victims)
			if phaseOf(t, filepath.Join(spool, "a.yaml")) == "Done" {
				t.Error("a ran")
			}
		})
	}
}
