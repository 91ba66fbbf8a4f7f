//go:build !(linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x))

package reconcile

import "golang.org/x/sys/unix"

// fstatat is unix.Fstatat(dirfd, name, st, 0) (fstatat_raw.go has the
// raw system call where the architecture has newfstatat).
func fstatat(dirfd int, name string, st *unix.Stat_t) error {
	return unix.Fstatat(dirfd, name, st, 0)
}
