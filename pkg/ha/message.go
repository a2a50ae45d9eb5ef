package ha

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/dlbproject/dlb/pkg/lb"
)

// A heartbeat is one UDP datagram of fixed layout (big-endian), followed
// by an HMAC-SHA256 of everything before it under the shared secret
// (while the secret changes, one datagram under each of the two: see
// Node.rotateSecretLocked):
//
//	magic "DLBH", version 1
//	flags          healthy, restarting, synced groups
//	boot, seq      the sender's boot id (random per start) and sequence
//	peerBoot       the receiver's boot id as the sender last heard it
//	role, recovery the sender's
//	reach, targets how many reach targets it reaches, of how many
//	groups         per group, in the sender's terms (its local group
//	               first): state, want (preempt), released marker
//	digest         the sender's configuration digest
//	grace          with restarting: seconds to wait before taking over
//	interval       the sender's heartbeat interval, ms (0 from a dlbd
//	               older than the field, which wrote 0 there)
//
// A receiver accepts a heartbeat whose MAC is right, and whose sequence
// is above the last it accepted of the same boot. A heartbeat of another
// boot (the peer restarted) is accepted only if it echoes the receiver's
// own current boot id: the sender has heard this receiver since it
// started, so the datagram is not a recording from before; boots seen
// before and left are refused for good. A recorded heartbeat replayed
// later therefore never counts as a live peer.

const (
	magic       = "DLBH"
	version     = 1
	macSize     = sha256.Size
	groupsWire  = 2
	bodySize    = 4 + 1 + 1 + 2 + 8 + 8 + 8 + 1 + 1 + 1 + 1 + groupsWire*(1+1+8) + 8 + 2 + 2
	messageSize = bodySize + macSize
)

// Flags of a heartbeat.
const (
	flagHealthy    = 1 << 0
	flagRestarting = 1 << 1
	flagSyncedL    = 1 << 2 // the sender has a full copy of the tables of its local group's clusters
	flagSyncedP    = 1 << 3 // ... of its peer group's
	flagTakeover   = 1 << 4 // an operator asked the sender to take over what it wants
)

// groupWire is one group's part of a heartbeat.
type groupWire struct {
	State lb.HAState
	// Want says the sender wants to serve the group (it is preempting).
	Want bool
	// Released is the replication marker the sender sent when it let go
	// of the group (0: none).
	Released uint64
}

// message is a heartbeat's content.
type message struct {
	Healthy, Restarting, Takeover bool
	Synced                        [groupsWire]bool
	Boot, Seq, PeerBoot           uint64
	Role                          lb.HARole
	Recovery                      lb.HARecovery
	Reach, Targets                uint8
	Groups                        [groupsWire]groupWire
	Digest                        uint64
	GraceSeconds                  uint16
	// IntervalMS is the sender's heartbeat interval (0: not said).
	IntervalMS uint16
}

// encode writes m and its MAC under key.
func (m *message) encode(key []byte) []byte {
	b := make([]byte, 0, messageSize)
	b = append(b, magic...)
	b = append(b, version, 0)
	var flags uint16
	for _, f := range []struct {
		on  bool
		bit uint16
	}{{m.Healthy, flagHealthy}, {m.Restarting, flagRestarting}, {m.Synced[0], flagSyncedL}, {m.Synced[1], flagSyncedP}, {m.Takeover, flagTakeover}} {
		if f.on {
			flags |= f.bit
		}
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint64(b, m.Boot)
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	b = binary.BigEndian.AppendUint64(b, m.PeerBoot)
	b = append(b, byte(m.Role), byte(m.Recovery), m.Reach, m.Targets)
	for _, g := range m.Groups {
		want := byte(0)
		if g.Want {
			want = 1
		}
		b = append(b, byte(g.State), want)
		b = binary.BigEndian.AppendUint64(b, g.Released)
	}
	b = binary.BigEndian.AppendUint64(b, m.Digest)
	b = binary.BigEndian.AppendUint16(b, m.GraceSeconds)
	b = binary.BigEndian.AppendUint16(b, m.IntervalMS)
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(b)
}

// Why a datagram was refused (the status counts each).
var (
	errMalformed = errors.New("malformed")
	errMAC       = errors.New("unauthenticated")
	errReplay    = errors.New("replayed")
	errStale     = errors.New("unconfirmed boot")
)

// decode checks a datagram's MAC under key and reads it.
func decode(b []byte, key []byte) (message, error) {
	var m message
	if len(b) != messageSize || string(b[:4]) != magic {
		return m, errMalformed
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(b[:bodySize])
	if !hmac.Equal(mac.Sum(nil), b[bodySize:]) {
		return m, errMAC
	}
	if b[4] != version {
		return m, errMalformed
	}
	flags := binary.BigEndian.Uint16(b[6:])
	m.Healthy = flags&flagHealthy != 0
	m.Restarting = flags&flagRestarting != 0
	m.Synced = [groupsWire]bool{flags&flagSyncedL != 0, flags&flagSyncedP != 0}
	m.Takeover = flags&flagTakeover != 0
	m.Boot = binary.BigEndian.Uint64(b[8:])
	m.Seq = binary.BigEndian.Uint64(b[16:])
	m.PeerBoot = binary.BigEndian.Uint64(b[24:])
	m.Role, m.Recovery, m.Reach, m.Targets = lb.HARole(b[32]), lb.HARecovery(b[33]), b[34], b[35]
	off := 36
	for i := range m.Groups {
		st := lb.HAState(b[off])
		if st > lb.HANoExecutor {
			return m, errMalformed
		}
		m.Groups[i] = groupWire{State: st, Want: b[off+1] == 1, Released: binary.BigEndian.Uint64(b[off+2:])}
		off += 10
	}
	m.Digest = binary.BigEndian.Uint64(b[off:])
	m.GraceSeconds = binary.BigEndian.Uint16(b[off+8:])
	m.IntervalMS = binary.BigEndian.Uint16(b[off+10:])
	if m.Role > lb.RoleBoth || m.Recovery > lb.RecoveryManual || m.Boot == 0 || m.Seq == 0 {
		return m, errMalformed
	}
	return m, nil
}

// maxRetired bounds the peer boots remembered as left.
const maxRetired = 16

// freshness decides which authenticated heartbeats are new (see the
// layout's comment): the peer's current boot and the last sequence
// accepted of it, and the boots it left.
type freshness struct {
	boot, seq uint64
	retired   []uint64
	// heard is the boot of the latest authenticated heartbeat, accepted
	// or not: echoed in this side's heartbeats so that a restarted peer
	// is confirmed.
	heard uint64
}

// accept reports whether m is new, and records it; own is this side's
// boot id.
func (f *freshness) accept(m message, own uint64) error {
	f.heard = m.Boot
	if m.Boot == f.boot {
		if m.Seq <= f.seq {
			return errReplay
		}
		f.seq = m.Seq
		return nil
	}
	if slices.Contains(f.retired, m.Boot) {
		return errReplay
	}
	if m.PeerBoot != own {
		return errStale
	}
	if f.boot != 0 {
		f.retired = append(f.retired, f.boot)
		if len(f.retired) > maxRetired {
			f.retired = f.retired[1:]
		}
	}
	f.boot, f.seq = m.Boot, m.Seq
	return nil
}
