package rdmap_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// TestPostListsPartial checks the partial-failure contract of PostSends
// and PostRecvs: wrs[:n] are posted, wrs[n] is refused with its error,
// nothing after it is posted, and every posted request completes exactly
// once, in order.
func TestPostListsPartial(t *testing.T) {
	a := newSide(t, newDevice(t), rdmap.QPConfig{MaxSendWR: 4})
	b := newSide(t, newDevice(t), rdmap.QPConfig{MaxRecvWR: 8})
	src := a.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, 8*64), rdmap.AccessLocalWrite)
	for i := range 8 {
		src.Bytes()[i*8] = byte(10 + i)
	}
	send := func(id int) rdmap.SendWR {
		return rdmap.SendWR{ID: uint64(id), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(id*8, 8)}, Signaled: true}
	}
	recv := func(id int) rdmap.RecvWR {
		return rdmap.RecvWR{ID: uint64(100 + id), SGL: []rdmap.SGE{dst.SGE(id*64, 64)}}
	}

	if n, err := a.qp.PostSends(nil); n != 0 || err != nil {
		t.Fatalf("PostSends(nil) = %d, %v", n, err)
	}
	if n, err := b.qp.PostRecvs(nil); n != 0 || err != nil {
		t.Fatalf("PostRecvs(nil) = %d, %v", n, err)
	}
	// A malformed request in the middle: the ones before it are posted.
	bad := send(2)
	bad.SGL[0].MR = nil
	if n, err := a.qp.PostSends([]rdmap.SendWR{send(0), send(1), bad, send(3)}); n != 2 || !errors.Is(err, rdmap.ErrInvalidSGE) {
		t.Fatalf("PostSends with wrs[2] malformed = %d, %v; want 2, ErrInvalidSGE", n, err)
	}
	// The SQ (4) has room for two of three.
	if n, err := a.qp.PostSends([]rdmap.SendWR{send(2), send(3), send(4)}); n != 2 || !errors.Is(err, rdmap.ErrQueueFull) {
		t.Fatalf("PostSends into a SQ with room for 2 = %d, %v; want 2, ErrQueueFull", n, err)
	}
	if n, err := a.qp.PostSends([]rdmap.SendWR{send(4)}); n != 0 || !errors.Is(err, rdmap.ErrQueueFull) {
		t.Fatalf("PostSends into a full SQ = %d, %v; want 0, ErrQueueFull", n, err)
	}
	// Receives: a malformed one, then more than the RQ (8) holds.
	tooMany := rdmap.RecvWR{ID: 99, SGL: make([]rdmap.SGE, rdmap.MaxSGE+1)}
	if n, err := b.qp.PostRecvs([]rdmap.RecvWR{recv(0), tooMany, recv(1)}); n != 1 || !errors.Is(err, rdmap.ErrTooManySGE) {
		t.Fatalf("PostRecvs with wrs[1] malformed = %d, %v; want 1, ErrTooManySGE", n, err)
	}
	// A receive without a region after a common one: the first is posted.
	noMR := recv(98)
	noMR.SGL[0].MR = nil
	if n, err := b.qp.PostRecvs([]rdmap.RecvWR{recv(1), noMR, recv(2)}); n != 1 || !errors.Is(err, rdmap.ErrInvalidSGE) {
		t.Fatalf("PostRecvs with wrs[1] without a region = %d, %v; want 1, ErrInvalidSGE", n, err)
	}
	rest := make([]rdmap.RecvWR, 0, 9)
	for i := 2; i < 11; i++ {
		rest = append(rest, recv(i))
	}
	if n, err := b.qp.PostRecvs(rest); n != 6 || !errors.Is(err, rdmap.ErrQueueFull) {
		t.Fatalf("PostRecvs of 9 into a RQ with room for 6 = %d, %v; want 6, ErrQueueFull", n, err)
	}
	// On a full RQ a malformed request is told as such, a good one as
	// not fitting.
	if n, err := b.qp.PostRecvs([]rdmap.RecvWR{noMR}); n != 0 || !errors.Is(err, rdmap.ErrInvalidSGE) {
		t.Fatalf("PostRecvs of a receive without a region into a full RQ = %d, %v; want 0, ErrInvalidSGE", n, err)
	}
	if n, err := b.qp.PostRecvs([]rdmap.RecvWR{recv(11)}); n != 0 || !errors.Is(err, rdmap.ErrQueueFull) {
		t.Fatalf("PostRecvs into a full RQ = %d, %v; want 0, ErrQueueFull", n, err)
	}

	rdmaptest.Connect(t, a.qp, b.qp, &rdmaptest.Options{})
	for i, wc := range pollN(t, a.cq, 4) {
		expectWC(t, wc, uint64(i), rdmap.WCSend, rdmap.WCSuccess)
	}
	for i, wc := range pollN(t, b.cq, 4) {
		expectWC(t, wc, uint64(100+i), rdmap.WCRecv, rdmap.WCSuccess)
		if got := dst.Bytes()[i*64]; wc.ByteLen != 8 || got != byte(10+i) {
			t.Fatalf("receive %d: %d bytes starting %d, want 8 starting %d", i, wc.ByteLen, got, 10+i)
		}
	}
	if n := a.cq.Len(); n != 0 {
		t.Fatalf("%d completions more than the 4 Sends posted", n)
	}
	// The 4 receives left (ids 104..107) flush exactly once when the QP
	// ends; nothing of the refused ones (108, 109, 99) exists.
	a.qp.Close()
	rdmaptest.WaitDone(t, b.qp, 20*time.Second)
	for i, wc := range pollN(t, b.cq, 4) {
		expectWC(t, wc, uint64(104+i), rdmap.WCRecv, rdmap.WCWRFlushErr)
	}
	if n := b.cq.Len(); n != 0 {
		t.Fatalf("%d completions more than the 8 receives posted", n)
	}
}

