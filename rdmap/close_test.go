package rdmap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// load posts a mix of work requests on a (toward b) and receives on both,
// and returns how many completions each side must see.
func load(t *testing.T, a, b *side, n int) (wantA, wantB int) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 7))
	src := a.reg(t, randBytes(r, 64<<10), rdmap.AccessLocalWrite)
	sink := a.reg(t, make([]byte, 64<<10), rdmap.AccessLocalWrite)
	abuf := a.reg(t, make([]byte, 64<<10), rdmap.AccessLocalWrite)
	// Writes and Reads use different memory: an unfenced Read of memory
	// later Writes overwrite has undefined contents (and, over net.Pipe,
	// is a data race the race detector sees).
	remote := b.reg(t, make([]byte, 64<<10), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	remoteRd := b.reg(t, make([]byte, 64<<10), rdmap.AccessRemoteRead)
	bbuf := b.reg(t, make([]byte, 64<<10), rdmap.AccessLocalWrite)
	for i := range n {
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{bbuf.SGE(0, 64<<10)}}))
		mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{abuf.SGE(0, 64<<10)}}))
	}
	for i := range n {
		var wr rdmap.SendWR
		switch i % 3 {
		case 0:
			wr = rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 64<<10)}}
		case 1:
			wr = rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 64<<10)}, Remote: rdmap.Remote{STag: remote.STag()}}
		case 2:
			wr = rdmap.SendWR{Op: rdmap.WRRead, SGL: []rdmap.SGE{sink.SGE(0, 64<<10)}, Remote: rdmap.Remote{STag: remoteRd.STag()}}
		}
		wr.ID, wr.Signaled = uint64(1000+i), i%2 == 0
		mustPost(t, a.qp.PostSend(wr))
	}
	return 2 * n, n
}

// drainAll polls cq until the QP is done and the CQ is empty, and checks
// that each of want work requests completed exactly once, with statuses
// from ok.
func drainAll(t *testing.T, s *side, want int, ok ...rdmap.WCStatus) map[rdmap.WCStatus]int {
	t.Helper()
	rdmaptest.WaitDone(t, s.qp, 20*time.Second)
	wcs := make([]rdmap.WC, 4096)
	n := s.cq.Poll(wcs)
	seen := map[[2]uint64]bool{}
	byStatus := map[rdmap.WCStatus]int{}
	for _, wc := range wcs[:n] {
		k := [2]uint64{uint64(wc.Op), wc.ID}
		if wc.Op == rdmap.WCSend || wc.Op == rdmap.WCWrite || wc.Op == rdmap.WCRead {
			k[0] = 0
		}
		if seen[k] {
			t.Fatalf("WR %v completed twice", wc.ID)
		}
		seen[k] = true
		byStatus[wc.Status]++
		good := false
		for _, st := range ok {
			good = good || wc.Status == st
		}
		if !good {
			t.Fatalf("unexpected completion %+v", wc)
		}
	}
	// Unsignaled successful send WRs do not complete; count them as seen
	// by their absence only when the caller allows success.
	return byStatus
}

// countWRs returns how many completions a side must see at least: every
// receive, every signaled send WR, and every failed one.
func TestAbortWithWRsInFlight(t *testing.T) {
	for _, who := range []string{"local", "peer-reset"} {
		t.Run(who, func(t *testing.T) {
			a, b := pair(t, rdmap.QPConfig{MaxSendWR: 512, MaxRecvWR: 512}, &rdmaptest.Options{CRC: true})
			n := 300
			load(t, a, b, n)
			if who == "local" {
				a.qp.Disconnect(true)
			} else {
				b.qp.Disconnect(true)
			}
			sa := drainAll(t, a, 0, rdmap.WCSuccess, rdmap.WCWRFlushErr)
			sb := drainAll(t, b, 0, rdmap.WCSuccess, rdmap.WCWRFlushErr)
			// a: n receives (none delivered: b never sends) all flushed,
			// n send WRs of which the signaled half complete on success
			// and all unfinished ones flush.
			if sa[rdmap.WCWRFlushErr] < n {
				t.Fatalf("a: %v, want at least %d flushed", sa, n)
			}
			if got := sa[rdmap.WCSuccess] + sa[rdmap.WCWRFlushErr]; got < n+n/2 {
				t.Fatalf("a: %v completions, want at least %d", sa, n+n/2)
			}
			// b: each of its n receives completed once, delivered or
			// flushed.
			if got := sb[rdmap.WCSuccess] + sb[rdmap.WCWRFlushErr]; got != n {
				t.Fatalf("b: %v, want %d receives", sb, n)
			}
			if who == "local" {
				if err := a.qp.Err(); !errors.Is(err, rdmap.ErrAborted) {
					t.Fatalf("a.Err() = %v", err)
				}
			} else if err := b.qp.Err(); !errors.Is(err, rdmap.ErrAborted) {
				t.Fatalf("b.Err() = %v", err)
			}
		})
	}
}

