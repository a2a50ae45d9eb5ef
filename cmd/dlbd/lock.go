package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
	// mountedBPFFS says this dlbd mounted the bpffs the pins are on.
	mountedBPFFS bool
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
	mounted, err := datapath.PreparePinDir(pinDir)
	if err != nil {
		_ = st.Release()
		return nil, err
	}
	pins, err := lock.Dir(pinDir)
	if err != nil {
		_ = st.Release()
		return nil, ownerError("pin directory", pinDir, "--pin-dir", err)
	}
	return &ownership{state: st, pins: pins, mountedBPFFS: mounted}, nil
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

// privatePins reports whether the bpffs this dlbd mounted (mounted) lives
// in a mount namespace no other process shares: "ip netns exec" makes
// one, with a fresh /sys that hides the host's /sys/fs/bpf, and a
// service's private mounts are another. Such a bpffs, and every pin on
// it, goes when dlbd exits, and the executor with it: a restart cannot
// adopt it. (A bpffs dlbd found mounted is someone else's too.)
func privatePins(mounted bool) bool {
	if !mounted {
		return false
	}
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	me := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == me {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "mnt")); err == nil && ns == self {
			return false
		}
	}
	return true
}
