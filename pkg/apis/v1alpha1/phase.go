package v1alpha1

// Phases lists every phase, in life order.
var Phases = []Phase{PhasePending, PhaseReserved, PhaseRunning, PhasePaused, PhaseDone, PhaseFailed, PhaseRejected}

// transitions encodes the doc comments of the Phase constants. The empty
// phase is a task the controller has not written yet.
var transitions = map[Phase][]Phase{
	"":            {PhasePending, PhaseRejected},
	PhasePending:  {PhaseReserved, PhaseRejected, PhaseFailed, PhaseDone},
	PhaseReserved: {PhaseRunning, PhasePaused, PhasePending, PhaseFailed},
	PhaseRunning:  {PhasePaused, PhaseDone, PhaseFailed, PhasePending},
	PhasePaused:   {PhaseRunning, PhasePending, PhaseFailed, PhaseDone},
	PhaseDone:     {PhasePending, PhaseRejected},
	PhaseFailed:   {PhasePending, PhaseRejected},
	PhaseRejected: {PhasePending},
}

// AllowedTransition reports whether a task may move from phase from to phase
// to. Staying in a known phase is always allowed (a status update that keeps
// the phase); nothing moves back to "" and unknown phases allow nothing.
func AllowedTransition(from, to Phase) bool {
	if to == "" || !to.Valid() {
		return false
	}
	if from == to {
		return true
	}
	for _, p := range transitions[from] {
		if p == to {
			return true
		}
	}
	return false
}

// IsTerminal reports whether p is Done, Failed or Rejected: only a spec edit
// moves such a task again.
func IsTerminal(p Phase) bool {
	return p == PhaseDone || p == PhaseFailed || p == PhaseRejected
}

// Valid reports whether p is one of the phases (the empty phase is not).
func (p Phase) Valid() bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}

// Valid reports whether c is one of the task classes.
func (c TaskClass) Valid() bool {
	for _, k := range Classes {
		if c == k {
			return true
		}
	}
	return false
}

// Classes lists every task class.
var Classes = []TaskClass{ClassImport, ClassThumbnails, ClassExif, ClassFeatures, ClassMatching, ClassSfM, ClassDepthMaps, ClassMesh, ClassTexture, ClassCustom}
