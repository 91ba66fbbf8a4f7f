// Command lardon3d-controller runs batch tasks from YAML manifests in a spool
// directory under a resource governor that never over-commits the machine,
// and offers kubectl-like verbs over the same spool.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

// The exit codes, as documented in --help and the README.
const (
	exitNotDone     = 1   // some task not Done, a manifest invalid, or a verb's own failure
	exitUsage       = 2   // bad flags or arguments, or the controller could not start
	exitInterrupted = 130 // run --exit-when-done stopped by SIGINT (Ctrl-C)
	exitTerminated  = 143 // run --exit-when-done stopped by SIGTERM
)

// exitCodesHelp is the exit code table of --help; a test keeps the README's
// the same.
const exitCodesHelp = `Exit codes:
  0    success; with run --exit-when-done, every task Done; run without it
       stopped by SIGINT or SIGTERM
  1    some task not Done (Failed, Rejected, paused, held), a manifest invalid
       or refused (another user's, root-owned in a user's spool: never run),
       or the verb failed (no such task, not a spool)
  2    usage error (unknown verb or flag, bad flag value), or run could not
       start (another controller holds the spool)
  130  run --exit-when-done stopped by SIGINT (Ctrl-C) before the tasks
       settled; every status is written, a new run continues
  143  likewise, stopped by SIGTERM`

// nodeBinary is the companion binary that holds the node agent (node.go,
// built with -tags lardon3d_node): the spool-mode binary does not link
// client-go and controller-runtime.
const nodeBinary = "lardon3d-controller-node"

// globals are the flags every verb shares.
type globals struct {
	spool     string
	logFormat string
	logLevel  string
	// stateDirFlag is --state-dir as given ("": not given); the verbs
	// read stateDir(), run places it itself.
	stateDirFlag string
}

// stateDir is the state directory of the spool that the verbs read
// (resolveStateDir).
func (g *globals) stateDir() string { return resolveStateDir(g.spool, g.stateDirFlag) }

func main() {
	// No child (a batch, nvidia-smi, the node agent) inherits a descriptor
	// this process got from its parent without close-on-exec.
	if err := runner.CloseOnExecInherited(); err != nil {
		fmt.Fprintln(os.Stderr, "warning:", err)
	}
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(stderr, "error:", safeText(ee.err.Error()))
			}
			return ee.code
		}
		fmt.Fprintln(stderr, "error:", safeText(err.Error()))
		return 2
	}
	return 0
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "lardon3d-controller",
		Short: "Run batch tasks from a spool of YAML manifests without running the machine out of memory",
		Long: `Run batch tasks from a spool of YAML manifests without running the machine
out of memory, and inspect and edit them with kubectl-like verbs.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetVersionTemplate("lardon3d-controller {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.spool, "spool", envOr("LARDON3D_SPOOL", "."), "spool directory of task manifests (env LARDON3D_SPOOL)")
	pf.StringVar(&g.stateDirFlag, "state-dir", "", "the spool's state directory (logs, items files, the listing socket, published views): where run keeps it, with one spool, and where the other verbs look (default: the one the running controller declared, else SPOOL/.lardon3d, or a root controller's directory for another user's spool)")
	pf.StringVar(&g.logFormat, "log-format", "", "log format: console or json (default: console on a terminal, json otherwise)")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(
		newRunCommand(g),
		newGetCommand(g),
		newDescribeCommand(g),
		newValidateCommand(),
		newPauseCommand(g, true),
		newPauseCommand(g, false),
		newBudgetsCommand(g),
		newSharesCommand(g),
		newLogsCommand(g),
		newDeleteCommand(g),
		newRetryCommand(g),
		newRestartCommand(g),
		newWaitCommand(g),
		newTopCommand(g),
		newEstimatesCommand(g),
		newBatchesCommand(g),
		newViewCommand(g),
		newNodeCommand(g),
		newExecCommand(),
		newSpoolCommand(),
	)
	addCompletion(root, g)
	return root
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// consoleValue is how the console log writes a field's value, escaped for
// a terminal: a list or an object (Strs, Interface) reaches it as its JSON
// text, in bytes, which is written as text (["/a","/b"]), not as the
// bytes' codes.
func consoleValue(i any) string {
	if b, ok := i.([]byte); ok {
		return cell(string(b))
	}
	return cell(fmt.Sprint(i))
}

// newLogger builds the zerolog logger the flags ask for.
func newLogger(g *globals, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(g.logLevel))
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: %w", g.logLevel, err)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	format := g.logFormat
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	switch format {
	case "console":
		// File names and manifest fields reach the log: escaped, like
		// everything else this program prints for a terminal.
		esc := consoleValue
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", FormatFieldValue: esc, FormatMessage: func(i any) string {
			if i == nil {
				return ""
			}
			return esc(i)
		}, FormatErrFieldValue: esc}
	case "json":
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want console or json", format)
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}
