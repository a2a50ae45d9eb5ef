package dispatcher

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
)

// Next hops that cannot be looked up (no route, reached through a gateway,
// the host's own) are kept by a change that starts the executor, which
// says so; the executor report names them while they last, counts those
// beyond maxHopProblems, and says when a hop is still sent to at its last
// known MAC.
func TestUnreachableHopsWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	const key = "cannot be looked up"
	start := func() []string {
		t.Helper()
		a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "start", "")})
		if err != nil {
			t.Fatalf("executor start: %v", err)
		}
		var w []string
		for _, s := range a.Warnings {
			if strings.Contains(s, key) {
				w = append(w, s)
			}
		}
		return w
	}
	offLink := func(on bool, addrs ...string) {
		h.nif.mu.Lock() // the engine reads it on its goroutine
		defer h.nif.mu.Unlock()
		for _, a := range addrs {
			if on {
				h.nif.offLink[netip.MustParseAddr(a)] = true
			} else {
				delete(h.nif.offLink, netip.MustParseAddr(a))
			}
		}
	}
	var bad []string
	for i := 1; i <= maxHopProblems+2; i++ {
		bad = append(bad, fmt.Sprintf("198.18.9.%d", i))
	}
	offLink(true, bad...)

	h.mustApply(op("executor", "stop", ""), op("server", "add", vip+"@80@"+bad[0]))
	want := "server 198.18.9.1 cannot be looked up (198.18.9.1 is not on a directly connected network): it takes no connections"
	if w := start(); !slices.Equal(w, []string{want}) {
		t.Errorf("executor start warned %q; want %q", w, want)
	}
	if w := h.executorWarnings(key); !slices.Equal(w, []string{want}) {
		t.Errorf("executor report warns %q; want %q", w, want)
	}

	h.mustApply(op("executor", "stop", ""), op("server", "add", vip+"@80@"+strings.Join(bad[1:], "+")))
	w := start()
	if len(w) != maxHopProblems+1 || !strings.HasPrefix(w[0], "server 198.18.9.1 ") || w[maxHopProblems] != "2 more next hops cannot be looked up (dlbd's log says why)" {
		t.Errorf("executor start with %d such servers warned %q", len(bad), w)
	}

	offLink(false, bad...)
	eventually(t, "the warnings to go once the hops are reached", func() bool { return len(h.executorWarnings(key)) == 0 })

	// A route lost under the running executor: the server keeps its MAC.
	offLink(true, s1.String())
	want = "server 198.18.0.21 cannot be looked up (198.18.0.21 is not on a directly connected network): the executor goes on sending to its last known MAC, " +
		"02:00:00:00:00:15"
	eventually(t, "the lost route reported", func() bool { return slices.Equal(h.executorWarnings(key), []string{want}) })
	offLink(false, s1.String())
	eventually(t, "the route's warning to go", func() bool { return len(h.executorWarnings(key)) == 0 })
}
