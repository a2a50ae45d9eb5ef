// Package ha is dlb's high-availability function, IBM style: two
// dispatchers exchange heartbeats (UDP, authenticated with a shared
// secret, sequence-numbered so that a replay is refused), ping reach
// targets, decide which of them serves each group of clusters (machine.go
// says by which rules), and carry the active's connection-table entries
// to the standby (stream.go).
//
// The engine (package dispatcher) drives a Node through an interface: it
// says whether the executor can forward and what to replicate, and acts
// on the states the Node decides (addresses on the interface, gratuitous
// ARP, forwarding of new connections). The Node knows nothing of the
// executor or of the host's interfaces.
//
// What a heartbeat proves: that dlbd runs on the peer, and that the
// peer's executor is attached to an interface that is up (the flag
// "healthy"; a peer that is heard but unhealthy is taken over at once).
// A peer that stops heartbeats for count × interval is dead, unless it
// said, when it stopped gracefully (SIGTERM: a restart, an upgrade), that
// it was restarting: its pinned executor keeps forwarding, and it is
// given the restart grace (30 s by default) to come back before it is
// taken over. A dlbd killed without warning (SIGKILL, a crash) cannot be
// told from a dead host and is taken over after count × interval.
package ha

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/smallfile"
	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"
)

// DefaultRestartGrace is how long a peer that said it was restarting is
// waited for.
const DefaultRestartGrace = 30 * time.Second

// Options configure a Node.
type Options struct {
	// Logger receives the Node's log; slog.Default() when nil.
	Logger *slog.Logger
	// Probe pings a reach target from source within timeout; nil uses
	// package advisors' ping.
	Probe func(ctx context.Context, target, source netip.Addr, timeout time.Duration) error
	// RestartGrace is announced when the Node stops for a restart
	// (default DefaultRestartGrace).
	RestartGrace time.Duration
	// ReadSecret reads the secret file (default: a regular file of at
	// most 4 KiB, package smallfile).
	ReadSecret func(path string) ([]byte, error)
	// SecretCheck is how often the secret file is read again while the
	// function runs (default DefaultSecretCheck): a secret changed in
	// the file is used without a command.
	SecretCheck time.Duration
	// PeerSecretFile keeps the secret the peer was last heard with
	// across restarts (mode 0600; "": not kept): a dlbd restarted after
	// its secret file changed, the peer's not yet, still hears the peer
	// (the two served side by side). It holds the current secret once
	// both have it.
	PeerSecretFile string
}

// PeerSecretFileName is the file, in dlbd's state directory, that
// Options.PeerSecretFile names.
const PeerSecretFileName = "ha-peer.secret"

// DefaultSecretCheck is how often the secret file is read again.
const DefaultSecretCheck = time.Second

// Node runs high availability for one dispatcher.
type Node struct {
	opts Options
	log  *slog.Logger
	boot uint64

	notify chan struct{}
	// activated carries each group decided active (Activated).
	activated chan lb.HAGroup
	received  chan Batch

	mu  sync.Mutex
	cfg lb.HighAvailability
	key []byte
	// peerKey is the secret the peer's last accepted heartbeat was
	// authenticated with (nil: none yet). While it differs from key (the
	// secret was changed here first), heartbeats are accepted and sent
	// under both, and replication uses it: the pair keeps hearing each
	// other until the peer has the new secret too (rotateSecretLocked).
	peerKey []byte
	// peerPort is the port the peer's last accepted heartbeat came from
	// (its configured port; 0: none heard yet). While it differs from
	// this dispatcher's (the port was changed on one side first),
	// heartbeats go to both ports and replication to the peer's: the
	// pair keeps hearing each other until both use the new port.
	peerPort uint16
	// secretErr is why the secret file, read again, cannot be used
	// ("": it can), logged once per reason; exposedWarned the secret
	// file last warned of as readable by others.
	secretErr, exposedWarned string
	running                  bool
	// rebinding: the function runs, its sockets being opened again
	// (Configure): Status and PeerRole say it runs (upLocked).
	rebinding bool
	// started is when startLocked last opened the sockets.
	started time.Time
	err     string
	stop    context.CancelFunc
	wg      sync.WaitGroup
	socks   map[netip.Addr]*net.UDPConn
	lns     map[netip.Addr]net.Listener
	seq     uint64
	lastTx  time.Time

	healthy      bool
	healthReason string
	digest       uint64
	takeover     [lb.NumHAGroups]bool
	groups       [lb.NumHAGroups]group

	peer peerState
	// answer: a heartbeat heard from a peer that was not alive (or
	// restarted) is to be answered once the burst's decision is taken.
	answer    bool
	reach     []reachState
	refused   map[string]uint64
	pathStats map[lb.Heartbeat]*lb.HAPathStatus
	// stray are the paths not configured here that authenticated
	// heartbeats arrived on (the peer's paths differ), at most maxStray.
	stray map[lb.Heartbeat]*lb.HAPathStatus

	// replication, sending side
	outq        chan Batch
	outConn     *conn
	session     uint64
	sentRecords uint64
	markerBase  uint64
	markers     uint64
	markerSent  map[uint64]time.Time
	lastAckRTT  time.Duration
	// receiving side
	inConn       *conn
	recvRecords  uint64
	lastFull     uint64 // the marker ending the latest full copy received
	importedUpTo uint64
	synced       bool
}

// peerState is what the peer's heartbeats said.
type peerState struct {
	fresh      freshness
	heard      bool
	last       message
	lastHeard  time.Time
	graceUntil time.Time
	// hostAnswered is when the peer's host last answered a ping,
	// hostFails how many pings it left unanswered since, or since its
	// restart grace began (notePeerHostLocked): a restarting peer whose host
	// answered and then stops answering is down, not restarting dlbd.
	hostAnswered time.Time
	hostFails    int
	// recent are the last fresh heartbeats (their boots and sequence
	// numbers, when), accepted or refused until the peer confirms this
	// boot: the same heartbeat on another path is a copy, not a replay
	// (isCopyLocked).
	recent [4]heardSeq
}

// heardSeq is a fresh heartbeat: its boot and sequence number, when.
type heardSeq struct {
	boot, seq uint64
	at        time.Time
}

// reachState is one reach target's probing.
type reachState struct {
	addr  netip.Addr
	ok    bool
	fails int
	err   string
}

