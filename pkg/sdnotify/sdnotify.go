// Package sdnotify tells systemd about a service's state (sd_notify(3)):
// READY=1 when a Type=notify service is ready, STOPPING=1 when it stops.
package sdnotify

import (
	"fmt"
	"net"
	"os"
)

// Notify sends state (e.g. "READY=1") to the service manager on the
// datagram socket named by $NOTIFY_SOCKET, as sd_notify(3) does: a path,
// or an abstract socket when it starts with '@'. Without $NOTIFY_SOCKET
// (dlbd not started by systemd with Type=notify) it does nothing.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	} else if path[0] != '/' {
		return fmt.Errorf("notifying the service manager: NOTIFY_SOCKET %q is neither a path nor an abstract socket", path)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notifying the service manager: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("notifying the service manager: %w", err)
	}
	return nil
}
