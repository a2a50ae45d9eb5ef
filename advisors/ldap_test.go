package advisors

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	ber "github.com/go-asn1-ber/asn1-ber"
)

// slapdConf is a minimal slapd.conf: core schema, one mdb database under
// the test's directory, a root DN with a space in it.
const slapdConf = `include /etc/ldap/schema/core.schema
pidfile %[1]s/slapd.pid
argsfile %[1]s/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 10485760
suffix "dc=dlb,dc=test"
rootdn "cn=Directory Manager,dc=dlb,dc=test"
rootpw secret
directory %[1]s/db
`

// startSlapd starts OpenLDAP's slapd (Debian package slapd) on a free port
// of 127.0.0.1 with a private configuration, and returns the process and
// port. It is killed by PID when t ends.
func startSlapd(t *testing.T) (*os.Process, uint16) {
	t.Helper()
	bin := requireTool(t, "slapd", "slapd")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slapd.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, slapdConf, dir), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t, "tcp")
	start := time.Now()
	cmd := startProcess(t, bin, "-h", fmt.Sprintf("ldap://127.0.0.1:%d/", port), "-f", conf, "-d", "0")
	waitTCP(t, port)
	t.Logf("slapd listening on port %d after %v", port, time.Since(start).Round(time.Millisecond))
	return cmd.Process, port
}

// TestLDAPRealServer probes a real slapd: anonymous and simple binds, the
// Response match, and the server stopped.
func TestLDAPRealServer(t *testing.T) {
	proc, port := startSlapd(t)
	a, _ := New("ldap")
	probeRealServer(t, a, proc, port, []realCase{
		{name: "anonymous bind", up: true},
		{name: "naming context", response: "dc=dlb,dc=test", up: true},
		{name: "operational attribute", response: "OpenLDAProotDSE", up: true},
		{name: "response mismatch", response: "dc=example,dc=com", reason: `rootdse has no value containing "dc=example,dc=com"`},
		{name: "simple bind, DN with a space", request: "cn=Directory Manager,dc=dlb,dc=test secret", up: true},
		{name: "wrong password", request: "cn=Directory Manager,dc=dlb,dc=test wrong", reason: "bind failed: invalid credentials (49)"},
		{name: "request without password", request: "cn=admin", reason: `request is not "bind-dn password"`},
	})
}