// New returns a Node; it runs once Configure gives it an enabled
// configuration.
func New(opts Options) *Node {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RestartGrace == 0 {
		opts.RestartGrace = DefaultRestartGrace
	}
	if opts.ReadSecret == nil {
		opts.ReadSecret = readSecretFile
	}
	if opts.SecretCheck <= 0 {
		opts.SecretCheck = DefaultSecretCheck
	}
	if opts.Probe == nil {
		opts.Probe = ping
	}
	boot := binary.BigEndian.Uint64(nonce(8)) | 1
	return &Node{opts: opts, log: opts.Logger.With("component", "ha"), boot: boot,
		notify: make(chan struct{}, 1), activated: make(chan lb.HAGroup, 2*lb.NumHAGroups), received: make(chan Batch, 16),
		refused: map[string]uint64{}, pathStats: map[lb.Heartbeat]*lb.HAPathStatus{}, stray: map[lb.Heartbeat]*lb.HAPathStatus{},
		markerBase: uint64(time.Now().UnixNano()), markerSent: map[uint64]time.Time{}}
}

// ping probes a reach target with package advisors' ping.
func ping(ctx context.Context, target, source netip.Addr, timeout time.Duration) error {
	a, err := advisors.New("ping")
	if err != nil {
		return err
	}
	r := a.Probe(ctx, advisors.Target{Address: target, Source: source, ConnectTimeout: timeout, ReceiveTimeout: timeout})
	if !r.Up {
		return errors.New(r.Reason)
	}
	return nil
}

// Notify is signalled whenever a group's state or the peer's changes:
// the engine then reads Status.
func (n *Node) Notify() <-chan struct{} { return n.notify }

// Activated delivers each group the moment this node decides to serve
// it, for the takeover's fast path (its addresses on at once); Notify and
// Status tell the rest. A receiver that falls behind misses decisions
// rather than holding the node up.
func (n *Node) Activated() <-chan lb.HAGroup { return n.activated }

// Received delivers the peer's replication, in order.
func (n *Node) Received() <-chan Batch { return n.received }

func (n *Node) signal() {
	select {
	case n.notify <- struct{}{}:
	default:
	}
}

// Check refuses a configuration this host cannot run: a heartbeat
// source it does not own, or whose port another program holds (UDP for
// the heartbeats, TCP for replication: the sockets cannot bind), an
// unreadable or empty secret file. It changes nothing.
func (n *Node) Check(h lb.HighAvailability) error {
	if !h.Enabled() {
		return nil
	}
	if _, err := n.readSecret(h); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, src := range h.Sources() {
		if n.running && n.cfg.Port == h.Port && n.socks[src] != nil {
			continue // bound already
		}
		c, l, err := bindSource(src, h.Port)
		if err != nil {
			return err
		}
		c.Close()
		l.Close()
	}
	return nil
}

// bindSource opens a heartbeat source's sockets: UDP for the heartbeats,
// TCP on the same port for replication.
func bindSource(src netip.Addr, port uint16) (*net.UDPConn, net.Listener, error) {
	ap := netip.AddrPortFrom(src, port)
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, nil, lb.Errorf("source", src.String(), "cannot send heartbeats from %s port %d: %v", src, port, bindReason(err))
	}
	l, err := net.Listen("tcp", ap.String())
	if err != nil {
		c.Close()
		return nil, nil, lb.Errorf("source", src.String(), "cannot accept replication on %s: %v", ap, bindReason(err))
	}
	return c, l, nil
}

// bindReason shortens a bind error.
func bindReason(err error) string {
	s := err.Error()
	if strings.Contains(s, "assign requested address") {
		return "the address is not on this host"
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// minSecret is the shortest shared secret accepted, in bytes.
const minSecret = 8

// parseSecret is the secret a file holds: its content without the
// surrounding white space, of at least minSecret bytes.
func parseSecret(b []byte) ([]byte, error) {
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < minSecret {
		return nil, fmt.Errorf("the shared secret is shorter than %d bytes", minSecret)
	}
	return key, nil
}

// maxSecretFile bounds the secret file read.
const maxSecretFile = 4 << 10

// readSecretFile reads a secret file: a regular file of at most
// maxSecretFile bytes (a named pipe would stop the engine, /dev/zero
// exhaust its memory).
func readSecretFile(path string) ([]byte, error) {
	return smallfile.Read(path, maxSecretFile)
}

// secretExposed says why users other than the file's owner and dlbd's
// may read the secret file at path (nil: they may not, or it cannot be
// opened).
func secretExposed(path string) error {
	f, fi, err := smallfile.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	return smallfile.Private(f, fi)
}

// rotateSecretLocked makes key the secret heartbeats and replication
// use. The one the peer was last heard with stays accepted, and
// heartbeats go under it too, until the peer is heard with the new one:
// the two dispatchers' secret files are changed one after the other, and
// the pair must not stop hearing each other in between (each would
// serve: two actives).
func (n *Node) rotateSecretLocked(key []byte) {
	if n.key != nil && !bytes.Equal(key, n.key) {
		if n.peerKey != nil && !bytes.Equal(key, n.peerKey) {
			n.log.Info("high availability: the shared secret changed; the peer's stays accepted, and heartbeats go under both, until the peer is heard with the new one")
		} else {
			n.log.Info("high availability: the shared secret changed")
		}
	}
	n.key = key
}

// loadPeerKey reads the secret the peer was last heard with before this
// dlbd started (nil: none kept, or unusable).
func (n *Node) loadPeerKey() []byte {
	if n.opts.PeerSecretFile == "" {
		return nil
	}
	b, err := readSecretFile(n.opts.PeerSecretFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		b, err = parseSecret(b)
	}
	if err != nil {
		n.log.Warn("high availability: the secret the peer was last heard with cannot be read; not used", "file", n.opts.PeerSecretFile, "err", err)
		return nil
	}
	return b
}

// savePeerKey keeps key as the secret the peer was last heard with
// (PeerSecretFile). Written at a change only: the first heartbeat heard,
// a rotation.
func (n *Node) savePeerKey(key []byte) {
	if n.opts.PeerSecretFile == "" {
		return
	}
	if err := renameio.WriteFile(n.opts.PeerSecretFile, key, 0o600); err != nil {
		n.log.Warn("high availability: keeping the secret the peer was heard with for a restart", "file", n.opts.PeerSecretFile, "err", err)
	}
}

// removePeerKey removes the kept secret: high availability stopped.
func (n *Node) removePeerKey() {
	if n.opts.PeerSecretFile == "" {
		return
	}
	if err := os.Remove(n.opts.PeerSecretFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.log.Warn("high availability: removing the kept secret", "file", n.opts.PeerSecretFile, "err", err)
	}
}

// secretKeysLocked are the secrets a heartbeat is tried with: this
// dispatcher's, and the one the peer was last heard with if it differs.
func (n *Node) secretKeysLocked() [][]byte {
	if n.peerKey == nil || bytes.Equal(n.peerKey, n.key) {
		return [][]byte{n.key}
	}
	return [][]byte{n.key, n.peerKey}
}

// streamKeyLocked is the secret a replication handshake uses: the one
// the peer was last heard with (it holds that one), else this
// dispatcher's.
func (n *Node) streamKeyLocked() []byte {
	if n.peerKey != nil {
		return n.peerKey
	}
	return n.key
}

// watchSecret reads the secret file again every SecretCheck: a secret
// changed there is used at once (rotateSecretLocked), one that cannot be
// used (too short, unreadable, half written) is logged and the former
// one kept.
func (n *Node) watchSecret(ctx context.Context) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.opts.SecretCheck):
		}
		n.mu.Lock()
		h := n.cfg.Clone()
		n.mu.Unlock()
		key, err := n.readSecret(h)
		n.mu.Lock()
		switch {
		case !n.running || n.cfg.SecretFile != h.SecretFile:
			// Reconfigured meanwhile: Configure read the file.
		case err != nil:
			if err.Error() != n.secretErr {
				n.secretErr = err.Error()
				n.log.Warn("high availability: the shared secret file, read again, cannot be used; the secret read before stays in use", "err", err)
			}
		default:
			n.secretErr = ""
			if !bytes.Equal(key, n.key) {
				n.rotateSecretLocked(key)
				n.sendLocked(false)
			}
		}
		n.mu.Unlock()
	}
}

