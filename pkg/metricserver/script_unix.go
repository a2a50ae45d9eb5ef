//go:build unix

package metricserver

import (
	"os/exec"
	"syscall"
)

// setProcessGroup makes cmd the leader of a new process group and makes
// cancellation kill the whole group.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// A negative pid signals the process group.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
