package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// The control plane at scale: a configuration of many ports and servers
// loaded, changed, restarted and removed through dlbctl, with dlbd's
// memory and the executor's kernel memory measured. The servers are NAT
// servers behind the lab's router, so that no neighbour resolution is
// needed however many there are; their addresses come from 198.18.8.0
// onwards (198.18.0.0/15 holds 129,024 of them above the lab's own).
//
// TestPrivilegedScaleReport (make bench; DLB_BENCH=1) prints the figures at
// DLB_SCALE_PORTS x DLB_SCALE_SERVERS (default 1000 x 100);
// TestPrivilegedE2EScale (make test) runs a smaller case with traffic
// through one port while the others are loaded and removed.

// scaleServer returns the i-th fake server address (i from 0).
func scaleServer(i int) netip.Addr {
	base := netip.MustParseAddr("198.18.8.0").As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(i)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// scaleScript writes a dlbctl script of ports NAT ports (from port 1001)
// on the lab's cluster address, each with servers servers, in the form
// "file save" writes (a port's servers with equal settings on one line).
func scaleScript(l *lab, path string, ports, servers int) {
	l.t.Helper()
	writeScript(l, path, func(w io.Writer) {
		fmt.Fprintf(w, "cluster add %s\n", l.vip())
		scalePorts(l, w, ports, servers)
	})
}

// writeScript writes a dlbctl script with write.
func writeScript(l *lab, path string, write func(io.Writer)) {
	l.t.Helper()
	f, err := os.Create(path)
	if err != nil {
		l.t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	write(w)
	if err := w.Flush(); err != nil {
		l.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		l.t.Fatal(err)
	}
}

// scalePorts writes ports NAT ports from port 1001 on the lab's cluster
// address, each with servers servers behind the lab's router.
func scalePorts(l *lab, w io.Writer, ports, servers int) {
	next := 0
	for p := 0; p < ports; p++ {
		port := 1001 + p
		fmt.Fprintf(w, "port add %s@%d --method nat\n", l.vip(), port)
		addrs := make([]string, servers)
		for s := range addrs {
			addrs[s] = scaleServer(next).String()
			next++
		}
		fmt.Fprintf(w, "server add %s@%d@%s --weight 10 --returnaddress %s --router %s\n",
			l.vip(), port, strings.Join(addrs, "+"), l.env["LAB_RETURN_ADDR"], l.env["LAB_ROUTER_ADDR"])
	}
}

// rssKB is a process's resident set size in KiB: all of it (VmRSS), and
// its private memory (RssAnon: heap, stacks), which leaves out the pages
// of the executor's tables that dlbd maps to read them (shared with the
// kernel, counted in the maps' kernel memory too).
func rssKB(t *testing.T, pid int) (rss, anon int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("DLB_SCALE_RSSDEBUG") != "" {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Rss") || strings.HasPrefix(line, "VmRSS") {
				t.Log(line)
			}
		}
	}
	rss, anon = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss, _ = strconv.Atoi(strings.Fields(v)[0])
		}
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			anon, _ = strconv.Atoi(strings.Fields(v)[0])
		}
	}
	if rss < 0 || anon < 0 {
		t.Fatalf("no VmRSS or RssAnon for pid %d", pid)
	}
	return rss, anon
}

// memlock returns the kernel memory a map's fd is charged for.
func memlock(t *testing.T, m *ebpf.Map) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// kernelMemory sums the memory of the executor's maps: every map pinned in
// the pin directory, and the Maglev tables held by maglev_tables. It
// returns the total and the Maglev tables' part.
func kernelMemory(t *testing.T, pinDir string) (total, tables uint64, n int) {
	t.Helper()
	ents, err := os.ReadDir(pinDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, e.Name()), nil)
		if err != nil {
			continue // the program and the link
		}
		total += memlock(t, m)
		if e.Name() == "maglev_tables" {
			var k uint32
			var id uint32
			it := m.Iterate()
			for it.Next(&k, &id) {
				inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
				if err != nil {
					continue
				}
				ml := memlock(t, inner)
				total += ml
				if inner.MaxEntries() > 1 { // not a removed table's placeholder
					tables += ml
					n++
				}
				inner.Close()
			}
		}
		m.Close()
	}
	return total, tables, n
}

