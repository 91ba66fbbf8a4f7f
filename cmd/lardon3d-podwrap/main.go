// Command lardon3d-podwrap runs a batch's command inside its Pod and
// reports the container's peak memory, which the node agent cannot read
// (it has no access to the node's cgroups):
//
//	lardon3d-podwrap -- COMMAND [ARG]...
//
// runs COMMAND (looked up in PATH) with the wrapper's standard streams and
// environment, forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to it, and once
// it ended appends "lardon3d-peak-memory-bytes=N" to the container's
// termination message (/dev/termination-log, or $LARDON3D_TERMINATION_LOG),
// N read from the container's own cgroup: memory.peak (cgroup v2, Linux
// 5.19 and later), else memory/memory.max_usage_in_bytes (v1). Nothing is
// appended when neither is readable. It exits with the command's code
// (128+N for a command killed by signal N).
//
//	lardon3d-podwrap --install DEST
//
// copies the wrapper's own executable to DEST (mode 0755): what the Pod's
// init container does, from the agent's image, into a volume the batch's
// container shares.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// PeakPrefix starts the line the wrapper appends to the termination
// message (package podrunner reads it).
const PeakPrefix = v1alpha1.PodPeakMemoryPrefix

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	switch {
	case len(args) == 2 && args[0] == "--install":
		if err := install(args[1]); err != nil {
			fmt.Fprintf(stderr, "lardon3d-podwrap: %v\n", err)
			return 1
		}
		return 0
	case len(args) >= 2 && args[0] == "--":
		return wrap(args[1:], "/sys/fs/cgroup", stderr)
	}
	fmt.Fprintln(stderr, "usage: lardon3d-podwrap -- COMMAND [ARG]... | --install DEST")
	return 2
}

// install copies this executable to dest, through a temporary name.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// wrap runs argv and reports the peak of the cgroup mounted at cgroupRoot;
// it returns the exit code.
func wrap(argv []string, cgroupRoot string, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "lardon3d-podwrap: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	signal.Stop(sigs)
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case err != nil:
		fmt.Fprintf(stderr, "lardon3d-podwrap: %v\n", err)
		code = 1
	}
	if peak, ok := peakMemory(cgroupRoot); ok {
		path := os.Getenv("LARDON3D_TERMINATION_LOG")
		if path == "" {
			path = "/dev/termination-log"
		}
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(f, "\n%s%d\n", PeakPrefix, peak)
			f.Close()
		}
	}
	return code
}

// peakMemory is the peak memory of the cgroup mounted at root (the
// container's own): v2's memory.peak, else v1's memory.max_usage_in_bytes.
func peakMemory(root string) (int64, bool) {
	for _, p := range []string{"memory.peak", filepath.Join("memory", "memory.max_usage_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && n > 0 {
			return n, true
		}
	}
	return 0, false
}
