package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/dlbproject/dlb/scripts/internal/inetsum"
)

var (
	testDstMAC = net.HardwareAddr{0x02, 0xd1, 0xb0, 0x00, 0x00, 0x15}
	testSrcMAC = net.HardwareAddr{0x02, 0xd1, 0xb0, 0x00, 0x00, 0x0b}
)

// decodeSYN parses f with gopacket, checks that it is exactly the SYN
// labflood means to send, and checks both checksums twice: by summing the
// received bytes, and by re-serializing the decoded layers with gopacket's
// own checksum computation and comparing the bytes.
func decodeSYN(t *testing.T, f []byte, src netip.Prefix, dst netip.Addr, dport uint16) (netip.Addr, uint16) {
	t.Helper()
	pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("decoding: %v", el.Error())
	}
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if eth == nil || tcp == nil {
		t.Fatalf("not Ethernet/IP/TCP: %v", pkt)
	}
	if !bytes.Equal(eth.DstMAC, testDstMAC) || !bytes.Equal(eth.SrcMAC, testSrcMAC) {
		t.Errorf("MACs %v -> %v", eth.SrcMAC, eth.DstMAC)
	}

	var (
		netLayer gopacket.SerializableLayer
		srcIP    net.IP
		dstIP    net.IP
	)
	if dst.Is4() {
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			t.Fatal("no IPv4 layer")
		}
		if eth.EthernetType != layers.EthernetTypeIPv4 || ip.IHL != 5 || ip.Length != 44 ||
			ip.TTL != 64 || ip.Flags != layers.IPv4DontFragment || ip.FragOffset != 0 || ip.Protocol != layers.IPProtocolTCP {
			t.Errorf("IPv4 header: %+v", ip)
		}
		if len(f) != 60 {
			t.Errorf("IPv4 frame is %d bytes, want 60 (padded)", len(f))
		}
		if inetsum.Fold(inetsum.Add(f[ethLen:ethLen+ipv4Len], 0)) != 0 {
			t.Errorf("IPv4 header checksum %#04x does not verify", ip.Checksum)
		}
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		netLayer, srcIP, dstIP = ip, ip.SrcIP, ip.DstIP
	} else {
		ip, _ := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if ip == nil {
			t.Fatal("no IPv6 layer")
		}
		if eth.EthernetType != layers.EthernetTypeIPv6 || ip.Version != 6 || ip.Length != 24 ||
			ip.HopLimit != 64 || ip.NextHeader != layers.IPProtocolTCP || ip.TrafficClass != 0 || ip.FlowLabel != 0 {
			t.Errorf("IPv6 header: %+v", ip)
		}
		if len(f) != 78 {
			t.Errorf("IPv6 frame is %d bytes, want 78", len(f))
		}
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		netLayer, srcIP, dstIP = ip, ip.SrcIP, ip.DstIP
	}

	s, _ := netip.AddrFromSlice(srcIP)
	d, _ := netip.AddrFromSlice(dstIP)
	s, d = s.Unmap(), d.Unmap()
	if d != dst {
		t.Errorf("destination %v, want %v", d, dst)
	}
	if !src.Contains(s) {
		t.Errorf("source %v not in %v", s, src)
	}
	if tcp.DstPort != layers.TCPPort(dport) || tcp.SrcPort < minSrcPort {
		t.Errorf("ports %d -> %d", tcp.SrcPort, tcp.DstPort)
	}
	if !tcp.SYN || tcp.ACK || tcp.RST || tcp.FIN || tcp.PSH || tcp.URG || tcp.ECE || tcp.CWR || tcp.NS ||
		tcp.Ack != 0 || tcp.DataOffset != 6 || tcp.Window != tcpWindow || len(tcp.Payload) != 0 {
		t.Errorf("TCP header: %+v", tcp)
	}
	wantMSS := uint16(mss4)
	if dst.Is6() {
		wantMSS = mss6
	}
	if len(tcp.Options) != 1 || tcp.Options[0].OptionType != layers.TCPOptionKindMSS ||
		len(tcp.Options[0].OptionData) != 2 || binary.BigEndian.Uint16(tcp.Options[0].OptionData) != wantMSS {
		t.Errorf("TCP options: %v", tcp.Options)
	}

	// The receiver's check: the pseudo-header plus the segment sums to 0xffff.
	var pseudo []byte
	if dst.Is4() {
		pseudo = append(pseudo, srcIP.To4()...)
		pseudo = append(pseudo, dstIP.To4()...)
		pseudo = append(pseudo, 0, 6, 0, tcpLen)
	} else {
		pseudo = append(pseudo, srcIP...)
		pseudo = append(pseudo, dstIP...)
		pseudo = append(pseudo, 0, 0, 0, tcpLen, 0, 0, 0, 6)
	}
	seg := tcp.Contents
	if inetsum.Fold(inetsum.Add(seg, inetsum.Add(pseudo, 0))) != 0 {
		t.Errorf("TCP checksum %#04x does not verify", tcp.Checksum)
	}

	// gopacket's own checksums and lengths must give the same bytes.
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, netLayer, tcp); err != nil {
		t.Fatalf("re-serializing: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), f) {
		t.Errorf("frame differs from gopacket's re-serialization:\n got %x\nwant %x", f, buf.Bytes())
	}
	return s, uint16(tcp.SrcPort)
}

