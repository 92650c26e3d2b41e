package ddp_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/ddp"
)

// pick returns one of vs at random.
func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

// randTagged returns a tagged header of random control byte (any flags,
// any version), with an STag of a small set and a TO near next, so that
// headers continuing a message, and ones breaking its rules, both occur.
func randTagged(r *rand.Rand, next uint64) ddp.Header {
	h := make(ddp.Header, ddp.TaggedHeaderLen)
	h[0] = byte(r.Uint32())
	h[1] = byte(r.Uint32())
	binary.BigEndian.PutUint32(h[2:], pick(r, 0x100, 0x200, r.Uint32()))
	binary.BigEndian.PutUint64(h[6:], pick(r, next, next+1, next-1, 0, 10, ^uint64(0)-3, r.Uint64()))
	return h
}

// randUntagged returns an untagged header of random control byte, a QN
// of 0 to 4 (or any), an MSN near msn and an MO of 0 (or not).
func randUntagged(r *rand.Rand, msn uint32) ddp.Header {
	h := make(ddp.Header, ddp.UntaggedHeaderLen)
	h[0] = byte(r.Uint32())
	h[1] = byte(r.Uint32())
	binary.BigEndian.PutUint32(h[2:], r.Uint32())
	binary.BigEndian.PutUint32(h[6:], pick(r, 0, 0, 1, 2, 3, 4, r.Uint32()))
	binary.BigEndian.PutUint32(h[10:], pick(r, msn, msn, msn+1, msn-1, 1, r.Uint32()))
	binary.BigEndian.PutUint32(h[14:], pick(r, 0, 0, 10, r.Uint32()))
	return h
}

// randLen returns a payload length: small, zero, negative or large.
func randLen(r *rand.Rand) int { return pick(r, 10, 10, 1, 0, -1, 60, 1<<20, int(r.Uint32())) }

// errEq reports whether two errors of the rules are the same (both nil,
// or the same type and code).
func errEq(a, b error) bool {
	var ea, eb *ddp.Error
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return errors.As(a, &ea) && errors.As(b, &eb) && *ea == *eb
}

// evolveTagged drives s through a few random segments (accepted or
// not), expectations and placements, so that the states tested are
// idle, in progress or expecting, with any STag and TO.
func evolveTagged(r *rand.Rand, s *ddp.TaggedSink) {
	for range r.IntN(4) {
		switch r.IntN(4) {
		case 0:
			s.Expect(pick[ddp.STag](r, 0x100, 0x200), pick[uint64](r, 0, 10), pick[uint64](r, 10, 20, 0))
		case 1:
			s.Placed(r.IntN(2) == 0)
		default:
			h := randTagged(r, pick[uint64](r, 0, 10))
			n := randLen(r)
			if s.Segment(h, n, anyRegion{}) == nil {
				s.Placed(h.Last())
			}
		}
	}
}

// sameTagged checks that a and b, which may differ in what the rules
// record but do not read, answer every later segment alike: Active, and
// a random run of Segment, Continue, Expect and Placed on copies.
func sameTagged(t *testing.T, r *rand.Rand, a, b ddp.TaggedSink) bool {
	t.Helper()
	if a.Active() != b.Active() {
		t.Errorf("Active %v, want %v", b.Active(), a.Active())
		return false
	}
	for range 8 {
		ca, cb := a, b
		for step := range 4 {
			h, n := randTagged(r, pick[uint64](r, 0, 10, 20)), randLen(r)
			switch r.IntN(4) {
			case 0:
				ea, eb := ca.Segment(h, n, anyRegion{}), cb.Segment(h, n, anyRegion{})
				if !errEq(ea, eb) {
					t.Errorf("step %d: Segment %v, want %v", step, eb, ea)
					return false
				}
			case 1:
				if oa, ob := ca.Continue(h, n), cb.Continue(h, n); oa != ob {
					t.Errorf("step %d: Continue %v, want %v", step, ob, oa)
					return false
				}
			case 2:
				stag, to, end := pick[ddp.STag](r, 0x100, 0x200), pick[uint64](r, 0, 10), pick[uint64](r, 10, 20)
				ca.Expect(stag, to, end)
				cb.Expect(stag, to, end)
			default:
				l := r.IntN(2) == 0
				ca.Placed(l)
				cb.Placed(l)
			}
			if ca.Active() != cb.Active() {
				t.Errorf("step %d: Active %v, want %v", step, cb.Active(), ca.Active())
				return false
			}
		}
	}
	return true
}

