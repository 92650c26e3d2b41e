package rdmap_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// pollIdleForever keeps a free PollRx engine free for the test (the
// receive goroutine does not take it back on its own).
func pollIdleForever(t *testing.T) {
	old := rdmap.SetPollRxIdle(time.Hour)
	t.Cleanup(func() { rdmap.SetPollRxIdle(old) })
}

// TestPollRxPingPong: with PollRx on both ends, a ping-pong of Sends
// delivers every message whole and in order, and once a Wait has taken
// each side's receive engine from its receive goroutine, every FPDU is
// received on a waiting goroutine (QPStats.RxDriven), none by the receive
// goroutine (it never takes the engine back here).
func TestPollRxPingPong(t *testing.T) {
	pollIdleForever(t)
	for _, o := range []rdmaptest.Options{{}, {CRC: true}, {Pipe: true}} {
		t.Run(optName(o), func(t *testing.T) {
			a, b := pair(t, rdmap.QPConfig{PollRx: true}, &o)
			for _, s := range []*side{a, b} {
				cancelDrivenWait(t, s)
				rdmap.WaitRxFree(s.qp)
			}
			before := [2]rdmap.QPStats{a.qp.Stats(), b.qp.Stats()}
			r := rand.New(rand.NewPCG(3, 4))
			const n, size = 200, 100
			src, dst := randBytes(r, n*size), make([]byte, n*size)
			echo := make([]byte, n*size)
			asrc, adst := a.reg(t, src, 0), a.reg(t, echo, rdmap.AccessLocalWrite)
			bbuf := b.reg(t, dst, rdmap.AccessLocalWrite)
			errc := make(chan error, 1)
			go func() {
				errc <- func() error {
					for i := range n {
						if err := b.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{bbuf.SGE(i*size, size)}}); err != nil {
							return err
						}
						if i == 0 {
							// a may send now.
							errc <- nil
						}
						wc, err := waitCompletion(b.cq)
						if err != nil {
							return err
						}
						if wc.ID != uint64(i) || wc.Status != rdmap.WCSuccess || wc.ByteLen != size {
							return errors.New("server: unexpected completion")
						}
						if err := b.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{bbuf.SGE(i*size, size)}}); err != nil {
							return err
						}
					}
					return nil
				}()
			}()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			for i := range n {
				mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{adst.SGE(i*size, size)}}))
				mustPost(t, a.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{asrc.SGE(i*size, size)}}))
				expectWC(t, poll(t, a.cq), uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, src) || !bytes.Equal(echo, src) {
				t.Fatal("ping-pong: data differs")
			}
			for i, s := range []*side{a, b} {
				st := s.qp.Stats()
				driven, got := st.RxDriven-before[i].RxDriven, st.RxFPDUs-before[i].RxFPDUs
				if got != n || driven != got {
					t.Errorf("side %d: %d of %d FPDUs received on the waiter, want all %d (stats %+v)", i, driven, got, n, st)
				}
			}
		})
	}
}

func optName(o rdmaptest.Options) string {
	switch {
	case o.Pipe:
		return "pipe"
	case o.CRC:
		return "crc"
	}
	return "plain"
}

// waitCompletion waits for one completion on cq (for goroutines other than the
// test's).
func waitCompletion(cq *rdmap.CQ) (rdmap.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]rdmap.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return wc[0], err
		}
	}
	return wc[0], nil
}

// drivenPair returns a connected pair with PollRx on a whose engine a
// waiter has taken once (so the next Wait drives it).
func drivenPair(t *testing.T) (*side, *side, *rdmap.MR, *rdmap.MR) {
	return drivenPairIdle(t, 0, nil)
}

// drivenPairIdle is drivenPair with a's QPConfig.PollRxIdle (0: the
// default, made an hour for the test) and the second half of a's region
// (from 512 KiB) holding what is given, before the QPs start.
func drivenPairIdle(t *testing.T, idle time.Duration, half []byte) (*side, *side, *rdmap.MR, *rdmap.MR) {
	pollIdleForever(t)
	a := newSide(t, newDevice(t), rdmap.QPConfig{PollRx: true, PollRxIdle: idle})
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	mem := make([]byte, 1<<20)
	copy(mem[1<<19:], half)
	abuf, bbuf := a.reg(t, mem, accAll), b.reg(t, make([]byte, 1<<20), accAll)
	rdmaptest.Connect(t, a.qp, b.qp, nil)
	// The initiator speaks first (b, the responder, sends nothing before).
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 6, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
	expectWC(t, poll(t, b.cq), 6, rdmap.WCRecv, rdmap.WCSuccess)
	// A Wait with nothing to come takes a's engine from its receive
	// goroutine; canceled, it leaves the engine free.
	cancelDrivenWait(t, a)
	if idle == 0 {
		rdmap.WaitRxFree(a.qp) // else the idle timer may take it first
	}
	return a, b, abuf, bbuf
}

