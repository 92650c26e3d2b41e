package ddp_test

import (
	"errors"
	"testing"

	"github.com/gosiw/gosiw/ddp"
)

func untagged(qn, msn, mo uint32, last bool) ddp.Header {
	h, err := ddp.Parse(ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: last, QN: qn, MSN: msn, MO: mo}))
	if err != nil {
		panic(err)
	}
	return h
}

func tagged(stag ddp.STag, to uint64, last bool) ddp.Header {
	h, err := ddp.Parse(ddp.AppendTagged(nil, &ddp.TaggedFields{Last: last, STag: stag, TO: to}))
	if err != nil {
		panic(err)
	}
	return h
}

// buffers posts receive buffers of the given lengths on queue 0.
type buffers struct{ lens []uint64 }

func (b *buffers) TakeBuffer(qn uint32) (uint64, bool) {
	if qn != 0 || len(b.lens) == 0 {
		return 0, false
	}
	n := b.lens[0]
	b.lens = b.lens[1:]
	return n, true
}

// regions grants one region: STag 0x100, TOs [0, 1000).
type regions struct{ calls int }

func (r *regions) CheckRegion(stag ddp.STag, to uint64, n int) error {
	r.calls++
	if stag != 0x100 {
		return &ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.CodeInvalidSTag}
	}
	if to+uint64(n) > 1000 {
		return &ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.CodeBaseBounds}
	}
	return nil
}

func wantErr(t *testing.T, name string, err error, typ ddp.ErrorType, code ddp.ErrorCode, ok bool) {
	t.Helper()
	if ok {
		if err != nil {
			t.Errorf("%s: %v, want nil", name, err)
		}
		return
	}
	var de *ddp.Error
	if !errors.As(err, &de) || de.Type != typ || de.Code != code {
		t.Errorf("%s: %v, want %v/%s", name, err, typ, ddp.CodeName(typ, code))
	}
}

// untaggedSeg is one step of an untagged message stream.
type untaggedSeg struct {
	name   string
	h      ddp.Header
	want   uint32 // the queue the ULP expects
	single bool   // a single-segment message (Single) rather than Segment
	n      int    // payload
	ok     bool
	typ    ddp.ErrorType
	code   ddp.ErrorCode
}

