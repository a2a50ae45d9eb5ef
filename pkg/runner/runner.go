// Package runner runs an operator's program — a custom advisor, an event
// script, a metric script — the one way dlb runs programs: directly (no
// shell), in a process group of its own, with a deadline after which the
// whole group is killed, with standard input from /dev/null and bounded
// output. Without it, a script's children outlive it, a program that
// prints without end fills memory, and one that hangs blocks its caller.
package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Defaults of a Cmd.
const (
	// DefaultMaxOutput is how much of standard output and of standard
	// error is kept (4 KiB each).
	DefaultMaxOutput = 4 << 10
	// WaitDelay bounds the wait for the program's output to close after it
	// exited or was killed: a descendant that escaped the group and holds
	// the pipes open does not hold the caller too.
	WaitDelay = 500 * time.Millisecond
)

// Cmd is a program to run.
type Cmd struct {
	// Path is the program (looked up in PATH if it has no slash); Args
	// its arguments.
	Path string
	Args []string
	// Env is the environment; nil inherits the process's.
	Env []string
	// Dir is the working directory; empty inherits the process's.
	Dir string
	// Timeout bounds the run; 0 means the context's deadline alone.
	Timeout time.Duration
	// MaxOutput caps what is kept of stdout and of stderr, each;
	// 0 means DefaultMaxOutput.
	MaxOutput int
	// KillGroupOnExit kills the program's process group as soon as the
	// program exits, so that nothing it started outlives it (advisors and
	// metric scripts, whose helpers must not pile up). Without it the
	// group is killed only on timeout or cancellation (event scripts may
	// start something on purpose).
	KillGroupOnExit bool
}

// Result is what became of a run.
type Result struct {
	// Stdout and Stderr are the first MaxOutput bytes of each; Truncated
	// says the program wrote more to stdout.
	Stdout, Stderr []byte
	Truncated      bool
	// Elapsed is the time from the start to the program's exit.
	Elapsed time.Duration
	// Err is nil when the program exited with status 0; otherwise why
	// not: it could not start, or an *exec.ExitError.
	Err error
	// TimedOut and Canceled say the group was killed because the timeout
	// expired or the context was cancelled.
	TimedOut, Canceled bool
}

// Signaled returns the signal that killed the program, if one did.
func (r Result) Signaled() (syscall.Signal, bool) {
	var ee *exec.ExitError
	if errors.As(r.Err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal(), true
		}
	}
	return 0, false
}

// ExitCode returns the program's exit status, or -1 if it did not exit
// normally (or did not start).
func (r Result) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(r.Err, &ee) {
		return ee.ExitCode()
	}
	if r.Err != nil {
		return -1
	}
	return 0
}

// Started reports whether the program started at all.
func (r Result) Started() bool {
	var ee *exec.ExitError
	return r.Err == nil || errors.As(r.Err, &ee) || r.TimedOut || r.Canceled
}

// Run runs c and waits for it.
func Run(ctx context.Context, c Cmd) Result {
	rctx := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	max := c.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	cmd := exec.CommandContext(rctx, c.Path, c.Args...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Kill the whole group: the program and anything it started.
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return os.ErrProcessDone
	}
	cmd.WaitDelay = WaitDelay
	stdout, stderr := &capBuffer{max: max}, &capBuffer{max: max}
	cmd.Stdout, cmd.Stderr = stdout, stderr

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{Err: err, Elapsed: time.Since(start)}
	}
	var elapsed time.Duration
	if c.KillGroupOnExit && waitUnreaped {
		// Wait for the exit without reaping where the system allows it:
		// while the program is a zombie its PID, and so its group's ID,
		// cannot be reused, and killing the group ends whatever it left
		// running without any risk of hitting another.
		waitExit(cmd.Process.Pid)
		elapsed = time.Since(start)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	err := cmd.Wait()
	if !c.KillGroupOnExit || !waitUnreaped {
		elapsed = time.Since(start)
	}
	if c.KillGroupOnExit && !waitUnreaped {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // it exited; only its output stayed open
	}
	r := Result{Stdout: stdout.buf, Stderr: stderr.buf, Truncated: stdout.overflow, Elapsed: elapsed, Err: err}
	if err != nil {
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			r.Canceled = true
		case rctx.Err() != nil:
			r.TimedOut = true
		}
	}
	return r
}

// capBuffer keeps the first max bytes written to it and discards the rest
// (reporting them written, so the writer never blocks or fails).
type capBuffer struct {
	max      int
	buf      []byte
	overflow bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.max - len(b.buf)
	if room < len(p) {
		b.overflow = true
	}
	if room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