func TestFrames(t *testing.T) {
	cases := []struct {
		src         string
		dst         string
		minDistinct int // distinct sources expected among the frames
	}{
		{"198.19.0.0/16", "198.18.0.21", 900},
		{"198.19.0.7/32", "198.18.0.100", 1},
		{"198.19.0.0/30", "198.18.0.100", 4},
		{"0.0.0.0/0", "198.18.0.2", 900},
		{"2001:2:ff::/64", "2001:2::100", 900},
		{"2001:2:ff::/48", "2001:2::100", 900},
		{"2001:2:ff::80/121", "2001:2::21", 100},
		{"2001:2:ff::1/128", "2001:2::100", 1},
	}
	const frames = 1000
	for _, c := range cases {
		t.Run(c.src, func(t *testing.T) {
			src := netip.MustParsePrefix(c.src)
			dst := netip.MustParseAddr(c.dst)
			b := newBuilder(testDstMAC, testSrcMAC, src, dst, 80)
			r := rand.New(rand.NewPCG(1, 2))
			f := make([]byte, b.frameLen())
			seen := map[netip.Addr]bool{}
			ports := map[uint16]bool{}
			for range frames {
				for i := range f {
					f[i] = 0xee // fill must overwrite everything
				}
				b.fill(f, r)
				a, p := decodeSYN(t, f, src, dst, 80)
				seen[a], ports[p] = true, true
				if t.Failed() {
					return
				}
			}
			if len(seen) < c.minDistinct {
				t.Errorf("%d distinct sources, want >= %d", len(seen), c.minDistinct)
			}
			if len(ports) < 900 {
				t.Errorf("%d distinct source ports, want >= 900", len(ports))
			}
		})
	}
}

func TestSourceSpreadsOverPrefix(t *testing.T) {
	// Every address of a /28 shows up, nothing outside it does.
	src := netip.MustParsePrefix("198.19.3.16/28")
	b := newBuilder(testDstMAC, testSrcMAC, src, netip.MustParseAddr("198.18.0.2"), 443)
	r := rand.New(rand.NewPCG(3, 4))
	f := make([]byte, b.frameLen())
	seen := map[netip.Addr]int{}
	for range 2000 {
		b.fill(f, r)
		a, _ := netip.AddrFromSlice(f[ethLen+12 : ethLen+16])
		if !src.Contains(a) {
			t.Fatalf("%v outside %v", a, src)
		}
		seen[a]++
	}
	if len(seen) != 16 {
		t.Errorf("%d of 16 addresses used", len(seen))
	}
}