// TestAbortAccountsForEveryWR checks exactly-once completion when every
// send WR is signaled.
func TestAbortAccountsForEveryWR(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{MaxSendWR: 512, MaxRecvWR: 512, SignalAll: true}, &rdmaptest.Options{})
	n := 300
	load(t, a, b, n)
	b.qp.Disconnect(true)
	sa := drainAll(t, a, 0, rdmap.WCSuccess, rdmap.WCWRFlushErr)
	if got := sa[rdmap.WCSuccess] + sa[rdmap.WCWRFlushErr]; got != 2*n {
		t.Fatalf("a: %v, want %d completions", sa, 2*n)
	}
	if a.qp.Err() == nil {
		t.Fatal("a.Err() nil after a reset by the peer")
	}
	// Posting after the end completes at once with a flush.
	mustPost(t, a.qp.PostRecv(rdmap.RecvWR{ID: 5}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 6, Op: rdmap.WRSend}))
	wcs := pollN(t, a.cq, 2)
	for _, wc := range wcs {
		if wc.Status != rdmap.WCWRFlushErr {
			t.Fatalf("post after error: %+v", wc)
		}
	}
}

func TestGracefulDisconnect(t *testing.T) {
	for _, pipe := range []bool{false, true} {
		t.Run(fmt.Sprint("pipe=", pipe), func(t *testing.T) {
			a, b := pair(t, rdmap.QPConfig{MaxSendWR: 256, MaxRecvWR: 256, SignalAll: true}, &rdmaptest.Options{CRC: true, Pipe: pipe})
			n := 60
			load(t, a, b, n)
			a.qp.Disconnect(false)
			if err := a.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend}); err != rdmap.ErrQPState {
				t.Fatalf("PostSend while closing: %v", err)
			}
			sa := drainAll(t, a, 0, rdmap.WCSuccess, rdmap.WCWRFlushErr)
			sb := drainAll(t, b, 0, rdmap.WCSuccess, rdmap.WCWRFlushErr)
			// Every send WR of a completed (reads included: b answered
			// them before its FIN); a's receives flushed.
			if sa[rdmap.WCSuccess] != n || sa[rdmap.WCWRFlushErr] != n {
				t.Fatalf("a: %v", sa)
			}
			// b received every Send; its other receives flushed.
			if sb[rdmap.WCSuccess] != n/3 || sb[rdmap.WCWRFlushErr] != n-n/3 {
				t.Fatalf("b: %v", sb)
			}
			if a.qp.Err() != nil || b.qp.Err() != nil {
				t.Fatalf("errors after a graceful close: %v, %v", a.qp.Err(), b.qp.Err())
			}
			if a.qp.State() != rdmap.StateError || b.qp.State() != rdmap.StateError {
				t.Fatalf("states %v %v", a.qp.State(), b.qp.State())
			}
		})
	}
}

