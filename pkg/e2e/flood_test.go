package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// floodResult is labflood's -json summary.
type floodResult struct {
	Frames     int     `json:"frames"`
	Seconds    float64 `json:"seconds"`
	PPS        float64 `json:"pps"`
	SendErrors int     `json:"send_errors"`
	Stopped    string  `json:"stopped"`
	Error      string  `json:"error"`
}

// flood sends count spoofed SYNs to addr:port from client i's namespace,
// from random sources in 198.19.0.0/16 (inside the lab's test range, off
// every lab subnet, so nobody answers them).
func (l *lab) flood(client int, addr, port string, count int) floodResult {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+l.env[fmt.Sprintf("LAB_C%d_NS", client)],
		filepath.Join(binDir, "labflood"), "-iface", l.env["LAB_IF"], "-dst", addr, "-dport", port, "-dstmac", "auto",
		"-src", "198.19.0.0/16", "-count", fmt.Sprint(count), "-json")
	out, err := cmd.Output()
	var r floodResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		l.t.Fatalf("labflood: %v (%v): %s", err, jerr, out)
	}
	return r
}

// floodPhase floods target (VIP:port) with count SYNs while 40 keep-alive
// connections and a stream of new connections from client 1 use the same
// port, and checks that no established connection broke or moved and that
// at least 99% of the new connections succeeded.
func (l *lab) floodPhase(name, port string, count int) {
	l.t.Helper()
	t := l.t
	url := "http://" + l.vip() + ":" + port + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held := make(chan loadResult, 1)
	fresh := make(chan loadResult, 1)
	go func() {
		r, err := l.loadFrom(ctx, 1, "-url", url, "-keepalive", "-c", "40", "-interval", "50ms", "-duration", "12s", "-timeout", "3s")
		if err != nil {
			t.Error(err)
		}
		held <- r
	}()
	go func() {
		r, err := l.loadFrom(ctx, 1, "-url", url, "-duration", "10s", "-c", "8", "-timeout", "3s")
		if err != nil {
			t.Error(err)
		}
		fresh <- r
	}()
	time.Sleep(1500 * time.Millisecond) // connections established before the flood
	f := l.flood(2, l.vip(), port, count)
	t.Logf("%s: flood of %d spoofed SYNs in %.1f s (%.0f/s), %d send errors, %s", name, f.Frames, f.Seconds, f.PPS, f.SendErrors, f.Stopped)
	if f.Frames < count {
		t.Errorf("%s: only %d of %d flood SYNs sent: %s", name, f.Frames, count, f.Error)
	}
	var ports []api.PortReport
	l.report(&ports, "port", "report", l.vip()+"@"+port)
	t.Logf("%s: right after the flood the port counts %d half-open connections (alert %v)", name, ports[0].HalfOpen, ports[0].HalfOpenAlert)

	h, n := <-held, <-fresh
	t.Logf("%s: %d keep-alive connections made %d requests: %d broken, %d moved to another backend", name, h.Connections, h.Requests, h.Broken, h.BackendChanges)
	t.Logf("%s: new connections during the flood: %d of %d succeeded (%.2f%%), errors %v", name, n.OK, n.Requests, 100*float64(n.OK)/float64(max(n.Requests, 1)), n.Errors)
	if h.Connections != 40 || h.Broken != 0 || h.BackendChanges != 0 || h.Requests == 0 {
		t.Errorf("%s: established connections: %d held, %d broken, %d moved (errors %v)", name, h.Connections, h.Broken, h.BackendChanges, h.Errors)
	}
	if n.Requests == 0 || float64(n.OK) < 0.99*float64(n.Requests) {
		t.Errorf("%s: only %d of %d new connections succeeded during the flood", name, n.OK, n.Requests)
	}
}

