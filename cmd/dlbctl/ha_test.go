package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/server"
)

// TestHACommands: the highavailability commands send operations that
// the model takes, and "file save" of the result loads back the same.
func TestHACommands(t *testing.T) {
	eng := &fakeEngine{}
	sock := serve(t, eng)
	cmds := [][]string{
		{"cluster", "add", "198.18.0.100", "--configure", "--primaryhost", "198.18.0.2"},
		{"highavailability", "backup", "add", "primary", "auto", "12345"},
		{"highavailability", "heartbeat", "add", "198.18.0.2", "198.18.0.4", "--secret-file", "/etc/dlb/ha.secret", "--interval", "250", "--count", "6"},
		{"ha", "heartbeat", "add", "198.18.5.2", "198.18.5.4"},
		{"ha", "reach", "add", "198.18.0.254+198.18.0.253"},
		{"ha", "reach", "remove", "198.18.0.253"},
		{"ha", "heartbeat", "remove", "198.18.5.4", "--source", "198.18.5.2"},
		// As "heartbeat add" names a path.
		{"ha", "heartbeat", "add", "198.18.6.2", "198.18.6.4"},
		{"ha", "heartbeat", "remove", "198.18.6.2", "198.18.6.4"},
		{"ha", "heartbeat", "set", "--count", "5"},
		{"ha", "backup", "set", "--recovery", "MANUAL", "--port", "12346"},
	}
	for _, c := range cmds {
		if r := dlbctl(sock, c...); r.code != exitOK {
			t.Fatalf("dlbctl %v: exit %d: %s", c, r.code, r.stderr)
		}
	}
	var ops []api.Op
	for _, b := range eng.sent() {
		ops = append(ops, b...)
	}
	cfg, err := config.Apply(lb.NewConfig(), server.Ops(ops), config.Options{})
	if err != nil {
		t.Fatalf("the model refuses what dlbctl sent: %v", err)
	}
	h := cfg.HA
	if h.Role != lb.RolePrimary || h.Recovery != lb.RecoveryManual || h.Port != 12346 || h.Interval != 250 || h.Count != 5 || len(h.Heartbeats) != 1 ||
		len(h.Reach) != 1 || h.SecretFile != "/etc/dlb/ha.secret" || cfg.Clusters[0].PrimaryHost.String() != "198.18.0.2" {
		t.Fatalf("configuration %+v", h)
	}
	var script strings.Builder
	if err := config.Script(&script, cfg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "saved.cfg")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	eng2 := &fakeEngine{}
	if r := dlbctl(serve(t, eng2), "file", "load", path); r.code != exitOK {
		t.Fatalf("file load of %q: exit %d: %s", script.String(), r.code, r.stderr)
	}
	cfg2, err := config.Apply(lb.NewConfig(), server.Ops(eng2.sent()[0]), config.Options{})
	if err != nil || !cfg2.HA.Equal(cfg.HA) {
		t.Errorf("loaded back %+v, %v; want %+v", cfg2.HA, err, cfg.HA)
	}
}

func TestHAUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ha", "heartbeat", "add", "198.18.0.2"}, "needs SOURCE and DESTINATION"},
		{[]string{"ha", "heartbeat", "add", "198.18.0.2", "peer"}, `destination "peer" is not an IP address`},
		{[]string{"ha", "heartbeat", "set"}, "at least one of the flags"},
		{[]string{"ha", "heartbeat", "remove"}, "needs [SOURCE] DESTINATION, got 0"},
		{[]string{"ha", "heartbeat", "remove", "198.18.0.2", "198.18.0.4", "--source", "198.18.0.3"}, "the source is given twice"},
		{[]string{"ha", "heartbeat", "remove", "peer", "198.18.0.4"}, `source "peer" is not an IP address`},
		{[]string{"ha", "backup", "add", "primary", "auto"}, "needs ROLE, RECOVERY and PORT"},
		{[]string{"ha", "backup", "add", "secondary", "auto", "1"}, `role "secondary" is not primary, backup or both`},
		{[]string{"ha", "backup", "add", "backup", "later", "1"}, `recovery strategy "later"`},
		{[]string{"ha", "backup", "add", "backup", "auto", "70000"}, `port "70000" is not in 1..65535`},
		{[]string{"ha", "backup", "set"}, "at least one of the flags"},
		{[]string{"ha", "backup", "set", "--role", "secondary"}, `role "secondary" is not primary, backup or both`},
		{[]string{"ha", "backup", "set", "--recovery", "later"}, `recovery strategy "later"`},
		{[]string{"ha", "backup", "set", "--port", "0"}, "port 0 is not in 1..65535"},
		{[]string{"ha", "backup", "set", "auto"}, `takes no arguments (got "auto")`},
		{[]string{"ha", "reach", "add", "198.18.0.1+x"}, `address "x" is not an IP address`},
		{[]string{"ha", "takeover", "a", "b"}, "at most one ADDRESS"},
		{[]string{"ha", "sideways"}, `unknown command "sideways"`},
	} {
		r := dlbctl("/nonexistent", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dlbctl %v: exit %d, stderr %q; want exit %d naming %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

func TestHAStatusAndTakeover(t *testing.T) {
	eng := &fakeEngine{ha: api.HAReport{Configured: true, Running: true, Role: "backup", Recovery: "auto", Port: 12345,
		Healthy: true, Digest: "00000000000000aa", DigestMatch: true,
		Groups: []api.HAGroupReport{{Group: "peer", State: "standby", Since: "2026-01-01T00:00:00Z", Reason: "the peer serves the group",
			Clusters: []string{"198.18.0.100"}}},
		Peer: api.HAPeerReport{Alive: true, Heard: true, Role: "primary", Recovery: "auto", Healthy: true, Reach: 1, Targets: 1,
			States: []string{"active"}, Digest: "00000000000000aa"},
		Heartbeats:  []api.HAHeartbeatReport{{Source: "198.18.0.4", Destination: "198.18.0.2", Sent: 10, Received: 9, SecondsAgo: 0.2}},
		Reach:       []api.HAReachReport{{Address: "198.18.0.254", Reachable: true}},
		Replication: api.HAReplReport{Receiving: true, Synced: true, ReceivedRecords: 500, Imported: 500},
		Refused:     map[string]uint64{"unconfirmed boot": 1, "bad secret": 2}}}
	sock := serve(t, eng)
	r := dlbctl(sock, "highavailability", "status")
	if r.code != exitOK {
		t.Fatalf("status: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"role:", "backup, recovery auto, port 12345 (running)", "STANDBY since 2026-01-01T00:00:00Z, peer active\n", "changed because:", "the peer serves the group\n",
		"config digest:", "same as the peer's", "198.18.0.4 -> 198.18.0.2", "synced true", "198.18.0.254",
		"refused:", " bad secret 2, unconfirmed boot 1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	eng.mu.Lock()
	eng.ha.SecretPending, eng.ha.SecretError = true, "cannot read the shared secret: permission denied"
	eng.ha.PeerPort = 12346
	eng.ha.Stray = []api.HAHeartbeatReport{{Source: "198.18.0.4", Destination: "198.18.0.6", Received: 79, SecondsAgo: 0.3}}
	eng.mu.Unlock()
	r = dlbctl(sock, "highavailability", "status")
	for _, want := range []string{"the peer was last heard with another shared secret",
		"stray path:", "the peer's heartbeats arrive from 198.18.0.6 to 198.18.0.4, a path not configured here (79, the last 0.3s ago): " +
			"give both dispatchers the same paths (here: dlbctl highavailability heartbeat add 198.18.0.4 198.18.0.6; or change it back on the peer)\n",
		"port:", "the peer uses port 12346: heartbeats go to both ports, replication to 12346, until it uses 12345 too",
		"cannot read the shared secret: permission denied (the secret read before stays in use)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	// A dead peer's state is only the last it said.
	eng.mu.Lock()
	eng.ha.Peer.Alive = false
	eng.mu.Unlock()
	if r := dlbctl(sock, "highavailability", "status"); !strings.Contains(r.stdout, "peer dead (last heard active)") {
		t.Errorf("status of a dead peer:\n%s", r.stdout)
	}
	if r := dlbctl(sock, "ha", "takeover", "198.18.0.2"); r.code != exitOK {
		t.Fatalf("takeover: exit %d: %s", r.code, r.stderr)
	}
	if r := dlbctl(sock, "ha", "takeover"); r.code != exitOK {
		t.Fatalf("takeover: exit %d: %s", r.code, r.stderr)
	}
	if len(eng.takeovers) != 2 || eng.takeovers[0] != "198.18.0.2" || eng.takeovers[1] != "" {
		t.Errorf("takeovers %q", eng.takeovers)
	}
}

// TestHATableHealth: the status line of this dispatcher says why its
// executor is not forwarding, and says it was not checked when high
// availability does not run (it said "executor not forwarding: ", with
// no reason, for a function configured but not started).
func TestHATableHealth(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    api.HAReport
		want string
	}{
		{"forwarding", api.HAReport{Configured: true, Running: true, Healthy: true}, "executor forwarding"},
		{"not forwarding", api.HAReport{Configured: true, Running: true, HealthReason: "interface eth0 is down"},
			"executor not forwarding: interface eth0 is down"},
		{"not running", api.HAReport{Configured: true}, "not checked (high availability is not running)"},
	} {
		var b bytes.Buffer
		haTable(&b, tc.r)
		var line string
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "this dispatcher:") {
				line = strings.TrimSpace(strings.TrimPrefix(l, "this dispatcher:"))
			}
		}
		if line != tc.want {
			t.Errorf("%s: %q, want %q\n%s", tc.name, line, tc.want, b.String())
		}
	}
}

// TestHATableClusters: a group's line lists its clusters, the first few
// of many with their count.
func TestHATableClusters(t *testing.T) {
	many := make([]string, 4000)
	for i := range many {
		many[i] = fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)
	}
	for _, tc := range []struct {
		name     string
		clusters []string
		want     string
	}{
		{"two", many[:2], "198.19.0.1 198.19.0.2"},
		{"eight", many[:8], strings.Join(many[:8], " ")},
		{"many", many, strings.Join(many[:listedAddresses], " ") + " and 3992 more (4000 in all: -o json lists them)"},
	} {
		var b bytes.Buffer
		haTable(&b, api.HAReport{Configured: true, Running: true, Healthy: true,
			Groups: []api.HAGroupReport{{Group: "local", State: "active", Clusters: tc.clusters}}})
		line := ""
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "  clusters:") {
				line = strings.TrimSpace(strings.TrimPrefix(l, "  clusters:"))
			}
		}
		if line != tc.want {
			t.Errorf("%s: clusters line %q, want %q", tc.name, line, tc.want)
		}
	}
}

