package maglev

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// group is the backends of one weight that still want slots. They advance
// through their permutations in lockstep, so they share one position.
type group struct {
	time   uint64 // floor((2*pos+1) * 2^31 / weight): pos's time, rounded
	weight uint32
	pos    uint32 // next position in each member's permutation
	start  uint32 // members are walkers[start : start+n]
	n      uint32
}

// setPos moves g to position pos.
func (g *group) setPos(pos uint32) {
	g.pos = pos
	// (2*pos+1) << 31 < 2^64, as pos < 2^32.
	g.time = (2*uint64(pos) + 1) << 31 / uint64(g.weight)
}

// before reports whether group a's next step comes before group b's: at
// time (2*pos+1)/(2*weight), earlier first, and at equal times the heavier
// group first. The rounded times settle almost every comparison; only when
// they are equal are the exact times compared, whose products reach 2^65,
// hence 128-bit arithmetic.
func before(a, b *group) bool {
	if a.time != b.time {
		return a.time < b.time
	}
	ahi, alo := bits.Mul64(2*uint64(a.pos)+1, uint64(b.weight))
	bhi, blo := bits.Mul64(2*uint64(b.pos)+1, uint64(a.weight))
	if ahi != bhi {
		return ahi < bhi
	}
	if alo != blo {
		return alo < blo
	}
	return a.weight > b.weight
}

// populate fills the table. live is sorted by key, and q[i] is live[i]'s
// quota; the quotas sum to m.
//
// Every backend walks its permutation at a speed proportional to its
// weight, visiting its position p at time (2p+1)/(2*weight); at each visit
// it claims the slot if the slot is still free and the backend is below its
// quota. Visits happen in time order (ties: heavier first, then smaller
// key). Unlike Maglev's population, a backend advances past a taken slot in
// the same step, so the time at which it reaches a slot does not depend on
// what other backends claimed: a slot simply goes to the backend that
// reaches it first among those still below quota. The package
// documentation says why.
//
// Backends of one weight form a group that steps in lockstep, and a
// priority queue of groups yields the steps in time order.
func populate(live []Backend, q []uint32, m uint32) ([]uint32, error) {
	// walkers[start:start+n] of each group are its members, each with its
	// own place in its permutation.
	f := newField(m)
	walkers := make([]walker, 0, len(live))
	for i, b := range live {
		if q[i] > 0 {
			walkers = append(walkers, newWalker(&f, b.Key, q[i], uint32(i)+1))
		}
	}
	// Heavier first, then by key (live is in key order): the order within
	// a group, and the order of groups that step at the same time.
	slices.SortStableFunc(walkers, func(a, b walker) int {
		return cmp.Compare(live[b.owner-1].Weight, live[a.owner-1].Weight)
	})

	var groups []group
	for i, w := range walkers {
		weight := live[w.owner-1].Weight
		if len(groups) == 0 || groups[len(groups)-1].weight != weight {
			groups = append(groups, group{weight: weight, start: uint32(i)})
			groups[len(groups)-1].setPos(0)
		}
		groups[len(groups)-1].n++
	}
	h := groupHeap(groups)
	h.init()

	// owner[s] is 1 + the index into live of slot s's owner. Slot m is
	// scratch, written by visits that claim nothing so that a claim needs
	// no branch. taken has a bit per slot: the visits, which outnumber
	// slots several times, test it in 8 KiB (at m = 65537) that stay in
	// the L1 cache, not in owner's 256 KiB.
	owner := make([]uint32, uint64(m)+1)
	taken := make([]uint64, (uint64(m)+63)/64)
	for filled := uint32(0); filled < m; {
		if len(h) == 0 {
			return nil, fmt.Errorf("building maglev table: internal error: %d of %d slots left unassigned", m-filled, m)
		}
		g := &h[0]
		ws := walkers[g.start : g.start+g.n]
		k, claimed := step(owner, taken, ws, m)
		filled += claimed
		g.n = uint32(k)
		if g.n == 0 {
			h.pop()
			continue
		}
		// Skip the positions at which none of the group would find a
		// free slot: they claim nothing whenever they come, as slots
		// never become free again, so the group need only return to
		// the queue for the next position that may claim. This keeps
		// the queue out of the long tail, when few backends are left
		// and most of their steps hit taken slots.
		pos := uint64(g.pos) + 1
		pos += skipTaken(taken, ws[:k], m, uint64(m)-min(pos, uint64(m)))
		// A backend below quota always finds a free slot within its m
		// positions: a slot it passed while free it would have claimed.
		if pos >= uint64(m) {
			return nil, fmt.Errorf("building maglev table: internal error: backend %q exhausted its permutation", live[ws[0].owner-1].Key)
		}
		g.setPos(uint32(pos))
		h.down(0)
	}

	table := owner[:m:m]
	for s, o := range table {
		table[s] = live[o-1].ID
	}
	return table, nil
}

