package main

import (
	"errors"
	"net/netip"

	"github.com/dlbproject/dlb/pkg/datapath"
	"github.com/dlbproject/dlb/pkg/netif"
)

// hostGuard is the engine's Guard: the guard program (package datapath)
// attached to the executor's interface with netlink (package netif).
type hostGuard struct {
	g   *datapath.Guard
	nif *netif.Netif
	// on is the interface the guard was last attached to.
	on string
}

// Guard implements dispatcher.Guard.
func (h *hostGuard) Guard(ifname string, addrs []netip.Addr) error {
	if err := h.g.Set(addrs); err != nil {
		return err
	}
	if len(addrs) == 0 {
		// Also an earlier dlbd's filter, which still guards what that
		// one configured.
		var errs []error
		for _, name := range []string{h.on, ifname} {
			if name != "" {
				errs = append(errs, h.nif.DetachGuard(name))
			}
		}
		h.on = ""
		return errors.Join(errs...)
	}
	if h.on != "" && h.on != ifname {
		_ = h.nif.DetachGuard(h.on)
	}
	if err := h.nif.AttachGuard(ifname, h.g.FD()); err != nil {
		return err
	}
	h.on = ifname
	return nil
}
