package rdmap

// ring is the FIFO queue behind every queue of a QP and a CQ: the SQ,
// the RQ and SRQ (rqRing), the ORQ, the IRQ and a CQ's completions. Its
// array has a power-of-two length; head and tail count the entries ever
// taken and added (uint64: they do not wrap), and entry i lives in slot
// i&mask, so an index stays valid as a name for its entry from push to
// pop (the SQ keeps such indices). limit is the queue's depth as
// configured, which need not be a power of two: full reports it. The
// owner's lock guards a ring (the SQ's is the exception: its tail is
// QP.sqTail, its free slots the posts', under QP.postMu, and its tail
// field stays 0; see QP.sqTail).
//
// The slots are allocated lazily, ringChunk at a time, the first time a
// push reaches them (an idle QP holds the slots it has used,
// not its configured depth): a ring of 128 sqEntry slots that has only
// ever held one entry costs one chunk. Chunks never move or go away, so
// a pointer to a slot stays valid for the ring's life (the send engine
// keeps one to the work request it is sending, the receive engine one to
// the ORQ head, both outside the owner's lock). Slots are allocated by
// the pusher only (push, or alloc for the SQ), under the owner's lock;
// at, peek and pop are for live entries, whose chunks exist.
type ring[T any] struct {
	chunks     []*[ringChunk]T // chunk k holds slots k*ringChunk ..; nil until used
	mask       uint64
	limit      int
	head, tail uint64
}

// ringChunk is how many slots a ring allocates at once (a power of two;
// a ring of fewer slots allocates one chunk, part of it unused).
const ringChunk = 4

// newRing returns an empty ring that holds limit entries (at least one
// slot, so that a ring of limit 0 has a valid at once pushed).
func newRing[T any](limit int) ring[T] {
	n := ringSize(max(limit, 1))
	return ring[T]{chunks: make([]*[ringChunk]T, (n+ringChunk-1)/ringChunk), mask: uint64(n - 1), limit: limit}
}

// slots returns the number of slots of the ring's array (allocated or
// not).
func (r *ring[T]) slots() int { return int(r.mask) + 1 }

// ref returns slot s, which must be allocated.
func (r *ring[T]) ref(s uint64) *T {
	return &r.chunks[s/ringChunk][s%ringChunk]
}

// ringSize returns the smallest power of two that is at least n.
func ringSize(n int) int {
	s := 1
	for s < n {
		s <<= 1
	}
	return s
}

// len returns the number of entries in the ring.
func (r *ring[T]) len() int { return int(r.tail - r.head) }

// empty reports whether the ring holds no entry.
func (r *ring[T]) empty() bool { return r.head == r.tail }

// full reports whether the ring holds limit entries (or more: see push).
func (r *ring[T]) full() bool { return r.tail-r.head >= uint64(r.limit) }

// slot returns the array index of entry i.
func (r *ring[T]) slot(i uint64) int { return int(i & r.mask) }

// at returns entry i (head <= i < tail for a live entry).
func (r *ring[T]) at(i uint64) *T { return r.ref(i & r.mask) }

// peek returns the oldest entry, or nil when the ring is empty.
func (r *ring[T]) peek() *T {
	if r.head == r.tail {
		return nil
	}
	return r.ref(r.head & r.mask)
}

// push appends an entry and returns its slot, which still holds whatever
// an earlier entry left there: the caller sets every field. The caller
// checks full first; push never overwrites a live entry as long as the
// ring holds at most len(buf) entries, which a limit of at most len(buf)
// guarantees.
func (r *ring[T]) push() *T {
	e := r.alloc(r.tail)
	r.tail++
	return e
}

// alloc returns the slot of entry i, allocating its chunk if no push has
// reached it yet (push's step; the SQ, which keeps its tail apart, pushes
// with it).
func (r *ring[T]) alloc(i uint64) *T {
	s := i & r.mask
	c := r.chunks[s/ringChunk]
	if c == nil {
		c = new([ringChunk]T)
		r.chunks[s/ringChunk] = c
	}
	return &c[s%ringChunk]
}

// pop removes the oldest entry and returns its slot, valid until the
// next push; nil when the ring is empty.
func (r *ring[T]) pop() *T {
	if r.head == r.tail {
		return nil
	}
	e := r.ref(r.head & r.mask)
	r.head++
	return e
}

// drop forgets every entry (their slots keep their contents until
// overwritten).
func (r *ring[T]) drop() { r.head = r.tail }
