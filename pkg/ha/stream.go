package ha

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Replication travels on a TCP connection from the dispatcher that sends
// (it dials the peer's heartbeat destination on the high-availability
// port, from its heartbeat source) to the one that receives. Both prove
// they hold the shared secret in a handshake of fresh random nonces, and
// every frame after it carries an HMAC-SHA256 under a key derived from
// the secret and both nonces, over a frame counter: a frame cannot be
// forged, replayed, reordered or carried into another connection.
//
//	client → server  "DLBR" 1 0 0 0, client boot (8), client nonce (16)
//	server → client  "DLBR" 1 0 0 0, server boot (8), server nonce (16),
//	                 HMAC(secret, client hello ‖ server hello)
//	client → server  HMAC(secret, "client" ‖ client hello ‖ server hello)
//	frames           length (4), type (1), payload, HMAC(key, direction ‖
//	                 counter (8) ‖ type ‖ payload)
//
// Frames from the sender are data (the sending time and records) and
// markers (a number, and whether it ends a full copy of the tables);
// the receiver acknowledges each marker once the engine imported
// everything before it.

const (
	streamMagic  = "DLBR"
	helloSize    = 32
	frameData    = 1
	frameMarker  = 2
	frameAck     = 3
	maxFrame     = 4 << 20
	recordSize   = 80
	maxBatchRecs = (maxFrame - 12) / recordSize
	// handshakeTimeout bounds the handshake.
	handshakeTimeout = 5 * time.Second
)

// Batch is a piece of replication.
type Batch = lb.ConnBatch

var errHandshake = errors.New("replication handshake refused")

// conn is one authenticated replication connection. Its frames are
// written by one goroutine at a time (writeFrame takes wmu); they are
// read by one.
type conn struct {
	c          net.Conn
	wmu        sync.Mutex
	r          *bufio.Reader
	key        []byte
	dir        byte // this side's direction byte: 'c' or 's'
	sent, recv uint64
	peerBoot   uint64
}

func nonce(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

func hello(boot uint64, nonce []byte) []byte {
	b := make([]byte, 0, helloSize)
	b = append(b, streamMagic...)
	b = append(b, version, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, boot)
	return append(b, nonce...)
}

func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func readHello(r io.Reader) ([]byte, uint64, error) {
	b := make([]byte, helloSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, 0, err
	}
	if string(b[:4]) != streamMagic || b[4] != version {
		return nil, 0, errHandshake
	}
	return b, binary.BigEndian.Uint64(b[8:]), nil
}

func deriveKey(secret, cn, sn []byte) []byte {
	return mac(secret, []byte("dlb-replication"), cn, sn)
}

// clientHandshake authenticates a dialed connection.
func clientHandshake(c net.Conn, secret []byte, boot uint64) (*conn, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	cn := nonce(16)
	ch := hello(boot, cn)
	if _, err := c.Write(ch); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	sh, sboot, err := readHello(r)
	if err != nil {
		return nil, err
	}
	sm := make([]byte, macSize)
	if _, err := io.ReadFull(r, sm); err != nil {
		return nil, err
	}
	if !hmac.Equal(sm, mac(secret, ch, sh)) {
		return nil, errHandshake
	}
	if _, err := c.Write(mac(secret, []byte("client"), ch, sh)); err != nil {
		return nil, err
	}
	return &conn{c: c, r: r, key: deriveKey(secret, cn, sh[16:]), dir: 'c', peerBoot: sboot}, nil
}

// serverHandshake authenticates an accepted connection.
func serverHandshake(c net.Conn, secret []byte, boot uint64) (*conn, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	r := bufio.NewReader(c)
	ch, cboot, err := readHello(r)
	if err != nil {
		return nil, err
	}
	sn := nonce(16)
	sh := hello(boot, sn)
	if _, err := c.Write(append(sh, mac(secret, ch, sh)...)); err != nil {
		return nil, err
	}
	cm := make([]byte, macSize)
	if _, err := io.ReadFull(r, cm); err != nil {
		return nil, err
	}
	if !hmac.Equal(cm, mac(secret, []byte("client"), ch, sh)) {
		return nil, errHandshake
	}
	return &conn{c: c, r: r, key: deriveKey(secret, ch[16:], sn), dir: 's', peerBoot: cboot}, nil
}

// writeFrame sends one frame.
func (c *conn) writeFrame(typ byte, payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("frame of %d bytes is too large", len(payload))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.sent++
	var ctr [8]byte
	binary.BigEndian.PutUint64(ctr[:], c.sent)
	hdr := make([]byte, 5, 5+len(payload)+macSize)
	binary.BigEndian.PutUint32(hdr, uint32(len(payload)))
	hdr[4] = typ
	out := append(hdr, payload...)
	out = append(out, mac(c.key, []byte{c.dir}, ctr[:], []byte{typ}, payload)...)
	_, err := c.c.Write(out)
	return err
}

// readFrame reads and authenticates one frame.
func (c *conn) readFrame() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is too large", n)
	}
	buf := make([]byte, int(n)+macSize)
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return 0, nil, err
	}
	c.recv++
	var ctr [8]byte
	binary.BigEndian.PutUint64(ctr[:], c.recv)
	peer := byte('c')
	if c.dir == 'c' {
		peer = 's'
	}
	payload := buf[:n]
	if !hmac.Equal(buf[n:], mac(c.key, []byte{peer}, ctr[:], []byte{hdr[4]}, payload)) {
		return 0, nil, errMAC
	}
	return hdr[4], payload, nil
}

