package advisors

import "context"

// connectAdvisor is IBM's connect advisor: it opens a TCP connection to the
// server and closes it at once. Load is the connect time. Request and
// Response are ignored. It has no default port: the Target's Port is used,
// and a zero Port is down with reason "no port".
type connectAdvisor struct{}

func init() { register("connect", func() Advisor { return connectAdvisor{} }) }

// Name implements Advisor.
func (connectAdvisor) Name() string { return "connect" }

// DefaultPort implements Advisor: none.
func (connectAdvisor) DefaultPort() uint16 { return 0 }

// Probe implements Advisor.
func (connectAdvisor) Probe(ctx context.Context, t Target) Result {
	s, err := dial(ctx, t)
	if err != nil {
		return down(err)
	}
	res := s.Up()
	s.Close()
	return res
}