// TestPostListsFlush: on a QP in ERROR, every request of a list longer
// than the queues is posted and completes at once with WCWRFlushErr, as
// the same number of PostSend and PostRecv calls would.
func TestPostListsFlush(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{MaxSendWR: 4, MaxRecvWR: 4}, &rdmaptest.Options{})
	src := a.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
	b.qp.Close()
	a.qp.Disconnect(true)
	rdmaptest.WaitDone(t, a.qp, 20*time.Second)
	wrs := make([]rdmap.SendWR, 10)
	rwrs := make([]rdmap.RecvWR, 10)
	for i := range wrs {
		wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 8)}}
		rwrs[i] = rdmap.RecvWR{ID: uint64(100 + i), SGL: []rdmap.SGE{src.SGE(0, 64)}}
	}
	if n, err := a.qp.PostSends(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSends on a QP in ERROR = %d, %v; want %d, nil", n, err, len(wrs))
	}
	if n, err := a.qp.PostRecvs(rwrs); n != len(rwrs) || err != nil {
		t.Fatalf("PostRecvs on a QP in ERROR = %d, %v; want %d, nil", n, err, len(rwrs))
	}
	for i, wc := range pollN(t, a.cq, 20) {
		if i < 10 {
			expectWC(t, wc, uint64(i), rdmap.WCSend, rdmap.WCWRFlushErr)
		} else {
			expectWC(t, wc, uint64(100+i-10), rdmap.WCRecv, rdmap.WCWRFlushErr)
		}
	}
	if n := a.cq.Len(); n != 0 {
		t.Fatalf("%d completions more than the 20 requests posted", n)
	}
}

