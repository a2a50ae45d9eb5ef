//go:build linux

package netif

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// routeBuffer is the size of one read of the route subscription: a
// message is about 100 bytes, the kernel sends each in a datagram of its
// own. routeSocketBuffer is the socket's receive buffer (the kernel
// doubles it, and counts each message at its allocation's size, about
// 1 KiB): a few messages.
const (
	routeBuffer       = 32 << 10
	routeSocketBuffer = 4 << 10
)

// subscribeRoutes subscribes to the IPv4 and IPv6 route messages of ns
// (netns.None(): the calling thread's namespace) and returns a channel
// that holds a value whenever routes changed since it was last read: a
// burst of changes (a routing daemon loading a table) is one value, not
// one per route, and the messages are not decoded beyond their type and
// flags. The channel is closed when done is, or when reading fails.
//
// The netlink package's RouteSubscribe decodes every message and hands
// each over through a channel, waking its reader for each: about 33 µs of
// CPU per route here, 30 s for a full Internet table.
func subscribeRoutes(ns netns.NsHandle, done <-chan struct{}) (<-chan struct{}, error) {
	s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE)
	if err != nil {
		return nil, err
	}
	// A file of its own, read through the runtime's poller with one
	// buffer for every read: the socket's Receive clears 64 KiB a
	// message.
	fd, err := unix.Dup(s.GetFd())
	s.Close()
	if err != nil {
		return nil, fmt.Errorf("duplicating the route socket: %w", err)
	}
	// A small buffer: what a burst adds while the reader lets messages
	// gather is dropped by the kernel rather than read (reported as
	// ENOBUFS, which says routes changed as well as the messages would).
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, routeSocketBuffer); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sizing the route socket's buffer: %w", err)
	}
	f := os.NewFile(uintptr(fd), "netlink-routes")
	changed := make(chan struct{}, 1)
	go func() {
		<-done
		f.Close()
	}()
	go readRoutes(f, changed)
	return changed, nil
}

// routeGather is how long the reader of route messages leaves them to
// gather in the socket's buffer after it reported a change: a burst is
// then read in one go, not woken for message by message.
const routeGather = 10 * time.Millisecond

// readRoutes reads f until it fails or is closed, then closes changed:
// it waits for a message, reads those queued behind it, and reports a
// change if one of them is, then lets the next ones gather. Messages the
// kernel dropped (the socket's buffer full) are reported as a change:
// they may have been; nothing else needs them.
func readRoutes(f *os.File, changed chan<- struct{}) {
	defer close(changed)
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, routeBuffer)
	// read reads a datagram, waiting for one if wait; more says one was
	// read (or dropped), change that it is a change.
	read := func(wait bool) (more, change bool, err error) {
		var n int
		var from unix.Sockaddr
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return !wait || rerr != unix.EAGAIN
		}); err != nil {
			return false, false, err
		}
		switch {
		case rerr == unix.EAGAIN:
			return false, false, nil
		case rerr == unix.ENOBUFS:
			return true, true, nil
		case rerr != nil:
			return false, false, rerr
		}
		sa, ok := from.(*unix.SockaddrNetlink)
		return true, ok && sa.Pid == 0 && routeChange(buf[:n]), nil
	}
	for {
		_, change, err := read(true)
		for more := err == nil; more; {
			var c bool
			more, c, err = read(false)
			change = change || c
		}
		if err != nil {
			return
		}
		if change {
			select {
			case changed <- struct{}{}:
			default: // one is waiting already
			}
			time.Sleep(routeGather)
		}
	}
}

// routeChange reports whether a datagram of route messages holds a route
// added, replaced or removed, not one the kernel clones for its cache
// (IPv6 exceptions).
func routeChange(b []byte) bool {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if (m.Header.Type == unix.RTM_NEWROUTE || m.Header.Type == unix.RTM_DELROUTE) && len(m.Data) >= unix.SizeofRtMsg &&
			nl.DeserializeRtMsg(m.Data).Flags&unix.RTM_F_CLONED == 0 {
			return true
		}
	}
	return false
}
