// Command labclient is a lab tool: an HTTP (and UDP) load generator for the
// dlb test lab (scripts/lab.sh). By default it opens a new TCP connection for
// every request (keep-alive is off), so each request is a new connection the
// load balancer must schedule, and it counts which backend answered each one.
//
// The backend is the X-Backend response header that scripts/labhttpd sets,
// or, if that header is missing, the first line of the body. The X-Peer
// header (the client address the backend saw) of successful replies is
// counted too. A reply with an X-Content-SHA256 header (labhttpd's /bytes)
// has its body hashed; a mismatch fails the request with the error
// "body hash mismatch".
//
// Usage:
//
//	labclient [-url URL] [-n N | -duration D] [-c C] [-timeout T] [-json] [-max-failures-shown K]
//	labclient -keepalive -duration D [-url URL] [-c C] [-interval I] [-timeout T] [-ready FILE] [-json]
//	labclient -udp HOST:PORT [-flows F] [-packets P] [-c C] [-timeout T] [-json]
//
// With -keepalive it holds -c persistent connections instead, each one TCP
// connection for its whole life (never re-dialled), sending GETs one after
// another with -interval between them until -duration has passed (-n is
// ignored). A connection stops at its first failure, which it records.
// Only http:// URLs are supported in this mode. -ready FILE creates FILE
// once every connection has had its first reply: a test waits for it
// before it puts a fault on established connections.
//
// With -udp it sends datagrams to labhttpd's UDP responder instead of HTTP
// requests: -flows flows (-c of them at a time), each a connected UDP socket
// with its own source port sending -packets datagrams one after another,
// each waiting up to -timeout for the reply "<name> <peer ip:port>". -url,
// -n and -duration are ignored.
//
// Exit status: 0 if every request succeeded (and at least one was made),
// 1 if any failed, 2 on a usage error. A request fails on any transport error,
// timeout, status outside 2xx or body hash mismatch (UDP: timeout, error or
// malformed reply).
//
// With -json it prints one object:
//
//	{"requests":N,"ok":N,"failed":N,"per_backend":{"b1":N,...},
//	 "errors":{"<error text>":count,...},"elapsed_ms":N,
//	 "first_failure_ms":N,"last_failure_ms":N,
//	 "peers":{"<ip>":N,...},"hash_mismatches":N,"bytes":N}
//
// bytes counts the body bytes of every reply (UDP: reply datagram bytes),
// failed ones included. -keepalive adds
//
//	"connections":N,"broken":N,"backend_changes":N,"broken_by_backend":{"b1":N,...}
//
// (connections that saw a failure, connections whose X-Backend changed
// between two replies, and the broken ones by the backend of their last
// good reply), and -udp adds
//
//	"flows":N,"flows_split":N
//
// (flows whose replies came from more than one backend). In -udp mode
// requests counts datagrams sent, ok replies received, per_backend the
// reply names and peers the IP part of the reply's peer.
//
// The failure times are the start times, in milliseconds since the run began,
// of the earliest and latest failed request (-1 if none failed): a failover
// test reads them as "traffic to the dead backend began failing at ... and
// stopped failing by ...". Error texts are normalised (no addresses or ports)
// so that identical failures are counted together.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// maxRequests caps any run, including -duration runs, so a loop is
	// always bounded in count as well as in time.
	maxRequests = 10_000_000
	// maxConcurrency caps -c.
	maxConcurrency = 1000
	// maxDuration caps -duration.
	maxDuration = time.Hour
	// maxFirstLine bounds how much of the body is read to find a backend
	// name when the X-Backend header is missing.
	maxFirstLine = 256
	// maxFlows caps -flows.
	maxFlows = 1_000_000
	// maxPackets caps -packets.
	maxPackets = 100_000
)

// config is the parsed command line.
type config struct {
	url         string
	n           int
	c           int
	duration    time.Duration
	timeout     time.Duration
	json        bool
	maxFailures int
	// -keepalive mode
	keepalive bool
	interval  time.Duration
	ready     string // file created once every connection had a reply
	// -udp mode
	udp     string
	flows   int
	packets int
	udpAddr *net.UDPAddr // resolved from udp by run
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	if cfg.udp != "" {
		if cfg.udpAddr, err = net.ResolveUDPAddr("udp", cfg.udp); err != nil {
			fmt.Fprintln(stderr, "labclient: -udp:", err)
			return 1
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var rep Report
	switch {
	case cfg.keepalive:
		rep = keepaliveLoad(ctx, cfg)
	case cfg.udp != "":
		rep = udpLoad(ctx, cfg)
	default:
		rep = loadgen(ctx, cfg)
	}

	if cfg.json {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "labclient:", err)
			return 1
		}
	} else {
		fmt.Fprint(stdout, formatTable(rep, cfg.maxFailures))
	}
	return exitCode(rep)
}

