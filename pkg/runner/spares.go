package runner

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// Spares recycles the items files of successful batches: their inodes are
// rewritten in place by later batches (of any task) instead of being
// created and unlinked, so that thousands of short batches create and
// delete no file: on ext4 without a journal the inode allocator skips every
// inode deleted in the last minutes, and each creation then costs a walk
// over all of them; rewriting in place within the file's first block frees
// and allocates no block either.
//
// A pooled file is named items-TOKEN-N in its directory. A batch that
// fails keeps its items under TASK.batch-INDEX.items instead (renamed out
// of the pool). The pool files a killed process left (by their name
// pattern) are adopted on the first use of a directory. A pool file is
// handed on only to a batch of the user it belongs to (Spec.User): one of
// another user's is unlinked instead, since that user may still hold it
// open. The zero value is
// not usable: use NewSpares. A nil *Spares creates and unlinks every items
// file, named TASK.batch-INDEX.items.
type Spares struct {
	token string // names this process's new pool files
	mu    sync.Mutex
	free  map[string][]string // directory -> free pool files in it
	seq   int
}

// maxSpares bounds the free pool files kept per directory; beyond, a file
// is unlinked as without a pool.
const maxSpares = 64

// poolName matches the name of a pool file (items-TOKEN-N).
var poolName = regexp.MustCompile(`^items-[0-9a-f]{8}-[0-9]+$`)

// NewSpares returns an empty pool.
func NewSpares() *Spares {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Spares{token: hex.EncodeToString(b[:]), free: map[string][]string{}}
}

// take returns a free pool file of dir (true), or a new pool file's name
// (false: the caller creates it); fallback, the name without a pool.
func (p *Spares) take(dir, fallback string) (name string, reused bool) {
	if p == nil {
		return fallback, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	names, seen := p.free[dir]
	if !seen {
		names = adoptSpares(dir)
	}
	if n := len(names); n > 0 {
		p.free[dir] = names[:n-1]
		return names[n-1], true
	}
	p.free[dir] = names
	p.seq++
	return fmt.Sprintf("items-%s-%d", p.token, p.seq), false
}

// put returns the items file at path to the pool (or unlinks it when the
// directory has enough free files, or without a pool).
func (p *Spares) put(path string) {
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	if p != nil && poolName.MatchString(name) && small(path) {
		p.mu.Lock()
		if len(p.free[dir]) < maxSpares {
			p.free[dir] = append(p.free[dir], name)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	_ = os.Remove(path)
}

// spareMaxBytes bounds a pool file kept for reuse: rewriting one in place
// saves an inode, not the blocks of a long list, which would stay on disk
// for nothing (a task of millions of items leaves megabytes).
const spareMaxBytes = 64 << 10

// small reports whether the file at path may be kept in the pool.
func small(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Size() <= spareMaxBytes
}

// RemoveItemsFiles removes the items files a task's failed batches kept in
// dir (TASK.batch-INDEX.items): the task is gone, or Done.
func RemoveItemsFiles(dir, task string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := strings.ReplaceAll(task, "/", "_") + ".batch-"
	for _, e := range ents {
		index, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		if index, ok = strings.CutSuffix(index, ".items"); ok && index != "" && strings.Trim(index, "0123456789") == "" {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// adoptSpares lists the pool files already in dir (left by an earlier
// process), at most maxSpares of them.
func adoptSpares(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if poolName.MatchString(e.Name()) && e.Type().IsRegular() && len(names) < maxSpares {
			names = append(names, e.Name())
		}
	}
	return names
}

// writeItemsFile writes data to an items file in dir and returns its path:
// a free pool file rewritten in place when there is one, else a new file
// (a pool file's name with a pool, fallback without). Nothing reads the
// file before the batch starts, so it needs no temp file; a leftover of a
// killed controller under the same name is overwritten. The file is u's
// (nil: the controller's user's), claimed on its open descriptor before
// anything is written (claimItemsFile); a pool file that belongs to another
// user is unlinked and replaced by a new file, never handed on.
func writeItemsFile(p *Spares, dir, fallback string, data itemsContent, u *User) (string, error) {
	name, reused := p.take(dir, fallback)
	path := filepath.Join(dir, name)
	if reused {
		err := fillItemsFile(path, data, u, false)
		if err == nil {
			return path, nil
		}
		if errors.Is(err, errForeignFile) {
			_ = os.Remove(path)
		}
		// Gone, broken or someone else's: a new file under a new name.
		name, _ = p.take(dir, fallback)
		path = filepath.Join(dir, name)
	}
	return path, fillItemsFile(path, data, u, true)
}

// fillItemsFile writes data over the file at path from offset 0 and cuts
// it to its length (within the first block nothing is freed or allocated),
// creating the file when create is set. The file is claimed for u first;
// with create, one found someone else's is unlinked and made anew.
// itemsContent writes an items file's content to w and returns its size.
type itemsContent func(w io.Writer) (int64, error)

func fillItemsFile(path string, data itemsContent, u *User, create bool) error {
	flags := os.O_WRONLY | unix.O_NOFOLLOW
	if create {
		flags |= os.O_CREATE
	}
	f, err := kernfile.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	err = claimItemsFile(f, u)
	if errors.Is(err, errForeignFile) && create {
		_ = f.Close()
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if f, err = kernfile.OpenFile(path, flags|os.O_EXCL, 0o600); err != nil {
			return err
		}
		err = claimItemsFile(f, u)
	}
	if err != nil {
		_ = f.Close()
		return err
	}
	// Written through a buffer from offset 0 (the file is open without
	// O_APPEND): a list of millions is never held whole in memory.
	bw := bufio.NewWriterSize(f, 64<<10)
	n, werr := data(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	terr := f.Truncate(n)
	return errors.Join(werr, terr, f.Close())
}
