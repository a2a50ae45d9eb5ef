package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// keepaliveLoad runs -keepalive: cfg.c workers, each holding exactly one
// TCP connection for its whole life and sending GETs on it one after
// another, cfg.interval apart, until cfg.duration has passed, ctx ends or
// the connection fails. HTTP is spoken directly on the connection
// (Request.Write and ReadResponse), so nothing can silently re-dial.
func keepaliveLoad(ctx context.Context, cfg config) Report {
	start := time.Now()
	deadline := start.Add(cfg.duration)
	var issued atomic.Int64
	var replied atomic.Int64
	// firstReply counts the connections that had their first reply; the
	// last one creates the -ready file.
	firstReply := func() {
		if replied.Add(1) == int64(cfg.c) && cfg.ready != "" {
			if f, err := os.Create(cfg.ready); err == nil {
				_ = f.Close()
			}
		}
	}
	outs := make([]keepaliveOutcome, cfg.c)
	var wg sync.WaitGroup
	for w := range outs {
		wg.Go(func() {
			outs[w] = keepaliveWorker(ctx, cfg, start, deadline, &issued, firstReply)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	total := newTally()
	broken, changes := 0, 0
	brokenBy := map[string]int{}
	for _, o := range outs {
		total.merge(o.t)
		if o.broken {
			broken++
			if o.last != "" {
				brokenBy[o.last]++
			}
		}
		if o.changed {
			changes++
		}
	}
	r := total.report(elapsed)
	conns := cfg.c
	r.Connections, r.Broken, r.BackendChanges = &conns, &broken, &changes
	if len(brokenBy) > 0 {
		r.BrokenByBackend = brokenBy
	}
	return r
}

// keepaliveOutcome is one connection's share of the report.
type keepaliveOutcome struct {
	t       *tally
	broken  bool   // a request (or the dial) failed
	changed bool   // X-Backend differed between two successful replies
	last    string // the backend of the last successful reply
}

// keepaliveWorker dials once and sends GETs on that connection until
// deadline, ctx, maxRequests in all workers, or the first failure; it
// calls firstReply after its first successful reply.
func keepaliveWorker(ctx context.Context, cfg config, start, deadline time.Time, issued *atomic.Int64, firstReply func()) keepaliveOutcome {
	out := keepaliveOutcome{t: newTally()}
	u, _ := url.Parse(cfg.url) // validated
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if issued.Add(1) > maxRequests {
		return out
	}
	at := time.Since(start)
	d := net.Dialer{Timeout: cfg.timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		out.t.add(result{at: at, err: err})
		out.broken = true
		return out
	}
	defer conn.Close()
	kc := &keepaliveConn{conn: conn, br: bufio.NewReader(conn), url: cfg.url, timeout: cfg.timeout}

	last := ""
	for first := true; ; first = false {
		if !first {
			if !sleepUntil(ctx, time.Now().Add(cfg.interval), deadline) || issued.Add(1) > maxRequests {
				return out
			}
			at = time.Since(start)
		}
		rp, err := kc.get()
		out.t.add(result{at: at, reply: rp, err: err})
		if err != nil {
			out.broken = true
			return out
		}
		if first {
			firstReply()
		}
		if last != "" && rp.backend != last {
			out.changed = true
		}
		last = rp.backend
		out.last = last
	}
}

// sleepUntil waits until t; it returns false, early, if ctx ends or
// deadline comes first (or has passed).
func sleepUntil(ctx context.Context, t, deadline time.Time) bool {
	if ctx.Err() != nil || !time.Now().Before(deadline) {
		return false
	}
	if t.After(deadline) {
		t = deadline
	}
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	}
	return ctx.Err() == nil && time.Now().Before(deadline)
}

// keepaliveConn speaks HTTP/1.1 on one connection.
type keepaliveConn struct {
	conn    net.Conn
	br      *bufio.Reader
	url     string
	timeout time.Duration
}

// get sends one GET and reads the whole reply, within the timeout.
func (k *keepaliveConn) get() (reply, error) {
	req, err := http.NewRequest(http.MethodGet, k.url, nil)
	if err != nil {
		return reply{}, err
	}
	if err := k.conn.SetDeadline(time.Now().Add(k.timeout)); err != nil {
		return reply{}, err
	}
	if err := req.Write(k.conn); err != nil {
		return reply{}, err
	}
	resp, err := http.ReadResponse(k.br, req)
	if err != nil {
		return reply{}, err
	}
	return readReply(resp)
}
