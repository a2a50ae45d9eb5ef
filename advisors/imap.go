package advisors

import (
	"context"
	"strconv"
	"strings"
)

// imapAdvisor is IBM's imap advisor: it reads the server's greeting,
// optionally sends one command, then says LOGOUT. It never logs in.
//
//   - Default port 143.
//   - Up when the greeting is "* OK ..." or "* PREAUTH ..." (RFC 9051
//     section 7.1; the status word is case-insensitive). "* BYE" is down.
//   - Request, if set, is a command without its tag (for example
//     "CAPABILITY" or "NOOP"; one line without control characters). It is
//     sent as "a1 <Request>"; untagged lines (and literals in them) are
//     read up to the tagged reply, which must be "a1 OK". A command
//     continuation request ("+ ...") is down: the probe sends no more.
//   - Response, if set, must occur in the server's text read up to the
//     verdict (greeting and replies, lines joined with "\n"), case
//     sensitively: "Dovecot", "IMAP4rev1", "STARTTLS".
//   - Load is the time from the start of the connect to the greeting (or
//     to the tagged reply to Request); the LOGOUT that follows (reply
//     awaited at most 250 ms) is not counted.
//
// Down reasons include "connect refused", "no greeting within 2s",
// "greeting \"* BYE ...\" is not * OK or * PREAUTH", "reply \"a1 BAD
// ...\" to NOOP is not OK" and "reply does not contain \"...\"".
type imapAdvisor struct{}

func init() { register("imap", func() Advisor { return imapAdvisor{} }) }

// Name implements Advisor.
func (imapAdvisor) Name() string { return "imap" }

// DefaultPort implements Advisor: 143.
func (imapAdvisor) DefaultPort() uint16 { return 143 }

// CheckRequest implements RequestChecker (checkCommand).
func (imapAdvisor) CheckRequest(request, _ string) error { return checkCommand(request) }

// Probe implements Advisor.
func (a imapAdvisor) Probe(ctx context.Context, t Target) Result {
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
	if st := imapStatus(greeting, "*"); st != "OK" && st != "PREAUTH" {
		return Down("greeting %s is not * OK or * PREAUTH", quoteReply(greeting))
	}
	transcript := []string{greeting}

	res := s.Up()
	logoutTag := "a1"
	if cmd != "" {
		logoutTag = "a2"
		if err := s.WriteString("a1 " + cmd + "\r\n"); err != nil {
			return down(err)
		}
		verb := commandVerb(cmd)
		for {
			line, err := s.ReadLine()
			if err != nil {
				return down(err)
			}
			transcript = append(transcript, line)
			if strings.HasPrefix(line, "+") {
				res = Down("reply %s to %s asks for more input", quoteReply(line), verb)
				break
			}
			if st := imapStatus(line, "a1"); st != "" {
				res = s.Up()
				if st != "OK" {
					res = Down("reply %s to %s is not OK", quoteReply(line), verb)
				}
				break
			}
			if n, ok := imapLiteral(line); ok {
				if n > maxReplyBytes {
					return down(&failure{reason: errReplyTooLarge.Error(), err: errReplyTooLarge})
				}
				lit, err := s.ReadAtMost(n)
				if err != nil {
					return down(err)
				}
				transcript = append(transcript, string(lit))
			}
		}
	}
	if res.Up {
		if err := expectText(transcript, t.Response); err != nil {
			res = down(err)
		}
	}
	goodbye(ctx, s, t, logoutTag+" LOGOUT", func(line string) bool {
		return imapStatus(line, logoutTag) != ""
	})
	return res
}

// imapStatus returns the upper-cased status word ("OK", "NO", "BAD",
// "PREAUTH", "BYE") of a response line that starts with tag ("*" for an
// untagged line), or "" if the line has another tag.
func imapStatus(line, tag string) string {
	rest, ok := strings.CutPrefix(line, tag+" ")
	if !ok {
		return ""
	}
	word, _, _ := strings.Cut(rest, " ")
	return strings.ToUpper(word)
}

// imapLiteral reports whether line ends with a literal's length ("{12}",
// "{12+}", "~{12}"), and returns the length.
func imapLiteral(line string) (int, bool) {
	body, ok := strings.CutSuffix(line, "}")
	if !ok {
		return 0, false
	}
	i := strings.LastIndexByte(body, '{')
	if i < 0 {
		return 0, false
	}
	digits := strings.TrimSuffix(body[i+1:], "+")
	if digits == "" || len(digits) > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