func (n *Node) readSecret(h lb.HighAvailability) ([]byte, error) {
	b, err := n.opts.ReadSecret(h.SecretFile)
	if err != nil {
		return nil, lb.Errorf("secretfile", h.SecretFile, "cannot read the shared secret: %v", err)
	}
	key, err := parseSecret(b)
	if err != nil {
		return nil, lb.Errorf("secretfile", h.SecretFile, "%v", err)
	}
	return key, nil
}

// Resume starts the groups in the states a previous dlbd left them in,
// when the executor kept forwarding across its restart: an active stays
// active instead of listening again (which could hand its clusters to
// the peer), unless the peer, once heard, serves the group (it took it
// over while dlbd was down): then it stands by. Nothing is decided until
// the peer is heard or the dead time passes (a standby would otherwise
// take the group at once, its peer not heard yet). Call it before the
// first Configure.
func (n *Node) Resume(states [lb.NumHAGroups]lb.HAState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	for g, st := range states {
		if st == lb.HAActive || st == lb.HAStandby {
			n.groups[g] = group{state: st, since: now, reason: "resumed after a restart of dlbd", resumed: true}
		}
	}
}

// Abandon makes every group listen, serving nothing, for reason: the
// engine lets go of the groups a restart resumed when the function has
// not run for as long as the peer waits for a restarting dlbd (its
// secret file unreadable, a heartbeat source not on the host): the peer,
// not hearing it, has taken them over meanwhile.
func (n *Node) Abandon(reason string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	for g := range n.groups {
		n.groups[g] = group{state: lb.HAListen, since: now, reason: reason}
	}
}

// RestartGrace is how long the peer waits for this dispatcher's dlbd to
// come back after it said it was restarting.
func (n *Node) RestartGrace() time.Duration { return n.opts.RestartGrace }

