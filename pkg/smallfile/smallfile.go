// Package smallfile reads the small files an operator names by path (a
// shared secret, a BGP password, a certificate, the configuration file)
// so that no name can stall or exhaust the daemon reading it: only a
// regular file is read (a named pipe would block the reader until someone
// writes to it, a device such as /dev/zero never ends), and at most a
// given size.
package smallfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Open opens the regular file at path (symbolic links followed) for
// reading and returns it with its description. Opening does not wait for
// a writer when path is a named pipe: it is refused like any file that is
// not regular.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, Kind(fi.Mode()))
	}
	return f, fi, nil
}

// Read returns the content of the regular file at path, which must hold
// at most max bytes.
func Read(path string, max int64) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadFrom(f, fi, max)
}

// ReadPrivate returns the content of the regular file at path, which
// must hold at most max bytes and be private to its owner and this
// process's user (see Private): a secret, a token.
func ReadPrivate(path string, max int64) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := Private(f, fi); err != nil {
		return nil, err
	}
	return ReadFrom(f, fi, max)
}

// ReadFrom reads a file Open returned (fi its description), which must
// hold at most max bytes.
func ReadFrom(f *os.File, fi fs.FileInfo, max int64) ([]byte, error) {
	if fi.Size() > max {
		return nil, tooLarge(f.Name(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max { // it grew since
		return nil, tooLarge(f.Name(), max)
	}
	return b, nil
}

func tooLarge(path string, max int64) error {
	switch {
	case max >= 1<<20 && max%(1<<20) == 0:
		return fmt.Errorf("%s is larger than %d MiB", path, max>>20)
	case max >= 1<<10 && max%(1<<10) == 0:
		return fmt.Errorf("%s is larger than %d KiB", path, max>>10)
	}
	return fmt.Errorf("%s is larger than %d bytes", path, max)
}

// Kind names what a file that is not regular is: "a directory", "a named
// pipe", "a character device"...
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a plain file (" + m.Type().String() + ")"
}