// TestCQOverflow: a CQ whose ring overruns fails (Err, the QP in ERROR,
// the peer told with a Terminate) but loses no completion: every WR
// completes exactly once, in SQ order, the ring first and then the
// overflow list; posting to the overrun CQ is refused.
func TestCQOverflow(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	rdmaptest.Connect(t, qp, b.qp, nil)
	src, _ := pd.RegisterMemory(make([]byte, 8), 0)
	defer src.Deregister()
	rbuf := b.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
	for i := range 8 {
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{rbuf.SGE(0, 64)}}))
	}
	// A send written on this goroutine (a direct send) completes before
	// PostSend returns: then the fifth completion overruns the CQ during
	// the loop, and posting is refused from then on.
	posted := 0
	for i := range 8 {
		err := qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 8)}, Signaled: true})
		if err == rdmap.ErrCQOverflow && i > cq.Cap() {
			break
		}
		mustPost(t, err)
		posted++
	}
	rdmaptest.WaitDone(t, qp, 10*time.Second)
	if !errors.Is(qp.Err(), rdmap.ErrCQOverflow) || cq.Err() != rdmap.ErrCQOverflow || cq.Dropped() != 0 {
		t.Fatalf("Err %v, CQ err %v, dropped %d", qp.Err(), cq.Err(), cq.Dropped())
	}
	if cq.Len() != posted {
		t.Fatalf("CQ holds %d, want all %d posted", cq.Len(), posted)
	}
	// Nothing more may complete into the overrun CQ.
	if err := qp.PostSend(rdmap.SendWR{ID: 100, Op: rdmap.WRSend}); err != rdmap.ErrCQOverflow {
		t.Fatalf("PostSend after the overrun: %v", err)
	}
	if err := qp.PostRecv(rdmap.RecvWR{ID: 101}); err != rdmap.ErrCQOverflow {
		t.Fatalf("PostRecv after the overrun: %v", err)
	}
	if _, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq}); err != rdmap.ErrCQOverflow {
		t.Fatalf("CreateQP on the overrun CQ: %v", err)
	}
	// Polled a few at a time (ring, then list), each WR once, in order.
	var wcs [3]rdmap.WC
	next := uint64(0)
	for {
		n := cq.Poll(wcs[:])
		if n == 0 {
			break
		}
		for _, wc := range wcs[:n] {
			if wc.ID != next || wc.Op != rdmap.WCSend || (wc.Status != rdmap.WCSuccess && wc.Status != rdmap.WCWRFlushErr) {
				t.Fatalf("completion %+v, want WR %d", wc, next)
			}
			next++
		}
	}
	if next != uint64(posted) || cq.Len() != 0 {
		t.Fatalf("%d completions, %d left", next, cq.Len())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cq.Wait(ctx); err != rdmap.ErrCQOverflow {
		t.Fatalf("Wait on the empty overrun CQ: %v", err)
	}
	// The peer got a Terminate: RDMAP, local catastrophic.
	rdmaptest.WaitDone(t, b.qp, 10*time.Second)
	var te *rdmap.TerminateError
	if !errors.As(b.qp.Err(), &te) || !te.Remote || te.Layer != wire.LayerRDMAP || te.EType != wire.ETypeLocalCatastrophic {
		t.Fatalf("peer Err %v", b.qp.Err())
	}
}

