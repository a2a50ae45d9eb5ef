package doctor

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/ndframe"
)

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	macC = net.HardwareAddr{2, 0, 0, 0, 0, 3}
	nfa  = netip.MustParseAddr("198.18.0.2")
	vip  = netip.MustParseAddr("198.18.0.100")
	srv  = netip.MustParseAddr("198.18.0.21")
)

func TestTCPFrameRoundTrip(t *testing.T) {
	in := tcpSegment{dstMAC: macB, srcMAC: macA, src: nfa, dst: vip, srcPort: 40000, dstPort: 80, seq: 7, ack: 9, flags: tcpSYN | tcpACK, mss: 1460}
	f := tcpFrame(in)
	if checksum(f[14:34], 0) != 0 {
		t.Error("IPv4 header checksum does not verify")
	}
	// TCP checksum over the pseudo-header verifies to zero.
	ph := 6 + uint32(len(f)-34)
	for _, a := range []netip.Addr{nfa, vip} {
		b := a.As4()
		ph += uint32(b[0])<<8 | uint32(b[1])
		ph += uint32(b[2])<<8 | uint32(b[3])
	}
	if checksum(f[34:], ph) != 0 {
		t.Error("TCP checksum does not verify")
	}
	out, ok := parseTCP(f)
	if !ok {
		t.Fatal("parseTCP refused its own frame")
	}
	if out.src != in.src || out.dst != in.dst || out.srcPort != in.srcPort || out.dstPort != in.dstPort ||
		out.seq != in.seq || out.ack != in.ack || out.flags != in.flags || out.mss != in.mss || out.srcMAC.String() != macA.String() {
		t.Errorf("round trip: %+v -> %+v", in, out)
	}
}

func TestParseRefusesOtherFrames(t *testing.T) {
	arp := arpFrame(arpRequest, broadcast, macA, macA, nfa, nil, srv)
	if _, ok := parseTCP(arp); ok {
		t.Error("parseTCP took an ARP frame")
	}
	tcp := tcpFrame(tcpSegment{dstMAC: macB, srcMAC: macA, src: nfa, dst: vip, srcPort: 1, dstPort: 2, flags: tcpSYN})
	if _, ok := parseARP(tcp); ok {
		t.Error("parseARP took a TCP frame")
	}
	for n := 0; n < len(tcp); n++ {
		_, _ = parseTCP(tcp[:n]) // must not panic on any truncation
		_, _ = parseARP(arp[:min(n, len(arp))])
	}
	a, ok := parseARP(arp)
	if !ok || a.op != arpRequest || a.senderIP != nfa || a.targetIP != srv || a.senderMAC.String() != macA.String() {
		t.Errorf("ARP round trip: %+v", a)
	}
}

