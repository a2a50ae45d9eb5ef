package metricserver

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dlbproject/dlb/internal/sockopt"
)

const (
	// DefaultSkew is the largest accepted difference between a report's
	// timestamp and the client's clock.
	DefaultSkew = 5 * time.Second
	// DefaultFetchTimeout bounds one Fetch when the options give none. It
	// leaves room for the agent's scripts (DefaultScriptTimeout).
	DefaultFetchTimeout = 5 * time.Second
	// nonceBytes is the number of random bytes in a nonce (22 characters
	// once encoded).
	nonceBytes = 16
)

// ClientOptions configures a Client.
type ClientOptions struct {
	// TLS, when set, makes the client speak HTTPS with this
	// configuration, normally with a client certificate for an agent
	// started with --client-ca (mutual TLS). Reports are still verified
	// with the shared secret: TLS is an extra layer, not a replacement.
	TLS *tls.Config
	// Transport replaces the HTTP transport (for tests); TLS is then
	// ignored. Nil means a transport of the client's own, which never uses
	// a proxy.
	Transport http.RoundTripper
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// FetchOptions are the per-request settings of (*Client).Fetch.
type FetchOptions struct {
	// Secret is the shared secret of the agent (see LoadSecret). Required,
	// at least MinSecretLen bytes. It is per call so that each backend may
	// have its own.
	Secret []byte
	// Skew is the largest accepted difference between the report's
	// timestamp and the client's clock; zero means DefaultSkew.
	Skew time.Duration
	// Timeout bounds the request; zero means DefaultFetchTimeout. A
	// shorter deadline on the context wins.
	Timeout time.Duration
	// Source is the address the poll leaves from, as IBM's manager polls
	// from the dispatcher's non-forwarding address: the kernel's own
	// choice may be a cluster address, which the backends hold
	// themselves. It is used when it is of the agent's family; the zero
	// value leaves the choice to the kernel. Ignored with
	// ClientOptions.Transport.
	Source netip.Addr
}

// Counters counts what a Client did with the reports it asked for: one
// count per Fetch, under Accepted or under the reason of the refusal.
type Counters struct {
	Accepted        uint64 `json:"accepted"`
	Unauthenticated uint64 `json:"unauthenticated"` // ErrUnauthenticated
	Replayed        uint64 `json:"replayed"`        // ErrReplayed
	Malformed       uint64 `json:"malformed"`       // ErrMalformed
	OutOfRange      uint64 `json:"out_of_range"`    // ErrOutOfRange
	Stale           uint64 `json:"stale"`           // ErrStale
	Unavailable     uint64 `json:"unavailable"`     // ErrUnavailable
}

// Refused returns the number of reports refused for any reason other than
// the agent being unavailable.
func (c Counters) Refused() uint64 {
	return c.Unauthenticated + c.Replayed + c.Malformed + c.OutOfRange + c.Stale
}

func (c *Counters) add(reason error) {
	switch reason {
	case nil:
		c.Accepted++
	case ErrUnauthenticated:
		c.Unauthenticated++
	case ErrReplayed:
		c.Replayed++
	case ErrMalformed:
		c.Malformed++
	case ErrOutOfRange:
		c.OutOfRange++
	case ErrStale:
		c.Stale++
	default:
		c.Unavailable++
	}
}

// agentState is what a Client remembers of one agent.
type agentState struct {
	lastSeq  uint64 // of the last accepted report; 0: none yet
	counters Counters
}

// Client fetches and verifies reports from Metric Server agents. It
// remembers, per agent address, the sequence number of the last accepted
// report, and counts accepted and refused reports. It is safe for
// concurrent use; two concurrent fetches from the same agent may however
// see the older reply refused as replayed.
type Client struct {
	hc     *http.Client
	scheme string
	now    func() time.Time
	// tlsCfg and custom rebuild the transport for a source address:
	// one HTTP client per source, so that a kept-alive connection from
	// one address never serves a poll asked to leave from another.
	tlsCfg *tls.Config
	custom bool

	srcMu sync.Mutex
	bySrc map[netip.Addr]*http.Client

	mu     sync.Mutex
	total  Counters
	agents map[netip.AddrPort]*agentState
}

// pollTransport is the HTTP transport of a poller that asks a few agents
// once an interval: no proxy, two idle connections per agent, tlsCfg
// (nil: plain HTTP), and connections from src (zero: the kernel's
// choice).
func pollTransport(tlsCfg *tls.Config, src netip.Addr) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConnsPerHost = 2
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone()
	}
	if src.IsValid() {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
			LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Control: sockopt.BindNoPort}
		t.DialContext = d.DialContext
	}
	return t
}

