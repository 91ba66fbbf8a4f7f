package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/trust"
)

// ErrRunAsUser: the batch cannot be run as Spec.User: a controller that is
// not root asked for another user, or the run or log directory (or one
// above it) may be changed by someone else than the controller. Start
// wraps it with the details.
var ErrRunAsUser = errors.New("cannot run the batch as its user")

// User is who a batch runs as (Spec.User): the owner of the task's
// manifest, as atd, cron and slurmd run a job as its owner.
type User struct {
	// UID is the user id the command runs with (real, effective and saved).
	UID uint32
	// GID is the group id the command runs with (real, effective and
	// saved).
	GID uint32
	// Groups are the supplementary groups, set exactly as given: empty
	// drops the controller's own. LookupUser includes GID, as initgroups
	// does.
	Groups []uint32
	// Name is the login name (USER and LOGNAME); "" when unknown (a uid
	// without a passwd entry), and then neither is set.
	Name string
	// Home is the home directory (HOME); LookupUser gives "/" for a uid
	// without a passwd entry, as login does for a user without one. ""
	// leaves HOME unset.
	Home string
	// Shell is the login shell (SHELL, for a batch run as another user
	// than the controller's); "" gives DefaultShell.
	Shell string
}

// passwdFile is where LookupUser reads a user's login shell, which
// os/user does not give.
const passwdFile = "/etc/passwd"

// LookupUser returns the user uid as found by the standard library's
// os/user (with CGO_ENABLED=0, the pure-Go reader of /etc/passwd and
// /etc/group; with cgo, NSS): Name and Home from the passwd entry, GID the
// entry's primary group (the gid argument is not used then), Groups the
// user's groups (user.LookupGroupIds), GID always among them and first;
// Shell the entry's in /etc/passwd ("" for a user only a directory service
// knows: DefaultShell).
//
// A uid without a passwd entry is legal (a container, a directory service
// that is down) and is no error: Name "", Home "/", GID gid (the caller's,
// typically the manifest file's group), Groups [gid]. Any other lookup
// failure (unreadable /etc/passwd or /etc/group) is an error: running
// without the user's groups would not be running as the user.
func LookupUser(uid, gid uint32) (*User, error) {
	pw, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if errors.As(err, new(user.UnknownUserIdError)) {
		return &User{UID: uid, GID: gid, Groups: []uint32{gid}, Home: "/"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up uid %d: %w", uid, err)
	}
	primary, err := strconv.ParseUint(pw.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("look up uid %d: primary gid %q: %w", uid, pw.Gid, err)
	}
	u := &User{UID: uid, GID: uint32(primary), Groups: []uint32{uint32(primary)}, Name: pw.Username, Home: pw.HomeDir,
		Shell: passwdShell(passwdFile, uid)}
	if u.Home == "" {
		u.Home = "/"
	}
	ids, err := pw.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("look up the groups of %s (uid %d): %w", pw.Username, uid, err)
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("look up the groups of %s (uid %d): gid %q: %w", pw.Username, uid, id, err)
		}
		if !slices.Contains(u.Groups, uint32(g)) {
			u.Groups = append(u.Groups, uint32(g))
		}
	}
	return u, nil
}

// passwdShell is the shell field of uid's first entry in the passwd file
// at path; "" when there is none, or the file cannot be read.
func passwdShell(path string, uid uint32) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	id := strconv.FormatUint(uint64(uid), 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[2] == id {
			return fields[6]
		}
	}
	return ""
}

// switchUser returns the user the command must be switched to: u when the
// controller is root (always, even for uid 0: the gid and groups are the
// user's then too), nil when the command runs with the controller's own
// credentials (no u, or u is the controller's own uid: a controller that
// is not root has nothing to change, nor could it). A controller that is
// not root cannot run as another uid: an error wrapping ErrRunAsUser.
func switchUser(u *User) (*User, error) { return switchUserFrom(u, os.Geteuid()) }

// switchUserFrom is switchUser for a controller of effective uid euid.
func switchUserFrom(u *User, euid int) (*User, error) {
	if u == nil {
		return nil, nil
	}
	switch {
	case euid == 0:
		return u, nil
	case int64(u.UID) == int64(euid):
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: the controller runs as uid %d, not root, and cannot run a batch as uid %d",
			ErrRunAsUser, euid, u.UID)
	}
}

