//go:build linux

package datapath

import (
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// affinityCases are the affinity cases of the data-path table: records
// followed and ignored (expiry, selection, removed servers), subnets,
// crossport, and when records are written.
func affinityCases(t testing.TB, e *testEnv) []dpCase {
	build := func(f testutil.Frame) []byte { return f.Build(t) }
	svc := e.service(14)
	// The backend of :80 that the Maglev slot of clientAddr's /24 names,
	// and the other one.
	hashed := 90 + AffinityHash(clientAddr, affinityGroup(svc), 24, 64, DefaultHashSeed)%e.tableM%2
	other := 90 + (hashed-90+1)%2
	svc6 := e.service(18)
	hashed6 := 98 + AffinityHash(client6, affinityGroup(svc6), 24, 64, DefaultHashSeed)%e.tableM%2
	other6b := 98 + (hashed6-98+1)%2
	neighbour := netip.MustParseAddr("198.18.1.77")     // same /24 as clientAddr
	stranger := netip.MustParseAddr("198.18.9.10")      // another /24
	neighbour6 := netip.MustParseAddr("2001:2:0:1::99") // same /64 as client6
	from := func(src netip.Addr, dst netip.Addr, dport, sport uint16, flags string) testutil.Frame {
		return testutil.Frame{Src: src, Dst: dst, Proto: "tcp", SrcPort: sport, DstPort: dport, Flags: flags, Payload: []byte("dlb")}
	}
	record := func(client netip.Addr, service, b uint32, age uint64) func(t *testing.T) {
		return func(t *testing.T) { e.putAffinity(t, client, service, b, age) }
	}
	hit := map[string]uint64{"affinity_hit": 1}
	noRecord := func(t *testing.T) {
		if r, ok := e.affinityOf(t, clientAddr, 14); ok {
			t.Errorf("a bare SYN wrote an affinity record %+v", r)
		}
	}
	recordOn := func(client netip.Addr, service, b uint32) func(t *testing.T) {
		return func(t *testing.T) {
			r, ok := e.affinityOf(t, client, service)
			if !ok || r.Backend != b || r.Service != service {
				t.Errorf("affinity record %+v (present %v), want backend %d", r, ok, b)
			}
			if now := monotonicNow(); r.LastSeen > now || now-r.LastSeen > 5e9 {
				t.Errorf("record last used %d ns ago", now-r.LastSeen)
			}
		}
	}
	strangerHashed := 90 + AffinityHash(stranger, affinityGroup(svc), 24, 64, DefaultHashSeed)%e.tableM%2

	return []dpCase{
		{name: "affinity record sends a new connection to its server", frame: build(from(clientAddr, vipAff, 80, 8000, "S")),
			setup: record(clientAddr, 14, other, 10), want: xdpTX, reason: "fwd_tx", to: other, events: hit},
		{name: "affinity record is followed by a client of the same subnet", frame: build(from(neighbour, vipAff, 80, 8001, "S")),
			setup: record(clientAddr, 14, other, 10), want: xdpTX, reason: "fwd_tx", to: other, events: hit},
		{name: "affinity record of another subnet is not followed", frame: build(from(stranger, vipAff, 80, 8002, "S")),
			setup: record(clientAddr, 14, 90+(strangerHashed-90+1)%2, 10), want: xdpTX, reason: "fwd_tx", to: strangerHashed,
			events: map[string]uint64{"affinity_hit": 0}},
		{name: "expired affinity record is ignored", frame: build(from(clientAddr, vipAff, 80, 8003, "S")),
			setup: func(t *testing.T) { e.withTimeouts(t, 14, 300, 60, 2); e.putAffinity(t, clientAddr, 14, other, 3) }, want: xdpTX, reason: "fwd_tx", to: hashed, events: map[string]uint64{"affinity_hit": 0}},
		{name: "affinity service without a record picks the client's slot and a SYN writes no record", frame: build(from(clientAddr, vipAff, 80, 8004, "S")),
			want: xdpTX, reason: "fwd_tx", to: hashed, check: noRecord},
		{name: "affinity parallel connections of a new client agree on the server", frame: build(from(clientAddr, vipAff, 80, 8005, "S")),
			setup: func(t *testing.T) {
				for sport := uint16(8100); sport < 8110; sport++ {
					if _, out := e.run(t, build(from(clientAddr, vipAff, 80, sport, "S"))); string(out[:6]) != string(e.backend[hashed].MAC) {
						t.Fatalf("SYN from port %d went to %x", sport, out[:6])
					}
				}
			},
			want: xdpTX, reason: "fwd_tx", to: hashed},
		{name: "affinity handshake ACK writes the record", frame: build(from(clientAddr, vipAff, 80, 8006, "A")),
			setup: func(t *testing.T) { e.run(t, build(from(clientAddr, vipAff, 80, 8006, "S"))) },
			want:  xdpTX, reason: "fwd_tx", to: hashed, newConn: map[uint32]uint64{hashed: 1},
			events: map[string]uint64{"affinity_written": 1}, check: recordOn(clientAddr, 14, hashed)},
		{name: "affinity FIN refreshes the record", frame: build(from(clientAddr, vipAff, 80, 8007, "FA")),
			before: []conn{{key: FlowKey{Src: clientAddr, Dst: vipAff, SrcPort: 8007, DstPort: 80, Proto: 6}, backend: other, service: 14}},
			setup:  record(clientAddr, 14, other, 10), want: xdpTX, reason: "fwd_tx", to: other, finConn: map[uint32]uint64{other: 1},
			check: recordOn(clientAddr, 14, other)},
		{name: "crossport record written on one port is followed on another", frame: build(from(clientAddr, vipAff, 443, 8008, "S")),
			setup: record(clientAddr, 14, 90, 10), want: xdpTX, reason: "fwd_tx", to: 92, events: hit},
		{name: "conn+affin ignores a record whose server is quiesced", frame: build(from(clientAddr, vipAff, 8080, 8009, "S")),
			setup: record(clientAddr, 16, 94, 10), want: xdpTX, reason: "fwd_tx", to: 95, events: map[string]uint64{"affinity_hit": 0}},
		{name: "affinity follows a record whose server is quiesced", frame: build(from(clientAddr, vipAff, 8081, 8010, "S")),
			setup: record(clientAddr, 17, 96, 10), want: xdpTX, reason: "fwd_tx", to: 96, events: hit},
		{name: "affinity record of a removed server is ignored", frame: build(from(clientAddr, vipAff, 80, 8011, "S")),
			setup: func(t *testing.T) {
				e.putAffinity(t, clientAddr, 14, other, 10)
				// The record names another server than the backend slot holds.
				r, _ := e.affinityOf(t, clientAddr, 14)
				ak := affinityKey(clientAddr, affinityGroup(svc), 24, 64)
				r.Server.Addr[3] = 99
				if err := e.dp.objs.Affinity.Put(&ak, &r); err != nil {
					t.Fatal(err)
				}
			},
			want: xdpTX, reason: "fwd_tx", to: hashed},
		{name: "IPv6 affinity record is followed by a client of the same /64", frame: build(from(neighbour6, vip6Aff, 80, 8012, "S")),
			setup: record(client6, 18, other6b, 10), want: xdpTX, reason: "fwd_tx", to: other6b, events: hit},
		{name: "IPv6 affinity service without a record picks the subnet's slot", frame: build(from(neighbour6, vip6Aff, 80, 8013, "S")),
			want: xdpTX, reason: "fwd_tx", to: hashed6},
		{name: "service without stickytime keeps no affinity record", frame: build(from(clientAddr, vipTCP, 80, 8014, "A")),
			want: xdpTX, reason: "fwd_tx", to: 10, newConn: map[uint32]uint64{10: 1},
			events: map[string]uint64{"affinity_written": 0, "affinity_hit": 0},
			check: func(t *testing.T) {
				if r, ok := e.affinityOf(t, clientAddr, 1); ok {
					t.Errorf("affinity record %+v", r)
				}
			}},
	}
}
