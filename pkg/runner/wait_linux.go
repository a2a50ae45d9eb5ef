package runner

import (
	"errors"

	"golang.org/x/sys/unix"
)

// waitUnreaped says whether waitExit can wait for an exit without reaping
// the process.
const waitUnreaped = true

// waitExit blocks until process pid has exited, leaving it unreaped.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
