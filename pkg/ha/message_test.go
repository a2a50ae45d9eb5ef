package ha

import (
	"errors"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

var testKey = []byte("a shared secret")

func TestMessageRoundTrip(t *testing.T) {
	m := message{Healthy: true, Takeover: true, Synced: [2]bool{true, false}, Boot: 7, Seq: 9, PeerBoot: 11,
		Role: lb.RoleBoth, Recovery: lb.RecoveryManual, Reach: 2, Targets: 3,
		Groups:     [2]groupWire{{State: lb.HAActive, Released: 5}, {State: lb.HAPreempt, Want: true}},
		Digest:     0xdeadbeef,
		Restarting: true, GraceSeconds: 30, IntervalMS: 60000}
	b := m.encode(testKey)
	if len(b) != messageSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), messageSize)
	}
	got, err := decode(b, testKey)
	if err != nil || got != m {
		t.Fatalf("decoded %+v, %v\nwant %+v", got, err, m)
	}
}

func TestMessageRefusals(t *testing.T) {
	good := (&message{Boot: 1, Seq: 1, Role: lb.RolePrimary}).encode(testKey)
	tampered := append([]byte(nil), good...)
	tampered[20] ^= 1
	badState := (&message{Boot: 1, Seq: 1, Groups: [2]groupWire{{State: 99}}}).encode(testKey)
	for _, c := range []struct {
		name string
		b    []byte
		key  []byte
		want error
	}{
		{"another secret", good, []byte("another secret"), errMAC},
		{"a bit flipped", tampered, testKey, errMAC},
		{"truncated", good[:40], testKey, errMalformed},
		{"too long", append(append([]byte(nil), good...), 0), testKey, errMalformed},
		{"not a heartbeat", make([]byte, messageSize), testKey, errMalformed},
		{"an unknown state, authenticated", badState, testKey, errMalformed},
	} {
		if _, err := decode(c.b, c.key); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestFreshness: replays of the current boot, boots left, and new boots
// that do not echo this side's boot are refused.
func TestFreshness(t *testing.T) {
	const own = 100
	var f freshness
	steps := []struct {
		name string
		m    message
		want error
	}{
		{"first contact, own boot not heard yet", message{Boot: 1, Seq: 1}, errStale},
		{"echoes own boot", message{Boot: 1, Seq: 2, PeerBoot: own}, nil},
		{"next", message{Boot: 1, Seq: 3, PeerBoot: own}, nil},
		{"replay of an earlier one", message{Boot: 1, Seq: 2, PeerBoot: own}, errReplay},
		{"same sequence again", message{Boot: 1, Seq: 3, PeerBoot: own}, errReplay},
		{"peer restarted, not confirmed", message{Boot: 2, Seq: 1}, errStale},
		{"peer restarted, confirmed", message{Boot: 2, Seq: 2, PeerBoot: own}, nil},
		{"the old boot replayed, echoing own boot", message{Boot: 1, Seq: 50, PeerBoot: own}, errReplay},
		{"current boot goes on", message{Boot: 2, Seq: 3, PeerBoot: own}, nil},
		{"a recording from before own boot", message{Boot: 3, Seq: 9, PeerBoot: 99}, errStale},
	}
	for _, s := range steps {
		if err := f.accept(s.m, own); !errors.Is(err, s.want) {
			t.Errorf("%s: %v, want %v", s.name, err, s.want)
		}
	}
	if f.heard != 3 {
		t.Errorf("heard %d: the latest authenticated boot is echoed, confirmed or not", f.heard)
	}
}
