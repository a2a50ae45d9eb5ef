package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/dispatcher"
)

// readyCheck is how dlbd decides it is ready: the admin API answers an
// executor report through the engine's management loop (so the state was
// loaded and the executor restored, or its failure recorded).
type readyCheck func(ctx context.Context) error

// apiReady asks the API on socket for the executor report.
func apiReady(socket string) readyCheck {
	cl := client.New(socket)
	return func(ctx context.Context) error {
		_, err := cl.Executor(ctx)
		return err
	}
}

// engineAnswers asks the engine itself for a status with the executor's
// counters and the high-availability function's: it answers when its
// management loop runs, the executor's maps can be read and the HA
// function (which sends the heartbeats) is not stuck. It does not go
// through the socket's path, which another process may have taken over.
func engineAnswers(e *dispatcher.Engine) readyCheck {
	return func(ctx context.Context) error {
		_, err := e.Status(ctx, dispatcher.Query{Counters: true, HA: true})
		return err
	}
}

// notifyReady waits until check passes, then tells the service manager
// READY=1 with a status line. It gives up when ctx ends or after timeout;
// systemd then fails the start (TimeoutStartSec), which is what a dlbd
// whose API never answers deserves.
func notifyReady(ctx context.Context, check readyCheck, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the admin API did not answer within %v: %w", timeout, errors.Join(last, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := daemon.SdNotify(false, "READY=1\nSTATUS=serving the admin API"); err != nil {
		return fmt.Errorf("sending READY=1 to the service manager: %w", err)
	}
	log.Debug("ready: the admin API answers")
	return nil
}

// watchdogLimit is how long systemd's watchdog (WatchdogSec= in the unit)
// waits for WATCHDOG=1, or 0 when the service manager did not ask for it
// ($WATCHDOG_USEC unset, or $WATCHDOG_PID naming another process). It takes
// both variables out of the environment, so that event scripts do not
// inherit them; call it before anything starts a process.
func watchdogLimit(log *slog.Logger) time.Duration {
	limit, err := daemon.SdWatchdogEnabled(true)
	if err != nil {
		log.Error("systemd's watchdog is asked for but cannot be fed", "err", err)
		return 0
	}
	return limit
}

// busyFunc says what operation long by nature (loading the executor's
// tables) the management loop is in, and for how long (dispatcher.Engine.Busy).
type busyFunc func() (what string, forHowLong time.Duration, busy bool)

// longPatience is how long the watchdog is fed while the management loop
// is in an operation long by nature and does not answer. Loading the
// executor with two tables of 16 Mi entries took 4.4 and 12.5 s on a 2-CPU
// host; the largest tables dlbd accepts are four times that. Ten minutes
// is stuck.
const longPatience = 10 * time.Minute

// watchdog sends WATCHDOG=1 every period, but only after check passed
// within half of it (a live loop answers in milliseconds), or while busy
// says the management loop is in an operation long by nature (for at most
// longPatience). A dlbd whose management loop hangs (a bug, a blocked
// call) stops feeding the watchdog, and systemd kills and restarts it
// (WatchdogSignal=SIGQUIT: the Go runtime writes every goroutine's stack
// to the journal first). The executor stays pinned and forwards all
// along; what the restart mends is what the hung dlbd no longer did:
// advisors, weights, heartbeats, the admin API. A check still running
// after half a period counts as failed (but for one more period when it
// was asked during a long operation that has just ended: its answer comes
// behind that work), and no other one starts beside it. WATCHDOG=1 goes
// out at most 1.5 periods apart while dlbd answers or is busy. It returns
// when ctx ends.
func watchdog(ctx context.Context, check readyCheck, busy busyFunc, period time.Duration, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	var pending chan error // the check running, if any
	// askedBusy is the long operation the loop was in when the check
	// running was asked, until it has been excused once: its answer
	// comes behind the end of that work, which may be after its wait.
	var askedBusy string
	state := "answers" // "answers", "failing", or the long operation that excuses the loop
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if pending == nil {
			askedBusy = ""
			if what, long, busy := busy(); busy && long < longPatience {
				askedBusy = what
			}
			pending = make(chan error, 1)
			go func(res chan<- error) {
				cctx, cancel := context.WithTimeout(ctx, period/2)
				defer cancel()
				res <- check(cctx)
			}(pending)
		}
		var err error
		select {
		case err = <-pending:
			pending = nil
		case <-time.After(period / 2):
			err = fmt.Errorf("no answer within %v", period/2)
		case <-ctx.Done():
			return
		}
		was := state
		switch what, long, busy := busy(); {
		case err == nil:
			state = "answers"
		case busy && long < longPatience:
			state = what
		case askedBusy != "":
			// Asked during a long operation that has just ended: one
			// more period for the answer, not more.
			state, askedBusy = askedBusy, ""
		default:
			state = "failing"
		}
		if state != was {
			switch state {
			case "failing":
				log.Error("not feeding systemd's watchdog: dlbd's management loop does not answer", "err", err)
			case "answers":
				log.Info("feeding systemd's watchdog again: dlbd's management loop answers")
			default:
				log.Info("dlbd's management loop is busy; feeding systemd's watchdog while it works", "operation", state,
					"patience", longPatience)
			}
		}
		if state == "failing" {
			continue
		}
		if _, err := daemon.SdNotify(false, daemon.SdNotifyWatchdog); err != nil {
			log.Error("feeding systemd's watchdog", "err", err)
		}
	}
}