// sourceFor returns src, unmapped, if it is of dst's family, else the
// zero Addr.
func sourceFor(src, dst netip.Addr) netip.Addr {
	src = src.Unmap().WithZone("")
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Unmap().Is4() {
		return netip.Addr{}
	}
	return src
}

// httpClient returns the HTTP client of polls from src.
func (c *Client) httpClient(src netip.Addr) *http.Client {
	if !src.IsValid() || c.custom {
		return c.hc
	}
	c.srcMu.Lock()
	defer c.srcMu.Unlock()
	if hc, ok := c.bySrc[src]; ok {
		return hc
	}
	hc := &http.Client{Transport: pollTransport(c.tlsCfg, src), CheckRedirect: c.hc.CheckRedirect}
	c.bySrc[src] = hc
	return hc
}

// NewClient returns a client.
func NewClient(o ClientOptions) *Client {
	c := &Client{scheme: "http", now: o.Now, agents: map[netip.AddrPort]*agentState{},
		tlsCfg: o.TLS, custom: o.Transport != nil, bySrc: map[netip.Addr]*http.Client{}}
	if c.now == nil {
		c.now = time.Now
	}
	rt := o.Transport
	if rt == nil {
		rt = pollTransport(o.TLS, netip.Addr{})
	}
	if o.TLS != nil {
		c.scheme = "https"
	}
	c.hc = &http.Client{
		Transport: rt,
		// An agent never redirects; a redirect is an answer without a
		// report.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// Fetch asks the agent at addr for a report and returns it once verified:
// the signature is HMAC-SHA256 under opts.Secret, the nonce is the one just
// sent, the sequence number is above the last one accepted from addr, the
// timestamp is within opts.Skew of the client's clock, and every metric is
// a number in [0, 100]. A port of 0 means DefaultPort.
//
// A refused report yields an error wrapping ErrUnauthenticated,
// ErrReplayed, ErrMalformed, ErrStale or ErrOutOfRange, and no report at
// all one wrapping ErrUnavailable; each outcome is counted (see Counters).
// Invalid arguments (no address, a short secret) are returned as plain
// errors and not counted.
func (c *Client) Fetch(ctx context.Context, addr netip.AddrPort, opts FetchOptions) (Report, error) {
	if !addr.Addr().IsValid() {
		return Report{}, errors.New("fetching metric report: invalid agent address")
	}
	if len(opts.Secret) < MinSecretLen {
		return Report{}, fmt.Errorf("fetching metric report: secret is %d bytes, shorter than %d", len(opts.Secret), MinSecretLen)
	}
	addr = normalizeAddr(addr)
	rep, err := c.fetch(ctx, addr, opts)
	if err != nil {
		return Report{}, fmt.Errorf("fetching metric report from %s: %w", addr, err)
	}
	return rep, nil
}

// normalizeAddr unmaps IPv4-mapped IPv6 addresses and defaults the port, so
// that one agent is tracked under one key.
func normalizeAddr(a netip.AddrPort) netip.AddrPort {
	port := a.Port()
	if port == 0 {
		port = DefaultPort
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), port)
}

func (c *Client) fetch(ctx context.Context, addr netip.AddrPort, opts FetchOptions) (Report, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	skew := opts.Skew
	if skew <= 0 {
		skew = DefaultSkew
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var raw [nonceBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Report{}, fmt.Errorf("making nonce: %w", err)
	}
	nonce := base64.RawURLEncoding.EncodeToString(raw[:])
	u := url.URL{
		Scheme:   c.scheme,
		Host:     addr.String(),
		Path:     ReportPath,
		RawQuery: url.Values{NonceParam: {nonce}}.Encode(),
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Report{}, fmt.Errorf("making request: %w", err)
	}
	req.Header.Set("Accept", "application/json")

	resp, err := c.httpClient(sourceFor(opts.Source, addr.Addr())).Do(req)
	if err != nil {
		return Report{}, c.refuseErr(addr, fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return Report{}, c.refuse(addr, ErrUnavailable, "HTTP status %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if resp.ContentLength > MaxReportSize {
		return Report{}, c.refuse(addr, ErrMalformed, "body of %d bytes exceeds %d", resp.ContentLength, MaxReportSize)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxReportSize+1))
	if err != nil {
		return Report{}, c.refuse(addr, ErrUnavailable, "reading body: %v", err)
	}
	if len(body) > MaxReportSize {
		return Report{}, c.refuse(addr, ErrMalformed, "body exceeds %d bytes", MaxReportSize)
	}

	// Nothing in the body is looked at before the signature checks out.
	sig := resp.Header.Get(SignatureHeader)
	if sig == "" {
		return Report{}, c.refuse(addr, ErrUnauthenticated, "no %s header", SignatureHeader)
	}
	if !verifySignature(opts.Secret, body, sig) {
		return Report{}, c.refuse(addr, ErrUnauthenticated, "signature does not match the body (wrong secret?)")
	}
	rep, rawMetrics, err := parseReport(body)
	if err != nil {
		return Report{}, c.refuseErr(addr, err)
	}
	if rep.Nonce != nonce {
		return Report{}, c.refuse(addr, ErrReplayed, "nonce %q is not the one sent", cut(rep.Nonce, 40))
	}
	if last := c.lastSeq(addr); last != 0 && rep.Seq <= last {
		return Report{}, c.refuse(addr, ErrReplayed, "sequence number %d is not above %d, the last accepted", rep.Seq, last)
	}
	if age := rep.Age(c.now()); age > skew || age < -skew {
		dir := "behind"
		if age < 0 {
			dir, age = "ahead of", -age
		}
		return Report{}, c.refuse(addr, ErrStale, "timestamp %s is %s %s the client's clock, more than the allowed %s",
			rep.Time().UTC().Format(time.RFC3339Nano), age.Round(time.Millisecond), dir, skew)
	}
	if rep.Metrics, err = checkValues(rawMetrics); err != nil {
		return Report{}, c.refuseErr(addr, err)
	}
	return rep, c.accept(addr, rep.Seq)
}

// lastSeq returns the sequence number of the last report accepted from
// addr, or 0.
func (c *Client) lastSeq(addr netip.AddrPort) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.agents[addr]; st != nil {
		return st.lastSeq
	}
	return 0
}

// accept records an accepted report, unless a concurrent fetch accepted a
// later one meanwhile.
func (c *Client) accept(addr netip.AddrPort, seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(addr)
	if st.lastSeq != 0 && seq <= st.lastSeq {
		st.counters.add(ErrReplayed)
		c.total.add(ErrReplayed)
		return refuse(ErrReplayed, "sequence number %d is not above %d, the last accepted", seq, st.lastSeq)
	}
	st.lastSeq = seq
	st.counters.add(nil)
	c.total.add(nil)
	return nil
}

// state returns the record of addr, creating it. c.mu must be held.
func (c *Client) state(addr netip.AddrPort) *agentState {
	st := c.agents[addr]
	if st == nil {
		st = &agentState{}
		c.agents[addr] = st
	}
	return st
}

// refuse counts a refusal and returns its error.
func (c *Client) refuse(addr netip.AddrPort, reason error, format string, args ...any) error {
	return c.refuseErr(addr, refuse(reason, format, args...))
}

// refuseErr counts err under the sentinel it wraps and returns it.
func (c *Client) refuseErr(addr netip.AddrPort, err error) error {
	reason := ErrUnavailable
	for _, r := range []error{ErrUnauthenticated, ErrReplayed, ErrMalformed, ErrOutOfRange, ErrStale} {
		if errors.Is(err, r) {
			reason = r
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state(addr).counters.add(reason)
	c.total.add(reason)
	return err
}

// Counters returns the totals over all agents.
func (c *Client) Counters() Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// AgentCounters returns the counters of one agent (port 0 means
// DefaultPort).
func (c *Client) AgentCounters(addr netip.AddrPort) Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.agents[normalizeAddr(addr)]; st != nil {
		return st.counters
	}
	return Counters{}
}

// Forget drops what the client remembers of an agent (its last sequence
// number and its counters), for a server that was removed, or an agent
// whose clock was stepped back and whose reports are therefore refused as
// replayed. The totals keep their counts.
func (c *Client) Forget(addr netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.agents, normalizeAddr(addr))
}

// CloseIdleConnections closes the client's idle keep-alive connections.
func (c *Client) CloseIdleConnections() {
	c.hc.CloseIdleConnections()
	c.srcMu.Lock()
	defer c.srcMu.Unlock()
	for _, hc := range c.bySrc {
		hc.CloseIdleConnections()
	}
}
