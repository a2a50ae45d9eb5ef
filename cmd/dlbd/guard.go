package main

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/dlbproject/dlb/pkg/datapath"
	"github.com/dlbproject/dlb/pkg/netif"
)

// hostGuard is the engine's Guard: the guard program (package datapath)
// attached to the executor's interface with netlink (package netif).
type hostGuard struct {
	g   *datapath.Guard
	nif *netif.Netif
	// mu guards on and lingering (Linger's timers fire on their own
	// goroutines).
	mu sync.Mutex
	// on is the interface the guard was last attached to; lingering are
	// the interfaces the executor left that it still guards, until their
	// timers fire.
	on        string
	lingering map[string]*time.Timer
}

// Guard implements dispatcher.Guard.
func (h *hostGuard) Guard(ifname string, addrs []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.g.Set(addrs); err != nil {
		return err
	}
	if len(addrs) == 0 {
		// Also an earlier dlbd's filter, which still guards what that
		// one configured, and the interfaces left lingering.
		errs := []error{h.leaveLocked()}
		for _, name := range []string{h.on, ifname} {
			if name != "" {
				errs = append(errs, h.nif.DetachGuard(name))
			}
		}
		h.on = ""
		return errors.Join(errs...)
	}
	if h.on != "" && h.on != ifname && h.lingering[h.on] == nil {
		_ = h.nif.DetachGuard(h.on)
	}
	if err := h.nif.AttachGuard(ifname, h.g.FD()); err != nil {
		return err
	}
	h.on = ifname
	return nil
}

// Linger implements the dispatcher's guardLingerer: the guard stays on
// ifname, which the executor left, for d, and then leaves it (unless the
// executor is back on it).
func (h *hostGuard) Linger(ifname string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.lingering[ifname]; t != nil {
		t.Stop()
	}
	if h.lingering == nil {
		h.lingering = map[string]*time.Timer{}
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.lingering[ifname] != t {
			return // lingering again since, or the guard stopped
		}
		delete(h.lingering, ifname)
		if ifname != h.on {
			_ = h.nif.DetachGuard(ifname)
		}
	})
	h.lingering[ifname] = t
}

// leave takes the guard off the interfaces it lingers on, at dlbd's exit:
// their timers will not fire, and the filter would stay there (it stays
// on the executor's interface on purpose, guarding across a restart).
func (h *hostGuard) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.leaveLocked()
}

// leaveLocked is leave's work, h.mu held.
func (h *hostGuard) leaveLocked() error {
	var errs []error
	for name, t := range h.lingering {
		t.Stop()
		if name != h.on {
			errs = append(errs, h.nif.DetachGuard(name))
		}
	}
	h.lingering = nil
	return errors.Join(errs...)
}
