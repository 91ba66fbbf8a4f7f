//go:build !(linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x))

package spool

import "golang.org/x/sys/unix"

// Fstatat is unix.Fstatat (fstatat_raw.go makes it a raw system call where
// the architecture has newfstatat).
func Fstatat(dirfd int, name string, st *unix.Stat_t, flags int) error {
	return unix.Fstatat(dirfd, name, st, flags)
}
