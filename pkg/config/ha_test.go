package config

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// haBase is base with a primary's high availability: a heartbeat from
// the NFA to the peer, and a reach target.
func haBase(t testing.TB) *Editor {
	t.Helper()
	ed := base(t)
	mustApply(t, ed,
		op(Backup, Add, "", "role", "primary", "recovery", "auto", "haport", "7000"),
		op(Heartbeat, Add, "198.18.0.4", "source", "198.18.0.2", "secretfile", "/etc/dlb/ha.secret"),
		op(Reach, Add, "198.18.0.254"),
	)
	return ed
}

func TestHAOps(t *testing.T) {
	ed := haBase(t)
	h := ed.Config().HA
	want := lb.HighAvailability{Role: lb.RolePrimary, Recovery: lb.RecoveryAuto, Port: 7000,
		Heartbeats: []lb.Heartbeat{{Source: mustAddr("198.18.0.2"), Destination: mustAddr("198.18.0.4")}},
		SecretFile: "/etc/dlb/ha.secret", Interval: lb.DefaultHAInterval, Count: lb.DefaultHACount,
		Reach: []netip.Addr{mustAddr("198.18.0.254")}}
	if !h.Equal(want) || !h.Enabled() {
		t.Fatalf("got %+v\nwant %+v", h, want)
	}
	ch := mustApply(t, ed, op(Heartbeat, Set, "", "interval", "200", "count", "5"),
		op(Heartbeat, Add, "198.18.5.4", "source", "198.18.5.2"), op(Reach, Add, "198.18.0.253+198.18.0.1"))
	if !ch.HA {
		t.Error("the change does not say high availability changed")
	}
	h = ed.Config().HA
	if h.Interval != 200 || h.Count != 5 || len(h.Heartbeats) != 2 || len(h.Reach) != 3 || h.Reach[0] != mustAddr("198.18.0.1") {
		t.Errorf("after set and adds: %+v", h)
	}
	ch = mustApply(t, ed, op(Backup, Set, "", "recovery", "manual"))
	if h = ed.Config().HA; !ch.HA || h.Role != lb.RolePrimary || h.Recovery != lb.RecoveryManual || h.Port != 7000 {
		t.Errorf("after backup set --recovery manual: %+v (change says HA %v)", h, ch.HA)
	}
	mustApply(t, ed, op(Backup, Set, "", "role", "backup", "haport", "7001"))
	if h = ed.Config().HA; h.Role != lb.RoleBackup || h.Recovery != lb.RecoveryManual || h.Port != 7001 {
		t.Errorf("after backup set --role backup --port 7001: %+v", h)
	}
	mustApply(t, ed, op(Heartbeat, Remove, "198.18.0.4"), op(Reach, Remove, "198.18.0.1"))
	if h = ed.Config().HA; len(h.Heartbeats) != 1 || h.Heartbeats[0].Destination != mustAddr("198.18.5.4") || len(h.Reach) != 2 {
		t.Errorf("after removes: %+v", h)
	}
	mustApply(t, ed, op(Heartbeat, Remove, "198.18.5.4"), op(Backup, Remove, ""), op(Reach, Remove, "198.18.0.253+198.18.0.254"))
	if h = ed.Config().HA; h.Configured() || h.SecretFile != "" || h.Interval != 0 {
		t.Errorf("everything removed, still %+v", h)
	}
}