// TestSelectiveSignaling: a stream of Sends of which only every k-th is
// signaled, on a SQ only a few lists deep, posted as a verbs user does:
// a slot counts as in use until a signaled completion at or after it has
// been reaped. The SQ never refuses a request, only the signaled ones
// complete (in order, each retiring the unsignaled ones before it), and
// the receiver gets every message, in order.
func TestSelectiveSignaling(t *testing.T) {
	const (
		sqDepth = 16
		k       = 4 // one signaled in k
		n       = 4000
		recvs   = 64
	)
	a, b := pair(t, rdmap.QPConfig{MaxSendWR: sqDepth, MaxRecvWR: recvs}, &rdmaptest.Options{})
	src := a.reg(t, make([]byte, sqDepth*8), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, recvs*8), rdmap.AccessLocalWrite)
	rwrs := make([]rdmap.RecvWR, recvs)
	for i := range rwrs {
		rwrs[i] = rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{dst.SGE(i*8, 8)}}
	}
	if m, err := b.qp.PostRecvs(rwrs); m != recvs || err != nil {
		t.Fatalf("PostRecvs = %d, %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wrs := make([]rdmap.SendWR, k)
	awcs, bwcs := make([]rdmap.WC, 64), make([]rdmap.WC, 64)
	posted, retired, received := 0, 0, 0
	for received < n {
		// Post a list of k, the last signaled, when the SQ (by the verbs
		// rule) and the receiver have room for it.
		for posted < n && posted+k-retired <= sqDepth && posted+k-received <= recvs {
			for j := range wrs {
				seq := posted + j
				binary.BigEndian.PutUint64(src.Bytes()[seq%sqDepth*8:], uint64(seq))
				wrs[j] = rdmap.SendWR{ID: uint64(seq), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(seq%sqDepth*8, 8)},
					Signaled: j == k-1}
			}
			if m, err := a.qp.PostSends(wrs); m != k || err != nil {
				t.Fatalf("PostSends at %d (%d retired) = %d, %v", posted, retired, m, err)
			}
			posted += k
		}
		ma := a.cq.Poll(awcs)
		for _, wc := range awcs[:ma] {
			if want := retired + k - 1; wc.ID != uint64(want) || wc.Op != rdmap.WCSend || wc.Status != rdmap.WCSuccess || wc.ByteLen != 8 {
				t.Fatalf("send completion %+v, want the signaled Send %d", wc, want)
			}
			retired += k
		}
		m := b.cq.Poll(bwcs)
		for i, wc := range bwcs[:m] {
			if wc.Op != rdmap.WCRecv || wc.Status != rdmap.WCSuccess || wc.ByteLen != 8 || wc.ID != uint64(received%recvs) {
				t.Fatalf("receive completion %+v, want receive %d of 8 bytes", wc, received%recvs)
			}
			if got := binary.BigEndian.Uint64(dst.Bytes()[wc.ID*8:]); got != uint64(received) {
				t.Fatalf("message %d carries sequence %d", received, got)
			}
			rwrs[i] = rdmap.RecvWR{ID: wc.ID, SGL: []rdmap.SGE{dst.SGE(int(wc.ID)*8, 8)}}
			received++
		}
		if r, err := b.qp.PostRecvs(rwrs[:m]); r != m || err != nil {
			t.Fatalf("reposting %d receives = %d, %v", m, r, err)
		}
		if m == 0 && ma == 0 {
			// What comes next: a receive while Sends are on their way,
			// else (all received, the SQ full by the verbs rule) the
			// completion of a signaled one, which may come after the
			// peer's receive.
			cq := b.cq
			if received == posted {
				cq = a.cq
			}
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting at %d posted, %d retired, %d received: %v", posted, retired, received, err)
			}
		}
	}
	for retired < n {
		wc := poll(t, a.cq)
		expectWC(t, wc, uint64(retired+k-1), rdmap.WCSend, rdmap.WCSuccess)
		retired += k
	}
	if m := a.cq.Len() + b.cq.Len(); m != 0 {
		t.Fatalf("%d completions more than the signaled Sends and the receives", m)
	}
}

// TestUnsignaledErrorCompletes: an unsignaled request that fails still
// completes, with its error.
func TestUnsignaledErrorCompletes(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, &rdmaptest.Options{})
	src := a.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, 64), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	wrs := []rdmap.SendWR{
		{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 64)}, Remote: rdmap.Remote{STag: dst.STag()}},
		// Past the end of src: a local protection error when executed.
		{ID: 2, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(32, 64)}, Remote: rdmap.Remote{STag: dst.STag()}},
	}
	if m, err := a.qp.PostSends(wrs); m != 2 || err != nil {
		t.Fatalf("PostSends = %d, %v", m, err)
	}
	expectWC(t, poll(t, a.cq), 2, rdmap.WCWrite, rdmap.WCLocProtErr)
	rdmaptest.WaitDone(t, a.qp, 20*time.Second)
	if m := a.cq.Len(); m != 0 {
		t.Fatalf("%d more completions; the successful unsignaled Write has none", m)
	}
}