// Configure starts, reconfigures or (for a configuration that is not
// enabled) stops high availability. The digest is this dispatcher's
// configuration digest, announced to the peer.
func (n *Node) Configure(h lb.HighAvailability, digest uint64) error {
	if !h.Enabled() {
		n.Stop(false)
		n.mu.Lock()
		n.cfg = h.Clone()
		n.digest = digest
		n.groups = [lb.NumHAGroups]group{}
		n.err = ""
		n.peerKey, n.peerPort, n.secretErr = nil, 0, ""
		n.mu.Unlock()
		n.removePeerKey()
		n.signal()
		return nil
	}
	key, err := n.readSecret(h)
	if err != nil {
		// Refused changes never get here (Check reads it first); a
		// start whose secret file went away does: status says why the
		// function does not run, and names its groups (the engine
		// retries, and lets go of them if it keeps failing: Abandon).
		n.mu.Lock()
		if !n.running {
			n.err = err.Error()
			n.cfg, n.digest = h.Clone(), digest
		}
		n.mu.Unlock()
		return err
	}
	// Warned, not refused: refusing would stop a running pair at the
	// upgrade that brought the check. Once while it lasts, not at each of
	// the engine's retries of a start that failed.
	exposed := secretExposed(h.SecretFile)
	n.mu.Lock()
	if exposed != nil && n.exposedWarned != h.SecretFile {
		n.log.Warn("others may read the shared secret file, and with it forge heartbeats and replication: make it private",
			"file", h.SecretFile, "err", exposed)
		n.exposedWarned = h.SecretFile
	} else if exposed == nil {
		n.exposedWarned = ""
	}
	n.mu.Unlock()
	n.mu.Lock()
	rebind := !n.running || n.cfg.Port != h.Port || !slices.Equal(n.cfg.Sources(), h.Sources())
	if n.running && n.cfg.Port != h.Port && n.peerPort == 0 {
		// The peer not heard yet (dlbd restarted with its saved
		// configuration, a file with another port applied at once):
		// it is presumed on the port this dispatcher used, until heard.
		n.peerPort = n.cfg.Port
	}
	roleChanged := n.cfg.Role != lb.RoleNone && n.cfg.Role != h.Role
	intervalChanged := n.cfg.IntervalMS() != h.IntervalMS()
	n.mu.Unlock()
	if rebind {
		// What the peer said stays: it is heard again on the new
		// sockets within its dead time; forgotten, a standby would
		// take the groups over at once, the peer not heard.
		n.mu.Lock()
		n.rebinding = n.running
		n.mu.Unlock()
		n.halt(false, true)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	defer func() { n.rebinding = false }()
	n.cfg, n.digest = h.Clone(), digest
	if !n.running && n.peerKey == nil {
		n.peerKey = n.loadPeerKey()
	}
	n.rotateSecretLocked(key)
	// A new role decides every group anew. A group outside the role is
	// idle: resumed from states journaled under another role, it would
	// never decide (only the role's groups do), and its heartbeats would
	// never confirm the peer's boot.
	for g := range n.groups {
		if !slices.Contains(h.Groups(), lb.HAGroup(g)) || roleChanged && n.groups[g].state != lb.HANoExecutor {
			n.groups[g] = group{}
		}
	}
	old := n.reach
	n.reach = nil
	for _, a := range h.Reach {
		rs := reachState{addr: a}
		for _, o := range old {
			if o.addr == a {
				rs = o
			}
		}
		n.reach = append(n.reach, rs)
	}
	for hb := range n.pathStats {
		if !slices.Contains(h.Heartbeats, hb) {
			delete(n.pathStats, hb)
		}
	}
	for _, hb := range h.Heartbeats {
		if n.pathStats[hb] == nil {
			n.pathStats[hb] = &lb.HAPathStatus{Heartbeat: hb}
		}
	}
	if !rebind {
		if intervalChanged {
			// The peer learns the new interval now, not an old
			// interval's dead time before the next heartbeat.
			n.sendLocked(false)
		}
		return nil
	}
	if err := n.startLocked(); err != nil {
		n.err = err.Error()
		return err
	}
	return nil
}

// startLocked opens the sockets and starts the goroutines.
func (n *Node) startLocked() error {
	h := n.cfg
	socks := map[netip.Addr]*net.UDPConn{}
	lns := map[netip.Addr]net.Listener{}
	closeAll := func() {
		for _, c := range socks {
			c.Close()
		}
		for _, l := range lns {
			l.Close()
		}
	}
	for _, src := range h.Sources() {
		c, l, err := bindSource(src, h.Port)
		if err != nil {
			closeAll()
			return err
		}
		socks[src], lns[src] = c, l
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.socks, n.lns, n.stop, n.running, n.err = socks, lns, cancel, true, ""
	n.started = time.Now()
	n.outq = make(chan Batch, 64)
	now := time.Now()
	for g := range n.groups {
		if n.groups[g].state == lb.HAIdle {
			n.groups[g] = group{state: lb.HAListen, since: now, reason: "listening for the peer"}
		}
	}
	for src, c := range socks {
		n.wg.Add(2)
		go n.receive(ctx, src, c)
		go n.accept(ctx, src, lns[src])
	}
	n.wg.Add(4)
	go n.loop(ctx)
	go n.probeReach(ctx)
	go n.sender(ctx, n.outq)
	go n.watchSecret(ctx)
	n.log.Info("high availability started", "role", h.Role, "port", h.Port, "heartbeats", len(h.Heartbeats), "boot", strconv.FormatUint(n.boot, 16))
	return nil
}

// Stop stops heartbeats and replication. With restart, the last
// heartbeats tell the peer this dispatcher is restarting (its executor
// keeps forwarding): the peer waits the restart grace before taking
// over.
func (n *Node) Stop(restart bool) { n.halt(restart, false) }

// halt is Stop, forgetting what the peer said unless keepPeer.
func (n *Node) halt(restart, keepPeer bool) {
	n.mu.Lock()
	if !n.running {
		n.mu.Unlock()
		return
	}
	if restart {
		for range 3 {
			n.sendLocked(true)
		}
	}
	n.running = false
	n.stop()
	for _, c := range n.socks {
		c.Close()
	}
	for _, l := range n.lns {
		l.Close()
	}
	n.dropConnsLocked()
	n.socks, n.lns = nil, nil
	n.mu.Unlock()
	n.wg.Wait()
	n.mu.Lock()
	if !keepPeer {
		n.peer = peerState{fresh: n.peer.fresh}
	}
	n.outConn, n.inConn = nil, nil
	n.synced = false
	n.mu.Unlock()
}

// dropConnsLocked closes the replication connections: when the function
// stops, and when the peer is no longer heard. Kept across a partition, a connection would resume
// only at TCP's next retransmission, which backs off exponentially: as
// long after the path is back as the path was gone (seconds), while the
// peer already decides with what it was sent. The next connection
// starts with a full copy.
func (n *Node) dropConnsLocked() {
	for _, c := range []*conn{n.outConn, n.inConn} {
		if c != nil {
			c.c.Close()
		}
	}
}

// SetHealth says whether this dispatcher's executor can forward (loaded,
// attached, its interface up), and if not, why.
func (n *Node) SetHealth(ok bool, reason string) {
	n.mu.Lock()
	changed := n.healthy != ok
	n.healthy, n.healthReason = ok, reason
	if changed {
		n.stepLocked(time.Now())
	}
	n.mu.Unlock()
	if changed {
		n.signal()
	}
}

// SetDigest changes the configuration digest announced.
func (n *Node) SetDigest(d uint64) {
	n.mu.Lock()
	n.digest = d
	n.mu.Unlock()
}

// Takeover asks this dispatcher to serve the groups (all of them when
// none is given): a standby preempts its peer, even without a full copy
// of its tables.
func (n *Node) Takeover(groups []lb.HAGroup) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return errors.New("high availability is not running")
	}
	if len(groups) == 0 {
		groups = n.cfg.Groups()
	}
	asked := false
	for _, g := range groups {
		if !slices.Contains(n.cfg.Groups(), g) {
			continue
		}
		switch n.groups[g].state {
		case lb.HAActive:
			continue
		case lb.HANoExecutor:
			return fmt.Errorf("cannot take over: %s", n.healthReason)
		}
		n.takeover[g] = true
		n.groups[g].retryAt = time.Time{}
		asked = true
	}
	if !asked {
		return errors.New("this dispatcher is already active")
	}
	n.stepLocked(time.Now())
	return nil
}

// Released confirms that the engine let go of a group the Node decided
// to release (addresses off, new connections no longer forwarded), and
// names the replication marker it sent after the group's last entries (0:
// none).
func (n *Node) Released(g lb.HAGroup, marker uint64) {
	n.mu.Lock()
	if n.groups[g].releasing {
		n.groups[g].releasing = false
		n.groups[g].released = marker
		n.sendLocked(false)
	}
	n.mu.Unlock()
}

// Resync forgets the copy of the peer's tables: the executor it was
// imported into was replaced by an empty one (an executor stopped and
// started again). The receiving replication connection is closed, so the
// peer connects again and starts with a full copy; until that is
// imported this dispatcher is not synchronised, and does not take a
// group from a live peer.
func (n *Node) Resync() {
	n.mu.Lock()
	c := n.inConn
	n.inConn, n.synced, n.lastFull = nil, false, 0
	n.mu.Unlock()
	if c != nil {
		c.c.Close()
		n.log.Info("replication: the executor's tables are new: asking the peer for a full copy")
	}
	n.signal()
}

