// Package sockopt holds the socket options dlb's outgoing connections set.
package sockopt

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// BindNoPort, as a net.Dialer's Control, has the kernel choose the source
// port of a TCP connection bound to a source address at connect instead of
// at bind (IP_BIND_ADDRESS_NO_PORT). A bind with port 0 looks for a port
// no socket on that address holds, which costs a walk over every socket
// bound there, TIME_WAIT ones included: with a probe per server every few
// seconds the walk took the dispatcher's CPUs (100,000 servers: 96 % of
// dlbd's time in bind, its engine starved for minutes), and the address's
// ports would run out. At connect the port need only be unused towards
// the one destination. A kernel without the option binds as before.
func BindNoPort(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
}
