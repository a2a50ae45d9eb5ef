package advisors

import "context"

// sslAdvisor is IBM's ssl advisor: it connects, completes a TLS handshake
// (no certificate verification, SNI = Target.Host, TLS 1.0 and later
// accepted) and closes the connection without sending application data.
// Load is the time of connect plus handshake. Request and Response are
// ignored. Down reasons are dial's ("connect refused", "connect timeout
// after 2s", ...) and "TLS handshake timeout after 2s" or "TLS handshake
// failed: ...". Default port 443.
type sslAdvisor struct{}

func init() { register("ssl", func() Advisor { return sslAdvisor{} }) }

// Name implements Advisor.
func (sslAdvisor) Name() string { return "ssl" }

// DefaultPort implements Advisor: 443.
func (sslAdvisor) DefaultPort() uint16 { return 443 }

// Probe implements Advisor.
func (a sslAdvisor) Probe(ctx context.Context, t Target) Result {
	t = withDefaultPort(t, a.DefaultPort())
	s, err := dialTLS(ctx, t, tlsConfig(t))
	if err != nil {
		return down(err)
	}
	res := s.Up()
	s.Close()
	return res
}
