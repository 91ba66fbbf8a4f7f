package governor

import (
	"strconv"
	"strings"
	"time"
)

// FormatBytes formats a byte amount with binary units and one decimal:
// 512B, 1.0KiB, 4.1GiB. Negative amounts keep their sign.
func FormatBytes(n int64) string {
	return string(appendBytes(nil, n))
}

func appendBytes(b []byte, n int64) []byte {
	if n == maxBytes {
		return append(b, "more than 8.0EiB"...)
	}
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	if n < 1024 {
		b = strconv.AppendInt(b, n, 10)
		return append(b, 'B')
	}
	const units = "KMGTPE"
	v := float64(n) / 1024
	i := 0
	for v >= 1023.95 && i < len(units)-1 {
		v /= 1024
		i++
	}
	b = strconv.AppendFloat(b, v, 'f', 1, 64)
	return append(b, units[i], 'i', 'B')
}

// Count is n and the noun, plural unless n is 1: "1 thread", "2
// threads", "1 batch", "3 batches". Every message counting things says it so.
func Count(n int64, noun string) string { return string(plural(nil, n, noun)) }

// plural appends n and the noun, with an s (es after s, x, ch, sh)
// unless n is 1.
func plural(b []byte, n int64, noun string) []byte {
	b = strconv.AppendInt(b, n, 10)
	b = append(b, ' ')
	b = append(b, noun...)
	if n != 1 {
		if strings.HasSuffix(noun, "s") || strings.HasSuffix(noun, "x") || strings.HasSuffix(noun, "ch") || strings.HasSuffix(noun, "sh") {
			b = append(b, 'e')
		}
		b = append(b, 's')
	}
	return b
}

// String returns the verdict, the reason and the message, e.g.
// "WAIT InsufficientMemory: needs 4.1GiB for a batch of 1 at 2 threads; ...".
func (d Decision) String() string {
	return d.Verdict.String() + " " + string(d.Reason) + ": " + d.Message()
}

