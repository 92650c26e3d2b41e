package rdmap

import (
	"slices"
	"testing"
	"unsafe"
)

// TestRQRingSGLs posts receives of 0 to MaxSGE SGEs, in an order that
// puts long and short ones in the same slots of a small ring in turn, and
// takes them (as an SRQ does, and as the QP's engine does by index into
// one engine-side receive): each take yields exactly the SGL posted, the
// engine's copy keeps no SGE of an earlier, longer receive, and the ring
// keeps no reference to a region it gave away.
func TestRQRingSGLs(t *testing.T) {
	mrs := make([]*MR, MaxSGE)
	for i := range mrs {
		mrs[i] = &MR{}
	}
	sgl := func(id, n int) []SGE {
		s := make([]SGE, n)
		for k := range s {
			s[k] = SGE{MR: mrs[(id+k)%len(mrs)], Offset: uint64(id*100 + k), Length: uint32(k + 1)}
		}
		return s
	}
	lens := []int{MaxSGE, 1, 0, 3, 1, MaxSGE, 2, 1, 1, 0, MaxSGE - 1, 1}
	for _, byIndex := range []bool{false, true} {
		r := newRQRing(3, MaxSGE) // 4 slots: every slot sees several lengths
		var e rxRecv
		for id, n := range lens {
			r.post(RecvWR{ID: uint64(id), SGL: sgl(id, n)})
			if id%2 == 0 {
				continue // two in the ring at a time
			}
			for range 2 {
				i := r.head
				if byIndex {
					r.takeAt(&e, i)
					r.pop()
				} else if !r.take(&e) {
					t.Fatal("take: ring empty")
				}
				want := int(e.id)
				if w := sgl(want, lens[want]); !slices.Equal(w, e.sgl[:e.nsge]) {
					t.Fatalf("byIndex=%v: receive %d: SGL %+v, want %+v", byIndex, want, e.sgl[:e.nsge], w)
				}
				for k := int(e.nsge); k < MaxSGE; k++ {
					if e.sgl[k] != (SGE{}) {
						t.Fatalf("byIndex=%v: receive %d: SGE %d left from an earlier receive: %+v", byIndex, want, k, e.sgl[k])
					}
				}
				if s := r.at(i); s.sge.MR != nil {
					t.Fatalf("byIndex=%v: receive %d: the slot keeps its first region", byIndex, want)
				}
			}
			for k, s := range r.ext.sges { // the ring is empty again
				if s.MR != nil {
					t.Fatalf("byIndex=%v: after receive %d: ext[%d] keeps a region", byIndex, id, k)
				}
			}
		}
		if r.take(&e) {
			t.Fatalf("byIndex=%v: take from an empty ring", byIndex)
		}
	}
}

// TestRQEntrySize keeps a receive queue slot to what the common one-SGE
// receive needs: several slots to a cache line.
func TestRQEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(rqEntry{}); n > 40 {
		t.Fatalf("rqEntry is %d bytes, want at most 40", n)
	}
	if r := newRQRing(8, 1); r.ext.stride != 0 {
		t.Fatalf("a ring of one-SGE receives has %d SGEs per slot aside", r.ext.stride)
	}
}
