package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/vishvananda/netns"
)

// The monitoring end to end: a real Prometheus scraping dlbd during
// traffic, and the web console in a real headless Chromium. dlbd runs in
// the lab's dispatcher namespace and listens on that namespace's loopback
// (metricsAddr); Prometheus runs there too; the test reaches both by
// dialling from inside the namespace, and Chromium (in the test's own
// namespace) through a small forwarder.

// metricsAddr is where the lab's dlbd serves /metrics and the console, on
// the dispatcher namespace's own loopback.
const metricsAddr = "127.0.0.1:9917"

// dialIn returns a dialer that opens its connections inside a network
// namespace: a socket stays in the namespace it was made in.
func dialIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			// A thread of its own: switched to the namespace, and thrown
			// away (never unlocked) if it cannot be switched back.
			runtime.LockOSThread()
			orig, err := netns.Get()
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer orig.Close()
			target, err := netns.GetFromPath(nsPath)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer target.Close()
			if err := netns.Set(target); err != nil {
				ch <- result{nil, err}
				return
			}
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// nsClient is an HTTP client whose connections start in the lab's
// dispatcher namespace.
func (l *lab) nsClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: dialIn("/run/netns/" + l.env["LAB_DISPATCHER_NS"]), DisableCompression: true}}
}