// Imported says the engine imported everything the peer sent up to a
// marker; the peer is told.
func (n *Node) Imported(marker uint64) {
	n.mu.Lock()
	if marker > n.importedUpTo {
		n.importedUpTo = marker
	}
	if n.lastFull != 0 && n.importedUpTo >= n.lastFull && !n.synced {
		n.synced = true
		n.log.Info("replication: full copy of the peer's tables imported")
		n.stepLocked(time.Now())
	}
	c := n.inConn
	n.mu.Unlock()
	if c != nil {
		// Not under n.mu: a write to a peer that stopped reading may
		// block until the connection is closed (dropConnsLocked, which
		// needs n.mu).
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], marker)
		_ = c.writeFrame(frameAck, b[:])
	}
}

// NextMarker returns a new replication marker.
func (n *Node) NextMarker() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.markers++
	return n.markerBase + n.markers
}

// Send queues a batch for the peer; it reports false when no
// replication connection is up (the next one starts with a full copy)
// or the queue is full (the connection is then closed, for the same
// reason).
func (n *Node) Send(b Batch) bool {
	n.mu.Lock()
	c, q := n.outConn, n.outq
	n.mu.Unlock()
	if c == nil || q == nil {
		return false
	}
	if b.Sent.IsZero() {
		b.Sent = time.Now()
	}
	select {
	case q <- b:
		return true
	default:
		n.log.Warn("replication: the queue is full; reconnecting for a full copy")
		c.c.Close()
		return false
	}
}

// Session numbers the current replication connection to the peer (0:
// none): a new number asks the engine for a full copy.
func (n *Node) Session() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.outConn == nil {
		return 0
	}
	return n.session
}

// peerDeadTimeLocked is how long the peer is waited for after its last
// heartbeat: count of its own intervals when it announces a longer one
// than this dispatcher's (the interval changed on one dispatcher first:
// the other would find it dead between every two heartbeats, and both
// serve in turns), else the dead time.
func (n *Node) peerDeadTimeLocked() time.Duration {
	own := n.deadTime()
	if p := time.Duration(n.peer.last.IntervalMS) * time.Millisecond * time.Duration(n.cfg.DeadCount()); p > own {
		return p
	}
	return own
}

// deadTime is count × interval.
func (n *Node) deadTime() time.Duration {
	return time.Duration(n.cfg.IntervalMS()) * time.Duration(n.cfg.DeadCount()) * time.Millisecond
}

// peerAliveLocked reports whether the peer counts as alive at now.
func (n *Node) peerAliveLocked(now time.Time) bool {
	if !n.peer.heard {
		return false
	}
	return now.Sub(n.peer.lastHeard) < n.peerDeadTimeLocked() || now.Before(n.peer.graceUntil)
}

// reachLocked counts the reachable targets.
func (n *Node) reachLocked() int {
	c := 0
	for _, r := range n.reach {
		if r.ok {
			c++
		}
	}
	return c
}

// preferred reports whether this dispatcher is g's preferred active, and
// whether a peer of role pr is.
func preferred(mine, pr lb.HARole, g lb.HAGroup) (bool, bool) {
	switch mine {
	case lb.RoleBoth:
		return g == lb.GroupLocal, g == lb.GroupPeer
	case lb.RolePrimary:
		return true, pr == lb.RolePrimary
	case lb.RoleBackup:
		return false, pr != lb.RoleBackup
	}
	return false, false
}

// stepLocked makes every group's decision at now, and says so when one
// changed.
func (n *Node) stepLocked(now time.Time) {
	if !n.running {
		return
	}
	changed := false
	alive := n.peerAliveLocked(now)
	reach := n.reachLocked()
	pm := n.peer.last
	for _, g := range n.cfg.Groups() {
		pg := pm.Groups[1-g] // the peer's local group is this one's peer group
		sp, pp := preferred(n.cfg.Role, pm.Role, g)
		s := self{healthy: n.healthy, reach: reach, targets: len(n.reach), preferred: sp, recovery: n.cfg.Recovery,
			synced: n.synced || !alive, takeover: n.takeover[g], boot: n.boot}
		p := peerView{alive: alive, healthy: pm.Healthy, reach: int(pm.Reach), targets: int(pm.Targets), state: pg.State, want: pg.Want,
			takeover: pm.Takeover && pg.Want, preferred: pp, recovery: pm.Recovery, released: pg.Released, boot: pm.Boot}
		if !alive {
			p = peerView{}
		}
		gr := &n.groups[g]
		before, wireBefore, reasserted := gr.state, gr.wireState(), gr.reasserted
		gr.step(now, s, p, n.deadTime(), func(m uint64) bool { return n.importedUpTo >= m })
		if gr.reasserted != reasserted {
			changed = true
			n.log.Info("high availability: the peer heard again, or two actives ended: this dispatcher serves the group, and announces its addresses again",
				"group", g)
		}
		if gr.state != before || gr.wireState() != wireBefore {
			changed = true
			n.log.Info("high availability: state", "group", g, "from", before, "to", gr.state, "reason", gr.reason)
			if gr.state == lb.HAActive {
				n.takeover[g] = false
				if before != lb.HAActive {
					select {
					case n.activated <- g:
					default:
					}
				}
			}
		}
	}
	if changed {
		n.sendLocked(false)
		n.signal()
	}
}

// messageLocked is the heartbeat this Node sends now.
func (n *Node) messageLocked(restarting bool) message {
	// A group resumed after a restart has not decided yet, not knowing
	// whether the peer took it over: its state must not reach the peer
	// before it has (the peer would let go of a group it serves at the
	// sight of another active). Until then heartbeats do not confirm the
	// peer's boot, so the peer refuses them, learning this boot from
	// them, and confirms it in its own, which this Node then hears.
	peerBoot := n.peer.fresh.heard
	for _, gr := range n.groups {
		if gr.resumed {
			peerBoot = 0
		}
	}
	m := message{Healthy: n.healthy, Restarting: restarting, Boot: n.boot, Seq: n.seq, PeerBoot: peerBoot,
		Role: n.cfg.Role, Recovery: n.cfg.Recovery, Reach: uint8(n.reachLocked()), Targets: uint8(len(n.reach)),
		Digest: n.digest, IntervalMS: uint16(min(n.cfg.IntervalMS(), 65535))}
	for g := range n.groups {
		gr := &n.groups[g]
		m.Groups[g] = groupWire{State: gr.wireState(), Want: gr.state == lb.HAPreempt, Released: gr.released}
		m.Synced[g] = n.synced
		if gr.state == lb.HAPreempt && n.takeover[g] {
			m.Takeover = true
		}
	}
	if restarting {
		m.GraceSeconds = uint16(min(n.opts.RestartGrace/time.Second, 65535))
	}
	return m
}

