//go:build linux

package datapath

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedSYNFlood: a flood of spoofed SYNs ten times the size of the
// connection table, to a MAC and a NAT service, interleaved with the
// traffic of established connections of both methods, evicts no
// established connection and leaves every one of them forwarding
// correctly. The executor's answer to a SYN flood: MAC forwarding keeps no
// state for a bare SYN (the handshake cache only), NAT keeps its half-open
// state in a bounded table of its own (nat_halfopen); established
// connections live in tables SYNs never insert into.
func TestPrivilegedSYNFlood(t *testing.T) {
	testutil.RequirePrivileged(t)
	const (
		connTable = 8192
		halfOpen  = 2048
		macConns  = connTable / 2
		natConns  = 2000
		flood     = 10 * connTable // spoofed SYNs per service
		every     = 32             // one established packet per this many SYNs
	)
	e := openTestEnv(t, Options{ConnTableSize: connTable, HalfOpenTableSize: halfOpen})
	rng := rand.New(rand.NewPCG(1, 2))

	// Established connections, through real handshakes.
	type est struct {
		k    FlowKey
		nat  bool
		port uint16 // NAT port
		ack  []byte // a data packet of the connection
	}
	var conns []est
	client := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 128 + byte(i>>8), byte(i)}) }
	for i := 0; i < macConns+natConns; i++ {
		nat := i >= macConns
		vip := vipTCP
		if nat {
			vip = vipNAT
		}
		f := testutil.Frame{Src: client(i), Dst: vip, Proto: "tcp", SrcPort: 40000, DstPort: 80, Flags: "S", Payload: []byte("dlb")}
		if v, _ := e.run(t, f.Build(t)); v != xdpTX {
			t.Fatalf("handshake %d: SYN verdict %d", i, v)
		}
		f.Flags = "A"
		if v, _ := e.run(t, f.Build(t)); v != xdpTX {
			t.Fatalf("handshake %d: ACK verdict %d", i, v)
		}
		f.Flags = "PA"
		c := est{k: FlowKey{Src: client(i), Dst: vip, SrcPort: 40000, DstPort: 80, Proto: 6}, nat: nat, ack: f.Build(t)}
		if nat {
			nf, _, ok := e.getNAT(t, c.k)
			if !ok {
				t.Fatalf("NAT connection %d was not established", i)
			}
			c.port = htons(nf.NatPort)
		} else if _, ok := e.getConn(t, c.k); !ok {
			t.Fatalf("MAC connection %d was not established", i)
		}
		conns = append(conns, c)
	}

	// checkEstablished sends a data packet of c and checks where it went.
	checkEstablished := func(c est) bool {
		v, out := e.run(t, c.ack)
		if v != xdpTX {
			return false
		}
		if !c.nat {
			return bytes.Equal(out[0:6], e.backend[10].MAC)
		}
		// Translated to ret:port -> server:8080, towards the router.
		return bytes.Equal(out[0:6], routerMAC) && bytes.Equal(out[26:30], retAddr.AsSlice()) &&
			binary.BigEndian.Uint16(out[34:]) == c.port && bytes.Equal(out[30:34], natServer.AsSlice())
	}

	// The flood: SYNs from random spoofed sources, alternating between the
	// MAC and the NAT service, rebuilt from a template by changing the
	// source address and port.
	synMAC := tcpTo(vipTCP, 80, 1, "S").Build(t)
	synNAT := tcpTo(vipNAT, 80, 1, "S").Build(t)
	before := e.stats(t)
	started := time.Now()
	misrouted := 0
	for i := 0; i < 2*flood; i++ {
		frame := synMAC
		if i%2 == 1 {
			frame = synNAT
		}
		f := append([]byte(nil), frame...)
		binary.BigEndian.PutUint32(f[26:], 0xc6130000|rng.Uint32()&0xffff) // 198.19.x.y
		binary.BigEndian.PutUint16(f[34:], uint16(1024+rng.IntN(60000)))
		if v, _ := e.run(t, f); v != xdpTX && v != xdpDrop {
			t.Fatalf("flood SYN: verdict %d", v)
		}
		if i%every == 0 && !checkEstablished(conns[rng.IntN(len(conns))]) {
			misrouted++
		}
	}
	elapsed := time.Since(started)
	after := e.stats(t)

	// Count the established connections the flood evicted.
	lostMAC, lostNAT := 0, 0
	for _, c := range conns {
		if c.nat {
			if _, _, ok := e.getNAT(t, c.k); !ok {
				lostNAT++
			}
		} else if _, ok := e.getConn(t, c.k); !ok {
			lostMAC++
		}
		if !checkEstablished(c) {
			misrouted++
		}
	}
	res, err := e.dp.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood: %d spoofed SYNs (%d per service, 10x the %d-entry connection table) in %v, interleaved with %d established packets",
		2*flood, flood, connTable, elapsed.Round(time.Millisecond), 2*flood/every)
	t.Logf("established connections lost: MAC %d of %d, NAT %d of %d; established packets misrouted: %d", lostMAC, macConns, lostNAT, natConns, misrouted)
	t.Logf("flood SYNs forwarded %d, dropped %d (drop_nat_exhausted %d, drop_table_full %d); half-open NAT connections created %d",
		reasonDelta(before, after, "fwd_tx")-uint64(2*flood/every), reasonDelta(before, after, "drop_nat_exhausted")+reasonDelta(before, after, "drop_table_full"),
		reasonDelta(before, after, "drop_nat_exhausted"), reasonDelta(before, after, "drop_table_full"),
		after.Events["halfopen_created"]-before.Events["halfopen_created"])
	t.Logf("after the flood: %d connection entries, half-open per service %v (MAC: handshake cache, NAT: the %d-entry half-open table), NAT ports %+v",
		res.Entries, res.HalfOpen, halfOpen, res.ReturnPools[retAddr])
	if lostMAC != 0 || lostNAT != 0 || misrouted != 0 {
		t.Errorf("the flood cost established connections: MAC %d, NAT %d lost, %d packets misrouted", lostMAC, lostNAT, misrouted)
	}
	if res.Entries != macConns+natConns {
		t.Errorf("%d connection entries after the flood, want %d", res.Entries, macConns+natConns)
	}
	if res.HalfOpen[6] > halfOpen {
		t.Errorf("%d NAT half-open connections, more than the table holds", res.HalfOpen[6])
	}
}
