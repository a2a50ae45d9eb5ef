//go:build linux

package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// The executor fuzzer. FuzzExecutor runs arbitrary frames through the
// program on the table tests' fixture (with some connections of every kind
// already in the tables) and checks what must hold for any frame:
//
//   - the verdict is XDP_PASS, XDP_DROP, XDP_TX or XDP_REDIRECT, and the
//     frame keeps its length;
//   - the packet is counted under exactly one reason;
//   - a dropped frame, and a passed one (but a NAT reply passed for want of
//     a neighbour), is unchanged;
//   - only a frame to a balanced cluster address, port and protocol, a
//     TCP/UDP frame to a NAT return address, or an ICMP error to either is
//     changed, and a changed frame is addressed to a configured backend's
//     next hop or a client gateway;
//   - a changed frame whose checksums were valid still has valid ones
//     (recomputed by gopacket).
//
// The seed corpus is every frame of the data-path table; plain "go test"
// runs it (and TestPrivilegedExecutorRandomFrames runs 20000 mutated and
// random frames). A long run:
//
//	go test -run '^$' -fuzz '^FuzzExecutor$' -fuzztime 10m ./pkg/datapath/
//
// (root, like every data-path test; new failing inputs land in
// testdata/fuzz/FuzzExecutor).
func FuzzExecutor(f *testing.F) {
	testutil.RequirePrivileged(f)
	e := newTestEnv(f)
	o := newOracle(f, e)
	for _, fr := range seedFrames(f, e) {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		o.check(t, frame)
	})
}

// TestPrivilegedExecutorRandomFrames is the fuzzer's bounded run inside
// the normal tests: 20000 frames, mutated from the seed corpus or random.
func TestPrivilegedExecutorRandomFrames(t *testing.T) {
	e := newTestEnv(t)
	o := newOracle(t, e)
	seeds := seedFrames(t, e)
	rng := rand.New(rand.NewPCG(7, 11))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < n; i++ {
		var fr []byte
		switch r := rng.IntN(10); r {
		case 0: // random bytes
			fr = make([]byte, rng.IntN(200))
			for j := range fr {
				fr[j] = byte(rng.Uint32())
			}
		case 1: // a truncated seed
			s := seeds[rng.IntN(len(seeds))]
			fr = append([]byte(nil), s[:rng.IntN(len(s)+1)]...)
		default: // a seed with a few bytes changed
			s := seeds[rng.IntN(len(seeds))]
			fr = append([]byte(nil), s...)
			for j := rng.IntN(4); j >= 0 && len(fr) > 0; j-- {
				// Mostly in the headers, where the decisions are.
				at := rng.IntN(min(len(fr), 80))
				fr[at] ^= byte(1 << rng.IntN(8))
			}
		}
		o.check(t, fr)
		if t.Failed() {
			t.Fatalf("frame %d: %x", i, fr)
		}
	}
	// Everything was counted once.
	var total uint64
	for _, r := range e.stats(t).Reasons {
		total += r.Packets
	}
	if total != e.runs {
		t.Errorf("reason counters add up to %d packets, %d were run", total, e.runs)
	}
}