// sendLocked sends a heartbeat on every path: under the secret the peer
// was last heard with first, if it differs from this dispatcher's, then
// under this dispatcher's (each its own sequence number: the peer accepts
// both, the newer last).
func (n *Node) sendLocked(restarting bool) {
	if n.socks == nil {
		return
	}
	keys := n.secretKeysLocked()
	for i := len(keys) - 1; i >= 0; i-- {
		n.sendUnderLocked(restarting, keys[i])
	}
	n.lastTx = time.Now()
}

// sendUnderLocked sends one heartbeat under key on every path.
func (n *Node) sendUnderLocked(restarting bool, key []byte) {
	n.seq++
	m := n.messageLocked(restarting)
	b := m.encode(key)
	for _, hb := range n.cfg.Heartbeats {
		c := n.socks[hb.Source]
		if c == nil {
			continue
		}
		st := n.pathStats[hb]
		_, err := c.WriteToUDPAddrPort(b, netip.AddrPortFrom(hb.Destination, n.cfg.Port))
		if p := n.peerPort; p != 0 && p != n.cfg.Port {
			_, err2 := c.WriteToUDPAddrPort(b, netip.AddrPortFrom(hb.Destination, p))
			err = cmp.Or(err, err2)
		}
		if st != nil {
			if err != nil {
				st.Error = err.Error()
			} else {
				st.Sent++
				st.Error = ""
			}
		}
	}
}

// decideEvery is how often loop re-decides (at most; four times an
// interval when that is shorter), for what changes without a message:
// reach targets, the dispatcher's health, heartbeats to send. The peer's
// death is not waited for here: a timer of its own wakes loop at the
// moment it falls due, count × interval after the last heartbeat, since
// that wait is most of the time from a fault to the takeover.
const decideEvery = 20 * time.Millisecond

// loop sends heartbeats every interval, re-decides every decideEvery, and
// decides again the moment the peer's silence reaches the dead time.
func (n *Node) loop(ctx context.Context) {
	defer n.wg.Done()
	n.mu.Lock()
	iv := time.Duration(n.cfg.IntervalMS()) * time.Millisecond
	n.sendLocked(false)
	n.mu.Unlock()
	every := max(min(iv/4, decideEvery), 5*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	dead := time.NewTimer(time.Hour)
	dead.Stop()
	defer dead.Stop()
	prev := time.Now()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		case now = <-dead.C:
		}
		n.mu.Lock()
		iv = time.Duration(n.cfg.IntervalMS()) * time.Millisecond
		if now.Sub(n.lastTx) >= iv-every/2 {
			n.sendLocked(false)
		}
		wasAlive := n.peer.heard && n.peerAliveLocked(prev)
		n.stepLocked(now)
		if wasAlive && !n.peerAliveLocked(now) {
			n.log.Warn("high availability: peer no longer heard", "after", n.peerDeadTimeLocked())
			n.dropConnsLocked()
			n.signal()
		}
		// A heartbeat heard since the last wake moved the deadline on.
		if at, ok := n.deadlineLocked(now); ok {
			dead.Reset(at.Sub(now))
		} else {
			dead.Stop()
		}
		n.mu.Unlock()
		prev = now
	}
}

// deadlineLocked returns the moment at which the peer, alive at now,
// stops counting as alive unless it is heard again (peerAliveLocked turns
// false there), and false when it is not alive at now.
func (n *Node) deadlineLocked(now time.Time) (time.Time, bool) {
	if !n.running || !n.peerAliveLocked(now) {
		return time.Time{}, false
	}
	at := n.peer.lastHeard.Add(n.peerDeadTimeLocked())
	if n.peer.graceUntil.After(at) {
		at = n.peer.graceUntil
	}
	return at, true
}

// receive reads heartbeats from one socket.
func (n *Node) receive(ctx context.Context, src netip.Addr, c *net.UDPConn) {
	defer n.wg.Done()
	buf := make([]byte, 2048)
	rc, rcErr := c.SyscallConn()
	for {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		n.mu.Lock()
		n.heartbeatLocked(buf[:k], from, src)
		// Heartbeats that waited in a queue (the neighbour's, while
		// the path was down) arrive in a burst, the oldest first, and
		// the first may say what the peer no longer is ("active,
		// healthy", sent just before it lost its link). All are
		// recorded, under one hold of the lock (the reads do not
		// block), and the decision is taken once, on the newest.
		for range maxBurst {
			if rcErr != nil {
				break
			}
			k, from, ok := readQueued(rc, buf)
			if !ok {
				break
			}
			n.heartbeatLocked(buf[:k], from, src)
		}
		n.stepLocked(time.Now())
		if n.answer {
			n.answer = false
			n.sendLocked(false)
		}
		n.mu.Unlock()
	}
}

// maxBurst bounds the heartbeats read before a decision.
const maxBurst = 64

// readQueued reads a datagram already queued on a socket without
// waiting for one (a read deadline in the past would not even look); ok
// is false when none is.
func readQueued(rc syscall.RawConn, buf []byte) (k int, from netip.AddrPort, ok bool) {
	var sa unix.Sockaddr
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		k, sa, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	}); err != nil || rerr != nil {
		return 0, netip.AddrPort{}, false
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return k, netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return k, netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), true
	}
	return 0, netip.AddrPort{}, false
}