// TestLDAPDialogue checks the LDAP advisor against a small LDAP server
// written here, for replies slapd does not give.
func TestLDAPDialogue(t *testing.T) {
	rootDSE := map[string][]string{"objectClass": {"top"}, "namingContexts": {"o=fake"}, "vendorName": {"dlb test"}}
	tests := []struct {
		name     string
		request  string
		response string
		// answer returns the server's messages for a request with id
		// and protocol op tag (0 bind, 3 search); nil hangs up.
		answer func(id int64, op ber.Tag, req *ber.Packet) [][]byte
		up     bool
		reason string
	}{
		{
			name:   "rootdse",
			answer: fakeRootDSE(rootDSE),
			up:     true,
		},
		{
			name:     "response in a value",
			response: "dlb test",
			answer:   fakeRootDSE(rootDSE),
			up:       true,
		},
		{
			name:     "credentials sent as configured",
			request:  "cn=Probe User,o=fake p@ss",
			response: "o=fake",
			answer: func(id int64, op ber.Tag, req *ber.Packet) [][]byte {
				if op == ldapBindRequest {
					bind := req.Children[1]
					dn, _ := bind.Children[1].Value.(string)
					pw := bind.Children[2].Data.String()
					if dn != "cn=Probe User,o=fake" || pw != "p@ss" {
						return [][]byte{ldapResponse(id, ldapBindResponse, 49, fmt.Sprintf("got %q %q", dn, pw))}
					}
				}
				return fakeRootDSE(rootDSE)(id, op, req)
			},
			up: true,
		},
		{
			name: "no entry",
			answer: func(id int64, op ber.Tag, _ *ber.Packet) [][]byte {
				if op == ldapBindRequest {
					return [][]byte{ldapResponse(id, ldapBindResponse, 0, "")}
				}
				return [][]byte{ldapResponse(id, ldapSearchDone, 0, "")}
			},
			reason: "rootdse search returned no entry",
		},
		{
			name: "search refused",
			answer: func(id int64, op ber.Tag, _ *ber.Packet) [][]byte {
				if op == ldapBindRequest {
					return [][]byte{ldapResponse(id, ldapBindResponse, 0, "")}
				}
				return [][]byte{ldapResponse(id, ldapSearchDone, 50, "")}
			},
			reason: "rootdse search failed: insufficient access rights (50)",
		},
		{
			name: "anonymous bind refused",
			answer: func(id int64, _ ber.Tag, _ *ber.Packet) [][]byte {
				return [][]byte{ldapResponse(id, ldapBindResponse, 48, "anonymous bind disallowed")}
			},
			reason: "bind failed: inappropriate authentication (48): anonymous bind disallowed",
		},
		{
			name: "notice of disconnection",
			answer: func(int64, ber.Tag, *ber.Packet) [][]byte {
				return [][]byte{ldapResponse(0, ldapExtendedResponse, 52, "shutting down"), nil}
			},
			reason: "connection closed before end of reply",
		},
		{
			name: "reply to another message",
			answer: func(id int64, _ ber.Tag, _ *ber.Packet) [][]byte {
				return [][]byte{ldapResponse(id+7, ldapBindResponse, 0, "")}
			},
			reason: "no reply within 1s",
		},
		{
			name: "bind answered with a search entry",
			answer: func(id int64, _ ber.Tag, _ *ber.Packet) [][]byte {
				return [][]byte{ldapEntry(id, "", rootDSE)}
			},
		},
	}
	a, _ := New("ldap")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port := tcpServer(t, nil, func(c net.Conn, done <-chan struct{}) {
				r := bufio.NewReader(c)
				for {
					req, ok := readLDAPPacket(c, r)
					if !ok || len(req.Children) < 2 {
						return
					}
					id, _ := req.Children[0].Value.(int64)
					op := req.Children[1].Tag
					if op == ldapUnbindRequest {
						return
					}
					for _, m := range tc.answer(id, op, req) {
						if m == nil {
							return
						}
						if _, err := c.Write(m); err != nil {
							return
						}
					}
				}
			})
			target := loTarget(port)
			target.Request, target.Response = tc.request, tc.response
			r, el := probeTimed(t, a, target)
			if r.Up != tc.up || (tc.reason != "" && r.Reason != tc.reason) {
				t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
			}
			t.Logf("up=%v reason=%q in %v", r.Up, r.Reason, el)
		})
	}
}

// TestLDAPHostile runs the hostile-server table against the ldap advisor.
func TestLDAPHostile(t *testing.T) { runHostile(t, "ldap") }

// TestLDAPCanceled checks that the ldap advisor honours its context.
func TestLDAPCanceled(t *testing.T) { runCanceled(t, "ldap") }

// LDAP protocol op tags (RFC 4511 section 4.2 ff.).
const (
	ldapBindRequest      ber.Tag = 0
	ldapBindResponse     ber.Tag = 1
	ldapUnbindRequest    ber.Tag = 2
	ldapSearchEntry      ber.Tag = 4
	ldapSearchDone       ber.Tag = 5
	ldapExtendedResponse ber.Tag = 24
)

// readLDAPPacket reads one LDAP message (within 3 s).
func readLDAPPacket(c net.Conn, r *bufio.Reader) (*ber.Packet, bool) {
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	p, err := ber.ReadPacket(r)
	return p, err == nil
}

// readLDAPRequest reads one LDAP message and returns its message ID.
func readLDAPRequest(c net.Conn, r *bufio.Reader) (int64, bool) {
	p, ok := readLDAPPacket(c, r)
	if !ok || len(p.Children) < 2 {
		return 0, false
	}
	id, ok := p.Children[0].Value.(int64)
	return id, ok
}

// ldapMessage wraps a protocol op into an LDAPMessage with id.
func ldapMessage(id int64, op *ber.Packet) []byte {
	m := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "LDAPMessage")
	m.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, id, "messageID"))
	m.AppendChild(op)
	return m.Bytes()
}

