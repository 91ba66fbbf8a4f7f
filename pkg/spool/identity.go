package spool

import "golang.org/x/sys/unix"

// Stat is the spool directory as the spool opened it (its descriptor, not
// its path): a caller that was handed a directory checks by it that the
// spool is that directory and whose it is.
func (s *Spool) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(s.root.fd, &st)
	return st, err
}