func TestParseFlags(t *testing.T) {
	base := []string{"-iface", "dlbeth0", "-dst", "198.18.0.21", "-dport", "80",
		"-dstmac", "02:d1:b0:00:00:15", "-src", "198.19.0.0/16", "-count", "50000"}
	cfg, err := parseFlags(base, io.Discard)
	if err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	if cfg.count != 50000 || cfg.dport != 80 || cfg.rate != 0 || cfg.batch != 64 || cfg.workers != 1 ||
		cfg.dstAuto || cfg.src.String() != "198.19.0.0/16" || cfg.timeout != 10*time.Minute {
		t.Errorf("parsed %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-iface", "dlbeth0", "-dst", "2001:2::100", "-dport", "443",
		"-dstmac", "auto", "-src", "2001:2:ff::1/64", "-count", "1", "-rate", "1000", "-json"}, io.Discard)
	if err != nil {
		t.Fatalf("valid IPv6 flags: %v", err)
	}
	if !cfg.dstAuto || cfg.src.String() != "2001:2:ff::/64" || !cfg.json || cfg.rate != 1000 {
		t.Errorf("parsed %+v", cfg)
	}

	with := func(kv ...string) []string {
		args := append([]string(nil), base...)
		for i := 0; i < len(kv); i += 2 {
			found := false
			for j := 0; j < len(args); j += 2 {
				if args[j] == kv[i] {
					args[j+1], found = kv[i+1], true
				}
			}
			if !found {
				args = append(args, kv[i], kv[i+1])
			}
		}
		return args
	}
	bad := map[string][]string{
		"no iface":       with("-iface", ""),
		"long iface":     with("-iface", strings.Repeat("x", 16)),
		"bad dst":        with("-dst", "198.18.0"),
		"multicast dst":  with("-dst", "224.0.0.1"),
		"port 0":         with("-dport", "0"),
		"port too big":   with("-dport", "65536"),
		"no dstmac":      with("-dstmac", ""),
		"short dstmac":   with("-dstmac", "02:d1:b0:00:00"),
		"long dstmac":    with("-dstmac", "02:d1:b0:00:00:15:00:00"),
		"bad srcmac":     with("-srcmac", "nope"),
		"no src":         with("-src", ""),
		"family mix":     with("-src", "2001:2:ff::/64"),
		"count 0":        with("-count", "0"),
		"count too big":  with("-count", "100000001"),
		"rate negative":  with("-rate", "-1"),
		"rate too big":   with("-rate", "10000001"),
		"batch 0":        with("-batch", "0"),
		"batch too big":  with("-batch", "1025"),
		"workers 0":      with("-workers", "0"),
		"workers 17":     with("-workers", "17"),
		"workers > rate": with("-workers", "4", "-rate", "3"),
		"timeout 0":      with("-timeout", "0s"),
		"timeout 2h":     with("-timeout", "2h"),
		"bad seed":       with("-seed", "x"),
		"extra argument": append(with(), "extra"),
	}
	for name, args := range bad {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%s: %q accepted", name, args)
		}
	}
}

func TestRunUsageExit(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-count", "0"}, &out, &errOut); code != 2 {
		t.Errorf("exit %d, want 2; stderr %s", code, errOut.String())
	}
	if code := run([]string{"-h"}, &out, &errOut); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
}

func TestReportLine(t *testing.T) {
	r := Report{Frames: 10, Requested: 10, Seconds: 0.5, PPS: 20, Iface: "dlbeth0", Dst: "198.18.0.21",
		DPort: 80, DstMAC: "02:d1:b0:00:00:15", Src: "198.19.0.0/16", Workers: 1, FrameBytes: 60, Stopped: "done"}
	line := r.line()
	for _, want := range []string{"10/10", "198.18.0.21 port 80", "0.500 s", "20 pps", "as fast as possible", "done"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
}
