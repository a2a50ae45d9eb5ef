package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/dlbproject/dlb/scripts/internal/inetsum"
)

// checkTCPQuote checks the 8 quoted TCP bytes.
func checkTCPQuote(t *testing.T, b []byte, sport, dport uint16, seq uint32) {
	t.Helper()
	if len(b) != 8 {
		t.Fatalf("TCP quote is %d bytes, want 8", len(b))
	}
	if got := binary.BigEndian.Uint16(b[0:]); got != sport {
		t.Errorf("quoted source port %d, want %d", got, sport)
	}
	if got := binary.BigEndian.Uint16(b[2:]); got != dport {
		t.Errorf("quoted destination port %d, want %d", got, dport)
	}
	if got := binary.BigEndian.Uint32(b[4:]); got != seq {
		t.Errorf("quoted sequence number %d, want %d", got, seq)
	}
}

func TestFragNeeded(t *testing.T) {
	tests := []struct {
		server, client string
		seq            uint32
		mtu            uint16
	}{
		{"198.18.0.100:80", "198.18.0.11:40000", 0x12345678, 1200},
		{"198.18.1.11:8080", "198.18.0.3:1024", 0, 576},
		{"198.18.0.100:65535", "198.18.0.12:65535", 0xffffffff, 65535},
	}
	for _, tt := range tests {
		t.Run(tt.server+"-"+tt.client, func(t *testing.T) {
			server, client := netip.MustParseAddrPort(tt.server), netip.MustParseAddrPort(tt.client)
			b := fragNeeded(server, client, tt.seq, tt.mtu)
			if len(b) != 36 {
				t.Fatalf("message is %d bytes, want 36", len(b))
			}
			// Independent check of both checksums: a correct one makes the
			// one's complement sum of the covered bytes 0xffff.
			if inetsum.Fold(inetsum.Add(b, 0)) != 0 {
				t.Errorf("ICMP checksum does not verify")
			}
			if inetsum.Fold(inetsum.Add(b[8:28], 0)) != 0 {
				t.Errorf("quoted IPv4 header checksum does not verify")
			}

			var icmp layers.ICMPv4
			if err := icmp.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if icmp.TypeCode != layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded) {
				t.Errorf("type/code %v", icmp.TypeCode)
			}
			if icmp.Id != 0 || icmp.Seq != tt.mtu { // gopacket's names for "unused" and "next-hop MTU"
				t.Errorf("unused %d, MTU %d; want 0, %d", icmp.Id, icmp.Seq, tt.mtu)
			}
			// gopacket recomputes the ICMP checksum: the bytes must match.
			buf := gopacket.NewSerializeBuffer()
			re := layers.ICMPv4{TypeCode: icmp.TypeCode, Id: icmp.Id, Seq: icmp.Seq}
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, &re, gopacket.Payload(icmp.Payload)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), b) {
				t.Errorf("gopacket re-serialized\n%x\nwant\n%x", buf.Bytes(), b)
			}

			var ip layers.IPv4
			if err := ip.DecodeFromBytes(b[8:], gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if ip.Version != 4 || ip.IHL != 5 || ip.Length != 1500 || ip.Protocol != layers.IPProtocolTCP ||
				ip.Flags != layers.IPv4DontFragment || ip.FragOffset != 0 || ip.TTL != 64 {
				t.Errorf("quoted IPv4 header %+v", ip)
			}
			if !ip.SrcIP.Equal(server.Addr().AsSlice()) || !ip.DstIP.Equal(client.Addr().AsSlice()) {
				t.Errorf("quoted %v -> %v, want %v -> %v", ip.SrcIP, ip.DstIP, server.Addr(), client.Addr())
			}
			// gopacket recomputes the header checksum.
			hb := gopacket.NewSerializeBuffer()
			if err := ip.SerializeTo(hb, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(hb.Bytes(), b[8:28]) {
				t.Errorf("gopacket re-serialized the quoted header as\n%x\nwant\n%x", hb.Bytes(), b[8:28])
			}
			checkTCPQuote(t, b[28:], server.Port(), client.Port(), tt.seq)
		})
	}
}

