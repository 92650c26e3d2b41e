package rdmap_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// TestPollRxHandovers moves a PollRx QP's receive engine between its
// holders a thousand times: a waiter takes it from the receive goroutine
// (a kick) or finds it free, gives it back when its context is canceled,
// the idle timer hands it to the receive goroutine again every third
// round, and every fifth round a message arrives and is received by
// whoever holds the engine then. Every Wait returns (canceled or with the
// message), every message arrives in order, and the QP stays up. Under
// the race detector this checks the handovers' happens-before edges.
func TestPollRxHandovers(t *testing.T) {
	pollIdleForever(t)
	a := newSide(t, newDevice(t), rdmap.QPConfig{PollRx: true})
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	rdmaptest.Connect(t, a.qp, b.qp, nil)
	abuf, bbuf := a.reg(t, make([]byte, 4096), accAll), b.reg(t, make([]byte, 4096), accAll)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 6, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
	expectWC(t, poll(t, b.cq), 6, rdmap.WCRecv, rdmap.WCSuccess)
	for i := range 1000 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- a.cq.Wait(ctx) }()
		if !rdmap.WaitRxDriven(a.qp) {
			cancel()
			t.Fatalf("round %d: a Wait did not take the receive engine", i)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: Wait = %v, want context.Canceled", i, err)
		}
		rdmap.WaitRxFree(a.qp)
		if i%3 == 0 {
			rdmap.FireRxIdle(a.qp) // the receive goroutine takes it (soon)
		}
		if i%5 == 0 {
			mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
			mustPost(t, b.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
			expectWC(t, poll(t, a.cq), uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
		}
		if err := a.qp.Err(); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}
