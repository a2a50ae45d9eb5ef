package ha

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"time"
)

// sender keeps a replication connection to the peer while it is alive,
// and writes the queued batches to it.
func (n *Node) sender(ctx context.Context, q chan Batch) {
	defer n.wg.Done()
	for ctx.Err() == nil {
		n.mu.Lock()
		iv := time.Duration(n.cfg.IntervalMS()) * time.Millisecond
		alive := n.peerAliveLocked(time.Now())
		// The path the peer was heard on last.
		var src, dst netip.Addr
		var heard time.Time
		for _, hb := range n.cfg.Heartbeats {
			if ps := n.pathStats[hb]; ps != nil && ps.LastHeard.After(heard) {
				src, dst, heard = hb.Source, hb.Destination, ps.LastHeard
			}
		}
		// The peer's port, changed there first, or here first (the peer
		// still listens on the former one).
		port, key, dead := cmp.Or(n.peerPort, n.cfg.Port), n.streamKeyLocked(), n.deadTime()
		n.mu.Unlock()
		if !alive || !dst.IsValid() {
			if !sleep(ctx, iv) {
				return
			}
			continue
		}
		d := net.Dialer{Timeout: dead, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
		raw, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(dst, port).String())
		if err != nil {
			n.log.Debug("replication: cannot connect to the peer", "err", err)
			if !sleep(ctx, iv) {
				return
			}
			continue
		}
		c, err := clientHandshake(raw, key, n.boot)
		if err != nil {
			raw.Close()
			n.mu.Lock()
			n.refused["replication handshake"]++
			n.mu.Unlock()
			n.log.Warn("replication: handshake with the peer failed", "err", err)
			if !sleep(ctx, iv) {
				return
			}
			continue
		}
		n.stream(ctx, q, c)
		if !sleep(ctx, iv) {
			return
		}
	}
}

// stream runs one sending connection until it fails or ctx ends.
func (n *Node) stream(ctx context.Context, q chan Batch, c *conn) {
	// Batches queued for an earlier connection are dropped: this one
	// starts with a full copy.
	for len(q) > 0 {
		<-q
	}
	n.mu.Lock()
	n.outConn = c
	n.session++
	n.mu.Unlock()
	n.log.Info("replication: sending to the peer", "to", c.c.RemoteAddr())
	n.signal()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			typ, p, err := c.readFrame()
			if err != nil {
				return
			}
			if typ == frameAck && len(p) == 8 {
				m := binary.BigEndian.Uint64(p)
				n.mu.Lock()
				if t, ok := n.markerSent[m]; ok {
					n.lastAckRTT = time.Since(t)
					for k := range n.markerSent {
						if k <= m {
							delete(n.markerSent, k)
						}
					}
				}
				n.mu.Unlock()
			}
		}
	}()
	defer func() {
		c.c.Close()
		<-done
		n.mu.Lock()
		if n.outConn == c {
			n.outConn = nil
		}
		n.mu.Unlock()
		n.signal()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case b := <-q:
			if b.Marker != 0 {
				n.mu.Lock()
				n.markerSent[b.Marker] = time.Now()
				if len(n.markerSent) > 1024 { // unacknowledged: forget the oldest
					oldest := slices.Min(keys(n.markerSent))
					delete(n.markerSent, oldest)
				}
				n.mu.Unlock()
			}
			if err := c.writeBatch(b); err != nil {
				n.log.Warn("replication: sending to the peer failed", "err", err)
				return
			}
			n.mu.Lock()
			n.sentRecords += uint64(len(b.Records))
			n.mu.Unlock()
		}
	}
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// acceptRetry is how long accept waits after a failed Accept (out of
// descriptors) before it tries again.
const acceptRetry = 100 * time.Millisecond

// accept takes the peer's replication connections on one address.
func (n *Node) accept(ctx context.Context, _ netip.Addr, l net.Listener) {
	defer n.wg.Done()
	for {
		raw, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Out of descriptors, say: wait before trying again
			// rather than spin.
			select {
			case <-ctx.Done():
				return
			case <-time.After(acceptRetry):
			}
			continue
		}
		from, _ := netip.ParseAddrPort(raw.RemoteAddr().String())
		n.mu.Lock()
		key, known := n.streamKeyLocked(), slices.Contains(n.cfg.Destinations(), from.Addr().Unmap())
		n.mu.Unlock()
		if !known {
			n.mu.Lock()
			n.refused["replication from a stranger"]++
			n.mu.Unlock()
			raw.Close()
			continue
		}
		c, err := serverHandshake(raw, key, n.boot)
		if err != nil {
			raw.Close()
			n.mu.Lock()
			n.refused["replication handshake"]++
			n.mu.Unlock()
			continue
		}
		n.mu.Lock()
		if !n.running {
			n.mu.Unlock()
			raw.Close()
			return
		}
		if n.inConn != nil {
			n.inConn.c.Close()
		}
		n.inConn, n.lastFull, n.synced = c, 0, false
		n.wg.Add(1)
		n.mu.Unlock()
		n.log.Info("replication: receiving from the peer", "from", from)
		go n.readStream(ctx, c)
	}
}

// readStream delivers one receiving connection's batches in order.
func (n *Node) readStream(ctx context.Context, c *conn) {
	defer n.wg.Done()
	defer func() {
		c.c.Close()
		n.mu.Lock()
		if n.inConn == c {
			n.inConn, n.synced, n.lastFull = nil, false, 0
		}
		n.mu.Unlock()
		n.signal()
	}()
	for {
		typ, p, err := c.readFrame()
		if err != nil {
			if errors.Is(err, errMAC) {
				n.mu.Lock()
				n.refused[errMAC.Error()]++
				n.mu.Unlock()
			}
			return
		}
		var b Batch
		switch typ {
		case frameData:
			sent, recs, err := decodeData(p)
			if err != nil {
				n.mu.Lock()
				n.refused[errMalformed.Error()]++
				n.mu.Unlock()
				return
			}
			b = Batch{Records: recs, Sent: sent}
			n.mu.Lock()
			n.recvRecords += uint64(len(recs))
			n.mu.Unlock()
		case frameMarker:
			sent, m, full, err := decodeMarker(p)
			if err != nil {
				return
			}
			b = Batch{Marker: m, Full: full, Sent: sent}
			if full {
				n.mu.Lock()
				if n.inConn == c { // not one Resync closed
					n.lastFull = m
				}
				n.mu.Unlock()
			}
		default:
			continue
		}
		select {
		case n.received <- b:
		case <-ctx.Done():
			return
		}
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
