package rdmap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// pollTxPair connects a (acfg with PollTx, the initiator) and b (acfg
// without) over loopback TCP whose a end has a send buffer of sndbuf
// bytes (0: the system's), with the options o.
func pollTxPair(t *testing.T, acfg rdmap.QPConfig, sndbuf int, o *rdmaptest.Options) (*side, *side) {
	t.Helper()
	bcfg := acfg
	acfg.PollTx = true
	a := newSide(t, newDevice(t), acfg)
	b := newSide(t, newDevice(t), bcfg)
	ca, cb := rdmaptest.ConnPair(t, false)
	if sndbuf > 0 {
		if err := ca.(*net.TCPConn).SetWriteBuffer(sndbuf); err != nil {
			t.Fatal(err)
		}
	}
	rdmaptest.Start(t, a.qp, b.qp, ca, cb, o)
	t.Cleanup(func() {
		a.qp.Close()
		b.qp.Close()
		rdmaptest.WaitDone(t, a.qp, 10*time.Second)
		rdmaptest.WaitDone(t, b.qp, 10*time.Second)
	})
	return a, b
}

// TestPollTxStream streams Writes or Sends from a PollTx QP whose
// application posts lists and waits for their completions (the shape the
// mode is for): every byte arrives where it was sent, every list's
// signaled completion comes in order, and the waiter's goroutine wrote
// batches (QPStats.TxPolled). Large messages through a small send buffer
// take the rest path: the socket does not take a whole batch, the send
// goroutine writes the rest (TxPolledRest) and parks again for the next
// Wait.
func TestPollTxStream(t *testing.T) {
	for _, c := range []struct {
		name       string
		op         rdmap.WROpcode
		size, n    int
		sndbuf     int
		crc        bool
		wantRest   bool
		list, wind int
	}{
		{"write-64", rdmap.WRWrite, 64, 20000, 0, false, false, 32, 2048},
		{"send-64", rdmap.WRSend, 64, 20000, 0, false, false, 32, 1024},
		{"write-64-crc", rdmap.WRWrite, 64, 5000, 0, true, false, 32, 2048},
		{"send-4000-crc", rdmap.WRSend, 4000, 2000, 0, true, false, 8, 256},
		{"write-256k-small-sndbuf", rdmap.WRWrite, 256 << 10, 48, 64 << 10, false, true, 4, 16},
		{"send-100k-small-sndbuf", rdmap.WRSend, 100 << 10, 60, 64 << 10, true, true, 4, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			// No idle timer: every batch but a rest is the waiter's.
			a, b := pollTxPair(t, rdmap.QPConfig{MaxSendWR: c.wind + 1, MaxRecvWR: c.wind + 1, PollTxIdle: time.Hour}, c.sndbuf, &rdmaptest.Options{CRC: c.crc})
			// The send goroutine Start began has passed the gate and
			// parked (nothing is posted yet).
			rdmap.WaitTxParked(a.qp)
			r := rand.New(rand.NewPCG(uint64(c.size), uint64(c.n)))
			// Message i is at (i % slots) * size of the source and lands
			// at i * size of the sink (Sends: receive i), so that every
			// message's bytes are checked; the source has fewer slots,
			// rewritten between rounds of slots messages.
			slots := min(c.n, max(1, (4<<20)/c.size))
			src := randBytes(r, slots*c.size)
			want := make([]byte, c.n*c.size)
			for i := range c.n {
				copy(want[i*c.size:], src[(i%slots)*c.size:][:c.size])
			}
			sink := make([]byte, c.n*c.size)
			smr := a.reg(t, src, rdmap.AccessLocalWrite)
			dmr := b.reg(t, sink, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
			fin := make([]byte, 8)
			fmr := b.reg(t, fin, rdmap.AccessLocalWrite)
			errc, ready := make(chan error, 1), make(chan struct{})
			cr := &recvCredit{more: make(chan struct{}, 1)}
			go func() { errc <- receiveAll(b, dmr, fmr, c.op, c.size, c.n, c.wind, cr, ready) }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// waitCredit waits for the receiver to post receives (cr).
			waitCredit := func() {
				select {
				case <-cr.more:
				case err := <-errc:
					t.Fatalf("receiver ended early: %v", err)
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
			wrs := make([]rdmap.SendWR, c.list)
			wcs := make([]rdmap.WC, 16)
			var posted, retired int
			// The receiver posts its receives before a Send may go (iWARP
			// has no receiver-not-ready retry): the first window, and one
			// more for each it reaps.
			select {
			case <-ready:
			case err := <-errc:
				t.Fatal(err)
			}
			for retired < c.n {
				limit := c.n
				if c.op == rdmap.WRSend {
					limit = min(limit, int(cr.posted.Load()))
				}
				for posted < limit && posted-retired+c.list <= c.wind {
					k := min(c.list, limit-posted)
					for j := range k {
						i := posted + j
						wrs[j] = rdmap.SendWR{ID: uint64(i), Op: c.op, SGL: []rdmap.SGE{smr.SGE((i%slots)*c.size, c.size)},
							Remote: rdmap.Remote{STag: dmr.STag(), Offset: uint64(i * c.size)}, Signaled: j == k-1}
					}
					if _, err := a.qp.PostSends(wrs[:k]); err != nil {
						t.Fatalf("post %d (retired %d, k %d): %v", posted, retired, k, err)
					}
					posted += k
				}
				if posted == retired {
					// Nothing outstanding: waiting for the receiver's credit.
					waitCredit()
					continue
				}
				k := a.cq.Poll(wcs)
				if k == 0 {
					if err := a.cq.Wait(ctx); err != nil {
						t.Fatalf("waiting with %d of %d retired: %v", retired, c.n, err)
					}
					continue
				}
				for _, wc := range wcs[:k] {
					if wc.Status != rdmap.WCSuccess || int(wc.ID) < retired || int(wc.ID) >= posted {
						t.Fatalf("completion %+v with %d..%d outstanding", wc, retired, posted-1)
					}
					retired = int(wc.ID) + 1
				}
			}
			// A Send after the Writes: placed after them (Sends: the
			// receiver's last receive is this one, which it posts once
			// it has reaped receive n-wind: the Sends before retire when
			// they are written, maybe before that).
			for c.op == rdmap.WRSend && cr.posted.Load() < int64(c.n+1) {
				waitCredit()
			}
			mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 1 << 40, Op: rdmap.WRSend, SGL: []rdmap.SGE{smr.SGE(0, 8)}, Signaled: true}))
			expectWC(t, poll(t, a.cq), 1<<40, rdmap.WCSend, rdmap.WCSuccess)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sink, want) {
				i := 0
				for sink[i] == want[i] {
					i++
				}
				t.Fatalf("byte %d (message %d) differs", i, i/c.size)
			}
			st := a.qp.Stats()
			t.Logf("%+v", st)
			if st.TxPolled == 0 {
				t.Fatal("no batch was written on the waiting goroutine (TxPolled 0)")
			}
			if c.size <= 4096 && st.TxPolledRest == 0 && st.TxWritevs != st.TxPolled+st.TxDirect {
				// Without a rest every batch is the waiter's (or, the final
				// lone Send, a direct send's): no send goroutine wrote one.
				t.Fatalf("%d writevs, %d by waiters and %d direct: a send goroutine wrote batches", st.TxWritevs, st.TxPolled, st.TxDirect)
			}
			if c.wantRest && st.TxPolledRest == 0 {
				t.Fatalf("a %d-byte send buffer took every batch of %d-byte messages whole (TxPolledRest 0)", c.sndbuf, c.size)
			}
		})
	}
}

