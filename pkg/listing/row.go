package listing

import (
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// Row is what get reads of a task to list it: its table (plain and wide),
// its sort orders, its label selector and -o name. A running controller
// holds one per manifest it read (Rows); a listing makes one of each
// manifest it parses itself (RowOf), so that a task lists the same
// whichever way it was read.
type Row struct {
	Name   string            // metadata.name
	Labels map[string]string // metadata.labels
	// Profile is the history profile of the spec (reconcile.ProfileOf):
	// the one get -o wide looks the task's estimates up by.
	Profile string
	Phase   v1alpha1.Phase
	Gen     int64 // status.observedGeneration
	Seq     int64 // status.queueSeq
	Done    int64 // status.progress.itemsDone
	Total   int64 // status.progress.itemsTotal
	// Reservation is the contract in force; nil without one.
	Reservation *Contract
	// LastBatch is the last batch started; nil before the first.
	LastBatch *Batch
	// Start is status.startTime in Unix seconds (a manifest keeps
	// seconds), nil when unset.
	Start *int64
	// Created is status.creationTime in Unix seconds, nil when unset.
	Created *int64
	// Conditions are the type and reason, one pair after the other, of
	// each condition get's REASON column reads (ListedConditions) that is
	// False, in the order it reads them.
	Conditions []string
}

// Contract is what a Row keeps of the contract in force.
type Contract struct {
	Batch, BatchRequested, Threads int64
	Memory                         int64 // bytes
}

// Batch is what a Row keeps of the last batch: -1 for each part unknown.
type Batch struct {
	Index      int64
	PeakMemory int64 // bytes
	Size       int64
	Start, End int64 // Unix seconds
	// ItemsReported is how many items its command reported done
	// (LARDON3D_PROGRESS).
	ItemsReported int64
	// Paused is how long, in seconds, pauses that ended stopped it.
	Paused int64
}

// Age is when the task's age counts from, in Unix seconds: its creation
// time, else (a status of an older controller) its start time; nil when
// neither is known.
func (r *Row) Age() *int64 {
	if r.Created != nil {
		return r.Created
	}
	return r.Start
}

// Reason is the reason of the first listed False condition, else "".
func (r *Row) Reason() string {
	if len(r.Conditions) < 2 {
		return ""
	}
	return r.Conditions[1]
}

// listedConditions are the condition types get's REASON column reads, in
// the order it reads them.
var listedConditions = []string{v1alpha1.ConditionValid, v1alpha1.ConditionDependenciesReady, v1alpha1.ConditionAdmitted, v1alpha1.ConditionComplete, v1alpha1.ConditionSpecApplied}

// ListedConditions are the condition types whose first False one gives
// get's REASON column, in the order get looks for them.
func ListedConditions() []string { return append([]string(nil), listedConditions...) }

// RowOf is the Row of t, whose history profile is profile. Its labels are
// the task's map, not a copy.
func RowOf(t *v1alpha1.Task, profile string) Row {
	st := &t.Status
	r := Row{Name: t.Metadata.Name, Labels: t.Metadata.Labels, Profile: profile,
		Phase: st.Phase, Gen: st.ObservedGeneration, Seq: st.QueueSeq, Done: st.Progress.ItemsDone, Total: st.Progress.ItemsTotal}
	if c := st.Reservation; c != nil {
		r.Reservation = &Contract{Batch: c.Batch, BatchRequested: c.BatchRequested, Threads: int64(c.Threads), Memory: c.Memory.Value()}
	}
	if b := st.LastBatch; b != nil {
		lb := &Batch{Index: b.Index, PeakMemory: -1, Size: b.Size, Start: -1, End: -1, ItemsReported: -1, Paused: b.PausedSeconds}
		if b.PeakMemory != nil {
			lb.PeakMemory = b.PeakMemory.Value()
		}
		if b.StartTime != nil {
			lb.Start = b.StartTime.Unix()
		}
		if b.EndTime != nil {
			lb.End = b.EndTime.Unix()
		}
		if b.ItemsReported != nil {
			lb.ItemsReported = *b.ItemsReported
		}
		r.LastBatch = lb
	}
	if st.StartTime != nil {
		s := st.StartTime.Unix()
		r.Start = &s
	}
	if st.CreationTime != nil {
		c := st.CreationTime.Unix()
		r.Created = &c
	}
	for _, typ := range listedConditions {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse {
			r.Conditions = append(r.Conditions, c.Type, c.Reason)
		}
	}
	return r
}

// FileVersion names a version of a manifest as stat(2) (following
// symlinks) sees it: a status write-back makes a new inode, an edit in
// place changes the size or the modification time.
type FileVersion struct {
	Inode   uint64
	Size    int64
	ModTime int64 // Unix nanoseconds
}

// VersionOf is the version of the file at path (through symlinks).
func VersionOf(path string) (FileVersion, error) { return VersionAt(unix.AT_FDCWD, path) }

// VersionAt is VersionOf the file called name in the directory open as
// dirfd: a listing stats ten thousand files of one directory.
func VersionAt(dirfd int, name string) (FileVersion, error) {
	var st unix.Stat_t
	if err := spool.Fstatat(dirfd, name, &st, 0); err != nil {
		return FileVersion{}, err
	}
	return FileVersion{Inode: st.Ino, Size: st.Size, ModTime: st.Mtim.Nano()}, nil
}

// VersionedRow is the Row of the task one version of a manifest holds.
type VersionedRow struct {
	// Version is the version of the file the row describes: a listing
	// takes the row only while VersionAt the file says the same.
	Version FileVersion
	Row     Row
}

// Rows are the rows a running controller holds: for each manifest it
// read or wrote last, the version and its row.
type Rows interface {
	// IndexedRow is the row of the manifest called base, if any. It is
	// called from several goroutines at once; the caller never changes
	// what it returns.
	IndexedRow(base string) (*VersionedRow, bool)
}