const usageLine = "usage: labclient [-url URL] [-n N | -duration D] [-c C] [-timeout T] [-json] [-max-failures-shown K]\n" +
	"       labclient -keepalive -duration D [-url URL] [-c C] [-interval I] [-timeout T] [-ready FILE] [-json]\n" +
	"       labclient -udp HOST:PORT [-flows F] [-packets P] [-c C] [-timeout T] [-json]"

// parseFlags parses and validates args; on error it has already printed a
// message and the usage text to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("labclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageLine+"\n\n"+
			"Lab tool: sends HTTP GETs, each on a new TCP connection, and counts which\n"+
			"backend (X-Backend header, else first body line) answered and which client\n"+
			"address it saw (X-Peer). Bodies with X-Content-SHA256 are verified.\n"+
			"-keepalive: -c persistent connections, one GET every -interval each, for -duration;\n"+
			"a connection stops at its first failure and is never re-dialled.\n"+
			"-udp: -flows UDP flows (own source port each) of -packets datagrams to labhttpd -udp.\n"+
			"Exit status: 0 all succeeded, 1 some failed (or none ran), 2 usage error.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.url, "url", "http://198.18.0.100/", "URL to request")
	fs.IntVar(&cfg.n, "n", 1000, fmt.Sprintf("total requests (1..%d); ignored when -duration > 0", maxRequests))
	fs.IntVar(&cfg.c, "c", 10, fmt.Sprintf("concurrent requests (1..%d)", maxConcurrency))
	fs.DurationVar(&cfg.duration, "duration", 0, fmt.Sprintf("if > 0, send requests until this much time has passed (at most %v), instead of -n", maxDuration))
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Second, "per-request timeout (connect through end of body)")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object instead of a table")
	fs.IntVar(&cfg.maxFailures, "max-failures-shown", 5, "distinct errors listed in the table output")
	fs.BoolVar(&cfg.keepalive, "keepalive", false, "keep-alive mode: -c persistent connections for -duration (required)")
	fs.DurationVar(&cfg.interval, "interval", 50*time.Millisecond, "with -keepalive, pause between two requests on a connection")
	fs.StringVar(&cfg.ready, "ready", "", "with -keepalive, create this file once every connection has had its first reply")
	fs.StringVar(&cfg.udp, "udp", "", "UDP mode: send datagrams to HOST:PORT (IPv6 in brackets) instead of HTTP requests")
	fs.IntVar(&cfg.flows, "flows", 100, fmt.Sprintf("with -udp, flows (UDP sockets), 1..%d", maxFlows))
	fs.IntVar(&cfg.packets, "packets", 1, fmt.Sprintf("with -udp, datagrams per flow, 1..%d", maxPackets))
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if err := cfg.validate(fs.Args()); err != nil {
		fmt.Fprintf(stderr, "labclient: %v\n%s\n(-h for help)\n", err, usageLine)
		return cfg, err
	}
	return cfg, nil
}