// TestUntaggedRules: QN, MSN and MO of untagged segments, for new and
// continuing messages and single-segment ones, and the buffer rules.
// Each table runs from a fresh stream with two buffers of 100 bytes.
func TestUntaggedRules(t *testing.T) {
	const U = ddp.ErrTypeUntagged
	tables := [][]untaggedSeg{
		{ // a two-segment Send, then the next one
			{name: "first", h: untagged(0, 1, 0, false), n: 60, ok: true},
			{name: "second", h: untagged(0, 1, 60, true), n: 40, ok: true},
			{name: "next message", h: untagged(0, 2, 0, true), n: 10, ok: true},
		},
		{{name: "wrong queue", h: untagged(1, 1, 0, true), want: 0, typ: U, code: ddp.CodeInvalidQN}},
		{{name: "queue out of range", h: untagged(7, 1, 0, true), want: 7, typ: U, code: ddp.CodeInvalidQN}},
		{{name: "MSN ahead", h: untagged(0, 2, 0, true), typ: U, code: ddp.CodeMSNRange}},
		{{name: "MSN zero", h: untagged(0, 0, 0, true), typ: U, code: ddp.CodeMSNRange}},
		{{name: "new message at MO 10", h: untagged(0, 1, 10, true), typ: U, code: ddp.CodeInvalidMO}},
		{
			{name: "first", h: untagged(0, 1, 0, false), n: 60, ok: true},
			{name: "MO gap", h: untagged(0, 1, 70, true), typ: U, code: ddp.CodeInvalidMO},
		},
		{
			{name: "first", h: untagged(0, 1, 0, false), n: 60, ok: true},
			{name: "other MSN mid-message", h: untagged(0, 2, 0, true), typ: U, code: ddp.CodeMSNRange},
		},
		{
			{name: "first", h: untagged(0, 1, 0, false), n: 60, ok: true},
			{name: "too long for the buffer", h: untagged(0, 1, 60, true), n: 41, typ: U, code: ddp.CodeNoBuffer},
		},
		{
			{name: "one", h: untagged(0, 1, 0, true), n: 1, ok: true},
			{name: "two", h: untagged(0, 2, 0, true), n: 1, ok: true},
			{name: "no third buffer", h: untagged(0, 3, 0, true), n: 1, typ: U, code: ddp.CodeNoBuffer},
		},
		{ // single-segment messages on their own queues
			{name: "read request", h: untagged(1, 1, 0, true), want: 1, single: true, ok: true},
			{name: "second read request", h: untagged(1, 2, 0, true), want: 1, single: true, ok: true},
			{name: "replayed MSN", h: untagged(1, 2, 0, true), want: 1, single: true, typ: U, code: ddp.CodeMSNRange},
		},
		{{name: "single at MO 4", h: untagged(3, 1, 4, true), want: 3, single: true, typ: U, code: ddp.CodeInvalidMO}},
		{{name: "single wrong queue", h: untagged(2, 1, 0, true), want: 1, single: true, typ: U, code: ddp.CodeInvalidQN}},
		{
			{name: "send begins", h: untagged(0, 1, 0, false), n: 10, ok: true},
			{name: "single on queue 0 mid-message", h: untagged(0, 1, 0, true), want: 0, single: true, typ: U, code: ddp.CodeMSNRange},
		},
	}
	for _, table := range tables {
		var u ddp.UntaggedSink
		u.Reset()
		b := &buffers{lens: []uint64{100, 100}}
		for _, s := range table {
			var err error
			if s.single {
				if err = u.Single(s.h, s.want); err == nil {
					u.Skip(s.want)
				}
			} else {
				err = u.Segment(s.h, s.want)
				if err == nil && !u.Continues(s.h) {
					err = u.Begin(s.h, b)
				}
				if err == nil {
					err = u.Fit(s.n)
				}
				if err == nil {
					u.Placed(s.n, s.h.Last())
				}
			}
			wantErr(t, s.name, err, s.typ, s.code, s.ok)
			if err != nil {
				break
			}
		}
	}
	// The MSNs and the MO a stream reports.
	var u ddp.UntaggedSink
	u.Reset()
	b := &buffers{lens: []uint64{100}}
	if u.MSN(0) != 1 || u.MSN(3) != 1 || u.MSN(9) != 0 || u.Active() {
		t.Fatalf("fresh stream: MSN %d %d %d, active %v", u.MSN(0), u.MSN(3), u.MSN(9), u.Active())
	}
	h := untagged(0, 1, 0, false)
	if err := u.Segment(h, 0); err != nil {
		t.Fatal(err)
	}
	if err := u.Begin(h, b); err != nil {
		t.Fatal(err)
	}
	u.Placed(30, false)
	if !u.Active() || u.MO() != 30 || u.MSN(0) != 1 {
		t.Fatalf("mid-message: active %v MO %d MSN %d", u.Active(), u.MO(), u.MSN(0))
	}
	u.Abandon()
	if u.Active() || u.MSN(0) != 1 {
		t.Fatalf("abandoned: active %v MSN %d", u.Active(), u.MSN(0))
	}
}