// timeCtl runs a dlbctl command and returns how long it took; it fails the
// test unless the command succeeds.
func (l *lab) timeCtl(args ...string) time.Duration {
	l.t.Helper()
	start := time.Now()
	l.mustCtl(args...)
	return time.Since(start)
}

// medianOf runs f n times and returns the median duration.
func medianOf(n int, f func(i int) time.Duration) time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = f(i)
	}
	slices.Sort(d)
	return d[n/2]
}

// scaleFigures are the figures of one scale run.
type scaleFigures struct {
	ports, servers                  int
	load, remove                    time.Duration
	weight, down, add               time.Duration // one change, median
	restart                         time.Duration // SIGTERM to API ready
	rssEmpty, rssLoaded, rssGone    int           // KiB
	anonEmpty, anonLoaded, anonGone int           // KiB (RssAnon)
	kernel, kernelTables            uint64        // bytes
	tables                          int
	cycleCPU                        time.Duration // dlbd's CPU per manager cycle
	cycles                          uint64
}

// cpuTime is a process's CPU time (user and system, all threads).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name (which may hold spaces): utime
	// and stime are the 14th and 15th fields, in clock ticks of 10 ms.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// managerCPU runs the manager at a 0.5 s interval, reading the executor's
// counters every cycle, and returns dlbd's CPU time per cycle over d (an
// upper bound: whatever else dlbd does meanwhile counts too).
func (l *lab) managerCPU(d time.Duration) (perCycle time.Duration, cycles uint64) {
	l.mustCtl("manager", "set", "interval", "0.5", "refresh", "1")
	l.mustCtl("manager", "start")
	time.Sleep(time.Second) // the first cycle creates the records
	var r0, r1 api.ManagerReport
	l.report(&r0, "manager", "report")
	c0 := cpuTime(l.t, l.dlbd.Process.Pid)
	time.Sleep(d)
	c1 := cpuTime(l.t, l.dlbd.Process.Pid)
	l.report(&r1, "manager", "report")
	l.mustCtl("manager", "stop")
	n := r1.Cycles - r0.Cycles
	if n == 0 {
		l.t.Fatal("no manager cycle ran")
	}
	return (c1 - c0) / time.Duration(n), n
}

// changes times a weight change, a server down (and up) and a server add
// (and remove) on the first port, n times each.
func (l *lab) changes(n int) (weight, down, add time.Duration) {
	vip := l.vip()
	srv := fmt.Sprintf("%s@1001@%s", vip, scaleServer(0))
	weight = medianOf(n, func(i int) time.Duration {
		return l.timeCtl("server", "set", srv, "--weight", strconv.Itoa(1+i%9))
	})
	down = medianOf(n, func(int) time.Duration {
		d := l.timeCtl("server", "down", srv)
		l.mustCtl("server", "up", srv)
		return d
	})
	extra := fmt.Sprintf("%s@1001@%s", vip, netip.MustParseAddr("198.19.255.250"))
	add = medianOf(n, func(int) time.Duration {
		d := l.timeCtl("server", "add", extra, "--returnaddress", l.env["LAB_RETURN_ADDR"], "--router", l.env["LAB_ROUTER_ADDR"])
		l.mustCtl("server", "remove", extra)
		return d
	})
	return weight, down, add
}

