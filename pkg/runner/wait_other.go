//go:build !linux

package runner

// waitUnreaped says whether waitExit can wait for an exit without reaping
// the process; here it cannot, and Run kills the group after the program
// is reaped, a small window in which its group ID could be reused.
const waitUnreaped = false

func waitExit(int) {}