// recvCredit is how many receives TestPollTxStream's receiver has
// posted; more holds a wake-up sent after each update.
type recvCredit struct {
	posted atomic.Int64
	more   chan struct{}
}

// receiveAll is TestPollTxStream's receiver: for Sends it keeps up to
// wind receives posted, publishing their count in cr, checks each
// completion in order and reposts, then takes the final Send; for
// Writes only the final Send. It closes ready once its first receives
// are posted.
func receiveAll(b *side, dmr, fmr *rdmap.MR, op rdmap.WROpcode, size, n, wind int, cr *recvCredit, ready chan<- struct{}) error {
	post := func(i int) error {
		var err error
		if i == n {
			err = b.qp.PostRecv(rdmap.RecvWR{ID: 1 << 40, SGL: []rdmap.SGE{fmr.SGE(0, 8)}})
		} else {
			err = b.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{dmr.SGE(i*size, size)}})
		}
		cr.posted.Store(int64(i + 1))
		select {
		case cr.more <- struct{}{}:
		default:
		}
		return err
	}
	start := n // the first receive: after Writes, the final Send's
	if op == rdmap.WRSend {
		start = 0
	}
	next := start
	for ; next < min(start+wind, n+1); next++ {
		if err := post(next); err != nil {
			return err
		}
	}
	close(ready)
	for i := start; i <= n; i++ {
		wc, err := waitCompletion(b.cq)
		if err != nil {
			return fmt.Errorf("receive %d: %w", i, err)
		}
		want := uint64(i)
		if i == n {
			want = 1 << 40
		}
		if wc.ID != want || wc.Status != rdmap.WCSuccess || wc.Op != rdmap.WCRecv {
			return fmt.Errorf("receive completion %+v, want id %d", wc, want)
		}
		if next <= n {
			if err := post(next); err != nil {
				return err
			}
			next++
		}
	}
	return nil
}