// TestCQOverflowExactlyOnce overruns a small CQ shared by two QPs (one on
// an SRQ) under a mixed load of Sends, Writes, Reads and receives, and
// checks that every work request a Post call accepted completes exactly
// once, that none is dropped, and that posting stops at the overrun.
func TestCQOverflowExactlyOnce(t *testing.T) {
	for _, ring := range []int{1, 16, 100} {
		t.Run(fmt.Sprint("ring=", ring), func(t *testing.T) {
			dev := newDevice(t)
			pd := dev.AllocPD()
			cq, err := dev.CreateCQ(ring)
			if err != nil {
				t.Fatal(err)
			}
			srq, err := pd.CreateSRQ(&rdmap.SRQConfig{MaxWR: 64})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srq.Close() })
			cfgs := []rdmap.QPConfig{
				{SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, MaxRecvWR: 64, SignalAll: true},
				{SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, SRQ: srq, SignalAll: true},
			}
			src, _ := pd.RegisterMemory(make([]byte, 4096), rdmap.AccessLocalWrite)
			defer src.Deregister()
			// Each engine places into its own memory (one goroutine each).
			reg := func(n int) *rdmap.MR {
				mr, err := pd.RegisterMemory(make([]byte, n), rdmap.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { mr.Deregister() })
				return mr
			}
			sinks := []*rdmap.MR{reg(4096), reg(4096)}
			accepted := 0
			var qps []*rdmap.QP
			var peers []*side
			for _, cfg := range cfgs {
				qp, err := pd.CreateQP(&cfg)
				if err != nil {
					t.Fatal(err)
				}
				peer := newSide(t, newDevice(t), rdmap.QPConfig{MaxSendWR: 64, MaxRecvWR: 64})
				rdmaptest.Connect(t, qp, peer.qp, nil)
				qps, peers = append(qps, qp), append(peers, peer)
			}
			for _, p := range peers {
				rb := p.reg(t, make([]byte, 4096), accAll)
				for i := range 64 {
					mustPost(t, p.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{rb.SGE(0, 4096)}}))
				}
				// The peer sends too, into the receives of the CQ's QPs.
				sb := p.reg(t, make([]byte, 512), 0)
				for i := range 16 {
					_ = p.qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{sb.SGE(0, 512)}})
				}
			}
			// Receives: each accepted one must complete.
			id := uint64(0)
			rbuf, sbuf := reg(4096), reg(4096)
			for i := range 32 {
				if err := qps[0].PostRecv(rdmap.RecvWR{ID: id, SGL: []rdmap.SGE{rbuf.SGE(0, 4096)}}); err == nil {
					accepted++
				} else if err != rdmap.ErrCQOverflow {
					t.Fatalf("PostRecv %d: %v", i, err)
				}
				id++
				mustPost(t, srq.PostRecv(rdmap.RecvWR{ID: 1 << 40, SGL: []rdmap.SGE{sbuf.SGE(0, 4096)}}))
			}
			// Writes and Reads use different peer memory (the peer's receive
			// engine places Writes while its send engine reads for Reads).
			wremote, rremote := make([]*rdmap.MR, len(peers)), make([]*rdmap.MR, len(peers))
			for i, p := range peers {
				wremote[i] = p.reg(t, make([]byte, 4096), accAll)
				rremote[i] = p.reg(t, make([]byte, 4096), accAll)
			}
			// Sends, Writes and Reads on both QPs until the overrun stops them.
			stopped := 0
			for i := 0; stopped < len(qps) && i < 10000; i++ {
				k := i % len(qps)
				var wr rdmap.SendWR
				switch i % 3 {
				case 0:
					wr = rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 256)}}
				case 1:
					wr = rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 4096)}, Remote: rdmap.Remote{STag: wremote[k].STag()}}
				case 2:
					wr = rdmap.SendWR{Op: rdmap.WRRead, SGL: []rdmap.SGE{sinks[k].SGE(0, 4096)}, Remote: rdmap.Remote{STag: rremote[k].STag()}}
				}
				wr.ID = id
				id++
				switch err := qps[k].PostSend(wr); err {
				case nil:
					accepted++
				case rdmap.ErrQueueFull:
					// Wait for the engine (or the overrun) to make room.
					runtime.Gosched()
				case rdmap.ErrCQOverflow:
					stopped++
				default:
					t.Fatalf("PostSend: %v", err)
				}
			}
			for _, qp := range qps {
				rdmaptest.WaitDone(t, qp, 20*time.Second)
				if !errors.Is(qp.Err(), rdmap.ErrCQOverflow) {
					t.Fatalf("QP Err %v", qp.Err())
				}
			}
			if cq.Err() != rdmap.ErrCQOverflow || cq.Dropped() != 0 {
				t.Fatalf("CQ err %v, dropped %d", cq.Err(), cq.Dropped())
			}
			// Every accepted WR exactly once; SRQ receives the QP took too.
			wcs := make([]rdmap.WC, 64)
			seen := map[uint64]bool{}
			srqDone := 0
			for {
				n := cq.Poll(wcs)
				if n == 0 {
					break
				}
				for _, wc := range wcs[:n] {
					if wc.Status != rdmap.WCSuccess && wc.Status != rdmap.WCWRFlushErr {
						t.Fatalf("completion %+v", wc)
					}
					if wc.ID == 1<<40 {
						srqDone++
						continue
					}
					if seen[wc.ID] {
						t.Fatalf("WR %d completed twice", wc.ID)
					}
					seen[wc.ID] = true
				}
			}
			if len(seen) != accepted {
				t.Fatalf("%d of %d accepted work requests completed", len(seen), accepted)
			}
			if srqDone+srq.Len() != 32 {
				t.Fatalf("SRQ: %d completed, %d left, of 32", srqDone, srq.Len())
			}
			t.Logf("ring %d: %d work requests, %d SRQ receives completed", ring, accepted, srqDone)
		})
	}
}

