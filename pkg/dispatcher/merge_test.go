package dispatcher

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/lb"
)

// The fake executor's connection tables (ConnTables): conns is what a
// scan reports; put and merged what PutConns and MergeConns were given.

func (f *fakeDatapath) ScanConns(_ *lb.ConnScan, full bool, _ time.Duration, each func(lb.ConnEntry)) error {
	f.mu.Lock()
	conns := slices.Clone(f.conns)
	f.mu.Unlock()
	if full {
		for _, c := range conns {
			each(c)
		}
	}
	return nil
}

func (f *fakeDatapath) PutConns(entries []lb.ConnEntry) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put = append(f.put, entries...)
	return len(entries), nil
}

func (f *fakeDatapath) MergeConns(entries []lb.ConnEntry) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.merged = append(f.merged, entries...)
	return len(entries) - 1, nil // one kept out, as if this executor had its key
}

// fullCopy opens replication session number session (the batches sent
// before are forgotten) and returns the full copy sent on it.
func (f *fakeHA) fullCopy(t *testing.T, session uint64) lb.ConnBatch {
	t.Helper()
	f.mu.Lock()
	f.session, f.sent = session, nil
	f.mu.Unlock()
	var full lb.ConnBatch
	eventually(t, "a full copy sent", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, b := range f.sent {
			if b.Full {
				full = b
				return true
			}
		}
		return false
	})
	return full
}

// macConn is a connection of vip:80 to its first server, in the fake
// executor's ids.
func macConn(t *testing.T, h *harness, clientPort uint16) lb.ConnEntry {
	t.Helper()
	h.dp.mu.Lock()
	defer h.dp.mu.Unlock()
	for id, b := range h.dp.backends {
		if b.Address == netip.MustParseAddr("198.18.0.21") && h.dp.services[b.Service].Port == 80 {
			return lb.ConnEntry{Kind: lb.ConnMAC, Protocol: 6, Client: netip.AddrPortFrom(netip.MustParseAddr("198.18.2.11"), clientPort),
				Cluster: netip.AddrPortFrom(netip.MustParseAddr(vip), 80), Backend: id, Service: b.Service}
		}
	}
	t.Fatal("no backend 198.18.0.21 of port 80 in the executor")
	return lb.ConnEntry{}
}

// TestHAReleasedWithoutSessionOwed: a group let go while no replication
// session was up (two actives after a partition: the one that yields had
// nothing to send its last entries on) is owed to the peer: the next
// full copy carries its entries, though this dispatcher no longer serves
// it, and the one after does not.
func TestHAReleasedWithoutSessionOwed(t *testing.T) {
	f, h := haConfigured(t, "backup")
	f.set(lb.GroupPeer, lb.HAActive)
	eventually(t, "serving", func() bool { return h.nif.has(vip) })
	c := macConn(t, h, 5001)
	h.dp.mu.Lock()
	h.dp.conns = []lb.ConnEntry{c}
	h.dp.mu.Unlock()
	f.set(lb.GroupPeer, lb.HAStandby)
	eventually(t, "the release confirmed", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.released, lb.GroupPeer)
	})
	full := f.fullCopy(t, 1)
	if len(full.Records) != 1 || full.Records[0].Client != c.Client || full.Records[0].Server != netip.MustParseAddr("198.18.0.21") {
		t.Errorf("the full copy after letting go without a session carries %+v, want the owed group's connection", full.Records)
	}
	// A second session's full copy: nothing is owed any more, and this
	// dispatcher serves nothing.
	if n := len(f.fullCopy(t, 2).Records); n != 0 {
		t.Errorf("the second full copy carries %d records, want none", n)
	}
}

// TestHAImportMergesIntoServedGroups: the peer's records of a group this
// dispatcher serves are merged (the peer served it too: only where this
// executor holds nothing), those of a group it stands by for written
// over what it holds; the reports count what the merge wrote and kept.
func TestHAImportMergesIntoServedGroups(t *testing.T) {
	f, h := haConfigured(t, "backup")
	rec := func(port uint16) lb.ConnRecord {
		return lb.ConnRecord{Kind: lb.ConnMAC, Protocol: 6, Client: netip.AddrPortFrom(netip.MustParseAddr("198.18.2.11"), port),
			Cluster: netip.AddrPortFrom(netip.MustParseAddr(vip), 80), Server: netip.MustParseAddr("198.18.0.21")}
	}
	f.set(lb.GroupPeer, lb.HAStandby)
	eventually(t, "standing by", func() bool { return slices.Contains(eventNames(h), events.GoStandby) })
	f.recv <- lb.ConnBatch{Records: []lb.ConnRecord{rec(1)}}
	f.set(lb.GroupPeer, lb.HAActive)
	eventually(t, "serving", func() bool { return h.nif.has(vip) })
	f.recv <- lb.ConnBatch{Records: []lb.ConnRecord{rec(2), rec(3)}, Marker: 1}
	st := h.status(Query{HA: true}).HA
	h.dp.mu.Lock()
	put, merged := h.dp.put, h.dp.merged
	h.dp.mu.Unlock()
	if len(put) != 1 || put[0].Client.Port() != 1 {
		t.Errorf("written over the executor's entries while standing by: %+v, want the first record", put)
	}
	if len(merged) != 2 || merged[0].Client.Port() != 2 || merged[1].Client.Port() != 3 {
		t.Errorf("merged while serving: %+v, want the second batch", merged)
	}
	if st.Imported != 2 || st.Merged != 1 || st.Kept != 1 {
		t.Errorf("reported imported %d, merged %d, kept %d; want 2, 1, 1", st.Imported, st.Merged, st.Kept)
	}
}

// TestHAClusterMovedOutStillReplicated: under mutual high availability, a
// cluster whose primaryhost a change moves to the peer leaves the group
// this dispatcher serves; until the peer's configuration says the same
// the peer does not serve it either, and the segment still sends its
// clients here: its connections keep going to the peer (a full copy
// carries them), until the peer's digest has agreed for movedOutGrace.
func TestHAClusterMovedOutStillReplicated(t *testing.T) {
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	h.mustApply(append([]config.Op{op("cluster", "set", vip, "primaryhost", "198.18.0.2")}, haOps("both")...)...)
	f.set(lb.GroupLocal, lb.HAActive)
	f.set(lb.GroupPeer, lb.HAStandby)
	eventually(t, "serving", func() bool { return h.nif.has(vip) })
	c := macConn(t, h, 5001)
	h.dp.mu.Lock()
	h.dp.conns = []lb.ConnEntry{c}
	h.dp.mu.Unlock()
	f.mu.Lock()
	f.peer = lb.HAPeerStatus{Alive: true, Healthy: true, Recovery: lb.RecoveryAuto}
	f.mu.Unlock()

	h.mustApply(op("cluster", "set", vip, "primaryhost", "198.18.0.4"))
	eventually(t, "the cluster moved out off the interface", func() bool { return !h.nif.has(vip) })
	if full := f.fullCopy(t, 1); len(full.Records) != 1 || full.Records[0].Client != c.Client {
		t.Errorf("while the peer's configuration differs, a full copy carries %+v, want the moved cluster's connection", full.Records)
	}

	// The peer's configuration agrees: after the grace, the cluster is
	// the peer's alone.
	f.mu.Lock()
	f.peer.Digest = f.digest
	f.mu.Unlock()
	time.Sleep(movedOutGrace + 300*time.Millisecond)
	if full := f.fullCopy(t, 2); len(full.Records) != 0 {
		t.Errorf("once the peer agreed, a full copy carries %+v, want nothing", full.Records)
	}
}