// TestPrivilegedE2ESYNFlood floods a MAC port and a NAT port with spoofed
// SYNs, 25 and 10 times their connection table's size, while clients hold
// established connections and open new ones: no established connection
// breaks or moves, at least 99% of the new ones succeed, the connection
// tables never overflow, and maxhalfopen raises halfOpenAlert and, once
// the flood is over, halfOpenAlertDone.
func TestPrivilegedE2ESYNFlood(t *testing.T) {
	alone(t)
	l := newLabArgs(t, "-n", "3", "-r", "2", "-c", "2")
	scripts, events := eventScripts(t, []string{"halfOpenAlert", "halfOpenAlertDone"}, "DLB_CLUSTER", "DLB_PORT")
	// The NAT table also holds the legitimate connections of the test
	// (thousands, each kept for the FIN timeout after it closes).
	const table, natTable = 4096, 16384
	l.startDlbd("--conn-table-size", fmt.Sprint(table), "--nat-table-size", fmt.Sprint(natTable),
		"--halfopen-table-size", "1024", "--scripts-dir", scripts)
	l.configure("generic", 10, 10, 10)
	vip := l.vip()
	l.mustCtl("port", "set", vip+"@80", "--maxhalfopen", "1000")
	// Port 81 is NAT to the servers behind the router (their port 80).
	l.mustCtl("port", "add", vip+"@81", "--method", "nat", "--maxhalfopen", "500")
	for i := 1; i <= 2; i++ {
		l.mustCtl("server", "add", vip+"@81@"+l.env[fmt.Sprintf("LAB_N%d_ADDR", i)],
			"--returnaddress", l.env["LAB_RETURN_ADDR"], "--router", l.env["LAB_ROUTER_ADDR"], "--mapport", "80")
	}
	l.waitServersUp()
	if ex := l.executor(); ex.ConnectionCapacity != table || ex.NATCapacity != natTable || ex.HalfOpenCapacity != 1024 {
		t.Fatalf("table sizes %d/%d/%d, want %d/%d/1024", ex.ConnectionCapacity, ex.NATCapacity, ex.HalfOpenCapacity, table, natTable)
	}

	l.floodPhase("MAC", "80", 25*table)
	l.floodPhase("NAT", "81", 10*natTable)

	ex := l.executor()
	t.Logf("after both floods: %d connection entries (capacity %d + NAT %d), events %v", ex.Connections, ex.ConnectionCapacity, ex.NATCapacity, ex.Events)
	if ex.Connections > int(ex.ConnectionCapacity+ex.NATCapacity) {
		t.Errorf("%d connection entries, above the capacity", ex.Connections)
	}
	waitFor(t, 5*time.Second, "halfOpenAlert for both ports", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), "halfOpenAlert "+vip+" 80\n") && strings.Contains(string(b), "halfOpenAlert "+vip+" 81\n")
	})
	// Half-open counts cover the last 30 s: the alerts clear after that.
	took := waitFor(t, 60*time.Second, "halfOpenAlertDone for both ports", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), "halfOpenAlertDone "+vip+" 80\n") && strings.Contains(string(b), "halfOpenAlertDone "+vip+" 81\n")
	})
	b, _ := os.ReadFile(events)
	t.Logf("events (done %.0f s after the last flood):\n%s", took.Seconds(), b)

	// The executor still balances normally afterwards.
	r := l.mustLoad("-url", "http://"+vip+"/", "-n", "300", "-c", "10")
	if r.OK != 300 {
		t.Errorf("after the floods: %d of 300 connections answered: %v", r.OK, r.Errors)
	}
}

// TestPrivilegedE2ETableSizeChange: dlbd restarted with other table sizes
// under NAT keep-alive load replaces the pinned executor with one of the
// new sizes, in place on its link, and carries its connections over: no
// NAT connection (whose return port only the tables know) breaks or
// changes server; dlbd logs it and runs the executorReplaced script.
func TestPrivilegedE2ETableSizeChange(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "1", "-r", "2", "-c", "1")
	scripts, events := eventScripts(t, []string{"executorReplaced"}, "DLB_INTERFACE", "DLB_REASON")
	l.startDlbd("--conn-table-size", "4096", "--nat-table-size", "8192", "--scripts-dir", scripts)
	vip := l.startNAT(false, 2)
	before := l.executor()

	load := l.keepAlive("http://"+vip+"/", "7s")
	time.Sleep(1500 * time.Millisecond)
	l.killDlbd(syscall.SIGTERM)
	l.startDlbd("--conn-table-size", "8192", "--nat-table-size", "16384", "--scripts-dir", scripts)
	checkKeptAlive(t, "the resize", <-load)
	after := l.executor()
	if !after.Attached || after.Error != "" || after.LinkID != before.LinkID || after.ProgramID == before.ProgramID ||
		after.ConnectionCapacity != 8192 || after.NATCapacity != 16384 {
		t.Errorf("after the resize: %+v; want link %d with a new program and tables of 8192 and 16384", after, before.LinkID)
	}
	log := l.dlbdLog()
	if !strings.Contains(log, "replaced the executor pinned with other table sizes") || strings.Contains(log, "not all") {
		t.Errorf("dlbd did not log a whole carry-over:\n%s", log)
	}
	want := "executorReplaced " + l.env["LAB_IF"] +
		" the pinned executor's tables had other sizes: connection table 4096 -> 8192, NAT tables 8192 -> 16384"
	waitFor(t, 3*time.Second, "the executorReplaced event script", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), want)
	})
}