func TestHARefusals(t *testing.T) {
	cases := []struct {
		name  string
		ops   []Op
		field string
	}{
		{"heartbeat without source", []Op{op(Heartbeat, Add, "198.18.0.5")}, "heartbeat"},
		{"heartbeat to itself", []Op{op(Heartbeat, Add, "198.18.0.2", "source", "198.18.0.2")}, "destination"},
		{"heartbeat across families", []Op{op(Heartbeat, Add, "2001:2::4", "source", "198.18.0.2")}, "destination"},
		{"heartbeat twice", []Op{op(Heartbeat, Add, "198.18.0.4", "source", "198.18.0.2")}, "heartbeat"},
		{"heartbeat to a cluster", []Op{op(Heartbeat, Add, vip, "source", "198.18.0.2")}, "heartbeat"},
		{"heartbeat with another interval", []Op{op(Heartbeat, Add, "198.18.0.5", "source", "198.18.0.2", "interval", "100")}, "interval"},
		{"heartbeat with another secret", []Op{op(Heartbeat, Add, "198.18.0.5", "source", "198.18.0.2", "secretfile", "/x")}, "secretfile"},
		{"interval too short", []Op{op(Heartbeat, Set, "", "interval", "10")}, "interval"},
		{"count 1", []Op{op(Heartbeat, Set, "", "count", "1")}, "count"},
		{"relative secret file", []Op{op(Heartbeat, Set, "", "secretfile", "ha.secret")}, "secretfile"},
		{"no secret", []Op{op(Heartbeat, Set, "", "secretfile", "none")}, "secretfile"},
		{"heartbeat set with nothing", []Op{op(Heartbeat, Set, "")}, "interval"},
		{"removing a missing heartbeat", []Op{op(Heartbeat, Remove, "198.18.0.9")}, "heartbeat"},
		{"multicast reach", []Op{op(Reach, Add, "224.0.0.1")}, "reach"},
		{"reach twice", []Op{op(Reach, Add, "198.18.0.254")}, "reach"},
		{"removing a missing reach", []Op{op(Reach, Remove, "198.18.0.9")}, "reach"},
		{"reach without address", []Op{op(Reach, Add, "")}, "reach"},
		{"second backup", []Op{op(Backup, Add, "", "role", "backup", "recovery", "manual", "haport", "7000")}, "role"},
		{"unknown role", []Op{op(Backup, Remove, ""), op(Backup, Add, "", "role", "secondary", "recovery", "auto", "haport", "7000")}, "role"},
		{"unknown recovery", []Op{op(Backup, Remove, ""), op(Backup, Add, "", "role", "backup", "recovery", "later", "haport", "7000")}, "recovery"},
		{"port 0", []Op{op(Backup, Remove, ""), op(Backup, Add, "", "role", "backup", "recovery", "auto", "haport", "0")}, "haport"},
		{"backup set with nothing", []Op{op(Backup, Set, "")}, "role"},
		{"backup set without a backup", []Op{op(Backup, Remove, ""), op(Backup, Set, "", "recovery", "manual")}, "role"},
		{"backup set to an unknown role", []Op{op(Backup, Set, "", "role", "secondary")}, "role"},
		{"backup set to an unknown recovery", []Op{op(Backup, Set, "", "recovery", "later")}, "recovery"},
		{"backup set to port 65536", []Op{op(Backup, Set, "", "haport", "65536")}, "haport"},
		{"backup set to both without primaryhost", []Op{op(Backup, Set, "", "role", "both")}, "primaryhost"},
		{"backup add without port", []Op{op(Backup, Remove, ""), op(Backup, Add, "", "role", "backup", "recovery", "auto")}, "role"},
		{"both without primaryhost", []Op{op(Backup, Remove, ""), op(Backup, Add, "", "role", "both", "recovery", "auto", "haport", "7000")}, "primaryhost"},
		{"primaryhost of neither dispatcher", []Op{op(Cluster, Set, vip, "primaryhost", "198.18.0.9"), op(Backup, Remove, ""),
			op(Backup, Add, "", "role", "both", "recovery", "auto", "haport", "7000")}, "primaryhost"},
		{"multicast primaryhost", []Op{op(Cluster, Set, vip, "primaryhost", "224.0.0.1")}, "primaryhost"},
		{"heartbeat from a return address", []Op{op(Heartbeat, Add, "198.18.0.5", "source", "198.18.0.3")}, "heartbeat"},
		{"a return address that is the peer's heartbeat address", []Op{op(Server, Set, vip+"@81@198.18.1.11", "returnaddress", "198.18.0.4")}, "heartbeat"},
		{"reach a cluster", []Op{op(Reach, Add, vip)}, "reach"},
		{"reach a return address", []Op{op(Reach, Add, "198.18.0.3")}, "reach"},
		{"reach this dispatcher", []Op{op(Reach, Add, "198.18.0.2")}, "reach"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ed := haBase(t)
			before := ed.Config().Clone()
			_, err := ed.Prepare(c.ops)
			if lb.FieldOf(err) != c.field {
				t.Fatalf("error %v, want a refusal naming %q", err, c.field)
			}
			var oe *OpError
			if !errors.As(err, &oe) {
				t.Errorf("error %#v is not an *OpError", err)
			}
			if !reflect.DeepEqual(ed.Config(), before) {
				t.Error("a refused batch changed the configuration")
			}
		})
	}
}

// TestHAMutual: under role both, each cluster names its primary host,
// and a return address serves one group only.
func TestHAMutual(t *testing.T) {
	ed := haBase(t)
	mustApply(t, ed, op(Cluster, Add, vip2, "primaryhost", "198.18.0.4"), op(Port, Add, vip2+"@81", "method", "nat"),
		op(Cluster, Set, vip, "primaryhost", "198.18.0.2"), op(Backup, Remove, ""),
		op(Backup, Add, "", "role", "both", "recovery", "manual", "haport", "7000"))
	cfg := ed.Config()
	h := cfg.HA
	if g := h.GroupOf(cfg.Cluster(mustAddr(vip))); g != lb.GroupLocal {
		t.Errorf("%s is in group %s, want local", vip, g)
	}
	if g := h.GroupOf(cfg.Cluster(mustAddr(vip2))); g != lb.GroupPeer {
		t.Errorf("%s is in group %s, want peer", vip2, g)
	}
	_, err := ed.Prepare([]Op{op(Server, Add, vip2+"@81@198.18.1.12", "returnaddress", "198.18.0.3")})
	if lb.FieldOf(err) != "returnaddress" || !strings.Contains(err.Error(), "another primaryhost") {
		t.Errorf("a return address shared by both groups: %v", err)
	}
	mustApply(t, ed, op(Server, Add, vip2+"@81@198.18.1.12", "returnaddress", "198.18.0.5"))
}

