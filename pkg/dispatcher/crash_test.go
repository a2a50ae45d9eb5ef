package dispatcher

import (
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// crashPoint is what a dlbd killed at one moment leaves: its state
// directory's files and the host's addresses as they were then.
type crashPoint struct {
	files     map[string][]byte
	addresses map[netip.Addr]string
}

// takeCrashPoint copies h's state directory and, with h.nif.mu held (as
// afterAdd is called), its addresses.
func takeCrashPoint(t *testing.T, h *harness) *crashPoint {
	t.Helper()
	c := &crashPoint{files: map[string][]byte{}, addresses: maps.Clone(h.nif.addresses)}
	entries, err := os.ReadDir(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		if !de.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(h.dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		c.files[de.Name()] = b
	}
	return c
}

// restartFrom stops h's dlbd and starts another over the state directory
// and the host's addresses as c has them: as after a kill at c.
func (h *harness) restartFrom(c *crashPoint) {
	h.t.Helper()
	h.stop()
	entries, err := os.ReadDir(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, de := range entries {
		if err := os.RemoveAll(filepath.Join(h.dir, de.Name())); err != nil {
			h.t.Fatal(err)
		}
	}
	for name, b := range c.files {
		if err := os.WriteFile(filepath.Join(h.dir, name), b, 0o600); err != nil {
			h.t.Fatal(err)
		}
	}
	h.nif.mu.Lock()
	h.nif.addresses = maps.Clone(c.addresses)
	h.nif.mu.Unlock()
	h.start()
}

// TestRestartTakesOffAnAddressNeverSaved: a dlbd killed after it put a
// new cluster's address on and before the change was saved left the host
// answering for an address recorded nowhere, for good. The address is
// journaled before it goes on: the restart takes it off (the saved
// configuration does not have the cluster). One the host had before (the
// operator's) is not dlbd's to take off, except under high availability.
func TestRestartTakesOffAnAddressNeverSaved(t *testing.T) {
	const added = "198.18.0.101"
	for _, tc := range []struct {
		name string
		// before: the host has the address before the change.
		before bool
		// ha: the dispatcher is the active of a pair.
		ha bool
	}{
		{name: "put on by the change"},
		{name: "the operator's", before: true},
		{name: "under high availability", ha: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h *harness
			if tc.ha {
				_, h = activePrimary(t)
			} else {
				h = newHarness(t, t.TempDir())
				base(h)
			}
			a := netip.MustParseAddr(added)
			if tc.before {
				h.nif.mu.Lock()
				h.nif.addresses[a] = "eth0"
				h.nif.mu.Unlock()
			}
			h.nif.mu.Lock()
			pre, putOn := takeCrashPoint(t, h), false
			var crash *crashPoint
			h.nif.afterAdd = func(got netip.Addr) {
				if got == a && crash == nil {
					putOn = true
					crash = takeCrashPoint(t, h)
				}
			}
			h.nif.mu.Unlock()
			h.mustApply(op("cluster", "add", added, "configure", "yes"), op("port", "add", added+"@80"))
			h.nif.mu.Lock()
			h.nif.afterAdd = nil
			if crash == nil {
				// Not put on (the host had it): killed once the
				// change had it, before its record was saved.
				crash = &crashPoint{files: pre.files, addresses: maps.Clone(h.nif.addresses)}
			}
			h.nif.mu.Unlock()
			if putOn == tc.before {
				t.Fatalf("the change put the address on: %v, want %v", putOn, !tc.before)
			}
			if on := crash.addresses[a]; on != "eth0" {
				t.Fatalf("at the kill the address is on %q, want eth0", on)
			}
			h.restartFrom(crash)
			if cfg := h.config(); cfg.Cluster(a) != nil {
				t.Fatal("the cluster of a change never saved is in the configuration after the restart")
			}
			if got, want := h.nif.has(added), tc.before; got != want {
				t.Errorf("after the restart the address is on: %v, want %v", got, want)
			}
			if !h.nif.has(vip) {
				t.Error("the saved cluster's address is off after the restart")
			}
		})
	}
}

// TestHARestartTakesOffAFastTakeoversAddresses: a dlbd killed after a
// takeover's fast path put the group's addresses on and before the engine
// journaled anything left them on a dispatcher that restarts standing by:
// the host would answer for them beside the active. The restart takes
// them off; one that resumes the group active keeps them.
func TestHARestartTakesOffAFastTakeoversAddresses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume lb.HAState // what the function decides at the restart
	}{
		{name: "standing by", resume: lb.HAStandby},
		{name: "active", resume: lb.HAActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, f := haNATSetup(t)
			h.restart() // the journal has the host as it stands by: no address on
			unblock := blockEngine(t, h)
			f.set(lb.GroupLocal, lb.HAActive)
			eventually(t, "addresses on while the engine is busy", func() bool { return h.nif.has(vip) && h.nif.has("198.18.0.3") })
			h.nif.mu.Lock()
			crash := takeCrashPoint(t, h)
			h.nif.mu.Unlock()
			f.mu.Lock()
			f.states[lb.GroupLocal] = tc.resume
			f.mu.Unlock()
			unblock()
			h.restartFrom(crash)
			want := tc.resume == lb.HAActive
			eventually(t, "the addresses as the group's state wants them", func() bool {
				return h.nif.has(vip) == want && h.nif.has("198.18.0.3") == want
			})
			if tc.resume == lb.HAActive {
				f.set(lb.GroupLocal, lb.HAStandby)
				eventually(t, "the addresses off once standing by", func() bool { return !h.nif.has(vip) && !h.nif.has("198.18.0.3") })
			}
		})
	}
}
