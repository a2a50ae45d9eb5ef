package netif

import (
	"fmt"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
)

// groFeature is the ethtool feature name of generic receive offload.
const groFeature = "rx-gro"

// GRO reports whether generic receive offload is on for an interface, and
// the interface's name. GRO merges a TCP flow's frames into one before the
// stack sees them, leaving a partial checksum that only the merged frame's
// transmission completes; generic-mode XDP runs after it, native mode
// before.
func (*Netif) GRO(ifindex int) (string, bool, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return "", false, fmt.Errorf("looking up interface %d: %w", ifindex, err)
	}
	name := l.Attrs().Name
	e, err := ethtool.NewEthtool()
	if err != nil {
		return name, false, fmt.Errorf("reading the features of %s: %w", name, err)
	}
	defer e.Close()
	f, err := e.Features(name)
	if err != nil {
		return name, false, fmt.Errorf("reading the features of %s: %w", name, err)
	}
	on, ok := f[groFeature]
	if !ok {
		return name, false, fmt.Errorf("reading the features of %s: no %s feature", name, groFeature)
	}
	return name, on, nil
}
