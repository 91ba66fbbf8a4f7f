// Package damagedbolt writes, for tests, a bbolt file damaged as a disk or
// a stray writer may leave one: its meta pages intact, its data pages
// noise. bbolt panics reading such a file (its freelist, its buckets);
// the history store must make that an error, and the controller move the
// file aside.
package damagedbolt

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Write makes a bbolt file at path holding twenty buckets of records,
// then overwrites every page after the first four (the two meta pages and
// what follows them) with noise from a fixed seed.
func Write(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for i := range 50 {
			b, err := tx.CreateBucketIfNotExists([]byte(fmt.Sprintf("p%d", i%20)))
			if err != nil {
				return err
			}
			if err := b.Put([]byte(fmt.Sprintf("k%03d", i)), []byte(`{"items":1}`)); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	rng := rand.New(rand.NewPCG(32, 2))
	for i := 4 * page; i < len(data); i++ {
		data[i] = byte(rng.UintN(256))
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
