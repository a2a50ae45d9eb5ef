package maglev

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// DefaultSize is the default number of slots in a table (a prime).
const DefaultSize = 65537

// Backend is one entry of a table.
type Backend struct {
	// Key identifies the backend identically on every dispatcher (e.g.
	// "198.18.0.100@80@198.18.0.21"); it alone (with the table size)
	// determines the backend's permutation.
	Key string
	// ID is what the table stores in the backend's slots.
	ID uint32
	// Weight is the backend's share of slots; 0 means no slots.
	Weight uint32
}

// Build returns a lookup table of m slots; table[i] is the ID of the
// backend that owns slot i.
//
// m must be prime and at least the number of backends with a positive
// Weight. Every backend, whatever its weight, needs a non-empty Key, and no
// two backends may share a Key or an ID. Each backend with a positive
// weight owns its quota of slots: m*Weight/(sum of weights), rounded down
// or up by the largest-remainder method. If no backend has a positive
// weight, Build returns nil and no error.
//
// The table depends only on the set of backends and m, not on the order of
// backends; Build does not modify backends. It allocates the table, a bit
// per slot and O(len(backends)) besides. The package documentation
// describes how slots are assigned and the hash that places them.
func Build(backends []Backend, m uint32) ([]uint32, error) {
	if !isPrime(m) {
		return nil, fmt.Errorf("building maglev table: size %d is not prime", m)
	}
	for i, b := range backends {
		if b.Key == "" {
			return nil, fmt.Errorf("building maglev table: backend %d (id %d) has an empty key", i, b.ID)
		}
	}

	// Everything below works on a copy sorted by key, so the caller's
	// order cannot matter.
	bs := slices.Clone(backends)
	// (The ID only orders duplicate keys, for a stable error message.)
	slices.SortFunc(bs, func(a, b Backend) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.ID, b.ID))
	})
	for i := 1; i < len(bs); i++ {
		if bs[i].Key == bs[i-1].Key {
			return nil, fmt.Errorf("building maglev table: duplicate key %q (ids %d and %d)", bs[i].Key, bs[i-1].ID, bs[i].ID)
		}
	}
	if err := checkIDs(bs); err != nil {
		return nil, err
	}

	live := bs[:0]
	for _, b := range bs {
		if b.Weight > 0 {
			live = append(live, b)
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	if uint64(len(live)) > uint64(m) {
		return nil, fmt.Errorf("building maglev table: size %d is smaller than the number of backends with positive weight (%d)", m, len(live))
	}

	return populate(live, quotas(live, m), m)
}

// checkIDs returns an error naming two backends of bs that share an ID.
func checkIDs(bs []Backend) error {
	byID := make([]int, len(bs))
	for i := range byID {
		byID[i] = i
	}
	// bs is sorted by key, so ties on the ID keep key order and the error
	// names the same pair whatever the input order.
	slices.SortStableFunc(byID, func(a, b int) int { return cmp.Compare(bs[a].ID, bs[b].ID) })
	for i := 1; i < len(byID); i++ {
		a, b := bs[byID[i-1]], bs[byID[i]]
		if a.ID == b.ID {
			return fmt.Errorf("building maglev table: duplicate id %d (keys %q and %q)", a.ID, a.Key, b.Key)
		}
	}
	return nil
}

// quotas returns each backend's number of slots by the largest-remainder
// method: every backend gets floor(m*w/W), and the slots left over go one
// each to the backends with the largest remainders m*w mod W, ties to the
// smaller key. live must be sorted by key, with positive weights and
// len(live) <= m.
func quotas(live []Backend, m uint32) []uint32 {
	// No overflow: W <= len(live)*(2^32-1) <= (2^32-1)^2 and
	// m*w <= (2^32-1)^2.
	var total uint64
	for _, b := range live {
		total += uint64(b.Weight)
	}
	q := make([]uint32, len(live))
	rem := make([]uint64, len(live))
	left := uint64(m)
	for i, b := range live {
		share := uint64(m) * uint64(b.Weight)
		q[i] = uint32(share / total)
		rem[i] = share % total
		left -= uint64(q[i])
	}
	// Each remainder is below W, so the leftover is below len(live).
	order := make([]int, len(live))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	for _, i := range order[:left] {
		q[i]++
	}
	return q
}

// isPrime reports whether m is prime, by trial division (at most 2^15
// divisions for a uint32).
func isPrime(m uint32) bool {
	if m < 2 {
		return false
	}
	if m%2 == 0 {
		return m == 2
	}
	for d := uint64(3); d*d <= uint64(m); d += 2 {
		if uint64(m)%d == 0 {
			return false
		}
	}
	return true
}