// expectSilence checks, inside a synctest bubble, that the QP facing p
// sends nothing more for an hour of the bubble's clock. That clock moves
// only when every goroutine of the bubble (the QP's engines included) is
// durably blocked, so the hour passes only once the QP has done all it
// would do: the check is exact, whatever the load of the machine.
func expectSilence(t *testing.T, p *rdmaptest.RawPeer, what string) {
	t.Helper()
	synctest.Wait()
	ul, err := p.NextFPDU(time.Hour)
	if err == nil {
		t.Fatalf("%s: got % x", what, ul)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: reading: %v", what, err)
	}
}

// TestResponderWaitsForFirstFPDU: a responder sends nothing, not even
// posted work, before the initiator's first FPDU.
func TestResponderWaitsForFirstFPDU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := newDevice(t)
		v := newVictim(t, dev, rdmap.QPConfig{})
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{v.srcMR.SGE(0, 8)}, Remote: rdmap.Remote{STag: 0x200}, Signaled: true}))
		p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{Pipe: true}, false)
		expectSilence(t, p, "responder sent before the initiator's first FPDU")
		if st := v.qp.State(); st != rdmap.StateRTS {
			t.Fatalf("responder in %v while waiting", st)
		}
		p.Write(0x300, 0, nil, true) // zero-length Write: accepted unchecked
		ul, err := p.NextFPDU(5 * time.Second)
		if err != nil || rdmaptest.Opcode(ul) != wire.OpWrite {
			t.Fatalf("after the first FPDU: %v % x", err, ul)
		}
		expectWC(t, poll(t, v.cq), 1, rdmap.WCWrite, rdmap.WCSuccess)
	})
}

// TestP2PRTR checks the RTR the initiator sends first, as siw builds it,
// and that a responder takes it silently.
func TestP2PRTR(t *testing.T) {
	for _, rtr := range []mpa.RTR{mpa.RTRWrite, mpa.RTRRead, mpa.RTRSend} {
		t.Run(rtr.String(), func(t *testing.T) {
			// Raw responder: what goes on the wire.
			dev := newDevice(t)
			v := newVictim(t, dev, rdmap.QPConfig{})
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{v.srcMR.SGE(0, 8)}, Remote: rdmap.Remote{STag: 0x200}, Signaled: true}))
			delay := 30 * time.Millisecond
			start := time.Now()
			p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{P2P: true, RTR: rtr, FirstSendDelay: delay}, true)
			ul, err := p.NextFPDU(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < delay {
				t.Errorf("first FPDU after %v, before FirstSendDelay %v", el, delay)
			}
			h, _ := ddp.Parse(ul)
			switch rtr {
			case mpa.RTRWrite:
				if rdmaptest.Opcode(ul) != wire.OpWrite || h.STag() != 1 || h.TO() != 0 || len(ul) != ddp.TaggedHeaderLen || !h.Last() {
					t.Fatalf("write RTR % x", ul)
				}
			case mpa.RTRRead:
				rr, _ := wire.ParseReadRequest(ul[ddp.UntaggedHeaderLen:])
				if rdmaptest.Opcode(ul) != wire.OpReadRequest || h.MSN() != 1 || rr.SinkSTag() != 0 || rr.SrcSTag() != 1 || rr.Size() != 0 {
					t.Fatalf("read RTR % x", ul)
				}
				// Answer it: a zero-length Read Response to sink STag 0.
				p.SendULPDU(ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(1, wire.OpReadResponse)}))
			case mpa.RTRSend:
				if rdmaptest.Opcode(ul) != wire.OpSend || h.MSN() != 1 || len(ul) != ddp.UntaggedHeaderLen {
					t.Fatalf("send RTR % x", ul)
				}
			}
			ul, err = p.NextFPDU(5 * time.Second)
			if err != nil || rdmaptest.Opcode(ul) != wire.OpWrite {
				t.Fatalf("posted Write after the RTR: %v", err)
			}
			expectWC(t, poll(t, v.cq), 1, rdmap.WCWrite, rdmap.WCSuccess)

			// Two gosiw QPs: the RTR is invisible; traffic flows.
			a, b := pair(t, rdmap.QPConfig{}, &rdmaptest.Options{P2P: true, RTR: rtr, CRC: true})
			pingPong(t, a, b)
			pingPong(t, b, a)
			if a.cq.Len() != 0 || b.cq.Len() != 0 {
				t.Fatal("the RTR produced a completion")
			}
		})
	}
}