// scaleRun loads ports x servers, measures, and removes it all again.
func scaleRun(t *testing.T, l *lab, ports, servers int, extra ...string) scaleFigures {
	f := scaleFigures{ports: ports, servers: servers}
	l.startDlbd(extra...)
	l.mustCtl("executor", "start", "--interface", l.env["LAB_IF"])
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA"])
	time.Sleep(time.Second)
	f.rssEmpty, f.anonEmpty = rssKB(t, l.dlbd.Process.Pid)

	script := filepath.Join(l.run, "scale.cfg")
	scaleScript(l, script, ports, servers)
	f.load = l.timeCtl("file", "load", script)
	f.rssLoaded, f.anonLoaded = rssKB(t, l.dlbd.Process.Pid)
	if dir := os.Getenv("DLB_SCALE_HEAPPROFILE"); dir != "" { // needs --pprof
		saveHeapProfile(t, l.sock, filepath.Join(dir, fmt.Sprintf("heap-loaded-%dx%d", ports, servers)))
	}
	f.kernel, f.kernelTables, f.tables = kernelMemory(t, l.pinDir)

	f.weight, f.down, f.add = l.changes(5)
	f.cycleCPU, f.cycles = l.managerCPU(5 * time.Second)

	l.killDlbd(15)
	start := time.Now()
	l.startDlbdWait(5*time.Minute, extra...)
	f.restart = time.Since(start)

	f.remove = l.timeCtl("cluster", "remove", l.vip())
	time.Sleep(2 * time.Second)
	f.rssGone, f.anonGone = rssKB(t, l.dlbd.Process.Pid)
	if dir := os.Getenv("DLB_SCALE_HEAPPROFILE"); dir != "" { // needs --pprof
		saveHeapProfile(t, l.sock, filepath.Join(dir, fmt.Sprintf("heap-removed-%dx%d", ports, servers)))
	}
	l.killDlbd(15)
	return f
}

