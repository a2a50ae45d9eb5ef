// Package bgp is dlbd's BGP speaker: it embeds GoBGP (the only package
// that imports it) to hold sessions with routers and announce cluster
// addresses as /32 and /128 paths, with communities and a MED. The engine
// (package dispatcher) decides what is announced and when; a Speaker only
// carries it out, through the engine's Speaker interface.
//
// The speaker imports nothing from its neighbours (a global import policy
// rejects every received path), so its table holds only its own routes
// and it never re-advertises a router's routes. A neighbour is offered the
// address family of its own address: IPv4 clusters to IPv4 neighbours,
// IPv6 clusters to IPv6 neighbours, each with this host's address on the
// session as the next hop.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/smallfile"
)

// Timers of every session beyond the hold time.
const (
	// connectRetry is how often a session that is down is tried again, in
	// seconds (GoBGP's default is 120: far too slow to bring a dispatcher
	// back).
	connectRetry = 5
	// idleHold is how long a session waits after an error before it is
	// tried again, in seconds (GoBGP's default: 30).
	idleHold = 1
	// maxPassword is the longest TCP MD5 key (RFC 2385, TCP_MD5SIG_MAXKEYLEN).
	maxPassword = 80
	// maxPasswordFile bounds the password file read: a line of a key and
	// its newline, with room to say what else the file held.
	maxPasswordFile = 4 << 10
)

// Speaker is the BGP speaker. It is safe for concurrent use.
type Speaker struct {
	log *slog.Logger
	lvl *slog.LevelVar

	mu     sync.Mutex
	srv    *server.BgpServer // nil while not running
	cfg    lb.BGP            // what srv runs
	routes map[netip.Prefix]announced
	err    error // the last error starting the speaker or announcing

	// hostAddrs lists the host's addresses with their prefixes (tests
	// substitute it).
	hostAddrs func() ([]netip.Prefix, error)
}

// announced is a route and the id GoBGP gave its path (zero while the
// speaker is not running).
type announced struct {
	route lb.Route
	id    uuid.UUID
}

// New returns a speaker that is not running; Configure starts it. GoBGP
// logs through log at info level and above (a session going up or down is
// an info line; at debug level GoBGP writes every message it handles).
func New(log *slog.Logger) *Speaker {
	if log == nil {
		log = slog.Default()
	}
	lvl := &slog.LevelVar{}
	lvl.Set(slog.LevelInfo)
	return &Speaker{log: log, lvl: lvl, routes: map[netip.Prefix]announced{}, hostAddrs: interfacePrefixes}
}

// interfacePrefixes lists the host's (this network namespace's) addresses.
func interfacePrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the host's addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ones, _ := n.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

// Check refuses a configuration this host cannot run: a router id that is
// not one of its addresses, a neighbour that is one of its own addresses,
// a directly connected neighbour (no multihop) on none of its subnets, a
// password file that cannot be read or holds no usable key.
func (s *Speaker) Check(b lb.BGP) error {
	prefixes, err := s.hostAddrs()
	if err != nil {
		return err
	}
	owned := func(a netip.Addr) bool {
		return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Addr() == a })
	}
	onLink := func(a netip.Addr) bool {
		return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) && p.Bits() < p.Addr().BitLen() })
	}
	if !owned(b.RouterID) {
		return lb.Errorf("routerid", "bgp", "%s is not an address of this host (use one of its addresses, such as the nfa)", b.RouterID)
	}
	for _, n := range b.Neighbors {
		obj := n.Address.String()
		if owned(n.Address) {
			return lb.Errorf("neighbor", obj, "%s is an address of this host; a neighbour is a router", n.Address)
		}
		if n.Multihop == 0 && !onLink(n.Address) {
			return lb.Errorf("neighbor", obj, "%s is on none of this host's subnets; a router further away needs --multihop", n.Address)
		}
		if n.PasswordFile != "" {
			if _, err := readPassword(n.PasswordFile); err != nil {
				return lb.Errorf("passwordfile", obj, "%v", err)
			}
		}
	}
	return nil
}