// credential is the command's credential as u: NoSetGroups false, so the
// supplementary groups are exactly u's (none when u has none), never the
// controller's.
func (u *User) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: slices.Clone(u.Groups)}
}

// applyUserEnv replaces the controller's HOME, USER and LOGNAME with u's,
// and drops those u has no value for rather than pass the controller's
// (root's) on.
func applyUserEnv(e *environment, u *User) {
	for _, v := range []struct{ name, value string }{{"HOME", u.Home}, {"USER", u.Name}, {"LOGNAME", u.Name}} {
		if v.value == "" {
			e.unset(v.name)
		} else {
			e.set(v.name, v.value)
		}
	}
}

// prepareRunDir checks that dir, the run directory of a batch run as
// another user, and the directories above it can be changed by the
// controller alone (checkControllerOnly), and makes dir traversable (0711:
// search, not list) so that the user reaches the items file in it.
//
// The run directory is not given to the user (chown): the controller
// creates, rewrites, renames and removes files in it by path, as root, and
// a user who could write the directory could plant a hard link to a file
// of root's under the name of the next items file (O_NOFOLLOW stops
// symbolic links, not hard links), or swap a pool file between two checks;
// one who could write a directory above it could swap the whole directory
// for a symbolic link. Only the items file is the user's
// (claimItemsFile).
func prepareRunDir(dir string) error {
	if err := checkControllerOnly(dir, "run directory"); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("run directory: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("run directory: %w", &os.PathError{Op: "fstat", Path: dir, Err: err})
	}
	if !trust.Safe(&st, true) { // swapped since the check
		return fmt.Errorf("%w: %w", ErrRunAsUser, trust.Untrusted("run directory", dir, dir, &st))
	}
	if st.Mode&0o011 != 0o011 {
		if err := unix.Fchmod(fd, st.Mode&0o7777|0o011); err != nil {
			return fmt.Errorf("run directory: %w", &os.PathError{Op: "chmod", Path: dir, Err: err})
		}
	}
	return nil
}

// checkControllerOnly is trust.ControllerOnly, its error wrapping
// ErrRunAsUser too: a root controller writes into dir by path for a batch
// run as another user, who must not be able to swap an entry for a link.
func checkControllerOnly(dir, what string) error {
	if err := trust.ControllerOnly(dir, what); err != nil {
		return fmt.Errorf("%w: %w", ErrRunAsUser, err)
	}
	return nil
}

// errForeignFile: an items file that is not the controller's to hand out
// (another user's, linked elsewhere, not a regular file).
var errForeignFile = errors.New("items file belongs to someone else")

// claimItemsFile makes the open items file f u's (u nil: the controller's
// own user's) before anything is written to it: fchown and fchmod on the
// descriptor, never by path. A file owned by a third user (a pool file a
// batch of another user had: it may still hold it open), with another link
// or not regular, is refused with errForeignFile: the caller removes it
// and creates a new one.
func claimItemsFile(f *os.File, u *User) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	euid := uint32(os.Geteuid())
	want := euid
	if u != nil {
		want = u.UID
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || (st.Uid != want && st.Uid != euid) {
		return errForeignFile
	}
	if u == nil {
		return nil
	}
	if st.Uid != u.UID || st.Gid != u.GID {
		if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
			return err
		}
	}
	if st.Mode&0o7777 != 0o600 {
		return f.Chmod(0o600)
	}
	return nil
}

