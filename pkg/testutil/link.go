package testutil

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
)

func setLoopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

// AddVethPair creates a veth pair (both names must start with "dlb") in the
// current network namespace, brings both ends up and returns the index of
// the first. (This kernel has no dummy driver; veth is always there.)
func AddVethPair(name, peer string) (int, error) {
	for _, n := range []string{name, peer} {
		if !strings.HasPrefix(n, "dlb") {
			return 0, fmt.Errorf("interface name %q must start with dlb", n)
		}
	}
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
	if err := netlink.LinkAdd(v); err != nil {
		return 0, fmt.Errorf("adding veth %s/%s: %w", name, peer, err)
	}
	for _, n := range []string{name, peer} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return 0, err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return 0, fmt.Errorf("bringing up %s: %w", n, err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}