// TestTaggedWholeAgrees: on random states and random headers, valid or
// not, TaggedSink.Whole accepts exactly what Continue accepts as the
// first segment of a message that Placed(true) then ends (which Segment,
// with the region accepted, accepts too), changes nothing, and leaves a
// sink that answers every later segment as Continue and Placed(true)
// leave it; refusing, it changes nothing.
func TestTaggedWholeAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(5041, 1))
	accepted := 0
	for i := range 20000 {
		var st ddp.TaggedSink
		evolveTagged(r, &st)
		h, n := randTagged(r, pick[uint64](r, 0, 10, 20)), randLen(r)
		w := st
		ok := w.Whole(h, n)
		if w != st {
			t.Fatalf("case %d: Whole changed the state", i)
		}
		c := st
		cok := c.Continue(h, n)
		if want := cok && !st.Active() && h.Last(); ok != want {
			t.Fatalf("case %d (%x, n %d, active %v): Whole %v, Continue of a first and last segment %v", i, []byte(h), n, st.Active(), ok, want)
		}
		if !ok {
			continue
		}
		accepted++
		c.Placed(true)
		if g := st; g.Segment(h, n, anyRegion{}) != nil {
			t.Fatalf("case %d: Whole accepts what Segment refuses", i)
		}
		if !sameTagged(t, r, c, w) {
			t.Fatalf("case %d (%x, n %d): Whole leaves a sink unlike Continue and Placed(true)", i, []byte(h), n)
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d of the cases accepted", accepted)
	}
}

// evolveUntagged drives u (Reset) through a few random messages and
// segments on queues 0 and 1, so that the states tested have MSNs
// beyond 1 and messages in progress.
func evolveUntagged(r *rand.Rand, u *ddp.UntaggedSink) {
	u.Reset()
	for range r.IntN(6) {
		qn := pick[uint32](r, 0, 0, 1)
		switch r.IntN(5) {
		case 0:
			u.Skip(qn)
		case 1:
			u.Abandon()
		default:
			h := randUntagged(r, u.MSN(qn))
			if u.Segment(h, qn) != nil {
				continue
			}
			if !u.Continues(h) && u.Begin(h, lenBuffers{100}) != nil {
				continue
			}
			if n := pick(r, 0, 10, 40); u.Fit(n) == nil {
				u.Placed(n, h.Last())
			}
		}
	}
}

// lenBuffers has a buffer of its length posted on every queue.
type lenBuffers struct{ n uint64 }

func (b lenBuffers) TakeBuffer(uint32) (uint64, bool) { return b.n, true }