func TestValidate(t *testing.T) {
	good := Params{Interface: "eth0", Source: nfa, VIP: vip, Port: 80, Server: srv}
	for _, c := range []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"no interface", func(p *Params) { p.Interface = "" }, "executor start"},
		{"no source", func(p *Params) { p.Source = netip.Addr{} }, "executor set nfa"},
		{"port 0", func(p *Params) { p.Port = 0 }, "port 0"},
		{"IPv6 server", func(p *Params) { p.Server = netip.MustParseAddr("2001:2::21") }, "not of one family"},
		{"IPv6 client", func(p *Params) { p.Client = netip.MustParseAddr("2001:2::99") }, "not of one family"},
		{"IPv6 cluster, IPv4 source", func(p *Params) {
			p.VIP, p.Server = netip.MustParseAddr("2001:2::100"), netip.MustParseAddr("2001:2::21")
		}, "not of one family"},
		{"server is VIP", func(p *Params) { p.Server = vip }, "is the cluster address"},
	} {
		p := good
		c.edit(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
	good6 := Params{Interface: "eth0", Source: netip.MustParseAddr("2001:2::2"), VIP: netip.MustParseAddr("2001:2::100"), Port: 80,
		Server: netip.MustParseAddr("2001:2::21")}
	for _, p := range []Params{good, good6} {
		if err := p.Validate(); err != nil {
			t.Errorf("good params refused: %v", err)
		}
	}
}

func results(cs []Check) map[string]string {
	m := map[string]string{}
	for _, c := range cs {
		m[c.Name] = c.Result
		if c.Result == Fail && c.Fix == "" {
			m[c.Name] = "fail without a fix"
		}
	}
	return m
}

// TestEvaluate: each backend mistake fails the check that names it, with
// a fix, and passes the others.
func TestEvaluate(t *testing.T) {
	p := Params{Interface: "eth0", Source: nfa, VIP: vip, Port: 80, Server: srv, Client: netip.MustParseAddr("198.18.0.99"), Timeout: time.Second}
	synack := synResult{kind: "synack", from: vip, fromMAC: macB, mss: 1460}
	good := observations{ifMTU: 1500, serverMAC: macB, viaVIP: synack, viaServer: synResult{kind: "synack", from: srv, fromMAC: macB, mss: 1460}, client: synack, clientProbed: true}
	for _, c := range []struct {
		name string
		edit func(*observations)
		want map[string]string
		text string // in the failing check's detail
	}{
		{"prepared", func(*observations) {}, map[string]string{CheckARPServer: Pass, CheckARPCluster: Pass, CheckAccept: Pass, CheckReplySource: Pass, CheckMTU: Pass, CheckRPFilter: Pass}, ""},
		{"not on the link", func(o *observations) { o.serverMAC = nil },
			map[string]string{CheckARPServer: Fail, CheckARPCluster: Pass, CheckAccept: Skip, CheckReplySource: Skip, CheckMTU: Skip, CheckRPFilter: Skip}, "did not answer ARP"},
		{"arp_ignore 0", func(o *observations) { o.vipAnswerers = []net.HardwareAddr{macB} },
			map[string]string{CheckARPCluster: Fail, CheckAccept: Pass}, "answers ARP for the cluster address"},
		{"another host answers for the VIP", func(o *observations) { o.vipAnswerers = []net.HardwareAddr{macC} },
			map[string]string{CheckARPCluster: Pass}, ""},
		{"no alias", func(o *observations) { o.viaVIP, o.client = synResult{}, synResult{} },
			map[string]string{CheckAccept: Fail, CheckReplySource: Skip, CheckMTU: Skip, CheckRPFilter: Skip}, "did not answer a SYN"},
		{"bound to its own address", func(o *observations) { o.viaVIP = synResult{kind: "rst", from: vip, fromMAC: macB} },
			map[string]string{CheckAccept: Fail, CheckReplySource: Pass, CheckMTU: Skip}, "listens on 198.18.0.21:80 only"},
		{"reply from another address", func(o *observations) { o.viaVIP.from = srv },
			map[string]string{CheckAccept: Pass, CheckReplySource: Fail}, "not from 198.18.0.100"},
		{"small MTU", func(o *observations) { o.viaVIP.mss = 1360 },
			map[string]string{CheckMTU: Fail}, "MTU 1400"},
		{"rp_filter", func(o *observations) { o.client = synResult{} },
			map[string]string{CheckAccept: Pass, CheckRPFilter: Fail}, "reverse-path filter"},
		{"no client given", func(o *observations) { o.clientProbed, o.client = false, synResult{} },
			map[string]string{CheckRPFilter: Skip}, ""},
		{"a client address a host on the link holds", func(o *observations) {
			o.clientProbed, o.client, o.clientHolders = false, synResult{}, []net.HardwareAddr{macC}
		}, map[string]string{CheckRPFilter: Skip}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := good
			c.edit(&o)
			checkEvaluation(t, evaluate(p, o), c.want, c.text, "")
		})
	}
}

