package advisors

import (
	"context"
	"strings"
)

// pop3Advisor is IBM's pop3 advisor: it reads the server's greeting,
// optionally sends one command, then says QUIT. It never logs in.
//
//   - Default port 110.
//   - Up when the greeting is "+OK", alone or followed by a space and
//     text (RFC 1939 sections 3 and 4).
//   - Request, if set, is a command sent after the greeting (one line
//     without control characters; in the AUTHORIZATION state that is
//     CAPA, or NOOP-like commands a server allows there); the first line
//     of its reply must be "+OK" in the same way. The replies of CAPA
//     and of a bare AUTH are multi-line and are read up to their "."
//     line.
//   - Response, if set, must occur in the server's text read up to the
//     verdict (greeting and reply, lines joined with "\n"), case
//     sensitively: "Dovecot", or a capability such as "STLS".
//   - Load is the time from the start of the connect to the greeting (or
//     to the end of the reply to Request); the QUIT that follows (reply
//     awaited at most 250 ms) is not counted.
//
// Down reasons include "connect refused", "no greeting within 2s",
// "greeting \"-ERR ...\" is not +OK", "reply \"-ERR ...\" to CAPA is not
// +OK" and "reply does not contain \"...\"".
type pop3Advisor struct{}

func init() { register("pop3", func() Advisor { return pop3Advisor{} }) }

// Name implements Advisor.
func (pop3Advisor) Name() string { return "pop3" }

// DefaultPort implements Advisor: 110.
func (pop3Advisor) DefaultPort() uint16 { return 110 }

// CheckRequest implements RequestChecker (checkCommand).
func (pop3Advisor) CheckRequest(request, _ string) error { return checkCommand(request) }

// Probe implements Advisor.
func (a pop3Advisor) Probe(ctx context.Context, t Target) Result {
	cmd, err := requestCommand(t, "")
	if err != nil {
		return down(err)
	}
	t = withDefaultPort(t, a.DefaultPort())
	s, err := dial(ctx, t)
	if err != nil {
		return down(err)
	}
	defer s.Close()

	greeting, err := s.ReadLine()
	if err != nil {
		return down(greetingFailure(err))
	}
	if !pop3OK(greeting) {
		return Down("greeting %s is not +OK", quoteReply(greeting))
	}
	transcript := []string{greeting}

	res := s.Up()
	if cmd != "" {
		if err := s.WriteString(cmd + "\r\n"); err != nil {
			return down(err)
		}
		first, err := s.ReadLine()
		if err != nil {
			return down(err)
		}
		transcript = append(transcript, first)
		verb := commandVerb(cmd)
		ok := pop3OK(first)
		if ok && (verb == "CAPA" || cmd == verb && verb == "AUTH") {
			// Multi-line: lines up to "." (RFC 1939 section 3), with
			// byte-stuffed lines un-stuffed.
			for {
				line, err := s.ReadLine()
				if err != nil {
					return down(err)
				}
				if line == "." {
					break
				}
				transcript = append(transcript, strings.TrimPrefix(line, "."))
			}
		}
		res = s.Up()
		if !ok {
			res = Down("reply %s to %s is not +OK", quoteReply(first), verb)
		}
	}
	if res.Up {
		if err := expectText(transcript, t.Response); err != nil {
			res = down(err)
		}
	}
	goodbye(ctx, s, t, "QUIT", func(string) bool { return true })
	return res
}

// pop3OK reports whether line is a positive status: "+OK" alone or
// followed by a space (or tab) and text.
func pop3OK(line string) bool {
	rest, ok := strings.CutPrefix(line, "+OK")
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t')
}
