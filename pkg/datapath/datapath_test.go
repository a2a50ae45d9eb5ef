//go:build linux

package datapath

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// XDP actions as the program returns them.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

func tcpTo(dst netip.Addr, dport, sport uint16, flags string) testutil.Frame {
	return testutil.Frame{Src: clientAddr, Dst: dst, Proto: "tcp", SrcPort: sport, DstPort: dport, Flags: flags, Payload: []byte("dlb")}
}

func udpTo(dst netip.Addr, dport, sport uint16) testutil.Frame {
	return testutil.Frame{Src: clientAddr, Dst: dst, Proto: "udp", SrcPort: sport, DstPort: dport, Payload: []byte("dlb")}
}

func key(dst netip.Addr, dport, sport uint16, proto uint8) FlowKey {
	return FlowKey{Src: clientAddr, Dst: dst, SrcPort: sport, DstPort: dport, Proto: proto}
}

// dpCase is one fixture: a frame, the state before it, and what must come
// out: the verdict, the reason it is counted under, the exact output bytes,
// the counter deltas and the connection-table entry.
type dpCase struct {
	name  string
	frame []byte
	// before are connection-table entries inserted first.
	before []conn
	want   uint32
	reason string
	// to is the backend the frame must be forwarded to (0: not forwarded,
	// output must equal input).
	to uint32
	// newConn and finConn are the expected connection-counter deltas of
	// the backends and their services: backend id -> delta.
	newConn, finConn map[uint32]uint64
	// conn is the flow whose entry is checked afterwards; wantConn is the
	// expected entry (nil: no entry).
	conn     *FlowKey
	wantConn *conn

	// setup prepares state beyond before (NAT entries, affinity records,
	// earlier packets of the flow); it runs before the counters are read.
	setup func(t *testing.T)
	// wantFrame is the exact output frame when it is more than a MAC
	// rewrite towards to (NAT, ICMP translation, replies to clients).
	wantFrame []byte
	// countAs is the backend whose counters count the packet, when it is
	// not to (a reply or an ICMP error translated for the client).
	countAs uint32
	// events are expected event deltas (unlisted events are not checked).
	events map[string]uint64
	// check runs after the packet, for further expectations.
	check func(t *testing.T)
}

func ptr[T any](v T) *T { return &v }

