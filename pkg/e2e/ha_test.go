package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/console"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// High availability: two dispatchers (lab.sh -x 2) on the segment of the
// backends and of the router, the clients behind the router, NAT servers
// behind it too (-r 3), IPv6 beside IPv4 (-6: a second cluster, which the
// late-joining standby's takeover checks). The primary (d1) serves, the backup (d2) stands
// by; each fault of issue 13 is put on the primary while 500 keep-alive
// connections send requests, a 100 MB download is in flight and new
// connections keep coming, then repaired, and the primary takes its
// clusters back (recovery auto). Measured per fault: the time from the
// fault to the backup forwarding, the new connections that failed, and the
// established connections broken (none may be).

const (
	haPort     = "7700"
	haInterval = 500 // ms, the default
	haCount    = 4
	// haDetect is count × interval.
	haDetect = haInterval * haCount * time.Millisecond
)

// haDispatcher is one dlbd of the pair: a scale-out lab's dispatcher
// process, with an event scripts directory.
type haDispatcher struct {
	dispatcherProc
}

// status is the dispatcher's high-availability report (the zero report
// when dlbd does not answer).
func (d *haDispatcher) status() api.HAReport {
	var r api.HAReport
	out, _, code := d.ctl("highavailability", "status", "-o", "json")
	if code == 0 {
		_ = json.Unmarshal([]byte(out), &r)
	}
	return r
}

// state is the dispatcher's state of its only group ("" when dlbd does
// not answer).
func (d *haDispatcher) state() string {
	r := d.status()
	if len(r.Groups) == 0 {
		return ""
	}
	return r.Groups[0].State
}

// reasons returns the executor's packet counts by reason (nil when it
// cannot be read: dlbd down).
func (d *haDispatcher) reasons() map[string]uint64 {
	var r api.ExecutorReport
	out, _, code := d.ctl("executor", "report", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		return nil
	}
	m := map[string]uint64{}
	for _, rc := range r.Reasons {
		m[rc.Reason] = rc.Packets
	}
	return m
}

// forwarded counts the packets the dispatcher's executor forwarded.
func (d *haDispatcher) forwarded() uint64 {
	var n uint64
	for r, p := range d.reasons() {
		if strings.HasPrefix(r, "fwd") {
			n += p
		}
	}
	return n
}

// netlinkIn returns a netlink handle in the lab namespace ns, closed when
// the test ends.
func (h *haLab) netlinkIn(t *testing.T, ns string) *netlink.Handle {
	t.Helper()
	nsh, err := netns.GetFromPath("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	nl, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("netlink in %s: %v", ns, err)
	}
	t.Cleanup(nl.Close)
	return nl
}

// link returns a netlink handle in namespace ns and the link name in it.
func (h *haLab) link(t *testing.T, ns, name string) (*netlink.Handle, netlink.Link) {
	t.Helper()
	nl := h.netlinkIn(t, ns)
	l, err := nl.LinkByName(name)
	if err != nil {
		t.Fatalf("%s in %s: %v", name, ns, err)
	}
	return nl, l
}

// waitServing waits (10 s at most) for the backup to serve after a
// fault: active by its own report, and the router sending the cluster
// address (in NAT mode the return address too) to the backup's MAC. It
// returns how long after from each came. The router's neighbour table is
// read by netlink every millisecond, which costs dlbd nothing; dlbd is
// asked every 10 ms (a report takes its engine's time, which a tighter
// poll would take from the takeover it measures). That the backup then
// forwards is checked by the caller, on its executor's counters.
func (h *haLab) waitServing(t *testing.T, from time.Time, nat bool, router *netlink.Handle, rlink netlink.Link, mac net.HardwareAddr) (serving, active time.Duration) {
	t.Helper()
	want := []net.IP{net.ParseIP(h.vip()).To4()}
	if nat {
		want = append(want, net.ParseIP(h.env["LAB_RETURN_ADDR"]).To4())
	}
	routed := func() bool {
		ns, err := router.NeighList(rlink.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return false
		}
		n := 0
		for _, e := range ns {
			for _, w := range want {
				if e.IP.Equal(w) && bytes.Equal(e.HardwareAddr, mac) {
					n++
				}
			}
		}
		return n == len(want)
	}
	c := client.New(h.d[1].sock)
	isActive := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := c.HA(ctx)
		return err == nil && len(r.Groups) > 0 && r.Groups[0].State == "active"
	}
	var asked time.Time
	for serving == 0 || active == 0 {
		if serving == 0 && routed() {
			serving = time.Since(from)
		}
		if active == 0 && time.Since(asked) >= 10*time.Millisecond {
			asked = time.Now()
			if isActive() {
				active = time.Since(from)
			}
		}
		if time.Since(from) > 10*time.Second {
			t.Fatalf("after 10 s: the backup does not serve (the router sends to it after %v, active after %v)", serving, active)
		}
		time.Sleep(time.Millisecond)
	}
	return serving, active
}

// grown returns the counts of after that grew since before.
func grown(before, after map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range after {
		if v > before[k] {
			out[k] = v - before[k]
		}
	}
	return out
}

// haLab is the lab with both dispatchers configured alike, but for their
// roles and addresses.
type haLab struct {
	*lab
	d      [2]*haDispatcher
	secret string
	// routes are the primary's routes via a gateway, each led by its
	// family's flag (-4, -6), saved by a fault that deletes them for its
	// repair to put back.
	routes []string
}

// restoreRoutes puts back the routes a fault saved (staticRoutes) and
// took away with the primary's interface, and first its IPv6 address,
// which the kernel drops when the interface goes down (the IPv6 routes'
// gateway is reached through it).
func (h *haLab) restoreRoutes() {
	h.mustNS("d", "ip", "-6", "addr", "replace", h.env["LAB_D1_ADDR6"]+"/"+h.env["LAB_PREFIXLEN6"], "dev", h.env["LAB_IF"], "nodad")
	for _, r := range h.routes {
		f := strings.Fields(r)
		h.mustNS("d", append([]string{"ip", f[0], "route", "replace"}, f[1:]...)...)
	}
}

// staticRoutes lists the primary's routes via a gateway, of both
// families (the lab runs IPv6 too).
func (h *haLab) staticRoutes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, family := range []string{"-4", "-6"} {
		for _, l := range strings.Split(h.mustNS("d", "ip", family, "-o", "route", "show"), "\n") {
			if strings.Contains(l, " via ") {
				out = append(out, family+" "+strings.TrimSpace(l))
			}
		}
	}
	return out
}

// newHALab is the high-availability lab: two dispatchers, d1 the primary
// serving, d2 the backup standing by with a full copy.
func newHALab(t *testing.T) *haLab {
	t.Helper()
	h := newHAPair(t, "dlba")
	h.configureHA(h.d[0], "primary", h.d[1].addr)
	h.configureHA(h.d[1], "backup", h.d[0].addr)
	h.waitSteady(t, 15*time.Second)
	return h
}

