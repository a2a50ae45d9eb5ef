//go:build linux

package netif

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// guardPriority and guardHandle identify dlbd's guard filter on an
// interface's tc ingress ("dl" in ASCII).
const (
	guardPriority = 0x646c
	guardHandle   = 0x646c
)

func guardFilter(ifindex, fd int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS,
			Handle: netlink.MakeHandle(0, guardHandle), Protocol: unix.ETH_P_ALL, Priority: guardPriority},
		Fd: fd, Name: "dlb_guard", DirectAction: true,
	}
}

// AttachGuard runs the program fd (a tc classifier in direct-action
// mode) on every frame the named interface receives, in its tc ingress
// hook (a clsact qdisc, added if missing), replacing an earlier dlbd's.
// The filter holds the program: it stays when dlbd exits.
func (*Netif) AttachGuard(ifname string, fd int) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("looking up interface %q: %w", ifname, err)
	}
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
		Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("adding a clsact qdisc to %s: %w", ifname, err)
	}
	if err := netlink.FilterReplace(guardFilter(l.Attrs().Index, fd)); err != nil {
		return fmt.Errorf("attaching the guard to %s: %w", ifname, err)
	}
	return nil
}

// DetachGuard removes the guard from the named interface; an interface
// without it (or gone) is not an error.
func (*Netif) DetachGuard(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("looking up interface %q: %w", ifname, err)
	}
	err = netlink.FilterDel(guardFilter(l.Attrs().Index, 0))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("removing the guard from %s: %w", ifname, err)
	}
	return nil
}
