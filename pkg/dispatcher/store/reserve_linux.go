package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves the blocks of f from off for n bytes without changing
// its size; a file system that cannot (no fallocate, or not this mode of
// it: EINVAL on some) reserves nothing, and a failed save is then taken
// back after the change instead of refused before it.
func preallocate(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return nil
	}
	return err
}