// Record wire format (80 bytes): kind, protocol, flags (1: closing),
// family (4 or 6); client address (16) and port; cluster address and
// port; server address; NAT address and port; age in ms (4); 2 bytes
// pad. IPv4 addresses are written IPv4-mapped.

func putAddr(b []byte, a netip.Addr) {
	x := a.As16()
	copy(b, x[:])
}

func getAddr(b []byte, v4 bool) netip.Addr {
	a := netip.AddrFrom16([16]byte(b[:16]))
	if v4 {
		return a.Unmap()
	}
	return a
}

// mapped4 reports whether the 16 bytes at b are an IPv4-mapped address.
func mapped4(b []byte) bool {
	return netip.AddrFrom16([16]byte(b[:16])).Is4In6()
}

// zero16 reports whether the 16 bytes at b are all zero.
func zero16(b []byte) bool {
	return [16]byte(b[:16]) == [16]byte{}
}

func encodeRecord(b []byte, r lb.ConnRecord) {
	b[0], b[1] = byte(r.Kind), r.Protocol
	b[2] = 0
	if r.Closing {
		b[2] = 1
	}
	b[3] = 6
	if r.Cluster.Addr().Is4() {
		b[3] = 4
	}
	putAddr(b[4:], r.Client.Addr())
	binary.BigEndian.PutUint16(b[20:], r.Client.Port())
	putAddr(b[22:], r.Cluster.Addr())
	binary.BigEndian.PutUint16(b[38:], r.Cluster.Port())
	putAddr(b[40:], r.Server)
	putAddr(b[56:], r.NAT.Addr())
	binary.BigEndian.PutUint16(b[72:], r.NAT.Port())
	age := r.Age.Milliseconds()
	if age < 0 {
		age = 0
	}
	if age > 0xffffffff {
		age = 0xffffffff
	}
	binary.BigEndian.PutUint32(b[74:], uint32(age))
	b[78], b[79] = 0, 0
}

func decodeRecord(b []byte) (lb.ConnRecord, error) {
	var r lb.ConnRecord
	if b[0] < byte(lb.ConnMAC) || b[0] > byte(lb.ConnAffinity) || (b[3] != 4 && b[3] != 6) {
		return r, errMalformed
	}
	v4 := b[3] == 4
	// An IPv4 record's addresses are IPv4-mapped (the NAT address may be
	// absent: all zero); anything else would decode as IPv6 addresses in
	// an IPv4 record.
	if v4 && (!mapped4(b[4:]) || !mapped4(b[22:]) || !mapped4(b[40:]) || !(mapped4(b[56:]) || zero16(b[56:]))) {
		return r, errMalformed
	}
	r.Kind, r.Protocol, r.Closing = lb.ConnKind(b[0]), b[1], b[2]&1 != 0
	r.Client = netip.AddrPortFrom(getAddr(b[4:], v4), binary.BigEndian.Uint16(b[20:]))
	r.Cluster = netip.AddrPortFrom(getAddr(b[22:], v4), binary.BigEndian.Uint16(b[38:]))
	r.Server = getAddr(b[40:], v4)
	nat := getAddr(b[56:], v4)
	if !nat.IsUnspecified() {
		r.NAT = netip.AddrPortFrom(nat, binary.BigEndian.Uint16(b[72:]))
	}
	r.Age = time.Duration(binary.BigEndian.Uint32(b[74:])) * time.Millisecond
	return r, nil
}

// dataPayload encodes records sent at sent.
func dataPayload(sent time.Time, recs []lb.ConnRecord) []byte {
	b := make([]byte, 12+len(recs)*recordSize)
	binary.BigEndian.PutUint64(b, uint64(sent.UnixNano()))
	binary.BigEndian.PutUint32(b[8:], uint32(len(recs)))
	for i, r := range recs {
		encodeRecord(b[12+i*recordSize:], r)
	}
	return b
}

func decodeData(b []byte) (time.Time, []lb.ConnRecord, error) {
	if len(b) < 12 {
		return time.Time{}, nil, errMalformed
	}
	sent := time.Unix(0, int64(binary.BigEndian.Uint64(b)))
	n := int(binary.BigEndian.Uint32(b[8:]))
	if len(b) != 12+n*recordSize {
		return sent, nil, errMalformed
	}
	recs := make([]lb.ConnRecord, 0, n)
	for i := range n {
		r, err := decodeRecord(b[12+i*recordSize:])
		if err != nil {
			return sent, nil, err
		}
		recs = append(recs, r)
	}
	return sent, recs, nil
}

func markerPayload(sent time.Time, marker uint64, full bool) []byte {
	b := make([]byte, 17)
	binary.BigEndian.PutUint64(b, uint64(sent.UnixNano()))
	binary.BigEndian.PutUint64(b[8:], marker)
	if full {
		b[16] = 1
	}
	return b
}

func decodeMarker(b []byte) (time.Time, uint64, bool, error) {
	if len(b) != 17 {
		return time.Time{}, 0, false, errMalformed
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), binary.BigEndian.Uint64(b[8:]), b[16] == 1, nil
}

// writeBatch sends a batch: its records in frames of at most
// maxBatchRecs, then its marker.
func (c *conn) writeBatch(b Batch) error {
	for recs := b.Records; len(recs) > 0; {
		n := min(len(recs), maxBatchRecs)
		if err := c.writeFrame(frameData, dataPayload(b.Sent, recs[:n])); err != nil {
			return err
		}
		recs = recs[n:]
	}
	if b.Marker != 0 {
		return c.writeFrame(frameMarker, markerPayload(b.Sent, b.Marker, b.Full))
	}
	return nil
}
