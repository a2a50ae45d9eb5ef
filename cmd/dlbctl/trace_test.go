package main

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/server"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// traceEngine is an engine that only traces: it hands over its packets
// (as many as the client takes), or refuses with err.
type traceEngine struct {
	server.Engine // nil: only Trace is called
	mu            sync.Mutex
	packets       []lb.TracePacket
	err           error
	filters       []lb.TraceFilter
}

func (e *traceEngine) Trace(ctx context.Context, f lb.TraceFilter, started func(), emit func(lb.TracePacket) error) (lb.TraceStats, error) {
	e.mu.Lock()
	e.filters = append(e.filters, f)
	e.mu.Unlock()
	if e.err != nil {
		return lb.TraceStats{}, e.err
	}
	started()
	for _, p := range e.packets {
		if err := emit(p); err != nil {
			break
		}
	}
	return lb.TraceStats{Packets: uint64(len(e.packets)), Lost: 1}, nil
}

func tracePackets(t *testing.T) []lb.TracePacket {
	at := time.Date(2026, 12, 1, 17, 0, 0, 123456789, time.UTC)
	var out []lb.TracePacket
	for i, c := range []struct {
		sport  uint16
		flags  string
		server string
		hit    bool
	}{{40000, "S", "198.18.0.21", false}, {40000, "A", "198.18.0.21", true}, {40001, "S", "", false}} {
		f := testutil.Frame{Src: netip.MustParseAddr("198.18.1.10"), Dst: netip.MustParseAddr("198.18.0.100"), Proto: "tcp",
			SrcPort: c.sport, DstPort: 80, Flags: c.flags, Payload: []byte("dlb")}
		data := f.Build(t)
		p := lb.TracePacket{Time: at.Add(time.Duration(i) * time.Millisecond), Interface: 2, Reason: "fwd_tx", Verdict: "tx",
			Hit: c.hit, Proto: 6, Src: netip.AddrPortFrom(f.Src, c.sport), Dst: netip.AddrPortFrom(f.Dst, 80),
			TCPFlags: map[string]uint8{"S": 2, "A": 0x10}[c.flags], Length: len(data), Data: data}
		if c.server != "" {
			p.Server = netip.MustParseAddr(c.server)
		} else {
			p.Reason, p.Verdict = "drop_no_backend", "drop"
		}
		out = append(out, p)
	}
	return out
}

func serveTrace(t *testing.T, e *traceEngine) string {
	return serve(t, server.Handler(e, nil))
}

func TestExecutorTraceLines(t *testing.T) {
	e := &traceEngine{packets: tracePackets(t)}
	sock := serveTrace(t, e)

	r := dlbctl(sock, "executor", "trace", "--cluster", "198.18.0.100@80", "--server", "198.18.0.21",
		"--reason", "fwd_tx,drop_no_backend", "--count", "2")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (--count 2):\n%s", len(lines), r.stdout)
	}
	for i, want := range []string{
		"if2 198.18.1.10:40000 > 198.18.0.100:80 tcp S len 60: tx fwd_tx server 198.18.0.21 conn new",
		"if2 198.18.1.10:40000 > 198.18.0.100:80 tcp A len 60: tx fwd_tx server 198.18.0.21 conn hit",
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d: %q, want ...%q", i, lines[i], want)
		}
	}
	if !strings.Contains(r.stderr, "2 packets traced") {
		t.Errorf("summary: %q", r.stderr)
	}
	f := e.filters[0]
	if f.Cluster != netip.MustParseAddr("198.18.0.100") || f.Port != 80 || f.Server != netip.MustParseAddr("198.18.0.21") ||
		strings.Join(f.Reasons, " ") != "fwd_tx drop_no_backend" {
		t.Errorf("filter %+v", f)
	}

	// Host names stand for the cluster's and the server's addresses.
	r = dlbctl(sock, "executor", "trace", "--cluster", "vip1@80", "--server", "server1", "--count", "1")
	if f := e.filters[len(e.filters)-1]; r.code != exitOK || f.Cluster != netip.MustParseAddr("198.18.0.100") || f.Port != 80 ||
		f.Server != netip.MustParseAddr("198.18.0.21") || !strings.Contains(r.stderr, "vip1 resolved to 198.18.0.100") {
		t.Errorf("host names: exit %d, filter %+v, stderr %q", r.code, f, r.stderr)
	}

	// -o json: one JSON object a line.
	r = dlbctl(sock, "-o", "json", "executor", "trace")
	if r.code != exitOK || strings.Count(r.stdout, "\n") != 3 || !strings.Contains(r.stdout, `"reason":"drop_no_backend"`) {
		t.Errorf("json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// The pcapng file: tcpdump reads it, and each packet's comment holds its
// verdict.
func TestExecutorTracePcapng(t *testing.T) {
	e := &traceEngine{packets: tracePackets(t)}
	sock := serveTrace(t, e)
	file := filepath.Join(t.TempDir(), "trace.pcapng")
	r := dlbctl(sock, "executor", "trace", "-w", file)
	if r.code != exitOK || r.stdout != "" {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dlb: verdict=tx reason=fwd_tx server=198.18.0.21 conn=new ifindex=2",
		"dlb: verdict=tx reason=fwd_tx server=198.18.0.21 conn=hit",
		"dlb: verdict=drop reason=drop_no_backend ifindex=2"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("no comment %q in the file", want)
		}
	}
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		if os.Getenv("DLB_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("tcpdump is missing (make test-deps installs it)")
		}
		t.Skip("tcpdump is missing: make test-deps")
	}
	out, err := exec.Command(tcpdump, "-r", file, "-nn", "-tt").CombinedOutput()
	if err != nil {
		t.Fatalf("tcpdump -r: %v\n%s", err, out)
	}
	got := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "198.18.1.10.4000") && strings.Contains(l, "> 198.18.0.100.80: Flags [") {
			got++
		}
	}
	if got != 3 || !strings.Contains(string(out), "1796144400.123456 IP") {
		t.Errorf("tcpdump read %d of 3 packets (or not their times):\n%s", got, out)
	}
}

func TestExecutorTraceRefusals(t *testing.T) {
	cases := []struct {
		name string
		err  error
		args []string
		code int
		want string
	}{
		{"cluster not an address", nil, []string{"--cluster", "198.18.0.300"}, exitUsage, `--cluster "198.18.0.300"`},
		{"cluster a name that does not resolve", nil, []string{"--cluster", "vip1x@80"}, exitFailed, `--cluster: cannot resolve "vip1x"`},
		{"port 0", nil, []string{"--cluster", "198.18.0.100@0"}, exitUsage, "not a port"},
		{"port 0 of a name", nil, []string{"--cluster", "vip1@0"}, exitUsage, "not a port"},
		{"server not an address", nil, []string{"--server", "198.18.0.300"}, exitUsage, "--server"},
		{"server a name that does not resolve", nil, []string{"--server", "nowhere"}, exitFailed, `--server: cannot resolve "nowhere"`},
		{"negative count", nil, []string{"--count", "-1"}, exitUsage, "--count"},
		{"a trace is running", lb.ErrTraceRunning, nil, exitFailed, "a trace is running"},
		{"unknown reason", lb.Errorf("reason", "nope", "unknown reason"), []string{"--reason", "nope"}, exitFailed, "unknown reason"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &traceEngine{err: c.err}
			sock := serveTrace(t, e)
			r := dlbctl(sock, append([]string{"executor", "trace"}, c.args...)...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, c.code, c.want)
			}
			if c.err == nil && len(e.filters) != 0 {
				t.Error("a refused command reached dlbd")
			}
		})
	}
}