// TestPollTxWithoutWait: work a PollTx QP queues is sent although its
// application never waits on the send CQ (it only polls the receive CQ
// for the answers): the idle timer gives it to the send goroutine, and
// no batch is written on a waiter's goroutine.
func TestPollTxWithoutWait(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	scq, rcq := twoCQs(t, dev)
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: scq, RecvCQ: rcq, PollTx: true})
	if err != nil {
		t.Fatal(err)
	}
	a := &side{dev: dev, pd: pd, cq: rcq, qp: qp}
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	rdmaptest.Connect(t, a.qp, b.qp, nil)
	buf := []byte("0123456789abcdef")
	amr := a.reg(t, buf, rdmap.AccessLocalWrite)
	bbuf := make([]byte, 16*len(buf))
	bmr := b.reg(t, bbuf, rdmap.AccessLocalWrite)
	const rounds, per = 5, 3
	for r := range rounds {
		for i := range per {
			mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: uint64(r*per + i), SGL: []rdmap.SGE{bmr.SGE((r*per+i)*len(buf), len(buf))}}))
		}
		// A list (never a direct send, which writes a lone request on
		// the poster's goroutine in both modes).
		wrs := make([]rdmap.SendWR, per)
		for i := range wrs {
			wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{amr.SGE(0, len(buf))}}
		}
		if _, err := a.qp.PostSends(wrs); err != nil {
			t.Fatal(err)
		}
		for i := range per {
			expectWC(t, poll(t, b.cq), uint64(r*per+i), rdmap.WCRecv, rdmap.WCSuccess)
		}
	}
	for i := range rounds * per {
		if !bytes.Equal(bbuf[i*len(buf):][:len(buf)], buf) {
			t.Fatalf("message %d: %q", i, bbuf[i*len(buf):][:len(buf)])
		}
	}
	if st := a.qp.Stats(); st.TxPolled != 0 || st.TxWritevs == 0 {
		t.Fatalf("stats %+v: want writes by the send goroutine only", st)
	}
}

// twoCQs creates two CQs of 64 on dev.
func twoCQs(t *testing.T, dev *rdmap.Device) (*rdmap.CQ, *rdmap.CQ) {
	t.Helper()
	var cqs [2]*rdmap.CQ
	for i := range cqs {
		cq, err := dev.CreateCQ(64)
		if err != nil {
			t.Fatal(err)
		}
		cqs[i] = cq
	}
	return cqs[0], cqs[1]
}

