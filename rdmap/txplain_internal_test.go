package rdmap

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// TestPlainStretchSweep: lists of one-SGE Writes and Sends, some
// signaled, go through the send engine (on the test's goroutine, as
// BenchmarkTxEngine runs it) in runs long and short, txRunMax cutting
// the long ones; the stretches of plain requests txEmitSmall records let
// txWrittenLocked move the SQ's head past them in one step, and the
// result is the per-request sweep's: every signaled request completes,
// once, in SQ order, with its ID and length, nothing else completes,
// the SQ empties, and no slot the sweep passed keeps its region.
func TestPlainStretchSweep(t *testing.T) {
	const depth = 256
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(4096)
	qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	mr, _ := pd.RegisterMemory(make([]byte, 64*depth), AccessLocalWrite)
	defer mr.Deregister()
	mr2, _ := pd.RegisterMemory(make([]byte, 64*depth), AccessLocalWrite)
	defer mr2.Deregister()
	conn := newSinkConn()
	if err := qp.Start(conn, &mpa.Params{Initiator: true, IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	for !qp.tx.state.CompareAndSwap(txParked, txDirect) {
		runtime.Gosched()
	}
	defer qp.txDirectEnd(false)
	rng := rand.New(rand.NewPCG(1, 2))
	wcs := make([]WC, 64)
	id := uint64(0)
	for round := range 200 {
		k := 1 + rng.IntN(depth-1)
		if round%10 == 0 {
			k = depth - 1
		}
		wrs := make([]SendWR, k)
		var want []uint64
		for i := range wrs {
			op, m := WRWrite, mr
			if rng.IntN(4) == 0 {
				op = WRSend
			}
			if rng.IntN(3) == 0 {
				m = mr2
			}
			sig := rng.IntN(8) == 0 || i == k-1 && rng.IntN(2) == 0
			wrs[i] = SendWR{ID: id, Op: op, SGL: []SGE{m.SGE(64*i, 1+i%64)}, Remote: Remote{STag: 0x100}, Signaled: sig}
			if sig {
				want = append(want, id)
			}
			id++
		}
		if n, err := qp.PostSends(wrs); n != k || err != nil {
			t.Fatalf("round %d: PostSends = %d, %v", round, n, err)
		}
		for {
			progressed, err := qp.txBatch(conn)
			if err != nil {
				t.Fatal(err)
			}
			if !progressed {
				break
			}
		}
		var got []WC
		for {
			n := cq.Poll(wcs)
			if n == 0 {
				break
			}
			got = append(got, wcs[:n]...)
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d completions, want %d", round, len(got), len(want))
		}
		for i, wc := range got {
			w := &wrs[want[i]-wrs[0].ID]
			if wc.ID != want[i] || wc.Status != WCSuccess || wc.ByteLen != w.SGL[0].Length || wc.Op != wcOpOf(w.Op) {
				t.Fatalf("round %d: completion %d is %+v, want ID %d", round, i, wc, want[i])
			}
		}
		qp.sqMu.Lock()
		head, tail := qp.sq.head, qp.sq.tail
		for i := tail - uint64(k); i < tail; i++ {
			if qp.sq.at(i).sge0.MR != nil {
				t.Errorf("round %d: SQ entry %d keeps its region after the sweep", round, i)
			}
		}
		qp.sqMu.Unlock()
		if head != tail {
			t.Fatalf("round %d: SQ head %d, tail %d after the sweep", round, head, tail)
		}
	}
	if err := qp.Err(); err != nil {
		t.Fatal(err)
	}
}