// newHAPair is the lab of newHALab under prefix, its two dispatchers
// started and configured alike, high availability not yet.
func newHAPair(t *testing.T, prefix string) *haLab {
	t.Helper()
	l := newLabPrefix(t, prefix, "-n", "3", "-c", "1", "-x", "2", "-r", "3", "-6")
	h := &haLab{lab: l, secret: filepath.Join(l.run, "ha.secret")}
	// No GRO on the switch's ports. The switch runs an XDP program on
	// its ports (labxdp), which turns on GRO in the veth it feeds, so the
	// dispatchers would receive NAT replies merged into super-frames.
	// Merged TCP frames carry CHECKSUM_PARTIAL (tcp_gro_complete): the
	// checksum field holds only the pseudo-header's sum, to be completed
	// on transmission. The executor's NAT (in generic mode it runs on
	// such skbs, after GRO) updates that field as if it were a full
	// checksum, ports included, so the frames leave with a wrong one and
	// the client drops them: a NAT download stalls after its first few
	// hundred kilobytes (DLB_HA_GRO=1 shows it). By the same mechanism a
	// NIC with GRO on should do the same to an executor in generic mode
	// (reasoned, not tested: no NIC here); native mode runs before GRO. Not fixed in the executor (it
	// cannot see the skb's checksum state); README, NAT: generic mode
	// needs GRO off on the interface for NAT.
	out, err := l.inNS("sw", "ip", "-o", "link", "show")
	if err != nil {
		t.Fatalf("listing the switch's ports: %v\n%s", err, out)
	}
	if os.Getenv("DLB_HA_GRO") == "1" { // to see the problem: GRO left on
		out = ""
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		port, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(port, l.prefix+"-") {
			l.mustNS("sw", "ethtool", "-K", port, "gro", "off")
		}
	}
	if err := os.WriteFile(h.secret, []byte("a secret both dispatchers share\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range h.d {
			if d == nil {
				continue
			}
			d.stop(syscall.SIGTERM)
			_ = os.RemoveAll(d.pin)
			// DLB_ARTEFACTS=DIR keeps the dispatchers' logs, passed or
			// failed, to set against the faults' times; a failure prints
			// them.
			dir := os.Getenv("DLB_ARTEFACTS")
			if dir == "" && !t.Failed() {
				continue
			}
			logs, _ := filepath.Glob(filepath.Join(d.dir, "dlbd*.log"))
			for _, f := range logs {
				b, _ := os.ReadFile(f)
				if dir != "" {
					_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-d%d-%s", strings.ReplaceAll(t.Name(), "/", "_"), d.i, filepath.Base(f))), b, 0o644)
				}
				if t.Failed() {
					t.Logf("dispatcher %d %s:\n%s", d.i, filepath.Base(f), logExcerpt(string(b)))
				}
			}
		}
	})
	for i := range 2 {
		n := i + 1
		d := &haDispatcher{dispatcherProc{t: t, i: n, ns: l.env[fmt.Sprintf("LAB_D%d_NS", n)], addr: l.env[fmt.Sprintf("LAB_D%d_ADDR", n)],
			peer: l.env[fmt.Sprintf("LAB_D%d_PEER", n)], dir: filepath.Join(l.run, fmt.Sprintf("d%d", n)),
			pin: fmt.Sprintf("/sys/fs/bpf/%s-d%d", l.prefix, n),
			// dlbd gets 30 s to restart on a loaded machine.
			ready: 30 * time.Second}}
		d.sock = filepath.Join(d.dir, "dlbd.sock")
		d.args = []string{"--scripts-dir", filepath.Join(d.dir, "scripts"), "--metrics-address", metricsAddr}
		if err := os.MkdirAll(filepath.Join(d.dir, "scripts"), 0o755); err != nil {
			t.Fatal(err)
		}
		h.d[i] = d
		d.start()
		h.configure(d)
	}
	return h
}

// configure gives a dispatcher the clusters both serve: VIP:80 by MAC
// over the backends, VIP:81 by NAT over the NAT servers, and the same
// over IPv6 on the IPv6 VIP.
func (h *haLab) configure(d *haDispatcher) {
	// Generic XDP unless DLB_HA_XDP_MODE says otherwise (native works on
	// the lab's veths too).
	mode := os.Getenv("DLB_HA_XDP_MODE")
	if mode == "" {
		mode = "generic"
	}
	d.mustCtl("executor", "start", "--interface", h.env["LAB_IF"], "--xdp-mode", mode)
	// The lab's variables of IPv6 addresses end in 6.
	for _, v6 := range []string{"", "6"} {
		vip, ret, router := h.env["LAB_VIP"+v6], h.env["LAB_RETURN_ADDR"+v6], h.env["LAB_ROUTER_ADDR"+v6]
		d.mustCtl("executor", "set", "nfa", h.env[fmt.Sprintf("LAB_D%d_ADDR%s", d.i, v6)])
		d.mustCtl("cluster", "add", vip, "--configure")
		d.mustCtl("port", "add", vip+"@80")
		d.mustCtl("port", "add", vip+"@81", "--method", "nat")
		var backends, natServers []string
		for i := 1; i <= 3; i++ {
			backends = append(backends, h.env[fmt.Sprintf("LAB_B%d_ADDR%s", i, v6)])
			natServers = append(natServers, h.env[fmt.Sprintf("LAB_N%d_ADDR%s", i, v6)])
		}
		d.mustCtl("server", "add", vip+"@80@"+strings.Join(backends, "+"))
		d.mustCtl("server", "add", vip+"@81@"+strings.Join(natServers, "+"), "--mapport", "80", "--returnaddress", ret, "--router", router)
	}
}

func (h *haLab) configureHA(d *haDispatcher, role, peer string) {
	d.mustCtl("highavailability", "backup", "add", role, "auto", haPort)
	d.mustCtl("highavailability", "heartbeat", "add", d.addr, peer, "--secret-file", h.secret)
	d.mustCtl("highavailability", "reach", "add", h.env["LAB_ROUTER_ADDR"])
}

// logExcerpt is a dlbd log's start, its warnings and its end: where a
// slow start or a late failback shows.
func logExcerpt(log string) string {
	lines := strings.Split(log, "\n")
	const head, tail = 15, 40
	if len(lines) <= head+tail {
		return log
	}
	var warn []string
	for _, l := range lines[head : len(lines)-tail] {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			warn = append(warn, l)
		}
	}
	return strings.Join(lines[:head], "\n") + "\n... (the warnings between)\n" + strings.Join(warn, "\n") +
		"\n... (the last lines)\n" + strings.Join(lines[len(lines)-tail:], "\n")
}