func TestPacketTooBig(t *testing.T) {
	tests := []struct {
		server, client string
		seq, mtu       uint32
	}{
		{"[2001:2::100]:80", "[2001:2::11]:40000", 0xdeadbeef, 1280},
		{"[2001:2:1::11]:443", "[2001:2::3]:1024", 1, 1500},
	}
	for _, tt := range tests {
		t.Run(tt.server+"-"+tt.client, func(t *testing.T) {
			server, client := netip.MustParseAddrPort(tt.server), netip.MustParseAddrPort(tt.client)
			b := packetTooBig(server, client, tt.seq, tt.mtu)
			if len(b) != 56 {
				t.Fatalf("message is %d bytes, want 56", len(b))
			}
			var icmp layers.ICMPv6
			if err := icmp.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if icmp.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0) {
				t.Errorf("type/code %v", icmp.TypeCode)
			}
			if icmp.Checksum != 0 {
				t.Errorf("checksum %#x, want 0 (the kernel fills it in)", icmp.Checksum)
			}
			if got := binary.BigEndian.Uint32(icmp.Payload); got != tt.mtu {
				t.Errorf("MTU %d, want %d", got, tt.mtu)
			}

			// With the checksum the kernel would compute for a given source,
			// gopacket must decode and re-serialize the message identically.
			src := netip.MustParseAddr("2001:2::11")
			withSum := append([]byte(nil), b...)
			binary.BigEndian.PutUint16(withSum[2:], icmp6Checksum(src, server.Addr(), withSum))
			outer := &layers.IPv6{SrcIP: src.AsSlice(), DstIP: server.Addr().AsSlice(), NextHeader: layers.IPProtocolICMPv6}
			re := layers.ICMPv6{TypeCode: icmp.TypeCode}
			if err := re.SetNetworkLayerForChecksum(outer); err != nil {
				t.Fatal(err)
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, &re, gopacket.Payload(icmp.Payload)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), withSum) {
				t.Errorf("gopacket serialized\n%x\nwant\n%x", buf.Bytes(), withSum)
			}

			var ip layers.IPv6
			if err := ip.DecodeFromBytes(b[8:], gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if ip.Version != 6 || ip.Length != 1460 || ip.NextHeader != layers.IPProtocolTCP || ip.HopLimit != 64 ||
				ip.TrafficClass != 0 || ip.FlowLabel != 0 {
				t.Errorf("quoted IPv6 header %+v", ip)
			}
			if !ip.SrcIP.Equal(server.Addr().AsSlice()) || !ip.DstIP.Equal(client.Addr().AsSlice()) {
				t.Errorf("quoted %v -> %v, want %v -> %v", ip.SrcIP, ip.DstIP, server.Addr(), client.Addr())
			}
			checkTCPQuote(t, b[48:], server.Port(), client.Port(), tt.seq)
		})
	}
}

// icmp6Checksum is the ICMPv6 checksum of msg from src to dst, as the
// kernel computes it (tests only).
func icmp6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	s, d := src.As16(), dst.As16()
	sum := inetsum.Add(s[:], 0)
	sum = inetsum.Add(d[:], sum)
	sum += uint32(len(msg)) + 58
	return inetsum.Fold(inetsum.Add(msg, sum))
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr bool
		wantMTU int
	}{
		{[]string{"-target", "198.18.0.100:80", "-conns", "10"}, false, 1200},
		{[]string{"-target", "[2001:2::100]:80", "-conns", "10"}, false, 1280},
		{[]string{"-target", "[::ffff:198.18.0.100]:80", "-conns", "1"}, false, 1200},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1000", "-mtu", "576", "-hold", "0s", "-timeout", "1s", "-json"}, false, 576},
		{[]string{"-target", "198.18.0.100:80"}, true, 0},
		{[]string{"-conns", "1"}, true, 0},
		{[]string{"-target", "198.18.0.100", "-conns", "1"}, true, 0},
		{[]string{"-target", "lab:80", "-conns", "1"}, true, 0},
		{[]string{"-target", "2001:2::100:80", "-conns", "1"}, true, 0},
		{[]string{"-target", "[fe80::1%eth0]:80", "-conns", "1"}, true, 0},
		{[]string{"-target", "198.18.0.100:0", "-conns", "1"}, true, 0},
		{[]string{"-target", "0.0.0.0:80", "-conns", "1"}, true, 0},
		{[]string{"-target", "[ff02::1]:80", "-conns", "1"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "0"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1001"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1", "-mtu", "-1"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1", "-mtu", "65536"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1", "-hold", "-1s"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1", "-hold", "11m"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1", "-timeout", "0s"}, true, 0},
		{[]string{"-target", "198.18.0.100:80", "-conns", "1", "extra"}, true, 0},
		{[]string{"-nope"}, true, 0},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseFlags error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && cfg.mtu != tt.wantMTU {
				t.Errorf("mtu = %d, want %d", cfg.mtu, tt.wantMTU)
			}
		})
	}
}

func TestRunUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"-h"}, 0},
		{nil, 2},
		{[]string{"-target", "198.18.0.100:80", "-conns", "0"}, 2},
	} {
		if got := run(tt.args, io.Discard, io.Discard); got != tt.want {
			t.Errorf("run(%q) = %d, want %d", tt.args, got, tt.want)
		}
	}
}

func TestBackendName(t *testing.T) {
	tests := []struct{ header, body, want string }{
		{"b1", "x\n", "b1"},
		{"", "b2\nmore", "b2"},
		{"", "", unknownBackend},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.header != "" {
			h.Set("X-Backend", tt.header)
		}
		if got := backendName(h, tt.body); got != tt.want {
			t.Errorf("backendName(%q, %q) = %q, want %q", tt.header, tt.body, got, tt.want)
		}
	}
}

// labServer is a loopback stand-in for labhttpd behind the load balancer:
// connection i (from 1) is served by backend "b<1+i%2>".
func labServer(t *testing.T, network, addr string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	var conns, requests atomic.Int64
	type key struct{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		name := fmt.Sprint("b", 1+r.Context().Value(key{}).(int64)%2)
		w.Header().Set("X-Backend", name)
		if r.Host != "lab" {
			http.Error(w, "bad host "+r.Host, http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, name+"\n")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, key{}, conns.Add(1))
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &requests
}

// TestOpenFlowsLoopback runs the connection part against a loopback
// server. Without root, learning the sequence number fails, which must
// show up as one error per flow while the flows are kept.
func TestOpenFlowsLoopback(t *testing.T) {
	srv, requests := labServer(t, "tcp4", "127.0.0.1:0")
	cfg := config{target: netip.MustParseAddrPort(srv.Listener.Addr().String()), conns: 6, timeout: 2 * time.Second}
	conns, flows, errs := openFlows(context.Background(), cfg)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if len(conns) != 6 || len(flows) != 6 || requests.Load() != 6 {
		t.Fatalf("%d conns, %d flows, %d requests, errors %q", len(conns), len(flows), requests.Load(), errs)
	}
	per := map[string]int{}
	seen := map[string]bool{}
	for i, f := range flows {
		per[f.Backend]++
		if seen[f.Local] {
			t.Errorf("flow %d: local %s twice", i, f.Local)
		}
		seen[f.Local] = true
		if f.Local != conns[i].LocalAddr().String() {
			t.Errorf("flow %d: local %s, connection %s", i, f.Local, conns[i].LocalAddr())
		}
	}
	if per["b1"] != 3 || per["b2"] != 3 {
		t.Errorf("per backend %v, want 3 and 3", per)
	}
	if os.Geteuid() == 0 {
		if len(errs) != 0 {
			t.Errorf("errors as root: %q", errs)
		}
	} else if len(errs) != 6 || !strings.Contains(errs[0], "sequence number") {
		t.Errorf("errors without root: %q", errs)
	}
	// The connections are still usable: keep-alive.
	for _, c := range conns {
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("second request on %s: %v", c.LocalAddr(), err)
		}
		resp.Body.Close()
	}
}

func TestOpenFlowsRefused(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	var out strings.Builder
	code := run([]string{"-target", addr.String(), "-conns", "2", "-hold", "0s", "-json"}, &out, io.Discard)
	if code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Flows) != 0 || rep.Sent != 0 || len(rep.Errors) != 2 || rep.MTU != 1200 || rep.Target != addr.String() {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(out.String(), `"flows":[]`) || !strings.Contains(out.String(), `"per_backend":{}`) {
		t.Errorf("JSON has null lists: %s", out.String())
	}
}

