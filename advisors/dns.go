package advisors

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// dnsAdvisor is IBM's dns advisor: it sends one query over UDP (with RD
// set, no EDNS, no retry over TCP) and waits for the reply.
//
// Request is "NAME [TYPE]": the name to query and its type (A when
// omitted), for example "www.example.test", "example.test MX" or ". NS";
// NAME is made fully qualified. A Request that does not parse (a bad name,
// an unknown type, more fields) is down with reason "bad advisorrequest: "
// and why; a configuration refuses it (CheckRequest).
//
// Up rules:
//   - Empty Request: the query is ". NS" and any well-formed reply to it
//     is up, whatever its rcode, as IBM's advisor considers any answer a
//     sign of life (an authoritative-only server answers REFUSED).
//   - Explicit Request: the reply's rcode must be NOERROR or NXDOMAIN
//     (the server knows the answer, even if it is "no such name"); any
//     other rcode is down with reason "DNS rcode SERVFAIL" (REFUSED, ...).
//   - Response, if set, is a substring (case-insensitive, since DNS names
//     are) that must appear in the answer section, rendered one record per
//     line in zone-file form ("dlb.test.\t0\tIN\tA\t198.18.5.5"); matching
//     thus also requires answers, so an NXDOMAIN reply is down with reason
//     "answer does not contain \"...\"".
//
// A reply counts only if it comes from the server, is a response (QR set)
// and has the query's ID and question; other datagrams are ignored until
// the deadline. An undecodable datagram, or a NOERROR or NXDOMAIN reply
// with fewer questions or answers than its header counts, is down with
// reason "bad DNS reply: ...", an ICMP port unreachable "port unreachable", silence "no
// reply within 2s" (the receive timeout; UDP has no connect). Load is the
// time from sending the query to receiving the reply. Default port 53.
type dnsAdvisor struct{}

func init() { register("dns", func() Advisor { return dnsAdvisor{} }) }

// Name implements Advisor.
func (dnsAdvisor) Name() string { return "dns" }

// DefaultPort implements Advisor: 53.
func (dnsAdvisor) DefaultPort() uint16 { return 53 }

// dnsQuery is a parsed dns advisorrequest.
type dnsQuery struct {
	name     string
	qtype    uint16
	explicit bool // Request was set: rcode must be NOERROR or NXDOMAIN
}

// parseDNSRequest parses "NAME [TYPE]".
func parseDNSRequest(s string) (dnsQuery, error) {
	f := strings.Fields(s)
	switch len(f) {
	case 0:
		return dnsQuery{name: ".", qtype: dns.TypeNS}, nil
	case 1, 2:
	default:
		return dnsQuery{}, errors.New("want \"NAME [TYPE]\"")
	}
	q := dnsQuery{name: dns.Fqdn(f[0]), qtype: dns.TypeA, explicit: true}
	if _, ok := dns.IsDomainName(q.name); !ok {
		return q, fmt.Errorf("bad name %q", f[0])
	}
	if len(f) == 2 {
		t, ok := dns.StringToType[strings.ToUpper(f[1])]
		if !ok || t == dns.TypeNone {
			return q, fmt.Errorf("unknown type %q", f[1])
		}
		q.qtype = t
	}
	return q, nil
}

// CheckRequest implements RequestChecker: "NAME [TYPE]", as a query that
// packs.
func (dnsAdvisor) CheckRequest(request, _ string) error {
	if _, _, _, err := dnsQueryOf(request); err != nil {
		return fmt.Errorf("advisorrequest: %w", err)
	}
	return nil
}

// dnsQueryOf parses a request and builds its query message, packed.
func dnsQueryOf(request string) (dnsQuery, *dns.Msg, []byte, error) {
	q, err := parseDNSRequest(request)
	if err != nil {
		return q, nil, nil, err
	}
	msg := new(dns.Msg)
	msg.SetQuestion(q.name, q.qtype)
	msg.RecursionDesired = true
	query, err := msg.Pack()
	if err != nil {
		return q, nil, nil, fmt.Errorf("packing the query: %w", err)
	}
	return q, msg, query, nil
}

