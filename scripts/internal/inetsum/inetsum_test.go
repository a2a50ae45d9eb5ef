package inetsum

import "testing"

func TestRFC1071(t *testing.T) {
	// RFC 1071, section 3: the sum of these words is 0xddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Fold(Add(b, 0)); got != ^uint16(0xddf2) {
		t.Errorf("checksum %#04x, want %#04x", got, ^uint16(0xddf2))
	}
	// An odd length pads with a zero byte.
	if got, want := Add([]byte{0x12, 0x34, 0x56}, 0), uint32(0x1234+0x5600); got != want {
		t.Errorf("odd sum %#x, want %#x", got, want)
	}
}
