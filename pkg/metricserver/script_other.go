//go:build !unix

package metricserver

import "os/exec"

// setProcessGroup is a no-op where process groups are not available:
// cancellation kills the script itself only.
func setProcessGroup(*exec.Cmd) {}