// TestLeftover: bytes the handshake read past its frame are the start of
// the FPDU stream.
func TestLeftover(t *testing.T) {
	for _, markers := range []bool{false, true} {
		t.Run(fmt.Sprint("markers=", markers), func(t *testing.T) {
			dev := newDevice(t)
			v := newVictim(t, dev, rdmap.QPConfig{})
			mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{v.recv.SGE(0, 64)}}))
			mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 2, SGL: []rdmap.SGE{v.recv.SGE(64, 64)}}))
			o := &rdmaptest.Options{CRC: true, MarkersAB: markers}
			cq, cr := rdmaptest.ConnPair(t, false)
			p := o.Params(false)
			fr := mpa.Framer{CRC: true, Markers: markers}
			first := fr.AppendFPDU(nil, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), []byte("from the handshake")...), nil)
			// Half of the first FPDU was read by the handshake.
			p.Leftover = first[:len(first)/2]
			if err := v.qp.Start(cq, p); err != nil {
				t.Fatal(err)
			}
			defer cr.Close()
			if _, err := cr.Write(first[len(first)/2:]); err != nil {
				t.Fatal(err)
			}
			raw := rdmaptest.NewRawPeerConn(t, cr, p)
			raw.Framer = fr
			raw.MSN[0] = 2
			raw.Send([]byte("then the socket"))
			wc := poll(t, v.cq)
			if wc.ID != 1 || wc.Status != rdmap.WCSuccess || string(v.recv.Bytes()[:wc.ByteLen]) != "from the handshake" {
				t.Fatalf("first: %+v %q", wc, v.recv.Bytes()[:wc.ByteLen])
			}
			wc = poll(t, v.cq)
			if wc.ID != 2 || string(v.recv.Bytes()[64:64+wc.ByteLen]) != "then the socket" {
				t.Fatalf("second: %+v", wc)
			}
		})
	}
}

// TestLocalProtectionError: a send WR whose memory was invalidated
// completes with a local protection error and takes the QP down with a
// Terminate.
func TestLocalProtectionError(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, nil)
	src := a.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, 64), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRLocalInv, InvalidateSTag: src.STag()}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 64)}, Remote: rdmap.Remote{STag: dst.STag()}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 64)}}))
	wcs := pollN(t, a.cq, 2)
	expectWC(t, wcs[0], 2, rdmap.WCWrite, rdmap.WCLocProtErr)
	expectWC(t, wcs[1], 3, rdmap.WCSend, rdmap.WCWRFlushErr)
	rdmaptest.WaitDone(t, b.qp, 10*time.Second)
	var te *rdmap.TerminateError
	if err := b.qp.Err(); !errors.As(err, &te) || !te.Remote || te.Layer != wire.LayerRDMAP || te.EType != wire.ETypeLocalCatastrophic || te.Code != wire.CodeUnspecified {
		t.Fatalf("peer Err %v", err)
	}
}

// TestFence: a fenced Write waits for the Read before it, so it cannot
// overwrite the memory the Read fetches.
func TestFence(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, nil)
	remote := bytes.Repeat([]byte("A"), 1<<20)
	rmr := b.reg(t, remote, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
	sink := a.reg(t, make([]byte, 1<<20), rdmap.AccessLocalWrite)
	src := a.reg(t, bytes.Repeat([]byte("B"), 1<<20), 0)
	for i := range 5 {
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: uint64(2 * i), Op: rdmap.WRRead, SGL: []rdmap.SGE{sink.SGE(0, 1<<20)}, Remote: rdmap.Remote{STag: rmr.STag()}, Signaled: true}))
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: uint64(2*i + 1), Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 1<<20)}, Remote: rdmap.Remote{STag: rmr.STag()}, Fence: true, Signaled: true}))
		wcs := pollN(t, a.cq, 2)
		expectWC(t, wcs[0], uint64(2*i), rdmap.WCRead, rdmap.WCSuccess)
		expectWC(t, wcs[1], uint64(2*i+1), rdmap.WCWrite, rdmap.WCSuccess)
		want := byte('A')
		if i > 0 {
			want = 'B'
		}
		if !bytes.Equal(sink.Bytes(), bytes.Repeat([]byte{want}, 1<<20)) {
			t.Fatalf("round %d: the fenced Write overtook the Read", i)
		}
	}
}

