package rdmap

// rqRing is a receive queue: the posted receive work requests, taken in
// posting order, on the generic ring (limit: the queue depth). Its
// owner's mutex guards it (QP.rqMu for a QP's own queue, SRQ.mu for a
// shared one); the owner checks full before post.
//
// A slot (rqEntry) has room for one SGE, the common receive, so that the
// slots the application writes and the receive engine reads on another
// core pack several to a cache line. The SGEs after the first live in
// ext (sgeSide).
type rqRing struct {
	ring[rqEntry]
	ext sgeSide
}

// rqEntry is a posted receive work request: its first SGE here, the
// others in its ring's ext.
//
// It is 40 bytes (the SGE's padding); the SGE's three fields in the
// entry, unpadded, make it 32 and a chunk of ringChunk two whole cache
// lines instead of 160 bytes across three or four. Measured on
// 2026-12-07 against an RQ of 8192 (make bench's send/64, whose
// receive engine reads a slot per message from an RQ larger than its
// core's L2 beside the data), 32 was no better: 145 against 136 ns of
// CPU per message, medians of 12 interleaved runs.
type rqEntry struct {
	id   uint64
	sge  SGE
	nsge uint8
}

// newRQRing returns a ring that holds maxWR entries of at most maxSGE
// SGEs each.
func newRQRing(maxWR, maxSGE int) rqRing {
	return rqRing{ring: newRing[rqEntry](maxWR), ext: newSGESide(maxSGE)}
}

// extOf returns the SGEs after the first of slot s.
func (r *rqRing) extOf(s int) []SGE { return r.ext.of(s, r.slots()) }

// sgeSide holds, beside a ring of work requests whose slots keep only
// the first SGE (the SQ, a receive queue), the SGEs after the first of
// the request in each slot: stride of them per slot, allocated the
// first time a request of more than one SGE is queued, so that a queue
// of one-SGE requests never holds them. The ring's lock guards it.
type sgeSide struct {
	sges   []SGE
	stride int // the most SGEs per request, less one
}

func newSGESide(maxSGE int) sgeSide { return sgeSide{stride: max(maxSGE-1, 0)} }

// of returns the SGEs after the first of slot (of a ring of slots),
// allocating the array at its first use.
func (x *sgeSide) of(slot, slots int) []SGE {
	if x.sges == nil {
		x.sges = make([]SGE, slots*x.stride)
	}
	return x.sges[slot*x.stride : (slot+1)*x.stride]
}

// at returns SGE i (at least 1) of slot, of the array allocated already.
func (x *sgeSide) at(slot, i int) *SGE { return &x.sges[slot*x.stride+i-1] }

// post appends wr; the caller has checked that the ring has room and
// that wr has at most the ring's maxSGE SGEs.
func (r *rqRing) post(wr RecvWR) {
	s := r.slot(r.tail)
	e := r.push()
	e.id = wr.ID
	e.nsge = uint8(len(wr.SGL))
	switch len(wr.SGL) {
	case 0:
		e.sge = SGE{}
	case 1:
		e.sge = wr.SGL[0]
	default:
		e.sge = wr.SGL[0]
		copy(r.extOf(s), wr.SGL[1:])
	}
}

// postOne appends the receive id of the one SGE sge, as post does; the
// caller has checked that the ring has room.
func (r *rqRing) postOne(id uint64, sge *SGE) {
	e := r.push()
	e.id, e.sge, e.nsge = id, *sge, 1
}

