package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Spares recycles the inodes of items files. A successful batch's items
// file is renamed to a spare name in its directory instead of being
// unlinked, and the next batch renames a spare to its own name and
// rewrites it, so that thousands of short batches create and delete no
// file: on ext4 without a journal the inode allocator skips every inode
// deleted in the last minutes, and each creation then costs a walk over
// all of them. A spare holds stale items only; it is never read.
//
// One Spares serves any number of directories; the spares a killed
// process left (by their name pattern) are adopted on the first use of a
// directory. The zero value is not usable: use NewSpares. A nil *Spares
// creates and unlinks every items file.
type Spares struct {
	token string // names this process's new spares
	mu    sync.Mutex
	free  map[string][]string // directory -> spare names in it
	seq   int
}

// maxSpares bounds the spares kept per directory; beyond, a file is
// unlinked as without a pool.
const maxSpares = 64

// sparePrefix starts every spare's name.
const sparePrefix = ".lardon3d-spare-"

// NewSpares returns an empty pool.
func NewSpares() *Spares {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Spares{token: hex.EncodeToString(b[:]), free: map[string][]string{}}
}

// take renames a spare of dir to name and returns true, or false when dir
// has none (or the rename failed: the caller creates the file).
func (p *Spares) take(dir, name string) bool {
	if p == nil {
		return false
	}
	for {
		p.mu.Lock()
		names, seen := p.free[dir]
		if !seen {
			names = adoptSpares(dir)
		}
		if len(names) == 0 {
			p.free[dir] = names
			p.mu.Unlock()
			return false
		}
		spare := names[len(names)-1]
		p.free[dir] = names[:len(names)-1]
		p.mu.Unlock()
		if err := os.Rename(filepath.Join(dir, spare), name); err == nil {
			return true
		}
		// Gone (someone cleaned the directory): try the next one.
	}
}

// put makes the file at path a spare of its directory, or unlinks it when
// the directory has enough spares or the rename fails.
func (p *Spares) put(path string) {
	if p == nil {
		_ = os.Remove(path)
		return
	}
	dir := filepath.Dir(path)
	p.mu.Lock()
	if len(p.free[dir]) >= maxSpares {
		p.mu.Unlock()
		_ = os.Remove(path)
		return
	}
	p.seq++
	spare := fmt.Sprintf("%s%s-%d", sparePrefix, p.token, p.seq)
	p.mu.Unlock()
	if err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, filepath.Join(dir, spare), unix.RENAME_NOREPLACE); err != nil {
		_ = os.Remove(path)
		return
	}
	p.mu.Lock()
	p.free[dir] = append(p.free[dir], spare)
	p.mu.Unlock()
}

// adoptSpares lists the spares already in dir (left by an earlier
// process), at most maxSpares of them.
func adoptSpares(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) && e.Type().IsRegular() && len(names) < maxSpares {
			names = append(names, e.Name())
		}
	}
	return names
}

// writeItemsFile writes data to path, through a spare of its directory
// when there is one: an existing inode renamed to path, truncated and
// rewritten. Nothing reads the file before the batch starts, so it needs
// no temp file; a leftover of a killed controller under the same name is
// overwritten.
func writeItemsFile(p *Spares, path string, data []byte) error {
	flags := os.O_WRONLY | os.O_TRUNC | unix.O_NOFOLLOW
	if !p.take(filepath.Dir(path), path) {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, os.ErrNotExist) && flags&os.O_CREATE == 0 {
		f, err = os.OpenFile(path, flags|os.O_CREATE, 0o600)
	}
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	return errors.Join(werr, f.Close())
}
