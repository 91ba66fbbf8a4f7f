package governor

import "time"

// Decision is the governor's answer to an estimate. "Does not fit" is a
// decision naming the budget that ran short, never an error.
type Decision struct {
	// Verdict is ADMIT, REDUCE_BATCH, WAIT or REJECT.
	Verdict Verdict
	// Reason is the machine-readable cause.
	Reason Reason
	// Budget is the budget that ran short (BudgetNone on Admit).
	Budget Budget
	// Batch and Threads are what was (or would be) granted on Admit and
	// ReduceBatch; on Wait and Reject, the smallest demand that was tried.
	Batch   int64
	Threads int
	// Need, Free and Margin are the numbers of the short budget, in its
	// unit (bytes, threads or slots); Reservations counts the active ones.
	Need, Free, Margin int64
	Reservations       int
	// BatchRequested and ThreadsRequested echo the estimate's BatchMax and
	// Threads, for the message.
	BatchRequested   int64
	ThreadsRequested int
	// ItemsLeft echoes the estimate's (the message says in how many
	// batches they run).
	ItemsLeft int64
	// Share is k when the batch was held to a 1/k share of the memory
	// (Estimate.Peers); 0 otherwise.
	Share int
	// Signal and Threshold are the deferring signal's value and limit on
	// LoadHigh (load average), CPUPressure and IOPressure (PSI some,
	// percent).
	Signal, Threshold float64
	// MaxWait is, on LoadHigh and CPUPressure, the bound on the CPU gate's
	// wait while no reservation is active (Config.CPUGateMaxWait; negative:
	// none).
	MaxWait time.Duration
	// Hysteresis is, on LoadHigh, CPUPressure and IOPressure, how long the
	// signal must stay at or below its threshold for the deferral to end
	// (Config.Hysteresis); BelowSince is when it went back at or below
	// (zero while it is above).
	Hysteresis time.Duration
	BelowSince time.Time
	// GateUntil is, on LoadHigh and CPUPressure, when the CPU gate's bound
	// lets the demand through whatever the signal: set by Reserve once the
	// gate held a demand back with no reservation active; zero while one
	// is active (the gate then waits for the signal alone) or with no bound.
	GateUntil time.Time
	// Detail names the rule an invalid estimate broke (a constant string).
	Detail string
}

// Reservation is an opaque, copyable handle on reserved budgets. Only an
// active reservation authorises running work.
type Reservation struct {
	id       uint64
	owner    uint64 // the issuing governor's instance number
	slot     int32  // index in the governor's slot table
	contract Contract
}

// Contract returns the reservation's contract: exactly what may be used.
func (r Reservation) Contract() Contract { return r.contract }

// ID returns the reservation's identifier, unique for the governor's life.
func (r Reservation) ID() uint64 { return r.id }
