//go:build linux

package netif

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestAnnounceFrames(t *testing.T) {
	mac := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 4}
	a := netip.MustParseAddr("198.18.0.100")
	for _, op := range []uint16{1, 2} {
		p := gopacket.NewPacket(garp(op, mac, a), layers.LayerTypeEthernet, gopacket.Default)
		arp, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		if !ok {
			t.Fatalf("op %d: not an ARP frame: %v", op, p)
		}
		if arp.Operation != op || !bytes.Equal(arp.SourceHwAddress, mac) || !bytes.Equal(arp.SourceProtAddress, a.AsSlice()) ||
			!bytes.Equal(arp.DstProtAddress, a.AsSlice()) {
			t.Errorf("op %d: %+v", op, arp)
		}
		if eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); !bytes.Equal(eth.DstMAC, broadcastMAC) {
			t.Errorf("op %d: sent to %s, want broadcast", op, eth.DstMAC)
		}
	}

}
