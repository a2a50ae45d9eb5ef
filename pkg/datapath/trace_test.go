//go:build linux

package datapath

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// drain reads a trace's records until none comes for a while.
func drain(t *testing.T, tr *Trace) []lb.TracePacket {
	t.Helper()
	var out []lb.TracePacket
	for range 100000 {
		p, err := tr.Next(time.Now().Add(50 * time.Millisecond))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, p)
	}
	t.Fatal("the trace never ran dry")
	return nil
}

func startTrace(t *testing.T, e *testEnv, f lb.TraceFilter) *Trace {
	t.Helper()
	tr, err := e.dp.startTrace(f)
	if err != nil {
		t.Fatalf("StartTrace: %v", err)
	}
	t.Cleanup(func() { _, _ = tr.Stop() })
	return tr
}

// With no trace running the executor's switch is off and the ring buffer
// receives nothing, whatever the traffic.
func TestPrivilegedTraceOffSendsNothing(t *testing.T) {
	e := newTestEnv(t)
	rd, err := ringbuf.NewReader(e.dp.objs.TraceRing)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	check := func(when string) {
		t.Helper()
		if on, err := e.dp.Tracing(); err != nil || on {
			t.Fatalf("%s: tracing %v (%v), want off", when, on, err)
		}
		for _, f := range []testutil.Frame{tcpTo(vipTCP, 80, 2000, "S"), tcpTo(vipTCP, 80, 2000, "A"),
			tcpTo(otherAddr, 80, 2001, "S"), tcpTo(vipEmpty, 80, 2002, "S"), tcpTo(vipNAT, 80, 2003, "S")} {
			e.run(t, f.Build(t))
		}
		rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
		if rec, err := rd.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the ring buffer got a record (%d bytes, %v)", when, len(rec.RawSample), err)
		}
		st, err := traceStats(e.dp.objs.TraceScratch)
		if err != nil {
			t.Fatal(err)
		}
		if st != (lb.TraceStats{}) {
			t.Fatalf("%s: trace counters %+v", when, st)
		}
	}
	check("never traced")

	// After a trace stops, the switch is off again.
	tr := startTrace(t, e, lb.TraceFilter{})
	if on, err := e.dp.Tracing(); err != nil || !on {
		t.Fatalf("tracing %v (%v) while a trace runs", on, err)
	}
	if _, err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := resetTraceStats(e.dp.objs.TraceScratch); err != nil {
		t.Fatal(err)
	}
	check("after a trace")
}

// A record says what the executor did with the packet: reason, verdict,
// server, whether a connection-table entry was followed, the flow and the
// frame as it left.
func TestPrivilegedTraceRecord(t *testing.T) {
	e := newTestEnv(t)
	tr := startTrace(t, e, lb.TraceFilter{})

	e.putConn(t, conn{key: key(vipTCP, 80, 3001, 6), backend: 10, service: 1})
	syn := tcpTo(vipTCP, 80, 3000, "S").Build(t)
	est := tcpTo(vipTCP, 80, 3001, "A").Build(t)
	other := tcpTo(otherAddr, 80, 3002, "S").Build(t)
	_, synOut := e.run(t, syn)
	_, estOut := e.run(t, est)
	e.run(t, other)

	got := drain(t, tr)
	if len(got) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(got), got)
	}
	b10 := e.backend[10].Address
	for i, c := range []struct {
		reason, verdict string
		server          netip.Addr
		hit             bool
		sport           uint16
		flags           uint8
		data            []byte
	}{
		{"fwd_tx", "tx", b10, false, 3000, 0x02, synOut},
		{"fwd_tx", "tx", b10, true, 3001, 0x10, estOut},
		{"pass_not_vip", "pass", netip.Addr{}, false, 3002, 0x02, other},
	} {
		p := got[i]
		if p.Reason != c.reason || p.Verdict != c.verdict || p.Server != c.server || p.Hit != c.hit {
			t.Errorf("record %d: %s %s server %v hit %v, want %s %s %v %v", i, p.Reason, p.Verdict, p.Server, p.Hit,
				c.reason, c.verdict, c.server, c.hit)
		}
		if p.Proto != 6 || p.Src != netip.AddrPortFrom(clientAddr, c.sport) || p.Dst.Port() != 80 || p.TCPFlags != c.flags {
			t.Errorf("record %d: flow %d %v -> %v flags %#x", i, p.Proto, p.Src, p.Dst, p.TCPFlags)
		}
		if p.Length != len(c.data) || !bytes.Equal(p.Data, c.data) {
			t.Errorf("record %d: %d bytes %x, want the frame as sent %x", i, p.Length, p.Data, c.data)
		}
		if d := time.Since(p.Time); d < 0 || d > time.Minute {
			t.Errorf("record %d: time %v", i, p.Time)
		}
	}
	st, err := tr.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st != (lb.TraceStats{Packets: 3}) {
		t.Errorf("stats %+v, want 3 packets", st)
	}
	if _, err := tr.Next(time.Time{}); err == nil {
		t.Error("Next after Stop returned a record")
	}
}

