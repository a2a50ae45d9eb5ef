// Package connlimit bounds the connections a network listener keeps open,
// in all and per client address: dlbd's TCP admin API and monitor, and
// dlbmetricd, face networks where a host may open connections and leave
// them idle.
package connlimit

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of New: enough for every operator, scraper and script of a
// site, few enough that connections opened and left idle (each holds a
// goroutine and a file descriptor until its server's header timeout)
// cannot take what the daemon needs for its own work.
const (
	DefaultTotal     = 256
	DefaultPerClient = 32
)

// New returns l with at most total connections open at once, and at most
// perIP from one address; name says which listener it is in log lines
// ("admin API"). A connection beyond either limit is closed as soon as it
// is accepted (its client sees it closed at once, rather than waiting
// behind the others) and counted; log hears of refusals at most once a
// minute.
func New(l net.Listener, name string, total, perIP int, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: l, name: name, total: total, perIP: perIP, log: log, open: map[netip.Addr]int{}}
}

// Listener is a listener with New's limits.
type Listener struct {
	net.Listener
	name         string
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
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Accept returns the next connection within the limits, closing those
// beyond them.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		if l.n >= l.total || l.open[ip] >= l.perIP {
			l.mu.Unlock()
			// Counted before the client can see the close: a
			// count read once it did includes it.
			l.noteRefused(ip)
			_ = c.Close()
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
func (l *Listener) noteRefused(ip netip.Addr) {
	n := l.refused.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loggedAt.IsZero() && time.Since(l.loggedAt) < time.Minute {
		return
	}
	l.log.Warn(l.name+": connections refused, over the limit of open connections",
		"client", ip.String(), "refused", n-l.logged, "total_limit", l.total, "per_client_limit", l.perIP)
	l.loggedAt, l.logged = time.Now(), n
}

// release is called once per connection, when it closes.
func (l *Listener) release(ip netip.Addr) {
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
	l    *Listener
	ip   netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