// TestPollTxOneQPPerCQ: a send CQ drives one PollTx QP at a time, and
// PollTxIdle may not be negative.
func TestPollTxOneQPPerCQ(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	cq, other := twoCQs(t, dev)
	first, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: other, PollTx: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: other, PollTx: true}); !errors.Is(err, rdmap.ErrConfig) {
		t.Fatalf("second PollTx QP on one send CQ: %v, want ErrConfig", err)
	}
	// The CQ may still serve QPs without PollTx, and be another
	// PollTx QP's receive CQ.
	for _, cfg := range []rdmap.QPConfig{{SendCQ: cq, RecvCQ: other}, {SendCQ: other, RecvCQ: cq, PollTx: true}} {
		qp, err := pd.CreateQP(&cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		qp.Close()
	}
	first.Close()
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: other, PollTx: true})
	if err != nil {
		t.Fatalf("PollTx QP once the first is closed: %v", err)
	}
	qp.Close()
	if _, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: other, RecvCQ: other, PollTx: true, PollTxIdle: -time.Millisecond}); !errors.Is(err, rdmap.ErrConfig) {
		t.Fatalf("negative PollTxIdle: %v, want ErrConfig", err)
	}
}

// TestPollTxFault: a PollTx waiter whose batch reads registered memory
// that faults (a file mapping truncated under it) fails the QP with
// ErrMemoryFault and the local catastrophic Terminate, on the waiting
// goroutine, without a panic and without writing any of the batch: the
// Wait returns with the work requests flushed, and the peer reads the
// Terminate and then the end of the stream.
func TestPollTxFault(t *testing.T) {
	for _, crc := range []bool{false, true} {
		t.Run(fmt.Sprintf("crc=%v", crc), func(t *testing.T) {
			v := newSide(t, newDevice(t), rdmap.QPConfig{PollTx: true, PollTxIdle: time.Hour})
			p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{CRC: crc}, false)
			p.Write(0x100, 0, nil, true)
			// Received: the send engine has passed its gate, and parks.
			waitFor(t, "the first FPDU received", func() bool { return v.qp.Stats().RxFPDUs >= 1 })
			mr, page := truncatedSource(t, v)
			rdmap.WaitTxParked(v.qp)
			// The second Send's source is past the new end: its copy
			// into the batch faults.
			if _, err := v.qp.PostSends([]rdmap.SendWR{
				{ID: 1, Op: rdmap.WRSend, SGL: []rdmap.SGE{mr.SGE(0, 64)}},
				{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{mr.SGE(2*page, 64)}, Signaled: true},
			}); err != nil {
				t.Fatal(err)
			}
			if st := v.qp.Stats(); st.TxFPDUs != 0 || st.TxDirect != 0 {
				t.Fatalf("stats %+v before the Wait: the posts sent something", st)
			}
			// The Wait builds the batch, and faults. (The flushed
			// completions come once the QP has ended, after the peer's
			// close or the QP's own timeout: the Wait is left to its
			// context.)
			ctx, cancel := context.WithCancel(context.Background())
			waited := make(chan error, 1)
			go func() { waited <- v.cq.Wait(ctx) }()
			waitFor(t, "the QP failed", func() bool { return v.qp.Err() != nil })
			if err := v.qp.Err(); !errors.Is(err, rdmap.ErrMemoryFault) {
				t.Fatalf("QP error %v after the faulting batch, want ErrMemoryFault", err)
			}
			if st := v.qp.Stats(); st.TxFPDUs != 0 || st.TxPolled != 0 {
				t.Fatalf("stats %+v: the faulting batch was written", st)
			}
			p.ExpectTerminate(20 * time.Second)
			p.ExpectEOF(20 * time.Second)
			cancel()
			if err := <-waited; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait: %v", err)
			}
		})
	}
}