// The filter is applied in the executor: a trace gets exactly the
// packets it selects.
func TestPrivilegedTraceFilters(t *testing.T) {
	e := newTestEnv(t)
	// Packets, by source port: their reasons and servers are those of the
	// fixture.
	frames := map[uint16][]byte{
		4000: tcpTo(vipTCP, 80, 4000, "S").Build(t),    // fwd_tx to B10 (198.18.0.33)
		4001: udpTo(vipTCP, 53, 4001).Build(t),         // fwd_tx to B20 (198.18.0.49)
		4002: tcpTo(otherAddr, 80, 4002, "S").Build(t), // pass_not_vip
		4003: tcpTo(vipEmpty, 80, 4003, "S").Build(t),  // drop_no_backend
		4004: tcpTo(vipNAT, 80, 4004, "S").Build(t),    // NAT to B60 (198.18.2.10:8080), translated
		4005: tcpTo(vipTCP, 81, 4005, "S").Build(t),    // pass_vip_other: no port 81
	}
	all := []uint16{4000, 4001, 4002, 4003, 4004, 4005}
	cases := []struct {
		name   string
		filter lb.TraceFilter
		want   []uint16
	}{
		{"no filter", lb.TraceFilter{}, all},
		{"cluster", lb.TraceFilter{Cluster: vipTCP}, []uint16{4000, 4001, 4005}},
		{"cluster and port", lb.TraceFilter{Cluster: vipTCP, Port: 80}, []uint16{4000}},
		{"cluster and a port it lacks", lb.TraceFilter{Cluster: vipTCP, Port: 81}, []uint16{4005}},
		{"NAT cluster: translated frames match by their server's port", lb.TraceFilter{Cluster: vipNAT}, []uint16{4004}},
		{"cluster whose only server is down", lb.TraceFilter{Cluster: vipEmpty, Port: 80}, []uint16{4003}},
		{"server", lb.TraceFilter{Server: e.backend[10].Address}, []uint16{4000}},
		{"NAT server", lb.TraceFilter{Server: netip.MustParseAddr("198.18.2.10")}, []uint16{4004}},
		{"server by source of unbalanced packets", lb.TraceFilter{Server: clientAddr}, []uint16{4002, 4003, 4005}},
		{"reason", lb.TraceFilter{Reasons: []string{"drop_no_backend"}}, []uint16{4003}},
		{"reasons", lb.TraceFilter{Reasons: []string{"pass_not_vip", "pass_vip_other"}}, []uint16{4002, 4005}},
		{"cluster and reason", lb.TraceFilter{Cluster: vipTCP, Reasons: []string{"fwd_tx"}}, []uint16{4000, 4001}},
		{"matches nothing", lb.TraceFilter{Cluster: netip.MustParseAddr("198.18.9.9")}, nil},
		{"IPv6 cluster, IPv4 traffic", lb.TraceFilter{Cluster: vip6}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.clearTables(t)
			tr := startTrace(t, e, c.filter)
			for _, p := range all {
				e.run(t, frames[p])
			}
			var got []uint16
			natServer := netip.MustParseAddrPort("198.18.2.10:8080")
			for _, p := range drain(t, tr) {
				port := p.Src.Port()
				if p.Dst == natServer {
					// The frame as sent: translated, from the
					// return address.
					if p.Src.Addr() != retAddr {
						t.Errorf("translated frame from %v", p.Src)
					}
					port = 4004
				}
				got = append(got, port)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("traced %v, want %v", got, c.want)
			}
			st, err := tr.Stop()
			if err != nil {
				t.Fatal(err)
			}
			if st.Packets != uint64(len(c.want)) || st.Lost != 0 {
				t.Errorf("stats %+v, want %d packets", st, len(c.want))
			}
		})
	}
}

// One trace at a time; bad filters are refused and start nothing.
func TestPrivilegedTraceOneAtATime(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct {
		f    lb.TraceFilter
		want string
	}{
		{lb.TraceFilter{Reasons: []string{"fwd_tx", "no_such_reason"}}, "unknown reason; the reasons are pass_non_ip, "},
		{lb.TraceFilter{Reasons: []string{"fwd_txx"}}, `unknown reason (did you mean "fwd_tx"?); the reasons are`},
		{lb.TraceFilter{Port: 80}, ""},
	} {
		f := c.f
		if _, err := e.dp.StartTrace(f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("StartTrace(%+v): %v, want a refusal naming %q", f, err, c.want)
		}
		if on, _ := e.dp.Tracing(); on {
			t.Fatalf("a refused trace (%+v) turned tracing on", f)
		}
	}
	tr := startTrace(t, e, lb.TraceFilter{})
	if _, err := e.dp.StartTrace(lb.TraceFilter{}); !errors.Is(err, ErrTraceRunning) {
		t.Fatalf("second StartTrace: %v, want ErrTraceRunning", err)
	}
	if _, err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	tr2 := startTrace(t, e, lb.TraceFilter{})
	e.run(t, tcpTo(otherAddr, 80, 5000, "S").Build(t))
	if got := drain(t, tr2); len(got) != 1 {
		t.Fatalf("the next trace got %d records, want 1", len(got))
	}
}

// A full ring buffer loses records, never packets, and counts them.
func TestPrivilegedTraceCountsLost(t *testing.T) {
	e := newTestEnv(t)
	tr := startTrace(t, e, lb.TraceFilter{})
	const n = 10000 // more than the 1 MiB buffer holds (records of about 230 bytes)
	in := tcpTo(otherAddr, 80, 6000, "S").Build(t)
	before := e.stats(t)
	ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: in, Repeat: n})
	if err != nil || ret != xdpPass {
		t.Fatalf("run: %d %v", ret, err)
	}
	e.runs += n
	after := e.stats(t)
	st, err := tr.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost == 0 || st.Packets+st.Lost != n {
		t.Errorf("stats %+v: want some lost, %d in all", st, n)
	}
	for i, r := range after.Reasons {
		if r.Reason == "pass_not_vip" && r.Packets-before.Reasons[i].Packets != n {
			t.Errorf("pass_not_vip +%d packets, want +%d: every packet counted", r.Packets-before.Reasons[i].Packets, n)
		}
	}
}