// heartbeatLocked records one datagram from one of the peer's addresses
// to one of this dispatcher's; the caller decides after it.
func (n *Node) heartbeatLocked(b []byte, fromPort netip.AddrPort, to netip.Addr) {
	from := fromPort.Addr().Unmap()
	hb := lb.Heartbeat{Source: to, Destination: from}
	st := n.pathStats[hb]
	if st == nil {
		n.refused["unknown sender"]++
		n.strayLocked(b, hb, time.Now())
		return
	}
	m, key, err := n.decodeLocked(b)
	if err == nil {
		err = n.peer.fresh.accept(m, n.boot)
	}
	now := time.Now()
	if errors.Is(err, errReplay) && n.isCopyLocked(m, now) {
		// The same heartbeat on another path: this path is heard,
		// nothing else is new.
		st.Received++
		st.LastHeard = now
		return
	}
	if err == nil || errors.Is(err, errStale) {
		// Sent by the peer (authenticated, not a replay): its port is
		// the one it sends from, even in a heartbeat refused until it
		// confirms this boot (a restarted peer must hear the answer).
		n.notePeerPortLocked(fromPort.Port())
		// One refused so has copies too, which may arrive on another
		// path after the next heartbeat was accepted.
		copy(n.peer.recent[1:], n.peer.recent[:])
		n.peer.recent[0] = heardSeq{boot: m.Boot, seq: m.Seq, at: now}
	}
	if err != nil {
		n.refused[err.Error()]++
		return
	}
	if !bytes.Equal(key, n.peerKey) {
		if n.peerKey != nil && bytes.Equal(key, n.key) {
			n.log.Info("high availability: the peer is heard with the new shared secret; the former one is no longer accepted")
		}
		n.peerKey = key
		n.savePeerKey(key)
	}
	st.Received++
	st.LastHeard = now
	wasAlive := n.peerAliveLocked(now)
	restartedPeer := n.peer.heard && n.peer.last.Boot != m.Boot
	n.peer.heard, n.peer.last, n.peer.lastHeard = true, m, now
	n.peer.graceUntil = time.Time{}
	if m.Restarting {
		n.peer.hostFails = 0
		n.peer.graceUntil = now.Add(time.Duration(m.GraceSeconds) * time.Second)
		n.log.Info("high availability: the peer is restarting", "grace", time.Duration(m.GraceSeconds)*time.Second)
	}
	if !wasAlive || restartedPeer {
		n.log.Info("high availability: peer heard", "from", from, "role", m.Role, "boot", strconv.FormatUint(m.Boot, 16))
		n.signal()
		// Answer at once, once the decision on this heartbeat's burst is
		// taken (receive): a peer that just started confirms this
		// dispatcher's boot from it, and must learn this dispatcher's
		// state as it decided it knowing the peer (a group resumed after
		// a restart may stand by now).
		n.answer = true
	}
}

// decodeLocked reads a heartbeat under the first of the secrets in use
// (secretKeysLocked) its MAC matches, and returns that key too; errMAC
// when none does.
func (n *Node) decodeLocked(b []byte) (message, []byte, error) {
	for _, k := range n.secretKeysLocked() {
		if m, err := decode(b, k); !errors.Is(err, errMAC) {
			return m, k, err
		}
	}
	return message{}, nil, errMAC
}

// maxStray bounds the stray paths kept; strayFor is how long one is
// reported after its last heartbeat.
const (
	maxStray = 8
	strayFor = time.Minute
)

// strayLocked records a datagram from an address no configured path
// names (hb as this dispatcher would name the path): when it is an
// authentic heartbeat, the peer sends on a path this dispatcher does not
// have. The two dispatchers' paths differ (changed on one side, a file
// restored on one side): the peer is not heard on it, and may not be at
// all. It is logged when first heard (or again after strayFor), and
// reported (Status).
func (n *Node) strayLocked(b []byte, hb lb.Heartbeat, now time.Time) {
	if _, _, err := n.decodeLocked(b); err != nil {
		return
	}
	st := n.stray[hb]
	if st == nil {
		if len(n.stray) >= maxStray {
			var oldest lb.Heartbeat
			for k, v := range n.stray {
				if oldest == (lb.Heartbeat{}) || v.LastHeard.Before(n.stray[oldest].LastHeard) {
					oldest = k
				}
			}
			delete(n.stray, oldest)
		}
		st = &lb.HAPathStatus{Heartbeat: hb}
		n.stray[hb] = st
	}
	if st.LastHeard.IsZero() || now.Sub(st.LastHeard) >= strayFor {
		n.log.Warn("high availability: authenticated heartbeats arrive on a path not configured here: "+
			"the peer's heartbeat paths differ from this dispatcher's, and it is not heard on this one",
			"source", hb.Destination, "destination", hb.Source,
			"fix", fmt.Sprintf("give both dispatchers the same paths (here: highavailability heartbeat add %s %s)", hb.Source, hb.Destination))
	}
	st.Received++
	st.LastHeard = now
}

// notePeerPortLocked records the port the peer sends from: its
// configured port (peerPort).
func (n *Node) notePeerPortLocked(p uint16) {
	if p == n.peerPort {
		return
	}
	if p != n.cfg.Port {
		n.log.Warn("high availability: the peer uses another port: heartbeats go to both until it uses this dispatcher's",
			"peer_port", p, "port", n.cfg.Port)
	} else if n.peerPort != 0 {
		n.log.Info("high availability: the peer uses this dispatcher's port now", "port", p)
	}
	n.peerPort = p
}

// isCopyLocked reports whether m, refused as a replay, is a heartbeat
// heard fresh lately on another path (accepted, or refused until the
// peer confirmed this boot: at a start its copy may come after the next
// heartbeat was accepted): of one of the last boots and sequence numbers
// heard, less than an interval ago (a replay made later is refused
// still).
func (n *Node) isCopyLocked(m message, now time.Time) bool {
	within := time.Duration(max(n.cfg.IntervalMS(), uint32(m.IntervalMS))) * time.Millisecond
	for _, r := range n.peer.recent {
		if r.boot == m.Boot && r.seq == m.Seq && !r.at.IsZero() && now.Sub(r.at) < within {
			return true
		}
	}
	return false
}

// probeReach pings the reach targets twice an interval: a target is
// unreachable after count pings without a reply (count × interval / 2,
// 1 s by default), so that an active that lost its targets is replaced
// within the time a dead one is. It pings the peer's host too
// (notePeerHostLocked).
func (n *Node) probeReach(ctx context.Context) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		iv := time.Duration(n.cfg.IntervalMS()) * time.Millisecond / 2
		count := int(n.cfg.DeadCount())
		// One batch: the reach targets, then (once heard) the peer's
		// heartbeat addresses.
		var dsts, srcs []netip.Addr
		own := n.cfg.Sources()
		for _, r := range n.reach {
			dsts, srcs = append(dsts, r.addr), append(srcs, sourceFor(own, r.addr))
		}
		targets := len(dsts)
		if n.peer.heard {
			for _, hb := range n.cfg.Heartbeats {
				dsts, srcs = append(dsts, hb.Destination), append(srcs, hb.Source)
			}
		}
		n.mu.Unlock()
		start := time.Now()
		errs := n.pingAll(ctx, dsts, srcs, iv)
		if ctx.Err() != nil {
			return
		}
		n.mu.Lock()
		n.noteReachLocked(dsts[:targets], errs[:targets], count)
		if len(dsts) > targets {
			n.notePeerHostLocked(!slices.ContainsFunc(errs[targets:], func(err error) bool { return err == nil }), count)
		}
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(iv-time.Since(start), 0)):
		}
	}
}

// pingAll pings each of dsts from the source of the same index, all at
// once, each within timeout, and returns their errors (nil: answered).
func (n *Node) pingAll(ctx context.Context, dsts, srcs []netip.Addr, timeout time.Duration) []error {
	errs := make([]error, len(dsts))
	var wg sync.WaitGroup
	for i := range dsts {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			errs[i] = n.opts.Probe(pctx, dsts[i], srcs[i], timeout)
		})
	}
	wg.Wait()
	return errs
}

