// Package doctor checks, from the dispatcher, that a backend server is
// ready for direct server return ("dlbctl server check"): that it answers
// ARP for its own address but not for the cluster address, that it accepts
// a connection to the cluster address when the frame is sent to its MAC
// (a real SYN, as the executor forwards it), that the reply comes from the
// cluster address, that its MTU takes the frames the dispatcher forwards,
// and, given a client address, that its reverse-path filter does not drop
// clients' packets.
//
// The probes are raw frames on the executor's interface (a packet socket:
// CAP_NET_RAW), which is why dlbd runs them and dlbctl only asks for them.
// IPv6 servers are checked from the IPv6 NFA, with neighbour solicitations
// for ARP; the reverse-path check is IPv4's (IPv6 has no rp_filter).
package doctor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Check results.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip"
)

// Names of the checks, in the order they run.
const (
	CheckARPServer   = "arp-server"
	CheckARPCluster  = "arp-cluster"
	CheckAccept      = "accept"
	CheckReplySource = "reply-source"
	CheckMTU         = "mtu"
	CheckRPFilter    = "rp-filter"
)

// Params say which server to check, and from where.
type Params struct {
	// Interface is the executor's interface; Source the dispatcher's
	// address on it (its NFA), the probes' source.
	Interface string
	Source    netip.Addr
	// VIP, Port and Server are the cluster address, the port and the
	// server to check.
	VIP    netip.Addr
	Port   uint16
	Server netip.Addr
	// Client, when valid, is a client address to probe from as well: a
	// reply to it shows that the server's reverse-path filter lets
	// clients' packets in.
	Client netip.Addr
	// Timeout bounds each probe (default 1 s).
	Timeout time.Duration
}

// Check is one check's outcome.
type Check struct {
	Name   string
	Result string // Pass, Fail or Skip
	// Detail says what was seen; Fix, for a failure, what to do.
	Detail string
	Fix    string
}

// Report is the outcome of all checks.
type Report struct {
	Interface string
	Source    netip.Addr
	ServerMAC net.HardwareAddr // nil when the server did not answer ARP
	Checks    []Check
}

// OK says that no check failed.
func (r Report) OK() bool {
	return !slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Result == Fail })
}

// link is what the probes need of a packet socket.
type link interface {
	MAC() net.HardwareAddr
	MTU() int
	Send(frame []byte) error
	// Recv returns the next frame, or errTimeout at deadline.
	Recv(deadline time.Time) ([]byte, error)
	Close() error
}

var errTimeout = errors.New("timed out")

// Validate checks p without touching the network.
func (p Params) Validate() error {
	switch {
	case p.Interface == "":
		return errors.New("no interface: start the executor on one (dlbctl executor start --interface IF)")
	case !p.Source.IsValid():
		return errors.New("no source address: set the dispatcher's NFA (dlbctl executor set nfa ADDR)")
	case !p.VIP.IsValid() || !p.Server.IsValid():
		return errors.New("want VIP@PORT@SERVER with addresses")
	case p.Port == 0:
		return errors.New("port 0: want VIP@PORT@SERVER with a port from 1 to 65535")
	}
	v4 := p.VIP.Unmap().Is4()
	for _, a := range []struct {
		name string
		a    netip.Addr
	}{{"source (NFA)", p.Source}, {"server", p.Server}, {"client", p.Client}} {
		if a.a.IsValid() && a.a.Unmap().Is4() != v4 {
			return fmt.Errorf("%s %v and the cluster address %v are not of one family", a.name, a.a, p.VIP)
		}
	}
	if p.VIP == p.Server {
		return fmt.Errorf("the server %v is the cluster address", p.Server)
	}
	return nil
}

// synResult is what answered a SYN.
type synResult struct {
	kind    string // "synack", "rst" or "" (nothing)
	from    netip.Addr
	fromMAC net.HardwareAddr
	mss     uint16
}

