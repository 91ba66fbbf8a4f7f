package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/lardon3d/lardon3d-controller/bench/internal/measure"
)

// cgState is the state file shared by the subcommands of one run.
type cgState struct {
	Version int    `json:"version"`
	MemDir  string `json:"memDir"`
	CPUDir  string `json:"cpuDir"`
	Limit   int64  `json:"limit"`
}

var errUsage = errors.New("bad usage")

func loadCgroup(path string) (*measure.Cgroup, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cgroup state: %w", err)
	}
	var s cgState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read cgroup state %s: %w", path, err)
	}
	return measure.Open(measure.Version(s.Version), s.MemDir, s.CPUDir)
}

func cgroupCreate(args []string) error {
	fs := flag.NewFlagSet("cgroup-create", flag.ContinueOnError)
	name := fs.String("name", "", "cgroup name")
	limit := fs.Int64("limit", 8<<30, "memory limit in bytes")
	state := fs.String("state", "", "state file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *state == "" {
		return fmt.Errorf("--name and --state are required: %w", errUsage)
	}
	cg, err := measure.Create("/sys/fs/cgroup", "/proc", *name, *limit)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(cgState{int(cg.Version), cg.MemDir, cg.CPUDir, cg.Limit})
	if err := os.WriteFile(*state, b, 0o644); err != nil {
		return fmt.Errorf("write cgroup state: %w", err)
	}
	env := fmt.Sprintf("BENCH_CG_MEM=%s\nBENCH_CG_CPU=%s\nBENCH_CG_VERSION=%d\n", cg.MemDir, cg.CPUDir, cg.Version)
	if err := os.WriteFile(*state+".env", []byte(env), 0o644); err != nil {
		return fmt.Errorf("write cgroup state: %w", err)
	}
	cpu := cg.CPUDir
	if cpu == "" {
		cpu = "(none: CPU from /proc sampling)"
	}
	fmt.Printf("cgroup v%d memory %s limit %d, cpu accounting %s\n", cg.Version, cg.MemDir, cg.Limit, cpu)
	return nil
}

func cgroupDestroy(args []string) error {
	fs := flag.NewFlagSet("cgroup-destroy", flag.ContinueOnError)
	state := fs.String("state", "", "state file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cg, err := loadCgroup(*state)
	if err != nil {
		return err
	}
	killLeftovers(cg)
	return cg.Destroy()
}

// killLeftovers kills what the bench left in its own cgroup and waits for
// the cgroup to empty (at most 5 s).
func killLeftovers(cg *measure.Cgroup) int {
	n := cg.KillAll()
	for i := 0; i < 100; i++ {
		if p, _ := cg.Pids(); len(p) == 0 {
			break
		}
		sleepMs(50)
	}
	return n
}

func enter(args []string) error {
	fs := flag.NewFlagSet("enter", flag.ContinueOnError)
	state := fs.String("state", "", "state file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return fmt.Errorf("no command: %w", errUsage)
	}
	cg, err := loadCgroup(*state)
	if err != nil {
		return err
	}
	if err := cg.Enter(os.Getpid()); err != nil {
		return err
	}
	path, err := exec.LookPath(rest[0])
	if err != nil {
		return fmt.Errorf("enter: %w", err)
	}
	return syscall.Exec(path, rest, os.Environ())
}