// sameUntagged checks that a and b, which may differ in what the rules
// record but do not read, answer alike: MSN of every queue, Active and
// MO, and a random run of Segment, Continues, Begin, Fit, Placed,
// Single, Message and Skip on copies.
func sameUntagged(t *testing.T, r *rand.Rand, a, b ddp.UntaggedSink) bool {
	t.Helper()
	same := func(step int, a, b *ddp.UntaggedSink) bool {
		for q := range uint32(ddp.NumQueues + 1) {
			if a.MSN(q) != b.MSN(q) {
				t.Errorf("step %d: MSN(%d) %d, want %d", step, q, b.MSN(q), a.MSN(q))
				return false
			}
		}
		if a.Active() != b.Active() || a.MO() != b.MO() {
			t.Errorf("step %d: Active %v MO %d, want %v %d", step, b.Active(), b.MO(), a.Active(), a.MO())
			return false
		}
		return true
	}
	if !same(-1, &a, &b) {
		return false
	}
	for range 8 {
		ca, cb := a, b
		for step := range 4 {
			qn := pick[uint32](r, 0, 0, 1, 3)
			h, n := randUntagged(r, ca.MSN(qn)), randLen(r)
			switch r.IntN(7) {
			case 0:
				if ea, eb := ca.Segment(h, qn), cb.Segment(h, qn); !errEq(ea, eb) {
					t.Errorf("step %d: Segment %v, want %v", step, eb, ea)
					return false
				}
			case 1:
				if oa, ob := ca.Continues(h), cb.Continues(h); oa != ob {
					t.Errorf("step %d: Continues %v, want %v", step, ob, oa)
					return false
				}
			case 2: // Begin as the rules call it: for a first segment they accept
				if ca.Segment(h, qn) != nil || ca.Continues(h) {
					continue
				}
				b := lenBuffers{pick[uint64](r, 0, 50, 100)}
				if ea, eb := ca.Begin(h, b), cb.Begin(h, b); !errEq(ea, eb) {
					t.Errorf("step %d: Begin %v, want %v", step, eb, ea)
					return false
				}
			case 3:
				if ea, eb := ca.Fit(n), cb.Fit(n); !errEq(ea, eb) {
					t.Errorf("step %d: Fit %v, want %v", step, eb, ea)
					return false
				}
				if ca.Fit(n) == nil && n >= 0 {
					l := h.Last()
					ca.Placed(n, l)
					cb.Placed(n, l)
				}
			case 4:
				if ea, eb := ca.Single(h, qn), cb.Single(h, qn); !errEq(ea, eb) {
					t.Errorf("step %d: Single %v, want %v", step, eb, ea)
					return false
				}
			case 5:
				length := pick[uint64](r, 0, 50, 100)
				if oa, ob := ca.Message(h, qn, n, length), cb.Message(h, qn, n, length); oa != ob {
					t.Errorf("step %d: Message %v, want %v", step, ob, oa)
					return false
				} else if oa {
					ca.Delivered(h, qn, n, length)
					cb.Delivered(h, qn, n, length)
				}
			default:
				ca.Skip(qn)
				cb.Skip(qn)
			}
			if !same(step, &ca, &cb) {
				return false
			}
		}
	}
	return true
}

// TestUntaggedDeliverAgrees: on random states and random headers, valid
// or not, UntaggedSink.Deliver accepts exactly what Message accepts
// (which Segment, Begin, Fit and Placed accept too), leaves a sink that
// answers every later segment as Message and Delivered leave it, and
// refusing, changes nothing.
func TestUntaggedDeliverAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(5041, 2))
	accepted := 0
	for i := range 20000 {
		var st ddp.UntaggedSink
		evolveUntagged(r, &st)
		qn := pick[uint32](r, 0, 0, 1, 3, 4, 7)
		h, n := randUntagged(r, st.MSN(qn)), randLen(r)
		if r.IntN(2) == 0 { // mostly a valid message of one segment on qn
			h[0] |= ddp.FlagLast
			binary.BigEndian.PutUint32(h[6:], qn)
		}
		length := pick[uint64](r, 0, 10, 50, 1<<20, ^uint64(0), r.Uint64())
		d := st
		ok := d.Deliver(h, qn, n, length)
		m := st
		mok := m.Message(h, qn, n, length)
		if ok != mok {
			t.Fatalf("case %d (%x, qn %d, n %d, length %d): Deliver %v, Message %v", i, []byte(h), qn, n, length, ok, mok)
		}
		if !ok {
			if d != st {
				t.Fatalf("case %d: Deliver refused and changed the state", i)
			}
			continue
		}
		accepted++
		m.Delivered(h, qn, n, length)
		g := st
		if g.Segment(h, qn) != nil || g.Continues(h) || g.Begin(h, lenBuffers{length}) != nil || g.Fit(n) != nil {
			t.Fatalf("case %d: Deliver accepts what the rules refuse", i)
		}
		g.Placed(n, true)
		if !sameUntagged(t, r, m, d) || !sameUntagged(t, r, g, d) {
			t.Fatalf("case %d (%x, qn %d, n %d): Deliver leaves a sink unlike Message and Delivered", i, []byte(h), qn, n)
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d of the cases accepted", accepted)
	}
}