func (c config) validate(rest []string) error {
	switch {
	case len(rest) != 0:
		return fmt.Errorf("unexpected arguments: %q", rest)
	case c.n < 1 || c.n > maxRequests:
		return fmt.Errorf("-n %d: must be in 1..%d", c.n, maxRequests)
	case c.c < 1 || c.c > maxConcurrency:
		return fmt.Errorf("-c %d: must be in 1..%d", c.c, maxConcurrency)
	case c.duration < 0 || c.duration > maxDuration:
		return fmt.Errorf("-duration %v: must be in 0..%v", c.duration, maxDuration)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %v: must be > 0", c.timeout)
	case c.maxFailures < 0:
		return fmt.Errorf("-max-failures-shown %d: must be >= 0", c.maxFailures)
	case c.keepalive && c.udp != "":
		return errors.New("-keepalive and -udp exclude each other")
	case c.keepalive && c.duration == 0:
		return errors.New("-keepalive needs -duration")
	case c.ready != "" && !c.keepalive:
		return errors.New("-ready needs -keepalive")
	case c.interval < 0 || c.interval > maxDuration:
		return fmt.Errorf("-interval %v: must be in 0..%v", c.interval, maxDuration)
	case c.flows < 1 || c.flows > maxFlows:
		return fmt.Errorf("-flows %d: must be in 1..%d", c.flows, maxFlows)
	case c.packets < 1 || c.packets > maxPackets:
		return fmt.Errorf("-packets %d: must be in 1..%d", c.packets, maxPackets)
	case int64(c.flows)*int64(c.packets) > maxRequests:
		return fmt.Errorf("-flows %d x -packets %d: more than %d datagrams", c.flows, c.packets, maxRequests)
	}
	if c.udp != "" {
		host, port, err := net.SplitHostPort(c.udp)
		if err != nil || host == "" {
			return fmt.Errorf("-udp %q: want HOST:PORT ([IPv6]:PORT)", c.udp)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return fmt.Errorf("-udp %q: port must be in 1..65535", c.udp)
		}
		return nil
	}
	u, err := url.Parse(c.url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("-url %q: want http://HOST[:PORT]/PATH", c.url)
	}
	if c.keepalive && u.Scheme != "http" {
		return fmt.Errorf("-url %q: -keepalive supports http only", c.url)
	}
	return nil
}

