package rdmap

// rqRing is a receive queue: the posted receive work requests, taken in
// posting order, on the generic ring (limit: the queue depth). Its
// owner's mutex guards it (QP.rqMu for a QP's own queue, SRQ.mu for a
// shared one); the owner checks full before post.
type rqRing struct{ ring[rqEntry] }

// newRQRing returns a ring that holds maxWR entries.
func newRQRing(maxWR int) rqRing { return rqRing{newRing[rqEntry](maxWR)} }

// post appends wr; the caller has checked that the ring has room.
func (r *rqRing) post(wr RecvWR) {
	e := r.push()
	e.id = wr.ID
	// Most receives have one SGE: an assignment, where copy of a slice
	// of structs with pointers costs a runtime call (typedslicecopy)
	// more than the SGE itself.
	if len(wr.SGL) == 1 {
		e.sgl[0] = wr.SGL[0]
		e.nsge = 1
		return
	}
	e.nsge = uint8(copy(e.sgl[:], wr.SGL))
}

// take moves the oldest receive into e, dropping the ring's references to
// its memory regions. It reports false when none is posted.
func (r *rqRing) take(e *rqEntry) bool {
	src := r.pop()
	if src == nil {
		return false
	}
	takeEntry(e, src)
	return true
}

// takeEntry moves the receive in src into e, dropping src's references to
// its memory regions. Only the live SGEs move (an entry is 16 of them,
// mostly unused); e's SGEs past them, left from an earlier receive, drop
// their regions.
func takeEntry(e, src *rqEntry) {
	n := src.nsge
	for i := range n {
		e.sgl[i] = src.sgl[i]
		src.sgl[i].MR = nil
	}
	for i := n; i < e.nsge; i++ {
		e.sgl[i] = SGE{}
	}
	e.id, e.nsge = src.id, n
}