// TestHATableMerged: the merge of a peer's connections after a healed
// partition shows in the status only once there was one.
func TestHATableMerged(t *testing.T) {
	for _, tc := range []struct {
		name string
		rp   api.HAReplReport
		want string // "" for no merged line
	}{
		{"none", api.HAReplReport{Imported: 500}, ""},
		{"merged", api.HAReplReport{Imported: 500, Merged: 400, Kept: 30}, "400 records of connections the peer made while both " +
			"served written, 30 not (held here already: the same connection, or another used since)"},
	} {
		var b bytes.Buffer
		haTable(&b, api.HAReport{Configured: true, Running: true, Healthy: true, Replication: tc.rp})
		line := ""
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "merged:") {
				line = strings.TrimSpace(strings.TrimPrefix(l, "merged:"))
			}
		}
		if line != tc.want {
			t.Errorf("%s: merged line %q, want %q\n%s", tc.name, line, tc.want, b.String())
		}
	}
}

// TestHAStatusNotRunning: configured in part, high availability says
// what it lacks, in its status and in dlbctl status, and a missing role
// shows no empty recovery and port.
func TestHAStatusNotRunning(t *testing.T) {
	why := "no role yet (highavailability backup add primary|backup|both auto|manual PORT)"
	eng := &fakeEngine{ha: api.HAReport{Configured: true, Role: "none", Error: why,
		Heartbeats: []api.HAHeartbeatReport{{Source: "198.18.0.2", Destination: "198.18.0.4"}}}}
	sock := serve(t, eng)
	r := dlbctl(sock, "highavailability", "status")
	if want := " none (not running: " + why + ")\n"; r.code != exitOK || !strings.Contains(r.stdout, want) {
		t.Errorf("highavailability status: exit %d, want %q in\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	r = dlbctl(sock, "status")
	if want := "high availability is configured and not running: " + why; !strings.Contains(r.stdout, want) {
		t.Errorf("status: want %q in\n%s", want, r.stdout)
	}
}