// TestPostListsZeroAllocs: posting a list of Writes and Sends (one
// signaled) and a list of receives, and reaping the completions,
// allocates nothing.
func TestPostListsZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	a, b := pair(t, rdmap.QPConfig{}, &rdmaptest.Options{})
	src := a.reg(t, make([]byte, 4096), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, 4096), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	const k = 16
	wrs := make([]rdmap.SendWR, k)
	rwrs := make([]rdmap.RecvWR, k)
	for i := range wrs {
		wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(i*64, 64)}, Remote: rdmap.Remote{STag: dst.STag(), Offset: uint64(i * 64)}}
		if i%2 == 1 {
			wrs[i].Op = rdmap.WRSend
		}
		rwrs[i] = rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{dst.SGE(i*64, 64)}}
	}
	wrs[k-1].Signaled = true
	wcs := make([]rdmap.WC, k)
	f := func() {
		if m, err := b.qp.PostRecvs(rwrs[:k/2]); m != k/2 || err != nil {
			t.Fatalf("PostRecvs = %d, %v", m, err)
		}
		if m, err := a.qp.PostSends(wrs); m != k || err != nil {
			t.Fatalf("PostSends = %d, %v", m, err)
		}
		waitOne(t, a.cq, wcs)
		for range k / 2 {
			waitOne(t, b.cq, wcs)
		}
	}
	// Warm up until every ring slot has been used once (the rings
	// allocate their slots lazily): the send CQ takes one completion a
	// list and holds 1024.
	for range 1100 {
		f()
	}
	if n := testing.AllocsPerRun(200, f); n != 0 {
		t.Errorf("%v allocations per list", n)
	}
}

// TestSRQPostRecvs: the SRQ's list post has PostRecvs' contract, and a
// QP on the SRQ takes the receives in list order.
func TestSRQPostRecvs(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	srq, err := pd.CreateSRQ(&rdmap.SRQConfig{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := dev.CreateCQ(64)
	buf, _ := pd.RegisterMemory(make([]byte, 8*16), rdmap.AccessLocalWrite)
	defer buf.Deregister()
	recv := func(i int) rdmap.RecvWR {
		return rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{buf.SGE(16*i, 16)}}
	}
	twoSGEs := rdmap.RecvWR{ID: 99, SGL: []rdmap.SGE{buf.SGE(0, 8), buf.SGE(8, 8)}}
	if n, err := srq.PostRecvs([]rdmap.RecvWR{recv(0), twoSGEs, recv(1)}); n != 1 || !errors.Is(err, rdmap.ErrTooManySGE) {
		t.Fatalf("SRQ PostRecvs with wrs[1] malformed = %d, %v; want 1, ErrTooManySGE", n, err)
	}
	if n, err := srq.PostRecvs([]rdmap.RecvWR{recv(1), recv(2), recv(3), recv(4)}); n != 3 || !errors.Is(err, rdmap.ErrQueueFull) {
		t.Fatalf("SRQ PostRecvs of 4 into room for 3 = %d, %v; want 3, ErrQueueFull", n, err)
	}
	if n := srq.Len(); n != 4 {
		t.Fatalf("SRQ holds %d receives, want 4", n)
	}
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, SRQ: srq})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := qp.PostRecvs([]rdmap.RecvWR{recv(5)}); n != 0 || !errors.Is(err, rdmap.ErrInvalidWR) {
		t.Fatalf("PostRecvs on a QP with an SRQ = %d, %v; want 0, ErrInvalidWR", n, err)
	}
	s := newSide(t, newDevice(t), rdmap.QPConfig{})
	rdmaptest.Connect(t, s.qp, qp, nil)
	msg := s.reg(t, []byte("srq"), 0)
	for range 4 {
		mustPost(t, s.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{msg.SGE(0, 3)}}))
	}
	for i, wc := range pollN(t, cq, 4) {
		expectWC(t, wc, uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
	}
	qp.Close()
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := srq.PostRecvs([]rdmap.RecvWR{recv(0)}); n != 0 || !errors.Is(err, rdmap.ErrClosed) {
		t.Fatalf("PostRecvs on a closed SRQ = %d, %v; want 0, ErrClosed", n, err)
	}
}

