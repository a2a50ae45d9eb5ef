package advisors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// ldapAdvisor is IBM's ldap advisor: it binds, reads the root DSE (the
// entry with the empty DN, RFC 4512 section 5.1) with a base-scope search,
// and unbinds. It speaks plain LDAP (no StartTLS).
//
//   - Default port 389.
//   - Request empty: an anonymous simple bind (empty name and password).
//     Request "bind-dn password": a simple bind as bind-dn; the password
//     is the text after the last space, so the DN may hold spaces
//     ("cn=Directory Manager,dc=example,dc=com secret") and the password
//     may not. A Request without a space is a configuration error (down).
//     The password never appears in a reason.
//   - Up when the bind succeeds and the search of "" with scope base,
//     filter (objectClass=*) and attributes "*" and "+" (user and
//     operational) returns an entry.
//   - Response, if set, must occur in one of that entry's attribute
//     values, case sensitively: a naming context ("dc=example,dc=com"),
//     a vendor name, "3" for supportedLDAPVersion.
//   - Load is the time from the start of the connect to the end of the
//     search; the unbind that follows is not counted.
//
// Down reasons include "connect refused", "bind failed: invalid
// credentials (49)", "rootdse search failed: ...", "no reply within 2s",
// "connection closed without reply", "bind failed: malformed reply",
// "rootdse search returned no entry" and "rootdse has no value
// containing \"...\"". Replies are read through the same bounds as every
// advisor (64 KiB in total, one deadline).
type ldapAdvisor struct{}

func init() { register("ldap", func() Advisor { return ldapAdvisor{} }) }

// Name implements Advisor.
func (ldapAdvisor) Name() string { return "ldap" }

// DefaultPort implements Advisor: 389.
func (ldapAdvisor) DefaultPort() uint16 { return 389 }

// Probe implements Advisor.
func (a ldapAdvisor) Probe(ctx context.Context, t Target) (res Result) {
	dn, password, err := parseLDAPBind(t.Request)
	if err != nil {
		return down(err)
	}
	t = withDefaultPort(t, a.DefaultPort())
	s, err := dial(ctx, t)
	if err != nil {
		return down(err)
	}
	defer s.Close()

	rc := &ldapConn{Conn: s.Conn()}
	l := ldap.NewConn(rc, false)
	// The connection's deadline (the receive timeout) ends every wait;
	// the library's own request timeout, a little later, is a backstop
	// and also bounds Close.
	l.SetTimeout(s.ReceiveBudget() + 250*time.Millisecond)
	l.Start()
	defer l.Close()
	// The library decodes whatever the server sends; keep a decoding
	// bug from taking the caller down with it.
	defer func() {
		if r := recover(); r != nil {
			res = Down("malformed reply (ldap client panicked: %s)", printable(fmt.Sprint(r), maxReasonReply))
		}
	}()

	if dn == "" {
		err = l.UnauthenticatedBind("")
	} else {
		_, err = l.SimpleBind(&ldap.SimpleBindRequest{Username: dn, Password: password})
	}
	if err != nil {
		return down(ldapFailure(ctx, s, rc, "bind", err))
	}

	secs := int((s.ReceiveBudget() + time.Second - 1) / time.Second)
	sr, err := l.Search(ldap.NewSearchRequest("", ldap.ScopeBaseObject, ldap.NeverDerefAliases,
		1, secs, false, "(objectClass=*)", []string{"*", "+"}, nil))
	if err != nil {
		return down(ldapFailure(ctx, s, rc, "rootdse search", err))
	}
	res = s.Up()
	if len(sr.Entries) == 0 {
		res = Down("rootdse search returned no entry")
	} else if t.Response != "" && !entryContains(sr.Entries[0], t.Response) {
		res = Down("rootdse has no value containing %q", printable(t.Response, maxReasonReply))
	}
	_ = l.Unbind()
	return res
}

// CheckRequest implements RequestChecker: "bind-dn password", or
// nothing for an anonymous bind.
func (ldapAdvisor) CheckRequest(request, _ string) error {
	if _, _, err := parseLDAPBind(request); err != nil {
		return fmt.Errorf("advisorrequest: %w", err)
	}
	return nil
}

// parseLDAPBind splits Target.Request into a bind DN and password; both
// are empty for an anonymous bind.
func parseLDAPBind(req string) (dn, password string, err error) {
	req = strings.TrimSpace(req)
	if req == "" {
		return "", "", nil
	}
	for _, r := range req {
		if r < ' ' || r == 0x7f {
			return "", "", fail("request holds a control character")
		}
	}
	i := strings.LastIndexByte(req, ' ')
	if i < 0 {
		return "", "", fail(`request is not "bind-dn password"`)
	}
	dn, password = strings.TrimSpace(req[:i]), req[i+1:]
	if dn == "" {
		return "", "", fail(`request is not "bind-dn password"`)
	}
	return dn, password, nil
}

// ldapFailure turns an error of the LDAP client into a classified error.
// A result code from the server gives "bind failed: invalid credentials
// (49)"; a network failure seen by the connection is classified as for
// every advisor ("no reply within 2s", "connection closed without
// reply"); anything else is a reply the client could not decode.
func ldapFailure(ctx context.Context, s *session, rc *ldapConn, op string, err error) error {
	var le *ldap.Error
	if errors.As(err, &le) && le.ResultCode < ldap.ErrorNetwork {
		name := strings.ToLower(ldap.LDAPResultCodeMap[le.ResultCode])
		if name == "" {
			name = "result code"
		}
		msg := ""
		if le.Err != nil && le.Err.Error() != "" {
			msg = ": " + printable(le.Err.Error(), maxReasonReply)
		}
		return &failure{reason: fmt.Sprintf("%s failed: %s (%d)%s", op, name, le.ResultCode, msg), err: err}
	}
	if rerr, werr := rc.errs(); rerr != nil {
		return s.classify(rerr)
	} else if werr != nil {
		return s.classifyWrite(werr)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return &failure{reason: "canceled", err: err}
	}
	return &failure{reason: op + " failed: malformed reply", err: err}
}

// entryContains reports whether one of e's values (or its DN) contains
// want.
func entryContains(e *ldap.Entry, want string) bool {
	if strings.Contains(e.DN, want) {
		return true
	}
	for _, a := range e.Attributes {
		for _, v := range a.Values {
			if strings.Contains(v, want) {
				return true
			}
		}
	}
	return false
}

// ldapConn is the session's bounded connection as handed to the LDAP
// client, which reads and writes from its own goroutines: it records the
// first read and write error, so that a failed request can be told apart
// from a timeout or a reset.
type ldapConn struct {
	net.Conn
	mu         sync.Mutex
	rerr, werr error
}

func (c *ldapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.mu.Lock()
		if c.rerr == nil {
			c.rerr = err
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *ldapConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.mu.Lock()
		if c.werr == nil {
			c.werr = err
		}
		c.mu.Unlock()
	}
	return n, err
}

// errs returns the first read and write errors.
func (c *ldapConn) errs() (rerr, werr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rerr, c.werr
}