// waitSteady waits until the primary serves, the backup stands by with a
// full copy, and both agree on the configuration; when it gives up, it
// says which of these did not hold.
func (h *haLab) waitSteady(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		s1, s2 := h.d[0].status(), h.d[1].status()
		var missing []string
		for i, s := range []api.HAReport{s1, s2} {
			want := []string{"active", "standby"}[i]
			switch {
			case len(s.Groups) != 1:
				missing = append(missing, fmt.Sprintf("d%d has %d groups (no answer?)", i+1, len(s.Groups)))
			case s.Groups[0].State != want:
				missing = append(missing, fmt.Sprintf("d%d is %s, not %s", i+1, s.Groups[0].State, want))
			}
			if !s.DigestMatch {
				missing = append(missing, fmt.Sprintf("d%d's configuration digest differs from its peer's", i+1))
			}
			if !s.Peer.Alive {
				missing = append(missing, fmt.Sprintf("d%d does not hear its peer", i+1))
			}
		}
		if !s2.Replication.Synced {
			missing = append(missing, fmt.Sprintf("d2 has no full copy of d1's tables (received %d records, imported %d, lag %.1f ms)",
				s2.Replication.ReceivedRecords, s2.Replication.Imported, s2.Replication.LagMS))
		}
		if len(missing) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("after %v: d1 active, d2 standby and synced still not the case: %s", limit, strings.Join(missing, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// haTraffic is what runs across a fault: keep-alive connections, a paced
// download and new connections, all through the VIP's port, until
// stopped.
type haTraffic struct {
	wg                    sync.WaitGroup
	stop                  context.CancelFunc
	ready                 string // created once all keep-alive connections had a reply
	began                 time.Time
	keep, download, fresh loadResult
	keepErr, dlErr, frErr error
	// reasons holds each dispatcher's executor counters when the traffic
	// began, for a failure to show what each did with it.
	reasons [2]map[string]uint64
}

// haTrafficMax bounds a fault's traffic, which normally runs until the
// failback is over (a dlbd restart takes 2 s on a quiet machine, the
// verifier's work on the executor, and up to 12 s was seen while other
// tests loaded the machine).
const haTrafficMax = 90 * time.Second

// loadUntil runs labclient in the first client's namespace until stop
// ends: then labclient is asked to end its run (SIGTERM), stops sending,
// lets the requests in flight finish and reports.
func (h *haLab) loadUntil(stop context.Context, args ...string) (loadResult, error) {
	cmd := exec.CommandContext(stop, "nsenter", h.labclientArgs(1, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return runLoad(cmd)
}

func (h *haLab) startTraffic(port string) *haTraffic {
	tr := &haTraffic{ready: filepath.Join(h.run, "keepalive.ready"),
		reasons: [2]map[string]uint64{h.d[0].reasons(), h.d[1].reasons()}, began: time.Now()}
	_ = os.Remove(tr.ready)
	url := "http://" + h.vip() + ":" + port + "/"
	ctx, stop := context.WithCancel(context.Background())
	tr.stop = stop
	secs := fmt.Sprintf("%ds", int(haTrafficMax.Seconds()))
	tr.wg.Add(3)
	go func() {
		defer tr.wg.Done()
		tr.keep, tr.keepErr = h.loadUntil(ctx, "-url", url, "-keepalive", "-c", "500", "-interval", "200ms", "-duration", secs, "-timeout", "20s",
			"-ready", tr.ready)
	}()
	go func() {
		defer tr.wg.Done()
		// 100 MB at 12.5 MB/s: 8 s in flight.
		tr.download, tr.dlErr = h.load(context.Background(), "-url", url+"bytes?n=104857600&rate=13107200", "-n", "1", "-timeout", "60s")
	}()
	go func() {
		defer tr.wg.Done()
		tr.fresh, tr.frErr = h.loadUntil(ctx, "-url", url, "-c", "2", "-duration", secs, "-timeout", "1s")
	}()
	return tr
}

// established waits until every keep-alive connection has had a reply:
// a fault is put on established connections, not on handshakes (500
// dials take more than a second on a loaded machine). If they do not
// within 30 s it stops the traffic and says what the client saw and what
// each dispatcher's executor did with it.
func (tr *haTraffic) established(t *testing.T, h *haLab) {
	t.Helper()
	const limit = 30 * time.Second
	for {
		if _, err := os.Stat(tr.ready); err == nil {
			break
		}
		if time.Since(tr.began) > limit {
			states := h.d[0].state() + "/" + h.d[1].state()
			tr.stop()
			tr.wg.Wait()
			k := tr.keep
			t.Logf("keep-alive client: %d connections, %d broken (by last backend %v), %d requests, %d ok, errors %v, failures from %d ms to %d ms (err %v)",
				k.Connections, k.Broken, k.BrokenByBackend, k.Requests, k.OK, k.Errors, k.FirstFailMS, k.LastFailMS, tr.keepErr)
			t.Logf("new connections: %d of %d failed, errors %v", tr.fresh.Failed, tr.fresh.Requests, tr.fresh.Errors)
			for i, d := range h.d {
				t.Logf("dispatcher %d (%s) executor since the traffic began: %v", i+1, d.mac(h.env["LAB_IF"]), grown(tr.reasons[i], d.reasons()))
			}
			out, _ := h.inNS("r", "ip", "-br", "neigh", "show", "dev", h.env["LAB_ROUTER_IF"])
			t.Logf("states (d1/d2) %s; the router's neighbours:\n%s", states, out)
			t.Fatalf("after %v: still waiting for all 500 keep-alive connections established", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("all 500 keep-alive connections had a reply %v after the traffic began", time.Since(tr.began).Round(time.Millisecond))
}

// faultResult is one fault's figures.
type faultResult struct {
	mode, fault        string
	toForward          time.Duration
	toActive           time.Duration
	failback           time.Duration // from the traffic's start to the primary active again (and synced)
	newFailed, newSent int
	broken, conns      int
	downloadOK         bool
}

// haFault puts one fault on the active (d1) and repairs it.
type haFault struct {
	name string
	// inject prepares the fault and returns it: the fault's time is
	// taken just before the returned function runs, so it is done by
	// netlink from here, not by a command whose start-up (50-110 ms under
	// load) the figure would include.
	inject  func(t *testing.T, h *haLab) func() error
	restore func(t *testing.T, h *haLab)
	// cuts: the fault cuts the running dlbd off from its peer, whose
	// replication connections must then be replaced, not resumed.
	cuts bool
	// mode, if set, is the only mode the fault runs in (make test's
	// time).
	mode string
	// allModesOnly: the fault runs only with DLB_HA_ALL_MODES=1 (make
	// soak-ha), not in make test (its time).
	allModesOnly bool
}

// runFault runs traffic through port, puts the fault on d1, measures the
// backup's takeover, repairs the fault, waits for the primary to take
// its clusters back, and checks that no established connection broke
// across either change.
func (h *haLab) runFault(t *testing.T, mode, port string, f haFault) faultResult {
	t.Helper()
	h.waitSteady(t, 30*time.Second)
	tr := h.startTraffic(port)
	began := tr.began
	defer tr.stop()
	tr.established(t, h)
	time.Sleep(time.Second)
	base := h.d[1].forwarded()
	reasons2 := h.d[1].reasons()
	r1, r2 := h.d[0].status().Replication, h.d[1].status().Replication
	t.Logf("replication before the fault: the active sent %d records, the standby received %d and imported %d (synced %v, lag %.1f ms)",
		r1.SentRecords, r2.ReceivedRecords, r2.Imported, r2.Synced, r2.LagMS)
	sessions := r1.Sessions
	redirects := h.d[0].reasons()["fwd_redirect"]
	// The routes the primary's interface takes away with it, for the
	// repair to put back (saved before the clock starts).
	h.routes = h.staticRoutes(t)
	faultAt := time.Since(began)
	router, rlink := h.link(t, h.env["LAB_ROUTER_NS"], h.env["LAB_ROUTER_IF"])
	_, d2link := h.link(t, h.d[1].ns, h.env["LAB_IF"])
	fault := f.inject(t, h)
	injected := time.Now()
	if err := fault(); err != nil {
		t.Fatalf("%s: %v", f.name, err)
	}
	res := faultResult{mode: mode, fault: f.name}
	res.toForward, res.toActive = h.waitServing(t, injected, mode == "nat", router, rlink, d2link.Attrs().HardwareAddr)
	poll(t, 5*time.Second, "the backup's executor forwarding", func() bool { return h.d[1].forwarded() > base+100 })
	t.Logf("%s %s: the backup's executor had forwarded 100 more packets %v after the fault (dlbctl, polled: an upper bound)",
		mode, f.name, time.Since(injected).Round(time.Millisecond))
	nb := func() string {
		out, _ := h.inNS("r", "ip", "-br", "neigh", "show", "dev", h.env["LAB_ROUTER_IF"])
		var keep []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, h.vip()+" ") || strings.HasPrefix(l, h.env["LAB_RETURN_ADDR"]+" ") {
				keep = append(keep, strings.Join(strings.Fields(l), " "))
			}
		}
		return strings.Join(keep, "; ")
	}
	neighAt := nb()
	time.Sleep(time.Second)
	neighAt += " | 1 s later: " + nb()
	f.restore(t, h)
	h.waitSteady(t, 30*time.Second)
	res.failback = time.Since(began)
	// The lab's dispatchers have one interface: a redirect is a frame
	// sent towards an interface that is not this one (a stale next hop).
	if now := h.d[0].reasons()["fwd_redirect"]; now > redirects && f.name != haFaults[0].name {
		// What d1's namespace and executor hold now. Seen once (CI run
		// 145, NAT "namespace isolated" right after "interface deleted
		// and recreated"); the likely cause, read in the code, not
		// reproduced here: a NAT handshake whose SYN-ACK cached the hop
		// through the old interface in its half-open slot, completed
		// after the re-attach, whose sweep of stale hops covers
		// nat_ports only. The executor now drops such a hop at the ACK
		// (TestPrivilegedNATHopCheckedAtACK).
		links, _ := h.inNS("d", "ip", "-o", "link", "show")
		routes, _ := h.inNS("d", "ip", "route", "show", "table", "all")
		neigh, _ := h.inNS("d", "ip", "neigh", "show")
		rep, _, _ := h.d[0].ctl("executor", "report", "-o", "json")
		t.Logf("d1 after the repair:\nlinks:\n%s\nroutes:\n%s\nneighbours:\n%s\nexecutor: %s", links, routes, neigh, rep)
		t.Errorf("%s %s: d1 redirected %d frames to another interface (a stale next hop)", mode, f.name, now-redirects)
	}
	if r1 := h.d[0].status().Replication; f.cuts && r1.Sessions == sessions {
		t.Errorf("%s %s: d1 still replicates on the connection it had before it was cut off (session %d)", mode, f.name, sessions)
	}
	// The traffic goes on for 2 s after the failback (recovery auto), for
	// "established broken" to cover it too, and is then stopped.
	time.Sleep(2 * time.Second)
	tr.stop()
	tr.wg.Wait()
	if tr.keepErr != nil || tr.dlErr != nil || tr.frErr != nil {
		t.Fatalf("%s %s: traffic: %v / %v / %v", mode, f.name, tr.keepErr, tr.dlErr, tr.frErr)
	}
	res.conns, res.broken = tr.keep.Connections, tr.keep.Broken
	res.newSent, res.newFailed = tr.fresh.Requests, tr.fresh.Failed
	res.downloadOK = tr.download.OK == 1 && tr.download.HashMismatches == 0
	t.Logf("%s mode, %s (at %s UTC): backup active %v, and the router sending to it %v after the fault; the primary back %v into the traffic; new connections failed %d of %d; established broken %d of %d (%d requests, errors %v); 100 MB download ok %v (%v)",
		mode, f.name, injected.UTC().Format("15:04:05.000"), res.toActive.Round(time.Millisecond), res.toForward.Round(time.Millisecond), res.failback.Round(time.Millisecond), res.newFailed, res.newSent, res.broken, res.conns, tr.keep.Requests,
		tr.keep.Errors, res.downloadOK, tr.download.Errors)
	if res.broken != 0 {
		t.Logf("the fault came %v into the traffic, the backup forwarded %v after it, the primary was back at %v; the failed keep-alive requests were sent between %d ms and %d ms",
			faultAt.Round(time.Millisecond), res.toForward.Round(time.Millisecond), res.failback.Round(time.Millisecond), tr.keep.FirstFailMS, tr.keep.LastFailMS)
		t.Logf("the backup's executor since the fault: %v", grown(reasons2, h.d[1].reasons()))
		t.Logf("the router's neighbour entries once the backup forwarded: %s (d1 %s, d2 %s)", neighAt, h.d[0].mac(h.env["LAB_IF"]), h.d[1].mac(h.env["LAB_IF"]))
		t.Logf("the primary's executor since it came back: %v", h.d[0].reasons())
		t.Errorf("%s %s: %d of %d established connections broken: %v", mode, f.name, res.broken, res.conns, tr.keep.Errors)
	}
	if res.conns < 500 {
		t.Errorf("%s %s: only %d keep-alive connections", mode, f.name, res.conns)
	}
	if !res.downloadOK {
		t.Errorf("%s %s: the 100 MB download failed: %+v", mode, f.name, tr.download)
	}
	if res.toForward > 3*time.Second {
		t.Errorf("%s %s: the router sent to the backup %v after the fault (goal 2 s)", mode, f.name, res.toForward)
	}
	return res
}

// The faults of issue 13, each with its repair, and two more around the
// program: its interface recreated, and dlbd frozen and resumed.
var haFaults = []haFault{
	{
		name: "dlbd SIGKILL and executor detached",
		inject: func(t *testing.T, h *haLab) func() error {
			return func() error {
				d := h.d[0]
				d.stop(syscall.SIGKILL)
				// The pins go: the link's last reference, so the
				// program leaves the interface.
				return os.RemoveAll(d.pin)
			}
		},
		restore: func(t *testing.T, h *haLab) {
			start := time.Now()
			h.d[0].start()
			t.Logf("dlbd restarted (answering) in %v", time.Since(start).Round(time.Millisecond))
		},
	},
	{
		// Setting a link down deletes the routes through it (here the
		// client and NAT networks via the router), and setting it up
		// does not bring them back: the repair puts them back, as a
		// host's network configuration does when a link comes up.
		// Without them the primary, once active again, cannot route NAT
		// replies to the clients (drop_no_route): found by this test.
		name: "interface down",
		cuts: true,
		inject: func(t *testing.T, h *haLab) func() error {
			nl, link := h.link(t, h.d[0].ns, h.env["LAB_IF"])
			return func() error { return nl.LinkSetDown(link) }
		},
		restore: func(t *testing.T, h *haLab) {
			h.mustNS("d", "ip", "link", "set", h.env["LAB_IF"], "up")
			h.restoreRoutes()
		},
	},
	{
		// The host shut down or rebooted: systemd stops dlbd as for a
		// restart (SIGTERM: the peer is told to wait its restart grace,
		// 30 s), then the host goes (its link down). The backup pings the
		// restarting peer's host and takes over once it, having
		// answered, no longer does: the dead time, not the grace. NAT
		// only in make test (its time).
		name: "host shut down (dlbd stopped, then its link down)",
		mode: "nat",
		inject: func(t *testing.T, h *haLab) func() error {
			h.d[0].stop(syscall.SIGTERM)
			nl, link := h.link(t, h.d[0].ns, h.env["LAB_IF"])
			return func() error { return nl.LinkSetDown(link) }
		},
		restore: func(t *testing.T, h *haLab) {
			h.mustNS("d", "ip", "link", "set", h.env["LAB_IF"], "up")
			h.restoreRoutes()
			h.d[0].start()
		},
	},
	{
		// The interface is deleted and created again (a driver reload,
		// a hot-plugged NIC): a new index, and whatever dlbd put on it
		// (the executor, the cluster addresses) and the routes through
		// it are gone. dlbd must attach to the new one; the repair puts
		// the routes back and GRO off on the new switch port, as
		// newHALab does.
		name: "interface deleted and recreated",
		cuts: true,
		// NAT only in make test (its time): it has more to put back
		// (the return address, the routes to the clients); MAC mode
		// passes too (DLB_HA_ALL_MODES=1).
		mode: "nat",
		inject: func(t *testing.T, h *haLab) func() error {
			nl, link := h.link(t, h.d[0].ns, h.env["LAB_IF"])
			return func() error { return nl.LinkDel(link) }
		},
		restore: func(t *testing.T, h *haLab) {
			if out, err := h.script("relink", "d").CombinedOutput(); err != nil {
				t.Fatalf("lab.sh relink d: %v\n%s", err, out)
			}
			h.mustNS("sw", "ethtool", "-K", h.d[0].peer, "gro", "off")
			h.restoreRoutes()
		},
	},
	{
		// The switch port goes down: the dispatcher's only link loses its
		// carrier, it is cut off from everything.
		name: "namespace isolated (its link without carrier)",
		cuts: true,
		inject: func(t *testing.T, h *haLab) func() error {
			nl, link := h.link(t, h.env["LAB_SWITCH_NS"], h.d[0].peer)
			return func() error { return nl.LinkSetDown(link) }
		},
		restore: func(t *testing.T, h *haLab) { h.mustNS("sw", "ip", "link", "set", h.d[0].peer, "up") },
	},
	{
		// dlbd frozen (SIGSTOP: a debugger, a paused VM or cgroup, a
		// process stuck in the kernel) with its executor attached: the
		// executor forwards on, dlbd says nothing. Resumed (SIGCONT),
		// dlbd wakes up with every timer run out, believing itself the
		// active, and must take its clusters back as after any fault:
		// only once it has the connections the backup made meanwhile.
		// Not in make test (its time): the resumed side's claim to be
		// active is what partition and heal puts to the test there too
		// (TestPrivilegedHARestartAndPartition).
		name:         "dlbd frozen (SIGSTOP), then resumed",
		cuts:         true,
		allModesOnly: true,
		inject: func(t *testing.T, h *haLab) func() error {
			p := h.d[0].cmd.Process
			return func() error { return p.Signal(syscall.SIGSTOP) }
		},
		restore: func(t *testing.T, h *haLab) {
			if err := h.d[0].cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("resuming dlbd: %v", err)
			}
		},
	},
	{
		// The router stops answering the primary's pings (a route that
		// prohibits its address): the backup reaches more targets.
		name: "reach target lost",
		inject: func(t *testing.T, h *haLab) func() error {
			nl := h.netlinkIn(t, h.env["LAB_ROUTER_NS"])
			dst := &net.IPNet{IP: net.ParseIP(h.d[0].addr).To4(), Mask: net.CIDRMask(32, 32)}
			return func() error {
				return nl.RouteAdd(&netlink.Route{Dst: dst, Type: unix.RTN_PROHIBIT, Table: unix.RT_TABLE_MAIN})
			}
		},
		restore: func(t *testing.T, h *haLab) {
			h.mustNS("r", "ip", "route", "del", "prohibit", h.d[0].addr+"/32")
		},
	},
}

// TestPrivilegedHAFailover puts every fault of issue 13 on the active
// dispatcher, in MAC mode and in NAT mode, and the interface deleted and
// recreated (NAT mode); with DLB_HA_ALL_MODES=1 (make soak-ha) that in both
// modes too, and dlbd frozen and resumed. Then, on the same lab, a dlbd
// restart on the active and a partition (restartAndPartition; DLB_HA_ONLY
// ="restart and partition" runs only them). DLB_HA_ONLY=regexp
// runs only the cases whose "mode/fault" name matches.
func TestPrivilegedHAFailover(t *testing.T) {
	alone(t)
	// Every fault in both modes (make test); DLB_HA_ONLY narrows it.
	var only *regexp.Regexp
	if s := os.Getenv("DLB_HA_ONLY"); s != "" {
		only = regexp.MustCompile(s)
	}
	h := newHALab(t)
	var results []faultResult
	for _, m := range []struct{ mode, port string }{{"mac", "80"}, {"nat", "81"}} {
		for _, f := range haFaults {
			all := os.Getenv("DLB_HA_ALL_MODES") == "1"
			if only != nil && !only.MatchString(m.mode+"/"+f.name) ||
				f.mode != "" && f.mode != m.mode && !all || f.allModesOnly && !all {
				continue
			}
			ok := t.Run(m.mode+"/"+f.name, func(t *testing.T) {
				results = append(results, h.runFault(t, m.mode, m.port, f))
			})
			if !ok {
				t.FailNow()
			}
		}
	}
	if only == nil || only.MatchString("restart and partition") {
		h.restartAndPartition(t)
	}
	t.Log("figures (mode, fault: the router sending to the backup after the fault, new connections failed, established broken, download):")
	for _, r := range results {
		t.Logf("  %s, %s: %v, %d/%d, %d/%d, %v", r.mode, r.fault, r.toForward.Round(time.Millisecond), r.newFailed, r.newSent,
			r.broken, r.conns, r.downloadOK)
	}
}

// TestPrivilegedHAUpgradeAcrossABI (make soak-ha, not make test: 30 s):
// the rolling upgrade README.md describes, across an executor ABI change.
// In each mode, the standby's dlbd is restarted over pins of another
// version: it replaces its executor, takes a full copy of the active's
// tables again, and when the active then dies (dlbd SIGKILLed, executor
// detached) it serves every connection the active had, NAT ones
// included.
func TestPrivilegedHAUpgradeAcrossABI(t *testing.T) {
	alone(t)
	if os.Getenv("DLB_HA_ALL_MODES") != "1" {
		t.Skip("make soak-ha runs it (DLB_HA_ALL_MODES=1)")
	}
	h := newHALab(t)
	for _, m := range []struct{ mode, port string }{{"nat", "81"}, {"mac", "80"}} {
		h.waitSteady(t, 30*time.Second)
		tr := h.startTraffic(m.port)
		tr.established(t, h)
		d := h.d[1]
		d.stop(syscall.SIGTERM)
		pinOtherVersion(t, d.pin)
		d.start()
		synced := h.waitSteady(t, 30*time.Second)
		log, err := os.ReadFile(filepath.Join(d.dir, fmt.Sprintf("dlbd%d.log", d.runs)))
		if err != nil || !strings.Contains(string(log), "replaced the executor a dlbd of another version had pinned") {
			t.Errorf("%s: the standby's dlbd did not replace its executor (%v):\n%s", m.mode, err, log)
		}
		h.d[0].stop(syscall.SIGKILL)
		if err := os.RemoveAll(h.d[0].pin); err != nil {
			t.Fatal(err)
		}
		poll(t, 10*time.Second, "the upgraded backup active", func() bool { return h.d[1].state() == "active" })
		time.Sleep(3 * time.Second)
		tr.stop()
		tr.wg.Wait()
		t.Logf("%s: the standby replaced its executor and had a full copy again %v later; after the takeover: "+
			"keep-alive %d connections, %d broken; download ok %v; new connections failed %d of %d",
			m.mode, synced.Round(time.Millisecond), tr.keep.Connections, tr.keep.Broken, tr.download.OK == 1, tr.fresh.Failed, tr.fresh.Requests)
		if tr.keepErr != nil || tr.keep.Broken != 0 || tr.keep.Connections < 500 {
			t.Errorf("%s: keep-alive: %v, %d of %d broken: %v", m.mode, tr.keepErr, tr.keep.Broken, tr.keep.Connections, tr.keep.Errors)
		}
		if tr.dlErr != nil || tr.download.OK != 1 {
			t.Errorf("%s: download: %v %+v", m.mode, tr.dlErr, tr.download)
		}
		h.d[0].start()
		poll(t, 30*time.Second, "the primary active again", func() bool { return h.d[0].state() == "active" })
	}
}

// watchStates polls both dispatchers' states every 20 ms until stop is
// closed, and returns the longest time both were active at once and
// whether the backup was ever active or preempting.
func (h *haLab) watchStates(stop <-chan struct{}) (both time.Duration, backupServed bool) {
	var since time.Time
	for {
		select {
		case <-stop:
			if !since.IsZero() {
				both = max(both, time.Since(since))
			}
			return both, backupServed
		case <-time.After(20 * time.Millisecond):
		}
		s1, s2 := h.d[0].state(), h.d[1].state()
		if s2 == "active" || s2 == "preempt" {
			backupServed = true
		}
		if s1 == "active" && s2 == "active" {
			if since.IsZero() {
				since = time.Now()
			}
			both = max(both, time.Since(since))
		} else {
			since = time.Time{}
		}
	}
}

// restartAndPartition: a dlbd restart on the active causes no takeover
// and breaks nothing; a partition that cuts the active off from its peer
// and its reach target leaves two actives for less than the detection
// time, and after healing one stays active; two actives (each cut off
// from the other only) that heal lose none of the connections the one
// that yields made meanwhile. TestPrivilegedHAFailover runs
// it on its lab after the faults (a lab of its own cost make test 8 s).
func (h *haLab) restartAndPartition(t *testing.T) {
	t.Run("dlbd restart on the active", func(t *testing.T) {
		h.waitSteady(t, 30*time.Second)
		tr := h.startTraffic("80")
		defer tr.stop()
		tr.established(t, h)
		stop := make(chan struct{})
		var both time.Duration
		var served bool
		done := make(chan struct{})
		go func() { both, served = h.watchStates(stop); close(done) }()
		time.Sleep(2 * time.Second)
		start := time.Now()
		h.d[0].stop(syscall.SIGTERM)
		h.d[0].start()
		t.Logf("dlbd restarted in %v", time.Since(start).Round(time.Millisecond))
		poll(t, 10*time.Second, "the restarted primary heard and active", func() bool {
			s := h.d[0].status()
			return len(s.Groups) == 1 && s.Groups[0].State == "active" && s.Peer.Alive
		})
		time.Sleep(2 * time.Second)
		tr.stop()
		tr.wg.Wait()
		close(stop)
		<-done
		if served {
			t.Error("the backup took over during the primary's restart")
		}
		if both > 0 {
			t.Errorf("two actives for %v", both)
		}
		if tr.keepErr != nil || tr.keep.Broken != 0 || tr.keep.Connections < 500 {
			t.Errorf("keep-alive: %v, %d of %d broken: %v", tr.keepErr, tr.keep.Broken, tr.keep.Connections, tr.keep.Errors)
		}
		if tr.dlErr != nil || tr.download.OK != 1 {
			t.Errorf("download: %v %+v", tr.dlErr, tr.download)
		}
		t.Logf("restart: no takeover, established broken %d of %d, new connections failed %d of %d, download ok %v",
			tr.keep.Broken, tr.keep.Connections, tr.fresh.Failed, tr.fresh.Requests, tr.download.OK == 1)
	})

	t.Run("partition and heal", func(t *testing.T) {
		h.waitSteady(t, 30*time.Second)
		// The partition: the primary and one backend on a bridge of their
		// own, apart from the backup, the router (the reach target) and
		// the other backends.
		const island = "dlbbr9"
		h.mustNS("sw", "ip", "link", "add", island, "type", "bridge", "stp_state", "0", "forward_delay", "0")
		h.mustNS("sw", "ip", "link", "set", island, "up")
		stop := make(chan struct{})
		var both time.Duration
		done := make(chan struct{})
		go func() { both, _ = h.watchStates(stop); close(done) }()
		for _, p := range []string{h.d[0].peer, h.env["LAB_B1_PEER"]} {
			h.mustNS("sw", "ip", "link", "set", p, "master", island)
		}
		took := poll(t, 10*time.Second, "the backup active, the primary not", func() bool {
			return h.d[1].state() == "active" && h.d[0].state() != "active"
		})
		h.d[1].checkExposition("partitioned", `dlb_ha_peer_alive 0`, `dlb_ha_state{group="peer",state="active"} 1`)
		if out, errOut, code := h.d[1].ctl("status", "--check"); code != 1 || !strings.Contains(out, "the high-availability peer is not heard") {
			t.Errorf("partitioned: dlbctl status --check on the backup: exit %d, want 1 for the lost peer:\n%s%s", code, out, errOut)
		}
		time.Sleep(2 * time.Second)
		if s := h.d[0].state(); s == "active" {
			t.Errorf("the cut-off primary is active again: %s", s)
		}
		for _, p := range []string{h.d[0].peer, h.env["LAB_B1_PEER"]} {
			h.mustNS("sw", "ip", "link", "set", p, "master", h.env["LAB_BRIDGE"])
		}
		h.mustNS("sw", "ip", "link", "del", island)
		healed := h.waitSteady(t, 30*time.Second)
		time.Sleep(time.Second)
		close(stop)
		<-done
		t.Logf("partition: the backup alone active %v after the cut; two actives at most %v (detection %v); after healing, one active (the primary, recovery auto) %v later",
			took.Round(time.Millisecond), both.Round(time.Millisecond), haDetect, healed.Round(time.Millisecond))
		if both > haDetect {
			t.Errorf("two actives for %v, longer than the detection time %v", both, haDetect)
		}
		if s1, s2 := h.d[0].state(), h.d[1].state(); s1 != "active" || s2 != "standby" {
			t.Errorf("after healing: %s and %s", s1, s2)
		}
		h.d[0].checkExposition("healed", `dlb_ha_state{group="local",state="active"} 1`, `dlb_ha_peer_alive 1`,
			`dlb_ha_config_digest_match 1`, `dlb_ha_healthy 1`)
		h.d[1].checkExposition("healed", `dlb_ha_state{group="peer",state="standby"} 1`, `dlb_ha_synced{group="peer"} 1`,
			`dlb_ha_peer_alive 1`)
		// dlbctl status and the web console say the same.
		for i, d := range h.d {
			if out, errOut, code := d.ctl("status", "--check"); code != 0 {
				t.Errorf("healed: dlbctl status --check on dispatcher %d: exit %d:\n%s%s", i+1, code, out, errOut)
			} else {
				t.Logf("healed: dlbctl status on dispatcher %d:\n%s", i+1, out)
			}
		}
		for i, want := range []struct{ group, state, peerRole string }{{"local", "active", "backup"}, {"peer", "standby", "primary"}} {
			var v console.View
			h.d[i].consoleSnapshot(&v)
			if ha := v.HA; ha == nil || len(ha.Groups) != 1 || ha.Groups[0].Group != want.group || ha.Groups[0].State != want.state ||
				want.state == "standby" && !ha.Groups[0].Synced || !ha.Peer.Alive || ha.Peer.Role != want.peerRole || !ha.Peer.SameConfig ||
				!ha.Healthy || len(ha.Reach) != 1 || !ha.Reach[0].Up {
				t.Errorf("healed: dispatcher %d's console shows high availability as %+v", i+1, ha)
			}
		}
	})

	t.Run("two actives heal", h.twoActivesHeal)
}

// twoActivesHeal: the dispatchers stop hearing each other while both
// still reach the router (each route to the other's address a
// blackhole): both serve, the router sends to the backup, which
// announced last, and NAT keep-alive connections are made through it.
// The partition heals one way first: the backup hears the primary and
// lets go of the group while it still cannot reach it, with no
// replication session to send its last entries on; then the other way.
// The primary, which stays active, must still get them (the next
// session's full copy, merged into what it holds): none of the
// connections may break.
func (h *haLab) twoActivesHeal(t *testing.T) {
	h.waitSteady(t, 30*time.Second)
	// routes adds or deletes the blackholes on the dispatchers i.
	routes := func(verb string, i ...int) {
		for _, i := range i {
			d, peer := h.d[i], h.d[1-i].addr
			if out, err := exec.Command("ip", "-n", d.ns, "route", verb, "blackhole", peer+"/32").CombinedOutput(); err != nil {
				t.Fatalf("ip route %s blackhole %s in %s: %v: %s", verb, peer, d.ns, err, out)
			}
		}
	}
	repBefore := h.d[0].status().Replication
	// The router knows the cluster and return addresses at the
	// primary's MAC, as one that talked to them would: a router with no
	// entry for an address ignores the backup's announcements, and asks
	// later, when both answer.
	d1mac := h.d[0].mac(h.env["LAB_IF"])
	for _, a := range []string{h.vip(), h.env["LAB_RETURN_ADDR"]} {
		h.mustNS("r", "ip", "neigh", "replace", a, "lladdr", d1mac, "dev", h.env["LAB_ROUTER_IF"], "nud", "stale")
	}
	routes("add", 0, 1)
	blocked := []bool{true, true}
	defer func() {
		for i, b := range blocked {
			if b {
				routes("del", i)
			}
		}
	}()
	took := poll(t, 10*time.Second, "both dispatchers active", func() bool {
		return h.d[0].state() == "active" && h.d[1].state() == "active"
	})
	// The backup's takeover is announced again up to 3 s after it
	// (announceAfter). Both answer ARP now: where the router sends is
	// the order of their answers and announcements (once in 8 runs it
	// was the primary's MAC after that); the case is about connections
	// made through the backup, so the router is pointed there if it is
	// not.
	bothSince := time.Now()
	time.Sleep(3200 * time.Millisecond)
	d2mac := h.d[1].mac(h.env["LAB_IF"])
	for _, a := range []string{h.vip(), h.env["LAB_RETURN_ADDR"]} {
		if out, _ := h.inNS("r", "ip", "-br", "neigh", "show", a, "dev", h.env["LAB_ROUTER_IF"]); !strings.Contains(out, d2mac) {
			t.Logf("%v after both became active, the router sends %s elsewhere than to the backup (%s): %s; set to the backup",
				time.Since(bothSince).Round(time.Millisecond), a, d2mac, strings.TrimSpace(out))
			h.mustNS("r", "ip", "neigh", "replace", a, "lladdr", d2mac, "dev", h.env["LAB_ROUTER_IF"], "nud", "stale")
		}
	}
	finish := h.keepAlive(t, "split", "http://"+h.vip()+":81/", 200)
	before := h.d[1].forwarded()
	time.Sleep(500 * time.Millisecond)
	if h.d[1].forwarded() == before {
		t.Error("the backup forwards nothing while both are active: the router does not send to it")
	}
	routes("del", 0)
	blocked[0] = false
	poll(t, 10*time.Second, "the backup, hearing the primary, no longer active", func() bool { return h.d[1].state() == "standby" })
	time.Sleep(time.Second) // the backup's replication connection tried, and refused
	if s := h.d[1].status().Replication; s.Sending {
		t.Errorf("the backup sends to the primary through a blackhole: %+v", s)
	}
	routes("del", 1)
	blocked[1] = false
	steady := h.waitSteady(t, 30*time.Second)
	keep, keepErr := finish()
	merged := h.d[0].status().Replication
	merged.Merged -= repBefore.Merged
	merged.Kept -= repBefore.Kept
	t.Logf("two actives: both active %v after the cut; healed, d1 active and d2 standby %v later; d1 merged %d of d2's records "+
		"(%d held already); NAT keep-alive connections broken %d of %d (%d requests)", took.Round(time.Millisecond),
		steady.Round(time.Millisecond), merged.Merged, merged.Kept, keep.Broken, keep.Connections, keep.Requests)
	if keepErr != nil || keep.Connections != 200 || keep.Broken != 0 {
		t.Errorf("NAT keep-alive connections made while both served: %v, %d of %d broken: %v", keepErr, keep.Broken,
			keep.Connections, keep.Errors)
	}
	if merged.Merged == 0 {
		t.Error("d1 merged none of d2's records")
	}
}

// keepAlive runs conns keep-alive connections to url from the first
// client, a request on each every 200 ms, and returns once all are
// established. finish waits a second (every connection sends again; one
// that broke waits for its reply until the client's timeout, and counts
// as broken), ends them and returns what they saw; the test's end ends
// them too.
func (h *haLab) keepAlive(t *testing.T, name, url string, conns int) (finish func() (loadResult, error)) {
	t.Helper()
	ready := filepath.Join(h.run, name+".ready")
	_ = os.Remove(ready)
	ctx, stop := context.WithCancel(context.Background())
	var r loadResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err = h.loadUntil(ctx, "-url", url, "-keepalive", "-c", strconv.Itoa(conns), "-interval", "200ms", "-duration", "60s",
			"-timeout", "20s", "-ready", ready)
	}()
	t.Cleanup(func() { stop(); <-done })
	poll(t, 30*time.Second, fmt.Sprintf("%d keep-alive connections established", conns), func() bool {
		_, statErr := os.Stat(ready)
		return statErr == nil
	})
	return func() (loadResult, error) {
		time.Sleep(time.Second)
		stop()
		<-done
		return r, err
	}
}

// mac is the dispatcher's interface's MAC address.
func (d *haDispatcher) mac(ifname string) string {
	out, err := exec.Command("nsenter", "--net=/run/netns/"+d.ns, "ip", "-br", "link", "show", ifname).Output()
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(out)); len(f) >= 3 {
		return f[2]
	}
	return "?"
}

// replCounts returns the records the dispatcher sent and imported.
func (d *haDispatcher) replCounts() (sent, imported uint64) {
	r := d.status().Replication
	return r.SentRecords, r.Imported
}

// loadBackground runs labclient (h.load) with args in the background;
// wait returns its result once it ended.
func (h *haLab) loadBackground(args ...string) (wait func() (loadResult, error)) {
	var r loadResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err = h.load(context.Background(), args...)
	}()
	return func() (loadResult, error) {
		<-done
		return r, err
	}
}

// firstGrowth polls f every 2 ms until it returns more than base, and
// returns when it did (the zero time: not within limit).
func firstGrowth(base uint64, limit time.Duration, f func() uint64) time.Time {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if f() > base {
			return time.Now()
		}
	}
	return time.Time{}
}

// TestPrivilegedHAReplication measures connection replication: how long
// a new connection's entries take to reach the standby (goal 200 ms),
// and a standby that joins late (restarted with an empty executor while
// 500 keep-alive NAT connections run: NAT, because in MAC mode the same
// Maglev tables would keep the connections on their servers even
// without a copy): it gets a full copy, and a takeover right after
// breaks none of them.
func TestPrivilegedHAReplication(t *testing.T) {
	alone(t)
	h := newHALab(t)
	h.waitSteady(t, 30*time.Second)

	// Stopping high availability on either dispatcher of a live pair
	// would leave both serving: refused, it changes nothing; backup set
	// changes the recovery strategy while the groups stay as they are.
	t.Run("changed, not stopped, while the peer serves", func(t *testing.T) {
		before := [2]api.HAReport{h.d[0].status(), h.d[1].status()}
		for _, c := range []struct {
			d    *haDispatcher
			args []string
		}{
			{h.d[1], []string{"highavailability", "backup", "remove"}},
			{h.d[0], []string{"highavailability", "heartbeat", "remove", h.d[1].addr}},
		} {
			if _, stderr, code := c.d.ctl(c.args...); code == 0 || !strings.Contains(stderr, "is heard and its executor forwards") {
				t.Errorf("%s on %s while the peer serves: exit %d, %q; want a refusal", strings.Join(c.args, " "), c.d.ns, code, stderr)
			}
		}
		for _, d := range h.d {
			d.mustCtl("highavailability", "backup", "set", "--recovery", "manual")
		}
		time.Sleep(haDetect) // what would move has moved
		for i, d := range h.d {
			st := d.status()
			if !st.Running || st.Recovery != "manual" || len(st.Groups) != 1 || len(before[i].Groups) != 1 ||
				st.Groups[0].State != before[i].Groups[0].State || st.Groups[0].Since != before[i].Groups[0].Since {
				t.Errorf("%s after the refusals and backup set --recovery manual: %+v, was %+v", d.ns, st, before[i])
			}
			d.mustCtl("highavailability", "backup", "set", "--recovery", "auto")
		}

		// The secret rotated as on two hosts: the backup given a file of
		// its own (the same secret), then each file rewritten in place,
		// more than the dead time apart. Each dispatcher reads its file
		// again within a second, and they never stop hearing each other.
		own := filepath.Join(filepath.Dir(h.secret), "backup.secret")
		if err := os.WriteFile(own, []byte("a secret both dispatchers share\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.d[1].mustCtl("highavailability", "heartbeat", "set", "--secret-file", own)
		for _, file := range []string{h.secret, own} {
			if err := os.WriteFile(file, []byte("another secret both dispatchers share\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(haDetect + time.Second)
			for time.Now().Before(deadline) {
				for _, d := range h.d {
					if st := d.status(); !st.Peer.Alive || st.SecretError != "" {
						t.Fatalf("%s while the secret changes: peer alive %v, secret error %q", d.ns, st.Peer.Alive, st.SecretError)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		for i, d := range h.d {
			// Read again and in use: its log says so.
			log, _ := os.ReadFile(filepath.Join(d.dir, fmt.Sprintf("dlbd%d.log", d.runs)))
			if !strings.Contains(string(log), "the shared secret changed") {
				t.Errorf("%s did not take the new secret (its log does not say so)", d.ns)
			}
			st := d.status()
			if st.SecretPending || len(st.Groups) != 1 || st.Groups[0].Since != before[i].Groups[0].Since {
				t.Errorf("%s after the secret changed: pending %v, groups %+v, was %+v", d.ns, st.SecretPending, st.Groups, before[i].Groups)
			}
		}

		// heardThroughout fails the test if either dispatcher stops
		// hearing the other for the dead time and a little more.
		heardThroughout := func(what string) {
			t.Helper()
			deadline := time.Now().Add(haDetect + 300*time.Millisecond)
			for time.Now().Before(deadline) {
				for _, d := range h.d {
					if st := d.status(); !st.Peer.Alive {
						t.Fatalf("%s %s: the peer not heard", d.ns, what)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		// The port changed on one dispatcher, then on the other, the
		// backup first, then back, the primary first: until both use
		// the same, heartbeats go to both ports and replication to the
		// peer's. Neither stops hearing the other; no state changes.
		for _, c := range []struct {
			port  string
			order [2]*haDispatcher
		}{{"7701", [2]*haDispatcher{h.d[1], h.d[0]}}, {haPort, [2]*haDispatcher{h.d[0], h.d[1]}}} {
			for k, d := range c.order {
				d.mustCtl("highavailability", "backup", "set", "--port", c.port)
				heardThroughout("while the port changes to " + c.port)
				if other := c.order[1-k]; k == 0 {
					if st := other.status(); st.PeerPort == 0 || fmt.Sprint(st.PeerPort) != c.port {
						t.Errorf("%s, its peer changed to port %s: peer_port %d", other.ns, c.port, st.PeerPort)
					}
				}
			}
			for i, d := range h.d {
				st := d.status()
				if fmt.Sprint(st.Port) != c.port || st.PeerPort != 0 || !st.Replication.Synced ||
					len(st.Groups) != 1 || st.Groups[0].Since != before[i].Groups[0].Since {
					t.Errorf("%s after the port changed to %s on both: port %d, peer_port %d, synced %v, groups %+v, was %+v",
						d.ns, c.port, st.Port, st.PeerPort, st.Replication.Synced, st.Groups, before[i].Groups)
				}
			}
		}

		// A second heartbeat path (over IPv6) added on the backup first,
		// then removed on the primary first: each side's sockets are
		// opened again while the other's are not, and the standby stays
		// standby (it took over at once, the peer forgotten).
		addr6 := func(d *haDispatcher) string { return h.env[fmt.Sprintf("LAB_D%d_ADDR6", d.i)] }
		for _, c := range []struct {
			verb  string
			order [2]*haDispatcher
		}{{"add", [2]*haDispatcher{h.d[1], h.d[0]}}, {"remove", [2]*haDispatcher{h.d[0], h.d[1]}}} {
			for _, d := range c.order {
				d.mustCtl("highavailability", "heartbeat", c.verb, addr6(d), addr6(h.d[1-(d.i-1)]))
				heardThroughout("after heartbeat " + c.verb + " here")
			}
			for i, d := range h.d {
				st := d.status()
				if len(st.Heartbeats) != map[string]int{"add": 2, "remove": 1}[c.verb] || len(st.Groups) != 1 ||
					st.Groups[0].Since != before[i].Groups[0].Since {
					t.Errorf("%s after heartbeat %s on both: heartbeats %+v, groups %+v, was %+v", d.ns, c.verb, st.Heartbeats, st.Groups, before[i].Groups)
				}
			}
		}

		// The backup's secret file rewritten and its dlbd restarted at
		// once (configuration management's way), the primary's file
		// later: the restarted dlbd hears the primary with the secret it
		// kept from before, stands by, and the pair is on the new secret
		// once the primary's file has it. It served beside the active 2 s
		// after its start.
		const third = "a third secret both dispatchers share\n"
		if err := os.WriteFile(own, []byte(third), 0o600); err != nil {
			t.Fatal(err)
		}
		h.d[1].stop(syscall.SIGTERM)
		h.d[1].start()
		poll(t, 10*time.Second, "the restarted backup to hear the primary", func() bool {
			st := h.d[1].status()
			return st.Peer.Alive && st.SecretPending && len(st.Groups) == 1 && st.Groups[0].State == "standby"
		})
		heardThroughout("after the backup restarted with a new secret")
		if st := h.d[0].status(); len(st.Groups) != 1 || st.Groups[0].State != "active" || st.Groups[0].Since != before[0].Groups[0].Since {
			t.Errorf("the primary after the backup restarted with a new secret: %+v, was %+v", st.Groups, before[0].Groups)
		}
		if st := h.d[1].status(); len(st.Groups) != 1 || st.Groups[0].State != "standby" {
			t.Errorf("the restarted backup: %+v", st.Groups)
		}
		if err := os.WriteFile(h.secret, []byte(third), 0o600); err != nil {
			t.Fatal(err)
		}
		poll(t, 5*time.Second, "the pair on the new secret", func() bool {
			return !h.d[0].status().SecretPending && !h.d[1].status().SecretPending
		})
	})

	t.Run("propagation", func(t *testing.T) {
		// One new connection at a time, nothing else running: the active
		// sends its entry with the next scan (every 100 ms), the standby
		// imports it. Measured from the client's start (an upper bound:
		// it includes starting labclient and the handshake) and from the
		// active's sending (the transfer and the import alone).
		var fromClient, fromSend []time.Duration
		for i := range 10 {
			time.Sleep(150 * time.Millisecond)
			sent, _ := h.d[0].replCounts()
			_, imported := h.d[1].replCounts()
			var wg sync.WaitGroup
			var t1, t2 time.Time
			wg.Add(2)
			go func() {
				defer wg.Done()
				t1 = firstGrowth(sent, 5*time.Second, func() uint64 { s, _ := h.d[0].replCounts(); return s })
			}()
			go func() {
				defer wg.Done()
				t2 = firstGrowth(imported, 5*time.Second, func() uint64 { _, m := h.d[1].replCounts(); return m })
			}()
			t0 := time.Now()
			if _, err := h.load(context.Background(), "-url", "http://"+h.vip()+":81/", "-n", "1"); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			wg.Wait()
			if t1.IsZero() || t2.IsZero() {
				t.Fatalf("connection %d: sent by the active %v, imported by the standby %v", i, !t1.IsZero(), !t2.IsZero())
			}
			fromClient = append(fromClient, t2.Sub(t0))
			fromSend = append(fromSend, max(t2.Sub(t1), 0))
		}
		slices.Sort(fromClient)
		slices.Sort(fromSend)
		med := func(v []time.Duration) time.Duration { return v[len(v)/2].Round(time.Millisecond) }
		t.Logf("propagation of a new NAT connection's entries to the standby (polled every 2 ms through dlbctl): from the client's start median %v, max %v; from the active's sending median %v, max %v; over %d connections",
			med(fromClient), fromClient[len(fromClient)-1].Round(time.Millisecond), med(fromSend),
			fromSend[len(fromSend)-1].Round(time.Millisecond), len(fromClient))
		if fromClient[len(fromClient)/2] > 200*time.Millisecond {
			t.Errorf("median propagation %v from the client's start, goal 200 ms", fromClient[len(fromClient)/2])
		}
	})

	// A port whose staletimeout is shorter than the replication's 10 s
	// refresh: the active must send its live entries again often enough
	// that the standby's sweeper does not expire them (it did: a
	// takeover then found no entry).
	t.Run("short staletimeout", func(t *testing.T) {
		port := h.vip() + "@81"
		for _, d := range h.d {
			d.mustCtl("port", "set", port, "--staletimeout", "2")
		}
		defer func() {
			for _, d := range h.d {
				d.mustCtl("port", "set", port, "--staletimeout", "300")
			}
		}()
		h.waitSteady(t, 30*time.Second)
		wait := h.loadBackground("-url", "http://"+h.vip()+":81/", "-keepalive", "-c", "100", "-interval", "200ms",
			"-duration", "9s", "-timeout", "5s")
		// Past 3 × the staletimeout, and the standby's sweeps (every 2 s)
		// in between: the standby must still hold every connection.
		time.Sleep(8 * time.Second)
		var ports []api.PortReport
		h.d[1].report(&ports, "port", "report", port)
		var held uint64
		for _, p := range ports {
			held += p.ActiveConnections
		}
		keep, keepErr := wait()
		t.Logf("staletimeout 2 s: the standby holds %d established NAT connections 8 s into 100 keep-alive connections (%d broken, %d requests)",
			held, keep.Broken, keep.Requests)
		if keepErr != nil || keep.Connections < 100 {
			t.Fatalf("keep-alive: %v, %d connections", keepErr, keep.Connections)
		}
		if held < 100 {
			t.Errorf("the standby holds %d of the 100 live NAT connections (staletimeout 2 s): it expired what the active still uses", held)
		}
	})

	t.Run("late-joining standby", func(t *testing.T) {
		ctx := context.Background()
		var keep loadResult
		var keepErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			keep, keepErr = h.load(ctx, "-url", "http://"+h.vip()+":81/", "-keepalive", "-c", "500", "-interval", "200ms",
				"-duration", "16s", "-timeout", "20s")
		}()
		// IPv6 beside it, by NAT and by MAC: the late standby must copy
		// those connections too, and its takeover move both IPv6
		// addresses (the cluster's and the return address) to its MAC
		// with neighbour advertisements.
		urls6 := []string{"http://[" + h.env["LAB_VIP6"] + "]:81/", "http://[" + h.env["LAB_VIP6"] + "]:80/"}
		keep6 := make([]loadResult, len(urls6))
		keep6Err := make([]error, len(urls6))
		var wg6 sync.WaitGroup
		for i, u := range urls6 {
			wg6.Go(func() {
				keep6[i], keep6Err[i] = h.load(ctx, "-url", u, "-keepalive", "-c", "100", "-interval", "200ms",
					"-duration", "16s", "-timeout", "20s")
			})
		}
		time.Sleep(2 * time.Second)
		// The standby loses everything: dlbd killed, its executor's pins
		// gone (the program leaves the interface, the tables with it).
		d := h.d[1]
		d.stop(syscall.SIGKILL)
		if err := os.RemoveAll(d.pin); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		start := time.Now()
		d.start()
		poll(t, 20*time.Second, "the late standby synced", func() bool {
			s := d.status()
			return len(s.Groups) == 1 && s.Groups[0].State == "standby" && s.Replication.Synced
		})
		synced := time.Since(start)
		_, got := d.replCounts()
		t.Logf("late-joining standby: dlbd started, standby and synced %v after its start, %d records imported (500 + 100 NAT connections, "+
			"a flow and a port each, and 100 by MAC)", synced.Round(time.Millisecond), got)
		if got < 1300 {
			t.Errorf("the late standby imported %d records, want at least 1300", got)
		}
		// Take over at once: the copy is what the connections live on.
		h.d[0].stop(syscall.SIGKILL)
		if err := os.RemoveAll(h.d[0].pin); err != nil {
			t.Fatal(err)
		}
		took := poll(t, 10*time.Second, "the late standby active", func() bool { return d.state() == "active" })
		<-done
		wg6.Wait()
		t.Logf("then the active killed: the late standby active %v later; established broken %d of %d (%d requests, errors %v)",
			took.Round(time.Millisecond), keep.Broken, keep.Connections, keep.Requests, keep.Errors)
		if keepErr != nil || keep.Broken != 0 || keep.Connections < 500 {
			t.Errorf("keep-alive: %v, %d of %d broken: %v", keepErr, keep.Broken, keep.Connections, keep.Errors)
		}
		for i, u := range urls6 {
			k := keep6[i]
			t.Logf("IPv6 %s: established broken %d of %d (%d requests, errors %v)", u, k.Broken, k.Connections, k.Requests, k.Errors)
			if keep6Err[i] != nil || k.Broken != 0 || k.Connections < 100 {
				t.Errorf("IPv6 keep-alive to %s: %v, %d of %d broken: %v", u, keep6Err[i], k.Broken, k.Connections, k.Errors)
			}
		}
		h.d[0].start()
		h.waitSteady(t, 30*time.Second)
	})

	// dlbd killed on the active, its executor left forwarding (a crash),
	// and restarted only after the backup took over: the restarted dlbd
	// resumes its group active, and must stand by for a copy of the
	// connections the backup made meanwhile before it takes the group
	// back. (It stayed active, the backup let go at once, and 44 of 50
	// NAT connections made during the takeover broke.)
	t.Run("restart after a takeover", func(t *testing.T) {
		h.d[0].stop(syscall.SIGKILL)
		took := poll(t, 10*time.Second, "the backup active", func() bool { return h.d[1].state() == "active" })
		wait := h.loadBackground("-url", "http://"+h.vip()+":81/", "-keepalive", "-c", "100", "-interval", "200ms",
			"-duration", "5s", "-timeout", "20s")
		time.Sleep(time.Second)
		h.d[0].start()
		back := poll(t, 15*time.Second, "the restarted primary active, the backup standing by", func() bool {
			return h.d[0].state() == "active" && h.d[1].state() == "standby"
		})
		s := h.d[0].status()
		during, duringErr := wait()
		t.Logf("the backup active %v after the primary's dlbd was killed; the primary, restarted, active again %v after its start (%s); "+
			"NAT connections made during the takeover: broken %d of %d (%d requests, errors %v)", took.Round(time.Millisecond),
			back.Round(time.Millisecond), s.Groups[0].Reason, during.Broken, during.Connections, during.Requests, during.Errors)
		if !strings.HasPrefix(s.Groups[0].Reason, "the peer let go") {
			t.Errorf("the restarted primary serves for %q, want after the backup let go (a preempt)", s.Groups[0].Reason)
		}
		if duringErr != nil || during.Broken != 0 || during.Connections < 100 {
			t.Errorf("keep-alive: %v, %d of %d broken: %v", duringErr, during.Broken, during.Connections, during.Errors)
		}
		h.waitSteady(t, 30*time.Second)
	})
}