// forwarder accepts connections on the test's loopback and forwards each
// to addr in the dispatcher namespace; it stops when the test ends.
func (l *lab) forwarder(addr string) string {
	l.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.t.Fatal(err)
	}
	dial := dialIn("/run/netns/" + l.env["LAB_DISPATCHER_NS"])
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	l.t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				track(c, true)
				defer track(c, false)
				up, err := dial(context.Background(), "tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				track(up, true)
				defer track(up, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// needTool finds a program the test needs: it skips without it on a
// developer's machine, and fails under DLB_REQUIRE_PRIVILEGED=1 (CI, where
// make test-deps installs it).
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("DLB_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("%s is missing (make test-deps installs the %s package)", name, pkg)
	}
	t.Skipf("%s is missing: make test-deps installs the %s package", name, pkg)
	return ""
}

// artefactDir is where tests leave what a person may want to look at
// (screenshots): $DLB_ARTEFACTS, or bin/artefacts in the repository (a
// build output, each run's files replacing the last's: a new directory a
// run under /tmp would pile up, one per make test).
func artefactDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("DLB_ARTEFACTS")
	if d == "" {
		d = filepath.Join(repoDir, "bin", "artefacts")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// prometheus is a Prometheus server the test runs in the dispatcher
// namespace.
type prometheus struct {
	l    *lab
	base string
	c    *http.Client
}

// startPrometheus runs Prometheus with a configuration of its own that
// scrapes dlbd's /metrics every second; it is stopped when the test ends.
func (l *lab) startPrometheus() *prometheus {
	l.t.Helper()
	bin := needTool(l.t, "prometheus", "prometheus")
	dir := filepath.Join(l.run, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		l.t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: dlbd
    static_configs:
      - targets: ["%s"]
`, metricsAddr)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		l.t.Fatal(err)
	}
	const listen = "127.0.0.1:9090"
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		l.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+l.env["LAB_DISPATCHER_NS"], bin,
		"--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("starting prometheus: %v", err)
	}
	l.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if l.t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			l.t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &prometheus{l: l, base: "http://" + listen, c: l.nsClient()}
	waitFor(l.t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := p.c.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// query runs a PromQL instant query through Prometheus's HTTP API at time
// at, and returns the vector's values by the given label.
func (p *prometheus) query(q string, at time.Time, by string) map[string]float64 {
	p.l.t.Helper()
	v := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 3, 64)}}
	resp, err := p.c.Get(p.base + "/api/v1/query?" + v.Encode())
	if err != nil {
		p.l.t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" || r.Data.ResultType != "vector" {
		p.l.t.Fatalf("query %s: %v %s %s (%s)", q, err, r.Status, r.Error, r.Data.ResultType)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(str, 64)
		if err != nil {
			p.l.t.Fatalf("query %s: value %v", q, s.Value)
		}
		out[s.Metric[by]] = f
	}
	return out
}

// scrapedAfter waits until Prometheus holds a scrape of dlbd taken after
// t, and returns that scrape's time.
func (p *prometheus) scrapedAfter(t time.Time, limit time.Duration) time.Time {
	p.l.t.Helper()
	var last time.Time
	waitFor(p.l.t, limit, "a scrape after "+t.Format(time.StampMilli), func() bool {
		ts := p.query(`timestamp(dlb_config_changes_total)`, time.Now(), "")[""]
		last = time.UnixMilli(int64(math.Round(ts * 1000)))
		return last.After(t)
	})
	return last
}

// TestPrivilegedE2EPrometheus: a real Prometheus scrapes dlbd every second
// while a client opens new connections through the VIP to three servers
// of different weights; PromQL through Prometheus's HTTP API gives every
// server's new connections as the client counted them (within 5 %), and
// promtool finds nothing to fault in the exposition scraped meanwhile.
func TestPrivilegedE2EPrometheus(t *testing.T) {
	parallel(t)
	promtool := needTool(t, "promtool", "prometheus")
	l := newLabPrefix(t, "dlbm", "-n", "3", "-c", "1")
	l.startDlbd("--metrics-address", metricsAddr)
	l.configure("generic", 5, 10, 15)
	l.mustCtl("advisor", "start", "http", l.vip()+"@80", "--interval", "1")
	prom := l.startPrometheus()
	before := prom.scrapedAfter(time.Now(), 20*time.Second)
	if up := prom.query(`up{job="dlbd"}`, time.Now(), "job"); up["dlbd"] != 1 {
		t.Fatalf("Prometheus does not scrape dlbd: up = %v", up)
	}

	type loadOut struct {
		r   loadResult
		err error
	}
	done := make(chan loadOut, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r, err := l.load(ctx, "-url", "http://"+l.vip()+"/", "-duration", "12s", "-c", "8")
		done <- loadOut{r, err}
	}()
	// Meanwhile: the exposition as Prometheus gets it, checked by promtool,
	// and the rate query.
	time.Sleep(6 * time.Second)
	resp, err := l.nsClient().Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	expo, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %v %s", err, resp.Status)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(expo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the exposition scraped during traffic: %v\n%s", err, out)
	}
	for _, want := range []string{`dlb_advisor_state{advisor="http@` + l.vip() + `@80",server="` + l.backend(1) + `",port="80",state="up"} 1`, `dlb_server_new_connections_total{cluster="` + l.vip() + `",port="80",server="` + l.backend(3) + `"}`} {
		if !bytes.Contains(expo, []byte(want)) {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	rates := prom.query(`sum(rate(dlb_server_new_connections_total[30s])) by (server)`, time.Now(), "server")
	t.Logf("during traffic, sum(rate(dlb_server_new_connections_total[30s])) by (server) = %v", rates)
	for i := 1; i <= 3; i++ {
		if rates[l.backend(i)] <= 0 {
			t.Errorf("no rate of new connections for b%d during traffic: %v", i, rates)
		}
	}

	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	r := out.r
	if r.Failed != 0 || r.OK < 300 {
		t.Fatalf("traffic: %d ok, %d failed: %v", r.OK, r.Failed, r.Errors)
	}
	at := prom.scrapedAfter(time.Now().Add(500*time.Millisecond), 20*time.Second)
	// Two queries: the counters' values at the last scrape (they started at
	// 0 with this dlbd), and their increase over a window that starts
	// before the traffic, evaluated at that scrape (no extrapolation).
	window := int(at.Sub(before).Seconds()) + 5
	counts := prom.query(fmt.Sprintf(`sum by (server) (dlb_server_new_connections_total{cluster=%q,port="80"})`, l.vip()), at, "server")
	increase := prom.query(fmt.Sprintf(`sum by (server) (increase(dlb_server_new_connections_total{cluster=%q,port="80"}[%ds]))`, l.vip(), window), at, "server")
	t.Logf("client: %d connections in %d ms: %v", r.OK, r.ElapsedMS, r.PerBackend)
	t.Logf("%-4s %-14s %8s %12s %12s", "", "server", "client", "prometheus", "increase()")
	for i := 1; i <= 3; i++ {
		addr := l.backend(i)
		client := float64(r.PerBackend[fmt.Sprintf("b%d", i)])
		t.Logf("b%-3d %-14s %8.0f %12.0f %12.1f", i, addr, client, counts[addr], increase[addr])
		for name, got := range map[string]float64{"value": counts[addr], "increase": increase[addr]} {
			if client == 0 || math.Abs(got-client)/client > 0.05 {
				t.Errorf("b%d: Prometheus's %s is %.1f, the client counted %.0f (more than 5 %% apart)", i, name, got, client)
			}
		}
	}
	dur := prom.query(`scrape_duration_seconds{job="dlbd"}`, at, "job")["dlbd"]
	samples := prom.query(`scrape_samples_scraped{job="dlbd"}`, at, "job")["dlbd"]
	t.Logf("last scrape: %.1f ms, %.0f samples", dur*1000, samples)
}

// browserErrors collects what a page reports as errors: console.error and
// console.assert calls, uncaught exceptions, and the browser's own error
// entries (a resource that failed to load, a CSP violation).
type browserErrors struct {
	mu   sync.Mutex
	errs []string
}

func (b *browserErrors) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, s)
}

func (b *browserErrors) list() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

func (b *browserErrors) listen(ev any) {
	switch e := ev.(type) {
	case *cdpruntime.EventConsoleAPICalled:
		if e.Type == cdpruntime.ConsoleAPICalledTypeError || e.Type == cdpruntime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.add(fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
		}
	case *cdpruntime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.add(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError {
			b.add(fmt.Sprintf("browser log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
		}
	}
}

// TestPrivilegedE2EConsole opens the web console in a real headless
// Chromium while traffic flows: the page loads with no console error,
// shows every configured server, and when a server's HTTP service stops,
// its row shows it failed (its advisor's verdict: down) within the
// advisor's detection time plus 2 s. A cluster address no host holds
// shows as a warning; high availability and BGP, once configured, show as
// panels of their own with what dlbd reports of them. Screenshots are left
// as artefacts.
func TestPrivilegedE2EConsole(t *testing.T) {
	alone(t)
	chromium := needTool(t, "chromium", "chromium")
	l := newLabPrefix(t, "dlbm", "-n", "3", "-c", "1")
	l.startDlbd("--metrics-address", metricsAddr)
	l.configure("generic", 10, 10, 10)
	const interval, fall, timeout = 0.5, 2, 1.0
	l.mustCtl("advisor", "start", "http", l.vip()+"@80", "--interval", fmt.Sprint(interval), "--fall", fmt.Sprint(fall),
		"--rise", "2", "--connecttimeout", fmt.Sprint(timeout), "--receivetimeout", fmt.Sprint(timeout))
	l.mustCtl("manager", "start")
	// A cluster whose address no host holds: the executor report warns.
	const unheld = "198.18.0.150"
	l.mustCtl("cluster", "add", unheld)
	site := "http://" + l.forwarder(metricsAddr) + "/"

	loadDone := make(chan loadResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, _ := l.load(ctx, "-url", "http://"+l.vip()+"/", "-duration", "14s", "-c", "2", "-timeout", "2s")
		loadDone <- r
	}()
	defer func() { <-loadDone }()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 1100),
		chromedp.UserDataDir(filepath.Join(l.run, "chromium")),
		// Chromium puts its singleton socket in a directory of its own
		// under TMPDIR and leaves it there.
		chromedp.Env("TMPDIR="+t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx)
	defer cancelCtx()
	var errs browserErrors
	// The first call starts the browser: on a context without a timeout,
	// which would stop the browser with it.
	if err := chromedp.Listen(ctx, errs.listen); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	rows := make([]string, 3)
	for i := range rows {
		rows[i] = fmt.Sprintf(`tr[data-key="%s@80@%s"]`, l.vip(), l.backend(i+1))
	}
	start := time.Now()
	if err := chromedp.Do(tctx, chromedp.Navigate(site), chromedp.WaitVisible(chromedp.CSS(rows[0])),
		chromedp.WaitVisible(chromedp.CSS(rows[1])), chromedp.WaitVisible(chromedp.CSS(rows[2]))); err != nil {
		t.Fatalf("loading the console: %v (browser errors: %v)", err, errs.list())
	}
	t.Logf("console at %s showed all three servers after %v", site, time.Since(start).Round(time.Millisecond))
	shown, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("#clusters")))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if !strings.Contains(shown, l.backend(i)) {
			t.Errorf("the page does not show server %s:\n%s", l.backend(i), shown)
		}
	}
	// state reads a server's row: its state, and its advisor cell.
	state := func(i int) (st, advisor string) {
		t.Helper()
		js := fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r ? [r.dataset.state || "", r.children[4].textContent] : ["", ""]; })()`, rows[i-1])
		v, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](js))
		if err != nil || len(v) != 2 {
			t.Fatalf("reading b%d's row: %v %v", i, v, err)
		}
		return v[0], v[1]
	}
	for i := 1; i <= 3; i++ {
		if st, _ := state(i); st != "up" {
			t.Errorf("b%d shows %q before anything stopped", i, st)
		}
	}
	// Let the charts fill a little, then keep a picture of the page.
	time.Sleep(5 * time.Second)
	dir := artefactDir(t)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
	shot("console.png")

	stopped := time.Now()
	if out, err := l.script("backend-stop", "b2").CombinedOutput(); err != nil {
		t.Fatalf("stopping b2's server: %v\n%s", err, out)
	}
	limit := time.Duration((interval*fall+timeout)*float64(time.Second)) + 2*time.Second
	var shownAt time.Duration
	for {
		st, advisor := state(2)
		if st == "failed" && advisor == "down" {
			shownAt = time.Since(stopped)
			break
		}
		if time.Since(stopped) > limit+5*time.Second {
			t.Fatalf("b2's row still shows %q (advisor %q) %v after its server stopped", st, advisor, time.Since(stopped))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("b2's row showed failed (advisor: down) %v after its server was stopped (limit: detection %v + 2 s = %v)",
		shownAt.Round(time.Millisecond), limit-2*time.Second, limit)
	if shownAt > limit {
		t.Errorf("b2 shown down after %v, more than the advisor's detection time + 2 s (%v)", shownAt, limit)
	}
	for _, i := range []int{1, 3} {
		if st, _ := state(i); st != "up" {
			t.Errorf("b%d shows %q while only b2 stopped", i, st)
		}
	}
	// b2's advisor cell says which advisor found it down, for how long and
	// why; its state cell, for how long it has failed.
	tip, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const r = document.querySelector(%q); return [r.children[4].title, r.children[3].textContent, r.children[0].title]; })()`, rows[1])))
	if err != nil || len(tip) != 3 {
		t.Fatalf("reading b2's row: %v %v", tip, err)
	}
	t.Logf("b2's advisor cell: %q; state cell %q; address %q", tip[0], tip[1], tip[2])
	if adv := "http@" + l.vip() + "@80: down for "; !strings.HasPrefix(tip[0], adv) || !strings.Contains(tip[0], "refused") {
		t.Errorf("b2's advisor cell's title is %q, want %q… with the probe's error", tip[0], adv)
	}
	if !regexp.MustCompile(`^failed [0-9]+s$`).MatchString(tip[1]) || !strings.HasPrefix(tip[2], "next hop MAC 02:") {
		t.Errorf("b2's state cell %q (want failed and for how long), address title %q", tip[1], tip[2])
	}
	// The event list says so too.
	waitFor(t, 5*time.Second, "the serverDown event on the page", func() bool {
		ev, _ := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("#events")))
		return strings.Contains(ev, "server "+l.backend(2)+" port 80 down")
	})
	time.Sleep(3 * time.Second) // b2's charts fall to 0 for the picture
	shot("console-b2-down.png")
	if w, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("#warning-list"))); err != nil || !strings.Contains(w, "cluster "+unheld+" is on no interface of this host") {
		t.Errorf("the warnings the page shows: %v %q, want the unheld cluster %s's", err, w, unheld)
	}

	// High availability with a peer that never answers, and a BGP
	// neighbour that speaks no BGP (the client): their panels show what
	// dlbd says of each.
	secret := filepath.Join(l.run, "ha.secret")
	if err := os.WriteFile(secret, []byte("a secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := l.env["LAB_C1_ADDR"]
	l.mustCtl("highavailability", "backup", "add", "primary", "auto", haPort)
	l.mustCtl("highavailability", "heartbeat", "add", l.env["LAB_NFA"], "198.18.0.250", "--secret-file", secret)
	l.mustCtl("highavailability", "reach", "add", client)
	l.mustCtl("bgp", "set", "--asn", "65001", "--routerid", l.env["LAB_NFA"])
	l.mustCtl("bgp", "neighbor", "add", client, "--remote-as", "65000")
	l.mustCtl("cluster", "set", l.vip(), "--announce", "yes")
	panels := `(() => {
		const q = (s) => document.querySelector(s);
		const g = q('#ha-groups tr[data-group="local"]'), n = q('#bgp-neighbors tr[data-neighbor="` + client + `"]'),
			c = q('#bgp-clusters tr[data-cluster="` + l.vip() + `"]'), card = q('#ha-card');
		return [!q('#ha').hidden && !!g && !!card, g ? g.dataset.state : "", q('#ha-peer').textContent, !q('#bgp').hidden && !!n && !!c,
			n ? n.dataset.state : "", c ? c.dataset.announced : ""];
	})()`
	var panel []string
	waitFor(t, 10*time.Second, "the high-availability and BGP panels", func() bool {
		v, err := chromedp.Run(tctx, chromedp.Evaluate[[]any](panels))
		if err != nil || len(v) != 6 {
			t.Fatalf("reading the panels: %v %v", v, err)
		}
		panel = make([]string, len(v))
		for i := range v {
			panel[i] = fmt.Sprint(v[i])
		}
		return panel[0] == "true" && panel[3] == "true"
	})
	t.Logf("panels: local group %s; %q; BGP neighbour %s, %s announced %s", panel[1], panel[2], panel[4], l.vip(), panel[5])
	var st haStatusView
	l.snapshot(&st)
	if st.HA == nil || len(st.HA.Groups) != 1 || panel[1] != st.HA.Groups[0].State {
		t.Errorf("the page shows the local group %q, dlbd's snapshot %+v", panel[1], st.HA)
	}
	if !strings.Contains(panel[2], "not heard") {
		t.Errorf("the page says of a peer that never answered: %q", panel[2])
	}
	if panel[4] == "established" || panel[4] == "" {
		t.Errorf("the page shows a session with a host that speaks no BGP as %q", panel[4])
	}
	shot("console-ha-bgp.png")

	// Thousands of clusters made as many rows, rebuilt every second: the
	// BGP panel shows 20 and counts the rest, the group's cell names 8
	// (of 32: 30 more, the VIP and 198.18.0.150).
	var many strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&many, "cluster add 198.19.0.%d --announce yes\n", i)
	}
	manyFile := filepath.Join(l.run, "many.cfg")
	if err := os.WriteFile(manyFile, []byte(many.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	l.mustCtl("file", "load", manyFile)
	lists := `(() => {
		const rows = document.querySelectorAll('#bgp-clusters tbody tr'), last = rows[rows.length - 1];
		const g = document.querySelector('#ha-groups tr[data-group="local"] td.wrap');
		return [rows.length, last && last.dataset.more ? last.dataset.more : "", g ? g.textContent : ""];
	})()`
	var list []string
	waitFor(t, 10*time.Second, "the BGP and group lists cut short", func() bool {
		v, err := chromedp.Run(tctx, chromedp.Evaluate[[]any](lists))
		if err != nil || len(v) != 3 {
			t.Fatalf("reading the lists: %v %v", v, err)
		}
		list = []string{fmt.Sprint(v[0]), fmt.Sprint(v[1]), fmt.Sprint(v[2])}
		return list[0] == "21" && list[1] == "11" && strings.HasSuffix(list[2], " and 24 more (32 in all)")
	})
	t.Logf("32 clusters, 31 announced: %s rows in the BGP panel, the last counting %s more; the group's cell %q", list[0], list[1], list[2])
	if e := errs.list(); len(e) > 0 {
		t.Errorf("the page reported %d errors:\n%s", len(e), strings.Join(e, "\n"))
	}
}

// scrapeOnce fetches a URL in the dispatcher namespace and returns how
// long the whole response took and its body (decompressed when gzipped).
func scrapeOnce(t *testing.T, c *http.Client, u string, gzipped bool) (time.Duration, []byte, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if gzipped {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s", u, err, resp.Status)
	}
	body := raw
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return took, body, len(raw)
}

// TestPrivilegedMetricsScaleReport (make bench; DLB_BENCH=1) prints what a
// scrape of /metrics and a console snapshot cost at DLB_SCALE_PORTS x
// DLB_SCALE_SERVERS (default 1000 x 100 = 100,000 servers): the time of a
// whole scrape as a client sees it (median of 5, plain and gzipped), the
// response's size, the number of series; promtool checks the exposition.
// The goal is a scrape under 1 s at 100,000 servers.
func TestPrivilegedMetricsScaleReport(t *testing.T) {
	alone(t)
	if os.Getenv("DLB_BENCH") == "" {
		t.Skip("a benchmark: set DLB_BENCH=1 (make bench)")
	}
	ports, servers := envInt("DLB_SCALE_PORTS", 1000), envInt("DLB_SCALE_SERVERS", 100)
	l := newLabPrefix(t, "dlbm", "-n", "1", "-c", "1", "-r", "1")
	l.startDlbd("--max-servers", "131071", "--metrics-address", metricsAddr)
	l.mustCtl("executor", "start", "--interface", l.env["LAB_IF"])
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA"])
	script := filepath.Join(l.run, "scale.cfg")
	scaleScript(l, script, ports, servers)
	load := l.timeCtl("file", "load", script)
	c := l.nsClient()
	u := "http://" + metricsAddr + "/metrics"

	_, body, _ := scrapeOnce(t, c, u, false) // warm up
	series := 0
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) > 0 && line[0] != '#' {
			series++
		}
	}
	want := fmt.Sprintf(`dlb_server_state{cluster="%s",port="%d",server="%s",state="up"} 1`, l.vip(), 1001+ports-1, scaleServer(ports*servers-1))
	if !bytes.Contains(body, []byte(want)) {
		t.Errorf("the exposition lacks the last server's state: %s", want)
	}
	var plain, zipped []time.Duration
	var zsize int
	cpu0 := cpuTime(t, l.dlbd.Process.Pid)
	for range 5 {
		d, _, _ := scrapeOnce(t, c, u, false)
		plain = append(plain, d)
		d, _, n := scrapeOnce(t, c, u, true)
		zipped = append(zipped, d)
		zsize = n
	}
	cpuPer := (cpuTime(t, l.dlbd.Process.Pid) - cpu0) / 10
	med := func(d []time.Duration) time.Duration {
		return medianOf(len(d), func(i int) time.Duration { return d[i] })
	}
	snap := medianOf(5, func(int) time.Duration {
		d, _, _ := scrapeOnce(t, c, "http://"+metricsAddr+"/api/snapshot", false)
		return d
	})
	var check time.Duration
	if promtool, err := exec.LookPath("promtool"); err == nil {
		start := time.Now()
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%.2000s", err, out)
		}
		check = time.Since(start)
	}
	t.Logf("%d ports x %d servers (%d servers), loaded in %.1f s:", ports, servers, ports*servers, load.Seconds())
	t.Logf("  /metrics series                       %d", series)
	t.Logf("  /metrics size, text                   %.1f MB", float64(len(body))/1e6)
	t.Logf("  /metrics size, gzipped                %.1f MB", float64(zsize)/1e6)
	t.Logf("  scrape, text (median of 5)            %.0f ms", ms(med(plain)))
	t.Logf("  scrape, gzipped (median of 5)         %.0f ms", ms(med(zipped)))
	t.Logf("  dlbd CPU per scrape (both kinds)      %.0f ms", ms(cpuPer))
	t.Logf("  console snapshot (ports only)         %.0f ms", ms(snap))
	if check > 0 {
		t.Logf("  promtool check metrics                passed (%.1f s)", check.Seconds())
	}
	for name, d := range map[string]time.Duration{"text": med(plain), "gzipped": med(zipped)} {
		if d > time.Second {
			t.Logf("  NOT MET: a %s scrape takes %v, the goal is under 1 s", name, d)
		}
	}
}

// haStatusView is the part of the console's snapshot the console test
// compares with the page.
type haStatusView struct {
	HA *struct {
		Groups []struct {
			State string `json:"state"`
		} `json:"groups"`
	} `json:"ha"`
}

// snapshot reads the console's /api/snapshot into v.
func (l *lab) snapshot(v any) {
	l.t.Helper()
	_, body, _ := scrapeOnce(l.t, l.nsClient(), "http://"+metricsAddr+"/api/snapshot", false)
	if err := json.Unmarshal(body, v); err != nil {
		l.t.Fatalf("the console's snapshot: %v\n%s", err, body)
	}
}
