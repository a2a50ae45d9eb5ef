package advisors

import (
	"slices"
	"testing"
)

// TestRegistry checks that every registered advisor's Name is unique and
// matches its registry key, that Names lists them sorted, and that the
// advisors this file's author owns are there.
func TestRegistry(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) {
		t.Errorf("Names() = %v, not sorted", names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		a, err := New(n)
		if err != nil {
			t.Fatalf("New(%q): %v", n, err)
		}
		if a.Name() != n {
			t.Errorf("New(%q).Name() = %q", n, a.Name())
		}
		if seen[a.Name()] {
			t.Errorf("advisor name %q registered twice", a.Name())
		}
		seen[a.Name()] = true
	}
	if len(names) != len(registry) {
		t.Errorf("Names() has %d entries, registry %d", len(names), len(registry))
	}
	want := map[string]uint16{"connect": 0, "http": 80, "https": 443, "ssl": 443, "dns": 53, "ping": 0}
	for n, port := range want {
		a, err := New(n)
		if err != nil {
			t.Errorf("New(%q): %v", n, err)
			continue
		}
		if a.DefaultPort() != port {
			t.Errorf("%s.DefaultPort() = %d, want %d", n, a.DefaultPort(), port)
		}
	}
	// exec needs a program, so it is not in the registry.
	if _, err := New("exec"); err == nil {
		t.Errorf(`New("exec") succeeded; exec advisors are built as Exec{...}`)
	}
	if _, err := New("no-such-advisor"); err == nil {
		t.Errorf(`New("no-such-advisor") succeeded`)
	}
	var _ Advisor = Exec{}
	var _ Advisor = &Exec{}
	if (Exec{}).Name() == "" || seen[(Exec{}).Name()] {
		t.Errorf("Exec.Name() %q is empty or clashes with a registered advisor", (Exec{}).Name())
	}
}