// searchProblem says why u cannot reach what is inside dir (search
// permission on dir and on every directory above it, judged by the mode
// bits: ACLs are not read), "" when it can or the check cannot tell.
func searchProblem(dir string, u *User) string {
	if u.UID == 0 {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	var chain []string
	for d := abs; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, d := range slices.Backward(chain) {
		var st unix.Stat_t
		if unix.Stat(d, &st) != nil {
			return ""
		}
		var bit uint32
		switch {
		case st.Uid == u.UID:
			bit = 0o100
		case st.Gid == u.GID || slices.Contains(u.Groups, st.Gid):
			bit = 0o010
		default:
			bit = 0o001
		}
		if st.Mode&bit == 0 {
			return fmt.Sprintf("uid %d cannot enter %s (owner uid %d gid %d, mode %#o)", u.UID, d, st.Uid, st.Gid, st.Mode&0o7777)
		}
	}
	return ""
}

// MayRead reports (nil) whether u may read path by its mode bits: search
// on every directory from / down, read on the file itself, each judged as
// the kernel does for u (the owner's bits when u owns it, else the
// group's when one of u's groups owns it, else the others'), symlinks
// resolved first. ACLs are not read: where an ACL grants more than the
// bits, MayRead refuses. A controller running as root resolves a task's
// items itself; what u cannot read must not reach u's batch.
func (u *User) MayRead(path string) error {
	if u.UID == 0 {
		return nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	dir := "/"
	for _, part := range append([]string{""}, splitPath(real)...) {
		p := filepath.Join(dir, part)
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
		want := uint32(1) // search
		if p == real && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			want = 4 // read
		}
		if !u.allowed(&st, want) {
			return fmt.Errorf("%s: %w for uid %d", p, fs.ErrPermission, u.UID)
		}
		dir = p
	}
	return nil
}

// allowed says whether u has the permission bits want (r=4, w=2, x=1) on
// a file of stat st.
func (u *User) allowed(st *unix.Stat_t, want uint32) bool {
	shift := 0 // others
	switch {
	case st.Uid == u.UID:
		shift = 6
	case st.Gid == u.GID || slices.Contains(u.Groups, st.Gid):
		shift = 3
	}
	return (st.Mode>>shift)&want == want
}

// splitPath splits a clean absolute path into its components.
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// AsUser runs fn with u's filesystem identity: on an OS thread locked
// for it, whose fsuid, fsgid and groups are u's for the call (set with raw
// system calls, which change the calling thread only), so that every path
// fn resolves, lists or opens is judged by the kernel as for u, ACLs
// included, and a root controller learns nothing through fn that u could
// not. The thread's identity is then put back (fsuid 0 gives back root's
// file capabilities) and the thread returned to the runtime: a thread must
// not be thrown away, since a batch it forked earlier would get its
// parent-death signal. Where it cannot be put back, AsUser panics rather
// than let other goroutines run as u. fn must do its file system work on
// its own goroutine. With u nil or root, fn runs as is.
func AsUser(u *User, fn func() error) error {
	if u == nil || u.UID == 0 || os.Geteuid() != 0 {
		return fn()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	saved, err := threadGroups()
	if err != nil {
		return err
	}
	defer func() {
		if err := becomeOnThread(uint32(os.Geteuid()), uint32(os.Getegid()), saved); err != nil {
			panic(fmt.Sprintf("runner: the thread's identity cannot be put back: %v", err))
		}
	}()
	groups := u.Groups
	if len(groups) == 0 {
		groups = []uint32{u.GID}
	}
	if err := becomeOnThread(u.UID, u.GID, groups); err != nil {
		return err
	}
	return fn()
}

// threadGroups are the calling thread's supplementary groups.
func threadGroups() ([]uint32, error) {
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	if e != 0 {
		return nil, fmt.Errorf("getgroups: %w", e)
	}
	groups := make([]uint32, n+1) // never empty: a pointer to pass
	m, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&groups[0])), 0)
	if e != 0 {
		return nil, fmt.Errorf("getgroups: %w", e)
	}
	return groups[:m], nil
}

// becomeOnThread gives the calling thread groups, fsgid gid and fsuid uid.
// setfsuid and setfsgid return the previous value and never an error: each
// is called again to read back what took.
func becomeOnThread(uid, gid uint32, groups []uint32) error {
	ptr := uintptr(0)
	if len(groups) > 0 {
		ptr = uintptr(unsafe.Pointer(&groups[0]))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), ptr, 0); e != 0 {
		return fmt.Errorf("setgroups on the thread: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	gotGID, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	gotUID, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	if uint32(gotUID) != uid || uint32(gotGID) != gid {
		return fmt.Errorf("the thread's filesystem identity is %d:%d, not %d:%d", gotUID, gotGID, uid, gid)
	}
	return nil
}
