//go:build linux

package datapath

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedConcurrentFirstPackets: the first non-SYN packets of a
// connection (its handshake ACK and its first data segment, or two
// datagrams of a new UDP flow) often reach the executor on two CPUs at
// once. Both miss the connection table; only one may insert the flow and
// count it as a new connection, and both must go to the same backend. Two
// threads pinned to different CPUs run the first packet of each flow in
// lockstep, so that the two runs overlap as closely as they can.
func TestPrivilegedConcurrentFirstPackets(t *testing.T) {
	testutil.RequirePrivileged(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	const flows = 20000
	cases := []struct {
		name    string
		proto   string
		port    uint16
		service uint32
	}{
		{"tcp ACK", "tcp", 80, 1},
		{"udp first datagram", "udp", 53, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := openTestEnv(t, Options{ConnTableSize: 4 * flows})
			e.clearConns(t)
			frames := make([][]byte, flows)
			for i := range frames {
				f := testutil.Frame{
					Src: netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), Dst: vipTCP, Proto: tc.proto,
					SrcPort: 40000 + uint16(i%7), DstPort: tc.port, Flags: "A", Payload: []byte("dlb"),
				}
				if tc.proto == "udp" {
					f.Flags = ""
				}
				frames[i] = f.Build(t)
			}
			before := e.stats(t).Services[tc.service].NewConns

			// reached[w] is the last flow worker w has reached; each
			// waits for the other before running a flow.
			var reached [2]atomic.Int64
			reached[0].Store(-1)
			reached[1].Store(-1)
			outs := [2][][]byte{make([][]byte, flows), make([][]byte, flows)}
			errs := make(chan error, 2)
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// fail reports err and releases the other worker.
					fail := func(err error) {
						errs <- err
						reached[w].Store(flows)
					}
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					var cpu unix.CPUSet
					cpu.Set(w)
					if err := unix.SchedSetaffinity(0, &cpu); err != nil {
						fail(fmt.Errorf("pinning worker %d to CPU %d: %w", w, w, err))
						return
					}
					other := &reached[1-w]
					for i := range frames {
						reached[w].Store(int64(i))
						for spins := 0; other.Load() < int64(i) && spins < 1<<20; spins++ {
						}
						out := make([]byte, len(frames[i])+256)
						ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: frames[i], DataOut: out})
						if err != nil {
							fail(fmt.Errorf("worker %d, flow %d: running program: %w", w, i, err))
							return
						}
						if ret != xdpTX {
							fail(fmt.Errorf("worker %d, flow %d: verdict %d, want XDP_TX", w, i, ret))
							return
						}
						outs[w][i] = out[:len(frames[i])]
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}

			for i := range frames {
				if string(outs[0][i][:6]) != string(outs[1][i][:6]) {
					t.Fatalf("flow %d went to %x on one CPU and to %x on the other", i, outs[0][i][:6], outs[1][i][:6])
				}
			}
			if got := e.stats(t).Services[tc.service].NewConns - before; got != flows {
				t.Errorf("%d flows, each run on two CPUs at once, counted as %d new connections", flows, got)
			}
			if n := countConns(t, e); n != flows {
				t.Errorf("%d entries in the connection table after %d flows", n, flows)
			}
		})
	}
}