// observations are what the probes saw.
type observations struct {
	ifMTU        int
	serverMAC    net.HardwareAddr
	vipAnswerers []net.HardwareAddr
	viaVIP       synResult
	viaServer    synResult
	client       synResult
	clientProbed bool
	// clientHolders answered ARP for the client address, on the link:
	// the server's reply goes to them, out of the probes' sight.
	clientHolders []net.HardwareAddr
}

// Run checks the server.
func Run(ctx context.Context, p Params) (Report, error) {
	if err := p.Validate(); err != nil {
		return Report{}, err
	}
	p.Source, p.VIP, p.Server, p.Client = p.Source.Unmap(), p.VIP.Unmap(), p.Server.Unmap(), p.Client.Unmap()
	if p.Timeout <= 0 {
		p.Timeout = time.Second
	}
	l, err := openLink(p.Interface, p.Port)
	if err != nil {
		return Report{}, err
	}
	defer l.Close()
	obs, err := probe(ctx, l, p)
	if err != nil {
		return Report{}, err
	}
	return Report{Interface: p.Interface, Source: p.Source, ServerMAC: obs.serverMAC, Checks: evaluate(p, obs)}, nil
}

// probe sends the probes and records the answers.
func probe(ctx context.Context, l link, p Params) (observations, error) {
	obs := observations{ifMTU: l.MTU()}

	var err error
	q := questionFor(p.VIP)
	if obs.serverMAC, err = q.server(ctx, l, p); err != nil {
		return obs, err
	}
	// ARP (neighbour solicitations) for the cluster address: nobody but
	// the dispatcher may answer.
	answers, err := q.answerers(ctx, l, p.Source, []netip.Addr{p.VIP}, p.Timeout/2)
	if err != nil {
		return obs, err
	}
	obs.vipAnswerers = answers[p.VIP]
	if obs.serverMAC == nil {
		return obs, nil
	}
	// SYNs at the server's MAC: to the cluster address (as the executor
	// forwards a client's), to the server's own address, and from the
	// client address if one was given.
	if obs.viaVIP, err = synProbe(ctx, l, p, p.Source, p.VIP, obs.serverMAC, netip.Addr{}); err != nil {
		return obs, err
	}
	if obs.viaServer, err = synProbe(ctx, l, p, p.Source, p.Server, obs.serverMAC, netip.Addr{}); err != nil {
		return obs, err
	}
	if p.Client.IsValid() && p.Client.Is4() {
		if onLink(p.Interface, p.Client) {
			// A host that holds the client address gets the server's
			// reply, which the probe would then miss.
			held, err := q.answerers(ctx, l, p.Source, []netip.Addr{p.Client}, p.Timeout/2)
			if err != nil {
				return obs, err
			}
			obs.clientHolders = held[p.Client]
		}
		if len(obs.clientHolders) == 0 {
			obs.clientProbed = true
			if obs.client, err = synProbe(ctx, l, p, p.Client, p.VIP, obs.serverMAC, p.Client); err != nil {
				return obs, err
			}
		}
	}
	return obs, nil
}

// onLink says whether addr is in a network of the interface's addresses.
func onLink(ifname string, addr netip.Addr) bool {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return false
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, ok := netip.AddrFromSlice(n.IP)
			ones, _ := n.Mask.Size()
			if ok && netip.PrefixFrom(ip.Unmap(), ones).Masked().Contains(addr) {
				return true
			}
		}
	}
	return false
}

