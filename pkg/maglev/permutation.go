package maglev

import "math/bits"

// The permutation hash (see the package documentation). These values are
// part of the table format: changing any of them changes every table, so
// every dispatcher must change at once.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
	centerSalt  = "dlb-maglev-center\x00"
	startSalt   = "dlb-maglev-start\x00"
	ratioSalt   = "dlb-maglev-ratio\x00"
)

// keyHash is fmix64(FNV-1a-64(salt || key)). FNV-1a alone mixes its last
// bytes poorly, and keys differ mostly in their last bytes (server
// addresses), so the MurmurHash3 finalizer spreads every input bit over
// the whole word before it is reduced modulo the table size.
func keyHash(salt, key string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(salt); i++ {
		h ^= uint64(salt[i])
		h *= fnvPrime64
	}
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// field is arithmetic modulo the prime m.
type field struct {
	m    uint32
	inv  uint64 // floor((2^64-1)/m), for Barrett reduction
	root uint32 // the smallest primitive root of m
}

// newField returns the field of m elements; m must be prime.
func newField(m uint32) field {
	f := field{m: m, inv: ^uint64(0) / uint64(m), root: 1}
	if m == 2 {
		return f // 1 generates the one nonzero element
	}
	// g is a primitive root iff g^((m-1)/q) != 1 for every prime q
	// dividing m-1. Factoring m-1 by trial division takes at most 2^16
	// divisions, and a primitive root is found within a few tries.
	var factors []uint32
	n := m - 1
	for d := uint32(2); uint64(d)*uint64(d) <= uint64(n); d++ {
		if n%d == 0 {
			factors = append(factors, d)
			for n%d == 0 {
				n /= d
			}
		}
	}
	if n > 1 {
		factors = append(factors, n)
	}
search:
	for g := uint32(2); ; g++ {
		for _, q := range factors {
			if f.pow(g, (m-1)/q) == 1 {
				continue search
			}
		}
		f.root = g
		return f
	}
}

// mul returns a*b mod m, for a, b < m, by Barrett reduction: a 64-bit
// division would cost several times more.
func (f *field) mul(a, b uint32) uint32 {
	x := uint64(a) * uint64(b)
	q, _ := bits.Mul64(x, f.inv)
	x -= q * uint64(f.m)
	// q falls short of floor(a*b/m) by at most 2.
	if x >= uint64(f.m) {
		x -= uint64(f.m)
	}
	if x >= uint64(f.m) {
		x -= uint64(f.m)
	}
	return uint32(x)
}

// pow returns a^e mod m.
func (f *field) pow(a, e uint32) uint32 {
	r := uint32(1)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r = f.mul(r, a)
		}
		a = f.mul(a, a)
	}
	return r
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// permutation returns key's permutation of the m slots: position 0 is slot
// center, and position p >= 1 is slot center + start*ratio^p (mod m). start
// is nonzero and ratio is a primitive root, so the powers run through every
// nonzero residue once in positions 1..m-1.
func (f *field) permutation(key string) (center, start, ratio uint32) {
	m := f.m
	center = uint32(keyHash(centerSalt, key) % uint64(m))
	start = uint32(keyHash(startSalt, key)%uint64(m-1)) + 1
	// root^e is a primitive root iff e is coprime to m-1; the first such
	// e from the hash on keeps the choice a function of the key.
	e := uint32(keyHash(ratioSalt, key) % uint64(m-1))
	for gcd(e, m-1) != 1 {
		e++
		if e == m-1 {
			e = 0
		}
	}
	return center, start, f.pow(f.root, e)
}

// walker is a backend's progress through its permutation.
type walker struct {
	cur    uint32 // slot at the current position
	center uint32
	y      uint32 // cur - center (mod m)
	ratio  uint32
	ratioQ uint64 // floor(ratio * 2^64 / m), for next
	need   uint32 // slots still to claim
	owner  uint32 // 1 + index into live, as stored in the owner table
}

// newWalker returns a walker at position 0 of key's permutation that needs
// need slots.
func newWalker(f *field, key string, need, owner uint32) walker {
	center, start, ratio := f.permutation(key)
	// ratio < m, so the quotient fits in 64 bits.
	ratioQ, _ := bits.Div64(uint64(ratio), 0, uint64(f.m))
	return walker{cur: center, center: center, y: start, ratio: ratio, ratioQ: ratioQ, need: need, owner: owner}
}

// next returns the slot and its offset from center at the position after
// the one with offset y: center + y*ratio and y*ratio (mod m). It is on the
// hot path of every visit, and inlined.
func next(center, y, ratio uint32, ratioQ uint64, m uint32) (cur, ny uint32) {
	// Shoup's multiplication by a constant: the quotient estimate needs
	// no product first, and falls short by at most 1.
	q, _ := bits.Mul64(uint64(y), ratioQ)
	x := uint64(y)*uint64(ratio) - q*uint64(m)
	if x >= uint64(m) {
		x -= uint64(m)
	}
	ny = uint32(x)
	// center + ny may not fit in a uint32.
	cur = center + ny
	if back := m - ny; center >= back {
		cur = center - back
	}
	return cur, ny
}
