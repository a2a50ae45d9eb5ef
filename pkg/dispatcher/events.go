package dispatcher

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Events that run operator scripts, named as IBM's.
const (
	eventServerDown    = "serverDown"
	eventServerUp      = "serverUp"
	eventManagerAlert  = "managerAlert"
	eventManagerClear  = "managerClear"
	eventHalfOpenAlert = "halfOpenAlert"
	eventHalfOpenDone  = "halfOpenAlertDone"
)

// maxQueuedEvents bounds the events waiting for a script; more are dropped
// (and logged) rather than delaying the manager.
const maxQueuedEvents = 256

type event struct {
	name string
	env  map[string]string
	at   time.Time
}

// emit queues an event for its script, if the scripts directory has one.
// It never blocks: scripts run one at a time on their own goroutine, each
// bounded by the script timeout.
func (e *Engine) emit(name string, env map[string]string) {
	e.log.Info("event", "event", name, "env", env)
	if e.opts.ScriptsDir == "" {
		return
	}
	select {
	case e.events <- event{name: name, env: env, at: time.Now()}:
	default:
		e.log.Warn("event dropped: too many events waiting for their scripts", "event", name)
	}
}

// runEvents runs queued events' scripts until ctx ends.
func (e *Engine) runEvents(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.events:
			e.runScript(ctx, ev)
		}
	}
}

// runScript runs the event's script with the event in its environment
// (DLB_EVENT, DLB_TIME and the event's own variables), killing it and its
// children when it outlives the script timeout.
func (e *Engine) runScript(ctx context.Context, ev event) {
	path := filepath.Join(e.opts.ScriptsDir, ev.name)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		e.log.Warn("event script is not an executable file", "script", path, "err", err)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, e.opts.ScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(sctx, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	cmd.Env = append(os.Environ(), "DLB_EVENT="+ev.name, "DLB_TIME="+ev.at.UTC().Format(time.RFC3339))
	for k, v := range ev.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if len(out) > 4096 {
		out = out[:4096]
	}
	switch {
	case sctx.Err() == context.DeadlineExceeded:
		e.log.Warn("event script killed after its timeout", "script", path, "timeout", e.opts.ScriptTimeout)
	case err != nil:
		e.log.Warn("event script failed", "script", path, "err", err, "output", string(out))
	default:
		e.log.Info("event script ran", "script", path, "output", string(out))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
