package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/smallfile"
)

// The configuration file (--config): read and checked before dlbd
// touches anything, applied once the saved state is restored, and applied
// again on SIGHUP. --check-config only reads and checks it.

// fileOptions check what the file's configuration names against what
// this dlbd has: the advisors.
var fileOptions = config.Options{KnownAdvisor: func(name string) error {
	_, err := advisors.New(name)
	return err
}}

// maxConfigFile bounds the configuration file dlbd reads.
const maxConfigFile = 256 << 20

// readConfigFile reads and checks a configuration file; its refusals
// name the file, the line and the field's path.
func readConfigFile(path string) (*config.File, error) {
	// A named pipe would stop dlbd's start, or every later reload, until
	// someone wrote to it; /dev/zero would never end.
	data, err := smallfile.Read(path, maxConfigFile)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration file: %w", err)
	}
	f, err := config.ReadFile(data, fileOptions)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// checkConfig is "dlbd --check-config FILE": it reads and checks the
// file, with every server's advisor request and response, says so on w,
// and touches nothing (no lock, no state, no executor, no socket). What
// depends on the host (an interface, a
// server's MAC address, the executor's capacity) is checked when the file
// is applied.
func checkConfig(path string, w io.Writer) error {
	f, err := readConfigFile(path)
	if err != nil {
		return err
	}
	// What an apply would refuse for a new server: a request or response
	// an advisor of its port could not use.
	if err := config.CheckRequests(f.Config, advisors.CheckRequest); err != nil {
		return fmt.Errorf("%s: %w", path, f.Place(err))
	}
	// What an apply to a dispatcher without them would refuse.
	if probs := config.HAAddressProblems(f.Config); len(probs) > 0 {
		return fmt.Errorf("%s: %w", path, f.Place(probs[0]))
	}
	ports, servers := 0, 0
	for _, cl := range f.Config.Clusters {
		ports += len(cl.Ports)
		for _, p := range cl.Ports {
			servers += len(p.Servers)
		}
	}
	_, err = fmt.Fprintf(w, "%s: configuration OK: %s, %s, %s, %s\n", path, counted(len(f.Config.Clusters), "cluster"),
		counted(ports, "port"), counted(servers, "server"), counted(len(f.Config.Advisors), "advisor"))
	return err
}

// counted is n and the noun that goes with it: "1 port", "2 ports".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// replacer is the engine as the configuration file needs it.
type replacer interface {
	Replace(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, error)
}

// configFile applies the configuration file to the engine.
type configFile struct {
	path string
	e    replacer
	log  *slog.Logger
}

// apply reads the file and makes the configuration equal to it as one
// change, logging each change; a file that cannot be read or is refused
// changes nothing, and the error says why (with the line).
func (c *configFile) apply(ctx context.Context, f *config.File) error {
	if f == nil {
		var err error
		if f, err = readConfigFile(c.path); err != nil {
			return err
		}
	}
	old, err := c.e.Replace(ctx, f.Config, false)
	if err != nil {
		return fmt.Errorf("%s: %w (nothing was changed)", c.path, f.Place(err))
	}
	steps := config.Plan(old, f.Config)
	for _, s := range steps {
		c.log.Info("configuration file: "+s.Kind.String(), "change", s.String())
	}
	c.log.Info("configuration file applied", "file", c.path, "changes", len(steps))
	return nil
}

// reloads applies the file each time a signal arrives on hup, until ctx
// ends. Without a file it says so and does nothing. A failed reload is
// logged and changes nothing. Each reload is announced to systemd
// (RELOADING=1, then READY=1 with its outcome as the status line), so
// that "systemctl status dlbd" shows it.
func (c *configFile) reloads(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if c.path == "" {
			c.log.Warn("SIGHUP: dlbd has no configuration file (--config): nothing to reload")
			continue
		}
		c.log.Info("SIGHUP: reloading the configuration file", "file", c.path)
		_, _ = daemon.SdNotify(false, "RELOADING=1\nMONOTONIC_USEC="+strconv.FormatInt(monotonicUsec(), 10))
		status := "configuration file reloaded"
		if err := c.apply(ctx, nil); err != nil {
			if errors.Is(err, context.Canceled) {
				return
			}
			c.log.Error("reloading the configuration file failed; the running configuration is unchanged", "err", err)
			status = "reloading the configuration file failed: " + err.Error()
		}
		_, _ = daemon.SdNotify(false, "READY=1\nSTATUS="+status)
	}
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, as systemd wants it
// with RELOADING=1.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano() / 1000
}
