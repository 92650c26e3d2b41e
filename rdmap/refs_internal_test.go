package rdmap

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/gosiw/gosiw/mpa"
)

// TestRefsBalance drives traffic over AllocMemory regions, aborts the
// connection with work in flight, and checks that every memory reference
// the engines took was given back exactly once: the regions end with
// only their registration reference, and the mapping is released after
// the last deregistration.
func TestRefsBalance(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pda, qa, cqa := newRefsQP(t, dev, 1024, 1024)
	pdb, qb, cqb := newRefsQP(t, dev, 1024, 1024)
	mem, err := dev.AllocMemory(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := mem.Bytes()
	src, _ := pda.RegisterMemory(b[:1<<20], AccessLocalWrite)
	sink, _ := pda.RegisterMemory(b[1<<20:2<<20], AccessLocalWrite)
	remote, _ := pdb.RegisterMemory(b[2<<20:3<<20], AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	rbuf, _ := pdb.RegisterMemory(b[3<<20:], AccessLocalWrite)
	mrs := []*MR{src, sink, remote, rbuf}

	ca, cb := net.Pipe()
	if err := qb.Start(cb, &mpa.Params{IRD: 8, ORD: 8, CRC: true}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Start(ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8, CRC: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		_ = qb.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rbuf.SGE(0, 64<<10)}})
	}
	for i := range 600 {
		var wr SendWR
		switch i % 3 {
		case 0:
			wr = SendWR{Op: WRSend, SGL: []SGE{src.SGE(0, 64<<10)}}
		case 1:
			wr = SendWR{Op: WRWrite, SGL: []SGE{src.SGE(0, 256<<10), src.SGE(512<<10, 1000)}, Remote: Remote{STag: remote.STag()}}
		case 2:
			wr = SendWR{Op: WRRead, SGL: []SGE{sink.SGE(0, 256<<10)}, Remote: Remote{STag: remote.STag(), Offset: 4096}}
		}
		wr.ID, wr.Signaled = uint64(i), true
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	// Let some of it move, then reset.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for cqa.Len() < 50 {
		if err := cqa.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if cqa.Len() < 50 {
			select {
			case <-qa.Done():
				t.Fatalf("QP ended early: %v", qa.Err())
			default:
			}
		}
	}
	qb.Disconnect(true)
	<-qa.Done()
	<-qb.Done()
	qa.Close()
	qb.Close()
	_ = cqb
	for i, mr := range mrs {
		if r := mr.refs.Load(); r != 1 {
			t.Errorf("MR %d holds %d references, want 1", i, r)
		}
	}
	if r := mem.refs.Load(); r != 1+int64(len(mrs)) {
		t.Errorf("memory holds %d references, want %d", r, 1+len(mrs))
	}
	if err := mem.Close(); err != ErrBusy {
		t.Errorf("Close with registered regions: %v", err)
	}
	for _, mr := range mrs {
		mr.Deregister()
	}
	if err := mem.Close(); err != nil {
		t.Error(err)
	}
	if r := mem.refs.Load(); r != 0 {
		t.Errorf("memory holds %d references after everything is released", r)
	}
}

