package probe

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// VolumeStat is what the probe needs to know about a scratch directory's
// filesystem.
type VolumeStat struct {
	// FreeBytes available to an unprivileged writer (statfs f_bavail × f_bsize).
	FreeBytes int64
	// Dev is the st_dev of the directory (major and minor of its block device).
	Dev uint64
}

// statVolume is the default Options.StatVolume: statfs and stat of path.
func statVolume(path string) (VolumeStat, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return VolumeStat{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return VolumeStat{}, fmt.Errorf("stat %s: %w", path, err)
	}
	free := uint64(sfs.Bavail) * uint64(sfs.Bsize)
	if sfs.Bsize > 0 && uint64(sfs.Bavail) > uint64(1<<63-1)/uint64(sfs.Bsize) {
		free = 1<<63 - 1
	}
	return VolumeStat{FreeBytes: int64(min(free, uint64(1<<63-1))), Dev: uint64(st.Dev)}, nil
}

// parseRotational parses queue/rotational ("0" or "1").
func parseRotational(r io.Reader) (bool, error) {
	s, err := readTrimmed(r)
	if err != nil {
		return false, err
	}
	switch s {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("parse rotational %q: want 0 or 1", s)
}

// rotational reports whether the block device dev spins, following
// sysRoot/dev/block/MAJ:MIN to the device and, for a partition, to its
// disk. Unknown devices (overlay, tmpfs, device mapper without queue) give false.
func rotational(sysRoot string, dev uint64) bool {
	link := filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)))
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return false
	}
	if v, err := readFileWith(filepath.Join(dir, "queue", "rotational"), parseRotational); err == nil {
		return v
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err != nil {
		return false
	}
	v, err := readFileWith(filepath.Join(filepath.Dir(dir), "queue", "rotational"), parseRotational)
	return err == nil && v
}
