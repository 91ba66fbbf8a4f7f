package share

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// DefaultHalfLife is the usage's half-life. An hour fits a workstation
// shared by sessions of hours: what an account used in the last hour
// weighs, yesterday's (2^-16 of it after 16 h) no longer does. Slurm's
// PriorityDecayHalfLife default, 7 days, suits a cluster's monthly
// allocations; here it would make a user who ran overnight wait most of
// the next day behind a colleague.
const DefaultHalfLife = time.Hour

// DefaultShares is the weight of an account the configuration does not name.
const DefaultShares = 1.0

// Quota caps what one account may hold at once; zero fields cap nothing.
type Quota struct {
	// MemoryBytes caps the memory its reservations hold.
	MemoryBytes int64
	// GPUMemoryBytes caps the GPU memory they hold.
	GPUMemoryBytes int64
	// GPUSlots caps the GPU slots they hold.
	GPUSlots int
	// Running caps its tasks holding a worker.
	Running int
}

// Config is the accounting's configuration.
type Config struct {
	// HalfLife of the usage (0: DefaultHalfLife).
	HalfLife time.Duration
	// Shares weighs the accounts named; others weigh DefaultShares.
	Shares map[string]float64
	// Quotas caps the accounts named.
	Quotas map[string]Quota
}

// account is one account's books.
type account struct {
	// usage is the decayed byte·seconds at time at.
	usage float64
	at    time.Time
	// held is what its reservations hold now; running its tasks holding
	// a worker.
	mem, gpuMem int64
	gpuSlots    int
	running     int
}

// Ledger keeps the accounts' books. Not safe for concurrent use.
type Ledger struct {
	cfg      Config
	accounts map[string]*account
}

// New returns an empty ledger.
func New(cfg Config) *Ledger {
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	return &Ledger{cfg: cfg, accounts: make(map[string]*account)}
}

// HalfLife is the usage's half-life in force.
func (l *Ledger) HalfLife() time.Duration { return l.cfg.HalfLife }

// get returns an account's books, made on first use, brought to now.
func (l *Ledger) get(name string, now time.Time) *account {
	a := l.accounts[name]
	if a == nil {
		a = &account{at: now}
		l.accounts[name] = a
	}
	l.advance(a, now)
	return a
}

// advance brings a's usage to now: the old usage decays, what is held
// since accrues, decaying as it does.
func (l *Ledger) advance(a *account, now time.Time) {
	dt := now.Sub(a.at).Seconds()
	if dt <= 0 {
		return
	}
	h := l.cfg.HalfLife.Seconds()
	d := math.Exp2(-dt / h)
	a.usage = a.usage*d + float64(a.mem)*h/math.Ln2*(1-d)
	a.at = now
}

// usageAt is a's usage at now without changing a.
func (l *Ledger) usageAt(a *account, now time.Time) float64 {
	c := *a
	l.advance(&c, now)
	return c.usage
}

// Hold books a reservation c granted to acct at now.
func (l *Ledger) Hold(acct string, c governor.Contract, now time.Time) {
	a := l.get(acct, now)
	a.mem += c.MemoryBytes
	a.gpuMem += c.GPUMemoryBytes
	a.gpuSlots += c.GPUSlots
}

// Release books the end of a reservation Hold booked.
func (l *Ledger) Release(acct string, c governor.Contract, now time.Time) {
	a := l.get(acct, now)
	a.mem -= c.MemoryBytes
	a.gpuMem -= c.GPUMemoryBytes
	a.gpuSlots -= c.GPUSlots
}

// Started and Ended count acct's tasks holding a worker.
func (l *Ledger) Started(acct string, now time.Time) { l.get(acct, now).running++ }

// Ended: see Started.
func (l *Ledger) Ended(acct string, now time.Time) { l.get(acct, now).running-- }

// Shares is acct's weight.
func (l *Ledger) Shares(acct string) float64 {
	if s, ok := l.cfg.Shares[acct]; ok && s > 0 {
		return s
	}
	return DefaultShares
}

// Usage is acct's decayed reserved memory·time at now, in byte·seconds.
func (l *Ledger) Usage(acct string, now time.Time) float64 {
	a := l.accounts[acct]
	if a == nil {
		return 0
	}
	return l.usageAt(a, now)
}