// TestTaggedRules: STag and TO continuity of tagged messages, expected
// messages (Read Responses) and the region check.
func TestTaggedRules(t *testing.T) {
	const T = ddp.ErrTypeTagged
	type seg struct {
		name   string
		expect []uint64 // stag, to, end for Expect before the segment
		h      ddp.Header
		n      int
		ok     bool
		code   ddp.ErrorCode
		calls  int // CheckRegion calls so far
	}
	tables := [][]seg{
		{
			{name: "first", h: tagged(0x100, 0, false), n: 100, ok: true, calls: 1},
			{name: "continues", h: tagged(0x100, 100, true), n: 100, ok: true, calls: 2},
			{name: "a new message anywhere", h: tagged(0x100, 500, true), n: 10, ok: true, calls: 3},
		},
		{{name: "unknown STag", h: tagged(0x200, 0, true), n: 1, code: ddp.CodeInvalidSTag, calls: 1}},
		{{name: "past the region", h: tagged(0x100, 990, true), n: 11, code: ddp.CodeBaseBounds, calls: 1}},
		{{name: "zero length: no region check", h: tagged(0x999, 0, true), n: 0, ok: true, calls: 0}},
		{
			{name: "first", h: tagged(0x100, 0, false), n: 100, ok: true, calls: 1},
			{name: "other STag mid-message", h: tagged(0x101, 100, true), n: 1, code: ddp.CodeInvalidSTag, calls: 1},
		},
		{
			{name: "first", h: tagged(0x100, 0, false), n: 100, ok: true, calls: 1},
			{name: "TO gap", h: tagged(0x100, 101, true), n: 1, code: ddp.CodeBaseBounds, calls: 1},
		},
		{
			{name: "first", h: tagged(0x100, 0, false), n: 0, ok: true, calls: 0},
			{name: "zero length checks continuity", h: tagged(0x100, 4, true), n: 0, code: ddp.CodeBaseBounds, calls: 0},
		},
		{ // Read Responses: expected STag, TO and end
			{name: "expected", expect: []uint64{0x100, 10, 110}, h: tagged(0x100, 10, false), n: 50, ok: true, calls: 1},
			{name: "expected rest", expect: []uint64{0x100, 60, 110}, h: tagged(0x100, 60, true), n: 50, ok: true, calls: 2},
		},
		{{name: "wrong sink STag", expect: []uint64{0x100, 10, 110}, h: tagged(0x101, 10, true), n: 100, code: ddp.CodeInvalidSTag}},
		{{name: "wrong sink TO", expect: []uint64{0x100, 10, 110}, h: tagged(0x100, 0, true), n: 100, code: ddp.CodeBaseBounds}},
		{{name: "too long", expect: []uint64{0x100, 10, 110}, h: tagged(0x100, 10, false), n: 101, code: ddp.CodeBaseBounds}},
		{{name: "last but short", expect: []uint64{0x100, 10, 110}, h: tagged(0x100, 10, true), n: 99, code: ddp.CodeBaseBounds}},
		{{name: "TO wraps", expect: []uint64{0x100, 1<<64 - 8, 1<<64 - 1}, h: tagged(0x100, 1<<64-8, true), n: 16, code: ddp.CodeBaseBounds}},
	}
	for _, table := range tables {
		var s ddp.TaggedSink
		r := &regions{}
		for _, c := range table {
			if c.expect != nil {
				s.Expect(ddp.STag(c.expect[0]), c.expect[1], c.expect[2])
			}
			err := s.Segment(c.h, c.n, r)
			wantErr(t, c.name, err, T, c.code, c.ok)
			if r.calls != c.calls {
				t.Errorf("%s: %d region checks, want %d", c.name, r.calls, c.calls)
			}
			if err != nil {
				break
			}
			if !s.Active() {
				t.Errorf("%s: no message in progress after a segment", c.name)
			}
			s.Placed(c.h.Last())
			if s.Active() == c.h.Last() {
				t.Errorf("%s: active %v after a segment with L=%v", c.name, s.Active(), c.h.Last())
			}
		}
	}
	var s ddp.TaggedSink
	if err := s.Segment(tagged(0x100, 0, false), 1, &regions{}); err != nil {
		t.Fatal(err)
	}
	s.Abandon()
	if s.Active() {
		t.Fatal("active after Abandon")
	}
}