// readPassword reads a TCP MD5 key from a file (one line; the trailing
// newline is not part of it).
func readPassword(file string) (string, error) {
	b, err := smallfile.Read(file, maxPasswordFile)
	if err != nil {
		return "", fmt.Errorf("reading the password: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	switch {
	case pw == "":
		return "", fmt.Errorf("%s holds no password", file)
	case len(pw) > maxPassword || strings.ContainsAny(pw, "\n\x00"):
		return "", fmt.Errorf("%s does not hold one line of at most %d bytes", file, maxPassword)
	}
	return pw, nil
}

// Configure starts the speaker, changes its sessions to match b, or stops
// it when b is not enabled. A change of the AS number, router id or
// listening port restarts it (its sessions with it); a neighbour whose
// settings changed has its session restarted. Announced routes are kept
// across.
func (s *Speaker) Configure(b lb.BGP) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !b.Enabled() {
		s.stop()
		s.err = nil
		return nil
	}
	if s.srv != nil && (s.cfg.ASN != b.ASN || s.cfg.RouterID != b.RouterID || s.cfg.ListenPort != b.ListenPort) {
		s.stop()
	}
	if s.srv == nil {
		if err := s.start(b); err != nil {
			s.err = err
			return err
		}
	}
	if err := s.syncPeers(b); err != nil {
		s.err = err
		return err
	}
	s.err = nil
	return nil
}

// start starts a GoBGP server for b's global settings and announces the
// routes it holds.
func (s *Speaker) start(b lb.BGP) error {
	log := slog.New(levelHandler{Handler: s.log.Handler(), min: s.lvl}).With("component", "gobgp")
	srv := server.NewBgpServer(server.LoggerOption(log, s.lvl))
	go srv.Serve()
	port := int32(b.ListenPort)
	if port == 0 {
		port = -1 // GoBGP: do not listen
	}
	ctx := context.Background()
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: b.ASN, RouterId: b.RouterID.String(), ListenPort: port,
	}})
	if err != nil {
		srv.Stop()
		return fmt.Errorf("starting BGP (as %d, router id %s, port %d): %w", b.ASN, b.RouterID, b.ListenPort, err)
	}
	// The speaker announces; it learns nothing. (The global import
	// policy also sees the speaker's own paths: those are accepted.)
	learnNothing := &api.Policy{Name: "dlb-learn-nothing", Statements: []*api.Statement{{
		Name:       "dlb-own-paths",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
	err = srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: learnNothing, ReferExistingStatements: false})
	if err == nil {
		err = srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
			Policies:      []*api.Policy{{Name: learnNothing.Name}},
			DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
		}})
	}
	if err != nil {
		srv.Stop()
		return fmt.Errorf("setting the import policy: %w", err)
	}
	s.srv, s.cfg = srv, lb.BGP{ASN: b.ASN, RouterID: b.RouterID, ListenPort: b.ListenPort}
	for p, a := range s.routes {
		id, err := s.add(a.route)
		if err != nil {
			s.log.Error("announcing after a restart of the speaker", "prefix", p, "err", err)
		}
		s.routes[p] = announced{route: a.route, id: id}
	}
	return nil
}

// stop closes the sessions (with a Cease notification: routers withdraw
// at once) and stops the server.
func (s *Speaker) stop() {
	if s.srv == nil {
		return
	}
	s.srv.Stop()
	s.srv, s.cfg = nil, lb.BGP{}
	for p, a := range s.routes {
		s.routes[p] = announced{route: a.route}
	}
}

// syncPeers adds, replaces and removes sessions to match b's neighbours.
func (s *Speaker) syncPeers(b lb.BGP) error {
	ctx := context.Background()
	var errs []error
	for _, o := range s.cfg.Neighbors {
		if n := b.Neighbor(o.Address); n != nil && *n == o {
			continue
		}
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: o.Address.String()}); err != nil {
			errs = append(errs, fmt.Errorf("removing neighbour %s: %w", o.Address, err))
		}
	}
	var kept []lb.BGPNeighbor
	for _, n := range b.Neighbors {
		if o := s.cfg.Neighbor(n.Address); o != nil && *o == n {
			kept = append(kept, n)
			continue
		}
		p, err := peer(n)
		if err == nil {
			err = s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: p})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("adding neighbour %s: %w", n.Address, err))
			continue
		}
		kept = append(kept, n)
	}
	s.cfg.Neighbors = kept
	return errors.Join(errs...)
}

