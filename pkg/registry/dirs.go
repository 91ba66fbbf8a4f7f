package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// EnvDir names the environment variable that, when set, makes its
	// value the only registry directory (tests, isolated setups).
	EnvDir = "LARDON3D_RUN_DIR"
	// PrimaryDir is the registry directory used where it exists and is
	// writable, or can be created (by root).
	PrimaryDir = "/run/lardon3d"
	// FallbackDir is the registry directory of the controllers that cannot
	// use PrimaryDir: machine-local tmpfs, world-writable on every Linux.
	FallbackDir = "/dev/shm/lardon3d"
)

// Dirs returns the candidate registry directories, in order of
// preference: the value of EnvDir alone when it is set, else PrimaryDir
// and FallbackDir. A controller registers in the first usable one; every
// one that exists is read.
func Dirs() []string {
	if d := os.Getenv(EnvDir); d != "" {
		return []string{d}
	}
	return []string{PrimaryDir, FallbackDir}
}

// firstUsable returns the first of dirs that is, or can be made, a safe
// registry directory, or an error saying why each is not.
func firstUsable(dirs []string) (string, error) {
	var why []string
	for _, d := range dirs {
		err := prepare(d)
		if err == nil {
			return d, nil
		}
		why = append(why, err.Error())
	}
	return "", fmt.Errorf("no registry directory to register in: %s", strings.Join(why, "; "))
}

// prepare creates dir when missing, sticky and world-writable like /tmp so
// that every user's controller can register there, and checks that it is
// safe to write to.
func prepare(dir string) error {
	if err := os.Mkdir(dir, 0o777|fs.ModeSticky); err == nil {
		// mkdir applied the umask.
		if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
			return fmt.Errorf("registry directory %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("registry directory %s: %w", dir, err)
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("registry directory %s is not writable by this user: %w", dir, err)
	}
	return nil
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
		return fmt.Errorf("registry directory %s is owned by uid %d, neither root nor this user: its owner could remove our claim (ask root to create %s with mode 1777)", dir, st.Uid, PrimaryDir)
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
