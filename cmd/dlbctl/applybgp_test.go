package main

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/server"
)

// recordingSpeaker stands for package bgp's speaker: it takes every
// configuration and records the last.
type recordingSpeaker struct {
	mu  sync.Mutex
	cfg lb.BGP
}

func (s *recordingSpeaker) Check(lb.BGP) error { return nil }

func (s *recordingSpeaker) Configure(b lb.BGP) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = b.Clone()
	return nil
}

func (s *recordingSpeaker) Announce([]lb.Route) error { return nil }

func (s *recordingSpeaker) Status() lb.BGPStatus { return lb.BGPStatus{} }

func (s *recordingSpeaker) Close() error { return nil }

func (s *recordingSpeaker) config() lb.BGP {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Clone()
}

// bgpDaemon is realDaemon with a BGP speaker.
func bgpDaemon(t *testing.T) (string, *recordingSpeaker) {
	t.Helper()
	sp := &recordingSpeaker{}
	eng, err := dispatcher.New(dispatcher.Options{
		StateDir:     t.TempDir(),
		OpenDatapath: func() (dispatcher.Datapath, error) { return &fakeDatapath{}, nil },
		Netif:        fakeNetif{},
		Logger:       slog.New(slog.DiscardHandler),
		MaxServices:  4096,
		MaxBackends:  16384,
		Speaker:      sp,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the engine did not stop")
		}
	})
	return serve(t, server.Handler(eng, slog.New(slog.DiscardHandler))), sp
}

// TestApplyRoundTripBGP: with the BGP speaker and announcements
// configured, "get | apply -f -" changes nothing (YAML and JSON); the
// file applied to an empty dlbd configures its speaker the same; and the
// diff's lines, loaded as a script into another, do too.
func TestApplyRoundTripBGP(t *testing.T) {
	a, spA := bgpDaemon(t)
	for _, cmd := range []string{
		"executor set nfa 192.0.2.10",
		"cluster add 10.0.0.100+10.0.0.101",
		"port add @80",
		"server add @80@10.1.1.5",
		"bgp set --asn 65001 --routerid 192.0.2.10 --listen-port 1179",
		"bgp neighbor add 192.0.2.1 --remote-as 65000",
		"bgp neighbor add 192.0.2.2 --remote-as 65001 --holdtime 30 --multihop 2 --port 1179 --bfd yes --password-file '/etc/dlb/bgp secret'",
		"bgp neighbor add 2001:2::1 --remote-as 65000 --holdtime 0",
		"cluster set 10.0.0.100 --announce yes --community 65000:100 --community no-export --med 20",
		"cluster set 10.0.0.101 --announce yes",
	} {
		if r := dlbctl(a, splitArgs(t, cmd)...); r.code != exitOK {
			t.Fatalf("%s: exit %d: %s", cmd, r.code, r.stderr)
		}
	}
	get := func(sock string, args ...string) string {
		t.Helper()
		r := dlbctl(sock, append([]string{"get"}, args...)...)
		if r.code != exitOK {
			t.Fatalf("get: exit %d: %s", r.code, r.stderr)
		}
		return r.stdout
	}
	file := get(a)
	for _, want := range []string{"\nbgp:\n  asn: 65001\n", "    announce: true\n", "      bfd: true\n", "      password-file: /etc/dlb/bgp secret\n"} {
		if !strings.Contains(file, want) {
			t.Fatalf("get printed no %q:\n%s", want, file)
		}
	}
	speaker := spA.config()
	if len(speaker.Neighbors) != 3 {
		t.Fatalf("the speaker has %+v", speaker)
	}

	// get | apply -f -: nothing to change, and the speaker keeps its
	// configuration.
	for _, format := range []string{"yaml", "json"} {
		if r := runIn(map[string]string{"DLB_SOCKET": a}, get(a, "-o", format), "apply", "-f", "-"); r.code != exitOK || r.stdout != "no changes\n" {
			t.Fatalf("applying what get -o %s printed: exit %d, %q, %s", format, r.code, r.stdout, r.stderr)
		}
	}
	if got := spA.config(); !got.Equal(speaker) {
		t.Errorf("get | apply changed the speaker to %+v", got)
	}

	// To an empty dlbd: its speaker ends up configured the same.
	b, spB := bgpDaemon(t)
	diff := runIn(map[string]string{"DLB_SOCKET": b}, file, "apply", "-f", "-", "--diff")
	if diff.code != exitOK || spB.config().Enabled() {
		t.Fatalf("--diff: exit %d (%s), or it configured the speaker", diff.code, diff.stderr)
	}
	for _, want := range []string{
		"+ bgp set --asn 65001 --routerid 192.0.2.10 --listen-port 1179\n",
		"+ bgp neighbor add 192.0.2.2 --remote-as 65001 --holdtime 30 --multihop 2 --port 1179 --password-file '/etc/dlb/bgp secret' --bfd yes\n",
		"+ cluster add 10.0.0.100 --announce yes --community 65000:100 --community no-export --med 20\n",
	} {
		if !strings.Contains(diff.stdout, want) {
			t.Errorf("the diff has no %q:\n%s", want, diff.stdout)
		}
	}
	if r := runIn(map[string]string{"DLB_SOCKET": b}, file, "apply", "-f", "-"); r.code != exitOK {
		t.Fatalf("apply: exit %d: %s", r.code, r.stderr)
	}
	if got := get(b); got != file {
		t.Errorf("the configuration applied to an empty dlbd differs:\n%s\nwant\n%s", got, file)
	}
	if got := spB.config(); !got.Equal(speaker) {
		t.Errorf("the file configured the speaker with %+v, want %+v", got, speaker)
	}

	// The diff's lines are dlbctl commands that make the same change.
	var script strings.Builder
	for _, l := range strings.Split(diff.stdout, "\n") {
		if len(l) > 2 && strings.Contains("+-~", l[:1]) && l[1] == ' ' {
			script.WriteString(l[2:] + "\n")
		}
	}
	path := filepath.Join(t.TempDir(), "diff.cfg")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := bgpDaemon(t)
	if r := dlbctl(c, "file", "load", path); r.code != exitOK {
		t.Fatalf("loading the diff as a script: exit %d: %s\n%s", r.code, r.stderr, script.String())
	}
	if got := get(c); got != file {
		t.Errorf("the diff loaded as a script makes\n%s\nwant\n%s", got, file)
	}

	// An edit of the file: only it is listed, as the command that makes
	// it, and the speaker follows.
	edited := strings.Replace(file, "  listen-port: 1179\n", "", 1)
	edited = strings.Replace(edited, "      holdtime: 30\n", "      holdtime: 90\n", 1)
	r := runIn(map[string]string{"DLB_SOCKET": a}, edited, "apply", "-f", "-")
	want := "~ bgp set --listen-port 0  # was listen-port 1179\n" +
		"~ bgp neighbor set 192.0.2.2 --holdtime 90  # was holdtime 30\n" +
		"applied 2 changes: 2 changed\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("edit: exit %d: %s%s\nwant\n%s", r.code, r.stdout, r.stderr, want)
	}
	if got := spA.config(); got.ListenPort != 0 || got.Neighbor(netip.MustParseAddr("192.0.2.2")).HoldTime != 90 {
		t.Errorf("the speaker has %+v", got)
	}
}
