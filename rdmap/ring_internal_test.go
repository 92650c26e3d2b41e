package rdmap

import (
	"testing"
	"unsafe"
)

func TestRingSize(t *testing.T) {
	for _, c := range []struct{ limit, slots int }{
		{0, 1}, {1, 1}, {2, 2}, {3, 4}, {100, 128}, {128, 128}, {129, 256}, {1 << 20, 1 << 20},
	} {
		r := newRing[int](c.limit)
		if r.slots() != c.slots || r.mask != uint64(c.slots-1) || r.limit != c.limit {
			t.Errorf("newRing(%d): %d slots, mask %#x, limit %d; want %d slots", c.limit, r.slots(), r.mask, r.limit, c.slots)
		}
		for k, ch := range r.chunks {
			if ch != nil {
				t.Errorf("newRing(%d): chunk %d allocated before any push", c.limit, k)
			}
		}
		if !r.empty() || r.len() != 0 || r.peek() != nil || r.pop() != nil {
			t.Errorf("newRing(%d) not empty", c.limit)
		}
		if r.full() != (c.limit == 0) {
			t.Errorf("newRing(%d): full = %v", c.limit, r.full())
		}
	}
}

// TestRingFIFO pushes and pops through many wraps of a ring whose limit is
// not a power of two, against a slice as the model: order, len, full,
// peek, and that an index names its entry (at) from push to pop.
func TestRingFIFO(t *testing.T) {
	for _, start := range []uint64{0, ^uint64(0) - 20} { // the counters may wrap modulo 2^64
		r := newRing[uint64](5)
		r.head, r.tail = start, start
		var model []uint64
		next := uint64(0)
		for step := range 500 {
			if step%7 < 4 && !r.full() { // push more often than pop
				idx := r.tail
				e := r.push()
				*e = next
				if r.at(idx) != e {
					t.Fatalf("step %d: at(%d) is not the pushed slot", step, idx)
				}
				model = append(model, next)
				next++
			} else if e := r.pop(); e != nil {
				if len(model) == 0 || *e != model[0] {
					t.Fatalf("step %d: popped %d, model %v", step, *e, model)
				}
				model = model[1:]
			} else if len(model) != 0 {
				t.Fatalf("step %d: pop nil with %d entries", step, len(model))
			}
			if r.len() != len(model) || r.empty() != (len(model) == 0) || r.full() != (len(model) >= 5) {
				t.Fatalf("step %d: len %d empty %v full %v, model %d", step, r.len(), r.empty(), r.full(), len(model))
			}
			if p := r.peek(); (p == nil) != (len(model) == 0) || (p != nil && *p != model[0]) {
				t.Fatalf("step %d: peek wrong", step)
			}
			k := 0
			for i := r.head; i != r.tail; i++ {
				if *r.at(i) != model[k] || r.slot(i) != int(i&7) {
					t.Fatalf("step %d: entry %d is %d, want %d", step, i, *r.at(i), model[k])
				}
				k++
			}
		}
		if next < 100 {
			t.Fatalf("only %d entries went through", next)
		}
		r.drop()
		if !r.empty() || r.peek() != nil {
			t.Fatal("drop left entries")
		}
	}
}

func TestRingAllocs(t *testing.T) {
	r := newRing[sqEntry](16)
	if a := testing.AllocsPerRun(100, func() {
		for range 10 {
			r.push().id = 1
		}
		for !r.empty() {
			r.pop()
		}
	}); a != 0 {
		t.Errorf("%v allocs", a)
	}
}

// TestSQEntryLine: a send work request's entry stays one cache line, so
// that posting, starting, framing and completing a small request each
// touch one line of the SQ (the rest lives in QP.sqSGL and QP.sqExt).
func TestSQEntryLine(t *testing.T) {
	if n := unsafe.Sizeof(sqEntry{}); n > 64 {
		t.Errorf("sqEntry is %d bytes, more than a 64-byte cache line", n)
	}
}
