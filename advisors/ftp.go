package advisors

import "context"

// ftpAdvisor is IBM's ftp advisor: it reads the server's greeting, sends
// one command (SYST by default, as IBM's advisor does) and checks the
// reply, then says QUIT.
//
//   - Default port 21.
//   - Up when the greeting is a 220 reply (a 120 "ready in n minutes"
//     reply may come first) and the reply to the command is positive (2xx
//     or 3xx) or 530 "not logged in". 530 counts as up because many
//     servers, vsftpd among them, refuse every command but USER, PASS,
//     FEAT, OPTS and QUIT before a login; the server answered from its
//     command loop, which is what the probe checks. A server that must
//     answer SYST with 215 can be held to it with Response "215 ".
//   - Request replaces SYST by another command line (for example "FEAT"
//     or "NOOP"); it must be one line without control characters.
//   - Response, if set, must occur in the server's text read up to the
//     verdict (greeting and reply, lines joined with "\n"), case
//     sensitively, in addition to the code rule above.
//   - Load is the time from the start of the connect to the reply to the
//     command; the QUIT that follows (reply awaited at most 250 ms) is not
//     counted.
//
// Down reasons include "connect refused", "no greeting within 2s",
// "greeting \"421 ...\" is not 220", "reply \"500 ...\" to SYST is not
// 2xx, 3xx or 530", "no reply within 2s" and "reply does not contain
// \"...\"".
type ftpAdvisor struct{}

func init() { register("ftp", func() Advisor { return ftpAdvisor{} }) }

// Name implements Advisor.
func (ftpAdvisor) Name() string { return "ftp" }

// DefaultPort implements Advisor: 21.
func (ftpAdvisor) DefaultPort() uint16 { return 21 }

// CheckRequest implements RequestChecker (checkCommand).
func (ftpAdvisor) CheckRequest(request, _ string) error { return checkCommand(request) }

// Probe implements Advisor.
func (a ftpAdvisor) Probe(ctx context.Context, t Target) Result {
	cmd, err := requestCommand(t, "SYST")
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
	transcript := []string{greeting.text()}
	if greeting.code == 120 {
		// RFC 959: "120 Service ready in nnn minutes", then 220.
		if greeting, err = readCodedReply(s); err != nil {
			return down(greetingFailure(err))
		}
		transcript = append(transcript, greeting.text())
	}
	if greeting.code != 220 {
		return Down("greeting %s is not 220", quoteReply(greeting.first()))
	}

	if err := s.WriteString(cmd + "\r\n"); err != nil {
		return down(err)
	}
	reply, err := readCodedReply(s)
	if err != nil {
		return down(err)
	}
	transcript = append(transcript, reply.text())
	res := s.Up()
	if c := reply.class(); c != 2 && c != 3 && reply.code != 530 {
		res = Down("reply %s to %s is not 2xx, 3xx or 530", quoteReply(reply.first()), commandVerb(cmd))
	} else if err := expectText(transcript, t.Response); err != nil {
		res = down(err)
	}
	goodbye(ctx, s, t, "QUIT", endOfCodedReply)
	return res
}

// endOfCodedReply reports whether line can end an FTP/SMTP reply: a code
// followed by a space or by nothing.
func endOfCodedReply(line string) bool {
	_, multi, ok := replyCode(line)
	return ok && !multi
}
