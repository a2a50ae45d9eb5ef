package sockopt

import (
	"net"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
	"golang.org/x/sys/unix"
)

// TestBindNoPort: a dial bound to a source address with BindNoPort
// connects, and its socket carries IP_BIND_ADDRESS_NO_PORT; without it the
// option is off (the test can tell the two apart).
func TestBindNoPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.AcceptAndClose(t, ln)
	for _, c := range []struct {
		name string
		set  bool
	}{{"with BindNoPort", true}, {"without", false}} {
		t.Run(c.name, func(t *testing.T) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
			if c.set {
				d.Control = BindNoPort
			}
			conn, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			raw, err := conn.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var v int
			var gerr error
			if err := raw.Control(func(fd uintptr) {
				v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT)
			}); err != nil || gerr != nil {
				t.Fatal(err, gerr)
			}
			if got := v != 0; got != c.set {
				t.Errorf("IP_BIND_ADDRESS_NO_PORT = %d, want set %v", v, c.set)
			}
			if a := conn.LocalAddr().(*net.TCPAddr); a.Port == 0 || !a.IP.Equal(net.IPv4(127, 0, 0, 1)) {
				t.Errorf("local address %v", a)
			}
		})
	}
}
