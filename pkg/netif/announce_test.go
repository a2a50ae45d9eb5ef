//go:build linux

package netif

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
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

// TestSendAllWaitsForRoom: a frame refused for want of room (ENOBUFS) is
// sent again until it goes, every frame in order; one that never goes is
// given up at the deadline, counted in the error; another error is not
// waited on.
func TestSendAllWaitsForRoom(t *testing.T) {
	frames := [][]byte{{1}, {2}, {3}, {4}}
	for _, tc := range []struct {
		name    string
		refuse  func(f []byte, try int) error // the answer to a frame's try-th send (0: the first)
		sent    string                        // the frames sent, in order
		wantErr string
	}{
		{"room", func([]byte, int) error { return nil }, "1234", ""},
		{"full for a while", func(_ []byte, try int) error {
			if try < 3 {
				return unix.ENOBUFS
			}
			return nil
		}, "1234", ""},
		{"full for good", func(f []byte, _ int) error {
			if f[0] == 3 {
				return unix.ENOBUFS
			}
			return nil
		}, "124", "1 of 4 frames not sent: no buffer space available"},
		{"another error", func(f []byte, _ int) error {
			if f[0]%2 == 0 {
				return unix.ENETDOWN
			}
			return nil
		}, "13", "2 of 4 frames not sent: network is down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []byte
			tries := map[byte]int{}
			send := func(f []byte) error {
				err := tc.refuse(f, tries[f[0]])
				tries[f[0]]++
				if err == nil {
					sent = append(sent, '0'+f[0])
				}
				return err
			}
			start := time.Now()
			err := sendAll(frames, send, start.Add(100*time.Millisecond))
			if string(sent) != tc.sent {
				t.Errorf("sent %q, want %q", sent, tc.sent)
			}
			if got := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if tc.name == "another error" && tries[2] != 1 {
				t.Errorf("a frame refused for another reason was tried %d times", tries[2])
			}
		})
	}
}
