package rdmap

import (
	"math/rand/v2"
	"net"
	"runtime"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// spanQP is a started QP whose send engine the test holds (as
// BenchmarkTxEngine does), writing into conn, with two registered
// regions of 64*depth bytes and one of 8 KiB for multi-segment Writes.
type spanQP struct {
	qp            *QP
	cq            *CQ
	conn          net.Conn
	mr, mr2, big  *MR
	wcs           []WC
	depth, nextID int
}

func newSpanQP(t *testing.T, depth int, conn net.Conn) *spanQP {
	dev, _ := NewDevice(nil)
	t.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(4096)
	qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth, MaxULPDU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	s := &spanQP{qp: qp, cq: cq, conn: conn, wcs: make([]WC, 64), depth: depth}
	s.mr, _ = pd.RegisterMemory(make([]byte, 64*depth), AccessLocalWrite)
	s.mr2, _ = pd.RegisterMemory(make([]byte, 64*depth), AccessLocalWrite)
	s.big, _ = pd.RegisterMemory(make([]byte, 8192), AccessLocalWrite)
	if err := qp.Start(conn, &mpa.Params{Initiator: true, IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	for !qp.tx.state.CompareAndSwap(txParked, txDirect) {
		runtime.Gosched()
	}
	t.Cleanup(func() {
		qp.txDirectEnd(false)
		qp.Close()
		s.mr.Deregister()
		s.mr2.Deregister()
		s.big.Deregister()
	})
	return s
}

// randomList returns k random Sends and Writes, from IDs s.nextID on:
// most of one SGE of either small region (simple for the engine), some
// inline (simple too), and with mixed set also some of two SGEs and
// some of several segments (both framed by txEmit, which ends a span
// of simple requests); about one in eight signaled, and the last with
// probability one half. It also returns the IDs of the signaled ones.
func (s *spanQP) randomList(rng *rand.Rand, k int, mixed bool) ([]SendWR, []uint64) {
	wrs := make([]SendWR, k)
	var sig []uint64
	for i := range wrs {
		op, m := WRWrite, s.mr
		if rng.IntN(4) == 0 {
			op = WRSend
		}
		if rng.IntN(3) == 0 {
			m = s.mr2
		}
		w := SendWR{ID: uint64(s.nextID), Op: op, SGL: []SGE{m.SGE(64*i, 1+i%64)}, Remote: Remote{STag: 0x100}}
		switch r := rng.IntN(16); {
		case r == 0:
			w.SGL, w.InlineData = nil, make([]byte, 1+rng.IntN(80))
		case mixed && r == 1:
			w.SGL = []SGE{m.SGE(64*i, 16), s.mr.SGE(0, 1+i%64)}
		case mixed && r == 2:
			w.SGL = []SGE{s.big.SGE(0, 1500+rng.IntN(6000))}
		}
		w.Signaled = rng.IntN(8) == 0 || i == k-1 && rng.IntN(2) == 0
		if w.Signaled {
			sig = append(sig, w.ID)
		}
		wrs[i] = w
		s.nextID++
	}
	return wrs, sig
}

// wrLen is the payload length of wr.
func wrLen(wr *SendWR) uint32 {
	if wr.InlineData != nil {
		return uint32(len(wr.InlineData))
	}
	var n uint32
	for _, g := range wr.SGL {
		n += g.Length
	}
	return n
}

// run runs the send engine until it has nothing more to do.
func (s *spanQP) run(t *testing.T) {
	t.Helper()
	for {
		progressed, err := s.qp.txBatch(s.conn)
		if err != nil {
			t.Fatal(err)
		}
		if !progressed {
			return
		}
	}
}

// check polls every completion and checks that they are exactly those
// of the signaled requests of byID whose IDs want lists, in that order,
// successful, with their lengths and opcodes.
func (s *spanQP) check(t *testing.T, round int, byID map[uint64]*SendWR, want []uint64) {
	t.Helper()
	var got []WC
	for {
		n := s.cq.Poll(s.wcs)
		if n == 0 {
			break
		}
		got = append(got, s.wcs[:n]...)
	}
	if len(got) != len(want) {
		t.Fatalf("round %d: %d completions, want %d", round, len(got), len(want))
	}
	for i, wc := range got {
		w := byID[want[i]]
		if wc.ID != want[i] || wc.Status != WCSuccess || wc.ByteLen != wrLen(w) || wc.Op != wcOpOf(w.Op) {
			t.Fatalf("round %d: completion %d is %+v, want ID %d (%v, %d bytes)", round, i, wc, want[i], w.Op, wrLen(w))
		}
	}
}

// checkSwept checks that the SQ is empty and that no slot of its last k
// entries keeps a region (its first SGE or the others).
func (s *spanQP) checkSwept(t *testing.T, round, k int) {
	t.Helper()
	qp := s.qp
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	head, tail := qp.sq.head, qp.sqTail.Load()
	for i := tail - uint64(k); i < tail; i++ {
		e := qp.sq.at(i)
		if e.sge0.MR != nil || (e.nsge > 1 && qp.sqSGL.at(qp.sq.slot(i), 1).MR != nil) {
			t.Errorf("round %d: SQ entry %d keeps a region after the sweep", round, i)
		}
	}
	if head != tail {
		t.Fatalf("round %d: SQ head %d, tail %d after the sweep", round, head, tail)
	}
}

// TestPlainStretchSweep: lists of Writes and Sends, most of them simple
// (one SGE or inline), some signaled, go through the send engine (on the
// test's goroutine, as BenchmarkTxEngine runs it), several lists posted
// before the engine runs, so that a batch holds many stretches of
// unsignaled requests between signaled ones, in runs long and short
// (txRunMax cutting the long ones), and in half the rounds requests of
// two SGEs or several segments among them, which end a span of simple
// requests. The span txEmitSmall records lets the sweep cross it in one
// step, and the result is the per-request sweep's: every signaled
// request completes, once, in SQ order, with its ID and length, nothing
// else completes, the SQ empties, and no slot the sweep passed keeps
// its region.
func TestPlainStretchSweep(t *testing.T) {
	const depth = 2 * txRunMax
	s := newSpanQP(t, depth, newSinkConn())
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		mixed := round%2 == 1
		lists := 1 + rng.IntN(8)
		room := depth - 1
		byID := map[uint64]*SendWR{}
		var want []uint64
		posted := 0
		for range lists {
			k := 1 + rng.IntN(room/lists)
			if round%10 == 0 && lists == 1 {
				k = room
			}
			wrs, sig := s.randomList(rng, k, mixed)
			if n, err := s.qp.PostSends(wrs); n != k || err != nil {
				t.Fatalf("round %d: PostSends = %d, %v", round, n, err)
			}
			for i := range wrs {
				byID[wrs[i].ID] = &wrs[i]
			}
			want = append(want, sig...)
			posted += k
		}
		s.run(t)
		s.check(t, round, byID, want)
		s.checkSwept(t, round, posted)
	}
	if err := s.qp.Err(); err != nil {
		t.Fatal(err)
	}
}

// hookConn is a sinkConn that calls onWrite, when set, before each write.
type hookConn struct {
	*sinkConn
	onWrite func()
}

func (c *hookConn) Write(b []byte) (int, error) {
	if c.onWrite != nil {
		c.onWrite()
	}
	return c.sinkConn.Write(b)
}

// TestSimpleSpanBehindRead: a Read ahead of lists of simple requests
// holds the SQ's head (its response never comes over the sink), so the
// span of simple requests grows over several batches behind it; its
// response, completed by hand as the receive engine completes it
// (completeORQ's steps), comes either between batches or while a batch
// is being written, when that sweep moves the head into the span up to
// the requests not yet written. The completions are still exactly those
// of the signaled requests, once each, in SQ order (the Read's first).
func TestSimpleSpanBehindRead(t *testing.T) {
	const depth = 256
	conn := &hookConn{sinkConn: newSinkConn()}
	s := newSpanQP(t, depth, conn)
	qp := s.qp
	complete := func() {
		qp.sqMu.Lock()
		o := qp.orq.pop()
		qp.sq.at(o.sqIdx).state = sqDone
		o.mr.release()
		*o = orqEntry{}
		ok := qp.sweepLocked()
		qp.sqMu.Unlock()
		if !ok {
			t.Fatal("send CQ overflowed")
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		byID := map[uint64]*SendWR{}
		read := &SendWR{ID: uint64(s.nextID), Op: WRRead, SGL: []SGE{s.big.SGE(0, 64)}, Remote: Remote{STag: 0x100}, Signaled: true}
		s.nextID++
		if err := qp.PostSend(*read); err != nil {
			t.Fatal(err)
		}
		byID[read.ID] = read
		want := []uint64{read.ID}
		posted := 1
		batches := 1 + rng.IntN(4)
		during := rng.IntN(batches + 1) // the batch during whose write the Read completes (batches: after the last)
		for b := range batches {
			k := 1 + rng.IntN((depth-1)/batches-1)
			wrs, sig := s.randomList(rng, k, false)
			if n, err := qp.PostSends(wrs); n != k || err != nil {
				t.Fatalf("round %d: PostSends = %d, %v", round, n, err)
			}
			for i := range wrs {
				byID[wrs[i].ID] = &wrs[i]
			}
			want = append(want, sig...)
			posted += k
			if b == during {
				conn.onWrite = func() {
					conn.onWrite = nil
					complete()
				}
			}
			s.run(t)
			conn.onWrite = nil
		}
		if during == batches {
			complete()
		}
		s.check(t, round, byID, want)
		s.checkSwept(t, round, posted)
	}
	if err := qp.Err(); err != nil {
		t.Fatal(err)
	}
}