// Key orders accounts for the next admission: the lower, the less of its
// share the account used (usage per share).
func (l *Ledger) Key(acct string, now time.Time) float64 {
	return l.Usage(acct, now) / l.Shares(acct)
}

// Standing is one account's place among others, for people and metrics.
type Standing struct {
	// Account is the account's name.
	Account string
	// Shares is its weight; ShareFraction its fraction of the weights of
	// the accounts compared.
	Shares, ShareFraction float64
	// Usage is its decayed byte·seconds; UsageFraction its fraction of
	// the accounts' usage (0 when none used anything).
	Usage, UsageFraction float64
	// MemoryBytes, GPUMemoryBytes and GPUSlots are held now; Running
	// counts its tasks holding a worker.
	MemoryBytes, GPUMemoryBytes int64
	GPUSlots, Running           int
}

// Below reports whether the account used less than its share.
func (s Standing) Below() bool { return s.UsageFraction < s.ShareFraction }

// Standings compares the accounts named (each once; those with work) at now,
// in name order.
func (l *Ledger) Standings(accts []string, now time.Time) []Standing {
	accts = slices.Clone(accts)
	slices.Sort(accts)
	accts = slices.Compact(accts)
	out := make([]Standing, 0, len(accts))
	var sumS, sumU float64
	for _, n := range accts {
		st := Standing{Account: n, Shares: l.Shares(n), Usage: l.Usage(n, now)}
		if a := l.accounts[n]; a != nil {
			st.MemoryBytes, st.GPUMemoryBytes, st.GPUSlots, st.Running = a.mem, a.gpuMem, a.gpuSlots, a.running
		}
		sumS += st.Shares
		sumU += st.Usage
		out = append(out, st)
	}
	for i := range out {
		out[i].ShareFraction = out[i].Shares / sumS
		if sumU > 0 {
			out[i].UsageFraction = out[i].Usage / sumU
		}
	}
	return out
}

// Over says which of acct's quotas the reservation c (of a task not yet
// holding a worker when starting) would cross, with the numbers; "" when
// none.
func (l *Ledger) Over(acct string, c governor.Contract, starting bool) string {
	q, ok := l.cfg.Quotas[acct]
	if !ok {
		return ""
	}
	var a account
	if p := l.accounts[acct]; p != nil {
		a = *p
	}
	var over []string
	if q.Running > 0 && starting && a.running+1 > q.Running {
		over = append(over, fmt.Sprintf("running tasks %d of %d", a.running, q.Running))
	}
	if q.MemoryBytes > 0 && a.mem+c.MemoryBytes > q.MemoryBytes {
		over = append(over, fmt.Sprintf("memory %s held + %s asked > %s", governor.FormatBytes(a.mem), governor.FormatBytes(c.MemoryBytes), governor.FormatBytes(q.MemoryBytes)))
	}
	if q.GPUMemoryBytes > 0 && c.GPUMemoryBytes > 0 && a.gpuMem+c.GPUMemoryBytes > q.GPUMemoryBytes {
		over = append(over, fmt.Sprintf("GPU memory %s held + %s asked > %s", governor.FormatBytes(a.gpuMem), governor.FormatBytes(c.GPUMemoryBytes), governor.FormatBytes(q.GPUMemoryBytes)))
	}
	if q.GPUSlots > 0 && c.GPUSlots > 0 && a.gpuSlots+c.GPUSlots > q.GPUSlots {
		over = append(over, fmt.Sprintf("GPU slots %d held + %d asked > %d", a.gpuSlots, c.GPUSlots, q.GPUSlots))
	}
	if len(over) == 0 {
		return ""
	}
	return fmt.Sprintf("%s's quota: %s", acct, strings.Join(over, "; "))
}

// FullAt reports whether acct's quota leaves no room for one more task
// at all (its running tasks at their cap): a task that would start need
// not ask the governor.
func (l *Ledger) FullAt(acct string) string {
	q, ok := l.cfg.Quotas[acct]
	if !ok || q.Running <= 0 {
		return ""
	}
	if a := l.accounts[acct]; a != nil && a.running >= q.Running {
		return fmt.Sprintf("%s's quota: running tasks %d of %d", acct, a.running, q.Running)
	}
	return ""
}
