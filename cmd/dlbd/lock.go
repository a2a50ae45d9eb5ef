package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dlbproject/dlb/pkg/datapath"
	"github.com/dlbproject/dlb/pkg/lock"
)

// lockFile is the state directory's lock file; it holds the PID of the
// dlbd that owns the directory.
const lockFile = "dlbd.lock"

// ownership is what one dlbd holds exclusively: its state directory and
// its pin directory.
type ownership struct {
	state, pins *lock.Lock
}

// own locks the state directory and the pin directory, in that order,
// before dlbd reads the state, opens the executor or touches its socket.
// A second dlbd on either directory is refused with the first one's PID:
// two dlbds on one state file overwrite each other's configuration, and
// two on one pin directory overwrite each other's maps.
//
// The pin directory is on bpffs, which holds no regular files: it is
// locked as a directory, and the holder's PID is read from /proc/locks.
func own(stateDir, pinDir string) (*ownership, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	st, err := lock.File(filepath.Join(stateDir, lockFile))
	if err != nil {
		return nil, ownerError("state directory", stateDir, "--state-dir", err)
	}
	if err := datapath.PreparePinDir(pinDir); err != nil {
		_ = st.Release()
		return nil, err
	}
	pins, err := lock.Dir(pinDir)
	if err != nil {
		_ = st.Release()
		return nil, ownerError("pin directory", pinDir, "--pin-dir", err)
	}
	return &ownership{state: st, pins: pins}, nil
}

func ownerError(what, dir, flag string, err error) error {
	var he *lock.HeldError
	if !errors.As(err, &he) {
		return fmt.Errorf("locking the %s: %w", what, err)
	}
	pid := "pid unknown"
	if he.PID > 0 {
		pid = fmt.Sprintf("pid %d", he.PID)
	}
	return fmt.Errorf("another dlbd (%s) already uses the %s %s: stop it first, or give this one its own %s", pid, what, dir, flag)
}

// release drops both locks (the process's exit would too).
func (o *ownership) release() {
	_ = o.pins.Release()
	_ = o.state.Release()
}
