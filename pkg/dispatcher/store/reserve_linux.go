package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves the blocks of f from off for n bytes without changing
// its size; a file system that cannot (no fallocate) reserves nothing.
func preallocate(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}
