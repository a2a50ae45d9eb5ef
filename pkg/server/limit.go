package server

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of LimitConns: enough for every operator and script of a
// site, few enough that connections opened and left idle (each holds a
// goroutine and a file descriptor until its header timeout) cannot take
// what the dispatcher needs for its probes and maps.
const (
	DefaultMaxConns      = 256
	DefaultMaxConnsPerIP = 32
)

// LimitConns returns l with at most total connections open at once, and
// at most perIP from one address. A connection beyond either limit is
// closed as soon as it is accepted (its client sees the connection
// closed, at once, rather than waiting behind the others), and counted;
// log hears of refusals at most once a minute.
func LimitConns(l net.Listener, total, perIP int, log *slog.Logger) *LimitedListener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LimitedListener{Listener: l, total: total, perIP: perIP, log: log, open: map[netip.Addr]int{}}
}

// LimitedListener is a listener with LimitConns' limits.
type LimitedListener struct {
	net.Listener
	total, perIP int
	log          *slog.Logger

	mu       sync.Mutex
	open     map[netip.Addr]int // open connections per client address
	n        int                // open connections
	refused  atomic.Uint64
	loggedAt time.Time
	logged   uint64 // refused when last logged
}

// Refused counts the connections closed for a limit.
func (l *LimitedListener) Refused() uint64 { return l.refused.Load() }

// Accept returns the next connection within the limits, closing those
// beyond them.
func (l *LimitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		if l.n >= l.total || l.open[ip] >= l.perIP {
			l.mu.Unlock()
			_ = c.Close()
			l.noteRefused(ip)
			continue
		}
		l.n++
		l.open[ip]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, ip: ip}, nil
	}
}

// noteRefused counts a refused connection and logs it at most once a
// minute, with how many were refused since.
func (l *LimitedListener) noteRefused(ip netip.Addr) {
	n := l.refused.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loggedAt.IsZero() && time.Since(l.loggedAt) < time.Minute {
		return
	}
	l.log.Warn("admin API: connections refused, over the limit of open connections",
		"client", ip.String(), "refused", n-l.logged, "total_limit", l.total, "per_client_limit", l.perIP)
	l.loggedAt, l.logged = time.Now(), n
}

// release is called once per connection, when it closes.
func (l *LimitedListener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// remoteIP is c's client address (the zero Addr when it has none, as on
// a unix socket: all such clients share one count).
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// limitedConn gives its slot back when closed (once, however often
// Close is called).
type limitedConn struct {
	net.Conn
	l    *LimitedListener
	ip   netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
