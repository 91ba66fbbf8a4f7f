package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// environment is an ordered set of variables: later sets replace a value in
// place, new names are appended.
type environment struct {
	names  []string
	values map[string]string
}

func newEnvironment(base []string) *environment {
	e := &environment{values: make(map[string]string, len(base)+16)}
	for _, kv := range base {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		e.set(name, value)
	}
	return e
}

func (e *environment) set(name, value string) {
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

// unset removes name, wherever it is.
func (e *environment) unset(name string) {
	if _, ok := e.values[name]; !ok {
		return
	}
	delete(e.values, name)
	e.names = slices.DeleteFunc(e.names, func(n string) bool { return n == name })
}

func (e *environment) lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

// list renders the environment as NAME=VALUE strings for exec.
func (e *environment) list() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.values[n])
	}
	return out
}

// threadVars are set to the contract's thread count so that OpenMP, BLAS
// and Go programs do not start more threads than granted.
var threadVars = []string{
	"LARDON3D_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOMAXPROCS",
}

// DefaultPath is the PATH of a batch run as another user than the
// controller's, unless its spec.env sets one: login's default for a user
// who is not root (Debian's ENV_PATH, its games aside).
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// DefaultShell is the SHELL of a batch run as another user whose passwd
// entry names no shell, or who has no entry: login's default.
const DefaultShell = "/bin/sh"

// baseEnv is what a batch's environment is built over (buildEnv's base).
// A batch run as another user than the controller's (runAs set, its uid
// not euid) starts from nothing of the controller's: its user's login
// environment (loginEnv), as login and sshd give a session, so that
// no secret of the controller's environment (AWS_SECRET_ACCESS_KEY, a
// token) and no PATH of root's reaches it. A batch run as the
// controller's own user (runAs nil, or root's own task for a root
// controller) gets the controller's environment, environ: that user
// started the controller and holds it anyway.
func baseEnv(runAs *User, euid int, environ []string) []string {
	if runAs == nil || int64(runAs.UID) == int64(euid) {
		return environ
	}
	return loginEnv(runAs)
}

// loginEnv is u's login environment: HOME, USER, LOGNAME and SHELL from
// u's passwd entry (USER and LOGNAME left out for a uid without one, HOME
// when u has none, SHELL DefaultShell when the entry names none) and PATH
// DefaultPath.
func loginEnv(u *User) []string {
	var out []string
	for _, v := range []struct{ name, value string }{{"HOME", u.Home}, {"USER", u.Name}, {"LOGNAME", u.Name}} {
		if v.value != "" {
			out = append(out, v.name+"="+v.value)
		}
	}
	shell := u.Shell
	if shell == "" {
		shell = DefaultShell
	}
	return append(out, "SHELL="+shell, "PATH="+DefaultPath)
}

// buildEnv returns the command's environment and its expanded argv: base
// (baseEnv: the controller's environment, or the login environment of a
// batch run as another user; HOME, USER and LOGNAME those of s.User when
// set), then the LARDON3D_* and thread variables,
// then s.Env in order, each value expanded against what precedes it; the
// command is expanded against the whole result.
func buildEnv(base []string, s Spec, itemsFile string) (env []string, argv []string, err error) {
	e := newEnvironment(base)
	if s.User != nil {
		applyUserEnv(e, s.User)
	}
	e.set("LARDON3D_TASK", s.Task)
	e.set("LARDON3D_BATCH_INDEX", strconv.FormatInt(s.BatchIndex, 10))
	e.set("LARDON3D_BATCH_START", strconv.FormatInt(s.BatchStart, 10))
	e.set("LARDON3D_BATCH_SIZE", strconv.FormatInt(s.BatchSize(), 10))
	e.set("LARDON3D_ITEMS_TOTAL", strconv.FormatInt(s.ItemsTotal, 10))
	e.set("LARDON3D_ITEMS_FILE", itemsFile)
	e.set("LARDON3D_MEMORY_LIMIT", strconv.FormatInt(s.MemoryLimit, 10))
	if s.ScratchDir != "" {
		e.set("LARDON3D_SCRATCH_DIR", s.ScratchDir)
	}
	setGPUEnv(e, s.GPUID)
	threads := strconv.Itoa(s.Threads)
	for _, n := range threadVars {
		e.set(n, threads)
	}
	if s.Mark.Name != "" {
		e.set(s.Mark.Name, s.Mark.Value)
	}
	for i, v := range s.Env {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") {
			return nil, nil, fmt.Errorf("%w: env[%d]: invalid name %q", ErrInvalidSpec, i, v.Name)
		}
		e.set(v.Name, expand(v.Value, e.lookup))
	}
	argv = make([]string, len(s.Command))
	for i, a := range s.Command {
		argv[i] = expand(a, e.lookup)
	}
	return e.list(), argv, nil
}

// LookPath resolves the program name the way a batch's command is looked
// up (execvp's rule with the given PATH, relative paths taken from dir,
// the command's working directory): what Start runs, and what validate
// checks beforehand. The error matches ErrCommandNotFound and says what
// was not found, in the words a batch's CommandNotFound carries.
func LookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", notFoundError(fmt.Sprintf("command %q %s", name, err.Error()))
		}
		return p, nil
	}
	var notExec string
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, errNotExecutable) && notExec == "" {
			notExec = p
		}
	}
	if notExec != "" {
		return "", notFoundError(fmt.Sprintf("command %q found as %s but not executable", name, notExec))
	}
	return "", notFoundError(fmt.Sprintf("command %q not found in PATH", name))
}

// notFoundError is an error that says what was not found and matches
// ErrCommandNotFound with errors.Is.
type notFoundError string

func (e notFoundError) Error() string { return string(e) }

// Is reports whether target is ErrCommandNotFound.
func (e notFoundError) Is(target error) bool { return target == ErrCommandNotFound }

var errNotExecutable = errors.New("not executable")

// checkExecutable returns nil for a regular file with an execute bit, and an
// error that reads well after the file name otherwise.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("does not exist")
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%w (a directory)", errNotExecutable)
	case fi.Mode()&0o111 == 0:
		return errNotExecutable
	}
	return nil
}