// TestRepairSeq checks, as root, that the sequence number read from the
// client socket is the server's SND.NXT.
func TestRepairSeq(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("TCP_REPAIR needs root")
	}
	for _, tt := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tt.network, func(t *testing.T) {
			ln, err := net.Listen(tt.network, tt.addr)
			if err != nil {
				t.Skipf("no %s loopback: %v", tt.network, err)
			}
			defer ln.Close()
			client, err := net.Dial(tt.network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			const msg = "hello from the server"
			if _, err := io.WriteString(server, msg); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(client, buf); err != nil {
				t.Fatal(err)
			}
			got, err := learnSeq(client.(*net.TCPConn))
			if err != nil {
				t.Fatal(err)
			}
			want, err := repairSeq(server.(*net.TCPConn), tcpSendQueue)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("client RCV.NXT %d, server SND.NXT %d", got, want)
			}
			// Both sockets work after leaving repair mode.
			if _, err := io.WriteString(client, "ping"); err != nil {
				t.Fatal(err)
			}
			_ = server.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.ReadFull(server, buf[:4]); err != nil || string(buf[:4]) != "ping" {
				t.Fatalf("after repair: %q, %v", buf[:4], err)
			}
		})
	}
}

// helperEnv makes the test binary run TestInNetns's body: inside a network
// namespace of its own, made by TestInNetns.
const helperEnv = "DLBT_LABICMP_NETNS_HELPER"

// TestInNetns runs labicmp for real, as root, inside a throwaway network
// namespace (so the PMTU it lowers is not the host's): against a loopback
// server over IPv4 and IPv6, it checks that the kernel took every ICMP
// error as in-window (InDestUnreachs / Icmp6InPktTooBigs up, TcpExt
// OutOfWindowIcmps not).
func TestInNetns(t *testing.T) {
	if os.Getenv(helperEnv) == "1" {
		netnsHelper(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	ns := fmt.Sprintf("dlbticmp%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	defer func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", ns, err, out)
		}
	}()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestInNetns$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
}

// netnsHelper is TestInNetns inside the namespace.
func netnsHelper(t *testing.T) {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
	tests := []struct {
		network, addr    string
		inCounter, proto string
	}{
		{"tcp4", "127.0.0.1:0", "InDestUnreachs", "Icmp"},
		{"tcp6", "[::1]:0", "Icmp6InPktTooBigs", ""},
	}
	for _, tt := range tests {
		t.Run(tt.network, func(t *testing.T) {
			srv, _ := labServer(t, tt.network, tt.addr)
			in0 := counter(t, tt.proto, tt.inCounter)
			oow0 := counter(t, "TcpExt", "OutOfWindowIcmps")
			var out strings.Builder
			code := run([]string{"-target", srv.Listener.Addr().String(), "-conns", "4", "-hold", "100ms", "-json"}, &out, io.Discard)
			var rep Report
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if code != 0 || rep.Sent != 4 || len(rep.Flows) != 4 || len(rep.Errors) != 0 ||
				rep.PerBackend["b1"] != 2 || rep.PerBackend["b2"] != 2 {
				t.Fatalf("run = %d, report %s", code, out.String())
			}
			// The ICMP errors are delivered through lo; give the kernel a moment.
			deadline := time.Now().Add(2 * time.Second)
			for counter(t, tt.proto, tt.inCounter)-in0 < 4 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if d := counter(t, tt.proto, tt.inCounter) - in0; d != 4 {
				t.Errorf("%s went up by %d, want 4", tt.inCounter, d)
			}
			if d := counter(t, "TcpExt", "OutOfWindowIcmps") - oow0; d != 0 {
				t.Errorf("OutOfWindowIcmps went up by %d: the quoted sequence numbers were wrong", d)
			}
		})
	}
}

// counter reads a counter from /proc/net/snmp, /proc/net/netstat (proto
// is the row's prefix, e.g. "Icmp" or "TcpExt") or, with proto "",
// /proc/net/snmp6 (name is the full name).
func counter(t *testing.T, proto, name string) int64 {
	t.Helper()
	if proto == "" {
		b, err := os.ReadFile("/proc/net/snmp6")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == name {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
		t.Fatalf("no %s in /proc/net/snmp6", name)
	}
	for _, file := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i++ {
			names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			if len(names) == 0 || names[0] != proto+":" || len(values) != len(names) || values[0] != proto+":" {
				continue
			}
			for j, n := range names {
				if n == name {
					v, _ := strconv.ParseInt(values[j], 10, 64)
					return v
				}
			}
		}
	}
	t.Fatalf("no %s %s counter", proto, name)
	return 0
}