// cancelDrivenWait runs a Wait on s's CQ until it drives s's QP, cancels
// its context (no deadline involved) and checks that it returns
// context.Canceled.
func cancelDrivenWait(t *testing.T, s *side) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.cq.Wait(ctx) }()
	if !rdmap.WaitRxDriven(s.qp) {
		cancel()
		t.Fatal("a Wait did not take the receive engine from the receive goroutine (a lost kick?)")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// TestPollRxCancel: a Wait that runs its QP's receive engine returns
// ctx's error once ctx is canceled (no deadline involved), and the
// engine then delivers the next message to the next Wait.
func TestPollRxCancel(t *testing.T) {
	a, b, abuf, bbuf := drivenPair(t)
	cancelDrivenWait(t, a)
	mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: 9, SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
	mustPost(t, b.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
	expectWC(t, poll(t, a.cq), 9, rdmap.WCRecv, rdmap.WCSuccess)
}

// TestPollRxOtherCompletion: a Wait running its QP's receive engine
// returns when a completion comes from elsewhere: the send goroutine
// completing a Write too large for a direct send, into the same CQ.
func TestPollRxOtherCompletion(t *testing.T) {
	a, _, abuf, bbuf := drivenPair(t)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc <- a.cq.Wait(ctx)
	}()
	if !rdmap.WaitRxDriven(a.qp) {
		t.Fatal("a Wait did not take the receive engine")
	}
	direct := a.qp.Stats().TxDirect
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 5, Op: rdmap.WRWrite, SGL: []rdmap.SGE{abuf.SGE(0, 1<<20)},
		Remote: rdmap.Remote{STag: bbuf.STag()}, Signaled: true}))
	if err := <-errc; err != nil {
		t.Fatalf("Wait = %v, want the Write's completion", err)
	}
	var wc [1]rdmap.WC
	if a.cq.Poll(wc[:]) != 1 {
		t.Fatal("Wait returned with nothing to poll")
	}
	expectWC(t, wc[0], 5, rdmap.WCWrite, rdmap.WCSuccess)
	if st := a.qp.Stats(); st.TxDirect != direct {
		t.Fatalf("the 1 MiB Write was a direct send (stats %+v)", st)
	}
}

// TestPollRxPassive: a PollRx QP whose application does not wait still
// serves the peer's RDMA Reads: once its free engine's idle timer fires,
// the receive goroutine reads again.
func TestPollRxPassive(t *testing.T) {
	a, b, abuf, bbuf := drivenPair(t)
	copy(abuf.Bytes(), "the passive side's bytes")
	rdmap.FireRxIdle(a.qp)
	mustPost(t, b.qp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRRead, SGL: []rdmap.SGE{bbuf.SGE(100, 24)},
		Remote: rdmap.Remote{STag: abuf.STag()}, Signaled: true}))
	expectWC(t, poll(t, b.cq), 3, rdmap.WCRead, rdmap.WCSuccess)
	if got := string(bbuf.Bytes()[100:124]); got != "the passive side's bytes" {
		t.Fatalf("read %q", got)
	}
}

// TestPollRxIdleConfig: with QPConfig.PollRxIdle short and the default
// an hour, an RDMA Read of a's memory is served while nobody waits on
// a's CQ: the QP's own bound is the one its idle timer keeps.
func TestPollRxIdleConfig(t *testing.T) {
	const want = "served without a waiter"
	_, b, abuf, bbuf := drivenPairIdle(t, time.Millisecond, []byte(want))
	mustPost(t, b.qp.PostSend(rdmap.SendWR{ID: 4, Op: rdmap.WRRead, SGL: []rdmap.SGE{bbuf.SGE(100, 23)},
		Remote: rdmap.Remote{STag: abuf.STag(), Offset: 1 << 19}, Signaled: true}))
	expectWC(t, poll(t, b.cq), 4, rdmap.WCRead, rdmap.WCSuccess)
	if got := string(bbuf.Bytes()[100:123]); got != want {
		t.Fatalf("read %q", got)
	}
}

// TestPollRxClose: closing a QP whose receive engine a waiter runs ends
// the QP (Done), and the waiter gets the flushed receive.
func TestPollRxClose(t *testing.T) {
	a, _, abuf, _ := drivenPair(t)
	mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: 11, SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
	type res struct {
		wc  rdmap.WC
		err error
	}
	rc := make(chan res, 1)
	go func() {
		wc, err := waitCompletion(a.cq)
		rc <- res{wc, err}
	}()
	if !rdmap.WaitRxDriven(a.qp) {
		t.Fatal("a Wait did not take the receive engine")
	}
	a.qp.Close()
	rdmaptest.WaitDone(t, a.qp, 20*time.Second)
	r := <-rc
	if r.err != nil {
		t.Fatalf("Wait = %v, want the flushed receive", r.err)
	}
	expectWC(t, r.wc, 11, rdmap.WCRecv, rdmap.WCWRFlushErr)
}

