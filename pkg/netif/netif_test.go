//go:build linux

package netif

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedLinkByNameMissing: a name the host has no interface of is
// ErrNoInterface, and the error names the Ethernet interfaces there are
// (not lo), at most maxNamesShown of them.
func TestPrivilegedLinkByNameMissing(t *testing.T) {
	testutil.RequirePrivileged(t)
	pair(t, testutil.InNewNetNS(t))
	n := New()
	if l, err := n.LinkByName("dlbhn0"); err != nil || l.Name != "dlbhn0" {
		t.Fatalf("LinkByName(dlbhn0): %+v, %v", l, err)
	}
	_, err := n.LinkByName("dlbhn9")
	if want := `no interface "dlbhn9" on this host (its Ethernet interfaces: dlbhn0)`; !errors.Is(err, ErrNoInterface) || err.Error() != want {
		t.Fatalf("LinkByName(dlbhn9): %v, want %s", err, want)
	}
	// Five veth pairs more: eleven Ethernet interfaces.
	for i := range 5 {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("dlbhv%da", i)},
			PeerName: fmt.Sprintf("dlbhv%db", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = n.LinkByName("dlbhn9")
	if want := "interfaces: dlbhn0, dlbhv0a, dlbhv0b, dlbhv1a, dlbhv1b, dlbhv2a, dlbhv2b, dlbhv3a and 3 more)"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("with 11 interfaces: %v, want it to end in %q", err, want)
	}
}
