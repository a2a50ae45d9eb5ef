//go:build linux

package netif

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
)

// An ARP request of Reprobe is what gopacket reads as one: broadcast,
// asking for the target from the given sender.
func TestARPRequestFrame(t *testing.T) {
	mac := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 4}
	src, target := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.21")
	frame := arpFrame(1, broadcastMAC, mac, src, net.HardwareAddr{0, 0, 0, 0, 0, 0}, target)
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if !ok {
		t.Fatalf("not an ARP frame: %v", p)
	}
	if a.Operation != layers.ARPRequest || !bytes.Equal(a.SourceHwAddress, mac) || !bytes.Equal(a.SourceProtAddress, src.AsSlice()) ||
		!bytes.Equal(a.DstProtAddress, target.AsSlice()) || a.AddrType != layers.LinkTypeEthernet || a.Protocol != layers.EthernetTypeIPv4 {
		t.Errorf("ARP %+v", a)
	}
	if eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); !bytes.Equal(eth.DstMAC, broadcastMAC) || !bytes.Equal(eth.SrcMAC, mac) {
		t.Errorf("Ethernet %v -> %v", eth.SrcMAC, eth.DstMAC)
	}
	if _, ok := parseARPReply(frame); ok {
		t.Error("a request parsed as a reply")
	}
}

// parseARPReply reads replies as gopacket writes them and refuses
// everything else.
func TestParseARPReply(t *testing.T) {
	server, ours := net.HardwareAddr{2, 0, 0, 0, 0, 0x21}, net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}
	build := func(mod func(*layers.Ethernet, *layers.ARP)) []byte {
		eth := &layers.Ethernet{SrcMAC: server, DstMAC: ours, EthernetType: layers.EthernetTypeARP}
		a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPReply, SourceHwAddress: server, SourceProtAddress: []byte{198, 18, 0, 21},
			DstHwAddress: ours, DstProtAddress: []byte{198, 18, 0, 1}}
		if mod != nil {
			mod(eth, a)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, eth, a); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	r, ok := parseARPReply(build(nil))
	if !ok || r.sender != netip.MustParseAddr("198.18.0.21") || r.target != netip.MustParseAddr("198.18.0.1") ||
		!bytes.Equal(r.senderMAC, server) || !bytes.Equal(r.targetMAC, ours) {
		t.Errorf("reply read as %+v (%v)", r, ok)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"request", build(func(_ *layers.Ethernet, a *layers.ARP) { a.Operation = layers.ARPRequest })},
		{"not IPv4", build(func(_ *layers.Ethernet, a *layers.ARP) { a.Protocol = layers.EthernetTypeIPv6 })},
		{"not ARP", build(func(e *layers.Ethernet, _ *layers.ARP) { e.EthernetType = layers.EthernetTypeIPv4 })},
		{"short", build(nil)[:41]},
		{"empty", nil},
	} {
		if r, ok := parseARPReply(tc.frame); ok {
			t.Errorf("%s: read as %+v", tc.name, r)
		}
	}
}

// arpSource asks from the interface's address on the target's subnet, and
// from nothing else (a cluster address on the interface is no sender).
func TestARPSource(t *testing.T) {
	addr := func(s string) netlink.Addr {
		p := netip.MustParsePrefix(s)
		return netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
	}
	own := []netlink.Addr{addr("198.18.0.100/32"), addr("198.18.0.2/24"), addr("198.18.5.1/30"), {}}
	for _, tc := range []struct {
		target, want string // want "": none
	}{
		{"198.18.0.21", "198.18.0.2"},
		{"198.18.5.2", "198.18.5.1"},
		{"198.18.5.9", ""},
		{"198.19.0.1", ""},
		{"198.18.0.2", ""},
	} {
		got, ok := arpSource(own, netip.MustParseAddr(tc.target))
		if want := tc.want != ""; ok != want || (ok && got.String() != tc.want) {
			t.Errorf("arpSource(%s) = %v, %v; want %q", tc.target, got, ok, tc.want)
		}
	}
}
