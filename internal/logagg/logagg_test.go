package logagg

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// clock is a settable time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestHandler(t *testing.T) {
	type step struct {
		advance time.Duration
		level   slog.Level
		msg     string
		flush   bool
	}
	warn := func(msg string) step { return step{level: slog.LevelWarn, msg: msg} }
	repeat := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		steps []step
		// want lists the messages written, in order ("X (repeated) n"
		// for a summary of n records).
		want []string
	}{
		{"below the burst all pass", repeat(3, warn("a")), []string{"a", "a", "a"}},
		{"beyond the burst a summary at flush",
			cat(repeat(1000, warn("a")), []step{{advance: 10 * time.Second, flush: true}}),
			[]string{"a", "a", "a", "a", "a", "a (repeated) 995"}},
		{"no summary before the interval ends",
			cat(repeat(8, warn("a")), []step{{advance: 9 * time.Second, flush: true}}),
			[]string{"a", "a", "a", "a", "a"}},
		{"kinds counted apart",
			cat(repeat(7, warn("a")), repeat(6, warn("b")), []step{{advance: 11 * time.Second, flush: true}}),
			[]string{"a", "a", "a", "a", "a", "b", "b", "b", "b", "b", "a (repeated) 2", "b (repeated) 1"}},
		{"info is never held", repeat(7, step{level: slog.LevelInfo, msg: "i"}), []string{"i", "i", "i", "i", "i", "i", "i"}},
		{"the next interval's first record writes the summary",
			cat(repeat(6, warn("a")), []step{{advance: 10 * time.Second, level: slog.LevelWarn, msg: "a"}}),
			[]string{"a", "a", "a", "a", "a", "a (repeated) 1", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := &clock{t: time.Unix(1000, 0)}
			h := New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
						return slog.Attr{}
					}
					return a
				}}), Options{Now: c.now})
			log := slog.New(h).With("k", "v")
			for i, s := range tt.steps {
				c.t = c.t.Add(s.advance)
				if s.flush {
					h.Flush()
					continue
				}
				log.Log(t.Context(), s.level, s.msg, "i", i)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if line == "" {
					continue
				}
				msg := strings.TrimPrefix(strings.Fields(line)[0], "msg=")
				if strings.Contains(line, "(repeated)") {
					n := ""
					for _, f := range strings.Fields(line) {
						if v, ok := strings.CutPrefix(f, "suppressed="); ok {
							n = v
						}
					}
					msg = strings.Trim(strings.SplitN(line, "msg=", 2)[1][:len(`"x (repeated)"`)], `"`) + " " + n
					if !strings.Contains(line, "k=v") || !strings.Contains(line, "last.i=") {
						t.Errorf("summary %q lacks the handler's or the held record's attributes", line)
					}
				}
				got = append(got, msg)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("written:\n%s\nwant %q", buf.String(), tt.want)
			}
		})
	}
}
