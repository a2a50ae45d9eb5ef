//go:build linux

package datapath

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedConcurrentFirstPackets: the first non-SYN packets of a
// connection (its handshake ACK and its first data segment, or two
// datagrams of a new UDP flow) often reach the executor on two CPUs at
// once. Both miss the connection table; only one may insert the flow and
// count it as a new connection, and both must go to the same backend (and,
// by NAT, the same port). Two threads pinned to different CPUs run the
// first packet of each flow in lockstep, so that the two runs overlap as
// closely as they can; a NAT connection's SYN runs first, on one of them.
// The CPU that loses the race for a table bucket's lock waits for it, a
// few microseconds at most: then a MAC connection's packet and a NAT
// handshake's ACK go on all the same (the next packet inserts), and a new
// NAT UDP flow's datagram is dropped (its answer could not come back),
// counted as conn_insert_failed; nothing counts as a full table.
func TestPrivilegedConcurrentFirstPackets(t *testing.T) {
	testutil.RequirePrivileged(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	const flows = 20000
	cases := []struct {
		name    string
		vip     netip.Addr
		proto   string
		port    uint16
		service uint32
		nat     bool
		// mayDrop: a datagram may be dropped when the other CPU held
		// a bucket for longer than the wait (an interrupt on it).
		mayDrop bool
	}{
		{"tcp ACK", vipTCP, "tcp", 80, 1, false, false},
		{"udp first datagram", vipTCP, "udp", 53, 2, false, false},
		{"NAT tcp ACK", vipNAT, "tcp", 80, 6, true, false},
		{"NAT udp first datagram", vipNAT, "udp", 53, 7, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := openTestEnv(t, Options{ConnTableSize: 4 * flows})
			e.clearTables(t)
			frames := make([][]byte, flows)
			var syns [][]byte
			for i := range frames {
				f := testutil.Frame{
					Src: netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), Dst: tc.vip, Proto: tc.proto,
					SrcPort: 40000 + uint16(i%7), DstPort: tc.port, Flags: "A", Payload: []byte("dlb"),
				}
				if tc.proto == "udp" {
					f.Flags = ""
				}
				frames[i] = f.Build(t)
				if tc.nat && tc.proto == "tcp" {
					f.Flags, f.Payload = "S", nil
					syns = append(syns, f.Build(t))
				}
			}
			st := e.stats(t)
			before := st.Services[tc.service].NewConns

			// reached[w] is the last flow worker w has reached; each
			// waits for the other before running a flow.
			// synced is the last flow whose SYN ran (NAT TCP).
			var synced atomic.Int64
			synced.Store(-1)
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
						if syns != nil && w == 0 {
							ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: syns[i], DataOut: make([]byte, len(syns[i])+256)})
							if err != nil || ret != xdpTX {
								fail(fmt.Errorf("flow %d: SYN: verdict %d, %v", i, ret, err))
								return
							}
							synced.Store(int64(i))
						}
						if syns != nil && w == 1 {
							// The SYN must come first (the lockstep
							// below gives up waiting after a while).
							deadline := time.Now().Add(5 * time.Second)
							for synced.Load() < int64(i) && time.Now().Before(deadline) {
							}
							if synced.Load() < int64(i) {
								fail(fmt.Errorf("flow %d: its SYN did not run within 5 s", i))
								return
							}
						}
						reached[w].Store(int64(i))
						for spins := 0; other.Load() < int64(i) && spins < 1<<20; spins++ {
						}
						out := make([]byte, len(frames[i])+256)
						ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: frames[i], DataOut: out})
						if err != nil {
							fail(fmt.Errorf("worker %d, flow %d: running program: %w", w, i, err))
							return
						}
						if ret == xdpDrop && tc.mayDrop {
							continue
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

			// dropped: datagrams dropped; lost: flows both of whose
			// datagrams were.
			dropped, lost := 0, 0
			for i := range frames {
				if outs[0][i] == nil || outs[1][i] == nil {
					dropped++
					if outs[0][i] == nil && outs[1][i] == nil {
						lost++
					}
					continue
				}
				// MAC: the same server; NAT: the same frame (server,
				// return address and port).
				n := 6
				if tc.nat {
					n = len(frames[i])
				}
				if string(outs[0][i][:n]) != string(outs[1][i][:n]) {
					t.Fatalf("flow %d went out as %x on one CPU and as %x on the other", i, outs[0][i][:n], outs[1][i][:n])
				}
			}
			after := e.stats(t)
			delta := func(ev string) uint64 { return after.Events[ev] - st.Events[ev] }
			t.Logf("%d flows: conn_insert_failed counted %d times, %d datagrams dropped", flows, delta("conn_insert_failed"), dropped)
			if got := after.Services[tc.service].NewConns - before; got != uint64(flows-lost) {
				t.Errorf("%d flows (%d of them dropped on both CPUs), each run on two CPUs at once, counted as %d new connections", flows, lost, got)
			}
			for _, ev := range []string{"nat_table_full", "halfopen_lost"} {
				if d := delta(ev); d != 0 {
					t.Errorf("%s counted %d times", ev, d)
				}
			}
			if d := reasonDelta(st, after, "drop_table_full"); d != uint64(dropped) || (dropped > 0 && delta("conn_insert_failed") < uint64(dropped)) {
				t.Errorf("%d datagrams dropped, drop_table_full counted %d, conn_insert_failed %d", dropped, d, delta("conn_insert_failed"))
			}
			if dropped > flows/100 {
				t.Errorf("%d of %d flows had a datagram dropped: more than 1 %%", dropped, flows)
			}
			n := 0
			if tc.nat {
				if err := e.dp.eachNATFlow(func(dispatcherFlowKey, dispatcherNatFlow) { n++ }); err != nil {
					t.Fatal(err)
				}
			} else {
				n = countConns(t, e)
			}
			if n != flows-lost {
				t.Errorf("%d entries in the connection table after %d flows (%d dropped on both CPUs)", n, flows, lost)
			}
		})
	}
}
