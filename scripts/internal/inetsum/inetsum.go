// Package inetsum computes the Internet checksum (RFC 1071) for the lab
// tools that build raw packets.
package inetsum

// Add adds b, as big-endian 16-bit words, to s (the Internet checksum
// before folding); an odd length pads with a zero byte. The checksum
// field in b must be zero.
func Add(b []byte, s uint32) uint32 {
	n := len(b) &^ 1
	for i := 0; i < n; i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if n < len(b) {
		s += uint32(b[n]) << 8
	}
	return s
}

// Fold turns a 32-bit sum into the one's complement checksum.
func Fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
