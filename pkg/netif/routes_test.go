//go:build linux

package netif

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// routeMsg builds one netlink message of type typ holding a struct rtmsg
// with the given flags.
func routeMsg(typ uint16, flags uint32) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofRtMsg)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint32(b[unix.NLMSG_HDRLEN+8:], flags)
	return b
}

func TestRouteChange(t *testing.T) {
	added, cloned := routeMsg(unix.RTM_NEWROUTE, 0), routeMsg(unix.RTM_NEWROUTE, unix.RTM_F_CLONED)
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"route added", added, true},
		{"route removed", routeMsg(unix.RTM_DELROUTE, 0), true},
		{"a cloned route (IPv6 exception)", cloned, false},
		{"not a route", routeMsg(unix.RTM_NEWLINK, 0), false},
		{"a cloned route, then one added", append(append([]byte{}, cloned...), added...), true},
		{"truncated", added[:unix.NLMSG_HDRLEN+4], false},
		{"empty", nil, false},
	} {
		if got := routeChange(c.in); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