// postOnes appends the longest prefix of wrs whose receives have one SGE
// with its region set (the common receive), as postOne appends each, and
// returns how many it appended: the same entries in the same slots, the
// tail moved once for them, the chunk looked up once per chunk, and a
// whole chunk of common receives checked and set without a loop. The
// caller has checked that the ring has room for len(wrs) more and that a
// receive of one SGE is valid for it (its maxSGE is at least 1: one
// SGE's length is at most MaxRecvLen).
func (r *rqRing) postOnes(wrs []RecvWR) int {
	n := 0
	for n < len(wrs) {
		// The chunk of slot s, read from r each time: fewer values live
		// across the inner loop and its write barriers.
		s := (r.tail + uint64(n)) & r.mask
		c := r.chunks[s/ringChunk]
		if c == nil {
			// As push allocates: when an entry goes in.
			if !commonRecv(&wrs[n]) {
				break
			}
			c = new([ringChunk]rqEntry)
			r.chunks[s/ringChunk] = c
		}
		end := min(r.mask+1, ringChunk)
		if s%ringChunk == 0 && end == ringChunk && len(wrs)-n >= ringChunk {
			// A whole chunk of common receives: checked, then set, in
			// line.
			w := (*[ringChunk]RecvWR)(wrs[n:])
			if commonRecv(&w[0]) && commonRecv(&w[1]) && commonRecv(&w[2]) && commonRecv(&w[3]) {
				c[0].id, c[0].sge, c[0].nsge = w[0].ID, w[0].SGL[0], 1
				c[1].id, c[1].sge, c[1].nsge = w[1].ID, w[1].SGL[0], 1
				c[2].id, c[2].sge, c[2].nsge = w[2].ID, w[2].SGL[0], 1
				c[3].id, c[3].sge, c[3].nsge = w[3].ID, w[3].SGL[0], 1
				n += ringChunk
				continue
			}
		}
		// The slots of chunk c from s on (those the ring uses: all but
		// in a ring of fewer slots), while the receives are common.
		for j := s % ringChunk; j < end && n < len(wrs); j++ {
			wr := &wrs[n]
			if !commonRecv(wr) {
				r.tail += uint64(n)
				return n
			}
			e := &c[j%ringChunk]
			e.id, e.sge, e.nsge = wr.ID, wr.SGL[0], 1
			n++
		}
	}
	r.tail += uint64(n)
	return n
}

// postOnes sets the slots of a whole chunk one by one, four of them: a
// ringChunk of another size does not compile here.
var _ [1]struct{} = [ringChunk - 3]struct{}{}

// commonRecv reports whether wr is the common receive: one SGE, with
// its region.
func commonRecv(wr *RecvWR) bool { return len(wr.SGL) == 1 && wr.SGL[0].MR != nil }

// take moves the oldest receive into e, dropping the ring's references to
// its memory regions. It reports false when none is posted.
func (r *rqRing) take(e *rxRecv) bool {
	if r.empty() {
		return false
	}
	r.takeAt(e, r.head)
	r.pop()
	return true
}

// takeAt moves receive i (live) into e, dropping the ring's references
// to its memory regions. Only the live SGEs move; e's SGEs past them,
// left from an earlier receive, drop their regions.
func (r *rqRing) takeAt(e *rxRecv, i uint64) {
	src := r.at(i)
	if src.takeOne(e) {
		return
	}
	n := src.nsge
	if n > 0 {
		e.sgl[0] = src.sge
		src.sge.MR = nil
	}
	if n > 1 {
		ext := r.extOf(r.slot(i))
		for k := 1; k < int(n); k++ {
			e.sgl[k] = ext[k-1]
			ext[k-1].MR = nil
		}
	}
	for k := n; k < e.nsge; k++ {
		e.sgl[k] = SGE{}
	}
	e.id, e.nsge = src.id, n
}

// takeOne is takeAt of the entry src for the common receive, of one
// SGE, taken into an e that holds at most one (the common receive
// before): it moves src into e, dropping src's reference to its region,
// and reports true; otherwise it changes nothing and reports false
// (takeAt moves it).
func (src *rqEntry) takeOne(e *rxRecv) bool {
	if src.nsge != 1 || e.nsge > 1 {
		return false
	}
	e.sgl[0] = src.sge
	src.sge.MR = nil
	e.id, e.nsge = src.id, 1
	return true
}

// rxRecv is the receive the receive engine fills (rxEngine.recv): its
// own copy of a posted receive, taken from an rqRing.
type rxRecv struct {
	id   uint64
	nsge uint8
	sgl  [MaxSGE]SGE
}