// Message formats the decision for people, from its numbers. It is computed
// on demand so that deciding never allocates.
func (d Decision) Message() string {
	var b []byte
	after := func() {
		b = append(b, " after "...)
		b = plural(b, int64(d.Reservations), "reservation")
	}
	switch d.Reason {
	case ReasonFits, ReasonBatchReduced:
		b = append(b, "granted batch "...)
		b = strconv.AppendInt(b, d.Batch, 10)
		b = append(b, " of "...)
		b = strconv.AppendInt(b, d.BatchRequested, 10)
		b = appendSplit(b, d.Batch, d.ItemsLeft, d.Share)
		b = append(b, " at "...)
		b = plural(b, int64(d.Threads), "thread")
		if d.Threads != d.ThreadsRequested {
			b = append(b, " (of "...)
			b = strconv.AppendInt(b, int64(d.ThreadsRequested), 10)
			b = append(b, ')')
		}
		b = append(b, ", "...)
		b = appendBytes(b, d.Need)
	case ReasonMemoryPressure:
		b = appendPressure(b, d)
	case ReasonInsufficientMemory, ReasonInsufficientGPUMemory:
		b = append(b, "needs "...)
		b = appendBytes(b, d.Need)
		if d.Reason == ReasonInsufficientGPUMemory {
			b = append(b, " of GPU memory"...)
		}
		b = append(b, " for a batch of "...)
		b = strconv.AppendInt(b, d.Batch, 10)
		b = append(b, " at "...)
		b = plural(b, int64(d.Threads), "thread")
		b = append(b, "; "...)
		b = appendBytes(b, d.Free)
		b = append(b, " free"...)
		after()
		b = append(b, " (margin "...)
		b = appendBytes(b, d.Margin)
		b = append(b, ')')
	case ReasonExceedsCapacity:
		b = append(b, "needs "...)
		switch d.Budget {
		case BudgetMemory, BudgetGPUMemory:
			b = appendBytes(b, d.Need)
			if d.Budget == BudgetGPUMemory {
				b = append(b, " of GPU memory"...)
			}
			b = append(b, " for a batch of "...)
			b = strconv.AppendInt(b, d.Batch, 10)
			b = append(b, " at "...)
			b = plural(b, int64(d.Threads), "thread")
			b = append(b, "; the machine can never grant more than "...)
			b = appendBytes(b, d.Free)
			b = append(b, " (margin "...)
			b = appendBytes(b, d.Margin)
			b = append(b, ')')
		default:
			b = plural(b, d.Need, budgetUnit(d.Budget))
			b = append(b, "; the machine has "...)
			b = strconv.AppendInt(b, d.Free, 10)
			if d.Budget == BudgetCPU {
				b = append(b, " usable ("...)
				b = strconv.AppendInt(b, d.Margin, 10)
				b = append(b, " reserved for the system)"...)
			}
		}
	case ReasonNoFreeCPU:
		b = append(b, "needs "...)
		b = plural(b, d.Need, "thread")
		b = append(b, "; "...)
		b = strconv.AppendInt(b, d.Free, 10)
		b = append(b, " free"...)
		after()
		b = append(b, " ("...)
		b = strconv.AppendInt(b, d.Margin, 10)
		b = append(b, " CPUs reserved for the system)"...)
	case ReasonNoIOSlot, ReasonNoGPUSlot:
		b = append(b, "needs "...)
		b = plural(b, d.Need, budgetUnit(d.Budget))
		b = append(b, "; "...)
		b = strconv.AppendInt(b, d.Free, 10)
		b = append(b, " free"...)
		after()
	case ReasonNoScratch:
		if d.Verdict == Reject {
			b = append(b, "needs "...)
			b = appendBytes(b, d.Need)
			b = append(b, " of scratch; no scratch volume is known"...)
			break
		}
		b = append(b, "needs "...)
		b = appendBytes(b, d.Need)
		b = append(b, " of scratch; "...)
		b = appendBytes(b, d.Free)
		b = append(b, " free on the best volume"...)
		after()
	case ReasonLoadHigh:
		b = append(b, "CPU busy: 1-minute load average "...)
		b = strconv.AppendFloat(b, d.Signal, 'f', 2, 64)
		b = append(b, " (less the threads of running batches)"...)
		b = appendGate(b, d, 2, "", "new admissions")
		b = appendCPUGateWait(b, d, "--load-threshold -1")
	case ReasonCPUPressure:
		b = append(b, "CPU busy: "...)
		b = strconv.AppendFloat(b, d.Signal, 'f', 0, 64)
		b = append(b, "% of the time, runnable tasks waited for a CPU (PSI)"...)
		b = appendGate(b, d, 0, "%", "new admissions")
		b = appendCPUGateWait(b, d, "--cpu-pressure-threshold -1")
	case ReasonIOPressure:
		b = append(b, "io pressure "...)
		b = strconv.AppendFloat(b, d.Signal, 'f', 1, 64)
		b = append(b, '%')
		b = appendGate(b, d, 1, "%", "new admissions holding IO slots")
	case ReasonScratchUnknown:
		b = append(b, "needs "...)
		b = appendBytes(b, d.Need)
		b = append(b, " of scratch; no measured volume has room and the free space of a scratch volume cannot be measured now"...)
	case ReasonGPUUnknown:
		b = append(b, "needs GPU memory; the GPU's free memory cannot be measured"...)
	case ReasonNoGPU:
		b = append(b, "needs a GPU; none is present"...)
	case ReasonInvalidEstimate:
		b = append(b, "invalid estimate: "...)
		b = append(b, d.Detail...)
	case ReasonNoSnapshot:
		b = append(b, "no snapshot of the machine yet"...)
	case ReasonClosed:
		b = append(b, "the governor is closed"...)
	default:
		b = append(b, strings.ToLower(string(d.Reason))...)
	}
	return string(b)
}

