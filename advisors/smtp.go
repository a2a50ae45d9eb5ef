package advisors

import "context"

// smtpAdvisor is IBM's smtp advisor: it reads the server's greeting, says
// EHLO (HELO if the server does not know EHLO), checks the reply, then
// says QUIT. No mail is sent.
//
//   - Default port 25.
//   - Up when the greeting is a 220 reply and the reply to EHLO is 250;
//     when EHLO gets a 5xx reply (an RFC 821 server that does not know
//     it), HELO is sent and its reply must be 250. The greeting name is
//     the probe's own address as an address literal ("[192.0.2.1]"), as
//     RFC 5321 section 4.1.3 asks of a client without a host name.
//   - Request replaces EHLO by another command line (for example "NOOP"
//     or "HELO lb1.example.com"), whose reply must be 2xx; it must be one
//     line without control characters. There is no HELO fallback then.
//   - Response, if set, must occur in the server's text read up to the
//     verdict (greeting and replies, lines joined with "\n"), case
//     sensitively, in addition to the code rule above: "ESMTP",
//     "PIPELINING", the server's name.
//   - Load is the time from the start of the connect to the reply to
//     EHLO (or HELO, or Request); the QUIT that follows (reply awaited at
//     most 250 ms) is not counted.
//
// Down reasons include "connect refused", "no greeting within 2s",
// "greeting \"554 ...\" is not 220", "reply \"421 ...\" to EHLO is not
// 250", "no reply within 2s" and "reply does not contain \"...\"".
type smtpAdvisor struct{}

func init() { register("smtp", func() Advisor { return smtpAdvisor{} }) }

// Name implements Advisor.
func (smtpAdvisor) Name() string { return "smtp" }

// DefaultPort implements Advisor: 25.
func (smtpAdvisor) DefaultPort() uint16 { return 25 }

// CheckRequest implements RequestChecker (checkCommand).
func (smtpAdvisor) CheckRequest(request, _ string) error { return checkCommand(request) }

// Probe implements Advisor.
func (a smtpAdvisor) Probe(ctx context.Context, t Target) Result {
	custom, err := requestCommand(t, "")
	if err != nil {
		return down(err)
	}
	t = withDefaultPort(t, a.DefaultPort())
	s, err := dial(ctx, t)
	if err != nil {
		return down(err)
	}
	defer s.Close()

	greeting, err := readCodedReply(s)
	if err != nil {
		return down(greetingFailure(err))
	}
	if greeting.code != 220 {
		return Down("greeting %s is not 220", quoteReply(greeting.first()))
	}
	transcript := []string{greeting.text()}

	send := func(cmd string) (codedReply, error) {
		if err := s.WriteString(cmd + "\r\n"); err != nil {
			return codedReply{}, err
		}
		r, err := readCodedReply(s)
		if err != nil {
			return codedReply{}, err
		}
		transcript = append(transcript, r.text())
		return r, nil
	}

	var res Result
	if custom != "" {
		reply, err := send(custom)
		if err != nil {
			return down(err)
		}
		res = s.Up()
		if reply.class() != 2 {
			res = Down("reply %s to %s is not 2xx", quoteReply(reply.first()), commandVerb(custom))
		}
	} else {
		name := localLiteral(s)
		verb := "EHLO"
		reply, err := send("EHLO " + name)
		if err == nil && reply.class() == 5 {
			verb = "HELO"
			reply, err = send("HELO " + name)
		}
		if err != nil {
			return down(err)
		}
		res = s.Up()
		if reply.code != 250 {
			res = Down("reply %s to %s is not 250", quoteReply(reply.first()), verb)
		}
	}
	if res.Up {
		if err := expectText(transcript, t.Response); err != nil {
			res = down(err)
		}
	}
	goodbye(ctx, s, t, "QUIT", endOfCodedReply)
	return res
}