// TestPollTxPostFromAnotherGoroutine: a waiter asleep on the send CQ of
// a parked PollTx QP sends what another goroutine posts (the post wakes
// it), with no idle timer to fall back on.
func TestPollTxPostFromAnotherGoroutine(t *testing.T) {
	a, b := pollTxPair(t, rdmap.QPConfig{PollTxIdle: time.Hour}, 0, &rdmaptest.Options{})
	rdmap.WaitTxParked(a.qp)
	src := []byte("from another goroutine, one of a list")
	smr := a.reg(t, src, rdmap.AccessLocalWrite)
	dst := make([]byte, 3*len(src))
	dmr := b.reg(t, dst, rdmap.AccessLocalWrite)
	for i := range 3 {
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{dmr.SGE(i*len(src), len(src))}}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- a.cq.Wait(ctx) }()
	if !rdmap.WaitCQAsleep(a.cq) {
		t.Fatal("the waiter never blocked")
	}
	wrs := make([]rdmap.SendWR, 3)
	for i := range wrs {
		wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{smr.SGE(0, len(src))}, Signaled: i == 2}
	}
	if _, err := a.qp.PostSends(wrs); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v (the list was never sent)", err)
	}
	expectWC(t, poll(t, a.cq), 2, rdmap.WCSend, rdmap.WCSuccess)
	for i := range 3 {
		expectWC(t, poll(t, b.cq), uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
	}
	if !bytes.Equal(dst, bytes.Repeat(src, 3)) {
		t.Fatalf("received %q", dst)
	}
}

// TestPollTxRandomLists streams Writes of random sizes in lists of random
// lengths, only each list's last signaled, through a small send buffer,
// with no idle timer: whatever the socket leaves to the send goroutine,
// and wherever a batch ends, the poster's Waits see every list complete
// (no work is left in a parked engine for a waiter asleep) and every byte
// arrives.
func TestPollTxRandomLists(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			a, b := pollTxPair(t, rdmap.QPConfig{MaxSendWR: 64, PollTxIdle: time.Hour}, 64<<10, &rdmaptest.Options{})
			rdmap.WaitTxParked(a.qp)
			r := rand.New(rand.NewPCG(seed, 77))
			const n = 200
			sizes := make([]int, n)
			offs := make([]int, n+1)
			for i := range sizes {
				sizes[i] = 1 + r.IntN(300<<10)
				offs[i+1] = offs[i] + sizes[i]
			}
			src := randBytes(r, offs[n])
			dst := make([]byte, offs[n])
			smr := a.reg(t, src, rdmap.AccessLocalWrite)
			dmr := b.reg(t, dst, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
			fin := make([]byte, 1)
			fmr := b.reg(t, fin, rdmap.AccessLocalWrite)
			mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 9, SGL: []rdmap.SGE{fmr.SGE(0, 1)}}))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wcs [4]rdmap.WC
			for i := 0; i < n; {
				k := min(n-i, 1+r.IntN(8))
				postWrites(t, a.qp, smr, dmr, offs, i, k)
				i += k
				for {
					if got := a.cq.Poll(wcs[:]); got > 0 {
						expectWC(t, wcs[0], uint64(i-1), rdmap.WCWrite, rdmap.WCSuccess)
						break
					}
					if err := a.cq.Wait(ctx); err != nil {
						t.Fatalf("list ending at %d: %v (stats %+v)", i-1, err, a.qp.Stats())
					}
				}
			}
			mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 10, Op: rdmap.WRSend, SGL: []rdmap.SGE{smr.SGE(0, 1)}}))
			expectWC(t, poll(t, b.cq), 9, rdmap.WCRecv, rdmap.WCSuccess)
			if !bytes.Equal(dst, src) {
				t.Fatal("data differs")
			}
			t.Logf("%+v", a.qp.Stats())
		})
	}
}