// ldapResponse encodes an LDAPResult-shaped response (bind, search done,
// extended) with a result code and diagnostic message.
func ldapResponse(id int64, op ber.Tag, code int64, diag string) []byte {
	r := ber.Encode(ber.ClassApplication, ber.TypeConstructed, op, nil, "response")
	r.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagEnumerated, code, "resultCode"))
	r.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "", "matchedDN"))
	r.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, diag, "diagnosticMessage"))
	return ldapMessage(id, r)
}

// ldapEntry encodes a SearchResultEntry.
func ldapEntry(id int64, dn string, attrs map[string][]string) []byte {
	e := ber.Encode(ber.ClassApplication, ber.TypeConstructed, ldapSearchEntry, nil, "entry")
	e.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, dn, "objectName"))
	list := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "attributes")
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		pa := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "attribute")
		pa.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, n, "type"))
		vals := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSet, nil, "vals")
		for _, v := range attrs[n] {
			vals.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, v, "value"))
		}
		pa.AppendChild(vals)
		list.AppendChild(pa)
	}
	e.AppendChild(list)
	return ldapMessage(id, e)
}

// fakeRootDSE answers a bind with success and a search with one entry.
func fakeRootDSE(attrs map[string][]string) func(int64, ber.Tag, *ber.Packet) [][]byte {
	return func(id int64, op ber.Tag, _ *ber.Packet) [][]byte {
		if op == ldapBindRequest {
			return [][]byte{ldapResponse(id, ldapBindResponse, 0, "")}
		}
		return [][]byte{ldapEntry(id, "", attrs), ldapResponse(id, ldapSearchDone, 0, "")}
	}
}

// TestLDAPParseBind checks the Request syntax "bind-dn password".
func TestLDAPParseBind(t *testing.T) {
	tests := []struct{ in, dn, pw, err string }{
		{"", "", "", ""},
		{"   ", "", "", ""},
		{"cn=admin,dc=x secret", "cn=admin,dc=x", "secret", ""},
		{"cn=Directory Manager,dc=x s3cr3t", "cn=Directory Manager,dc=x", "s3cr3t", ""},
		{"cn=admin", "", "", `request is not "bind-dn password"`},
		{" secret", "", "", `request is not "bind-dn password"`},
		{"cn=a\nb pw", "", "", "request holds a control character"},
	}
	for _, tc := range tests {
		dn, pw, err := parseLDAPBind(tc.in)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if dn != tc.dn || pw != tc.pw || got != tc.err {
			t.Errorf("parseLDAPBind(%q) = %q, %q, %q; want %q, %q, %q", tc.in, dn, pw, got, tc.dn, tc.pw, tc.err)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("reason %q shows the password", got)
		}
	}
}

// TestLDAPNoGoroutineLeak checks that the LDAP client's goroutines end
// with each probe, whether the server answers, refuses or stalls.
func TestLDAPNoGoroutineLeak(t *testing.T) {
	ok := fakeRootDSE(map[string][]string{"objectClass": {"top"}})
	port := tcpServer(t, nil, func(c net.Conn, done <-chan struct{}) {
		r := bufio.NewReader(c)
		for {
			req, good := readLDAPPacket(c, r)
			if !good || len(req.Children) < 2 {
				return
			}
			id, _ := req.Children[0].Value.(int64)
			op := req.Children[1].Tag
			if op == ldapUnbindRequest {
				return
			}
			for _, m := range ok(id, op, req) {
				if _, err := c.Write(m); err != nil {
					return
				}
			}
		}
	})
	stall := tcpServer(t, nil, drain)
	a, _ := New("ldap")
	for range 5 {
		if r := a.Probe(t.Context(), loTarget(port)); !r.Up {
			t.Fatalf("got %+v, want up", r)
		}
		target := Target{Address: loopback, Port: stall, ReceiveTimeout: 100 * time.Millisecond}
		if r := a.Probe(t.Context(), target); r.Up {
			t.Fatalf("got %+v against a stalled server, want down", r)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "github.com/go-ldap/ldap") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("LDAP client goroutines still running:\n%s", stacks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
