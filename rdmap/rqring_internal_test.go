package rdmap

import (
	"math/rand/v2"
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

// TestRQRingPostOnes: postOnes posts what postOne would, receive by
// receive, up to the first that is not the common one (one SGE with its
// region): over random lists, into rings of every small size (fewer
// slots than a chunk among them) at every offset, a twin ring posted
// with postOne gives the same count, tail and entries in the same slots,
// and entries the pass did not reach keep what they held.
func TestRQRingPostOnes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mr := &MR{}
	for _, limit := range []int{1, 2, 3, 4, 5, 8, 13} {
		a, b := newRQRing(limit, 3), newRQRing(limit, 3)
		id := uint64(0)
		for step := range 400 {
			wrs := make([]RecvWR, rng.IntN(limit+1))
			for i := range wrs {
				id++
				wrs[i] = RecvWR{ID: id, SGL: []SGE{{MR: mr, Offset: id, Length: uint32(id)}}}
				switch rng.IntN(8) { // mostly common ones
				case 0:
					wrs[i].SGL = nil
				case 1:
					wrs[i].SGL[0].MR = nil
				case 2:
					wrs[i].SGL = append(wrs[i].SGL, SGE{MR: mr})
				}
			}
			wrs = wrs[:min(len(wrs), limit-a.len())]
			n := a.postOnes(wrs)
			want := 0
			for want < len(wrs) && len(wrs[want].SGL) == 1 && wrs[want].SGL[0].MR != nil {
				b.postOne(wrs[want].ID, &wrs[want].SGL[0])
				want++
			}
			if n != want || a.tail != b.tail {
				t.Fatalf("limit %d step %d: postOnes posted %d (tail %d), want %d (tail %d)", limit, step, n, a.tail, want, b.tail)
			}
			for k := range a.chunks {
				if (a.chunks[k] == nil) != (b.chunks[k] == nil) {
					t.Fatalf("limit %d step %d: chunk %d allocated %v, want %v", limit, step, k, a.chunks[k] != nil, b.chunks[k] != nil)
				}
				if a.chunks[k] != nil && *a.chunks[k] != *b.chunks[k] {
					t.Fatalf("limit %d step %d: chunk %d holds %+v, want %+v", limit, step, k, *a.chunks[k], *b.chunks[k])
				}
			}
			for range rng.IntN(a.len() + 1) { // take some
				a.pop()
				b.pop()
			}
		}
	}
}

// BenchmarkPostRecvs measures posting receives and taking them as the
// receive engine does: PostRecvs of a list of 32 one-SGE receives into
// the RQ of a QP that is not started, then each taken (takeRecv, which
// looks under the lock for what was posted when it has taken all it saw)
// and the taken ones removed from the RQ (rqPop, as flushRecvs does
// before pushing their completions). One op is one receive.
func BenchmarkPostRecvs(b *testing.B) { benchPostRecvs(b, 32) }

// BenchmarkPostRecvsOdd is BenchmarkPostRecvs with lists of 25, so that
// a list begins anywhere in a chunk of the RQ's ring, as a poster that
// reposts what it polled begins it.
func BenchmarkPostRecvsOdd(b *testing.B) { benchPostRecvs(b, 25) }

func benchPostRecvs(b *testing.B, k int) {
	qp, _, mr := engineQP(b, 1024, QPConfig{MaxRecvWR: 256}, make([]byte, 64*k))
	wrs := make([]RecvWR, k)
	for i := range wrs {
		wrs[i] = RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(64*i, 64)}}
	}
	var e rxRecv
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += k {
		if n, err := qp.PostRecvs(wrs); n != k || err != nil {
			b.Fatalf("PostRecvs posted %d: %v", n, err)
		}
		for i := range k {
			if !qp.takeRecv(&e) || e.id != uint64(i) {
				b.Fatalf("take %d: got %d", i, e.id)
			}
		}
		qp.rqPop()
	}
}