func TestPrivilegedDatapathTable(t *testing.T) {
	e := newTestEnv(t)

	k80 := func(sport uint16) FlowKey { return key(vipTCP, 80, sport, 6) }
	frame := func(f testutil.Frame) []byte { return f.Build(t) }
	withVLAN := func(f testutil.Frame, ids ...uint16) testutil.Frame { f.VLANs = ids; return f }
	withFrag := func(f testutil.Frame, off uint16, mf bool) testutil.Frame {
		f.FragOffset, f.MoreFragments = off, mf
		return f
	}
	withOpts := func(f testutil.Frame) testutil.Frame { f.Options = true; return f }

	badIHL := frame(tcpTo(vipTCP, 80, 1030, "S"))
	badIHL[14] = 0x44 // version 4, IHL 4
	longTotLen := frame(tcpTo(vipTCP, 80, 1031, "S"))
	longTotLen[16], longTotLen[17] = 0x05, 0xdc // tot_len 1500 > frame
	shortDoff := frame(tcpTo(vipTCP, 80, 1032, "S"))
	shortDoff[14+20+12] = 0x40 // data offset 4
	ipv4Ver6 := frame(tcpTo(vipTCP, 80, 1033, "S"))
	ipv4Ver6[14] = 0x65 // version 6 in an IPv4 ethertype
	padded := append(frame(tcpTo(vipTCP, 80, 1034, "S")), make([]byte, 8)...)
	lldp := frame(tcpTo(otherAddr, 80, 1035, "S"))
	lldp[12], lldp[13] = 0x88, 0xcc

	cases := []dpCase{
		{name: "SYN of a new flow is scheduled without a table entry", frame: frame(tcpTo(vipTCP, 80, 1000, "S")),
			want: xdpTX, reason: "fwd_tx", to: 10, conn: ptr(k80(1000))},
		{name: "established flow hits its entry", frame: frame(tcpTo(vipTCP, 80, 1001, "A")),
			before: []conn{{key: k80(1001), backend: 10, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10,
			conn: ptr(k80(1001)), wantConn: &conn{backend: 10, service: 1}},
		{name: "established flow keeps its down server", frame: frame(tcpTo(vipTCP, 80, 1002, "PA")),
			before: []conn{{key: k80(1002), backend: 11, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 11,
			conn: ptr(k80(1002)), wantConn: &conn{backend: 11, service: 1}},
		{name: "SYN on a down server's entry is rescheduled", frame: frame(tcpTo(vipTCP, 80, 1003, "S")),
			before: []conn{{key: k80(1003), backend: 11, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1}, finConn: map[uint32]uint64{11: 1},
			conn: ptr(k80(1003)), wantConn: &conn{backend: 10, service: 1}},
		{name: "SYN on a removed server's entry is rescheduled", frame: frame(tcpTo(vipTCP, 80, 1004, "S")),
			before: []conn{{key: k80(1004), backend: 99, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1004)), wantConn: &conn{backend: 10, service: 1}},
		{name: "ACK on a removed server's entry is rescheduled", frame: frame(tcpTo(vipTCP, 80, 1005, "A")),
			before: []conn{{key: k80(1005), backend: 99, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1005)), wantConn: &conn{backend: 10, service: 1}},
		{name: "retransmitted SYN keeps its server", frame: frame(tcpTo(vipTCP, 80, 1006, "S")),
			before: []conn{{key: k80(1006), backend: 10, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10,
			conn: ptr(k80(1006)), wantConn: &conn{backend: 10, service: 1}},
		{name: "FIN moves the entry to closing", frame: frame(tcpTo(vipTCP, 80, 1007, "FA")),
			before: []conn{{key: k80(1007), backend: 10, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10, finConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1007)), wantConn: &conn{backend: 10, service: 1, closing: true}},
		{name: "RST moves the entry to closing", frame: frame(tcpTo(vipTCP, 80, 1008, "R")),
			before: []conn{{key: k80(1008), backend: 11, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 11, finConn: map[uint32]uint64{11: 1},
			conn: ptr(k80(1008)), wantConn: &conn{backend: 11, service: 1, closing: true}},
		{name: "second FIN is not counted twice", frame: frame(tcpTo(vipTCP, 80, 1009, "FA")),
			before: []conn{{key: k80(1009), backend: 10, service: 1, closing: true}},
			want:   xdpTX, reason: "fwd_tx", to: 10,
			conn: ptr(k80(1009)), wantConn: &conn{backend: 10, service: 1, closing: true}},
		{name: "FIN of an unknown flow is forwarded without an entry", frame: frame(tcpTo(vipTCP, 80, 1010, "FA")),
			want: xdpTX, reason: "fwd_tx", to: 10, conn: ptr(k80(1010))},
		{name: "SYN on a closing entry starts a new connection", frame: frame(tcpTo(vipTCP, 80, 1011, "S")),
			before: []conn{{key: k80(1011), backend: 10, service: 1, closing: true}},
			want:   xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1011)), wantConn: &conn{backend: 10, service: 1}},
		{name: "SYN on an expired entry starts a new connection", frame: frame(tcpTo(vipTCP, 80, 1012, "S")),
			before: []conn{{key: k80(1012), backend: 10, service: 1, idle: 3}},
			setup:  func(t *testing.T) { e.withTimeouts(t, 1, 2, 60, 0) },
			want:   xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1}, finConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1012)), wantConn: &conn{backend: 10, service: 1}},
		// The clock below the timeout (a dispatcher that just booted): an
		// entry last seen at boot has idled less than staletimeout.
		{name: "SYN on an entry seen at boot, clock below staletimeout, continues it", frame: frame(tcpTo(vipTCP, 80, 1090, "S")),
			before: []conn{{key: k80(1090), backend: 10, service: 1, bootSeen: true}},
			setup:  func(t *testing.T) { e.withTimeouts(t, 1, uptimeSeconds()+3600, 60, 0) },
			want:   xdpTX, reason: "fwd_tx", to: 10,
			conn: ptr(k80(1090)), wantConn: &conn{backend: 10, service: 1}},
		{name: "FIN on an entry seen at boot, clock below staletimeout, closes it", frame: frame(tcpTo(vipTCP, 80, 1091, "FA")),
			before: []conn{{key: k80(1091), backend: 11, service: 1, bootSeen: true}},
			setup:  func(t *testing.T) { e.withTimeouts(t, 1, uptimeSeconds()+3600, 60, 0) },
			want:   xdpTX, reason: "fwd_tx", to: 11, finConn: map[uint32]uint64{11: 1},
			conn: ptr(k80(1091)), wantConn: &conn{backend: 11, service: 1, closing: true}},
		{name: "mid-flow packet of an unknown flow is scheduled", frame: frame(tcpTo(vipTCP, 80, 1013, "A")),
			want: xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1013)), wantConn: &conn{backend: 10, service: 1}},
		{name: "UDP to a UDP port is scheduled", frame: frame(udpTo(vipTCP, 53, 1014)),
			want: xdpTX, reason: "fwd_tx", to: 20, newConn: map[uint32]uint64{20: 1},
			conn: ptr(key(vipTCP, 53, 1014, 17)), wantConn: &conn{backend: 20, service: 2}},
		{name: "server on another interface is redirected", frame: frame(tcpTo(vipRedir, 80, 1015, "A")),
			want: xdpRedirect, reason: "fwd_redirect", to: 30, newConn: map[uint32]uint64{30: 1},
			conn: ptr(key(vipRedir, 80, 1015, 6)), wantConn: &conn{backend: 30, service: 3}},
		{name: "port with no server taking connections drops", frame: frame(tcpTo(vipEmpty, 80, 1016, "S")),
			want: xdpDrop, reason: "drop_no_backend", conn: ptr(key(vipEmpty, 80, 1016, 6))},
		{name: "VLAN-tagged SYN keeps its tag", frame: frame(withVLAN(tcpTo(vipTCP, 80, 1017, "S"), 7)),
			want: xdpTX, reason: "fwd_tx", to: 10, conn: ptr(k80(1017))},
		{name: "VLAN-tagged ACK creates its entry", frame: frame(withVLAN(tcpTo(vipTCP, 80, 1036, "A"), 7)),
			want: xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1036)), wantConn: &conn{backend: 10, service: 1}},
		{name: "double-tagged ACK keeps its tags", frame: frame(withVLAN(tcpTo(vipTCP, 80, 1018, "A"), 100, 7)),
			want: xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			conn: ptr(k80(1018)), wantConn: &conn{backend: 10, service: 1}},
		{name: "Ethernet padding after the IP packet is fine", frame: padded,
			want: xdpTX, reason: "fwd_tx", to: 10, conn: ptr(k80(1034))},
		{name: "non-VIP TCP passes", frame: frame(tcpTo(otherAddr, 80, 1019, "S")), want: xdpPass, reason: "pass_not_vip"},
		{name: "non-VIP UDP passes", frame: frame(udpTo(otherAddr, 53, 1020)), want: xdpPass, reason: "pass_not_vip"},
		{name: "NFA passes", frame: frame(tcpTo(nfaAddr, 22, 1021, "S")), want: xdpPass, reason: "pass_nfa"},
		{name: "ARP passes", frame: testutil.ARPRequest(t, clientAddr, vipTCP), want: xdpPass, reason: "pass_non_ip"},
		{name: "VLAN-tagged ARP passes", frame: vlanARP(t), want: xdpPass, reason: "pass_non_ip"},
		{name: "LLDP passes", frame: lldp, want: xdpPass, reason: "pass_non_ip"},
		{name: "IPv6 to a non-cluster address passes", frame: frame(testutil.Frame{Src: client6, Dst: other6, Proto: "tcp", SrcPort: 1, DstPort: 80, Flags: "S"}),
			want: xdpPass, reason: "pass_not_vip"},
		{name: "VIP, unbalanced port passes", frame: frame(tcpTo(vipTCP, 81, 1022, "S")), want: xdpPass, reason: "pass_vip_other", conn: ptr(key(vipTCP, 81, 1022, 6))},
		{name: "VIP, wrong protocol passes", frame: frame(udpTo(vipTCP, 80, 1023)), want: xdpPass, reason: "pass_vip_other"},
		{name: "VIP, ICMP echo passes", frame: frame(testutil.Frame{Src: clientAddr, Dst: vipTCP, Proto: "icmp"}), want: xdpPass, reason: "pass_vip_other"},
		{name: "VIP, first fragment drops", frame: frame(withFrag(tcpTo(vipTCP, 80, 1024, "S"), 0, true)), want: xdpDrop, reason: "drop_fragment"},
		{name: "VIP, later fragment drops", frame: frame(withFrag(udpTo(vipTCP, 53, 1025), 64, false)), want: xdpDrop, reason: "drop_fragment"},
		{name: "non-VIP fragment passes", frame: frame(withFrag(tcpTo(otherAddr, 80, 1026, "S"), 8, true)), want: xdpPass, reason: "pass_not_vip"},
		{name: "VIP, IP options drop", frame: frame(withOpts(tcpTo(vipTCP, 80, 1027, "S"))), want: xdpDrop, reason: "drop_ip_options"},
		{name: "non-VIP, IP options pass", frame: frame(withOpts(tcpTo(otherAddr, 80, 1028, "S"))), want: xdpPass, reason: "pass_not_vip"},
		{name: "IHL below 5 passes as malformed", frame: badIHL, want: xdpPass, reason: "pass_malformed"},
		{name: "total length beyond the frame passes as malformed", frame: longTotLen, want: xdpPass, reason: "pass_malformed"},
		{name: "TCP data offset below 5 passes as malformed", frame: shortDoff, want: xdpPass, reason: "pass_malformed"},
		{name: "IP version 6 in an IPv4 frame passes as malformed", frame: ipv4Ver6, want: xdpPass, reason: "pass_malformed"},
	}
	// Both-protocol port: the backend follows the Go twin of the flow hash
	// through a table that alternates by slot.
	for i, proto := range []uint8{6, 17, 6, 17, 6, 6, 17, 17} {
		sport := uint16(2000 + i)
		k := key(vipBoth, 443, sport, proto)
		want := 50 + FlowHash(k, DefaultHashSeed)%e.tableM%2
		f := udpTo(vipBoth, 443, sport)
		if proto == 6 {
			f = tcpTo(vipBoth, 443, sport, "A")
		}
		cases = append(cases, dpCase{name: "both-protocol port picks the hashed slot", frame: frame(f),
			want: xdpTX, reason: "fwd_tx", to: want, newConn: map[uint32]uint64{want: 1},
			conn: &k, wantConn: &conn{backend: want, service: 5}})
	}
	// Truncation at every header offset, plain and VLAN-tagged: the frame
	// passes untouched as malformed.
	for _, full := range []struct {
		frame   []byte
		headers int // bytes of headers before the payload
	}{
		{frame(tcpTo(vipTCP, 80, 1029, "S")), 14 + 20 + 20},
		{frame(withVLAN(udpTo(vipTCP, 53, 1029), 7)), 14 + 4 + 20 + 8},
	} {
		for n := 14; n < full.headers; n++ {
			cases = append(cases, dpCase{name: "truncated at " + strconv.Itoa(n), frame: full.frame[:n], want: xdpPass, reason: "pass_malformed"})
		}
	}

	cases = append(cases, natCases(t, e)...)
	cases = append(cases, ipv6Cases(t, e)...)
	cases = append(cases, icmpCases(t, e)...)
	cases = append(cases, affinityCases(t, e)...)

	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] && !strings.HasPrefix(c.name, "truncated") && !strings.HasPrefix(c.name, "both-protocol") {
			t.Fatalf("two cases named %q", c.name)
		}
		names[c.name] = true
	}
	// Every case twice: as it is, and with a trace running (no filter),
	// which must change nothing the executor does, and hand over exactly
	// one record of each packet, with its reason and server.
	for _, traced := range []bool{false, true} {
		var tr *Trace
		if traced {
			tr = startTrace(t, e, lb.TraceFilter{})
		}
		runDpCases(t, e, cases, tr)
		if tr != nil {
			if _, err := tr.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(cases) < 150 {
		t.Fatalf("only %d cases", len(cases))
	}

	// Every packet was counted under exactly one reason.
	var total uint64
	for _, r := range e.stats(t).Reasons {
		total += r.Packets
	}
	if total != e.runs {
		t.Errorf("reason counters add up to %d packets, %d were run", total, e.runs)
	}
}

// runDpCases runs the table's cases; with tr, each packet's trace record
// is checked too.
func runDpCases(t *testing.T, e *testEnv, cases []dpCase, tr *Trace) {
	prefix := ""
	if tr != nil {
		prefix = "traced/"
	}
	for _, c := range cases {
		t.Run(prefix+c.name, func(t *testing.T) {
			e.clearTables(t)
			for _, b := range c.before {
				e.putConn(t, b)
			}
			if c.setup != nil {
				c.setup(t)
			}
			if tr != nil {
				// The records of the packets the setup sent.
				for {
					if _, err := tr.Next(time.Now()); err != nil {
						break
					}
				}
			}
			before := e.stats(t)
			got, out := e.run(t, c.frame)
			after := e.stats(t)

			if got != c.want {
				t.Errorf("verdict %d, want %d", got, c.want)
			}
			wantOut := c.frame
			if c.to != 0 {
				b := e.backend[c.to]
				wantOut = append([]byte(nil), c.frame...)
				copy(wantOut[0:6], b.MAC)
				copy(wantOut[6:12], b.SrcMAC)
			}
			if c.wantFrame != nil {
				wantOut = c.wantFrame
			}
			if !bytes.Equal(out, wantOut) {
				t.Errorf("output differs:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(wantOut))
			}
			if !bytes.Equal(out, c.frame) && testutil.VerifyChecksums(c.frame) == nil {
				// A frame the executor changed keeps valid checksums,
				// recomputed here by gopacket.
				if err := testutil.VerifyChecksums(out); err != nil {
					t.Errorf("output checksums: %v", err)
				}
			}
			checkReasonDelta(t, before, after, c.reason, uint64(len(c.frame)))
			checkConnDeltas(t, e, before, after, c)
			for name, want := range c.events {
				if d := after.Events[name] - before.Events[name]; d != want {
					t.Errorf("event %s +%d, want +%d", name, d, want)
				}
			}
			if c.check != nil {
				c.check(t)
			}
			if c.conn != nil {
				f, ok := e.getConn(t, *c.conn)
				switch {
				case c.wantConn == nil && ok:
					t.Errorf("unexpected connection entry %+v", f)
				case c.wantConn != nil && !ok:
					t.Errorf("no connection entry")
				case c.wantConn != nil:
					wantState := uint8(dispatcherFlowStateFLOW_ESTABLISHED)
					if c.wantConn.closing {
						wantState = uint8(dispatcherFlowStateFLOW_CLOSING)
					}
					if f.Backend != c.wantConn.backend || f.Service != c.wantConn.service || f.State != wantState {
						t.Errorf("entry backend %d service %d state %d, want %d %d %d",
							f.Backend, f.Service, f.State, c.wantConn.backend, c.wantConn.service, wantState)
					}
					if now := monotonicNow(); f.LastSeen > now || now-f.LastSeen > 5e9 {
						t.Errorf("entry last seen %d ns ago", now-f.LastSeen)
					}
				}
			}
			if tr != nil {
				checkTraced(t, e, tr, c, out)
			}
		})
	}
}

// checkTraced checks that the trace got one record of case c's packet
// (sent on as out): its reason, its server, the frame as sent.
func checkTraced(t *testing.T, e *testEnv, tr *Trace, c dpCase, out []byte) {
	t.Helper()
	p, err := tr.Next(time.Now().Add(time.Second))
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	if p.Reason != c.reason {
		t.Errorf("trace: reason %s, want %s", p.Reason, c.reason)
	}
	if c.to != 0 && p.Server != e.backend[c.to].Address {
		t.Errorf("trace: server %v, want %v", p.Server, e.backend[c.to].Address)
	}
	if n := min(len(out), len(p.Data)); p.Length != len(out) || !bytes.Equal(p.Data, out[:n]) {
		t.Errorf("trace: %d bytes %x, want the frame as sent %x", p.Length, p.Data, out)
	}
	if extra, err := tr.Next(time.Now()); err == nil {
		t.Errorf("trace: a second record %+v", extra)
	}
}

func vlanARP(t *testing.T) []byte {
	f := testutil.ARPRequest(t, clientAddr, vipTCP)
	tagged := append([]byte(nil), f[:12]...)
	tagged = append(tagged, 0x81, 0x00, 0x00, 0x07)
	return append(tagged, f[12:]...)
}

func checkReasonDelta(t *testing.T, before, after lb.DataplaneStats, reason string, bytes uint64) {
	t.Helper()
	found := false
	for i, r := range after.Reasons {
		dp := r.Packets - before.Reasons[i].Packets
		db := r.Bytes - before.Reasons[i].Bytes
		want := uint64(0)
		if r.Reason == reason {
			want, found = 1, true
		}
		if dp != want || db != want*bytes {
			t.Errorf("reason %s: +%d packets +%d bytes, want +%d +%d", r.Reason, dp, db, want, want*bytes)
		}
	}
	if !found {
		t.Errorf("reason %q does not exist", reason)
	}
}

func checkConnDeltas(t *testing.T, e *testEnv, before, after lb.DataplaneStats, c dpCase) {
	t.Helper()
	svcDelta := map[uint32]lb.Counters{}
	for i, a := range after.Backends {
		id := uint32(i)
		if _, ok := e.backend[id]; !ok {
			if a != (lb.Counters{}) {
				t.Errorf("backend id %d, not in use, counted %+v", id, a)
			}
			continue
		}
		b := before.Backend(id)
		d := lb.Counters{Packets: a.Packets - b.Packets, Bytes: a.Bytes - b.Bytes, NewConns: a.NewConns - b.NewConns, FinConns: a.FinConns - b.FinConns}
		want := lb.Counters{NewConns: c.newConn[id], FinConns: c.finConn[id]}
		counted := c.to
		if c.countAs != 0 {
			counted = c.countAs
		}
		if id == counted {
			want.Packets, want.Bytes = 1, uint64(len(c.frame))
		}
		if d != want {
			t.Errorf("backend %d counters +%+v, want +%+v", id, d, want)
		}
		s := svcDelta[e.backend[id].Service]
		s.Packets += want.Packets
		s.Bytes += want.Bytes
		s.NewConns += want.NewConns
		s.FinConns += want.FinConns
		svcDelta[e.backend[id].Service] = s
	}
	for id, a := range after.Services {
		b := before.Services[id]
		d := lb.Counters{Packets: a.Packets - b.Packets, Bytes: a.Bytes - b.Bytes, NewConns: a.NewConns - b.NewConns, FinConns: a.FinConns - b.FinConns}
		if d != svcDelta[id] {
			t.Errorf("service %d counters +%+v, want +%+v", id, d, svcDelta[id])
		}
	}
}

func TestReasonNamesCoverEnum(t *testing.T) {
	if len(reasonNames) != int(dispatcherStatReasonSTAT_MAX) {
		t.Fatalf("%d reason names for %d reasons", len(reasonNames), dispatcherStatReasonSTAT_MAX)
	}
	seen := map[string]bool{}
	for i, n := range reasonNames {
		if n == "" || seen[n] {
			t.Errorf("reason %d has name %q", i, n)
		}
		seen[n] = true
	}
	if len(eventNames) != int(dispatcherDlbEventEV_MAX) {
		t.Fatalf("%d event names for %d events", len(eventNames), dispatcherDlbEventEV_MAX)
	}
	for i, n := range eventNames {
		if n == "" || seen[n] {
			t.Errorf("event %d has name %q", i, n)
		}
		seen[n] = true
	}
}

// TestPrivilegedHandshakeSurvivesTableSwap: a SYN creates no table entry;
// its ACK creates one on the SYN's server even when the Maglev table moved
// the flow's slot to another server in between, and later SYNs follow the
// new table.
func TestPrivilegedHandshakeSurvivesTableSwap(t *testing.T) {
	e := newTestEnv(t)
	k := key(vipTCP, 80, 3000, 6)

	if got, out := e.run(t, tcpTo(vipTCP, 80, 3000, "S").Build(t)); got != xdpTX || !bytes.Equal(out[:6], e.backend[10].MAC) {
		t.Fatalf("SYN: verdict %d to %x", got, out[:6])
	}
	if _, ok := e.getConn(t, k); ok {
		t.Fatal("a bare SYN created a table entry")
	}

	// Every slot now belongs to backend 12, a new server of the service.
	st := e.fixtureState()
	st.Backends = append(st.Backends, lb.DataplaneBackend{ID: 12, Service: 1, Address: netip.MustParseAddr("198.18.0.35"),
		MAC: mac(0x35), SrcMAC: ifaceMAC, Ifindex: 1, AcceptNew: true})
	st.Services[0].Table = fill(e.tableM, func(uint32) uint32 { return 12 })
	if err := e.dp.Apply(st); err != nil {
		t.Fatal(err)
	}
	e.backend[12] = st.Backends[len(st.Backends)-1]

	before := e.stats(t)
	if got, out := e.run(t, tcpTo(vipTCP, 80, 3000, "A").Build(t)); got != xdpTX || !bytes.Equal(out[:6], e.backend[10].MAC) {
		t.Fatalf("handshake ACK: verdict %d to %x, want the SYN's server %s", got, out[:6], e.backend[10].MAC)
	}
	f, ok := e.getConn(t, k)
	if !ok || f.Backend != 10 {
		t.Fatalf("entry %+v %v, want backend 10", f, ok)
	}
	if d := e.stats(t).Backend(10).NewConns - before.Backend(10).NewConns; d != 1 {
		t.Errorf("new connections on backend 10 +%d, want +1 (counted when the entry is created)", d)
	}
	// Data keeps going to the SYN's server; a new flow follows the new table.
	if _, out := e.run(t, tcpTo(vipTCP, 80, 3000, "PA").Build(t)); !bytes.Equal(out[:6], e.backend[10].MAC) {
		t.Errorf("data went to %x", out[:6])
	}
	if _, out := e.run(t, tcpTo(vipTCP, 80, 3001, "S").Build(t)); !bytes.Equal(out[:6], e.backend[12].MAC) {
		t.Errorf("new SYN went to %x, want the new table's server", out[:6])
	}
	// An ACK without a remembered SYN is scheduled by the table.
	if _, out := e.run(t, tcpTo(vipTCP, 80, 3002, "A").Build(t)); !bytes.Equal(out[:6], e.backend[12].MAC) {
		t.Errorf("unknown ACK went to %x, want the new table's server", out[:6])
	}
}

// TestCheckNotUnlinked: a directory deleted while still reachable (here
// through a descriptor's /proc path; under dlbd.service as the mount
// point of the host's pin directory bound in) is told from a live one,
// and the error names the path.
func TestCheckNotUnlinked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pins")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := checkNotUnlinked(seen); err != nil {
		t.Errorf("a live directory: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	err = checkNotUnlinked(seen)
	if !errors.Is(err, ErrPinDirUnlinked) || !strings.Contains(err.Error(), seen) {
		t.Errorf("a deleted directory still reachable: %v, want %v naming %s", err, ErrPinDirUnlinked, seen)
	}
}

// TestPinDirNotOnBPFFS: a pin directory on another file system is refused
// before anything is created, naming the directory, the file system it
// found and where pins can live.
func TestPinDirNotOnBPFFS(t *testing.T) {
	parent := t.TempDir()
	for _, c := range []struct {
		name, dir, found string
	}{
		{name: "existing directory", dir: parent, found: parent},
		{name: "directory to create", dir: parent + "/a/b", found: parent},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := PreparePinDir(c.dir)
			if err == nil {
				t.Fatalf("PreparePinDir(%s) on a temporary directory's file system: no error", c.dir)
			}
			for _, want := range []string{c.dir + " is not on a bpf filesystem", "(" + c.found + " is not)", "/sys/fs/bpf", "mount -t bpf"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if c.dir != c.found {
				if _, serr := os.Stat(c.dir); serr == nil {
					t.Errorf("%s was created", c.dir)
				}
			}
		})
	}
}
