package advisors

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheckRequest(t *testing.T) {
	tests := []struct {
		advisor, request, response string
		want                       string // a substring of the error; "" for none
	}{
		{"http", "", "", ""},
		{"http", "GET /health HTTP/1.1\\r\\nHost: example", "status=200-299 ok", ""},
		{"https", "GET health", "", `advisorrequest: bad path "health"`},
		{"http", "GET / HTTP/2", "", `advisorrequest: bad version "HTTP/2"`},
		{"http", "GET /\nConnection: close", "", "advisorrequest: header Connection is the advisor's"},
		{"http", "", "status=99", `advisorresponse: bad status range "99"`},
		{"dns", "example.org MX", "", ""},
		{"dns", "example.org NOPE", "", `advisorrequest: unknown type "NOPE"`},
		{"dns", "a b c", "", "advisorrequest: want"},
		{"ldap", "cn=admin,dc=example secret", "", ""},
		{"ldap", "secret", "", "advisorrequest: request is not"},
		{"smtp", "EHLO dlb", "", ""},
		{"pop3", "CAPA\tx", "", "advisorrequest: request"},
		{"imap", "   ", "", "advisorrequest: empty request"},
		{"ftp", "", "anything", ""},
		{"connect", "anything at all", "status=1", ""},
		{"ping", "x", "y", ""},
		{"no such advisor", "x", "y", ""},
	}
	for _, tc := range tests {
		err := CheckRequest(tc.advisor, tc.request, tc.response)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %q %q: %v, want accepted", tc.advisor, tc.request, tc.response, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q %q: %v, want an error with %q", tc.advisor, tc.request, tc.response, err, tc.want)
		}
	}
}

// TestCheckRequestMatchesProbe: a request or response CheckRequest
// refuses is one the probe refuses before connecting (its down reason is
// not the closed port's), and one it accepts gets as far as connecting.
func TestCheckRequestMatchesProbe(t *testing.T) {
	closed := netip.MustParseAddr("127.0.0.1") // port 1: nothing listens
	for _, tc := range []struct{ advisor, request, response string }{
		{"http", "GET health", ""},
		{"http", "", "status=99"},
		{"http", "GET /ok", "status=200"},
		{"dns", "example.org NOPE", ""},
		{"dns", "example.org", ""},
		{"ldap", "secret", ""},
		{"ldap", "cn=x secret", ""},
		{"smtp", "\x01", ""},
		{"smtp", "NOOP", ""},
	} {
		a, err := New(tc.advisor)
		if err != nil {
			t.Fatal(err)
		}
		checkErr := CheckRequest(tc.advisor, tc.request, tc.response)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res := a.Probe(ctx, Target{Address: closed, Port: 1, Request: tc.request, Response: tc.response,
			ConnectTimeout: time.Second, ReceiveTimeout: time.Second})
		cancel()
		if res.Up {
			t.Fatalf("%s %q: up against a closed port", tc.advisor, tc.request)
		}
		// dns probes over UDP: a closed port answers with an ICMP error.
		reachedNetwork := strings.Contains(res.Reason, "refused") || strings.Contains(res.Reason, "unreachable")
		if (checkErr == nil) != reachedNetwork {
			t.Errorf("%s %q %q: CheckRequest says %v, the probe %q", tc.advisor, tc.request, tc.response, checkErr, res.Reason)
		}
	}
}
