package lb

import (
	"fmt"
	"net"
	"net/netip"
)

// NetEventKind says what changed in the host's networking.
type NetEventKind uint8

// Kinds of NetEvent.
const (
	// NetLinkAdded: an interface appeared (Ifindex, Ifname).
	NetLinkAdded NetEventKind = iota + 1
	// NetLinkRemoved: an interface disappeared (Ifindex, Ifname).
	NetLinkRemoved
	// NetLinkUp and NetLinkDown: an interface was set administratively
	// up or down.
	NetLinkUp
	NetLinkDown
	// NetAddressAdded and NetAddressRemoved: an address (Prefix) was put
	// on or taken off an interface.
	NetAddressAdded
	NetAddressRemoved
	// NetNeighborChanged: the MAC address of a neighbour (Addr) on an
	// interface changed; MAC is the new one, nil when the neighbour no
	// longer has a usable one (its entry failed or was deleted).
	NetNeighborChanged
	// NetResync: the watch lost events (the kernel's buffer overflowed)
	// and re-read the state; the events that follow it describe the
	// differences. A consumer that keeps its own state may re-read it
	// instead.
	NetResync
	// NetRouteChanged: routes were added, replaced or removed, in any
	// routing table; one event for many (which, it does not say).
	NetRouteChanged
	// NetLinkMACChanged: an interface's own MAC changed; MAC is the new
	// one, OldMAC the old.
	NetLinkMACChanged
)

var netEventNames = [...]string{"", "link added", "link removed", "link up", "link down",
	"address added", "address removed", "neighbour changed", "resync", "routes changed", "link MAC changed"}

// String names the kind ("link added").
func (k NetEventKind) String() string {
	if int(k) < len(netEventNames) && k != 0 {
		return netEventNames[k]
	}
	return fmt.Sprintf("NetEventKind(%d)", uint8(k))
}

// NetEvent is a change of the host's interfaces, addresses or neighbours.
type NetEvent struct {
	Kind NetEventKind
	// Ifindex and Ifname name the interface (Ifname may be empty for an
	// interface that is gone before its name was known).
	Ifindex int
	Ifname  string
	// Prefix is the address of address events, with its prefix length.
	Prefix netip.Prefix
	// Addr and MAC are the neighbour and its MAC of neighbour events;
	// OldMAC is the MAC it had before (nil: none usable). A link MAC
	// event has the interface's new and old MAC.
	Addr   netip.Addr
	MAC    net.HardwareAddr
	OldMAC net.HardwareAddr
}

// String describes the event for logs: "link up dlb0 (3)", "neighbour
// changed 198.18.0.9 on 3: 02:00:00:00:00:09".
func (e NetEvent) String() string {
	switch e.Kind {
	case NetAddressAdded, NetAddressRemoved:
		return fmt.Sprintf("%s %s on %s (%d)", e.Kind, e.Prefix, e.Ifname, e.Ifindex)
	case NetNeighborChanged:
		mac := "none"
		if e.MAC != nil {
			mac = e.MAC.String()
		}
		return fmt.Sprintf("%s %s on %d: %s", e.Kind, e.Addr, e.Ifindex, mac)
	case NetResync, NetRouteChanged:
		return e.Kind.String()
	case NetLinkMACChanged:
		return fmt.Sprintf("%s %s (%d): %s, was %s", e.Kind, e.Ifname, e.Ifindex, e.MAC, e.OldMAC)
	}
	return fmt.Sprintf("%s %s (%d)", e.Kind, e.Ifname, e.Ifindex)
}
