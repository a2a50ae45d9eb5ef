package store

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

func op(object config.Object, action config.Action, target string, params ...string) config.Op {
	o := config.Op{Object: object, Action: action, Target: target}
	for i := 0; i+1 < len(params); i += 2 {
		o.Params = append(o.Params, config.Param{Name: params[i], Values: strings.Fields(params[i+1])})
	}
	return o
}

// session is an editor and a store kept in step, as the engine keeps them.
type session struct {
	t   *testing.T
	ed  *config.Editor
	s   *Store
	ids *IDs
	st  State
}

func openSession(t *testing.T, dir string) *session {
	t.Helper()
	s, st, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ed, err := config.NewEditor(st.Config, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &session{t: t, ed: ed, s: s, ids: st.IDs, st: st}
}

func (x *session) apply(ops ...config.Op) {
	x.t.Helper()
	e, err := x.ed.Prepare(ops)
	if err != nil {
		x.t.Fatalf("Prepare: %v", err)
	}
	d, err := x.ids.Apply(e.Change, 1<<16, 1<<20)
	if err != nil {
		x.t.Fatal(err)
	}
	if err := x.s.Append(NewRecord(x.ed.Config(), e.Next, e.Change, d)); err != nil {
		x.t.Fatal(err)
	}
	x.ed.Commit(e)
}

func (x *session) state() State {
	return State{Config: x.ed.Config(), IDs: x.ids.Clone(), Configured: map[netip.Addr]string{}}
}

// sameState compares two states' configurations and ids.
func sameState(t *testing.T, got, want State) {
	t.Helper()
	if !reflect.DeepEqual(got.Config, want.Config) {
		t.Errorf("configuration after reopening:\n%+v\nwant\n%+v", got.Config, want.Config)
	}
	if !reflect.DeepEqual(got.IDs.Services, want.IDs.Services) || !reflect.DeepEqual(got.IDs.Backends, want.IDs.Backends) ||
		got.IDs.NextService != want.IDs.NextService || got.IDs.NextBackend != want.IDs.NextBackend {
		t.Errorf("ids after reopening:\n%+v\nwant\n%+v", got.IDs, want.IDs)
	}
}

func populate(x *session) {
	x.apply(op(config.Executor, config.Set, "", "nfa", "198.18.0.2"),
		op(config.Cluster, config.Add, "198.18.0.100+198.18.0.101"),
		op(config.Port, config.Add, "@80+443"),
		op(config.Server, config.Add, "@80+443@198.18.0.21+198.18.0.22+198.18.0.23"))
	x.apply(op(config.Server, config.Set, "198.18.0.100@80@198.18.0.21", "weight", "7"))
	x.apply(op(config.Server, config.Remove, "198.18.0.101@443@198.18.0.22"))
	x.apply(op(config.Server, config.Remove, "198.18.0.100@80@198.18.0.23"))
	x.apply(op(config.Port, config.Set, "198.18.0.100@443", "staletimeout", "30"))
	x.apply(op(config.Cluster, config.Remove, "198.18.0.101"))
	x.apply(op(config.Port, config.Add, "198.18.0.100@8080"), op(config.Server, config.Add, "198.18.0.100@8080@198.18.0.22"))
	x.apply(op(config.Backup, config.Add, "", "role", "backup", "recovery", "manual", "haport", "7000"),
		op(config.Heartbeat, config.Add, "198.18.0.2", "source", "198.18.0.4", "secretfile", "/etc/ha.secret"),
		op(config.Reach, config.Add, "198.18.0.254"))
	x.apply(op(config.Heartbeat, config.Set, "", "interval", "250"), op(config.Cluster, config.Set, "198.18.0.100", "primaryhost", "198.18.0.4"))
}

func TestJournalReplays(t *testing.T) {
	dir := t.TempDir()
	x := openSession(t, dir)
	populate(x)
	want := x.state()
	if err := x.s.Close(); err != nil {
		t.Fatal(err)
	}
	y := openSession(t, dir)
	sameState(t, y.st, want)
	if len(y.ids.Backends) != 6 || len(y.ids.Services) != 3 {
		t.Errorf("ids %+v", y.ids)
	}
}

func TestSnapshotThenJournal(t *testing.T) {
	dir := t.TempDir()
	x := openSession(t, dir)
	populate(x)
	if err := x.s.Snapshot(x.state()); err != nil {
		t.Fatal(err)
	}
	x.apply(op(config.Server, config.Down, "198.18.0.100@80@198.18.0.22"))
	want := x.state()
	if err := x.s.Close(); err != nil {
		t.Fatal(err)
	}
	journals, _ := filepath.Glob(filepath.Join(dir, journalPrefix+"*"))
	if len(journals) != 1 || filepath.Base(journals[0]) != "journal.2" {
		t.Errorf("journals after the snapshot: %v", journals)
	}
	y := openSession(t, dir)
	sameState(t, y.st, want)
}

// TestFilesDeletedUnderTheStore: the state directory, or one of its files,
// is deleted while the store is open. Lost says so (and not otherwise);
// Rewrite writes the whole state again; what is appended after it, and
// everything before, is there when the directory is opened again.
func TestFilesDeletedUnderTheStore(t *testing.T) {
	for _, c := range []struct {
		name     string
		snapshot bool // a snapshot was written before the deletion
		failed   bool // the first snapshot failed (it could not replace the state file)
		remove   func(dir string) error
		lost     bool
	}{
		{name: "nothing deleted", lost: false, remove: func(string) error { return nil }},
		{name: "nothing deleted, after a snapshot", snapshot: true, lost: false, remove: func(string) error { return nil }},
		{name: "directory", lost: true, remove: os.RemoveAll},
		{name: "directory, after a snapshot", snapshot: true, lost: true, remove: os.RemoveAll},
		{name: "journal", lost: true, remove: func(dir string) error { return os.Remove(filepath.Join(dir, "journal.1")) }},
		{name: "journal replaced by another file", lost: true, remove: func(dir string) error {
			p := filepath.Join(dir, "journal.1")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.WriteFile(p, nil, 0o600)
		}},
		{name: "snapshot", snapshot: true, lost: true, remove: func(dir string) error { return os.Remove(filepath.Join(dir, StateFile)) }},
		// A failed snapshot leaves no snapshot file, which is not a loss:
		// the journals before it still hold the state.
		{name: "nothing deleted, after a failed snapshot", failed: true, lost: false, remove: func(string) error { return nil }},
		{name: "the first journal, after a failed snapshot", failed: true, lost: true, remove: func(dir string) error {
			return os.Remove(filepath.Join(dir, "journal.1"))
		}},
		{name: "the journal after a failed snapshot", failed: true, lost: true, remove: func(dir string) error {
			return os.Remove(filepath.Join(dir, "journal.2"))
		}},
		{name: "the lock file, not the store's", lost: false, remove: func(dir string) error {
			return os.Remove(filepath.Join(dir, "dlbd.lock")) // not the store's
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "dlbd.lock"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			x := openSession(t, dir)
			populate(x)
			if c.snapshot {
				if err := x.s.Snapshot(x.state()); err != nil {
					t.Fatal(err)
				}
				x.s.wg.Wait()
				x.apply(op(config.Server, config.Down, "198.18.0.100@80@198.18.0.22"))
			}
			if c.failed {
				// A directory where the snapshot goes: renaming the
				// written file over it fails.
				blocker := filepath.Join(dir, StateFile)
				if err := os.Mkdir(blocker, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := x.s.Snapshot(x.state()); err != nil {
					t.Fatal(err)
				}
				x.s.wg.Wait()
				if x.s.bgErr == nil {
					t.Fatal("the snapshot did not fail")
				}
				x.s.bgErr = nil // reported (by the next Snapshot, or Close)
				if err := os.Remove(blocker); err != nil {
					t.Fatal(err)
				}
				x.apply(op(config.Server, config.Down, "198.18.0.100@80@198.18.0.22"))
			}
			if lost := x.s.Lost(); lost {
				t.Fatal("Lost before anything was deleted")
			}
			if err := c.remove(dir); err != nil {
				t.Fatal(err)
			}
			if got := x.s.Lost(); got != c.lost {
				t.Fatalf("Lost: %v, want %v", got, c.lost)
			}
			if c.lost {
				if err := x.s.Rewrite(x.state()); err != nil {
					t.Fatalf("Rewrite: %v", err)
				}
				if x.s.Lost() {
					t.Error("still Lost after Rewrite")
				}
			}
			x.apply(op(config.Server, config.Set, "198.18.0.100@443@198.18.0.21", "weight", "3"))
			want := x.state()
			if err := x.s.Close(); err != nil {
				t.Fatal(err)
			}
			y := openSession(t, dir)
			sameState(t, y.st, want)
			if err := y.s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTornLastRecordIsDropped(t *testing.T) {
	dir := t.TempDir()
	x := openSession(t, dir)
	populate(x)
	want := x.state()
	x.apply(op(config.Server, config.Set, "198.18.0.100@80@198.18.0.22", "weight", "3"))
	x.s.Close()
	path := filepath.Join(dir, "journal.1")
	data, _ := os.ReadFile(path)
	// Cut the last record in half, as a crash during its write would.
	last := strings.LastIndex(strings.TrimSuffix(string(data), "\n"), "\n")
	cut := data[:last+1+(len(data)-last)/2]
	if err := os.WriteFile(path, cut, 0o600); err != nil {
		t.Fatal(err)
	}
	y := openSession(t, dir)
	sameState(t, y.st, want)
	if len(y.st.Dropped) != 1 || !strings.Contains(y.st.Dropped[0], "the last record of "+path+" (line 10, ") {
		t.Errorf("Dropped %q, want the torn record named", y.st.Dropped)
	}
	// The journal goes on after the dropped record.
	y.apply(op(config.Server, config.Set, "198.18.0.100@80@198.18.0.22", "weight", "4"))
	y.s.Close()
	z := openSession(t, dir)
	if len(z.st.Dropped) != 0 {
		t.Errorf("Dropped %q after a clean close", z.st.Dropped)
	}
	if s := z.st.Config.Cluster(netip.MustParseAddr("198.18.0.100")).Port(80).Server(netip.MustParseAddr("198.18.0.22")); s.Weight != 4 {
		t.Errorf("weight %d after the record that followed the torn one", s.Weight)
	}
}

func TestDamagedJournalIsRefused(t *testing.T) {
	dir := t.TempDir()
	x := openSession(t, dir)
	populate(x)
	x.s.Close()
	path := filepath.Join(dir, "journal.1")
	data, _ := os.ReadFile(path)
	lines := strings.Split(string(data), "\n")
	lines[1] = "{garbage"
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "journal.1 line 2") {
		t.Errorf("Open of a damaged journal: %v", err)
	}
}

// TestVersion1StateLoads: the state file a dlbd before the journal wrote
// is read as a snapshot.
func TestVersion1StateLoads(t *testing.T) {
	dir := t.TempDir()
	v1 := `{"version":1,"config":{"executor":{"started":false,"xdp_mode":"auto","nfa":"198.18.0.2","fin_timeout":60},
"clusters":[{"address":"198.18.0.100","ports":[{"number":80,"protocol":"tcp","method":"mac","stale_timeout":300,"weight_bound":20,
"all_down":"refuse","servers":[{"address":"198.18.0.21","weight":10}]}],"proportions":{"active":50,"new":50,"port":0,"system":0}}],
"manager":{"started":false,"interval":2,"refresh":2,"smoothing":1.5,"sensitivity":5},"metric_server":{"source":"dlbmetricd","port":10004}},
"ids":{"services":{"198.18.0.100@80":1},"backends":{"198.18.0.100@80@198.18.0.21":1},"next_service":2,"next_backend":2},"attached_mode":"auto"}`
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	x := openSession(t, dir)
	k := lb.ServiceKey{Cluster: netip.MustParseAddr("198.18.0.100"), Port: 80}
	if x.ids.Services[k] != 1 || x.ids.Backends[lb.BackendKey{Service: k, Server: netip.MustParseAddr("198.18.0.21")}] != 1 {
		t.Errorf("ids %+v", x.ids)
	}
	x.apply(op(config.Server, config.Add, "198.18.0.100@80@198.18.0.22"))
	if id := x.ids.Backends[lb.BackendKey{Service: k, Server: netip.MustParseAddr("198.18.0.22")}]; id != 2 {
		t.Errorf("the next id is %d, want 2", id)
	}
}

// TestAppendCostsWhatChanged: a one-server change writes a record of about
// one server, whatever the size of the configuration.
func TestAppendCostsWhatChanged(t *testing.T) {
	dir := t.TempDir()
	x := openSession(t, dir)
	x.apply(op(config.Cluster, config.Add, "198.18.0.100"))
	var ops []config.Op
	for p := 1; p <= 100; p++ {
		ops = append(ops, op(config.Port, config.Add, fmt.Sprintf("198.18.0.100@%d", p)))
	}
	var servers []string
	for i := 0; i < 50; i++ {
		servers = append(servers, fmt.Sprintf("198.18.1.%d", i+1))
	}
	ops = append(ops, op(config.Server, config.Add, "198.18.0.100@@"+strings.Join(servers, "+")))
	x.apply(ops...)
	before := x.s.size
	x.apply(op(config.Server, config.Set, "198.18.0.100@7@198.18.1.9", "weight", "3"))
	if n := x.s.size - before; n > 300 {
		t.Errorf("a one-server change wrote %d bytes", n)
	}
}

// TestIDsAreStableAndNotReusedAtOnce: ids survive changes, a freed id is
// not handed out again at once, the tables' sizes bound them, and Revert
// undoes an Apply.
func TestIDsAreStableAndNotReusedAtOnce(t *testing.T) {
	ed, err := config.NewEditor(lb.NewConfig(), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := NewIDs()
	apply := func(ops ...config.Op) (*IDDelta, error) {
		t.Helper()
		e, err := ed.Prepare(ops)
		if err != nil {
			t.Fatal(err)
		}
		d, err := x.Apply(e.Change, 16, 8)
		if err == nil {
			ed.Commit(e)
		}
		return d, err
	}
	k := func(s string) lb.BackendKey {
		var b lb.BackendKey
		if err := b.UnmarshalText([]byte(s)); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := apply(op(config.Cluster, config.Add, "198.18.0.100"), op(config.Port, config.Add, "198.18.0.100@80"),
		op(config.Server, config.Add, "198.18.0.100@80@198.18.0.21+198.18.0.22")); err != nil {
		t.Fatal(err)
	}
	first := x.Backends[k("198.18.0.100@80@198.18.0.21")]
	kept := x.Backends[k("198.18.0.100@80@198.18.0.22")]
	if _, err := apply(op(config.Server, config.Remove, "198.18.0.100@80@198.18.0.21")); err != nil {
		t.Fatal(err)
	}
	d, err := apply(op(config.Server, config.Add, "198.18.0.100@80@198.18.0.23"))
	if err != nil {
		t.Fatal(err)
	}
	if x.Backends[k("198.18.0.100@80@198.18.0.23")] == first || x.Backends[k("198.18.0.100@80@198.18.0.22")] != kept {
		t.Errorf("ids %v: a freed id was handed out at once, or a kept one changed", x.Backends)
	}
	before := x.Clone()
	x.Revert(d)
	x.replay(d)
	if !reflect.DeepEqual(x.Backends, before.Backends) || x.NextBackend != before.NextBackend {
		t.Errorf("Revert then replay: %+v, want %+v", x, before)
	}
	// A delta that frees and gives ids at once: Revert brings back the
	// ids before it, replay those after it.
	d, err = apply(op(config.Server, config.Remove, "198.18.0.100@80@198.18.0.22"), op(config.Server, config.Add, "198.18.0.100@80@198.18.0.24"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.AddBackends) != 1 || len(d.DelBackends) != 1 {
		t.Fatalf("delta %+v, want one backend freed and one given", d)
	}
	after := x.Clone()
	x.Revert(d)
	if !reflect.DeepEqual(x.Backends, before.Backends) || x.NextBackend != before.NextBackend {
		t.Errorf("Revert: %+v, want %+v", x.Backends, before.Backends)
	}
	x.replay(d)
	if !reflect.DeepEqual(x.Backends, after.Backends) || x.NextBackend != after.NextBackend {
		t.Errorf("replay: %+v, want %+v", x.Backends, after.Backends)
	}
	// The table is bounded (8 backends: ids 1..7).
	var many []string
	for i := 0; i < 10; i++ {
		many = append(many, fmt.Sprintf("198.18.1.%d", i+1))
	}
	e, err := ed.Prepare([]config.Op{op(config.Server, config.Add, "198.18.0.100@80@"+strings.Join(many, "+"))})
	if err != nil {
		t.Fatal(err)
	}
	snapshot := x.Clone()
	if _, err := x.Apply(e.Change, 16, 8); lb.FieldOf(err) != "server" {
		t.Errorf("overflow error %v", err)
	}
	if !reflect.DeepEqual(x.Backends, snapshot.Backends) {
		t.Error("a refused Apply changed the ids")
	}
}
