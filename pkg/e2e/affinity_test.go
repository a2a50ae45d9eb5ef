package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// onlyBackend returns the one backend that answered every request of r,
// or "" (and an error in the test) when the requests failed or spread.
func onlyBackend(t *testing.T, what string, r loadResult) string {
	t.Helper()
	if r.Failed != 0 || len(r.PerBackend) != 1 {
		t.Errorf("%s: want every connection on one backend, got %v (%d failed: %v)", what, r.PerBackend, r.Failed, r.Errors)
		return ""
	}
	return slices.Collect(maps.Keys(r.PerBackend))[0]
}

// loadAt runs n sequential connections from client i.
func (l *lab) loadAt(client, n int) loadResult {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := l.loadFrom(ctx, client, "-url", "http://"+l.vip()+"/", "-n", fmt.Sprint(n), "-c", "1")
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}

// TestPrivilegedE2EAffinity: with a stickytime every client returns to
// its server; a stickymask puts the clients of a subnet together;
// records are counted and expire; a quiesced server keeps its sticky
// clients and "quiesce --now" sends them elsewhere.
func TestPrivilegedE2EAffinity(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "3", "-c", "3")
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	vip := l.vip()

	// Without affinity, one client's connections spread.
	if r := l.loadAt(1, 60); len(r.PerBackend) < 2 {
		t.Fatalf("without affinity 60 connections went to %v", r.PerBackend)
	}
	l.mustCtl("port", "set", vip+"@80", "--stickytime", "30")
	owner := map[int]string{}
	for c := 1; c <= 3; c++ {
		owner[c] = onlyBackend(t, fmt.Sprintf("client %d with stickytime 30", c), l.loadAt(c, 40))
	}
	t.Logf("stickytime 30: clients' servers %v", owner)
	var ports []api.PortReport
	l.report(&ports, "port", "report", vip+"@80")
	waitFor(t, 5*time.Second, "affinity records counted", func() bool {
		l.report(&ports, "port", "report", vip+"@80")
		return ports[0].AffinityRecords == 3
	})
	var recs uint64
	for _, s := range l.servers() {
		recs += s.AffinityRecords
	}
	if recs != 3 {
		t.Errorf("servers report %d affinity records, want 3 (one per client)", recs)
	}

	// stickymask 24: the three clients share one /24, so one record and
	// one server for all of them (the first to connect decides).
	l.mustCtl("port", "set", vip+"@80", "--stickymask", "24", "--stickytime", "30")
	first := onlyBackend(t, "client 1 with stickymask 24", l.loadAt(1, 20))
	for c := 2; c <= 3; c++ {
		if got := onlyBackend(t, fmt.Sprintf("client %d with stickymask 24", c), l.loadAt(c, 20)); got != first {
			t.Errorf("client %d went to %s, client 1 to %s: the /24 should stick together", c, got, first)
		}
	}

	// A plain quiesce keeps the sticky clients on their server...
	idx := map[string]int{"b1": 1, "b2": 2, "b3": 3}[first]
	target := fmt.Sprintf("%s@80@%s", vip, l.backend(idx))
	l.mustCtl("manager", "quiesce", target)
	if got := onlyBackend(t, "sticky client after quiesce", l.loadAt(2, 20)); got != first {
		t.Errorf("after a plain quiesce the sticky client went to %s, want its server %s", got, first)
	}
	// ... "quiesce --now" drops their records and sends them elsewhere.
	l.mustCtl("manager", "quiesce", target, "--now")
	moved := onlyBackend(t, "sticky client after quiesce --now", l.loadAt(2, 20))
	if moved == first || moved == "" {
		t.Errorf("after quiesce --now the client still went to %s", moved)
	}
	l.mustCtl("manager", "unquiesce", target)

	// Records expire: stickytime 2, and after the sweep none are left.
	l.mustCtl("port", "set", vip+"@80", "--stickytime", "2", "--stickymask", "0")
	l.loadAt(3, 5)
	took := waitFor(t, 15*time.Second, "affinity records to expire", func() bool {
		l.report(&ports, "port", "report", vip+"@80")
		return ports[0].AffinityRecords == 0
	})
	t.Logf("records with stickytime 2 gone %.1f s after the last connection", took.Seconds())

	// connection: no records at all, connections spread again.
	l.mustCtl("port", "set", vip+"@80", "--stickytime", "30", "--selectionalgorithm", "connection")
	if r := l.loadAt(1, 60); len(r.PerBackend) < 2 || r.Failed != 0 {
		t.Errorf("selectionalgorithm connection: 60 connections went to %v", r.PerBackend)
	}
	l.report(&ports, "port", "report", vip+"@80")
	if ports[0].AffinityRecords != 0 {
		t.Errorf("selectionalgorithm connection wrote %d records", ports[0].AffinityRecords)
	}
}
