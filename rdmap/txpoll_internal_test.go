package rdmap

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

// tcpPair returns the two ends of a loopback TCP connection, the dialer's
// and the acceptor's, closed when the test ends (a QP that owns one
// closes it before).
func tcpPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", testutil.ListenAddr())
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	b, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return a, b
}

// TestTxPollParkWakesWaiter: work posted while the send goroutine holds a
// PollTx engine rings a doorbell that wakes nobody; when the goroutine
// then parks after a rest (txPollPark), a waiter already asleep on the
// send CQ is woken and sends that work, with no idle timer to fall back
// on.
func TestTxPollParkWakesWaiter(t *testing.T) {
	dev, err := NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qa, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, PollTx: true, PollTxIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qa.Close()
	defer qb.Close()
	ca, cb := tcpPair(t)
	if err := qb.Start(cb, &mpa.Params{IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Start(ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	src := []byte("posted while the send goroutine wrote a rest")
	smr, err := pd.RegisterMemory(src, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Deregister()
	dst := make([]byte, 2*len(src))
	dmr, err := pd.RegisterMemory(dst, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer dmr.Deregister()
	// The engine parked, then held as the send goroutine holds it.
	WaitTxParked(qa)
	if !qa.tx.state.CompareAndSwap(txParked, txRunning) {
		t.Fatal("the engine was taken")
	}
	wrs := []SendWR{
		{ID: 1, Op: WRWrite, SGL: []SGE{smr.SGE(0, len(src))}, Remote: Remote{STag: dmr.STag()}},
		{ID: 2, Op: WRWrite, SGL: []SGE{smr.SGE(0, len(src))}, Remote: Remote{STag: dmr.STag(), Offset: uint64(len(src))}, Signaled: true},
	}
	if _, err := qa.PostSends(wrs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- cq.Wait(ctx) }()
	if !WaitCQAsleep(cq) {
		t.Fatal("the waiter never blocked")
	}
	// The goroutine's step after writing a rest: only SQ work waits.
	if !qa.txPollPark() {
		t.Fatal("txPollPark kept the engine")
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v (the posted work was left in the parked engine)", err)
	}
	var wc [1]WC
	if cq.Poll(wc[:]) != 1 || wc[0].ID != 2 || wc[0].Status != WCSuccess {
		t.Fatalf("completion %+v", wc[0])
	}
	if st := qa.Stats(); st.TxPolled == 0 {
		t.Fatalf("stats %+v: not sent by the waiter", st)
	}
}
