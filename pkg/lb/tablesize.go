package lb

// Maglev table sizes. A port's table has a prime number of slots, at least
// SlotsPerServer times its number of servers, so that every server's share
// of the slots is within about 1 % of its weight's share; at most
// MaxTableSize.
const (
	// MinTableSize is the smallest table (a port with one server).
	MinTableSize = 101
	// MaxTableSize is the largest table, and the executor's inner map
	// size limit.
	MaxTableSize = 65537
	// SlotsPerServer is how many slots a table has at least per server.
	SlotsPerServer = 100
)

// isPrime reports whether n is a prime (trial division; n is small).
func isPrime(n uint32) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := uint32(3); d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// ValidTableSize reports whether n can be a port's table size: a prime in
// MinTableSize..MaxTableSize.
func ValidTableSize(n uint32) bool {
	return n >= MinTableSize && n <= MaxTableSize && isPrime(n)
}

// TableSizeFor returns the table size of a port with the given number of
// servers: the smallest prime of at least SlotsPerServer × servers slots
// (and at least MinTableSize), at most MaxTableSize.
func TableSizeFor(servers int) uint32 {
	want := uint64(max(servers, 1)) * SlotsPerServer
	if want >= MaxTableSize {
		return MaxTableSize
	}
	n := max(uint32(want), MinTableSize)
	for !isPrime(n) {
		n++
	}
	return n
}

// Table returns the size of the port's Maglev table: TableSize when the
// operator fixed it, else TableSizeFor its number of servers.
func (p *Port) Table() uint32 {
	if p.TableSize != 0 {
		return p.TableSize
	}
	return TableSizeFor(len(p.Servers))
}

// TableIn returns the size of the Maglev table of port p of cluster cl:
// TableSize when the operator fixed it; MaxTableSize when the cluster is
// announced over BGP; else TableSizeFor its number of servers.
//
// Dispatchers behind ECMP must keep one table size whatever the servers:
// a flow that moves to another dispatcher finds its server through that
// dispatcher's table alone, and a table of another size is another table
// altogether (every slot moves), where one of the same size moves only the
// slots of the servers added or removed. The cost is the table's memory,
// 512 KiB per port in the kernel (an array keeps its 4-byte slots 8
// bytes apart).
func (cl *Cluster) TableIn(p *Port) uint32 {
	switch {
	case p.TableSize != 0:
		return p.TableSize
	case cl.Announce:
		return MaxTableSize
	}
	return TableSizeFor(len(p.Servers))
}