// arpServer asks for the server's MAC, up to three times within
// p.Timeout, and returns it (nil: no answer).
func arpServer(ctx context.Context, l link, p Params) (net.HardwareAddr, error) {
	mac := l.MAC()
	req := arpFrame(arpRequest, broadcast, mac, mac, p.Source, nil, p.Server)
	var serverMAC net.HardwareAddr
	for try := 0; try < 3 && serverMAC == nil; try++ {
		if err := l.Send(req); err != nil {
			return nil, err
		}
		err := receive(ctx, l, time.Now().Add(p.Timeout/3), func(f []byte) bool {
			a, ok := parseARP(f)
			if ok && a.op == arpReply && a.senderIP == p.Server {
				serverMAC = a.senderMAC
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

// synProbe sends a SYN from src to dst:Port at the server's MAC (twice,
// if the first goes unanswered) and returns the answer; it resets a
// connection the server accepted. While it waits it answers ARP requests
// for answerFor (the client address, which no host on the link may hold).
func synProbe(ctx context.Context, l link, p Params, src, dst netip.Addr, serverMAC net.HardwareAddr, answerFor netip.Addr) (synResult, error) {
	mac := l.MAC()
	sport := uint16(32768 + rand.IntN(28000))
	seq := rand.Uint32()
	syn := tcpFrame(tcpSegment{dstMAC: serverMAC, srcMAC: mac, src: src, dst: dst, srcPort: sport, dstPort: p.Port,
		seq: seq, flags: tcpSYN, mss: 1460})
	var r synResult
	var reply tcpSegment
	for try := 0; try < 2 && r.kind == ""; try++ {
		if err := l.Send(syn); err != nil {
			return r, err
		}
		err := receive(ctx, l, time.Now().Add(p.Timeout/2), func(f []byte) bool {
			if a, ok := parseARP(f); ok {
				// The server asks for the client address from whichever
				// interface its route to it takes, with whichever source
				// address arp_announce picks: answer every request for it
				// while the probe lasts.
				if answerFor.IsValid() && a.op == arpRequest && a.targetIP == answerFor {
					_ = l.Send(arpFrame(arpReply, a.senderMAC, mac, mac, answerFor, a.senderMAC, a.senderIP))
				}
				return false
			}
			s, ok := parseTCP(f)
			if !ok || s.dst != src || s.dstPort != sport || s.srcPort != p.Port {
				return false
			}
			switch {
			case s.flags&(tcpSYN|tcpACK) == tcpSYN|tcpACK && s.ack == seq+1:
				r.kind = "synack"
			case s.flags&tcpRST != 0:
				r.kind = "rst"
			default:
				return false
			}
			r.from, r.fromMAC, r.mss, reply = s.src, s.srcMAC, s.mss, s
			return true
		})
		if err != nil {
			return r, err
		}
	}
	if r.kind == "synack" {
		// Leave no half-open connection behind.
		_ = l.Send(tcpFrame(tcpSegment{dstMAC: serverMAC, srcMAC: mac, src: src, dst: reply.src, srcPort: sport, dstPort: p.Port,
			seq: seq + 1, flags: tcpRST}))
	}
	return r, nil
}

// receive hands frames to f until f returns true, the deadline passes or
// ctx ends.
func receive(ctx context.Context, l link, deadline time.Time, f func([]byte) bool) error {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		frame, err := l.Recv(deadline)
		if errors.Is(err, errTimeout) {
			return nil
		}
		if err != nil {
			return err
		}
		if f(frame) {
			return nil
		}
	}
}

// evaluate turns what the probes saw into checks, each with its fix.
func evaluate(p Params, o observations) []Check {
	vipPort := netip.AddrPortFrom(p.VIP, p.Port).String()
	setup := fmt.Sprintf("on %v: dlbctl backend setup %v --interface IF (IF: its interface on this link)", p.Server, p.VIP)
	v6 := p.VIP.Is6()
	// asked is what finds a MAC; headers the IP and TCP headers an MSS
	// leaves out of the MTU.
	asked, headers := questionFor(p.VIP).name, 40
	if v6 {
		headers = 60
	}
	var cs []Check
	if o.serverMAC == nil {
		cs = append(cs, Check{Name: CheckARPServer, Result: Fail,
			Detail: fmt.Sprintf("%v did not answer %s on %s within %v", p.Server, asked, p.Interface, p.Timeout),
			Fix:    fmt.Sprintf("the dispatcher forwards to servers on its own link only: put %v on %s's network (check its address, cable and VLAN) and up", p.Server, p.Interface)})
	} else {
		cs = append(cs, Check{Name: CheckARPServer, Result: Pass, Detail: fmt.Sprintf("%v is at %v on %s", p.Server, o.serverMAC, p.Interface)})
	}

	var server, others []string
	for _, m := range o.vipAnswerers {
		if o.serverMAC != nil && m.String() == o.serverMAC.String() {
			server = append(server, m.String())
		} else {
			others = append(others, m.String())
		}
	}
	fix := setup + " (sets net.ipv4.conf.all.arp_ignore=1 and arp_announce=2)"
	if v6 {
		fix = fmt.Sprintf("on %v: take %v off its interface; %s puts it on lo, which is not answered for", p.Server, p.VIP, setup)
	}
	switch {
	case len(server) > 0:
		cs = append(cs, Check{Name: CheckARPCluster, Result: Fail,
			Detail: fmt.Sprintf("%v answers %s for the cluster address %v: clients' traffic would go to it instead of the dispatcher", p.Server, asked, p.VIP),
			Fix:    fix})
	case len(others) > 0:
		cs = append(cs, Check{Name: CheckARPCluster, Result: Pass,
			Detail: fmt.Sprintf("%v does not answer %s for %v, but %s do(es): check those hosts", p.Server, asked, p.VIP, strings.Join(others, ", "))})
	default:
		cs = append(cs, Check{Name: CheckARPCluster, Result: Pass, Detail: fmt.Sprintf("%v does not answer %s for %v", p.Server, asked, p.VIP)})
	}

	if o.serverMAC == nil {
		for _, n := range []string{CheckAccept, CheckReplySource, CheckMTU, CheckRPFilter} {
			cs = append(cs, Check{Name: n, Result: Skip, Detail: fmt.Sprintf("needs the server's MAC address (%s failed)", asked)})
		}
		return cs
	}
	switch o.viaVIP.kind {
	case "synack":
		cs = append(cs, Check{Name: CheckAccept, Result: Pass,
			Detail: fmt.Sprintf("%v accepted a connection to %s sent to its MAC %v", p.Server, vipPort, o.serverMAC)})
	case "rst":
		d := fmt.Sprintf("%v refused a connection to %s (RST): it holds %v but nothing listens on %s", p.Server, vipPort, p.VIP, vipPort)
		if o.viaServer.kind == "synack" {
			d += fmt.Sprintf("; the service listens on %s only", netip.AddrPortFrom(p.Server, p.Port))
		}
		cs = append(cs, Check{Name: CheckAccept, Result: Fail, Detail: d,
			Fix: fmt.Sprintf("bind the service on %v to %s or to every address (0.0.0.0:%d)", p.Server, vipPort, p.Port)})
	default:
		fix := fmt.Sprintf("%s to put %v on its lo; if it is there, check its firewall, and that its rp_filter does not drop packets from %v",
			setup, p.VIP, p.Source)
		if v6 {
			fix = fmt.Sprintf("%s to put %v on its lo; if it is there, check its firewall", setup, p.VIP)
		}
		cs = append(cs, Check{Name: CheckAccept, Result: Fail,
			Detail: fmt.Sprintf("%v did not answer a SYN to %s sent to its MAC %v within %v", p.Server, vipPort, o.serverMAC, p.Timeout),
			Fix:    fix})
	}
	switch {
	case o.viaVIP.kind == "":
		cs = append(cs, Check{Name: CheckReplySource, Result: Skip, Detail: "no reply to check"})
	case o.viaVIP.from == p.VIP && o.viaVIP.fromMAC.String() == o.serverMAC.String():
		cs = append(cs, Check{Name: CheckReplySource, Result: Pass, Detail: fmt.Sprintf("the reply came from %v (MAC %v)", p.VIP, o.serverMAC)})
	default:
		cs = append(cs, Check{Name: CheckReplySource, Result: Fail,
			Detail: fmt.Sprintf("the reply came from %v (MAC %v), not from %v at %v: clients would drop it", o.viaVIP.from, o.viaVIP.fromMAC, p.VIP, o.serverMAC),
			Fix:    fmt.Sprintf("on %v, replies must leave from %v: no SNAT or masquerading of the service's traffic", p.Server, p.VIP)})
	}
	switch {
	case o.viaVIP.kind != "synack" || o.viaVIP.mss == 0:
		cs = append(cs, Check{Name: CheckMTU, Result: Skip, Detail: "needs a SYN-ACK with an MSS"})
	case int(o.viaVIP.mss)+headers < o.ifMTU:
		cs = append(cs, Check{Name: CheckMTU, Result: Fail,
			Detail: fmt.Sprintf("%v advertises MSS %d (MTU %d) but %s's MTU is %d: full-size packets the dispatcher forwards to it are dropped",
				p.Server, o.viaVIP.mss, int(o.viaVIP.mss)+headers, p.Interface, o.ifMTU),
			Fix: fmt.Sprintf("set the MTU of %v's interface to %d (ip link set dev IF mtu %d), or lower %s's to %d", p.Server, o.ifMTU, o.ifMTU, p.Interface, int(o.viaVIP.mss)+headers)})
	default:
		cs = append(cs, Check{Name: CheckMTU, Result: Pass,
			Detail: fmt.Sprintf("%v advertises MSS %d: its MTU takes %s's %d-byte frames", p.Server, o.viaVIP.mss, p.Interface, o.ifMTU)})
	}
	switch {
	case v6:
		cs = append(cs, Check{Name: CheckRPFilter, Result: Skip,
			Detail: "IPv6 has no reverse-path filter setting (a firewall's rpfilter match is not checked)"})
	case len(o.clientHolders) > 0:
		cs = append(cs, Check{Name: CheckRPFilter, Result: Skip,
			Detail: fmt.Sprintf("the client address %v is held by %s on %s's link: the server answers it there, out of this dispatcher's sight "+
				"(--client takes an address no host holds, which the dispatcher answers ARP for while it probes, or one behind a router)",
				p.Client, macList(o.clientHolders), p.Interface)})
	case !o.clientProbed:
		cs = append(cs, Check{Name: CheckRPFilter, Result: Skip,
			Detail: "no client address given (--client ADDR: an address whose packets reach the server through this dispatcher)"})
	case o.viaVIP.kind == "":
		cs = append(cs, Check{Name: CheckRPFilter, Result: Skip, Detail: fmt.Sprintf("the server did not answer %v either", p.Source)})
	case o.client.kind != "":
		cs = append(cs, Check{Name: CheckRPFilter, Result: Pass,
			Detail: fmt.Sprintf("%v answered a SYN from the client address %v", p.Server, p.Client)})
	default:
		cs = append(cs, Check{Name: CheckRPFilter, Result: Fail,
			Detail: fmt.Sprintf("%v answered a SYN from %v but none from the client address %v: its reverse-path filter drops packets whose source it routes out of another interface "+
				"(if its route to %v leaves by another router or link, the reply cannot be seen from here and this check cannot tell)", p.Server, p.Source, p.Client, p.Client),
			Fix: fmt.Sprintf("on %v: sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.IF.rp_filter=2 (loose mode), or route %v back through IF", p.Server, p.Client)})
	}
	return cs
}

// macList names the hosts of MAC addresses: "the host 02:...", or "the
// hosts 02:..., 02:...".
func macList(macs []net.HardwareAddr) string {
	s := make([]string, len(macs))
	for i, m := range macs {
		s[i] = m.String()
	}
	if len(s) == 1 {
		return "the host " + s[0]
	}
	return "the hosts " + strings.Join(s, ", ")
}