// TestHASaved: file save's script, the configuration file and the plan
// all carry high availability, and read back to the same configuration.
func TestHASaved(t *testing.T) {
	ed := haBase(t)
	mustApply(t, ed, op(Heartbeat, Add, "198.18.5.4", "source", "198.18.5.2"), op(Cluster, Set, vip, "primaryhost", "198.18.0.2"))
	cfg := ed.Config()
	var b bytes.Buffer
	if err := Script(&b, cfg); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"cluster add 198.18.0.100 --configure --primaryhost 198.18.0.2\n",
		"highavailability backup add primary auto 7000\n",
		"highavailability heartbeat add 198.18.0.2 198.18.0.4 --secret-file /etc/dlb/ha.secret --interval 500 --count 4\n",
		"highavailability heartbeat add 198.18.5.2 198.18.5.4\n",
		"highavailability reach add 198.18.0.254\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("the script lacks %q:\n%s", line, b.String())
		}
	}
	data, err := MarshalFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "ha:\n  role: primary\n  port: 7000\n  secret-file: /etc/dlb/ha.secret\n") {
		t.Errorf("the file's ha section:\n%s", data)
	}
	f, err := ReadFile(data, Options{})
	if err != nil {
		t.Fatalf("reading the written file: %v\n%s", err, data)
	}
	if !f.Config.HA.Equal(cfg.HA) || f.Config.Cluster(mustAddr(vip)).PrimaryHost != mustAddr("198.18.0.2") {
		t.Errorf("read back %+v, want %+v", f.Config.HA, cfg.HA)
	}

	// The plan from nothing to cfg, applied as one batch, makes cfg's
	// high availability.
	empty := base(t)
	var ops []Op
	var words []string
	for _, s := range Plan(empty.Config(), cfg) {
		ops = append(ops, s.Op)
		words = append(words, s.String())
	}
	mustApply(t, empty, ops...)
	if !empty.Config().HA.Equal(cfg.HA) {
		t.Errorf("the plan made %+v, want %+v", empty.Config().HA, cfg.HA)
	}
	joined := strings.Join(words, "\n")
	for _, w := range []string{"highavailability backup add primary auto 7000",
		"highavailability heartbeat add 198.18.0.2 198.18.0.4 --secret-file /etc/dlb/ha.secret"} {
		if !strings.Contains(joined, w) {
			t.Errorf("the plan lacks %q:\n%s", w, joined)
		}
	}
	// And back: the plan to no high availability removes it all.
	var back []Op
	for _, s := range Plan(cfg, base(t).Config()) {
		back = append(back, s.Op)
	}
	mustApply(t, ed, back...)
	if ed.Config().HA.Configured() {
		t.Errorf("the plan back left %+v", ed.Config().HA)
	}
}

// TestHAAddressProblemsLoaded: a configuration saved before the check
// with a reach target that is a cluster address loads, takes changes
// that do not bring another such address, and names its problem.
func TestHAAddressProblemsLoaded(t *testing.T) {
	cfg := haBase(t).Config().Clone()
	cfg.HA.Reach = append(cfg.HA.Reach, mustAddr(vip))
	ed, err := NewEditor(cfg, Options{})
	if err != nil {
		t.Fatalf("a saved configuration refused at load: %v", err)
	}
	if _, err := ed.Prepare([]Op{op(Heartbeat, Set, "", "interval", "300")}); err != nil {
		t.Errorf("a change that brings no new problem refused: %v", err)
	}
	if _, err := ed.Prepare([]Op{op(Reach, Add, "198.18.0.3")}); lb.FieldOf(err) != "reach" {
		t.Errorf("another problem brought: %v, want a refusal naming reach", err)
	}
	// The same through a whole configuration (a file applied).
	if _, err := ed.PrepareConfig(cfg); err != nil {
		t.Errorf("the loaded configuration, replaced by itself, refused: %v", err)
	}
	more := cfg.Clone()
	more.HA.Reach = append(more.HA.Reach, mustAddr("198.18.0.3"))
	if _, err := ed.PrepareConfig(more); lb.FieldOf(err) != "reach" {
		t.Errorf("a file bringing another problem: %v, want a refusal naming reach", err)
	}
	fresh, err := NewEditor(lb.NewConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.PrepareConfig(cfg); lb.FieldOf(err) != "reach" {
		t.Errorf("the configuration applied to a fresh dispatcher: %v, want a refusal naming reach", err)
	}
	probs := HAAddressProblems(ed.Config())
	if len(probs) != 1 || !strings.Contains(probs[0].Error(), vip+" is a cluster address") {
		t.Errorf("problems %v, want the cluster reach target's", probs)
	}
}
