//go:build linux

// Package lock gives a process exclusive ownership of a directory, so that
// two daemons never share one: an advisory flock(2) held for the life of
// the process (the kernel drops it when the process dies, SIGKILL
// included, so a crash never leaves a stale lock behind).
//
// A lock is taken on a lock file inside the directory (File), or on the
// directory itself (Dir) when the directory cannot hold regular files, as
// on bpffs. Either way a refused lock names the process that holds it,
// read from /proc/locks, which the kernel keeps right even when nothing
// could be written down.
package lock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HeldError is returned when another process holds the lock.
type HeldError struct {
	// Path is what was locked: the lock file or the directory.
	Path string
	// PID is the holder's process ID, 0 when it could not be found.
	PID int
}

// Error says who holds the lock, when that is known.
func (e *HeldError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("%s is locked by another process (pid %d)", e.Path, e.PID)
	}
	return fmt.Sprintf("%s is locked by another process", e.Path)
}

// Lock is a held lock. Release it, or let the process end.
type Lock struct {
	f    *os.File
	path string
	file bool // a lock file (File), not a directory (Dir)
}

// Path returns what is locked.
func (l *Lock) Path() string { return l.path }

// File locks the file at path, creating it (mode 0644) if needed, and
// writes the caller's PID into it for people reading it; /proc/locks stays
// the authority on who holds the lock. The file is never removed: a
// process that removed it on exit could let two others each lock a
// different file at the same path.
func File(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	l, err := take(f, path)
	if err != nil {
		return nil, err
	}
	l.file = true
	if err := f.Truncate(0); err != nil {
		_ = l.Release()
		return nil, fmt.Errorf("writing lock file %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		_ = l.Release()
		return nil, fmt.Errorf("writing lock file %s: %w", path, err)
	}
	return l, nil
}

// Dir locks the directory at path itself, which must exist. It works on
// any filesystem, bpffs included, and writes nothing.
func Dir(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening directory to lock: %w", err)
	}
	return take(f, path)
}

// take flocks f without waiting; on failure it closes f.
func take(f *os.File, path string) (*Lock, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Lock{f: f, path: path}, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Path: path, PID: holder(f)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
}

// Release drops the lock. It is safe to call more than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}

// StillHeld reports whether the path still names the locked file or
// directory: one removed (and perhaps recreated) under the process is no
// longer protected by its lock.
func (l *Lock) StillHeld() bool {
	if l == nil || l.f == nil {
		return false
	}
	var held, now unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &held) != nil || unix.Stat(l.path, &now) != nil {
		return false
	}
	return held.Dev == now.Dev && held.Ino == now.Ino
}

// Renew makes a lock the process holds protect its path again once
// StillHeld is false (removed under it, and perhaps created again): it
// locks what is at the path now, then drops the old lock. A lock file is
// created again (with its directory, if that is gone); a locked directory
// must exist again (its owner creates it). A *HeldError says another
// process took the path meanwhile; the old lock is kept. A lock that
// still holds its path is left as it is.
func (l *Lock) Renew() error {
	if l == nil || l.f == nil {
		return errors.New("renewing a lock that is not held")
	}
	if l.StillHeld() {
		return nil
	}
	var nl *Lock
	var err error
	if l.file {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
			return fmt.Errorf("renewing the lock on %s: %w", l.path, err)
		}
		nl, err = File(l.path)
	} else {
		nl, err = Dir(l.path)
	}
	if err != nil {
		return err
	}
	_ = l.f.Close()
	l.f = nl.f
	return nil
}

// holder finds the PID holding a flock on f's file in /proc/locks; 0 if
// none is found.
func holder(f *os.File) int {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	pl, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer pl.Close()
	return holderIn(bufio.NewScanner(pl), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

// holderIn reads /proc/locks lines such as
//
//	1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF
//	2: POSIX  ADVISORY  READ 99 fd:01:77 0 EOF
//	2: -> FLOCK  ADVISORY  WRITE 43 00:2a:1234 0 EOF
//
// and returns the PID of the first active FLOCK on the given device and
// inode (lines with "->" are waiters, not holders).
func holderIn(s *bufio.Scanner, major, minor uint32, ino uint64) int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 6 || f[1] != "FLOCK" {
			continue
		}
		if f[5] != want {
			continue
		}
		pid, err := strconv.Atoi(f[4])
		if err != nil || pid <= 0 {
			continue
		}
		return pid
	}
	return 0
}
