package dispatcher

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Guard keeps the host silent for the cluster and return addresses on
// the executor's interface: TCP and UDP to them that the executor did not
// take (it is detached, or not yet attached) are dropped rather than
// answered by the host's stack with resets, which would break the
// connections a standby is about to take over. cmd/dlbd fills it with a
// tc program (package datapath) that package netif attaches.
type Guard interface {
	// Guard makes the guarded addresses of ifname exactly addrs (none:
	// the guard leaves the interface).
	Guard(ifname string, addrs []netip.Addr) error
}

// guardLingerer is a Guard that can go on guarding, for a while, an
// interface the executor left (cmd/dlbd's can).
type guardLingerer interface {
	// Linger keeps the guard on ifname, besides the interface it guards,
	// for d.
	Linger(ifname string, d time.Duration)
}

// guardLinger is how long the guard stays on an interface the executor
// moved away from: until the announcements from the new one are done
// (announceAfter) and a little more. Meanwhile the segment's hosts and
// routers may still send there, and the host would reset what they send
// (the addresses are the host's, on the new interface); dropped, it is
// sent again, to the new interface.
func guardLinger() time.Duration {
	return announceAfter[len(announceAfter)-1] + 2*time.Second
}

// guardAddresses tells the guard what the engine configured on the
// executor's interface, when that changed: the addresses, or the
// interface itself (one deleted and created again under the same name
// took the guard with it).
func (e *Engine) guardAddresses(cfg lb.Config) error {
	if e.opts.Guard == nil {
		return nil
	}
	ifname := cfg.Executor.Interface
	var addrs []netip.Addr
	for a, on := range e.host.configured {
		if on == ifname {
			addrs = append(addrs, a)
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var b strings.Builder
	fmt.Fprintf(&b, "%s#%d", ifname, e.exec.attach.ifindex)
	for _, a := range addrs {
		b.WriteString(" " + a.String())
	}
	key := b.String()
	if key == e.guarded {
		return nil
	}
	if err := e.opts.Guard.Guard(ifname, addrs); err != nil {
		return fmt.Errorf("guarding the addresses: %w", err)
	}
	e.guarded = key
	return nil
}
