// Package testseed chooses the seeds of randomized tests: fixed in `make
// test`, so that CI is deterministic, and fresh or chosen on demand.
//
// LARDON3D_RANDOM_SEED unset (or empty): the fixed seeds the test names.
// LARDON3D_RANDOM_SEED=random: as many fresh seeds, from the clock.
// LARDON3D_RANDOM_SEED=N: the seed N alone, to replay a failure.
//
// Every seed is logged, so a failure says how to replay it.
package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Env is the variable that chooses the seeds.
const Env = "LARDON3D_RANDOM_SEED"

// Seeds returns the seeds a randomized test runs with: fixed unless Env
// says otherwise (see the package documentation). It logs them.
func Seeds(t testing.TB, fixed ...uint64) []uint64 {
	t.Helper()
	seeds := fixed
	switch v := os.Getenv(Env); v {
	case "":
	case "random":
		seeds = make([]uint64, len(fixed))
		base := uint64(time.Now().UnixNano())
		for i := range seeds {
			seeds[i] = base + uint64(i)*0x9e3779b97f4a7c15
		}
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want empty, random or a number", Env, v)
		}
		seeds = []uint64{n}
	}
	for _, s := range seeds {
		t.Logf("seed %d (replay with %s=%d)", s, Env, s)
	}
	return seeds
}

// Count returns the number in the environment variable name, or def when
// it is unset: how many rounds a randomized test runs (more on demand).
func Count(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
