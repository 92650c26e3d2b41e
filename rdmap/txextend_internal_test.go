package rdmap

import (
	"math/rand/v2"
	"testing"
)

// TestExtendRunMatchesChecks: txExtendRunLocked, with its loops for one
// region's stretch, starts exactly the requests the rule of a run gives
// one at a time (txPick): after the run's first, each Send or Write that
// follows while it is runnable and txCheckLocked passes it, up to
// txRunMax requests and txRunBytes of payload; and the references it
// takes cover every request started, from its regions, and reach no
// further. The lists mix regions, SGEs out of their region's bounds
// (past its end, an offset that wraps, a length too long), requests of
// two SGEs, inline ones, fences behind an outstanding Read and Reads;
// the SQs are of 2 slots (fewer than a ring's chunk) and more, their
// indices wrapping around the ring.
func TestExtendRunMatchesChecks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, depth := range []int{2, 3, 4, 7, 64, 256, 2 * txRunMax} {
		dev, _ := NewDevice(nil)
		pd := dev.AllocPD()
		cq, _ := dev.CreateCQ(16)
		qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth})
		if err != nil {
			t.Fatal(err)
		}
		var mrs []*MR
		for range 3 {
			mr, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
			mrs = append(mrs, mr)
		}
		for round := range 300 {
			orqBusy := rng.IntN(4) == 0
			// Rounds of small, plain requests only, whose runs txRunMax
			// cuts before txRunBytes does.
			small := depth > txRunMax && round%3 == 0
			wrs := make([]SendWR, 1+rng.IntN(depth))
			m := mrs[0]
			for i := range wrs {
				if rng.IntN(6) == 0 {
					m = mrs[rng.IntN(len(mrs))]
				}
				op := WRWrite
				if rng.IntN(3) == 0 {
					op = WRSend
				}
				off, n := rng.IntN(4000), 1+rng.IntN(96)
				if small {
					n = 1 + rng.IntN(32)
				} else if rng.IntN(2) == 0 {
					n = 1 + rng.IntN(8192) // more runs cut by txRunBytes
					off = rng.IntN(4096)
				}
				w := SendWR{ID: uint64(i), Op: op, SGL: []SGE{m.SGE(off, n)}, Remote: Remote{STag: 0x100}}
				kind := rng.IntN(24)
				if small {
					kind = -1 // only requests that join a run: txRunMax ends it
				}
				switch kind {
				case 0:
					w.SGL[0].Offset = 4096 + uint64(rng.IntN(10)) // past the end
				case 1:
					w.SGL[0].Offset = ^uint64(0) - uint64(rng.IntN(100)) // wraps
				case 2:
					w.SGL[0].Offset, w.SGL[0].Length = 4000, 97 // too long
				case 3:
					w.SGL = append(w.SGL, mrs[rng.IntN(len(mrs))].SGE(0, 8))
				case 4:
					w.SGL, w.InlineData = nil, make([]byte, 1+rng.IntN(64))
				case 5:
					w.Fence = true
				case 6:
					w.Op = WRRead
				}
				wrs[i] = w
			}
			if k, err := qp.PostSends(wrs); k != len(wrs) || err != nil {
				t.Fatalf("depth %d round %d: PostSends = %d, %v", depth, round, k, err)
			}
			qp.sqMu.Lock()
			first := qp.sqNext
			e0 := qp.sq.at(first)
			if orqBusy {
				qp.orq = newRing[orqEntry](1)
				qp.orq.push()
			}
			// The rule, one request at a time, on copies of the
			// entries (the run's first is started as txPick starts it).
			want := first + 1
			bytes := uint64(e0.length)
			for want != qp.sqTail.Load() && want < first+txRunMax && bytes < txRunBytes {
				e := qp.sq.at(want)
				if !runOp(e.op) || (e.fence && orqBusy) || qp.txCheckLocked(e, qp.sq.slot(want)) != WCSuccess {
					break
				}
				bytes += uint64(e.length)
				want++
			}
			qp.sqNext = first + 1
			e0.state = sqActive
			if runOp(e0.op) {
				qp.txExtendRunLocked(first, uint64(e0.length))
			}
			if !runOp(e0.op) {
				want = first + 1
			}
			if qp.sqNext != want {
				t.Fatalf("depth %d round %d: run started up to %d, want %d", depth, round, qp.sqNext-first, want-first)
			}
			for i := first + 1; i < qp.sqTail.Load(); i++ {
				if st := qp.sq.at(i).state; (st == sqActive) != (i < want) {
					t.Fatalf("depth %d round %d: request %d is %v", depth, round, i-first, st)
				}
			}
			// Every started Send or Write of SGEs holds its regions.
			tx := &qp.tx
			refs := tx.refs[tx.refsHead:]
			for i := first + 1; i < want; i++ {
				e := qp.sq.at(i)
				if e.inline {
					continue
				}
				for g := range int(e.nsge) {
					mr := qp.sqSGE(e, qp.sq.slot(i), g).MR
					covered := false
					for _, r := range refs {
						if r.mr == mr && r.upTo > i {
							covered = true
						}
					}
					if !covered {
						t.Fatalf("depth %d round %d: request %d's region has no reference up to it", depth, round, i-first)
					}
				}
			}
			for _, r := range refs {
				if r.upTo > want {
					t.Fatalf("depth %d round %d: a reference reaches %d, past the run's end %d", depth, round, r.upTo-first, want-first)
				}
			}
			// Forget the run: its references drop, the SQ empties.
			tx.dropRefs(true)
			qp.orq = ring[orqEntry]{}
			sqDropLocked(qp)
			qp.sqMu.Unlock()
		}
		qp.Close()
		for _, mr := range mrs {
			mr.Deregister()
		}
		dev.Close()
	}
}

