// Package compact gives back the memory of Go maps that shrank: a map
// keeps the buckets of its largest size after its entries are deleted, so
// a daemon that held 100,000 servers and lost them would keep their
// memory for good.
package compact

// MinRemoved is the fewest deletions worth copying a map for.
const MinRemoved = 1024

// Map returns m, or a copy of m sized for what it holds when removed
// entries were just deleted from it, at least MinRemoved and more than it
// still holds. The copy costs no more than the deletions did.
func Map[K comparable, V any](m map[K]V, removed int) map[K]V {
	if removed < MinRemoved || removed <= len(m) {
		return m
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
