package control

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// Protocol is the version of the requests and replies.
const Protocol = 1

// The operations a request may ask for.
const (
	// OpHold asks for a reservation held as long as the connection is.
	OpHold = "hold"
	// OpBudgets asks for the governor's budgets and the holds.
	OpBudgets = "budgets"
	// OpSpoolAdd asks the controller to serve a spool (its directory's
	// descriptor comes with the request).
	OpSpoolAdd = "spool-add"
	// OpSpoolRemove asks the controller to stop serving a spool it was
	// asked to serve.
	OpSpoolRemove = "spool-remove"
)

// The events of a reply.
const (
	// EventWaiting: the hold waits; Message is the governor's reason.
	EventWaiting = "waiting"
	// EventGranted: the hold is granted (Grant); it lasts until the
	// connection ends.
	EventGranted = "granted"
	// EventOK: the request was done.
	EventOK = "ok"
	// EventError: the request was refused or failed (Message says why).
	EventError = "error"
)

// Limits of the server.
const (
	maxRequest     = 64 << 10
	maxConns       = 512
	maxConnsPerUID = 64
	requestWait    = 10 * time.Second
	acceptRetryMax = time.Second
)

// Request is one request, the first line a client sends.
type Request struct {
	Protocol int    `json:"protocol"`
	Op       string `json:"op"`
	// Hold is OpHold's demand.
	Hold *Demand `json:"hold,omitempty"`
	// Spool is the spool directory of OpSpoolAdd and OpSpoolRemove
	// (absolute, symlinks resolved).
	Spool string `json:"spool,omitempty"`
}

// Demand is what a hold asks for.
type Demand struct {
	// Memory and GPUMemory are bytes.
	Memory    int64 `json:"memory,omitempty"`
	GPUMemory int64 `json:"gpuMemory,omitempty"`
	GPUSlots  int   `json:"gpuSlots,omitempty"`
	// Threads are the CPU threads held (at least 1).
	Threads int `json:"threads,omitempty"`
	// NoWait refuses the hold at once when it does not fit now.
	NoWait bool `json:"noWait,omitempty"`
	// Command is what the hold runs, for the listings (the client's word,
	// shown, never trusted).
	Command string `json:"command,omitempty"`
}

// Grant is what a hold was granted.
type Grant struct {
	ID        uint64 `json:"id"`
	Memory    int64  `json:"memory"`
	GPUMemory int64  `json:"gpuMemory,omitempty"`
	GPUID     string `json:"gpuID,omitempty"`
	GPUSlots  int    `json:"gpuSlots,omitempty"`
	Threads   int    `json:"threads"`
}

// HoldInfo is one hold, waiting or granted, as budgets and get show it.
type HoldInfo struct {
	// ID is the hold's number for this controller's life.
	ID int64 `json:"id"`
	// UID and PID are the peer's, as the kernel said them.
	UID  int    `json:"uid"`
	PID  int    `json:"pid"`
	User string `json:"user,omitempty"`
	// Command is the client's word.
	Command string `json:"command,omitempty"`
	// Demand asked; Grant once granted (nil while waiting).
	Demand Demand `json:"demand"`
	Grant  *Grant `json:"grant,omitempty"`
	// Since is when it was asked, or granted once it is.
	Since time.Time `json:"since"`
	// Reason is the governor's reason while it waits.
	Reason string `json:"reason,omitempty"`
}

// Reply is one line of an answer.
type Reply struct {
	Protocol int    `json:"protocol"`
	Event    string `json:"event"`
	Message  string `json:"message,omitempty"`
	Grant    *Grant `json:"grant,omitempty"`
	// Budgets and Holds answer OpBudgets.
	Budgets *governor.BudgetsView `json:"budgets,omitempty"`
	Holds   []HoldInfo            `json:"holds,omitempty"`
	// Spool is the spool added, as the controller names it.
	Spool string `json:"spool,omitempty"`
	// StateDir is the added spool's state directory.
	StateDir string `json:"stateDir,omitempty"`
}

// Peer is who is on the other end of a connection, as the kernel says.
type Peer struct {
	UID, GID, PID int
}

// SocketPath is the control socket of the controller PID whose claim is
// in the registry directory dir.
func SocketPath(dir string, pid int) string {
	return filepath.Join(dir, fmt.Sprintf("controller-%d.sock", pid))
}