// peer is GoBGP's configuration of a neighbour.
func peer(n lb.BGPNeighbor) (*api.Peer, error) {
	var pw string
	if n.PasswordFile != "" {
		var err error
		if pw, err = readPassword(n.PasswordFile); err != nil {
			return nil, err
		}
	}
	afi := api.Family_AFI_IP
	if n.Address.Is6() {
		afi = api.Family_AFI_IP6
	}
	return &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: n.Address.String(), PeerAsn: n.RemoteAS, AuthPassword: pw},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: uint64(n.HoldTime), KeepaliveInterval: uint64(n.HoldTime / 3),
			ConnectRetry: connectRetry, IdleHoldTimeAfterReset: idleHold,
		}},
		Transport:    &api.Transport{RemotePort: uint32(n.RemotePort())},
		Bfd:          bfd(n),
		EbgpMultihop: &api.EbgpMultihop{Enabled: n.Multihop > 0, MultihopTtl: uint32(n.Multihop)},
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{
			Family: &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true,
		}}},
	}, nil
}

// BFD timers: control packets every 200 ms, down after 3 missed. (GoBGP
// does not adopt a router's slower intervals: give the router the same.)
const (
	bfdInterval   = 200000 // microseconds
	bfdMultiplier = 3
)

// bfd is GoBGP's BFD configuration of a neighbour (nil: none).
func bfd(n lb.BGPNeighbor) *api.BfdPeerConfig {
	if !n.BFD {
		return nil
	}
	return &api.BfdPeerConfig{Enabled: true, DesiredMinimumTxInterval: bfdInterval,
		RequiredMinimumReceive: bfdInterval, DetectionMultiplier: bfdMultiplier}
}

// Announce makes the speaker announce exactly rs. Routes are kept while
// the speaker is stopped and announced when it starts.
func (s *Speaker) Announce(rs []lb.Route) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[netip.Prefix]lb.Route{}
	for _, r := range rs {
		if !r.Prefix.IsValid() || r.Prefix.Bits() != r.Prefix.Addr().BitLen() {
			return fmt.Errorf("announcing %s: not a host prefix", r.Prefix)
		}
		want[r.Prefix] = r
	}
	var errs []error
	for p, a := range s.routes {
		if _, ok := want[p]; ok {
			continue
		}
		if s.srv != nil && a.id != uuid.Nil {
			if err := s.withdraw(a.route); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		delete(s.routes, p)
	}
	for p, r := range want {
		if a, ok := s.routes[p]; ok && a.route.Equal(r) {
			continue
		}
		var id uuid.UUID
		if s.srv != nil {
			// A path for the same prefix replaces the one announced.
			var err error
			if id, err = s.add(r); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		s.routes[p] = announced{route: r, id: id}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.err = err
	}
	return err
}

// add announces a route and returns its path's id.
func (s *Speaker) add(r lb.Route) (uuid.UUID, error) {
	p, err := path(r)
	if err != nil {
		return uuid.Nil, err
	}
	res, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}})
	if err != nil {
		return uuid.Nil, fmt.Errorf("announcing %s: %w", r.Prefix, err)
	}
	return res[0].UUID, nil
}

// withdraw withdraws an announced route. By its path, not its id: GoBGP
// finds a path by id looking through every path it holds, which made
// withdrawing 4,000 cluster addresses take 10 s of CPU.
func (s *Speaker) withdraw(r lb.Route) error {
	p, err := path(r)
	if err == nil {
		err = s.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}})
	}
	if err != nil {
		return fmt.Errorf("withdrawing %s: %w", r.Prefix, err)
	}
	return nil
}

// path is GoBGP's path for a route: origin IGP, an unspecified next hop
// (GoBGP puts the session's local address in its place), the MED and the
// communities.
func path(r lb.Route) (*apiutil.Path, error) {
	nlri, err := gobgp.NewIPAddrPrefix(r.Prefix)
	if err != nil {
		return nil, fmt.Errorf("announcing %s: %w", r.Prefix, err)
	}
	attrs := []gobgp.PathAttributeInterface{gobgp.NewPathAttributeOrigin(gobgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	family := gobgp.RF_IPv4_UC
	if r.Prefix.Addr().Is4() {
		nh, err := gobgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, nh)
	} else {
		family = gobgp.RF_IPv6_UC
		mp, err := gobgp.NewPathAttributeMpReachNLRI(family, []gobgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, fmt.Errorf("announcing %s: %w", r.Prefix, err)
		}
		attrs = append(attrs, mp)
	}
	if r.MED != 0 {
		attrs = append(attrs, gobgp.NewPathAttributeMultiExitDisc(r.MED))
	}
	var std []uint32
	var large []*gobgp.LargeCommunity
	for _, c := range r.Communities {
		if v, ok := lb.CommunityValue(c); ok {
			std = append(std, v)
		} else if l, ok := lb.LargeCommunityValue(c); ok {
			large = append(large, gobgp.NewLargeCommunity(l[0], l[1], l[2]))
		} else {
			return nil, fmt.Errorf("announcing %s: %q is not a community", r.Prefix, c)
		}
	}
	if len(std) > 0 {
		attrs = append(attrs, gobgp.NewPathAttributeCommunities(std))
	}
	if len(large) > 0 {
		attrs = append(attrs, gobgp.NewPathAttributeLargeCommunities(large))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}, nil
}

// Status reports the sessions and the announced prefixes.
func (s *Speaker) Status() lb.BGPStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := lb.BGPStatus{Running: s.srv != nil}
	if s.err != nil {
		st.Err = s.err.Error()
	}
	for p, a := range s.routes {
		if a.id != uuid.Nil {
			st.Announced = append(st.Announced, p)
		}
	}
	slices.SortFunc(st.Announced, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if s.srv == nil {
		return st
	}
	err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		st.Neighbors = append(st.Neighbors, neighborStatus(p))
	})
	if err != nil && st.Err == "" {
		st.Err = fmt.Sprintf("listing the sessions: %v", err)
	}
	slices.SortFunc(st.Neighbors, func(a, b lb.BGPNeighborStatus) int { return a.Address.Compare(b.Address) })
	return st
}