// sqDropLocked empties the SQ, without completions, as a sweep moves its
// head (published: a post counts its room anew), with nothing left for
// the send engine; the caller holds sqMu.
func sqDropLocked(qp *QP) {
	qp.sq.head = qp.sqTail.Load()
	qp.sqHead.Store(qp.sq.head)
	qp.sqNext = qp.sq.head
}

// TestPushOneSGEsMatchesPostSend: PostSends's pass over the common
// requests (pushOneSGEs, a ring chunk at a time) leaves the SQ as
// PostSend of each request does, entry for entry, over lists that mix
// common requests with others (inline, two SGEs, a Read) and SQs of 1
// to 64 slots whose indices wrap around the ring.
func TestPushOneSGEsMatchesPostSend(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, depth := range []int{1, 2, 3, 4, 5, 8, 64} {
		dev, _ := NewDevice(nil)
		pd := dev.AllocPD()
		cq, _ := dev.CreateCQ(16)
		var qps [2]*QP
		for i := range qps {
			qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth, SignalAll: depth == 5})
			if err != nil {
				t.Fatal(err)
			}
			qps[i] = qp
		}
		mr, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
		for round := range 200 {
			wrs := make([]SendWR, 1+rng.IntN(depth))
			for i := range wrs {
				w := SendWR{ID: rng.Uint64(), Op: WRWrite, SGL: []SGE{mr.SGE(rng.IntN(4000), 1+rng.IntN(96))},
					Remote: Remote{STag: STag(rng.Uint32()), Offset: rng.Uint64()}, Signaled: rng.IntN(2) == 0,
					Solicited: rng.IntN(2) == 0, Fence: rng.IntN(4) == 0}
				switch rng.IntN(12) {
				case 0, 1, 2:
					w.Op, w.InvalidateSTag = WRSend, STag(rng.Uint32())
				case 3:
					w.SGL, w.InlineData = nil, make([]byte, 8)
				case 4:
					w.SGL = append(w.SGL, mr.SGE(0, 8))
				case 5:
					w.Op = WRRead
				}
				wrs[i] = w
			}
			if n, err := qps[0].PostSends(wrs); n != len(wrs) || err != nil {
				t.Fatalf("depth %d round %d: PostSends = %d, %v", depth, round, n, err)
			}
			for i := range wrs {
				if err := qps[1].PostSend(wrs[i]); err != nil {
					t.Fatalf("depth %d round %d: PostSend %d: %v", depth, round, i, err)
				}
			}
			a, b := qps[0], qps[1]
			a.sqMu.Lock()
			b.sqMu.Lock()
			if a.sqTail.Load() != b.sqTail.Load() || a.sq.head != b.sq.head {
				t.Fatalf("depth %d round %d: SQ [%d, %d) after PostSends, [%d, %d) after PostSend", depth, round, a.sq.head, a.sqTail.Load(), b.sq.head, b.sqTail.Load())
			}
			for i := a.sq.head; i < a.sqTail.Load(); i++ {
				if *a.sq.at(i) != *b.sq.at(i) {
					t.Fatalf("depth %d round %d: SQ entry %d is %+v after PostSends, %+v after PostSend", depth, round, i, *a.sq.at(i), *b.sq.at(i))
				}
			}
			for _, qp := range []*QP{a, b} {
				sqDropLocked(qp)
			}
			b.sqMu.Unlock()
			a.sqMu.Unlock()
		}
		for _, qp := range qps {
			qp.Close()
		}
		mr.Deregister()
		dev.Close()
	}
}