// rcodeName returns the rcode's mnemonic ("SERVFAIL").
func rcodeName(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rc)
}

// Probe implements Advisor.
func (a dnsAdvisor) Probe(ctx context.Context, t Target) Result {
	t = withDefaultPort(t, a.DefaultPort())
	q, msg, query, err := dnsQueryOf(t.Request)
	if err != nil {
		return Down("bad advisorrequest: %v", err)
	}
	if !t.Address.IsValid() {
		return Down("no address")
	}

	start := time.Now()
	recv := budget(ctx, t.ReceiveTimeoutOrDefault())
	c, err := t.dialer("udp").DialContext(ctx, "udp", t.HostPort())
	if err != nil {
		return down(dialFailure(ctx, t, err, recv))
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(recv))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, err := c.Write(query); err != nil {
		return down(datagramFailure(ctx, t, err, recv))
	}
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return down(datagramFailure(ctx, t, err, recv))
		}
		reply := new(dns.Msg)
		if err := reply.Unpack(buf[:n]); err != nil {
			return Down("bad DNS reply: %s", printable(strings.TrimPrefix(err.Error(), "dns: "), 120))
		}
		if !reply.Response || reply.Id != msg.Id || !sameQuestion(reply, msg) {
			continue // not ours: keep waiting until the deadline
		}
		load := time.Since(start)
		if answered := reply.Rcode == dns.RcodeSuccess || reply.Rcode == dns.RcodeNameError; answered &&
			(len(reply.Question) < int(binary.BigEndian.Uint16(buf[4:])) || len(reply.Answer) < int(binary.BigEndian.Uint16(buf[6:]))) {
			// The decoder accepts a message cut after its header (servers
			// send such for errors); an answer must hold what it claims.
			return Down("bad DNS reply: shorter than its header says")
		}
		if q.explicit && reply.Rcode != dns.RcodeSuccess && reply.Rcode != dns.RcodeNameError {
			return Down("DNS rcode %s", rcodeName(reply.Rcode))
		}
		if t.Response != "" && !answerContains(reply, t.Response) {
			return Down("answer does not contain %s", quoteReply(t.Response))
		}
		return Result{Up: true, Load: load}
	}
}

// sameQuestion reports whether reply echoes query's question (a reply
// with no question section, as some servers send with errors, passes).
func sameQuestion(reply, query *dns.Msg) bool {
	if len(reply.Question) == 0 {
		return true
	}
	if len(reply.Question) != 1 {
		return false
	}
	r, q := reply.Question[0], query.Question[0]
	return r.Qtype == q.Qtype && r.Qclass == q.Qclass && strings.EqualFold(r.Name, q.Name)
}

// answerContains reports whether the answer section, one record per line,
// contains substr (case-insensitive).
func answerContains(reply *dns.Msg, substr string) bool {
	var b strings.Builder
	for _, rr := range reply.Answer {
		b.WriteString(rr.String())
		b.WriteByte('\n')
	}
	return strings.Contains(strings.ToLower(b.String()), strings.ToLower(substr))
}

// datagramFailure classifies a send or receive error on a datagram socket
// to t (dns over UDP, ping).
func datagramFailure(ctx context.Context, t Target, err error, recv time.Duration) error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return &failure{reason: "canceled", err: err}
	case errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &failure{reason: "no reply within " + fmtDur(recv), err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &failure{reason: "port unreachable", err: err}
	case errors.Is(err, syscall.EHOSTUNREACH):
		return unreachable("host unreachable", err, t)
	case errors.Is(err, syscall.ENETUNREACH):
		return unreachable("network unreachable", err, t)
	}
	return &failure{reason: "read failed: " + innerError(err), err: err}
}
