// Package advisors probes servers the way IBM Network Dispatcher's advisors
// do: a lightweight client of the server's own protocol opens a connection,
// asks something small, and reports the time the exchange took as the
// server's load (in milliseconds), or reports the server down with a reason.
//
// There is one file per protocol. Every probe honours its context's
// deadline and the Target's timeouts, reads at most a bounded number of
// bytes, and never panics on hostile replies: a reply it cannot understand
// is a down result with a reason, not an error of the caller.
package advisors

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/dlbproject/dlb/internal/sockopt"
	"github.com/dlbproject/dlb/internal/suggest"
)

// Target is what one probe asks about.
type Target struct {
	// Address and Port are where the server listens (for MAC forwarding,
	// the server's own address; the probe does not go through the
	// cluster address).
	Address netip.Addr
	Port    uint16
	// ConnectTimeout bounds connection set-up, ReceiveTimeout the wait for
	// the reply once connected. Zero means DefaultConnectTimeout and
	// DefaultReceiveTimeout. The context's deadline, if earlier, wins.
	ConnectTimeout, ReceiveTimeout time.Duration
	// Request and Response are IBM's advisorrequest/advisorresponse: what
	// to send and what the reply must contain, in the protocol's own terms
	// (see each advisor's doc). Empty means the advisor's default.
	Request, Response string
	// Host is an optional host name (HTTP Host header, TLS server name).
	Host string
	// Source is the address probes leave from: IBM's advisors use the
	// dispatcher's non-forwarding address (NFA), because the kernel's own
	// choice may be a cluster address, which the servers hold themselves
	// and would answer to themselves. It is used when it is of Address's
	// family; the zero value (or another family) leaves the choice to the
	// kernel. The exec advisor passes it to its program.
	Source netip.Addr
	// Cluster is the cluster address the server is probed for; only the
	// cluster advisor uses it (it sends its SYN there).
	Cluster netip.Addr
}

// Defaults for a Target's timeouts.
const (
	DefaultConnectTimeout = 2 * time.Second
	DefaultReceiveTimeout = 2 * time.Second
)

// ConnectTimeoutOrDefault returns t.ConnectTimeout or its default.
func (t Target) ConnectTimeoutOrDefault() time.Duration {
	if t.ConnectTimeout > 0 {
		return t.ConnectTimeout
	}
	return DefaultConnectTimeout
}

// ReceiveTimeoutOrDefault returns t.ReceiveTimeout or its default.
func (t Target) ReceiveTimeoutOrDefault() time.Duration {
	if t.ReceiveTimeout > 0 {
		return t.ReceiveTimeout
	}
	return DefaultReceiveTimeout
}

// SourceAddr returns the source address a probe of t binds to: Source,
// unmapped, if it is of Address's family, else the zero Addr (the
// kernel's choice).
func (t Target) SourceAddr() netip.Addr {
	src := t.Source.Unmap().WithZone("")
	if !src.IsValid() || !t.Address.IsValid() || src.Is4() != t.Address.Unmap().Is4() {
		return netip.Addr{}
	}
	return src
}

// dialer returns a net.Dialer bound to t's source address, if any, for
// network ("tcp" or "udp").
func (t Target) dialer(network string) *net.Dialer {
	d := &net.Dialer{}
	if src := t.SourceAddr(); src.IsValid() {
		if network == "udp" {
			d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		} else {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
			d.Control = sockopt.BindNoPort
		}
	}
	return d
}

// HostPort returns "address:port" for dialing.
func (t Target) HostPort() string {
	return netip.AddrPortFrom(t.Address, t.Port).String()
}

// Result is what a probe found.
type Result struct {
	// Up says whether the server answered as expected.
	Up bool
	// Load is the server's load: by default the time the exchange took
	// (IBM's advisors report milliseconds); a custom advisor in replace
	// mode reports it directly. Meaningful only when Up.
	Load time.Duration
	// Reason says why the server is down ("connect refused", "timeout
	// after 2s", "status 503", ...); empty when Up.
	Reason string
	// Local says that the probe could not be made for a reason of this
	// host, not of the server: its source address (the dispatcher's NFA)
	// is not on the host, the host has no route to the server, it is out
	// of file descriptors or memory, its own firewall refused the probe,
	// or an exec advisor's program could not be started. Such a result
	// says nothing of the server.
	Local bool
}

// LoadMS returns the load in whole milliseconds, at least 1 when Up (a
// server that answered has some load), and -1 when down, as IBM reports.
func (r Result) LoadMS() int64 {
	if !r.Up {
		return -1
	}
	ms := r.Load.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return ms
}

// Down returns a down Result with a formatted reason.
func Down(format string, args ...any) Result {
	return Result{Reason: fmt.Sprintf(format, args...)}
}

// Advisor probes one protocol.
type Advisor interface {
	// Name is the advisor's name as operators type it ("http", "ldap").
	Name() string
	// DefaultPort is the protocol's usual port (0 if none).
	DefaultPort() uint16
	// Probe probes t once. It returns within the context's deadline and
	// the Target's timeouts, whatever the server does.
	Probe(ctx context.Context, t Target) Result
}

var registry = map[string]func() Advisor{}

// register adds an advisor constructor; each protocol file calls it from
// init.
func register(name string, f func() Advisor) {
	if _, dup := registry[name]; dup {
		panic("advisors: " + name + " registered twice")
	}
	registry[name] = f
}

// New returns the named advisor, or an error naming the known ones.
func New(name string) (Advisor, error) {
	f, ok := registry[name]
	if !ok {
		msg := fmt.Sprintf("unknown advisor %q", name)
		if s := suggest.Closest(name, Names()); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return nil, fmt.Errorf("%s; known: %s", msg, strings.Join(Names(), ", "))
	}
	return f(), nil
}

// RequestChecker is implemented by the advisors that interpret a
// server's advisorrequest and advisorresponse (Target.Request and
// Target.Response).
type RequestChecker interface {
	// CheckRequest returns why a probe could not use request and
	// response, or nil: what Probe would report as the server's down
	// reason at every probe.
	CheckRequest(request, response string) error
}

// CheckRequest checks a server's request and response for the named
// advisor, so that a configuration can refuse what the advisor could not
// use; nil for an advisor that does not interpret them or is unknown.
func CheckRequest(name, request, response string) error {
	f, ok := registry[name]
	if !ok {
		return nil
	}
	if c, ok := f().(RequestChecker); ok {
		return c.CheckRequest(request, response)
	}
	return nil
}

// Names lists the known advisors, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