// TestPostListsTeardownExactlyOnce: lists posted from several goroutines
// at once (the common requests, which PostSends writes without the SQ's
// lock) while the QP is torn down, gracefully or by the peer's abort:
// every request a PostSends reports posted completes exactly once (in
// success or flushed), none is left behind, and none completes that was
// not posted; after a graceful disconnect the posts are refused.
func TestPostListsTeardownExactlyOnce(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(map[bool]string{false: "disconnect", true: "peer-abort"}[abort], func(t *testing.T) {
			const (
				posters = 3
				list    = 8
				perG    = 2000 // requests a poster posts at most
				trigger = 600  // completions seen before the teardown
				// unreaped bounds the requests posted and not yet
				// reaped below the CQ's 1024: on a QP in ERROR a post
				// completes at once, past the SQ's depth.
				unreaped = 512
			)
			a, b := pair(t, rdmap.QPConfig{MaxSendWR: 64, SignalAll: true}, &rdmaptest.Options{})
			src := a.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
			dst := b.reg(t, make([]byte, 64), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			var (
				mu     sync.Mutex
				posted = map[uint64]bool{}
				seen   = map[uint64]rdmap.WCStatus{}
			)
			var outstanding atomic.Int64 // posted, not reaped
			postersDone := make(chan struct{})
			var wg sync.WaitGroup
			for g := range posters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					wrs := make([]rdmap.SendWR, list)
					for i := range wrs {
						wrs[i] = rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 64)}, Remote: rdmap.Remote{STag: dst.STag()}}
					}
					next := 0
					for next < perG && ctx.Err() == nil {
						if outstanding.Load() > unreaped {
							runtime.Gosched() // let the reaper catch up
							continue
						}
						for i := range wrs {
							wrs[i].ID = uint64(g)<<32 | uint64(next+i)
						}
						n, err := a.qp.PostSends(wrs)
						outstanding.Add(int64(n))
						mu.Lock()
						for _, w := range wrs[:n] {
							posted[w.ID] = true
						}
						mu.Unlock()
						next += n
						switch {
						case err == nil:
						case errors.Is(err, rdmap.ErrQueueFull):
							runtime.Gosched() // the reaper and the engine free slots
						case errors.Is(err, rdmap.ErrQPState) && !abort:
							return // refused once the disconnect began
						default:
							t.Errorf("poster %d: PostSends = %d, %v", g, n, err)
							return
						}
					}
				}()
			}
			go func() { wg.Wait(); close(postersDone) }()

			// The reaper: every completion of a request posted, once.
			wcs := make([]rdmap.WC, 64)
			reaped, fired := 0, false
			check := func(wc *rdmap.WC) {
				mu.Lock()
				defer mu.Unlock()
				if st, dup := seen[wc.ID]; dup {
					t.Fatalf("request %#x completed twice (%v, then %v)", wc.ID, st, wc.Status)
				}
				if wc.Status != rdmap.WCSuccess && wc.Status != rdmap.WCWRFlushErr {
					t.Fatalf("unexpected completion %+v", *wc)
				}
				seen[wc.ID] = wc.Status
			}
			done := false
			for {
				k := a.cq.Poll(wcs)
				for i := range k {
					check(&wcs[i])
				}
				reaped += k
				outstanding.Add(-int64(k))
				if !fired && reaped >= trigger {
					fired = true
					if abort {
						b.qp.Close()
					} else {
						a.qp.Disconnect(false)
					}
				}
				if !done {
					select {
					case <-postersDone:
						done = true
					default:
					}
				}
				if done {
					mu.Lock()
					all := len(seen) == len(posted)
					mu.Unlock()
					if all && k == 0 {
						break
					}
				}
				if k == 0 {
					wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
					err := a.cq.Wait(wctx)
					wcancel()
					if ctx.Err() != nil {
						mu.Lock()
						t.Fatalf("%d requests posted, %d completed (posters done: %v): a posted request never completed: %v", len(posted), len(seen), done, err)
					}
				}
			}
			if !fired {
				t.Fatalf("the teardown never ran: %d completions", reaped)
			}
			for id := range seen {
				if !posted[id] {
					t.Fatalf("request %#x completed but was never reported posted", id)
				}
			}
			counts := map[rdmap.WCStatus]int{}
			for _, st := range seen {
				counts[st]++
			}
			t.Logf("%d posted, completions %v", len(posted), counts)
		})
	}
}
