package ddp

import "encoding/binary"

// The Data Sink's placement rules (RFC 5041 §5.3, §5.4, §7.2), in the
// order Linux siw checks them (siw_qp_rx.c: siw_write_check_ntoh,
// siw_rresp_check_ntoh, siw_send_check_ntoh). The ULP supplies its
// buffers through two small interfaces, Buffers (untagged) and Regions
// (tagged); the rules decide what is valid and return an *Error for what
// is not. They keep the state of one direction of one DDP stream, must be
// used from one goroutine, do no I/O and do not allocate (but for the
// *Error they return).

// NumQueues is the number of untagged queues the rules track (RDMAP uses
// QN 0 to 3: Send, Read Request, Terminate, atomics).
const NumQueues = 4

func errOf(t ErrorType, c ErrorCode) error { return &Error{Type: t, Code: c} }

// Buffers is the ULP's side of untagged placement: the buffers it has
// posted.
type Buffers interface {
	// TakeBuffer removes the next buffer posted on queue qn, for the
	// message that begins, and returns its length; false when none is
	// posted.
	TakeBuffer(qn uint32) (length uint64, ok bool)
}

// UntaggedSink holds the untagged state of a stream: the MSN each queue
// expects next, and the one message in progress (its queue, MSN, the MO
// its next segment must carry and the length of its buffer). The zero
// value must be Reset before use.
type UntaggedSink struct {
	msn    [NumQueues]uint32
	active bool
	qn     uint32
	cur    uint32 // MSN of the message in progress (read only while active, as qn)
	mo     uint32 // bytes of it accepted so far: the next MO
	length uint64 // its buffer's length (read only while active)
}

// Reset starts the stream: every queue expects MSN 1 (RFC 5041 §5.1),
// no message is in progress.
func (u *UntaggedSink) Reset() { *u = UntaggedSink{msn: [NumQueues]uint32{1, 1, 1, 1}} }

// MSN returns the MSN queue qn expects next (0 for a queue the rules do
// not track).
func (u *UntaggedSink) MSN(qn uint32) uint32 {
	if qn >= NumQueues {
		return 0
	}
	return u.msn[qn]
}

// Active reports whether a message is in progress.
func (u *UntaggedSink) Active() bool { return u.active }

// MO returns how many bytes of the message in progress (or of the last
// one) have been placed: the MO its next segment must carry.
func (u *UntaggedSink) MO() uint32 { return u.mo }

// Segment checks a segment of a message that may span segments, which
// the ULP expects on queue qn: its QN (invalid QN), then its MSN (MSN
// range) and MO (invalid MO) against the message in progress or, for a
// new message, the queue's next MSN and MO 0.
func (u *UntaggedSink) Segment(h Header, qn uint32) error {
	_ = h[UntaggedHeaderLen-1] // one bounds check for the fields below
	if h.QN() != qn || qn >= NumQueues {
		return errOf(ErrTypeUntagged, CodeInvalidQN)
	}
	msn, mo := h.MSN(), h.MO()
	if u.active && u.qn == qn {
		if msn != u.cur {
			return errOf(ErrTypeUntagged, CodeMSNRange)
		}
		if mo != u.mo {
			return errOf(ErrTypeUntagged, CodeInvalidMO)
		}
		return nil
	}
	if msn != u.msn[qn] {
		return errOf(ErrTypeUntagged, CodeMSNRange)
	}
	if mo != 0 {
		return errOf(ErrTypeUntagged, CodeInvalidMO)
	}
	return nil
}

// Continues reports whether a segment Segment accepted continues the
// message in progress (false: it begins a new one, see Begin).
func (u *UntaggedSink) Continues(h Header) bool {
	return u.active && u.qn == h.QN() && u.cur == h.MSN()
}

// Begin starts the message whose first segment h Segment accepted, with
// the buffer b gives for its queue: "no buffer available" when none is
// posted.
func (u *UntaggedSink) Begin(h Header, b Buffers) error {
	_ = h[UntaggedHeaderLen-1]
	qn := h.QN()
	length, ok := b.TakeBuffer(qn)
	if !ok {
		return errOf(ErrTypeUntagged, CodeNoBuffer)
	}
	u.active, u.qn, u.cur, u.mo, u.length = true, qn, h.MSN(), 0, length
	return nil
}