// saveHeapProfile saves dlbd's heap profile (dlbd --pprof) to path.
func saveHeapProfile(t *testing.T, sock, path string) {
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://dlbd/debug/pprof/heap")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("heap profile: %v %s", err, resp.Status)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f scaleFigures) log(t *testing.T) {
	t.Logf("%d ports x %d servers (%d servers):", f.ports, f.servers, f.ports*f.servers)
	t.Logf("  file load                   %8.2f s", f.load.Seconds())
	t.Logf("  one change: server weight   %8.1f ms", ms(f.weight))
	t.Logf("  one change: server down     %8.1f ms", ms(f.down))
	t.Logf("  one change: server add      %8.1f ms", ms(f.add))
	t.Logf("  manager cycle, dlbd CPU     %8.1f ms (%d cycles, counters read each)", ms(f.cycleCPU), f.cycles)
	t.Logf("  restart to API ready        %8.2f s", f.restart.Seconds())
	t.Logf("  cluster remove (everything) %8.2f s", f.remove.Seconds())
	t.Logf("  dlbd RSS empty/loaded/removed  %d / %d / %d MB", f.rssEmpty/1024, f.rssLoaded/1024, f.rssGone/1024)
	t.Logf("    of which private (RssAnon)   %d / %d / %d MB (the rest: executor tables dlbd maps to read)", f.anonEmpty/1024, f.anonLoaded/1024, f.anonGone/1024)
	t.Logf("  kernel memory of the maps   %8.1f MiB (of which %d Maglev tables: %.1f MiB)",
		float64(f.kernel)/(1<<20), f.tables, float64(f.kernelTables)/(1<<20))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestPrivilegedScaleReport prints the control plane's figures at scale and, for
// comparison, the same changes on a one-port configuration (make bench).
func TestPrivilegedScaleReport(t *testing.T) {
	alone(t)
	if os.Getenv("DLB_BENCH") == "" {
		t.Skip("a benchmark: set DLB_BENCH=1 (make bench)")
	}
	testutil.RequirePrivileged(t)
	ports, servers := envInt("DLB_SCALE_PORTS", 1000), envInt("DLB_SCALE_SERVERS", 100)
	extra := strings.Fields(os.Getenv("DLB_SCALE_DLBD_FLAGS"))
	l := newLabArgs(t, "-n", "1", "-c", "1", "-r", "1")
	small := scaleRun(t, l, 1, servers, extra...)
	big := scaleRun(t, l, ports, servers, extra...)
	small.log(t)
	big.log(t)
	t.Logf("one change at scale / on one port: weight %.2fx, down %.2fx, add %.2fx",
		ms(big.weight)/ms(small.weight), ms(big.down)/ms(small.down), ms(big.add)/ms(small.add))
}

// TestPrivilegedE2EScaled: 200 ports of 50 servers each (10,000 servers)
// are loaded, changed and removed while clients use another port of the
// same cluster: its long-lived connections stay on their servers, its
// new connections all succeed, and the executor holds one table per port
// (sized for 50 servers), then only its own again.
func TestPrivilegedE2EScaled(t *testing.T) {
	alone(t)
	const ports, servers = 200, 50
	l := newLabArgs(t, "-n", "3", "-c", "1", "-r", "1")
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	url := "http://" + l.vip() + "/"

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held, fresh := make(chan loadResult, 1), make(chan loadResult, 1)
	go func() {
		r, err := l.load(ctx, "-url", url, "-keepalive", "-c", "20", "-interval", "50ms", "-duration", "12s", "-timeout", "3s")
		if err != nil {
			t.Error(err)
		}
		held <- r
	}()
	go func() {
		r, err := l.load(ctx, "-url", url, "-duration", "10s", "-c", "4", "-timeout", "3s")
		if err != nil {
			t.Error(err)
		}
		fresh <- r
	}()
	time.Sleep(time.Second) // connections established first

	load := filepath.Join(l.run, "scaled.cfg")
	writeScript(l, load, func(w io.Writer) { scalePorts(l, w, ports, servers) })
	took := l.timeCtl("file", "load", load)
	ex := l.executor()
	var tables int
	var tableBytes uint64
	for _, tr := range ex.Tables {
		if tr.Name == "maglev_tables" {
			tables, tableBytes = tr.Tables, tr.Bytes
		}
	}
	t.Logf("loaded %d ports x %d servers in %.2f s; %d Maglev tables, %.1f MiB", ports, servers, took.Seconds(), tables, float64(tableBytes)/(1<<20))
	if tables != ports+1 {
		t.Errorf("%d Maglev tables after the load, want %d", tables, ports+1)
	}
	var pr []api.PortReport
	l.report(&pr, "port", "report", fmt.Sprintf("%s@%d", l.vip(), 1001))
	if len(pr) != 1 || pr[0].Servers != servers || pr[0].TableSize < 100*servers || pr[0].TableSize > 2*100*servers {
		t.Errorf("port 1001 after the load: %+v; want %d servers and a table of about %d slots", pr, servers, 100*servers)
	}

	// Changes on the scaled ports, then all of them removed.
	srv := fmt.Sprintf("%s@1001@%s", l.vip(), scaleServer(0))
	l.mustCtl("server", "set", srv, "--weight", "3")
	l.mustCtl("server", "down", srv)
	l.mustCtl("server", "up", srv)
	remove := filepath.Join(l.run, "remove.cfg")
	writeScript(l, remove, func(w io.Writer) {
		for p := 0; p < ports; p++ {
			fmt.Fprintf(w, "port remove %s@%d\n", l.vip(), 1001+p)
		}
	})
	took = l.timeCtl("file", "load", remove)
	t.Logf("removed the %d ports in %.2f s", ports, took.Seconds())
	for _, tr := range l.executor().Tables {
		if tr.Name == "maglev_tables" && tr.Tables != 1 {
			t.Errorf("%d Maglev tables after the removal, want 1", tr.Tables)
		}
	}

	h, f := <-held, <-fresh
	t.Logf("port 80 meanwhile: %d keep-alive connections, %d broken, %d changed backend; %d new connections, %d failed",
		h.Connections, h.Broken, h.BackendChanges, f.Requests, f.Failed)
	if h.Connections < 20 || h.Broken != 0 || h.BackendChanges != 0 {
		t.Errorf("keep-alive connections on port 80 disturbed: %+v", h)
	}
	if f.Failed != 0 || f.OK < 100 {
		t.Errorf("new connections on port 80: %d of %d failed: %v", f.Failed, f.Requests, f.Errors)
	}
}
