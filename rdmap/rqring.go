package rdmap

// rqRing is a receive queue: the posted receive work requests, taken in
// posting order. Its owner's mutex guards it (QP.rqMu for a QP's own
// queue, SRQ.mu for a shared one); the owner bounds its length.
type rqRing struct {
	ring       []rqEntry
	mask       uint64
	head, tail uint64
}

// newRQRing returns a ring that holds at least maxWR entries.
func newRQRing(maxWR int) rqRing {
	n := ringSize(maxWR)
	return rqRing{ring: make([]rqEntry, n), mask: uint64(n - 1)}
}

// len returns the number of receives posted and not yet taken.
func (r *rqRing) len() int { return int(r.tail - r.head) }

// post appends wr; the caller has checked that the ring has room.
func (r *rqRing) post(wr RecvWR) {
	e := &r.ring[r.tail&r.mask]
	e.id = wr.ID
	e.nsge = uint8(copy(e.sgl[:], wr.SGL))
	r.tail++
}

// take moves the oldest receive into e, dropping the ring's references to
// its memory regions. It reports false when none is posted.
func (r *rqRing) take(e *rqEntry) bool {
	if r.head == r.tail {
		return false
	}
	src := &r.ring[r.head&r.mask]
	*e = *src
	for i := range src.nsge {
		src.sgl[i].MR = nil
	}
	r.head++
	return true
}

// pop removes the oldest receive and returns its slot, valid until the
// next post; nil when none is posted.
func (r *rqRing) pop() *rqEntry {
	if r.head == r.tail {
		return nil
	}
	e := &r.ring[r.head&r.mask]
	r.head++
	return e
}

// clear forgets every posted receive.
func (r *rqRing) clear() { r.head = r.tail }