// Fit checks that n more bytes of the message in progress fit its
// buffer. A message too long is reported as "no buffer available", as
// siw does, not RFC 5041's "message too long" (0x05).
func (u *UntaggedSink) Fit(n int) error {
	if !u.active || uint64(u.mo)+uint64(n) > u.length {
		return errOf(ErrTypeUntagged, CodeNoBuffer)
	}
	return nil
}

// Placed records that n more bytes of the message in progress were
// placed (and its segment delivered); last ends the message and advances
// its queue's MSN.
func (u *UntaggedSink) Placed(n int, last bool) {
	u.mo += uint32(n)
	if last {
		u.active = false
		u.msn[u.qn]++
	}
}

// Message reports whether Segment, Begin, Fit and Placed in turn would
// accept a message of one segment h (its L flag set) of n payload bytes
// on queue qn into a buffer of length bytes (the one Begin would take):
// the queue's next MSN, MO 0, no message in progress on the queue, room
// for n bytes. It changes nothing: a caller that has placed the message
// records it with Delivered; one told false goes through Segment and
// Begin, which give the error.
func (u *UntaggedSink) Message(h Header, qn uint32, n int, length uint64) bool {
	_ = h[UntaggedHeaderLen-1]
	if !h.Last() || h.QN() != qn || qn >= NumQueues || u.active && u.qn == qn {
		return false
	}
	return h.MSN() == u.msn[qn] && h.MO() == 0 && n >= 0 && uint64(n) <= length
}

// Delivered records the message Message accepted (with the same
// arguments) as Begin, Fit and Placed would: placed and delivered, MO
// returns n, the queue's next MSN advances.
func (u *UntaggedSink) Delivered(h Header, qn uint32, n int, length uint64) {
	u.active, u.qn, u.cur, u.mo, u.length = false, qn, h.MSN(), uint32(n), length
	u.msn[qn]++
}

// Deliver is Message and Delivered in one step, for a caller that places
// the message only once its rules are checked: it reports whether Message
// would accept the message of one segment h of n payload bytes on queue
// qn into a buffer of length bytes and, when it would, records it as
// Delivered would: no message in progress, MO returns n, the queue's
// next MSN advances. It records neither the message's MSN nor its
// buffer's length (Delivered's), which the rules read only while a
// message is in progress. Reporting false, it changes nothing: the caller
// then goes through Segment and Begin, which give the error.
func (u *UntaggedSink) Deliver(h Header, qn uint32, n int, length uint64) bool {
	// The QN and MSN fields are adjacent: one load checks both (which
	// also keeps Deliver within the compiler's inlining budget, as the
	// receive runs need it: a call per FPDU costs more than its checks).
	if !h.Last() || qn >= NumQueues || u.active && u.qn == qn || n < 0 || uint64(n) > length || h.MO() != 0 ||
		binary.BigEndian.Uint64(h[qnOffset:]) != uint64(qn)<<32|uint64(u.msn[qn]) {
		return false
	}
	u.active, u.mo = false, uint32(n)
	u.msn[qn]++
	return true
}

// Abandon ends the message in progress without delivering it (the
// stream is failing); its queue's MSN stays.
func (u *UntaggedSink) Abandon() { u.active = false }

// Single checks a single-segment message the ULP expects on queue qn:
// its QN (invalid QN), its MSN (MSN range; also while a message is in
// progress on that queue) and MO 0 (invalid MO).
func (u *UntaggedSink) Single(h Header, qn uint32) error {
	if h.QN() != qn || qn >= NumQueues {
		return errOf(ErrTypeUntagged, CodeInvalidQN)
	}
	if h.MSN() != u.msn[qn] || (u.active && u.qn == qn) {
		return errOf(ErrTypeUntagged, CodeMSNRange)
	}
	if h.MO() != 0 {
		return errOf(ErrTypeUntagged, CodeInvalidMO)
	}
	return nil
}

// Skip advances queue qn's MSN past a message that needed no buffer (a
// single-segment message, once delivered).
func (u *UntaggedSink) Skip(qn uint32) {
	if qn < NumQueues {
		u.msn[qn]++
	}
}

