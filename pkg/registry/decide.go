package registry

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// shareAdvice is the reason given when a controller is refused because
// one of the two does not share the machine.
const shareAdvice = "serve every spool from one controller (run --spool A --spool B, or add the spool to its configuration), or stop it; " +
	"two controllers that both say --share with a --memory-capacity each, fitting together in the machine's memory, may run side by side"

// counts says whether the live claim c is one that want must run beside:
// a claim of another process and, for root's controller (the system
// service), a claim of root's only. A controller of another user never
// keeps root's from starting (it is told to stop: displacedBy); a
// user's controller counts root's, as every other.
func counts(c, want Claim) bool {
	return c.PID != want.PID && (want.UID != 0 || c.UID == 0)
}

// beside returns the live claims that do not count for want although
// another process holds them: for root's controller, the other users'
// controllers running, to be named in its log.
func beside(live []Claim, want Claim) []Claim {
	var out []Claim
	for _, c := range live {
		if c.PID != want.PID && !counts(c, want) {
			out = append(out, c)
		}
	}
	return out
}

// displacedBy says whether the controller of mine, of a user other than
// root, is to stop: the first of root's live claims it would not be
// admitted beside (decide), if any.
func displacedBy(live []Claim, mine Claim, machineMemory int64) (Claim, bool) {
	if mine.UID == 0 {
		return Claim{}, false
	}
	roots := slices.DeleteFunc(slices.Clone(live), func(c Claim) bool { return c.UID != 0 || c.PID == mine.PID })
	var busy *BusyError
	if err := decide(roots, mine, machineMemory); errors.As(err, &busy) {
		return busy.Other, true
	}
	return Claim{}, false
}

// decide says whether want may run beside the live claims: nil, or why
// not. A claim of want's own PID (this process's, or a PID reused) is no
// conflict, nor, for root's controller, one of another user (counts).
func decide(live []Claim, want Claim, machineMemory int64) error {
	if want.Share && want.MemoryCapacity <= 0 {
		return ErrShareNeedsCapacity
	}
	if want.Share && machineMemory <= 0 {
		return errors.New("the machine's memory is unknown, so the capacities of the controllers sharing it cannot be checked")
	}
	others := slices.DeleteFunc(slices.Clone(live), func(c Claim) bool { return !counts(c, want) })
	for _, c := range others {
		for _, s := range want.Spools {
			if slices.Contains(c.Spools, s) {
				return &BusyError{Other: c, Reason: s + " is already served by it; a spool has one controller: stop that one first"}
			}
		}
	}
	for _, c := range others {
		// A shared claim without a capacity cannot be fitted: it does not share.
		if !want.Share || !c.Share || c.MemoryCapacity <= 0 {
			return &BusyError{Other: c, Reason: shareAdvice}
		}
	}
	if len(others) == 0 {
		return nil
	}
	total := want.MemoryCapacity
	var parts []string
	biggest := others[0]
	for _, c := range others {
		total = addCapped(total, c.MemoryCapacity)
		parts = append(parts, fmt.Sprintf("pid %d declared %s", c.PID, formatBytes(c.MemoryCapacity)))
		if c.MemoryCapacity > biggest.MemoryCapacity {
			biggest = c
		}
	}
	if total <= machineMemory {
		return nil
	}
	return &BusyError{Other: biggest, Reason: fmt.Sprintf(
		"the memory capacities of the controllers sharing the machine do not fit in its memory: %s, this one asks %s, the machine has %s; lower --memory-capacity, or stop one",
		strings.Join(parts, ", "), formatBytes(want.MemoryCapacity), formatBytes(machineMemory))}
}

// addCapped adds two non-negative amounts, stopping at math.MaxInt64
// rather than overflowing on a damaged claim's capacity.
func addCapped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// describe names a claim's controller for messages: "pid 1234 (user
// alice) serves /home/alice/spool".
func describe(c Claim) string {
	who := "user " + c.User
	if c.User == "" {
		who = "uid " + strconv.Itoa(c.UID)
	}
	if c.Command != "" {
		who += ", started as " + strconv.Quote(c.Command)
	}
	spools := "spools its claim does not name"
	if len(c.Spools) > 0 {
		spools = strings.Join(c.Spools, ", ")
	}
	return fmt.Sprintf("pid %d (%s) serves %s", c.PID, who, spools)
}

// formatBytes writes n in binary units with at most two decimals: "512 B",
// "6 GiB", "7.45 GiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	const units = "KMGTPE"
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
	return s + " " + units[i:i+1] + "iB"
}