// TestUnsignaled: only signaled WRs complete, in SQ order, and an
// unsignaled Read still gates the completions after it.
func TestUnsignaled(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, nil)
	rmr := b.reg(t, make([]byte, 4096), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
	buf := a.reg(t, make([]byte, 4096), rdmap.AccessLocalWrite)
	// The Reads land apart from the Writes' source: an unfenced Write may
	// be sent while an earlier Read's response is placed.
	sink := a.reg(t, make([]byte, 4096), rdmap.AccessLocalWrite)
	for i := range 50 {
		wr := rdmap.SendWR{ID: uint64(i), Op: rdmap.WRWrite, SGL: []rdmap.SGE{buf.SGE(0, 4096)}, Remote: rdmap.Remote{STag: rmr.STag()}, Signaled: i%10 == 9}
		if i%7 == 3 {
			wr.Op = rdmap.WRRead
			wr.SGL = []rdmap.SGE{sink.SGE(0, 4096)}
		}
		mustPost(t, a.qp.PostSend(wr))
	}
	wcs := pollN(t, a.cq, 5)
	for k, wc := range wcs {
		if wc.ID != uint64(10*k+9) || wc.Status != rdmap.WCSuccess {
			t.Fatalf("completion %d: %+v", k, wc)
		}
	}
	if a.cq.Len() != 0 {
		t.Fatalf("%d extra completions", a.cq.Len())
	}
}

func TestSRQ(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	srq, err := pd.CreateSRQ(&rdmap.SRQConfig{MaxWR: 64})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := dev.CreateCQ(256)
	buf, _ := pd.RegisterMemory(make([]byte, 64*64), rdmap.AccessLocalWrite)
	defer buf.Deregister()
	for i := range 64 {
		mustPost(t, srq.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{buf.SGE(64*i, 64)}}))
	}
	var senders []*side
	var qps []*rdmap.QP
	for range 4 {
		qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.PostRecv(rdmap.RecvWR{}); err != rdmap.ErrInvalidWR {
			t.Fatalf("PostRecv on an SRQ QP: %v", err)
		}
		s := newSide(t, newDevice(t), rdmap.QPConfig{})
		rdmaptest.Connect(t, s.qp, qp, nil)
		senders = append(senders, s)
		qps = append(qps, qp)
	}
	for i, s := range senders {
		msg := s.reg(t, []byte(fmt.Sprintf("from sender %d", i)), 0)
		for range 10 {
			mustPost(t, s.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{msg.SGE(0, msg.Len())}}))
		}
	}
	got := map[uint32]int{}
	for _, wc := range pollN(t, cq, 40) {
		if wc.Status != rdmap.WCSuccess {
			t.Fatalf("%+v", wc)
		}
		got[wc.QPN]++
	}
	for _, qp := range qps {
		if got[qp.QPN()] != 10 {
			t.Fatalf("per-QP receives %v", got)
		}
	}
	if srq.Len() != 24 {
		t.Fatalf("SRQ holds %d", srq.Len())
	}
	if err := srq.Close(); err != rdmap.ErrBusy {
		t.Fatalf("SRQ Close while in use: %v", err)
	}
	for _, qp := range qps {
		qp.Close()
	}
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
	_ = net.ErrClosed
}

// TestGracefulDisconnectPeerSilent: the peer never closes its side; the
// QP gives up after DisconnectTimeout, still without an error.
func TestGracefulDisconnectPeerSilent(t *testing.T) {
	dev := newDevice(t)
	v := newVictim(t, dev, rdmap.QPConfig{DisconnectTimeout: 200 * time.Millisecond})
	mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{v.recv.SGE(0, 64)}}))
	p := rdmaptest.NewRawPeer(t, v.qp, nil, false)
	p.Send([]byte("hi"))
	expectWC(t, poll(t, v.cq), 1, rdmap.WCRecv, rdmap.WCSuccess)
	mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 2, SGL: []rdmap.SGE{v.recv.SGE(0, 64)}}))
	v.qp.Disconnect(false)
	p.ExpectEOFNoData(5 * time.Second) // our FIN, nothing else
	rdmaptest.WaitDone(t, v.qp, 5*time.Second)
	if err := v.qp.Err(); err != nil {
		t.Fatalf("Err() = %v", err)
	}
	expectWC(t, poll(t, v.cq), 2, rdmap.WCRecv, rdmap.WCWRFlushErr)
}

