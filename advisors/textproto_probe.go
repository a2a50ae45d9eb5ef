package advisors

// Shared pieces of the line-oriented mail and file-transfer advisors (ftp,
// smtp, pop3, imap): coded replies of the FTP/SMTP family, the greeting's
// failure reasons, the check of an operator's command and expected text,
// and the polite goodbye (QUIT, LOGOUT) after the verdict.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// goodbyeGrace bounds the wait for the reply to QUIT or LOGOUT. The
// verdict is already known by then; the wait only lets the server see an
// orderly end instead of a reset. It never extends the exchange past the
// Target's connect plus receive timeout or the context's deadline.
const goodbyeGrace = 250 * time.Millisecond

// codedReply is a reply of the FTP/SMTP family (RFC 959 section 4.2, RFC
// 5321 section 4.2): a three-digit code and one or more lines of text.
type codedReply struct {
	// code is the reply code, or -1 when the first line does not start
	// with three digits followed by a space, a hyphen or the line's end.
	code int
	// lines are the reply's lines as read, without line ends.
	lines []string
}

// first returns the reply's first line.
func (r codedReply) first() string { return r.lines[0] }

// text returns the reply's lines joined with "\n".
func (r codedReply) text() string { return strings.Join(r.lines, "\n") }

// class returns the first digit of the code (2 for 250), or -1.
func (r codedReply) class() int {
	if r.code < 0 {
		return -1
	}
	return r.code / 100
}

// replyCode parses the code of a reply's first line: "220 text",
// "220-text" or "220". It returns the code, whether the line opens a
// multi-line reply, and whether the line has a code at all.
func replyCode(line string) (code int, multi, ok bool) {
	if len(line) < 3 {
		return 0, false, false
	}
	for i := range 3 {
		if line[i] < '0' || line[i] > '9' {
			return 0, false, false
		}
	}
	if len(line) > 3 && line[3] != ' ' && line[3] != '-' {
		return 0, false, false
	}
	code, _ = strconv.Atoi(line[:3])
	return code, len(line) > 3 && line[3] == '-', true
}

// readCodedReply reads one reply. A multi-line reply ("211-Features:" ...
// "211 End") is read up to its last line, which repeats the code followed
// by a space (or by nothing); lines in between may be anything, as RFC 959
// allows. The session's bounds apply: 4 KiB a line, 64 KiB in total, one
// deadline. A first line without a code is returned with code -1 and no
// error, for the caller to quote.
func readCodedReply(s *session) (codedReply, error) {
	line, err := s.ReadLine()
	if err != nil {
		return codedReply{}, err
	}
	code, multi, ok := replyCode(line)
	if !ok {
		return codedReply{code: -1, lines: []string{line}}, nil
	}
	r := codedReply{code: code, lines: []string{line}}
	if !multi {
		return r, nil
	}
	end := line[:3]
	for {
		line, err := s.ReadLine()
		if err != nil {
			return codedReply{}, err
		}
		r.lines = append(r.lines, line)
		if line == end || strings.HasPrefix(line, end+" ") {
			return r, nil
		}
	}
}

// greetingFailure rewords a classified read error for the greeting: "no
// greeting within 2s" instead of "no reply within 2s", "connection closed
// without greeting", "greeting line longer than 4096 bytes". Other errors
// are returned unchanged.
func greetingFailure(err error) error {
	var f *failure
	if !errors.As(err, &f) {
		return err
	}
	switch {
	case strings.HasPrefix(f.reason, "no reply within "):
		return &failure{reason: "no greeting within " + strings.TrimPrefix(f.reason, "no reply within "), err: err}
	case f.reason == "connection closed without reply":
		return &failure{reason: "connection closed without greeting", err: err}
	case errors.Is(err, errLineTooLong):
		return &failure{reason: fmt.Sprintf("greeting line longer than %d bytes", maxLineBytes), err: err}
	}
	return err
}

// commandLine checks an operator's command (Target.Request) for a
// line-oriented protocol: one line of printable text. It returns the
// command with surrounding spaces removed, or a classified error.
func commandLine(req string) (string, error) {
	req = strings.TrimSpace(req)
	for _, r := range req {
		if r < ' ' || r == 0x7f {
			return "", fail("request %q holds a control character", printable(req, maxReasonReply))
		}
	}
	if req == "" {
		return "", fail("empty request")
	}
	return req, nil
}

// requestCommand returns the command a line-oriented probe sends:
// t.Request checked by commandLine, or def when no request is set.
func requestCommand(t Target, def string) (string, error) {
	if t.Request == "" {
		return def, nil
	}
	return commandLine(t.Request)
}

// checkCommand is CheckRequest of the line-oriented advisors: a request,
// when set, is one line of printable text.
func checkCommand(request string) error {
	if request == "" {
		return nil
	}
	if _, err := commandLine(request); err != nil {
		return fmt.Errorf("advisorrequest: %w", err)
	}
	return nil
}

// commandVerb returns the command's first word, upper-cased ("SYST",
// "EHLO"), for reasons and for choosing how to read its reply.
func commandVerb(cmd string) string {
	verb, _, _ := strings.Cut(cmd, " ")
	return strings.ToUpper(verb)
}

// expectText checks Target.Response against the server's text read up to
// the verdict (greeting and replies, lines joined with "\n"): an empty
// want always matches; otherwise the text must contain want, case
// sensitively. The error is a classified down reason.
func expectText(transcript []string, want string) error {
	if want == "" {
		return nil
	}
	if strings.Contains(strings.Join(transcript, "\n"), want) {
		return nil
	}
	return fail("reply does not contain %q", printable(want, maxReasonReply))
}

// goodbye sends cmd (with CRLF) and waits briefly for lines until done
// reports the end of the reply, the grace ends, or the server closes. Its
// outcome is ignored: it runs after the verdict, only to close politely.
// The wait ends by goodbyeGrace from now, and never later than the
// exchange's own bound (start + connect + receive timeout) or ctx's
// deadline.
func goodbye(ctx context.Context, s *session, t Target, cmd string, done func(line string) bool) {
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	dl := now.Add(goodbyeGrace)
	if limit := now.Add(t.ConnectTimeoutOrDefault() + t.ReceiveTimeoutOrDefault() - s.Elapsed()); limit.Before(dl) {
		dl = limit
	}
	if cdl, ok := ctx.Deadline(); ok && cdl.Before(dl) {
		dl = cdl
	}
	if !time.Now().Before(dl) {
		return
	}
	if err := s.WriteString(cmd + "\r\n"); err != nil {
		return
	}
	// Nothing more will be sent: say so at once (see CloseWrite).
	s.CloseWrite()
	_ = s.Conn().SetReadDeadline(dl)
	for {
		line, err := s.ReadLine()
		if err != nil || done(line) {
			return
		}
	}
}

// localLiteral returns the session's local address as an address literal
// for SMTP's EHLO/HELO ("[192.0.2.1]", "[IPv6:2001:db8::1]"), as RFC 5321
// section 4.1.3 asks of a client without a host name of its own.
func localLiteral(s *session) string {
	if a, ok := s.Conn().LocalAddr().(*net.TCPAddr); ok {
		if ap := a.AddrPort(); ap.Addr().IsValid() {
			ip := ap.Addr().Unmap().WithZone("")
			if ip.Is4() {
				return "[" + ip.String() + "]"
			}
			return "[IPv6:" + ip.String() + "]"
		}
	}
	return "[127.0.0.1]"
}
