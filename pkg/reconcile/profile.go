package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
)

// ProfileOf names the history a task's batches feed: spec.resources.profile,
// else the class and the program the command runs (programOf): the base
// name of command[0], of the script file a shell or an interpreter runs
// (python3 train.py: custom/train.py), or of the first program an inline
// shell script runs (sh -c "colmap …": custom/colmap), so that editing a
// script keeps its profile. Only a command that names no program this way
// (python3 -c CODE) is named by a hash of its arguments.
func ProfileOf(spec *v1alpha1.TaskSpec) string {
	if spec.Resources.Profile != "" {
		return spec.Resources.Profile
	}
	class := string(spec.Class)
	if class == "" {
		class = string(v1alpha1.ClassCustom)
	}
	prog := "none"
	if len(spec.Command) > 0 {
		var ok bool
		if prog, ok = programOf(spec.Command, 0); !ok {
			sum := sha256.Sum256([]byte(strings.Join(spec.Command[1:], "\x00")))
			prog += "-" + hex.EncodeToString(sum[:4])
		}
	}
	p := class + "/" + prog
	if len(p) > history.MaxProfileLen {
		p = p[:history.MaxProfileLen]
	}
	return p
}

// Commands that run their arguments: a shell (its -c script, or a script
// file), an interpreter (a script file, or -m MODULE), a wrapper (the
// command after its options and, for env, its assignments).
var (
	shells       = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "ash": true, "busybox": true}
	interpreters = regexp.MustCompile(`^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby|node|Rscript|julia|php|lua[0-9.]*|tclsh)$`)
	wrappers     = map[string]bool{"env": true, "exec": true, "command": true, "nice": true, "nohup": true, "time": true, "stdbuf": true, "ionice": true, "setsid": true}
	// keywords come before a command: the words after them are looked at.
	keywords = map[string]bool{
		"if": true, "then": true, "else": true, "elif": true, "fi": true, "while": true, "until": true,
		"do": true, "done": true, "!": true, "{": true, "}": true,
	}
	// builtins start no program of their own: their command is skipped.
	builtins = map[string]bool{
		"for": true, "case": true, "esac": true, "in": true, "function": true, "set": true, "trap": true, "cd": true, "export": true, "unset": true, "umask": true, "ulimit": true, "shift": true,
		"local": true, "readonly": true, "declare": true, "source": true, ".": true, "wait": true, "true": true, "false": true,
		":": true, "test": true, "[": true, "[[": true, "echo": true, "printf": true, "read": true, "return": true, "exit": true,
		"eval": true, "pushd": true, "popd": true, "shopt": true, "alias": true, "type": true, "hash": true,
	}
	// plumbing prepares a step's files more than it is the step: a
	// script's program is the first other one, else the first of these.
	plumbing = map[string]bool{
		"mktemp": true, "mkdir": true, "rm": true, "cp": true, "mv": true, "ln": true, "touch": true, "cat": true,
		"sed": true, "awk": true, "grep": true, "cut": true, "tr": true, "sort": true, "head": true, "tail": true,
		"tee": true, "ls": true, "find": true, "xargs": true, "basename": true, "dirname": true, "realpath": true,
		"date": true, "sleep": true, "wc": true, "chmod": true,
	}
	assignment  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	programWord = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)
	// separators end a shell's simple command.
	separators = strings.NewReplacer("&&", "\n", "||", "\n", ";", "\n", "|", "\n", "&", "\n", "(", "\n", ")", "\n", "`", "\n", "$(", "\n")
)

// programOf names the program args (a command line) runs, looking
// through shells, interpreters and wrappers at most a few levels deep;
// ok is false when it finds none better than the base name of args[0],
// which it then returns.
func programOf(args []string, depth int) (name string, ok bool) {
	base := filepath.Base(args[0])
	if depth > 3 {
		return base, false
	}
	rest := args[1:]
	switch {
	case wrappers[base]:
		for len(rest) > 0 && (strings.HasPrefix(rest[0], "-") || assignment.MatchString(rest[0])) {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return base, false
		}
		return programOf(rest, depth+1)
	case shells[base]:
		if base == "busybox" && len(rest) > 0 && shells[rest[0]] {
			rest = rest[1:]
		}
		for i, a := range rest {
			switch {
			case a == "--":
				continue
			case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'c'):
				if i+1 < len(rest) {
					if p, ok := scriptProgram(rest[i+1], depth); ok {
						return p, true
					}
				}
				return base, false
			case strings.HasPrefix(a, "-"), strings.HasPrefix(a, "+"):
				continue
			}
			return scriptFile(a, base)
		}
		return base, false
	case interpreters.MatchString(base):
		for i, a := range rest {
			switch {
			case a == "-m" && i+1 < len(rest):
				return scriptFile(rest[i+1], base)
			case a == "-c", a == "-e", a == "-E":
				return base, false // inline code: no program named
			case strings.HasPrefix(a, "-"):
				continue
			}
			return scriptFile(a, base)
		}
		return base, false
	}
	return base, true
}

// scriptFile names a script file (or module) by its base name; a name
// made of $VARIABLES or the like names nothing.
func scriptFile(path, fallback string) (string, bool) {
	if b := filepath.Base(path); programWord.MatchString(b) {
		return b, true
	}
	return fallback, false
}

// scriptProgram is the first program an inline shell script runs: its
// first simple command that is not an assignment, a comment, a builtin or
// plumbing (keywords before it, such as then, are passed over; the first
// plumbing program when there is nothing else), looked through as
// programOf does. Quotes are not parsed: a separator inside quotes splits
// there too, which at worst names a later program.
func scriptProgram(script string, depth int) (string, bool) {
	fallback := ""
	for _, line := range strings.Split(separators.Replace(script), "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		words := strings.Fields(strings.NewReplacer(`"`, "", `'`, "", `\`, " ").Replace(line))
		for len(words) > 0 && (assignment.MatchString(words[0]) || keywords[words[0]]) {
			words = words[1:]
		}
		if len(words) == 0 || strings.HasPrefix(words[0], "#") || builtins[words[0]] {
			continue
		}
		if strings.HasPrefix(words[0], "-") || !programWord.MatchString(filepath.Base(words[0])) {
			continue // $PROG, a glob: not known from the text
		}
		p, ok := programOf(words, depth+1)
		switch {
		case !ok:
		case !plumbing[p]:
			return p, true
		case fallback == "":
			fallback = p
		}
	}
	return fallback, fallback != ""
}
