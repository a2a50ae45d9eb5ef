package advisors

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// The http and https advisors send one HTTP/1.1 request with
// "Connection: close" and check the reply. They use net/http only to parse
// the reply (http.ReadResponse over the session's bounded reader), so the
// connect and receive timeouts, the 64 KiB read cap and the timing are the
// same as every other advisor's.
//
// Request (IBM's advisorrequest) is a request line, "METHOD PATH" or
// "METHOD PATH HTTP/1.x", for example "GET /health HTTP/1.1"; empty means
// "HEAD / HTTP/1.1", IBM's default. Extra header lines may follow, each
// after a newline or a literal `\r\n` as IBM's examples write it
// ("GET / HTTP/1.1\r\nX-Probe: dlb"); a Host line there overrides the
// default Host header, which is Target.Host, or else the address (with
// the port when it is not the scheme's default). The method must be an
// HTTP token, the path must start with "/" (or be "*") and contain no
// spaces or control characters, the version must be HTTP/1.0 or HTTP/1.1;
// anything else is down with reason "bad advisorrequest: " and why, and a
// Target.Host with spaces or control characters "bad host name" (a
// configuration refuses such a request: CheckRequest).
//
// Response (IBM's advisorresponse) is either empty, a substring, or a
// status specification optionally followed by a space and a substring:
//
//	""                      status 200-399
//	"ok"                    status 200-399 and "ok" in the reply
//	"status=200"            status 200
//	"status=200-299,304"    status in 200-299 or 304 (ranges inclusive)
//	"status=503 sorry"      status 503 and "sorry" in the reply
//
// The substring (case-sensitive) is looked for in the status line
// ("HTTP/1.1 200 OK"), the headers (one "Canonical-Name: value" line
// each) and, unless the method is HEAD, the first 64 KiB of the decoded
// body. Without a substring the body is not read. A Response that starts
// with "status=" but does not parse is down with reason "bad
// advisorresponse".
//
// Up: the reply parses, its status is in range and the substring (if any)
// is found. Down reasons: the connect and read reasons of dial and
// session ("connect refused", "no reply within 2s", ...), "status 503",
// "body does not contain \"ok\"" (or "reply does not contain" for HEAD),
// "bad HTTP reply: ...", and for https the "TLS handshake ..." reasons.
// Load is the time from the start of the connect to the end of the
// headers, or to the end of the body when a substring is looked for.
type httpAdvisor struct{ tls bool }

func init() {
	register("http", func() Advisor { return httpAdvisor{} })
	register("https", func() Advisor { return httpAdvisor{tls: true} })
}

// Name implements Advisor.
func (a httpAdvisor) Name() string {
	if a.tls {
		return "https"
	}
	return "http"
}

// DefaultPort implements Advisor: 80 for http, 443 for https.
func (a httpAdvisor) DefaultPort() uint16 {
	if a.tls {
		return 443
	}
	return 80
}

// httpRequest is a parsed advisorrequest.
type httpRequest struct {
	method, path, proto string
	headers             [][2]string // extra header lines, in order
	host                string      // Host header override, if any
}

// defaultHTTPRequest is IBM's default http advisor request.
const defaultHTTPRequest = "HEAD / HTTP/1.1"

// parseHTTPRequest parses an advisorrequest.
func parseHTTPRequest(s string) (httpRequest, error) {
	if strings.TrimSpace(s) == "" {
		s = defaultHTTPRequest
	}
	s = strings.ReplaceAll(s, `\r\n`, "\n")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	var r httpRequest
	f := strings.Fields(lines[0])
	if len(f) < 2 || len(f) > 3 || strings.TrimSpace(lines[0]) != strings.Join(f, " ") {
		return r, errors.New("want \"METHOD PATH [HTTP/1.x]\"")
	}
	r.method, r.path, r.proto = f[0], f[1], "HTTP/1.1"
	if len(f) == 3 {
		r.proto = f[2]
	}
	if !isToken(r.method) {
		return r, fmt.Errorf("bad method %q", r.method)
	}
	if r.path != "*" && !strings.HasPrefix(r.path, "/") || hasCtl(r.path) {
		return r, fmt.Errorf("bad path %q", r.path)
	}
	if r.proto != "HTTP/1.1" && r.proto != "HTTP/1.0" {
		return r, fmt.Errorf("bad version %q", r.proto)
	}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		value = strings.TrimSpace(value)
		if !ok || !isToken(name) || hasCtl(value) {
			return r, fmt.Errorf("bad header line %q", l)
		}
		switch strings.ToLower(name) {
		case "host":
			r.host = value
		case "connection", "content-length", "transfer-encoding":
			return r, fmt.Errorf("header %s is the advisor's", name)
		default:
			r.headers = append(r.headers, [2]string{name, value})
		}
	}
	return r, nil
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hasCtl reports whether s has a control byte other than tab.
func hasCtl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 && s[i] != '\t' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// statusRange is an inclusive range of status codes.
type statusRange struct{ lo, hi int }

// httpExpect is a parsed advisorresponse.
type httpExpect struct {
	status []statusRange
	substr string
}

func (e httpExpect) statusOK(code int) bool {
	for _, r := range e.status {
		if code >= r.lo && code <= r.hi {
			return true
		}
	}
	return false
}