// TestPollRxOnePerCQ: a CQ drives one PollRx QP; a second one on the
// same receive CQ is refused until the first is destroyed.
func TestPollRxOnePerCQ(t *testing.T) {
	dev := newDevice(t)
	s := newSide(t, dev, rdmap.QPConfig{PollRx: true})
	cfg := rdmap.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, PollRx: true}
	if _, err := s.pd.CreateQP(&cfg); !errors.Is(err, rdmap.ErrConfig) {
		t.Fatalf("second PollRx QP on one CQ: %v, want ErrConfig", err)
	}
	plain := cfg
	plain.PollRx = false
	qp, err := s.pd.CreateQP(&plain)
	if err != nil {
		t.Fatalf("a QP without PollRx on the same CQ: %v", err)
	}
	qp.Close()
	s.qp.Close()
	qp2, err := s.pd.CreateQP(&cfg)
	if err != nil {
		t.Fatalf("PollRx QP after the first was destroyed: %v", err)
	}
	qp2.Close()
}

// TestPollRxCancelSharedDone: a Wait whose context shares its Done
// channel with the context of an earlier Wait (a context.WithValue of the
// same parent: CQ.watch keeps the earlier registration for it) still
// returns ctx's error once that parent is canceled while it runs the
// receive engine, and the engine delivers the next message after.
func TestPollRxCancelSharedDone(t *testing.T) {
	a, b, abuf, bbuf := drivenPair(t)
	type key struct{}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	// First Wait: registers parent's Done and returns with a receive.
	mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
	errc := make(chan error, 1)
	go func() { errc <- a.cq.Wait(context.WithValue(parent, key{}, 1)) }()
	if !rdmap.WaitRxDriven(a.qp) {
		t.Fatal("the first Wait did not take the receive engine")
	}
	mustPost(t, b.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
	if err := <-errc; err != nil {
		t.Fatalf("first Wait = %v, want the receive", err)
	}
	var wc [1]rdmap.WC
	if a.cq.Poll(wc[:]) != 1 {
		t.Fatal("first Wait returned with nothing to poll")
	}
	expectWC(t, wc[0], 1, rdmap.WCRecv, rdmap.WCSuccess)
	rdmap.WaitRxFree(a.qp)
	// Second Wait, another context with the same Done channel: canceling
	// the parent must end it.
	go func() { errc <- a.cq.Wait(context.WithValue(parent, key{}, 2)) }()
	if !rdmap.WaitRxDriven(a.qp) {
		cancel()
		t.Fatal("the second Wait did not take the receive engine")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("second Wait = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("second Wait still runs 20s after its context was canceled (the driver was not kicked)")
	}
	mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: 2, SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
	mustPost(t, b.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
	expectWC(t, poll(t, a.cq), 2, rdmap.WCRecv, rdmap.WCSuccess)
}

// valueCtx is a context of a comparable struct type; uncomparableCtx is
// one of an uncomparable type (its slice), used by value. Comparing two
// valueCtx that each hold an uncomparableCtx panics.
type valueCtx struct{ context.Context }

type uncomparableCtx struct {
	context.Context
	tags []string
}

// TestPollRxUncomparableContext: Waits whose contexts are values of a
// comparable struct type holding uncomparable contexts (legal contexts,
// for which == panics) run the receive engine and return their
// completions, one after another with the same parent: CQ.watch never
// compares two such contexts.
func TestPollRxUncomparableContext(t *testing.T) {
	a, b, abuf, bbuf := drivenPair(t)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		ctx := valueCtx{uncomparableCtx{Context: parent, tags: []string{"wait"}}}
		mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{abuf.SGE(0, 64)}}))
		errc := make(chan error, 1)
		go func() { errc <- a.cq.Wait(ctx) }()
		if !rdmap.WaitRxDriven(a.qp) {
			t.Fatalf("Wait %d did not take the receive engine", i)
		}
		mustPost(t, b.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{bbuf.SGE(0, 64)}}))
		if err := <-errc; err != nil {
			t.Fatalf("Wait %d = %v, want the receive", i, err)
		}
		var wc [1]rdmap.WC
		if a.cq.Poll(wc[:]) != 1 {
			t.Fatalf("Wait %d returned with nothing to poll", i)
		}
		expectWC(t, wc[0], uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
		rdmap.WaitRxFree(a.qp)
	}
}