// seedFrames returns every frame of the data-path table's cases, and
// prepares connections of every kind for frames to hit.
func seedFrames(t testing.TB, e *testEnv) [][]byte {
	var out [][]byte
	for _, cs := range [][]dpCase{natCases(t, e), ipv6Cases(t, e), icmpCases(t, e), affinityCases(t, e)} {
		for _, c := range cs {
			out = append(out, c.frame)
		}
	}
	for _, f := range []testutil.Frame{
		tcpTo(vipTCP, 80, 1000, "S"), tcpTo(vipTCP, 80, 1001, "A"), tcpTo(vipTCP, 80, 1007, "FA"),
		udpTo(vipTCP, 53, 1014), tcpTo(vipRedir, 80, 1015, "A"), tcpTo(vipEmpty, 80, 1016, "S"),
		tcpTo(vipBoth, 443, 2000, "A"), udpTo(vipBoth, 443, 2001), tcpTo(otherAddr, 80, 1019, "S"),
		tcpTo(nfaAddr, 22, 1021, "S"), {Src: clientAddr, Dst: vipTCP, Proto: "icmp"},
	} {
		out = append(out, f.Build(t))
	}
	out = append(out, testutil.ARPRequest(t, clientAddr, vipTCP))
	// State for the frames to find.
	e.putConn(t, conn{key: key(vipTCP, 80, 1001, 6), backend: 10, service: 1})
	e.putConn(t, conn{key: key(vipTCP, 80, 1007, 6), backend: 11, service: 1})
	e.putNAT(t, natConn{key: key(vipNAT, 80, 5004, 6), backend: 60, service: 6, ret: retAddr, port: 30000})
	e.putNAT(t, natConn{key: key(vipNAT, 80, 5005, 6), backend: 60, service: 6, ret: retAddr, port: 30001})
	e.putNAT(t, natConn{key: key(vipNAT, 53, 5102, 17), backend: 61, service: 7, ret: retAddr, port: 31001})
	e.putNAT(t, natConn{key: FlowKey{Src: client6, Dst: vip6NAT, SrcPort: 5204, DstPort: 80, Proto: 6}, backend: 80, service: 12, ret: ret6, port: 32001})
	e.putAffinity(t, clientAddr, 14, 91, 10)
	return out
}

type vipPort struct {
	addr  netip.Addr
	port  uint16
	proto uint8
}

// oracle knows what the fixture balances, and checks one frame.
type oracle struct {
	e        *testEnv
	balanced map[vipPort]bool
	clusters map[netip.Addr]bool
	returns  map[netip.Addr]bool
	nextHops map[string]bool
}

func newOracle(t testing.TB, e *testEnv) *oracle {
	o := &oracle{e: e, balanced: map[vipPort]bool{}, clusters: map[netip.Addr]bool{}, returns: map[netip.Addr]bool{}, nextHops: map[string]bool{}}
	for _, s := range e.state.Services {
		o.clusters[s.Cluster] = true
		if s.Protocol.HasTCP() {
			o.balanced[vipPort{s.Cluster, s.Port, 6}] = true
		}
		if s.Protocol.HasUDP() {
			o.balanced[vipPort{s.Cluster, s.Port, 17}] = true
		}
	}
	for _, b := range e.state.Backends {
		o.nextHops[string(b.MAC)] = true
		if b.ReturnAddress.IsValid() {
			o.returns[b.ReturnAddress] = true
		}
	}
	o.nextHops[string(e.state.ClientGateway.MAC)] = true
	o.nextHops[string(e.state.ClientGateway6.MAC)] = true
	return o
}

// reasons reads the per-reason packet and byte counters.
func (o *oracle) reasons(t testing.TB) (pk, by [len(reasonNames)]uint64) {
	for r := range reasonNames {
		var per []dispatcherReasonCounters
		if err := o.e.dp.objs.ReasonStats.Lookup(uint32(r), &per); err != nil {
			t.Fatal(err)
		}
		for _, c := range per {
			pk[r] += c.Packets
			by[r] += c.Bytes
		}
	}
	return pk, by
}