// step advances each of ws by one position, claiming its slot if it is
// free. It moves the walkers that still need slots to the front, keeping
// their order, and returns how many there are and how many slots were
// claimed.
func step(owner []uint32, taken []uint64, ws []walker, m uint32) (k int, claimed uint32) {
	finished := false
	for i := range ws {
		w := &ws[i]
		// Whether the slot is free is a coin toss for much of the
		// build, so claim without a branch: a visit that claims
		// nothing writes the scratch slot m.
		word := taken[w.cur/64]
		free := uint32(^word>>(w.cur%64)) & 1
		taken[w.cur/64] = word | 1<<(w.cur%64)
		slot := w.cur
		if free == 0 {
			slot = m
		}
		owner[slot] = w.owner
		w.need -= free
		claimed += free
		finished = finished || w.need == 0
		w.cur, w.y = next(w.center, w.y, w.ratio, w.ratioQ, m)
	}
	if !finished {
		return len(ws), claimed
	}
	for _, w := range ws {
		if w.need > 0 {
			ws[k] = w
			k++
		}
	}
	return k, claimed
}

// skipTaken advances all of ws in lockstep while none of them is at a free
// slot, at most limit positions, and returns by how many positions. The
// limit only guards against a broken invariant (some walker of ws always
// reaches a free slot within its permutation): it turns a loop without end
// into an error.
func skipTaken(taken []uint64, ws []walker, m uint32, limit uint64) (skipped uint64) {
	if len(ws) == 1 {
		// Much of the long tail of the build is one walker looking for
		// its last slots: keep it in registers, so that a step costs
		// little more than its multiplication.
		w := &ws[0]
		cur, y := w.cur, w.y
		for ; skipped < limit && taken[cur/64]>>(cur%64)&1 != 0; skipped++ {
			cur, y = next(w.center, y, w.ratio, w.ratioQ, m)
		}
		w.cur, w.y = cur, y
		return skipped
	}
	for ; skipped < limit; skipped++ {
		for i := range ws {
			cur := ws[i].cur
			if taken[cur/64]>>(cur%64)&1 == 0 {
				return skipped
			}
		}
		for i := range ws {
			w := &ws[i]
			w.cur, w.y = next(w.center, w.y, w.ratio, w.ratioQ, m)
		}
	}
	return skipped
}

// groupHeap is a binary min-heap of groups, ordered by before. It holds
// the groups themselves, not indexes, so that comparisons do not chase
// pointers. (container/heap would box every operation in an interface
// call.)
type groupHeap []group

func (h groupHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h groupHeap) down(i int) {
	// Move a hole down rather than swapping: the group is written once.
	n := len(h)
	x := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && before(&h[r], &h[l]) {
			j = r
		}
		if !before(&h[j], &x) {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = x
}

// pop removes the first group.
func (h *groupHeap) pop() {
	last := len(*h) - 1
	(*h)[0] = (*h)[last]
	*h = (*h)[:last]
	if last > 0 {
		h.down(0)
	}
}
