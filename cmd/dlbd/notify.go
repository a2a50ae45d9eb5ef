package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/dlbproject/dlb/pkg/client"
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