// TestTCPFrameRoundTripIPv6: the IPv6 SYN of the cluster advisor carries a
// TCP checksum over the IPv6 pseudo-header, hop limit 64, and parses back;
// a neighbour advertisement parses to its target and sender MAC, and no
// truncation of either makes a parser panic or accept.
func TestTCPFrameRoundTripIPv6(t *testing.T) {
	src, dst := netip.MustParseAddr("2001:2::2"), netip.MustParseAddr("2001:2::100")
	in := tcpSegment{dstMAC: macB, srcMAC: macA, src: src, dst: dst, srcPort: 40000, dstPort: 80, seq: 7, ack: 9, flags: tcpSYN, mss: 1440}
	f := tcpFrame(in)
	if len(f) != 14+40+24 || f[14]>>4 != 6 || f[20] != 6 || f[21] != 64 {
		t.Fatalf("frame of %d bytes, version %d, next header %d, hop limit %d", len(f), f[14]>>4, f[20], f[21])
	}
	ph := 6 + uint32(len(f)-54)
	for _, a := range []netip.Addr{src, dst} {
		b := a.As16()
		for i := 0; i < 16; i += 2 {
			ph += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	if checksum(f[54:], ph) != 0 {
		t.Error("TCP checksum does not verify")
	}
	out, ok := parseTCP(f)
	if !ok {
		t.Fatal("parseTCP refused its own IPv6 frame")
	}
	if out.src != in.src || out.dst != in.dst || out.srcPort != in.srcPort || out.dstPort != in.dstPort ||
		out.seq != in.seq || out.flags != in.flags || out.mss != in.mss || out.ttl != 64 || out.totLen != len(f)-14 {
		t.Errorf("round trip: %+v -> %+v", in, out)
	}
	na := ndframe.Advertisement(macC, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, dst)
	target, from, ok := parseNA(na)
	if !ok || target != dst || from.String() != macC.String() {
		t.Errorf("advertisement parsed to %v from %v (%v); want %v from %v", target, from, ok, dst, macC)
	}
	if _, _, ok := parseNA(f); ok {
		t.Error("parseNA took a TCP frame")
	}
	for n := 0; n < len(f); n++ {
		if _, ok := parseTCP(f[:n]); ok && n < 14+40+20 {
			t.Errorf("parseTCP took a frame cut to %d bytes", n)
		}
	}
	for n := 0; n < len(na); n++ {
		if _, _, ok := parseNA(na[:n]); ok && n < 14+40+24 {
			t.Errorf("parseNA took a frame cut to %d bytes", n)
		}
	}
}

// checkEvaluation compares the checks' results with want, and wants a
// failing check whose detail says text and whose fix says fix (each when
// not empty).
func checkEvaluation(t *testing.T, cs []Check, want map[string]string, text, fix string) {
	t.Helper()
	got := results(cs)
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s (%+v)", name, got[name], w, cs)
		}
	}
	if (text != "" || fix != "") && !slices.ContainsFunc(cs, func(ch Check) bool {
		return ch.Result == Fail && strings.Contains(ch.Detail, text) && strings.Contains(ch.Fix, fix)
	}) {
		t.Errorf("no failing check says %q with the fix %q: %+v", text, fix, cs)
	}
}

// TestEvaluateIPv6: an IPv6 server's checks speak of neighbour
// solicitations, count 60 bytes of headers against the MSS, tell a server
// that answers for the cluster address to take it off its interface, and
// skip the reverse-path check (IPv6 has no rp_filter).
func TestEvaluateIPv6(t *testing.T) {
	vip6, srv6 := netip.MustParseAddr("2001:2::100"), netip.MustParseAddr("2001:2::21")
	p := Params{Interface: "eth0", Source: netip.MustParseAddr("2001:2::2"), VIP: vip6, Port: 80, Server: srv6, Timeout: time.Second}
	synack := synResult{kind: "synack", from: vip6, fromMAC: macB, mss: 1440}
	good := observations{ifMTU: 1500, serverMAC: macB, viaVIP: synack, viaServer: synResult{kind: "synack", from: srv6, fromMAC: macB, mss: 1440}}
	for _, c := range []struct {
		name string
		edit func(*observations)
		want map[string]string
		text string // in the failing check's detail
		fix  string // in the failing check's fix
	}{
		{"prepared", func(*observations) {}, map[string]string{CheckARPServer: Pass, CheckARPCluster: Pass, CheckAccept: Pass,
			CheckReplySource: Pass, CheckMTU: Pass, CheckRPFilter: Skip}, "", ""},
		{"not on the link", func(o *observations) { o.serverMAC = nil },
			map[string]string{CheckARPServer: Fail, CheckAccept: Skip}, "did not answer neighbour solicitations", ""},
		{"the cluster address on its interface", func(o *observations) { o.vipAnswerers = []net.HardwareAddr{macB} },
			map[string]string{CheckARPCluster: Fail}, "answers neighbour solicitations for the cluster address", "take 2001:2::100 off its interface"},
		{"small MTU", func(o *observations) { o.viaVIP.mss = 1380 },
			map[string]string{CheckMTU: Fail}, "MTU 1440", ""},
		{"no alias", func(o *observations) { o.viaVIP = synResult{} },
			map[string]string{CheckAccept: Fail}, "did not answer a SYN", "check its firewall"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := good
			c.edit(&o)
			cs := evaluate(p, o)
			checkEvaluation(t, cs, c.want, c.text, c.fix)
			for _, ch := range cs {
				if strings.Contains(ch.Detail+ch.Fix, "rp_filter") || strings.Contains(ch.Detail+ch.Fix, "ARP") {
					t.Errorf("%s speaks of IPv4's rp_filter or ARP: %+v", ch.Name, ch)
				}
			}
		})
	}
}
