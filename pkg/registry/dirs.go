package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// EnvDir names the environment variable that, when set, makes its
	// value the directory a controller registers in (tests, isolated
	// setups). For root (the test suite) it is the only directory read;
	// for any other user the standard directories are read all the same,
	// so that a user cannot make a second governor beside the system
	// service's (or another user's) with it.
	EnvDir = "LARDON3D_RUN_DIR"
	// PrimaryDir is the system's registry directory: root's controllers
	// (the system service) register there, and no one else can (root's,
	// mode 0755, made by systemd-tmpfiles or root's controller).
	PrimaryDir = "/run/lardon3d"
	// UsersDir is where other users' controllers register, beside the
	// system's directory: sticky and world-writable like /tmp, made by
	// root only (tmpfiles, or root's controller), never by a user.
	UsersDir = "/run/lardon3d/users"
	// FallbackDir is the registry directory of the users' controllers
	// where UsersDir does not exist: machine-local tmpfs, world-writable
	// on every Linux.
	FallbackDir = "/dev/shm/lardon3d"
)

// Dirs returns the registry directories every controller and verb reads:
// the value of EnvDir alone when it is set and this process is root's;
// else that value first when set, then PrimaryDir, UsersDir and
// FallbackDir.
func Dirs() []string { return dirsFor(os.Getenv(EnvDir), os.Geteuid()) }

// dirsFor is Dirs for the value env of EnvDir and the effective user
// euid: root may isolate itself (nothing it runs is another user's to
// trust or distrust), no one else can hide the system's claims.
func dirsFor(env string, euid int) []string {
	var dirs []string
	if env != "" {
		dirs = append(dirs, filepath.Clean(env))
		if euid == 0 {
			return dirs
		}
	}
	for _, d := range []string{PrimaryDir, UsersDir, FallbackDir} {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// place is a directory a controller may register in, and how it is made.
type place struct {
	dir string
	// system: the system's directory, root's alone (mode 0755, its lock
	// private); made by root.
	system bool
	// noCreate: used where it exists, never made (UsersDir: root makes
	// it; one a user made would be that user's to empty).
	noCreate bool
}

// registerPlaces returns where a controller of uid registers, in order of
// preference: EnvDir alone when set; for root, PrimaryDir, else
// FallbackDir; for another user, UsersDir where root made it, else
// FallbackDir.
func registerPlaces(uid int) []place {
	if d := os.Getenv(EnvDir); d != "" {
		return []place{{dir: filepath.Clean(d)}}
	}
	if uid == 0 {
		return []place{{dir: PrimaryDir, system: true}, {dir: FallbackDir}}
	}
	return []place{{dir: UsersDir, noCreate: true}, {dir: FallbackDir}}
}

// firstUsable returns the first of places that is, or can be made, a safe
// registry directory, or an error saying why each is not.
func firstUsable(places []place) (place, error) {
	var why []string
	for _, p := range places {
		err := prepare(p)
		if err == nil {
			return p, nil
		}
		why = append(why, err.Error())
	}
	return place{}, fmt.Errorf("no registry directory to register in: %s", strings.Join(why, "; "))
}

// prepare makes p's directory when missing and p allows it, and checks
// that it is safe to write to. A shared directory is made sticky and
// world-writable like /tmp, so that every user's controller can register
// there; the system's is made root's, mode 0755, with UsersDir in it.
func prepare(p place) error {
	if p.system {
		return prepareSystem(p.dir)
	}
	if p.noCreate {
		if _, err := os.Lstat(p.dir); err != nil {
			return fmt.Errorf("registry directory %s: %w", p.dir, err)
		}
	} else if err := makeDir(p.dir, 0o777|fs.ModeSticky); err != nil {
		return err
	}
	if err := checkDir(p.dir); err != nil {
		return err
	}
	if err := unix.Access(p.dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("registry directory %s is not writable by this user: %w", p.dir, err)
	}
	return nil
}

// prepareSystem makes the system's directory, root's with mode 0755, and
// UsersDir in it for the other users' controllers. One of an older layout
// (mode 1777) is made 0755: what users left in it stays, read as their
// claims, which never stop root's controller.
func prepareSystem(dir string) error {
	if err := makeDir(dir, 0o755); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("registry directory %s: %w", dir, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir():
		return fmt.Errorf("registry directory %s is not a directory", dir)
	case !ownedByRoot(fi):
		return fmt.Errorf("registry directory %s is not root's: refused for the system's claims", dir)
	case fi.Mode()&(fs.ModePerm|fs.ModeSticky) != 0o755:
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("registry directory %s: %w", dir, err)
		}
	}
	users := filepath.Join(dir, filepath.Base(UsersDir))
	// Where it cannot be made (a file in its place, left in an older
	// layout), the users' controllers fall back to FallbackDir.
	_ = makeDir(users, 0o777|fs.ModeSticky)
	return nil
}

// makeDir creates dir with mode (past the umask) when missing.
func makeDir(dir string, mode fs.FileMode) error {
	err := os.Mkdir(dir, mode)
	if err == nil {
		// mkdir applied the umask.
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("registry directory %s: %w", dir, err)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("registry directory %s: %w", dir, err)
	}
	return nil
}

// ownedByRoot says whether fi is root's.
func ownedByRoot(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}

// checkDir refuses a directory in which someone other than root or us
// could remove or replace our claim, or which a link lets someone else
// choose.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("registry directory %s: %w", dir, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("registry directory %s is a symlink: refused, since whoever owns the link chooses where claims go", dir)
	case !fi.IsDir():
		return fmt.Errorf("registry directory %s is not a directory", dir)
	case st == nil:
		return fmt.Errorf("registry directory %s: owner unknown", dir)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("registry directory %s is owned by uid %d, neither root nor this user: its owner could remove our claim (ask root to create %s: systemd-tmpfiles, deploy/systemd/lardon3d.tmpfiles.conf)", dir, st.Uid, UsersDir)
	case fi.Mode().Perm()&0o002 != 0 && fi.Mode()&fs.ModeSticky == 0:
		return fmt.Errorf("registry directory %s is writable by everyone without the sticky bit: anyone could remove or replace our claim (chmod 1777 %s)", dir, dir)
	}
	return nil
}

// readable says whether scan should read dir: an existing directory, not
// a symlink (whose target is not ours to trust, and where no claim of
// ours is, since Acquire refuses it).
func readable(dir string) bool {
	fi, err := os.Lstat(dir)
	return err == nil && fi.IsDir()
}