// postWrites posts Writes i to i+k-1 as one list, the last signaled:
// Write m carries bytes offs[m] to offs[m+1] of smr to the same offset of
// dmr.
func postWrites(t *testing.T, qp *rdmap.QP, smr, dmr *rdmap.MR, offs []int, i, k int) {
	t.Helper()
	wrs := make([]rdmap.SendWR, k)
	for j := range wrs {
		m := i + j
		wrs[j] = rdmap.SendWR{ID: uint64(m), Op: rdmap.WRWrite, SGL: []rdmap.SGE{smr.SGE(offs[m], offs[m+1]-offs[m])},
			Remote: rdmap.Remote{STag: dmr.STag(), Offset: uint64(offs[m])}, Signaled: j == k-1}
	}
	if _, err := qp.PostSends(wrs); err != nil {
		t.Fatal(err)
	}
}

// TestPollTxConcurrentPoster: one goroutine posts lists of Writes of
// random sizes (each list's last signaled) while another waits for their
// completions, through a small send buffer and with no idle timer: work
// posted while the send goroutine writes a rest is sent when it parks
// (the waiter asleep meanwhile is woken to drive it), every list
// completes and every byte arrives.
func TestPollTxConcurrentPoster(t *testing.T) {
	a, b := pollTxPair(t, rdmap.QPConfig{MaxSendWR: 256, PollTxIdle: time.Hour}, 64<<10, &rdmaptest.Options{})
	rdmap.WaitTxParked(a.qp)
	r := rand.New(rand.NewPCG(5, 6))
	// A window of about one batch (mpa.WriterMaxBytes): the waiter's
	// batch often holds all that is posted, the socket takes part of it,
	// and the poster posts more while the send goroutine writes the rest
	// (which then parks, leaving that to the waiter).
	const n, window = 600, 8
	sizes, offs := make([]int, n), make([]int, n+1)
	for i := range sizes {
		sizes[i] = 40<<10 + r.IntN(80<<10)
		if r.IntN(4) == 0 {
			sizes[i] = 1 + r.IntN(256)
		}
		offs[i+1] = offs[i] + sizes[i]
	}
	src := randBytes(r, offs[n])
	dst := make([]byte, offs[n])
	smr := a.reg(t, src, rdmap.AccessLocalWrite)
	dmr := b.reg(t, dst, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var retired atomic.Int64 // every request before it has completed
	more := make(chan struct{}, 1)
	waiter := make(chan error, 1)
	go func() {
		waiter <- func() error {
			var wcs [8]rdmap.WC
			for retired.Load() < n {
				k := a.cq.Poll(wcs[:])
				if k == 0 {
					if err := a.cq.Wait(ctx); err != nil {
						return fmt.Errorf("%d of %d retired: %w (stats %+v)", retired.Load(), n, err, a.qp.Stats())
					}
					continue
				}
				for _, wc := range wcs[:k] {
					if wc.Status != rdmap.WCSuccess || int64(wc.ID) < retired.Load() {
						return fmt.Errorf("completion %+v", wc)
					}
					retired.Store(int64(wc.ID) + 1)
				}
				select {
				case more <- struct{}{}:
				default:
				}
			}
			return nil
		}()
	}()
	pr := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < n; {
		k := min(n-i, 1+pr.IntN(4))
		for i+k-int(retired.Load()) > window {
			select {
			case <-more:
			case err := <-waiter:
				t.Fatalf("the waiter ended: %v", err)
			}
		}
		postWrites(t, a.qp, smr, dmr, offs, i, k)
		i += k
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	fin := make([]byte, 1)
	fmr := b.reg(t, fin, rdmap.AccessLocalWrite)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 9, SGL: []rdmap.SGE{fmr.SGE(0, 1)}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 10, Op: rdmap.WRSend, SGL: []rdmap.SGE{smr.SGE(0, 1)}}))
	expectWC(t, poll(t, b.cq), 9, rdmap.WCRecv, rdmap.WCSuccess)
	if !bytes.Equal(dst, src) {
		t.Fatal("data differs")
	}
	t.Logf("%+v", a.qp.Stats())
}
