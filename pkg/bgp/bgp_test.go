package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/dlbproject/dlb/pkg/lb"
)

// router is a plain GoBGP server standing in for a router: it listens on
// loopback and accepts a session from the speaker.
type router struct {
	srv  *server.BgpServer
	port uint16
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func newRouter(t *testing.T, asn, peerAS uint32) *router {
	t.Helper()
	r := &router{srv: server.NewBgpServer(), port: freePort(t)}
	go r.srv.Serve()
	ctx := context.Background()
	if err := r.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: "198.18.0.254", ListenPort: int32(r.port), ListenAddresses: []string{"127.0.0.1"},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.srv.Stop)
	if err := r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: peerAS},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: 9, KeepaliveInterval: 3}},
	}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// rib returns the router's paths: prefix → "nexthop med communities".
func (r *router) rib(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_IPv4_UC},
		func(prefix gobgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				var nh, med string
				var comms []string
				for _, a := range p.Attrs {
					switch a := a.(type) {
					case *gobgp.PathAttributeNextHop:
						nh = a.Value.String()
					case *gobgp.PathAttributeMultiExitDisc:
						med = "med=" + itoa(a.Value)
					case *gobgp.PathAttributeCommunities:
						for _, c := range a.Value {
							comms = append(comms, itoa(c>>16)+":"+itoa(c&0xffff))
						}
					case *gobgp.PathAttributeLargeCommunities:
						for _, c := range a.Values {
							comms = append(comms, c.String())
						}
					}
				}
				out[prefix.String()] = strings.Join(strings.Fields(nh+" "+med+" "+strings.Join(comms, ",")), " ")
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

func sprint(v any) string { return fmt.Sprintf("%+v", v) }

// eventually polls f until it returns "" or the deadline passes.
func eventually(t *testing.T, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func speakerConfig(port uint16) lb.BGP {
	n := lb.NewBGPNeighbor(netip.MustParseAddr("127.0.0.1"))
	n.RemoteAS, n.Port = 65000, port
	return lb.BGP{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.2"), Neighbors: []lb.BGPNeighbor{n}}
}

func route(prefix string, med uint32, comms ...string) lb.Route {
	return lb.Route{Prefix: netip.MustParsePrefix(prefix), MED: med, Communities: comms}
}

// TestSpeakerAnnounces runs the speaker against a GoBGP router on
// loopback: the session comes up, routes appear with their attributes,
// change, and go; closing the speaker withdraws everything.
func TestSpeakerAnnounces(t *testing.T) {
	r := newRouter(t, 65000, 65001)
	s := New(quiet)
	defer s.Close()
	// Routes given before the speaker runs are announced once it does.
	if err := s.Announce([]lb.Route{route("198.18.0.100/32", 0)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Configure(speakerConfig(r.port)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "session", func() string {
		st := s.Status()
		if len(st.Neighbors) != 1 || st.Neighbors[0].State != "established" {
			return "not established: " + sprint(st)
		}
		if st.Neighbors[0].HoldTime != 9 || st.Neighbors[0].Since.IsZero() {
			return "bad session report: " + sprint(st)
		}
		return ""
	})
	ribIs := func(want map[string]string) func() string {
		return func() string {
			got := r.rib(t)
			if len(got) != len(want) {
				return "rib " + sprint(got)
			}
			for k, v := range want {
				if got[k] != v {
					return "rib " + sprint(got)
				}
			}
			return ""
		}
	}
	eventually(t, "first route", ribIs(map[string]string{"198.18.0.100/32": "127.0.0.1"}))

	if err := s.Announce([]lb.Route{route("198.18.0.100/32", 20, "65000:100", "65000:1:2"), route("198.18.0.101/32", 0, "no-export")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "changed routes", ribIs(map[string]string{
		"198.18.0.100/32": "127.0.0.1 med=20 65000:100,65000:1:2",
		"198.18.0.101/32": "127.0.0.1 65535:65281",
	}))
	eventually(t, "sent count", func() string {
		if st := s.Status(); st.Neighbors[0].Sent != 2 || len(st.Announced) != 2 {
			return sprint(st)
		}
		return ""
	})

	if err := s.Announce([]lb.Route{route("198.18.0.101/32", 0, "no-export")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "withdrawal", ribIs(map[string]string{"198.18.0.101/32": "127.0.0.1 65535:65281"}))

	// A new hold time restarts the session and keeps the routes.
	cfg := speakerConfig(r.port)
	cfg.Neighbors[0].HoldTime = 30
	if err := s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "renegotiated", func() string {
		if st := s.Status(); len(st.Neighbors) != 1 || st.Neighbors[0].State != "established" || st.Neighbors[0].HoldTime != 9 {
			return sprint(st)
		}
		return ""
	})
	eventually(t, "routes after the restart", ribIs(map[string]string{"198.18.0.101/32": "127.0.0.1 65535:65281"}))

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "close", ribIs(map[string]string{}))
	if st := s.Status(); st.Running || len(st.Announced) != 0 {
		t.Errorf("after close: %+v", st)
	}
}

// TestSpeakerWithdrawsMany: of thousands of routes, the ones no longer wanted are withdrawn and exactly the rest reach the
// router.
func TestSpeakerWithdrawsMany(t *testing.T) {
	r := newRouter(t, 65000, 65001)
	s := New(quiet)
	defer s.Close()
	if err := s.Configure(speakerConfig(r.port)); err != nil {
		t.Fatal(err)
	}
	var all, keep []lb.Route
	for i := range 3000 {
		all = append(all, route(fmt.Sprintf("198.19.%d.%d/32", i/250, i%250+1), uint32(i%2)))
		if i%5 == 0 {
			keep = append(keep, all[i])
		}
	}
	if err := s.Announce(all); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Announce(keep); err != nil {
		t.Fatal(err)
	}
	t.Logf("withdrew %d of %d routes in %v", len(all)-len(keep), len(all), time.Since(start).Round(time.Millisecond))
	if n := len(s.Status().Announced); n != len(keep) {
		t.Errorf("%d routes announced after the withdrawals, want %d", n, len(keep))
	}
	eventually(t, "the kept routes at the router", func() string {
		got := r.rib(t)
		if len(got) != len(keep) {
			return fmt.Sprintf("%d routes, want %d", len(got), len(keep))
		}
		for _, k := range keep {
			if _, ok := got[k.Prefix.String()]; !ok {
				return fmt.Sprintf("%s missing", k.Prefix)
			}
		}
		return ""
	})
}

// TestSpeakerStops checks that configuring BGP off stops the sessions,
// and that a new AS number restarts the speaker with its routes.
func TestSpeakerStops(t *testing.T) {
	r := newRouter(t, 65000, 65002)
	s := New(quiet)
	defer s.Close()
	cfg := speakerConfig(r.port)
	if err := s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce([]lb.Route{route("198.18.0.100/32", 0)}); err != nil {
		t.Fatal(err)
	}
	// The router expects AS 65002: the session does not come up.
	time.Sleep(500 * time.Millisecond)
	if got := r.rib(t); len(got) != 0 {
		t.Fatalf("a session with the wrong AS delivered %v", got)
	}
	cfg.ASN = 65002
	if err := s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "route after the new AS", func() string {
		if got := r.rib(t); got["198.18.0.100/32"] != "127.0.0.1" {
			return sprint(got)
		}
		return ""
	})
	if err := s.Configure(lb.BGP{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "stopped", func() string {
		if got := r.rib(t); len(got) != 0 {
			return sprint(got)
		}
		return ""
	})
	if st := s.Status(); st.Running || len(st.Neighbors) != 0 {
		t.Errorf("stopped speaker reports %+v", st)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(quiet)
	s.hostAddrs = func() ([]netip.Prefix, error) {
		return []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("198.18.9.9/32")}, nil
	}
	nb := func(a string, mh uint8, pw string) lb.BGPNeighbor {
		n := lb.NewBGPNeighbor(netip.MustParseAddr(a))
		n.RemoteAS, n.Multihop, n.PasswordFile = 65000, mh, pw
		return n
	}
	for _, tc := range []struct {
		name     string
		routerID string
		n        lb.BGPNeighbor
		field    string
		msg      string
	}{
		{"fine", "198.18.0.2", nb("198.18.0.1", 0, good), "", ""},
		{"multihop", "198.18.0.2", nb("198.18.5.1", 2, ""), "", ""},
		{"router id not owned", "198.18.0.7", nb("198.18.0.1", 0, ""), "routerid", "not an address of this host"},
		{"neighbour is us", "198.18.0.2", nb("198.18.9.9", 0, ""), "neighbor", "is an address of this host"},
		{"neighbour off link", "198.18.0.2", nb("198.18.5.1", 0, ""), "neighbor", "on none of this host's subnets"},
		{"a /32 is no subnet", "198.18.0.2", nb("198.18.9.9", 0, ""), "neighbor", "address of this host"},
		{"missing password", "198.18.0.2", nb("198.18.0.1", 0, filepath.Join(dir, "nope")), "passwordfile", "no such file"},
		{"empty password", "198.18.0.2", nb("198.18.0.1", 0, empty), "passwordfile", "holds no password"},
		// Neither may stop the engine: reading a pipe waited for a
		// writer, reading /dev/zero for the memory to run out.
		{"password a named pipe", "198.18.0.2", nb("198.18.0.1", 0, fifo), "passwordfile", "is a named pipe, not a regular file"},
		{"password an endless device", "198.18.0.2", nb("198.18.0.1", 0, "/dev/zero"), "passwordfile", "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Check(lb.BGP{ASN: 65001, RouterID: netip.MustParseAddr(tc.routerID), Neighbors: []lb.BGPNeighbor{tc.n}})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || lb.FieldOf(err) != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v (field %q), want field %q and %q", err, lb.FieldOf(err), tc.field, tc.msg)
			}
		})
	}
}

func TestPath(t *testing.T) {
	p, err := path(route("2001:2::100/128", 7, "no-export", "1:2:3"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Family != gobgp.RF_IPv6_UC {
		t.Errorf("family %v", p.Family)
	}
	var kinds []string
	for _, a := range p.Attrs {
		kinds = append(kinds, a.GetType().String())
	}
	for _, want := range []string{"BGP_ATTR_TYPE_ORIGIN", "BGP_ATTR_TYPE_MP_REACH_NLRI", "BGP_ATTR_TYPE_MULTI_EXIT_DISC",
		"BGP_ATTR_TYPE_COMMUNITIES", "BGP_ATTR_TYPE_LARGE_COMMUNITY"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("attributes %v lack %s", kinds, want)
		}
	}
	if err := New(quiet).Announce([]lb.Route{route("198.18.0.0/24", 0)}); err == nil {
		t.Error("a /24 was accepted for announcement")
	}
}

// quiet discards GoBGP's log lines.
var quiet = slog.New(slog.DiscardHandler)

// TestSpeakerAnnouncesIPv6: a /128 goes to an IPv6 neighbour with the
// session's local address as its next hop, and is withdrawn.
func TestSpeakerAnnouncesIPv6(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	r := server.NewBgpServer()
	go r.Serve()
	ctx := context.Background()
	if err := r.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: 65000, RouterId: "198.18.0.254", ListenPort: int32(port), ListenAddresses: []string{"::1"},
	}}); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	v6 := &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
	if err := r.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "::1", PeerAsn: 65001},
		Transport: &api.Transport{PassiveMode: true},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: v6, Enabled: true}}},
	}}); err != nil {
		t.Fatal(err)
	}
	s := New(quiet)
	defer s.Close()
	n := lb.NewBGPNeighbor(netip.MustParseAddr("::1"))
	n.RemoteAS, n.Port = 65000, port
	if err := s.Configure(lb.BGP{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.2"), Neighbors: []lb.BGPNeighbor{n}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce([]lb.Route{route("2001:2::100/128", 5, "65000:7")}); err != nil {
		t.Fatal(err)
	}
	rib6 := func(want ...string) func() string {
		return func() string {
			var got []string
			err := r.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_IPv6_UC},
				func(prefix gobgp.NLRI, paths []*apiutil.Path) {
					for _, p := range paths {
						for _, a := range p.Attrs {
							if mp, ok := a.(*gobgp.PathAttributeMpReachNLRI); ok {
								got = append(got, prefix.String()+" via "+mp.Nexthop.String())
							}
						}
					}
				})
			if err != nil {
				return err.Error()
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Sprint(got)
			}
			return ""
		}
	}
	eventually(t, "IPv6 route", rib6("2001:2::100/128 via ::1"))
	// A second route, then the first withdrawn (by its path).
	if err := s.Announce([]lb.Route{route("2001:2::100/128", 5, "65000:7"), route("2001:2::101/128", 0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two IPv6 routes", rib6("2001:2::100/128 via ::1", "2001:2::101/128 via ::1"))
	if err := s.Announce([]lb.Route{route("2001:2::101/128", 0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "an IPv6 route withdrawn", rib6("2001:2::101/128 via ::1"))
}

func TestPeerConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     lb.BGPNeighbor
		check func(p *api.Peer) string
	}{
		{"defaults", lb.NewBGPNeighbor(netip.MustParseAddr("198.18.0.1")), func(p *api.Peer) string {
			if p.Bfd != nil || p.Transport.RemotePort != 179 || p.Timers.Config.HoldTime != 9 || p.Timers.Config.KeepaliveInterval != 3 ||
				p.EbgpMultihop.Enabled || p.AfiSafis[0].Config.Family.Afi != api.Family_AFI_IP {
				return fmt.Sprint(p)
			}
			return ""
		}},
		{"bfd, multihop, IPv6", lb.BGPNeighbor{Address: netip.MustParseAddr("2001:2::1"), BFD: true, Multihop: 4, HoldTime: 30},
			func(p *api.Peer) string {
				if p.Bfd == nil || !p.Bfd.Enabled || p.Bfd.DesiredMinimumTxInterval != 200000 || p.Bfd.DetectionMultiplier != 3 ||
					!p.EbgpMultihop.Enabled || p.EbgpMultihop.MultihopTtl != 4 || p.AfiSafis[0].Config.Family.Afi != api.Family_AFI_IP6 {
					return fmt.Sprint(p)
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := peer(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(p); msg != "" {
				t.Error(msg)
			}
		})
	}
}
