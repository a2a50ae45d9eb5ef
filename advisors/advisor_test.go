package advisors

import "testing"

// TestNewUnknown: an unknown advisor's error suggests the known one it
// was likely meant to be, and lists them all.
func TestNewUnknown(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"htp", `unknown advisor "htp" (did you mean "http"?); known: cluster, connect, dns, ftp, http, https, imap, ldap, ping, pop3, smtp, ssl`},
		{"gopher", `unknown advisor "gopher"; known: cluster, connect, dns, ftp, http, https, imap, ldap, ping, pop3, smtp, ssl`},
	} {
		if _, err := New(c.name); err == nil || err.Error() != c.want {
			t.Errorf("New(%q): %v, want %s", c.name, err, c.want)
		}
	}
	if a, err := New("http"); err != nil || a == nil {
		t.Errorf("New(http): %v, %v", a, err)
	}
}