// TestORDCredits: no more Read Requests are outstanding than the ORD; a
// Read Response returns a credit.
func TestORDCredits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := newDevice(t)
		v := newVictim(t, dev, rdmap.QPConfig{})
		for i := range 5 {
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRRead, SGL: []rdmap.SGE{v.srcMR.SGE(8*i, 8)}, Remote: rdmap.Remote{STag: 0x700, Offset: uint64(i)}, Signaled: true}))
		}
		p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{ORD: 2, IRD: 2, Pipe: true}, true)
		var reqs [][]byte
		for range 2 {
			ul, err := p.NextFPDU(5 * time.Second)
			if err != nil || rdmaptest.Opcode(ul) != wire.OpReadRequest {
				t.Fatalf("read request: %v", err)
			}
			reqs = append(reqs, ul)
		}
		expectSilence(t, p, "a third Read Request beyond ORD 2")
		respond := func(ul []byte) {
			rr, _ := wire.ParseReadRequest(ul[ddp.UntaggedHeaderLen:])
			h := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(1, wire.OpReadResponse), STag: rr.SinkSTag(), TO: rr.SinkTO()})
			p.SendULPDU(append(h, bytes.Repeat([]byte{byte(rr.SrcTO())}, int(rr.Size()))...))
		}
		respond(reqs[0])
		ul, err := p.NextFPDU(5 * time.Second)
		if err != nil || rdmaptest.Opcode(ul) != wire.OpReadRequest {
			t.Fatalf("third read request: %v", err)
		}
		if h, _ := ddp.Parse(ul); h.MSN() != 3 {
			t.Fatalf("third Read Request has MSN %d", h.MSN())
		}
		expectWC(t, poll(t, v.cq), 0, rdmap.WCRead, rdmap.WCSuccess)
		if v.srcMR.Bytes()[0] != 0 {
			t.Fatal("read data")
		}
	})
}

// TestReadWithORD0: when the handshake settled ORD 0, a posted Read (or
// atomic) may not be sent: it completes with a local QP operation error
// and the QP ends with a local catastrophic Terminate (siw: "We negotiated
// not to send READ req's"), instead of waiting for an ORD credit that
// never comes. In a synctest bubble, so that a Read left waiting fails
// the test at once (poll's deadline passes in fake time).
func TestReadWithORD0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := newDevice(t)
		v := newVictim(t, dev, rdmap.QPConfig{})
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRRead, SGL: []rdmap.SGE{v.srcMR.SGE(0, 8)}, Remote: rdmap.Remote{STag: 0x700}, Signaled: true}))
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRWrite, SGL: []rdmap.SGE{v.srcMR.SGE(0, 8)}, Remote: rdmap.Remote{STag: 0x200}, Signaled: true}))
		p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{ORD: -1, Pipe: true}, true)
		if got := v.qp.Params().ORD; got != 0 {
			t.Fatalf("ORD %d, want 0", got)
		}
		term, _ := p.ExpectTerminate(time.Minute)
		if term.Layer != wire.LayerRDMAP || term.EType != wire.ETypeLocalCatastrophic {
			t.Fatalf("Terminate %v, want RDMAP local catastrophic", &term)
		}
		wcs := pollN(t, v.cq, 2)
		expectWC(t, wcs[0], 1, rdmap.WCRead, rdmap.WCLocQPOpErr)
		expectWC(t, wcs[1], 2, rdmap.WCWrite, rdmap.WCWRFlushErr)
		p.ExpectEOF(time.Minute)
		p.Conn.Close()
		rdmaptest.WaitDone(t, v.qp, time.Minute)
		var te *rdmap.TerminateError
		if err := v.qp.Err(); !errors.As(err, &te) || te.Remote || te.EType != wire.ETypeLocalCatastrophic {
			t.Fatalf("Err() = %v, want the local catastrophic Terminate", err)
		}
	})
}