// loadgen runs the requests with cfg.c workers and returns the report. A
// cancelled ctx stops new requests; those in flight finish (bounded by the
// timeout) and are counted.
func loadgen(ctx context.Context, cfg config) Report {
	client := &http.Client{
		Timeout: cfg.timeout,
		Transport: &http.Transport{
			Proxy:              nil, // never use a proxy from the environment
			DialContext:        (&net.Dialer{Timeout: cfg.timeout}).DialContext,
			DisableKeepAlives:  true, // one TCP connection per request
			DisableCompression: true,
			ForceAttemptHTTP2:  false,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	limit := int64(cfg.n)
	var deadline time.Time
	start := time.Now()
	if cfg.duration > 0 {
		limit = maxRequests
		deadline = start.Add(cfg.duration)
	}

	var issued atomic.Int64
	tallies := make([]*tally, cfg.c)
	var wg sync.WaitGroup
	for w := range tallies {
		t := newTally()
		tallies[w] = t
		wg.Go(func() {
			for ctx.Err() == nil && issued.Add(1) <= limit {
				at := time.Since(start)
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				rp, err := fetch(client, cfg.url)
				t.add(result{at: at, reply: rp, err: err})
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	total := newTally()
	for _, t := range tallies {
		total.merge(t)
	}
	return total.report(elapsed)
}

// fetch makes one request on a new connection and returns what the reply
// said.
func fetch(client *http.Client, u string) (reply, error) {
	resp, err := client.Get(u)
	if err != nil {
		return reply{}, err
	}
	return readReply(resp)
}

// reply is what one successful (or failed, for bytes) request learned.
type reply struct {
	backend string // X-Backend, else the first body line
	peer    string // X-Peer: the client address the server saw
	bytes   int64  // body bytes read
}

// errHashMismatch fails a request whose body does not match its
// X-Content-SHA256 header.
var errHashMismatch = errors.New("body hash mismatch")

// readReply reads and closes resp's body and returns the reply; it fails
// on a body read error, a status outside 2xx, or a body that does not
// match its X-Content-SHA256 header.
func readReply(resp *http.Response) (reply, error) {
	defer resp.Body.Close()
	var rp reply
	br := bufio.NewReaderSize(resp.Body, maxFirstLine)
	var first string
	if resp.Header.Get("X-Backend") == "" {
		line, _ := br.Peek(maxFirstLine)
		first = string(line)
	}
	wantSum := strings.TrimSpace(resp.Header.Get("X-Content-SHA256"))
	sink := io.Discard
	h := sha256.New()
	if wantSum != "" {
		sink = h
	}
	// Read the whole body so truncated or reset transfers count as failures.
	n, err := io.Copy(sink, br)
	rp.bytes = n
	if err != nil {
		return rp, &bodyError{err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return rp, fmt.Errorf("HTTP status %s", resp.Status)
	}
	if wantSum != "" && !strings.EqualFold(hex.EncodeToString(h.Sum(nil)), wantSum) {
		return rp, errHashMismatch
	}
	rp.backend = backendName(resp.Header, first)
	rp.peer = strings.TrimSpace(resp.Header.Get("X-Peer"))
	return rp, nil
}

// unknownBackend names answers that carried no backend name at all.
const unknownBackend = "(unknown)"

// backendName returns the X-Backend header, else the first line of body
// (trimmed), else unknownBackend.
func backendName(h http.Header, body string) string {
	if b := strings.TrimSpace(h.Get("X-Backend")); b != "" {
		return b
	}
	line, _, _ := strings.Cut(body, "\n")
	if line = strings.TrimSpace(line); line != "" {
		return line
	}
	return unknownBackend
}

// bodyError marks a failure while reading the response body, after the
// status and headers arrived.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "read body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// errorText turns a request error into a stable text without addresses,
// ports or URLs, so equal failures are counted together: for example
// "dial tcp: connect: connection refused", "timeout" or
// "read body: unexpected EOF".
func errorText(err error) string {
	prefix := ""
	var be *bodyError
	if errors.As(err, &be) {
		prefix, err = "read body: ", be.err
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	hasOp := errors.As(err, &op)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout() && hasOp:
		return prefix + op.Op + " " + op.Net + ": timeout"
	case errors.As(err, &ne) && ne.Timeout():
		return prefix + "timeout"
	case hasOp && op.Err != nil:
		return prefix + op.Op + " " + op.Net + ": " + op.Err.Error()
	}
	return prefix + err.Error()
}

// result is the outcome of one request.
type result struct {
	at time.Duration // start time since the run began
	reply
	err error
}

// tally accumulates results; each worker owns one, and they are merged at
// the end, so no locking is needed.
type tally struct {
	requests, ok, failed int
	perBackend           map[string]int
	errors               map[string]int
	peers                map[string]int
	hashMismatches       int
	bytes                int64
	// firstFail and lastFail are the earliest and latest start times of a
	// failed request; they are meaningful only when failed > 0.
	firstFail, lastFail time.Duration
}

func newTally() *tally {
	return &tally{perBackend: map[string]int{}, errors: map[string]int{}, peers: map[string]int{}}
}

func (t *tally) add(r result) {
	t.requests++
	t.bytes += r.bytes
	if r.err == nil {
		t.ok++
		t.perBackend[r.backend]++
		if r.peer != "" {
			t.peers[r.peer]++
		}
		return
	}
	t.noteFailures(1, r.at, r.at)
	t.errors[errorText(r.err)]++
	if errors.Is(r.err, errHashMismatch) {
		t.hashMismatches++
	}
}

// noteFailures counts n failures that started between first and last.
func (t *tally) noteFailures(n int, first, last time.Duration) {
	if n == 0 {
		return
	}
	if t.failed == 0 || first < t.firstFail {
		t.firstFail = first
	}
	if t.failed == 0 || last > t.lastFail {
		t.lastFail = last
	}
	t.failed += n
}

// merge adds o's counts to t.
func (t *tally) merge(o *tally) {
	t.requests += o.requests
	t.ok += o.ok
	t.noteFailures(o.failed, o.firstFail, o.lastFail)
	for k, v := range o.perBackend {
		t.perBackend[k] += v
	}
	for k, v := range o.errors {
		t.errors[k] += v
	}
	for k, v := range o.peers {
		t.peers[k] += v
	}
	t.hashMismatches += o.hashMismatches
	t.bytes += o.bytes
}

// Report is labclient's result, printed as JSON with -json.
type Report struct {
	Requests       int            `json:"requests"`
	OK             int            `json:"ok"`
	Failed         int            `json:"failed"`
	PerBackend     map[string]int `json:"per_backend"`
	Errors         map[string]int `json:"errors"`
	ElapsedMS      int64          `json:"elapsed_ms"`
	FirstFailureMS int64          `json:"first_failure_ms"`
	LastFailureMS  int64          `json:"last_failure_ms"`
	// Peers counts the X-Peer values (UDP: the reply's peer IP) of
	// successful replies.
	Peers          map[string]int `json:"peers"`
	HashMismatches int            `json:"hash_mismatches"`
	Bytes          int64          `json:"bytes"`
	// -keepalive only.
	Connections    *int `json:"connections,omitempty"`
	Broken         *int `json:"broken,omitempty"`
	BackendChanges *int `json:"backend_changes,omitempty"`
	// BrokenByBackend counts broken connections by the backend of their
	// last successful reply (those that broke before any reply are left
	// out).
	BrokenByBackend map[string]int `json:"broken_by_backend,omitempty"`
	// -udp only.
	Flows      *int `json:"flows,omitempty"`
	FlowsSplit *int `json:"flows_split,omitempty"`
}

func (t *tally) report(elapsed time.Duration) Report {
	r := Report{
		Requests:       t.requests,
		OK:             t.ok,
		Failed:         t.failed,
		PerBackend:     t.perBackend,
		Errors:         t.errors,
		ElapsedMS:      elapsed.Milliseconds(),
		FirstFailureMS: -1,
		LastFailureMS:  -1,
		Peers:          t.peers,
		HashMismatches: t.hashMismatches,
		Bytes:          t.bytes,
	}
	if r.Failed > 0 {
		r.FirstFailureMS = t.firstFail.Milliseconds()
		r.LastFailureMS = t.lastFail.Milliseconds()
	}
	return r
}

// exitCode is 0 when at least one request ran and none failed, else 1.
func exitCode(r Report) int {
	if r.Requests == 0 || r.Failed > 0 {
		return 1
	}
	return 0
}

// formatTable renders r for people: one line per backend with its count and
// share of the successful requests, totals, and up to maxErrors distinct
// errors, most frequent first.
func formatTable(r Report, maxErrors int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %10s %8s\n", "BACKEND", "COUNT", "SHARE")
	for _, name := range sortedNatural(keys(r.PerBackend)) {
		n := r.PerBackend[name]
		fmt.Fprintf(&b, "%-16s %10d %7.1f%%\n", name, n, percent(n, r.OK))
	}
	fmt.Fprintf(&b, "requests %d  ok %d  failed %d (%.1f%%)  elapsed %d ms\n",
		r.Requests, r.OK, r.Failed, percent(r.Failed, r.Requests), r.ElapsedMS)
	if len(r.Peers) > 0 {
		fmt.Fprintf(&b, "%-40s %10s\n", "PEER (address the backend saw)", "COUNT")
		for _, p := range sortedNatural(keys(r.Peers)) {
			fmt.Fprintf(&b, "%-40s %10d\n", p, r.Peers[p])
		}
	}
	if r.Bytes > 0 || r.HashMismatches > 0 {
		fmt.Fprintf(&b, "bytes %d  hash mismatches %d\n", r.Bytes, r.HashMismatches)
	}
	if r.Connections != nil {
		fmt.Fprintf(&b, "connections %d  broken %d  backend changes %d\n",
			*r.Connections, deref(r.Broken), deref(r.BackendChanges))
	}
	if r.Flows != nil {
		fmt.Fprintf(&b, "flows %d  split over backends %d\n", *r.Flows, deref(r.FlowsSplit))
	}
	if r.Failed == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "failures started at %d ms, last at %d ms (request start times)\n",
		r.FirstFailureMS, r.LastFailureMS)
	errs := keys(r.Errors)
	sortByCount(errs, r.Errors)
	shown := min(maxErrors, len(errs))
	fmt.Fprintf(&b, "errors (%d distinct):\n", len(errs))
	for _, e := range errs[:shown] {
		fmt.Fprintf(&b, "%10d  %s\n", r.Errors[e], e)
	}
	if rest := len(errs) - shown; rest > 0 {
		fmt.Fprintf(&b, "%10s  ... and %d more distinct errors\n", "", rest)
	}
	return b.String()
}

// deref returns *p, or 0 for nil.
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func percent(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// sortedNatural sorts names so that numeric suffixes order by value
// (b2 before b10) and returns them.
func sortedNatural(names []string) []string {
	slices.SortFunc(names, func(a, b string) int {
		if c := naturalCompare(a, b); c != 0 {
			return c
		}
		return strings.Compare(a, b) // "b02" and "b2": still a total order
	})
	return names
}

// naturalCompare compares a and b, treating runs of ASCII digits as numbers.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// digitRun returns the length of the run of ASCII digits that starts s.
func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// sortByCount orders names by descending count, then by name.
func sortByCount(names []string, count map[string]int) {
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(count[b], count[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}