// neighborStatus reads a session's state from GoBGP's report.
func neighborStatus(p *api.Peer) lb.BGPNeighborStatus {
	var n lb.BGPNeighborStatus
	if p.Conf != nil {
		n.Address, _ = netip.ParseAddr(p.Conf.NeighborAddress)
	}
	if p.State != nil {
		n.State = sessionState(p.State.SessionState)
		if r := p.State.DisconnectReason; r != api.PeerState_DISCONNECT_REASON_UNSPECIFIED {
			n.LastError = strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(r.String(), "DISCONNECT_REASON_"), "_", " "))
			if m := p.State.DisconnectMessage; m != "" {
				n.LastError += ": " + m
			}
		}
	}
	if p.Timers != nil && p.Timers.State != nil {
		ts := p.Timers.State
		if n.State == "established" && ts.Uptime != nil {
			n.Since = ts.Uptime.AsTime()
		}
		if n.State == "established" {
			n.HoldTime = uint32(ts.NegotiatedHoldTime)
		}
	}
	if p.State != nil && p.State.BfdState != nil {
		n.BFD = bfdState(p.State.BfdState.SessionState)
	}
	for _, af := range p.AfiSafis {
		if af.State != nil {
			n.Sent += af.State.Advertised
			n.Received += af.State.Received
			n.Accepted += af.State.Accepted
		}
	}
	return n
}

// bfdState names a BFD session state as RFC 5880 does.
func bfdState(s api.BfdSessionState) string {
	switch s {
	case api.BfdSessionState_BFD_SESSION_STATE_UP:
		return "up"
	case api.BfdSessionState_BFD_SESSION_STATE_DOWN:
		return "down"
	case api.BfdSessionState_BFD_SESSION_STATE_INIT:
		return "init"
	case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		return "admin down"
	}
	return ""
}

// sessionState names a session state as BGP does (RFC 4271).
func sessionState(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_SESSION_STATE_IDLE:
		return "idle"
	case api.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

// Close withdraws every route, closes the sessions and stops the speaker.
// The routes are forgotten.
func (s *Speaker) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.srv != nil && len(s.routes) > 0 {
		// Explicit withdrawals first: the Cease that follows makes
		// routers drop the session's routes too, but a router that
		// keeps them for graceful restart would not.
		err = s.srv.DeletePath(apiutil.DeletePathRequest{DeleteAll: true})
		if err == nil {
			time.Sleep(50 * time.Millisecond) // let the updates leave before the Cease
		}
	}
	s.stop()
	s.routes = map[netip.Prefix]announced{}
	if err != nil {
		return fmt.Errorf("withdrawing the routes: %w", err)
	}
	return nil
}

// levelHandler passes on records at or above a level only, whatever the
// level of the handler it wraps (dlbd's --log-level debug would otherwise
// get GoBGP's message traces).
type levelHandler struct {
	slog.Handler
	min slog.Leveler
}

// Enabled implements slog.Handler.
func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min.Level() && h.Handler.Enabled(ctx, l)
}

// WithAttrs implements slog.Handler.
func (h levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return levelHandler{Handler: h.Handler.WithAttrs(as), min: h.min}
}

// WithGroup implements slog.Handler.
func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{Handler: h.Handler.WithGroup(name), min: h.min}
}
