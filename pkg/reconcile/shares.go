package reconcile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// sharesFile is where a running controller publishes the accounts' fair
// share (the shares verb, as sshare), beside budgetsFile.
const sharesFile = "shares.json"

// AccountShare is one account's line in the shares file.
type AccountShare struct {
	// Account is the account's name (a spool owner's, or configured).
	Account string `json:"account"`
	// Shares is its weight; ShareFraction its part of the weights of the
	// accounts with work.
	Shares        float64 `json:"shares"`
	ShareFraction float64 `json:"shareFraction"`
	// Usage is its decayed reserved memory·time (byte·seconds);
	// UsageFraction its part of the accounts' usage.
	Usage         float64 `json:"usage"`
	UsageFraction float64 `json:"usageFraction"`
	// MemoryBytes and GPUMemoryBytes are reserved now.
	MemoryBytes    int64 `json:"memoryBytes"`
	GPUMemoryBytes int64 `json:"gpuMemoryBytes,omitempty"`
	// Running and Pending count its tasks.
	Running int `json:"running"`
	Pending int `json:"pending"`
}

// PublishedShares is the shares file's content.
type PublishedShares struct {
	WrittenAt time.Time `json:"writtenAt"`
	// HalfLife of the usage.
	HalfLife string `json:"halfLife"`
	// SpoolAccount is the account of the spool whose state directory
	// holds the file.
	SpoolAccount string         `json:"spoolAccount"`
	Accounts     []AccountShare `json:"accounts"`
}

// sharesOf is the queue's standings as published.
func sharesOf(q *queue.Queue, now time.Time) PublishedShares {
	ps := PublishedShares{WrittenAt: now, HalfLife: q.HalfLife().String(), Accounts: []AccountShare{}}
	for _, s := range q.Shares() {
		ps.Accounts = append(ps.Accounts, AccountShare{
			Account: s.Account, Shares: s.Shares, ShareFraction: s.ShareFraction,
			Usage: s.Usage, UsageFraction: s.UsageFraction,
			MemoryBytes: s.MemoryBytes, GPUMemoryBytes: s.GPUMemoryBytes,
			Running: s.Running, Pending: s.Pending,
		})
	}
	return ps
}

// publishShares writes the accounts' standings into the spool's state
// directory.
func (c *Controller) publishShares() {
	ps := sharesOf(c.host.queue, time.Now())
	ps.SpoolAccount = c.account
	if err := publishJSON(c.cfg.StateDir, sharesFile, ps); err != nil {
		c.log.Debug().Err(err).Msg("shares not published")
	}
}

// ReadShares reads the standings a controller published in stateDir.
func ReadShares(stateDir string) (PublishedShares, error) {
	var ps PublishedShares
	data, err := os.ReadFile(filepath.Join(stateDir, sharesFile))
	if err != nil {
		return ps, err
	}
	if err := json.Unmarshal(data, &ps); err != nil {
		return ps, fmt.Errorf("%s: %w", sharesFile, err)
	}
	return ps, nil
}

// Shares is the accounts' standings now (the shares verb, metrics).
func (h *Host) Shares() PublishedShares { return sharesOf(h.queue, time.Now()) }