// noteReachLocked records the pings of the reach targets: a target is
// unreachable after count in a row without a reply.
func (n *Node) noteReachLocked(targets []netip.Addr, errs []error, count int) {
	changed := false
	for i, t := range targets {
		for j := range n.reach {
			r := &n.reach[j]
			if r.addr != t {
				continue
			}
			was := r.ok
			if errs[i] == nil {
				r.ok, r.fails, r.err = true, 0, ""
			} else {
				r.fails++
				r.err = errs[i].Error()
				if r.fails >= count {
					r.ok = false
				}
			}
			if was != r.ok {
				changed = true
				n.log.Info("high availability: reach target", "address", t, "reachable", r.ok, "err", r.err)
			}
		}
	}
	if changed {
		n.sendLocked(false)
		n.stepLocked(time.Now())
		n.signal()
	}
}

// notePeerHostLocked records a ping of the peer's host (on every
// heartbeat path; silent: none answered), for the case it says it is
// restarting dlbd: a dlbd restarting leaves its host answering, while a
// host shut down or rebooted (systemd stops dlbd, as for a restart, then
// the host goes, maybe within a ping's interval) stops. Once the host,
// having answered lately, misses count pings in a row while the peer is
// in its restart grace, the grace ends and the peer is taken over as a
// dead one: a reboot of the active then costs about the dead time, not
// the grace (30 s). A host that never answered (ICMP filtered) keeps its
// grace.
func (n *Node) notePeerHostLocked(silent bool, count int) {
	now := time.Now()
	if !silent {
		n.peer.hostAnswered, n.peer.hostFails = now, 0
		return
	}
	n.peer.hostFails++
	// The host answered shortly before the grace began (the restarting
	// heartbeat was the last heard), or since.
	answeredLately := n.peer.hostAnswered.After(n.peer.lastHeard.Add(-2 * n.deadTime()))
	if !n.peer.heard || !now.Before(n.peer.graceUntil) || !answeredLately || n.peer.hostFails < count {
		return
	}
	n.log.Warn("high availability: the peer said it was restarting dlbd, and its host no longer answers pings: it is down; its grace ends",
		"unanswered", n.peer.hostFails)
	n.peer.graceUntil = time.Time{}
	n.stepLocked(now)
	n.signal()
}

// sourceFor picks the heartbeat source of t's family to ping it from.
func sourceFor(srcs []netip.Addr, t netip.Addr) netip.Addr {
	for _, s := range srcs {
		if s.Is4() == t.Is4() {
			return s
		}
	}
	return netip.Addr{}
}

// Status reports the Node's state.
func (n *Node) Status() lb.HAStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	st := lb.HAStatus{Running: n.upLocked(), Error: n.err, Started: n.started, Boot: n.boot, Healthy: n.healthy, HealthReason: n.healthReason,
		Refused: map[string]uint64{}, SecretPending: len(n.secretKeysLocked()) > 1, SecretError: n.secretErr}
	if n.peerPort != n.cfg.Port && n.upLocked() && n.peerAliveLocked(now) {
		st.PeerPort = n.peerPort
	}
	for k, v := range n.refused {
		st.Refused[k] = v
	}
	for _, g := range n.cfg.Groups() {
		gr := n.groups[g]
		st.Groups = append(st.Groups, lb.HAGroupStatus{Group: g, State: gr.state, Since: gr.since, Reason: gr.reason,
			Takeover: n.takeover[g], Synced: n.synced, Reasserted: gr.reasserted})
	}
	pm := n.peer.last
	st.Peer = lb.HAPeerStatus{Alive: n.upLocked() && n.peerAliveLocked(now), Heard: n.peer.heard, LastHeard: n.peer.lastHeard,
		Role: pm.Role, Recovery: pm.Recovery, Healthy: pm.Healthy, Restarting: pm.Restarting && now.Before(n.peer.graceUntil),
		Reach: int(pm.Reach), Targets: int(pm.Targets), Digest: pm.Digest, Boot: pm.Boot}
	if n.peer.heard {
		st.Peer.States = [lb.NumHAGroups]lb.HAState{pm.Groups[1].State, pm.Groups[0].State}
		st.Peer.Conflict = conflict(n.cfg.Role, pm.Role)
	}
	for _, hb := range n.cfg.Heartbeats {
		if ps := n.pathStats[hb]; ps != nil {
			st.Heartbeats = append(st.Heartbeats, *ps)
		}
	}
	for _, r := range n.reach {
		st.Reach = append(st.Reach, lb.HAReachStatus{Address: r.addr, Reachable: r.ok, LastError: r.err})
	}
	for hb, ps := range n.stray {
		if n.pathStats[hb] == nil && now.Sub(ps.LastHeard) < strayFor {
			st.Stray = append(st.Stray, *ps)
		}
	}
	slices.SortFunc(st.Stray, func(a, b lb.HAPathStatus) int {
		return cmp.Or(a.Source.Compare(b.Source), a.Destination.Compare(b.Destination))
	})
	st.Replication = lb.HAReplicationStatus{Sending: n.outConn != nil, Receiving: n.inConn != nil, Session: n.session,
		SentRecords: n.sentRecords, ReceivedRecords: n.recvRecords, LastAckRTT: n.lastAckRTT, Synced: n.synced}
	return st
}

// conflict names an inconsistent pair of roles, or returns "".
func conflict(mine, peer lb.HARole) string {
	switch {
	case mine == lb.RoleBoth && peer != lb.RoleBoth:
		return fmt.Sprintf("this dispatcher's role is both, the peer's %s: both must be both", peer)
	case mine != lb.RoleBoth && peer == lb.RoleBoth:
		return fmt.Sprintf("the peer's role is both, this dispatcher's %s: both must be both", mine)
	case mine == peer && mine != lb.RoleBoth:
		return fmt.Sprintf("the peer is %s too", peer)
	}
	return ""
}

// PeerRole returns the role the peer announces, and whether it is alive.
func (n *Node) PeerRole() (lb.HARole, netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var from netip.Addr
	for hb, ps := range n.pathStats {
		if !ps.LastHeard.IsZero() {
			from = hb.Destination
		}
	}
	return n.peer.last.Role, from, n.upLocked() && n.peerAliveLocked(time.Now())
}

// upLocked says the function runs, or is opening its sockets again.
func (n *Node) upLocked() bool { return n.running || n.rebinding }