// TestRefsBorrowed: work requests from one region share one reference on
// it (txRef), also one that is written across several batches after
// small ones: the data arrives whole and the region ends with only its
// registration reference.
func TestRefsBorrowed(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pda, qa, cqa := newRefsQP(t, dev, 1024, 16)
	pdb, qb, _ := newRefsQP(t, dev, 1024, 16)
	srcBuf, dstBuf := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range srcBuf {
		srcBuf[i] = byte(i * 7)
	}
	src, _ := pda.RegisterMemory(srcBuf, AccessLocalWrite)
	dst, _ := pdb.RegisterMemory(dstBuf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	ca, cb := net.Pipe()
	if err := qb.Start(cb, &mpa.Params{IRD: 8, ORD: 8, CRC: true}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Start(ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8, CRC: true}); err != nil {
		t.Fatal(err)
	}
	var wrs []SendWR
	for round := range 3 {
		for i := range 100 {
			off := (round*100 + i) * 64
			wrs = append(wrs, SendWR{Op: WRWrite, SGL: []SGE{src.SGE(off, 64)}, Remote: Remote{STag: dst.STag(), Offset: uint64(off)}})
		}
		// 1 MiB in two SGEs of the same region, many batches.
		wrs = append(wrs, SendWR{Op: WRWrite, SGL: []SGE{src.SGE(0, 512<<10), src.SGE(512<<10, 512<<10)}, Remote: Remote{STag: dst.STag()}})
	}
	for i := range wrs {
		wrs[i].ID, wrs[i].Signaled = uint64(i), true
	}
	if n, err := qa.PostSends(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSends = %d, %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wcs := make([]WC, 64)
	for got := 0; got < len(wrs); {
		n := cqa.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != WCSuccess || wc.ID != uint64(got) {
				t.Fatalf("completion %+v, want %d success", wc, got)
			}
			got++
		}
		if n == 0 {
			if err := cqa.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A Read fences the Writes: all placed.
	sink, _ := pda.RegisterMemory(make([]byte, 1), AccessLocalWrite)
	if err := qa.PostSend(SendWR{ID: 1 << 40, Op: WRRead, Signaled: true, SGL: []SGE{sink.SGE(0, 1)}, Remote: Remote{STag: dst.STag()}}); err != nil {
		t.Fatal(err)
	}
	for cqa.Poll(wcs[:1]) == 0 {
		if err := cqa.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if wcs[0].Status != WCSuccess || wcs[0].Op != WCRead {
		t.Fatalf("fence completion %+v", wcs[0])
	}
	for i := range dstBuf {
		if dstBuf[i] != srcBuf[i] {
			t.Fatalf("byte %d is %d, want %d", i, dstBuf[i], srcBuf[i])
		}
	}
	qa.Close()
	qb.Close()
	for i, mr := range []*MR{src, dst, sink} {
		if r := mr.refs.Load(); r != 1 {
			t.Errorf("MR %d holds %d references, want 1", i, r)
		}
	}
}

// TestBorrowedRefSpill walks the send engine's references through
// batches: the first request from a region takes a reference, the ones
// after it from the same region share it; a write drops it only once
// every request sharing it is wholly written, so a request queued
// across a write keeps it, and the region never counts fewer references
// than requests in flight. A request from another region in between
// takes its own, and the next one from the first region a new one.
func TestBorrowedRefSpill(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	mr, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
	other, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
	tx := &qp.tx
	start := func(idx uint64, sgl ...SGE) {
		t.Helper()
		e := &sqEntry{op: WRWrite, nsge: uint8(len(sgl)), sge0: sgl[0]}
		qp.sqMu.Lock()
		copy(qp.sglSlot(qp.sq.slot(idx)), sgl[1:])
		st := qp.txStartLocked(e, idx)
		qp.sqMu.Unlock()
		if st != WCSuccess {
			t.Fatalf("txStartLocked: %v", st)
		}
	}
	queued := func(idx uint64) { tx.queuedUpTo = idx + 1 } // finishWR's part
	refs := func(m *MR, want int64, when string) {
		t.Helper()
		if r := m.refs.Load(); r != want {
			t.Fatalf("%s: %d references, want %d", when, r, want)
		}
	}
	start(0, mr.SGE(0, 64), mr.SGE(64, 64))
	refs(mr, 2, "first request, two SGEs of one region")
	queued(0)
	start(1, mr.SGE(128, 64))
	refs(mr, 2, "second request, sharing")
	queued(1)
	tx.written()
	refs(mr, 1, "batch written after both were queued")

	start(2, mr.SGE(0, 64))
	queued(2)
	start(3, mr.SGE(0, 64))
	refs(mr, 2, "sharing again")
	tx.written() // the batch is written with request 3 partly queued
	refs(mr, 2, "batch written, request 3 in flight")
	queued(3)
	tx.written()
	refs(mr, 1, "request 3 written")

	start(4, mr.SGE(0, 64))
	start(5, other.SGE(0, 64))
	start(6, mr.SGE(0, 64), other.SGE(0, 64))
	refs(mr, 3, "a stretch from the first region, another, the first again")
	refs(other, 3, "the second region's stretch, then the second SGE of request 6")
	queued(5)
	tx.written()
	refs(mr, 2, "requests 4 and 5 written")
	refs(other, 2, "requests 4 and 5 written")
	queued(6)
	tx.written()
	refs(mr, 1, "all written")
	refs(other, 1, "all written")

	start(7, mr.SGE(0, 64))
	queued(7)
	start(8, mr.SGE(0, 64))
	tx.queuedUpTo = 9 // request 8 abandoned (txAbandon)
	refs(mr, 2, "abandoned request sharing")
	tx.written()
	refs(mr, 1, "all dropped")
	if tx.refsp != nil || len(tx.refs) != 0 {
		t.Errorf("reference list kept after the last drop: %d entries", len(tx.refs))
	}
	if tx.ref1 != ([1]txRef{}) {
		t.Errorf("ref1 still names a region after the last drop: %+v", tx.ref1[0])
	}
}

// newRefsQP returns a PD, a QP in it with the given queue depths and
// its CQ (for both queues).
func newRefsQP(t *testing.T, dev *Device, sendWR, recvWR int) (*PD, *QP, *CQ) {
	t.Helper()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(4096)
	qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: sendWR, MaxRecvWR: recvWR})
	if err != nil {
		t.Fatal(err)
	}
	return pd, qp, cq
}

// TestHeldRefReleased: the reference the receive engine keeps from one
// FPDU's placement for the next into the same region (rxEngine.held) is
// given back before the engine waits for the peer: once the Writes and
// Sends into AllocMemory regions are done and the regions deregistered,
// the memory's mapping is released while the connection stays up and
// idle.
func TestHeldRefReleased(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pda, qa, cqa := newRefsQP(t, dev, 64, 64)
	pdb, qb, cqb := newRefsQP(t, dev, 64, 64)
	defer qa.Close()
	defer qb.Close()
	mem, err := dev.AllocMemory(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	b := mem.Bytes()
	src, _ := pda.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
	defer src.Deregister()
	sink, _ := pdb.RegisterMemory(b[:32<<10], AccessLocalWrite|AccessRemoteWrite)
	rbuf, _ := pdb.RegisterMemory(b[32<<10:], AccessLocalWrite)
	ca, cb := net.Pipe()
	if err := qb.Start(cb, &mpa.Params{IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Start(ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	const n = 32
	for i := range n {
		if err := qb.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rbuf.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		w := SendWR{Op: WRWrite, SGL: []SGE{src.SGE(0, 64)}, Remote: Remote{STag: sink.STag(), Offset: uint64(i * 64)}}
		s := SendWR{ID: uint64(i), Op: WRSend, SGL: []SGE{src.SGE(0, 64)}, Signaled: true}
		if err := qa.PostSend(w); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wcs := make([]WC, n)
	for got := 0; got < n; {
		k := cqb.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != WCSuccess || wc.ID != uint64(got) {
				t.Fatalf("completion %+v, want receive %d", wc, got)
			}
			got++
		}
		if k == 0 {
			if err := cqb.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	sink.Deregister()
	rbuf.Deregister()
	if err := mem.Close(); err != nil {
		t.Fatal(err)
	}
	for mem.refs.Load() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("the memory holds %d references with the connection idle (sink %d, rbuf %d)", mem.refs.Load(), sink.refs.Load(), rbuf.refs.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if st := qb.State(); st != StateRTS {
		t.Fatalf("state %v, want RTS: %v", st, qb.Err())
	}
	_ = cqa
}

// TestRunRefs: a run (txPick) of one-SGE requests from two regions, with
// a two-SGE request in the middle (which adds to the list after it has
// moved to its pooled array), holds one reference per stretch of
// requests from a region, in SQ order, each up to the last request of
// its stretch; the write of the whole run drops them all.
func TestRunRefs(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pd, qp, _ := newRefsQP(t, dev, 64, 16)
	defer qp.Close()
	mr, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
	other, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
	w := func(sgl ...SGE) SendWR { return SendWR{Op: WRWrite, SGL: sgl} }
	wrs := []SendWR{w(mr.SGE(0, 64)), w(other.SGE(0, 64)), w(other.SGE(0, 64), mr.SGE(0, 64)),
		w(other.SGE(64, 64)), w(other.SGE(0, 64)), w(mr.SGE(0, 64)), w(mr.SGE(64, 64))}
	if n, err := qp.PostSends(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSends = %d, %v", n, err)
	}
	tx := &qp.tx
	if !qp.txPick() || tx.runEnd != uint64(len(wrs)) {
		t.Fatalf("the run ends at %d, want %d", tx.runEnd, len(wrs))
	}
	want := []txRef{{mr, 1}, {other, 3}, {mr, 3}, {other, 5}, {mr, 7}}
	if got := tx.refs[tx.refsHead:]; !slices.Equal(got, want) {
		t.Fatalf("references %v, want %v", got, want)
	}
	if r, o := mr.refs.Load(), other.refs.Load(); r != 4 || o != 3 {
		t.Fatalf("%d and %d references, want 4 and 3", r, o)
	}
	tx.queuedUpTo = uint64(len(wrs))
	tx.written()
	if r, o := mr.refs.Load(), other.refs.Load(); r != 1 || o != 1 {
		t.Fatalf("after the write %d and %d references, want 1 and 1", r, o)
	}
}