// Regions is the ULP's side of tagged placement: the buffers STags name.
type Regions interface {
	// CheckRegion validates placing n bytes at TO to of the buffer stag
	// names (valid STag, protection domain, access, bounds) and prepares
	// the placement. It returns nil or an *Error of type ErrTypeTagged.
	CheckRegion(stag STag, to uint64, n int) error
}

// TaggedSink holds the tagged message in progress of a stream: its
// segments name the same STag at consecutive TOs (RFC 5041 §5.3). A
// message may also be expected before it starts (a Read Response lands
// where its Read said: Expect).
type TaggedSink struct {
	active  bool   // a message is in progress
	stag    STag   // read only while active or bounded
	next    uint64 // the TO its next segment must carry (idem)
	bounded bool   // Expect: the message ends exactly at end
	end     uint64
}

// Active reports whether a message is in progress.
func (s *TaggedSink) Active() bool { return s.active }

// Expect makes the next segment belong to a message at stag that
// continues at TO to and ends exactly at TO end (for one segment only;
// call it before each).
func (s *TaggedSink) Expect(stag STag, to, end uint64) {
	s.bounded, s.stag, s.next, s.end = true, stag, to, end
}

// Segment checks a tagged segment of n payload bytes: the STag (invalid
// STag) and TO (base or bounds) of a continuing or expected message, an
// expected message's end (base or bounds), then, for a non-empty
// payload, the region through r. A zero-length segment is accepted
// without asking r (siw does; the P2P RTR is a zero-length Write). On
// success the segment is part of the message in progress.
func (s *TaggedSink) Segment(h Header, n int, r Regions) error {
	_ = h[TaggedHeaderLen-1] // one bounds check for the fields below
	stag, to := h.STag(), h.TO()
	bounded := s.bounded
	s.bounded = false
	if s.active || bounded {
		if stag != s.stag {
			return errOf(ErrTypeTagged, CodeInvalidSTag)
		}
		if to != s.next {
			return errOf(ErrTypeTagged, CodeBaseBounds)
		}
	}
	if bounded && (to+uint64(n) > s.end || to+uint64(n) < to || (h.Last() && to+uint64(n) != s.end)) {
		return errOf(ErrTypeTagged, CodeBaseBounds)
	}
	if n > 0 {
		if err := r.CheckRegion(stag, to, n); err != nil {
			return err
		}
	}
	s.active, s.stag, s.next = true, stag, to+uint64(n)
	return nil
}

// Continue is Segment for a caller that has already checked the region
// of a tagged segment of n > 0 payload bytes (what Regions.CheckRegion
// would check) and wants no call back: it accepts the segment exactly
// when Segment would, with its region accepted, and reports true. When
// it cannot tell without Segment (an expected message, see Expect) or
// Segment would refuse the segment (its STag or TO does not continue the
// message in progress), it reports false and changes nothing: the caller
// then calls Segment, which gives the error.
func (s *TaggedSink) Continue(h Header, n int) bool {
	_ = h[TaggedHeaderLen-1]
	if s.bounded || n <= 0 {
		return false
	}
	stag, to := h.STag(), h.TO()
	if s.active && (stag != s.stag || to != s.next) {
		return false
	}
	s.active, s.stag, s.next = true, stag, to+uint64(n)
	return true
}

// Whole reports whether Continue would accept the tagged segment h of
// n payload bytes (its region checked by the caller) as the first
// segment of a message and Placed(true) would then end it: h's L flag
// set, n > 0, no message in progress and none expected (Expect). Such a
// message leaves the sink idle, as the sink already is: Whole changes
// nothing, and the STag and TO Continue would record are not recorded,
// the rules reading them only while a message is in progress or
// expected. When it reports false the caller uses Continue (then
// Segment, which gives any error).
func (s *TaggedSink) Whole(h Header, n int) bool {
	return !s.active && !s.bounded && n > 0 && h.Last()
}

// Placed records that the segment Segment accepted was placed and
// delivered; last ends the message.
func (s *TaggedSink) Placed(last bool) {
	if last {
		s.active = false
	}
}

// Abandon ends the message in progress (the stream is failing).
func (s *TaggedSink) Abandon() { s.active, s.bounded = false, false }
