package main

import (
	"fmt"
	"os"
)

type command struct {
	run  func(args []string) error
	help string
}

var commands = map[string]command{
	"cgroup-create":  {cgroupCreate, "create the envelope cgroup and write its state file"},
	"cgroup-destroy": {cgroupDestroy, "kill leftovers in the envelope cgroup and remove it"},
	"enter":          {enter, "move this process into the envelope cgroup and exec a command"},
	"measure":        {measureCmd, "run a command in the envelope, sample RSS every 50 ms, append a record"},
	"gen":            {gen, "write a packing workload: manifests, job lists, env file, workload record"},
	"spool-gen":      {spoolGen, "write N trivial or Done manifests into a spool directory"},
	"react":          {react, "drop manifests one at a time into a running controller's spool and time them"},
	"idle":           {idle, "measure the CPU and resident memory of a process over a window"},
	"gobench":        {gobench, "parse `go test -bench` output and append a record per wanted benchmark"},
	"record":         {recordCmd, "append one record from name=value arguments"},
	"report":         {reportCmd, "render the results file as the final table"},
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchkit %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchkit COMMAND [flags]")
	for name, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-15s %s\n", name, c.help)
	}
}
