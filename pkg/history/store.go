package history

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Default bounds of a Store.
const (
	// DefaultMaxRecords is the number of batches kept per profile.
	DefaultMaxRecords = 128
	// DefaultMaxProfiles is the number of profiles kept; the one used
	// least recently goes first.
	DefaultMaxProfiles = 256
	// FileName is the store's file in the state directory.
	FileName = "history.db"
)

// MaxProfileLen bounds a profile's name (a bucket key).
const MaxProfileLen = 253

// ErrLocked is returned by Open when another process holds the store.
var ErrLocked = errors.New("history store is held by another process")

// ErrBadProfile is returned for an empty or too long profile name.
var ErrBadProfile = errors.New("invalid profile name")

// ErrCorrupt is wrapped by the error of Open and Load when bbolt found the
// file damaged past reading (it panics on some scribbled pages: recovered
// here, so that a damaged file is an error its caller can move aside, not
// a controller that cannot start).
var ErrCorrupt = errors.New("history store damaged")

// ErrGone is wrapped by the error of Append when the store's file was
// removed or replaced since Open (another file at its path): what it
// would write reaches no one; the caller opens a new one.
var ErrGone = errors.New("history store file removed or replaced")

// recoverCorrupt turns a panic of bbolt into an ErrCorrupt error in *err.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("history store %s: %w: %v", path, ErrCorrupt, r)
	}
}

// rootBucket holds one sub-bucket per profile. Each sub-bucket maps a
// big-endian sequence number to a JSON Record, oldest first.
var rootBucket = []byte("profiles.v1")

// Options bound a Store; zero fields take the defaults.
type Options struct {
	// MaxRecords per profile (default DefaultMaxRecords).
	MaxRecords int
	// MaxProfiles kept (default DefaultMaxProfiles).
	MaxProfiles int
	// ReadOnly opens the store for reading (shares the lock with other readers).
	ReadOnly bool
	// LockTimeout is how long Open waits for another process's lock
	// (default 0: fail at once with ErrLocked).
	LockTimeout time.Duration
}

// Store is the persistent, bounded history of finished batches, one
// bbolt file. Every Append is a transaction synced to disk before it
// returns: a crash loses at most the append in flight, and bbolt's
// copy-on-write pages and double meta page never leave a torn store. Safe
// for concurrent use.
type Store struct {
	db   *bolt.DB
	opts Options
	// file is the file opened (its device and inode), to tell when the
	// path no longer names it.
	file os.FileInfo
}

// Open opens (creating when missing, unless ReadOnly) the store at path.
func Open(path string, opts Options) (_ *Store, err error) {
	defer recoverCorrupt(path, &err)
	if opts.MaxRecords <= 0 {
		opts.MaxRecords = DefaultMaxRecords
	}
	if opts.MaxProfiles <= 0 {
		opts.MaxProfiles = DefaultMaxProfiles
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("history store: %w", err)
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("history store: %w", err)
	}
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = time.Millisecond // bbolt's 0 waits forever
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: opts.ReadOnly})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("history store %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("history store %s: %w", path, err)
	}
	s := &Store{db: db, opts: opts}
	// bbolt holds the file's lock from here: the file at path is the one
	// it opened.
	s.file, _ = os.Stat(path)
	if !opts.ReadOnly {
		if err := db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(rootBucket)
			return err
		}); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("history store %s: %w", path, err)
		}
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// Path is the store's file.
func (s *Store) Path() string { return s.db.Path() }

// Entry is one record to append, with its profile.
type Entry struct {
	Profile string
	Record  Record
}

// Append adds records in one transaction, synced before it returns.
// Each profile keeps its last MaxRecords records; a new profile beyond
// MaxProfiles evicts the profile whose last record is oldest.
//
// A file damaged while open (bbolt panics on scribbled pages) gives an
// error wrapping ErrCorrupt; one removed or replaced since Open, an error
// wrapping ErrGone, nothing written.
func (s *Store) Append(entries ...Entry) (err error) {
	defer recoverCorrupt(s.db.Path(), &err)
	if s.file != nil {
		if fi, serr := os.Stat(s.db.Path()); serr != nil || !os.SameFile(fi, s.file) {
			return fmt.Errorf("history store %s: %w", s.db.Path(), ErrGone)
		}
	}
	for _, e := range entries {
		if e.Profile == "" || len(e.Profile) > MaxProfileLen {
			return fmt.Errorf("history append %q: %w", e.Profile, ErrBadProfile)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(rootBucket)
		if err != nil {
			return err
		}
		for _, e := range entries {
			b := root.Bucket([]byte(e.Profile))
			if b == nil {
				if err := s.evict(root, e.Profile); err != nil {
					return err
				}
				if b, err = root.CreateBucket([]byte(e.Profile)); err != nil {
					return err
				}
			}
			data, err := json.Marshal(e.Record)
			if err != nil {
				return err
			}
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(key(seq), data); err != nil {
				return err
			}
			// Keys only grow and only the oldest are deleted: the keys
			// are the contiguous range [first, seq].
			c := b.Cursor()
			for k, _ := c.First(); k != nil && seq-binary.BigEndian.Uint64(k)+1 > uint64(s.opts.MaxRecords); k, _ = c.Next() {
				if err := c.Delete(); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// evict makes room for one more profile. REQUIRES: a write transaction.
func (s *Store) evict(root *bolt.Bucket, keep string) error {
	type aged struct {
		name string
		last time.Time
	}
	var all []aged
	err := root.ForEachBucket(func(k []byte) error {
		var r Record
		if _, v := root.Bucket(k).Cursor().Last(); v != nil {
			_ = json.Unmarshal(v, &r)
		}
		all = append(all, aged{string(k), r.Time})
		return nil
	})
	if err != nil || len(all) < s.opts.MaxProfiles {
		return err
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].last.Equal(all[j].last) {
			return all[i].last.Before(all[j].last)
		}
		return all[i].name < all[j].name
	})
	for _, a := range all[:len(all)-s.opts.MaxProfiles+1] {
		if a.name == keep {
			continue
		}
		if err := root.DeleteBucket([]byte(a.name)); err != nil {
			return err
		}
	}
	return nil
}

// Load returns every profile's records, oldest first. A record that does
// not decode is skipped (and counted in skipped), never fatal.
func (s *Store) Load() (out map[string][]Record, skipped int, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("history store %s: %w: %v", s.Path(), ErrCorrupt, r)
		}
	}()
	out = make(map[string][]Record)
	err = s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(rootBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(name []byte) error {
			var recs []Record
			err := root.Bucket(name).ForEach(func(_, v []byte) error {
				var r Record
				dec := json.NewDecoder(bytes.NewReader(v))
				if err := dec.Decode(&r); err != nil {
					skipped++
					return nil
				}
				recs = append(recs, r)
				return nil
			})
			out[string(name)] = recs
			return err
		})
	})
	if err != nil {
		return nil, skipped, fmt.Errorf("history load: %w", err)
	}
	return out, skipped, nil
}

// Check runs bbolt's consistency check over the whole store and returns
// the first inconsistency found (nil when the store is sound).
func (s *Store) Check() error {
	return s.db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	})
}

func key(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}
