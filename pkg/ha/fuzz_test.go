package ha

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// FuzzDecode feeds heartbeat bodies, signed with the key so that the
// fields behind the MAC are what is fuzzed: decode must not panic, and a
// heartbeat it accepts must encode back to the same datagram (so every
// field it read is within what encode writes).
func FuzzDecode(f *testing.F) {
	m := message{Healthy: true, Boot: 7, Seq: 9, Role: lb.RoleBoth, Recovery: lb.RecoveryManual,
		Groups: [2]groupWire{{State: lb.HAActive, Released: 5}, {State: lb.HAPreempt, Want: true}}, GraceSeconds: 30}
	f.Add(m.encode(testKey)[:bodySize])
	f.Add((&message{Boot: 1, Seq: 1}).encode(testKey)[:bodySize])
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, body []byte) {
		mac := hmac.New(sha256.New, testKey)
		mac.Write(body)
		b := mac.Sum(append([]byte(nil), body...))
		got, err := decode(b, testKey)
		if err != nil {
			return
		}
		// Bits and bytes decode ignores (reserved flags, a Want byte
		// other than 0 or 1) are written back as encode writes them:
		// decoding the re-encoded datagram must give the same message.
		again, err := decode(got.encode(testKey), testKey)
		if err != nil || again != got {
			t.Fatalf("accepted %+v, which encodes to %+v, %v", got, again, err)
		}
	})
}

// FuzzDecodeData feeds replication data payloads (authenticated by the
// stream's MAC before they are decoded): decodeData must not panic, and
// the records it accepts must encode back to records that decode equal.
func FuzzDecodeData(f *testing.F) {
	recs := []lb.ConnRecord{
		{Kind: lb.ConnMAC, Protocol: 6, Client: netip.MustParseAddrPort("198.18.0.1:40000"),
			Cluster: netip.MustParseAddrPort("198.18.0.100:80"), Server: netip.MustParseAddr("198.18.0.11"), Age: time.Second},
		{Kind: lb.ConnNATFlow, Protocol: 17, Closing: true, Client: netip.MustParseAddrPort("[2001:2::1]:5353"),
			Cluster: netip.MustParseAddrPort("[2001:2::100]:53"), Server: netip.MustParseAddr("2001:2::11"),
			NAT: netip.MustParseAddrPort("[2001:2::200]:61000")},
	}
	f.Add(dataPayload(time.Unix(1, 2), recs))
	f.Add(dataPayload(time.Unix(0, 0), nil))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		sent, got, err := decodeData(b)
		if err != nil {
			return
		}
		_, again, err := decodeData(dataPayload(sent, got))
		if err != nil || len(again) != len(got) {
			t.Fatalf("accepted %d records, which encode to %d, %v", len(got), len(again), err)
		}
		for i := range got {
			if again[i] != got[i] {
				t.Fatalf("record %d: accepted %+v, which encodes to %+v", i, got[i], again[i])
			}
		}
	})
}

// FuzzReadFrame feeds a replication stream after its handshake: frames
// with any length, type and MAC. readFrame must not panic, must refuse a
// frame over maxFrame before reading it, and must accept only frames
// signed with the stream's key in sequence.
func FuzzReadFrame(f *testing.F) {
	key := []byte("stream key")
	var good bytes.Buffer
	w := &conn{c: writerConn{w: &good}, key: key, dir: 'c'}
	_ = w.writeFrame(frameData, dataPayload(time.Unix(1, 0), nil))
	_ = w.writeFrame(frameMarker, markerPayload(time.Unix(1, 0), 3, true))
	f.Add(good.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, frameData})
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := &conn{r: bufio.NewReader(bytes.NewReader(stream)), key: key, dir: 's'}
		for range 64 {
			typ, payload, err := c.readFrame()
			if err != nil {
				return
			}
			if len(payload) > maxFrame {
				t.Fatalf("accepted a frame of %d bytes", len(payload))
			}
			if typ == frameMarker {
				_, _, _, _ = decodeMarker(payload)
			}
		}
	})
}

// writerConn is a net.Conn whose writes go to w (only Write is used).
type writerConn struct {
	net.Conn
	w io.Writer
}

func (c writerConn) Write(b []byte) (int, error) { return c.w.Write(b) }

// TestDecodeRecordFamilies checks that an IPv4 record whose addresses are
// not IPv4-mapped is refused (found by FuzzDecodeData: it decoded to IPv6
// addresses in an IPv4 record), and that records of both families, with
// and without a NAT address, round-trip.
func TestDecodeRecordFamilies(t *testing.T) {
	v4 := lb.ConnRecord{Kind: lb.ConnNATFlow, Protocol: 6, Client: netip.MustParseAddrPort("198.18.0.1:40000"),
		Cluster: netip.MustParseAddrPort("198.18.0.100:80"), Server: netip.MustParseAddr("198.18.1.11"),
		NAT: netip.MustParseAddrPort("198.18.1.200:61000"), Age: time.Second}
	v6 := lb.ConnRecord{Kind: lb.ConnMAC, Protocol: 17, Client: netip.MustParseAddrPort("[::ffff:198.18.0.1]:53"),
		Cluster: netip.MustParseAddrPort("[2001:2::100]:53"), Server: netip.MustParseAddr("2001:2::11")}
	noNAT := v4
	noNAT.Kind, noNAT.NAT = lb.ConnMAC, netip.AddrPort{}
	encoded := func(r lb.ConnRecord) []byte {
		b := make([]byte, recordSize)
		encodeRecord(b, r)
		return b
	}
	tests := []struct {
		name   string
		b      []byte
		want   lb.ConnRecord
		refuse bool
	}{
		{name: "IPv4 with NAT", b: encoded(v4), want: v4},
		{name: "IPv4 without NAT", b: encoded(noNAT), want: noNAT},
		{name: "IPv6, a mapped client", b: encoded(v6), want: v6},
	}
	for _, off := range []int{4, 22, 40, 56} {
		b := encoded(v4)
		copy(b[off:], netip.MustParseAddr("2001:2::1").AsSlice())
		tests = append(tests, struct {
			name   string
			b      []byte
			want   lb.ConnRecord
			refuse bool
		}{name: "IPv4 with an IPv6 address at " + strconv.Itoa(off), b: b, refuse: true})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRecord(tc.b)
			if tc.refuse {
				if !errors.Is(err, errMalformed) {
					t.Fatalf("decoded %+v, %v; want it refused as malformed", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("decoded %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
