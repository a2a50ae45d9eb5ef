package datapath

import (
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// BenchmarkPrivilegedStats100000 reads the counters of 100,000 backends
// (what every manager refresh does): a copy of backend_stats' rows from its memory map.
func BenchmarkPrivilegedStats100000(b *testing.B) {
	testutil.RequirePrivileged(b)
	testutil.InNewNetNS(b)
	const n = 100_000
	d, err := Open(Options{PinDir: newPinDir(b), ConnTableSize: 4096, MaxBackends: 131072})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Remove() })
	var dp lb.Dataplane
	for id := uint32(1); id <= n; id++ {
		dp.Backends = append(dp.Backends, lb.DataplaneBackend{ID: id, Service: 1 + id/100,
			Address: netip.AddrFrom4([4]byte{198, 19, byte(id >> 8), byte(id)}), MAC: mac(byte(id)), SrcMAC: ifaceMAC, Ifindex: 1})
	}
	if err := d.Apply(dp); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		st, err := d.Stats()
		if err != nil {
			b.Fatal(err)
		}
		if len(st.Backends) != n+1 {
			b.Fatalf("counters of %d backend ids, want %d", len(st.Backends), n+1)
		}
	}
}