// parseHTTPExpect parses an advisorresponse.
func parseHTTPExpect(s string) (httpExpect, error) {
	e := httpExpect{status: []statusRange{{200, 399}}}
	spec, ok := strings.CutPrefix(s, "status=")
	if !ok {
		e.substr = s
		return e, nil
	}
	spec, e.substr, _ = strings.Cut(spec, " ")
	e.status = nil
	for _, part := range strings.Split(spec, ",") {
		los, his, isRange := strings.Cut(part, "-")
		if !isRange {
			his = los
		}
		lo, err1 := strconv.Atoi(los)
		hi, err2 := strconv.Atoi(his)
		if err1 != nil || err2 != nil || lo < 100 || hi > 599 || lo > hi {
			return e, fmt.Errorf("bad status range %q", part)
		}
		e.status = append(e.status, statusRange{lo, hi})
	}
	return e, nil
}

// hostHeader returns the Host header for t: t.Host, or the address with
// the port unless it is the scheme's default.
func hostHeader(t Target, defPort uint16) string {
	if t.Host != "" {
		return t.Host
	}
	if t.Port == defPort {
		if t.Address.Is6() {
			return "[" + t.Address.String() + "]"
		}
		return t.Address.String()
	}
	return netip.AddrPortFrom(t.Address, t.Port).String()
}

// CheckRequest implements RequestChecker: the request line and headers,
// and the expected status ranges.
func (httpAdvisor) CheckRequest(request, response string) error {
	if _, err := parseHTTPRequest(request); err != nil {
		return fmt.Errorf("advisorrequest: %w", err)
	}
	if _, err := parseHTTPExpect(response); err != nil {
		return fmt.Errorf("advisorresponse: %w", err)
	}
	return nil
}

// Probe implements Advisor.
func (a httpAdvisor) Probe(ctx context.Context, t Target) Result {
	t = withDefaultPort(t, a.DefaultPort())
	req, err := parseHTTPRequest(t.Request)
	if err != nil {
		return Down("bad advisorrequest: %v", err)
	}
	exp, err := parseHTTPExpect(t.Response)
	if err != nil {
		return Down("bad advisorresponse: %v", err)
	}
	if hasCtl(t.Host) || strings.ContainsAny(t.Host, " \t") {
		return Down("bad host name")
	}

	var s *session
	if a.tls {
		s, err = dialTLS(ctx, t, tlsConfig(t))
	} else {
		s, err = dial(ctx, t)
	}
	if err != nil {
		return down(err)
	}
	defer s.Close()

	host := req.host
	if host == "" {
		host = hostHeader(t, a.DefaultPort())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\nUser-Agent: dlb-advisor\r\nAccept: */*\r\nConnection: close\r\n",
		req.method, req.path, req.proto, host)
	for _, h := range req.headers {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	b.WriteString("\r\n")
	if err := s.WriteString(b.String()); err != nil {
		return down(err)
	}

	resp, err := http.ReadResponse(s.Reader(), &http.Request{Method: req.method})
	if err != nil {
		return down(httpReadFailure(s, err))
	}
	// The body is never closed: closing drains it, which a slow or endless
	// body would turn into a wait; closing the connection is enough.
	if !exp.statusOK(resp.StatusCode) {
		return Down("status %d", resp.StatusCode)
	}
	if exp.substr == "" {
		return s.Up()
	}
	if strings.Contains(httpHead(resp), exp.substr) {
		return s.Up()
	}
	if req.method == http.MethodHead {
		return Down("reply does not contain %s", quoteReply(exp.substr))
	}
	found, err := bodyContains(resp.Body, exp.substr)
	if found {
		return s.Up()
	}
	if err != nil {
		return down(httpReadFailure(s, err))
	}
	return Down("body does not contain %s", quoteReply(exp.substr))
}

// httpHead renders the status line and headers for substring matching.
func httpHead(resp *http.Response) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\r\n", resp.Proto, resp.Status)
	_ = resp.Header.Write(&b)
	return b.String()
}

// bodyContains reads body until it finds substr, the body ends, or the
// session's read cap is reached (then it reports not found, no error).
func bodyContains(body io.Reader, substr string) (bool, error) {
	br := bufio.NewReaderSize(body, 4096)
	var window []byte
	buf := make([]byte, 4096)
	for {
		n, err := br.Read(buf)
		window = append(window, buf[:n]...)
		if strings.Contains(string(window), substr) {
			return true, nil
		}
		// Keep only the tail that could begin a match.
		if keep := len(substr) - 1; len(window) > keep {
			window = append(window[:0], window[len(window)-keep:]...)
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, errReplyTooLarge):
			return false, nil
		default:
			return false, err
		}
	}
}

// httpReadFailure classifies an error from reading an HTTP reply: the
// session's reasons for network errors, "bad HTTP reply: ..." for parse
// errors.
func httpReadFailure(s *session, err error) error {
	switch {
	case s.cnt.left <= 0:
		// The parser may report the cut line rather than the cap.
		return &failure{reason: errReplyTooLarge.Error(), err: err}
	case s.Expired():
		// Or the line cut by the deadline rather than the timeout.
		return s.classify(os.ErrDeadlineExceeded)
	}
	cerr := s.classify(err)
	var f *failure
	if errors.As(cerr, &f) && strings.HasPrefix(f.reason, "read failed: ") {
		return &failure{reason: "bad HTTP reply: " + printable(err.Error(), 80), err: err}
	}
	return cerr
}