func (o *oracle) check(t testing.TB, in []byte) {
	t.Helper()
	if len(in) < 14 {
		return // BPF_PROG_TEST_RUN refuses frames without an Ethernet header
	}
	frame := append([]byte(nil), in...)
	pk0, by0 := o.reasons(t)
	v, out := o.e.run(t, frame)
	pk1, by1 := o.reasons(t)

	// Bytes count the frame's linear part: all of it, short of frames too
	// large for one page, which BPF_PROG_TEST_RUN splits.
	bytesOK := func(n uint64) bool {
		return n == uint64(len(in)) || (len(in) > 3000 && n > 3000 && n < uint64(len(in)))
	}
	reason := -1
	for r := range pk1 {
		switch d := pk1[r] - pk0[r]; {
		case d == 0:
		case d == 1 && reason < 0 && bytesOK(by1[r]-by0[r]):
			reason = r
		default:
			t.Errorf("reason %s +%d packets +%d bytes", reasonNames[r], d, by1[r]-by0[r])
		}
	}
	if reason < 0 {
		t.Errorf("counted under no reason")
		return
	}
	name := reasonNames[reason]
	switch v {
	case xdpPass, xdpDrop, xdpTX, xdpRedirect:
	default:
		t.Errorf("verdict %d (%s)", v, name)
	}
	if len(out) != len(in) {
		t.Errorf("length %d -> %d", len(in), len(out))
	}
	if bytes.Equal(out, in) {
		return
	}
	if v == xdpDrop || (v == xdpPass && name != "pass_no_neigh") {
		t.Errorf("verdict %d (%s) changed the frame:\n in %x\nout %x", v, name, in, out)
	}
	if why := o.mayChange(in); why != "" {
		t.Errorf("changed a frame it must not change (%s, %s):\n in %x\nout %x", why, name, in, out)
	}
	if !o.nextHops[string(out[0:6])] {
		t.Errorf("changed frame sent to %x, no configured next hop:\n in %x\nout %x", out[0:6], in, out)
	}
	if testutil.VerifyChecksums(in) == nil {
		if err := testutil.VerifyChecksums(out); err != nil {
			t.Errorf("valid checksums broken (%s): %v:\n in %x\nout %x", name, err, in, out)
		}
	}
}

// mayChange returns why the executor must not change frame, or "" when it
// may: a TCP/UDP frame to a balanced cluster address and port or to a
// return address, or an ICMP error to a cluster or return address. It
// parses the frame itself (gopacket gives up on some valid extension
// headers).
func (o *oracle) mayChange(frame []byte) string {
	dst, proto, l4, ok := parseFrame(frame)
	if !ok {
		return "no IP header"
	}
	switch proto {
	case 1, 58:
		if len(l4) < 1 {
			return "truncated ICMP"
		}
		typ := l4[0]
		isErr := typ == 3 || typ == 11
		if proto == 58 {
			isErr = typ >= 1 && typ <= 3
		}
		if (o.clusters[dst] || o.returns[dst]) && isErr {
			return ""
		}
		return fmt.Sprintf("ICMP type %d to %s", typ, dst)
	case 6, 17:
		if len(l4) < 4 {
			return "truncated transport header"
		}
		port := binary.BigEndian.Uint16(l4[2:])
		if o.returns[dst] || o.balanced[vipPort{dst, port, proto}] {
			return ""
		}
		return fmt.Sprintf("%s port %d/%d is not balanced", dst, port, proto)
	}
	return fmt.Sprintf("protocol %d to %s", proto, dst)
}

// parseFrame finds a frame's destination address, transport protocol and
// transport header: Ethernet, up to two VLAN tags, IPv4 (not a fragment)
// or IPv6 with hop-by-hop, routing and destination-options headers.
func parseFrame(b []byte) (dst netip.Addr, proto uint8, l4 []byte, ok bool) {
	if len(b) < 14 {
		return dst, 0, nil, false
	}
	et, off := binary.BigEndian.Uint16(b[12:]), 14
	for i := 0; i < 2 && (et == 0x8100 || et == 0x88a8); i++ {
		if len(b) < off+4 {
			return dst, 0, nil, false
		}
		et, off = binary.BigEndian.Uint16(b[off+2:]), off+4
	}
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return dst, 0, nil, false
		}
		ip := b[off:]
		ihl := int(ip[0]&0xf) * 4
		if ihl < 20 || len(ip) < ihl || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return dst, 0, nil, false
		}
		return netip.AddrFrom4([4]byte(ip[16:20])), ip[9], ip[ihl:], true
	case 0x86dd:
		if len(b) < off+40 {
			return dst, 0, nil, false
		}
		ip := b[off:]
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		nh, rest := ip[6], ip[40:]
		for i := 0; i < 8 && (nh == 0 || nh == 43 || nh == 60); i++ {
			if len(rest) < 8 {
				return dst, 0, nil, false
			}
			n := (int(rest[1]) + 1) * 8
			if len(rest) < n {
				return dst, 0, nil, false
			}
			nh, rest = rest[0], rest[n:]
		}
		return dst, nh, rest, true
	}
	return dst, 0, nil, false
}