// appendGate says whether a deferring signal is above its threshold or
// back at or below it since when (hysteresis), and what the demands wait
// for (who: "new admissions"): that it stays at or below for
// Decision.Hysteresis, and until when at the latest it would then end.
func appendGate(b []byte, d Decision, prec int, unit, who string) []byte {
	if d.Signal > d.Threshold || d.BelowSince.IsZero() {
		b = append(b, ", above the threshold "...)
		b = strconv.AppendFloat(b, d.Threshold, 'f', prec, 64)
		b = append(b, unit...)
		b = append(b, "; "...)
		b = append(b, who...)
		b = append(b, " wait until it stays at or below for "...)
		return append(b, d.Hysteresis.String()...)
	}
	b = append(b, ", back at or below the threshold "...)
	b = strconv.AppendFloat(b, d.Threshold, 'f', prec, 64)
	b = append(b, unit...)
	b = append(b, " since "...)
	b = appendClock(b, d.BelowSince)
	b = append(b, "; "...)
	b = append(b, who...)
	b = append(b, " wait until it has stayed there for "...)
	b = append(b, d.Hysteresis.String()...)
	b = append(b, " (at "...)
	b = appendClock(b, d.BelowSince.Add(d.Hysteresis))
	return append(b, ')')
}

// appendClock writes t's time of day in UTC ("15:04:05 UTC").
func appendClock(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, "15:04:05 UTC")
}

// appendCPUGateWait says how long at most the CPU gate holds new
// admissions and which setting turns it off (off names the controller's
// flag; the config file's key is the same in camel case).
func appendCPUGateWait(b []byte, d Decision, off string) []byte {
	switch {
	case d.MaxWait < 0:
	case !d.GateUntil.IsZero():
		b = append(b, ", at most until "...)
		b = appendClock(b, d.GateUntil)
		b = append(b, " ("...)
		b = append(b, d.MaxWait.String()...)
		b = append(b, " while none of our batches runs, --cpu-gate-max-wait)"...)
	default:
		b = append(b, ", at most "...)
		b = append(b, d.MaxWait.String()...)
		b = append(b, " while none of our batches runs (--cpu-gate-max-wait)"...)
	}
	b = append(b, "; "...)
	b = append(b, off...)
	return append(b, " turns the CPU gate off"...)
}

// budgetUnit names the unit of a counted budget.
func budgetUnit(b Budget) string {
	switch b {
	case BudgetCPU:
		return "thread"
	case BudgetIOSlots:
		return "IO slot"
	case BudgetGPUSlots:
		return "GPU slot"
	}
	return "unit"
}

// appendSplit appends, when the items left take more than one batch of
// size batch, " (N items left, K even batches)": the batch was evened out;
// and, with share k >= 2, that it was held to a 1/k share of memory.
func appendSplit(b []byte, batch, left int64, share int) []byte {
	split := batch >= 1 && left > batch
	if !split && share < 2 {
		return b
	}
	b = append(b, " ("...)
	if split {
		b = plural(b, left, "item")
		b = append(b, " left, "...)
		b = plural(b, (left+batch-1)/batch, "even batch")
	}
	if share >= 2 {
		if split {
			b = append(b, "; "...)
		}
		b = append(b, "a 1/"...)
		b = strconv.AppendInt(b, int64(share), 10)
		b = append(b, " share of memory, "...)
		b = strconv.AppendInt(b, int64(share), 10)
		b = append(b, " tasks side by side"...)
	}
	return append(b, ')')
}

// SplitNote says, for a contract, in how many even batches the items left
// run (empty when one batch takes them all), and the share of memory the
// batch was held to: what describe shows of why a batch was sized so.
func SplitNote(c Contract) string {
	return string(appendSplit(nil, c.Batch, c.ItemsLeft, c.Share))
}