func TestErrorString(t *testing.T) {
	e := &ddp.Error{Type: ddp.ErrTypeUntagged, Code: ddp.CodeMSNRange}
	if got, want := e.Error(), "ddp: untagged buffer: invalid MSN - MSN range is not valid"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if e.Version() || !(&ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.CodeTaggedVersion}).Version() {
		t.Fatal("Version()")
	}
}

// anyRegion accepts every region (the caller of Continue has checked it).
type anyRegion struct{}

func (anyRegion) CheckRegion(ddp.STag, uint64, int) error { return nil }

// TestShortcutsAgree: TaggedSink.Continue and UntaggedSink.Message (with
// Delivered) accept exactly what Segment (with a region accepted), and
// Segment, Begin, Fit and Placed, accept, and leave the same state; what
// they do not accept leaves the state unchanged.
func TestShortcutsAgree(t *testing.T) {
	accept := anyRegion{}
	var tstates []ddp.TaggedSink
	var s ddp.TaggedSink
	tstates = append(tstates, s)
	if err := s.Segment(tagged(0x100, 0, false), 10, accept); err != nil {
		t.Fatal(err)
	}
	tstates = append(tstates, s) // a message in progress, next TO 10
	s = ddp.TaggedSink{}
	s.Expect(0x100, 10, 20)
	tstates = append(tstates, s) // an expected message
	for i, st := range tstates {
		for _, stag := range []ddp.STag{0x100, 0x200} {
			for _, to := range []uint64{0, 5, 10} {
				for _, last := range []bool{false, true} {
					for _, n := range []int{0, 10} {
						h := tagged(stag, to, last)
						c, g := st, st
						ok := c.Continue(h, n)
						err := g.Segment(h, n, accept)
						switch {
						case ok && (err != nil || c != g):
							t.Errorf("state %d, %#x/%d/%v/%d: Continue accepts, Segment: %v", i, stag, to, last, n, err)
						case !ok && c != st:
							t.Errorf("state %d, %#x/%d/%v/%d: Continue refused and changed the state", i, stag, to, last, n)
						case !ok && err == nil && n > 0 && i != 2:
							t.Errorf("state %d, %#x/%d/%v/%d: Continue refused what Segment accepts", i, stag, to, last, n)
						}
					}
				}
			}
		}
	}

	var ustates []ddp.UntaggedSink
	var u ddp.UntaggedSink
	u.Reset()
	ustates = append(ustates, u)
	if err := u.Begin(untagged(0, 1, 0, false), &buffers{lens: []uint64{100}}); err != nil {
		t.Fatal(err)
	}
	u.Placed(10, false)
	ustates = append(ustates, u) // MSN 1 in progress, MO 10
	u.Reset()
	u.Skip(0)
	ustates = append(ustates, u) // MSN 2 next
	for i, st := range ustates {
		for _, qn := range []uint32{0, 1, 7} {
			for _, msn := range []uint32{1, 2, 3} {
				for _, mo := range []uint32{0, 10} {
					for _, last := range []bool{false, true} {
						for _, n := range []int{0, 10, 60} {
							h := untagged(qn, msn, mo, last)
							c, g := st, st
							ok := c.Message(h, 0, n, 50)
							if c != st {
								t.Fatalf("state %d: Message changed the state", i)
							}
							if ok {
								c.Delivered(h, 0, n, 50)
							}
							gok := last && g.Segment(h, 0) == nil && !g.Continues(h) && g.Begin(h, &buffers{lens: []uint64{50}}) == nil && g.Fit(n) == nil
							if gok {
								g.Placed(n, true)
							}
							if ok != gok || ok && c != g {
								t.Errorf("state %d, qn %d msn %d mo %d last %v n %d: Message %v, the rules %v", i, qn, msn, mo, last, n, ok, gok)
							}
						}
					}
				}
			}
		}
	}
}
