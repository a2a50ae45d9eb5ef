package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxUDPReply is the receive buffer for one reply datagram.
	maxUDPReply = 512
	// maxStale bounds how many late replies are discarded before a send.
	maxStale = 64
)

// errBadReply fails a datagram whose reply is not "<name> <ip:port>".
var errBadReply = errors.New("bad reply")

// udpLoad runs -udp: cfg.flows flows, cfg.c at a time, each a connected UDP
// socket (its own source port) sending cfg.packets datagrams to
// cfg.udpAddr one after another and waiting up to cfg.timeout for each
// reply. A cancelled ctx stops new datagrams.
func udpLoad(ctx context.Context, cfg config) Report {
	start := time.Now()
	workers := min(cfg.c, cfg.flows)
	tallies := make([]*tally, workers)
	splits := make([]int, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range tallies {
		t := newTally()
		tallies[w] = t
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(cfg.flows) {
					return
				}
				if udpFlow(ctx, cfg, i, start, t) {
					splits[w]++
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	total := newTally()
	split := 0
	for w, t := range tallies {
		total.merge(t)
		split += splits[w]
	}
	r := total.report(elapsed)
	flows := cfg.flows
	r.Flows, r.FlowsSplit = &flows, &split
	return r
}

// udpFlow sends one flow's datagrams, adds one result per datagram to t,
// and reports whether its replies came from more than one backend.
func udpFlow(ctx context.Context, cfg config, flow int64, start time.Time, t *tally) bool {
	at := time.Since(start)
	conn, err := net.DialUDP("udp", nil, cfg.udpAddr)
	if err != nil {
		for range cfg.packets {
			t.add(result{at: at, err: err})
		}
		return false
	}
	defer conn.Close()
	buf := make([]byte, maxUDPReply)
	backends := map[string]bool{}
	stale := false // a reply may still be on its way
	for p := range cfg.packets {
		if ctx.Err() != nil {
			break
		}
		if stale {
			drainUDP(conn, buf)
			stale = false
		}
		at := time.Since(start)
		msg := fmt.Sprintf("labclient flow %d datagram %d\n", flow, p+1)
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.add(result{at: at, err: err})
			continue
		}
		_ = conn.SetReadDeadline(time.Now().Add(cfg.timeout))
		n, err := conn.Read(buf)
		if err != nil {
			stale = true
			t.add(result{at: at, err: err})
			continue
		}
		rp, err := parseUDPReply(buf[:n])
		t.add(result{at: at, reply: rp, err: err})
		if err == nil {
			backends[rp.backend] = true
		}
	}
	return len(backends) > 1
}

// drainUDP discards replies that are already queued on conn (late answers
// to a datagram that timed out), so they are not taken for the next one.
func drainUDP(conn *net.UDPConn, buf []byte) {
	_ = conn.SetReadDeadline(time.Now())
	for range maxStale {
		if _, err := conn.Read(buf); err != nil {
			return
		}
	}
}

// parseUDPReply parses labhttpd's UDP answer "<name> <ip:port>\n"; the
// reply's peer is the IP part.
func parseUDPReply(b []byte) (reply, error) {
	rp := reply{bytes: int64(len(b))}
	s := strings.TrimRight(string(b), "\r\n")
	name, peer, ok := strings.Cut(s, " ")
	if !ok || name == "" {
		return rp, errBadReply
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(peer))
	if err != nil {
		return rp, errBadReply
	}
	rp.backend = name
	rp.peer = ap.Addr().Unmap().String()
	return rp, nil
}
