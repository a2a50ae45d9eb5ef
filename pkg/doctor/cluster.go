package doctor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/dlbproject/dlb/pkg/ndframe"
)

// ClusterProbe is what ProbeCluster saw.
type ClusterProbe struct {
	// ServerMAC is the server's Ethernet address; nil when it did not
	// answer ARP (and no SYN was sent).
	ServerMAC net.HardwareAddr
	// Answer is "synack", "rst" or "" (nothing within the timeout).
	Answer string
	// From is the address the answer came from.
	From netip.Addr
	// Took is the time from the first ARP request (or neighbour
	// solicitation) to the answer.
	Took time.Duration
}

// ProbeCluster probes a server as a client reaches it through MAC
// forwarding: from src, on the interface that holds it (the NFA is on the
// executor's), it asks for the server's MAC and sends a SYN to vip:port at
// that MAC, as the executor forwards a client's. A server that holds the
// cluster address on its loopback and listens on it answers with a
// SYN-ACK from vip (the connection is then reset); one that lost the
// address drops the frame. IPv4 (the MAC asked by ARP) or IPv6 (by a
// neighbour solicitation), all three addresses of one family. Its errors
// are this host's: the source on no interface, no packet socket
// (CAP_NET_RAW), an interface without an Ethernet address.
func ProbeCluster(ctx context.Context, src, vip netip.Addr, port uint16, server netip.Addr, timeout time.Duration) (ClusterProbe, error) {
	src, vip, server = src.Unmap(), vip.Unmap(), server.Unmap()
	ifname, err := interfaceOf(src)
	if err != nil {
		return ClusterProbe{}, err
	}
	p := Params{Interface: ifname, Source: src, VIP: vip, Port: port, Server: server, Timeout: timeout}
	if err := p.Validate(); err != nil {
		return ClusterProbe{}, err
	}
	if p.Timeout <= 0 {
		p.Timeout = time.Second
	}
	l, err := openLink(ifname, port)
	if err != nil {
		return ClusterProbe{}, err
	}
	defer l.Close()
	start := time.Now()
	var out ClusterProbe
	if out.ServerMAC, err = questionFor(vip).server(ctx, l, p); err != nil || out.ServerMAC == nil {
		return out, err
	}
	r, err := synProbe(ctx, l, p, p.Source, p.VIP, out.ServerMAC, netip.Addr{})
	if err != nil {
		return out, fmt.Errorf("probing %v: %w", p.VIP, err)
	}
	out.Answer, out.From, out.Took = r.kind, r.from, time.Since(start)
	return out, nil
}

// interfaceOf returns the name of the interface that holds addr.
func interfaceOf(addr netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("listing interfaces: %w", err)
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue // gone since the listing
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return ifi.Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("the source address %v is on no interface: %w", addr, syscall.EADDRNOTAVAIL)
}

// ndpAnswerers sends, on l from src, a neighbour solicitation for each
// IPv6 address of addrs, and returns per address the distinct Ethernet
// addresses that advertised it within wait, l's own excepted.
func ndpAnswerers(ctx context.Context, l link, src netip.Addr, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	mac := l.MAC()
	asked := map[netip.Addr]bool{}
	for _, a := range addrs {
		if !a.Is6() || a.Is4In6() || asked[a] {
			continue
		}
		asked[a] = true
		if err := l.Send(ndframe.Solicitation(mac, src, a)); err != nil {
			return nil, err
		}
	}
	out := map[netip.Addr][]net.HardwareAddr{}
	err := receive(ctx, l, time.Now().Add(wait), func(f []byte) bool {
		if target, from, ok := parseNA(f); ok && asked[target] && from.String() != mac.String() {
			addAnswerer(out, target, from)
		}
		return false
	})
	return out, err
}

// ndpServer is arpServer for an IPv6 server: it solicits the server's
// address, up to three times within p.Timeout, and returns the MAC that
// advertised it (nil: none).
func ndpServer(ctx context.Context, l link, p Params) (net.HardwareAddr, error) {
	req := ndframe.Solicitation(l.MAC(), p.Source, p.Server)
	var serverMAC net.HardwareAddr
	for try := 0; try < 3 && serverMAC == nil; try++ {
		if err := l.Send(req); err != nil {
			return nil, err
		}
		err := receive(ctx, l, time.Now().Add(p.Timeout/3), func(f []byte) bool {
			if target, from, ok := parseNA(f); ok && target == p.Server {
				serverMAC = from
				return true
			}
			return false
		})
		if err != nil {
			return nil, err
		}
	}
	return serverMAC, nil
}

// AddressAnswerers asks, from src on the interface that holds it, who
// answers for each of addrs of src's family (one question each, all at
// once): ARP requests from an IPv4 src, neighbour solicitations to the
// solicited-node groups from an IPv6 one; addresses of the other family
// are skipped. It returns per address the Ethernet addresses of the hosts
// that answered within wait, this interface's own excepted: for an address
// this host holds, any answer is a conflict (a server holding a cluster
// address on its loopback without arp_ignore, another host configured
// with it; for IPv6 only the latter: Linux answers solicitations only for
// the receiving interface's addresses).
func AddressAnswerers(ctx context.Context, src netip.Addr, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	src = src.Unmap()
	q := questionFor(src)
	ifname, err := interfaceOf(src)
	if err != nil {
		return nil, err
	}
	l, err := openLink(ifname, 0)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	out, err := q.answerers(ctx, l, src, addrs, wait)
	if err != nil {
		return nil, fmt.Errorf("asking who answers %s on %s: %w", q.name, ifname, err)
	}
	return out, nil
}

// arpAnswerers sends, on l from src, an ARP request for each IPv4
// address of addrs, and returns per address the distinct Ethernet
// addresses that answered within wait, l's own excepted.
func arpAnswerers(ctx context.Context, l link, src netip.Addr, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	mac := l.MAC()
	asked := map[netip.Addr]bool{}
	for _, a := range addrs {
		if a = a.Unmap(); !a.Is4() || asked[a] {
			continue
		}
		asked[a] = true
		if err := l.Send(arpFrame(arpRequest, broadcast, mac, mac, src, nil, a)); err != nil {
			return nil, err
		}
	}
	out := map[netip.Addr][]net.HardwareAddr{}
	err := receive(ctx, l, time.Now().Add(wait), func(f []byte) bool {
		if a, ok := parseARP(f); ok && a.op == arpReply && asked[a.senderIP] && a.senderMAC.String() != mac.String() {
			addAnswerer(out, a.senderIP, a.senderMAC)
		}
		return false
	})
	return out, err
}

// addAnswerer adds mac to a's answerers in out, once.
func addAnswerer(out map[netip.Addr][]net.HardwareAddr, a netip.Addr, mac net.HardwareAddr) {
	if !slices.ContainsFunc(out[a], func(m net.HardwareAddr) bool { return m.String() == mac.String() }) {
		out[a] = append(out[a], mac)
	}
}

// question is how the probes find who holds an address on the link: ARP
// for IPv4, neighbour solicitations for IPv6.
type question struct {
	name string // "ARP" or "neighbour solicitations", for messages
	// server finds the server's MAC (nil: no answer); answerers who
	// answers for each of addrs.
	server    func(ctx context.Context, l link, p Params) (net.HardwareAddr, error)
	answerers func(ctx context.Context, l link, src netip.Addr, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error)
}

// questionFor is the question for a's family.
func questionFor(a netip.Addr) question {
	if a.Unmap().Is4() {
		return question{name: "ARP", server: arpServer, answerers: arpAnswerers}
	}
	return question{name: "neighbour solicitations", server: ndpServer, answerers: ndpAnswerers}
}
