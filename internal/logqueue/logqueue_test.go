package logqueue

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// gate is an output that blocks every write until opened, as a pipe
// whose reader stopped.
type gate struct {
	testutil.LogBuffer
	open chan struct{}
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	return g.LogBuffer.Write(p)
}

// TestWriter: lines reach the output in order; while the output is stuck
// only the first writer waits (its wait) and the lines beyond the bound
// are dropped; the output says, where lines are missing, how many.
func TestWriter(t *testing.T) {
	for _, c := range []struct {
		name  string
		stuck bool
		lines int
		max   int
		kept  int // at least; at most twice as many and one (a batch in flight, the queue behind it)
		wait  time.Duration
	}{
		// A wait no scheduling delay reaches: each Write returns
		// with its line out.
		{"output keeps up", false, 100, 1 << 20, 100, 10 * time.Second},
		{"output stuck", true, 100, 10 * 8, 10, 20 * time.Millisecond}, // each line is 8 bytes
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &gate{open: make(chan struct{})}
			if !c.stuck {
				close(g.open)
			}
			w := New(g, Options{Max: c.max, Wait: c.wait})
			start := time.Now()
			for i := range c.lines {
				if _, err := fmt.Fprintf(w, "line %02d\n", i); err != nil {
					t.Fatal(err)
				}
				// While the output keeps up, a line is out when its
				// Write returns, as a direct write's would be.
				if want := fmt.Sprintf("line %02d\n", i); !c.stuck && !strings.HasSuffix(g.String(), want) {
					t.Fatalf("Write of %q returned before the line was written", want)
				}
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("%d writes took %v", c.lines, took)
			}
			dropped := int(w.Dropped())
			if c.stuck {
				if dropped < c.lines-2*c.kept-1 || dropped > c.lines-c.kept {
					t.Errorf("dropped %d of %d while stuck, holding %d bytes at most", dropped, c.lines, c.max)
				}
				close(g.open)
			} else if dropped != 0 {
				t.Errorf("dropped %d, the output keeping up", dropped)
			}
			if !w.Close(5 * time.Second) {
				t.Fatal("Close: the queued lines were not written")
			}
			// Walk the output: kept lines ascending, each gap told
			// where it is, with its size.
			out := g.String()
			lineRE := regexp.MustCompile(`^line (\d\d)$`)
			noticeRE := regexp.MustCompile(`^time=\S+ level=WARN msg="log lines dropped: the log's reader did not keep up" dropped=(\d+) since_start=(\d+)$`)
			next, told, pending, kept := 0, 0, 0, 0
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if m := lineRE.FindStringSubmatch(l); m != nil {
					n, _ := strconv.Atoi(m[1])
					if n-next != pending {
						t.Fatalf("line %d follows line %d with %d told dropped between:\n%s", n, next-1, pending, out)
					}
					next, pending = n+1, 0
					kept++
					continue
				}
				m := noticeRE.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("unexpected output line %q:\n%s", l, out)
				}
				n, _ := strconv.Atoi(m[1])
				total, _ := strconv.Atoi(m[2])
				pending += n
				told += n
				if total != told {
					t.Errorf("since_start=%d, want %d", total, told)
				}
			}
			if c.lines-next != pending {
				t.Errorf("%d lines missing at the end, %d told", c.lines-next, pending)
			}
			if told != dropped || kept+dropped != c.lines || kept < c.kept {
				t.Errorf("kept %d, told %d dropped, counted %d, of %d lines", kept, told, dropped, c.lines)
			}
		})
	}
}

// TestCloseStuck: Close gives up after its timeout when the output is
// stuck, and lines written after Close are dropped, not queued.
func TestCloseStuck(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	defer close(g.open)
	w := New(g, Options{Wait: 20 * time.Millisecond})
	start0 := time.Now()
	fmt.Fprintln(w, "held")
	// The first line waits its 20 ms, the next ones not at all.
	if took := time.Since(start0); took < 20*time.Millisecond || took > time.Second {
		t.Errorf("the first Write to a stuck output returned after %v, want its 20ms wait", took)
	}
	start1 := time.Now()
	for range 100 {
		fmt.Fprintln(w, "queued")
	}
	if took := time.Since(start1); took > 100*time.Millisecond {
		t.Errorf("100 Writes behind a stuck one took %v: they waited", took)
	}
	start := time.Now()
	if w.Close(100 * time.Millisecond) {
		t.Error("Close reported the lines written, the output being stuck")
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 2*time.Second {
		t.Errorf("Close returned after %v, want its 100ms timeout", took)
	}
	before := w.Dropped()
	fmt.Fprintln(w, "after close")
	if w.Dropped() != before+1 {
		t.Errorf("a line after Close was not dropped: %d, then %d", before, w.Dropped())
	}
}

// TestFormat: the formats the daemons take, the drop notice in the
// format of the other lines, and a clear refusal of another.
func TestFormat(t *testing.T) {
	for _, c := range []struct {
		name, want string
	}{
		{"text", `level=WARN msg="log lines dropped: the log's reader did not keep up" dropped=1 since_start=1`},
		{"json", `"level":"WARN","msg":"log lines dropped: the log's reader did not keep up","dropped":1,"since_start":1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := Format(c.name, nil)
			if err != nil {
				t.Fatal(err)
			}
			g := &gate{open: make(chan struct{})}
			close(g.open)
			w := New(g, Options{Max: 10, Handler: h})
			fmt.Fprintln(w, "a line longer than ten bytes")
			w.Close(5 * time.Second)
			if !strings.Contains(g.String(), c.want) {
				t.Errorf("output %q lacks %q", g.String(), c.want)
			}
		})
	}
	if _, err := Format("xml", nil); err == nil || err.Error() != `"xml" is not a log format: text or json` {
		t.Errorf("Format(xml): %v", err)
	}
}
