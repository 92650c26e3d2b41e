package rdmap

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/internal/sys"
)

// emssPair is a QP pair over loopback TCP, the sender's (a) ULPDU left
// to the EMSS unless maxULPDU is set, with 2 MiB of registered memory
// on each side.
type emssPair struct {
	a, b     *QP
	ca       net.Conn
	cq       *CQ
	src, dst []byte
	smr, dmr *MR
	fence    *MR // one byte the fence's Read lands in
	next     uint64
}

func newEMSSPair(t *testing.T, maxULPDU int) *emssPair {
	t.Helper()
	dev, err := NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	// Memory outside the Go heap (AllocMemory), as an application's
	// registered memory is: the race detector does not see the chain
	// from the receive engine's placement to the Read that fences it
	// (it runs through the TCP connection).
	mem, err := dev.AllocMemory(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	p := &emssPair{cq: cq, src: mem.Bytes()[:2<<20], dst: mem.Bytes()[2<<20:]}
	if p.a, err = pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxULPDU: maxULPDU}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close() })
	if p.b, err = pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.Close() })
	for i := range p.src {
		p.src[i] = byte(i * 7)
	}
	if p.smr, err = pd.RegisterMemory(p.src, AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.smr.Deregister() })
	if p.dmr, err = pd.RegisterMemory(p.dst, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.dmr.Deregister() })
	if p.fence, err = pd.RegisterMemory(make([]byte, 1), AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.fence.Deregister() })
	var cb net.Conn
	p.ca, cb = tcpPair(t)
	if err := p.b.Start(cb, &mpa.Params{IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Start(p.ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	return p
}

// write writes the 2 MiB source into the sink in 64 KiB Writes, then
// reads one byte back (a Read completes after the Writes before it are
// placed: RFC 5040's ordering), waits for that and checks the sink.
func (p *emssPair) write(t *testing.T) {
	t.Helper()
	const piece = 64 << 10
	clear(p.dst)
	wrs := make([]SendWR, len(p.src)/piece+1)
	for i := range len(wrs) - 1 {
		p.next++
		wrs[i] = SendWR{ID: p.next, Op: WRWrite, SGL: []SGE{p.smr.SGE(i*piece, piece)},
			Remote: Remote{STag: p.dmr.STag(), Offset: uint64(i * piece)}}
	}
	p.next++
	wrs[len(wrs)-1] = SendWR{ID: p.next, Op: WRRead, SGL: []SGE{p.fence.SGE(0, 1)}, Remote: Remote{STag: p.dmr.STag()}, Signaled: true}
	if _, err := p.a.PostSends(wrs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]WC
	for p.cq.Poll(wc[:]) == 0 {
		if err := p.cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for the Writes: %v", err)
		}
	}
	if wc[0].ID != p.next || wc[0].Status != WCSuccess {
		t.Fatalf("completion %+v, want request %d done", wc[0], p.next)
	}
	for i := range p.dst {
		if p.dst[i] != p.src[i] {
			t.Fatalf("sink byte %d is %d, want %d", i, p.dst[i], p.src[i])
		}
	}
}

// TestULPDUFollowsEMSS: with no QPConfig.MaxULPDU the send engine reads
// the EMSS again as bytes go out and frames to its MULPDU: the EMSS
// reader is replaced by one that reports what the test sets (a path MTU
// that shrinks, then grows, then a failed read).
func TestULPDUFollowsEMSS(t *testing.T) {
	p := newEMSSPair(t, 0)
	first := p.a.Stats().TxULPDU
	if mss, err := sys.TCPMaxSeg(p.ca.(*net.TCPConn)); err != nil || first != ulpduFor(mss, false) {
		t.Fatalf("TxULPDU at Start %d; TCP_MAXSEG %d (%v), whose MULPDU is %d", first, mss, err, ulpduFor(mss, false))
	}
	var fake atomic.Int64
	p.a.tx.emssFn = func(uintptr) { p.a.tx.emss = int(fake.Load()) } // before any post: the engine reads it after

	for _, c := range []struct {
		name string
		emss int
		want int // TxULPDU after 2 MiB
	}{
		{"shrinks to 1460", 1460, 1454},
		{"grows to 9000", 9000, 8994},
		{"grows to 65483, past 9000 (and loopback's first)", 65483, 65474},
		{"a failed read changes nothing", 0, 65474},
		{"shrinks to 1460 again", 1460, 1454},
	} {
		fake.Store(int64(c.emss))
		before := p.a.Stats()
		p.write(t)
		st := p.a.Stats()
		if st.TxULPDU != c.want {
			t.Fatalf("%s: TxULPDU %d, want %d", c.name, st.TxULPDU, c.want)
		}
		// At least the second MiB of the 2 went out in FPDUs of the new
		// size (the engine looks again every MiB).
		if fpdus, least := st.TxFPDUs-before.TxFPDUs, uint64((1<<20)/(c.want+64)); fpdus < least {
			t.Fatalf("%s: %d FPDUs for 2 MiB, want at least %d of ULPDU %d", c.name, fpdus, least, c.want)
		}
	}
}

// TestULPDUFixed: QPConfig.MaxULPDU fixes the ULPDU; the EMSS is never
// read again.
func TestULPDUFixed(t *testing.T) {
	p := newEMSSPair(t, 4000)
	if p.a.tx.emssAuto {
		t.Fatal("the EMSS is followed although MaxULPDU is set")
	}
	p.write(t)
	st := p.a.Stats()
	if st.TxULPDU != 4000 || st.TxFPDUs < (2<<20)/4000 {
		t.Fatalf("stats %+v, want TxULPDU 4000 and at least %d FPDUs", st, (2<<20)/4000)
	}
}

// TestFollowEMSSReadsTCPMaxSeg: the engine's own read is the socket's
// TCP_MAXSEG, and costs no allocation.
func TestFollowEMSSReadsTCPMaxSeg(t *testing.T) {
	p := newEMSSPair(t, 0)
	WaitTxParked(p.a)
	// Parked: nothing runs the engine until a post rings.
	mss, err := sys.TCPMaxSeg(p.ca.(*net.TCPConn))
	if err != nil {
		t.Skipf("no TCP_MAXSEG here: %v", err)
	}
	p.a.txFollowEMSS()
	if p.a.tx.emss != mss {
		t.Fatalf("the engine read EMSS %d, TCP_MAXSEG is %d", p.a.tx.emss, mss)
	}
	if n := testing.AllocsPerRun(20, p.a.txFollowEMSS); n != 0 {
		t.Fatalf("txFollowEMSS allocates %v times", n)
	}
}

// TestULPDUFollowsLoopbackMSS: with the real EMSS reader, the ULPDU in
// use comes to be the MULPDU of the socket's TCP_MAXSEG as traffic goes
// on (on loopback the MSS grows in the first MiBs; the engine looks
// again every MiB written, so it agrees at the latest one look after
// the MSS settles).
func TestULPDUFollowsLoopbackMSS(t *testing.T) {
	p := newEMSSPair(t, 0)
	tc := p.ca.(*net.TCPConn)
	var mss, got int
	for range 8 {
		p.write(t)
		m, err := sys.TCPMaxSeg(tc)
		if err != nil {
			t.Skipf("no TCP_MAXSEG here: %v", err)
		}
		mss, got = m, p.a.Stats().TxULPDU
		if got == ulpduFor(mss, false) {
			return
		}
	}
	t.Fatalf("after 16 MiB TxULPDU is %d; TCP_MAXSEG %d, whose MULPDU is %d", got, mss, ulpduFor(mss, false))
}

// TestULPDUFollowsEMSSDirect: Writes posted one at a time to an idle QP
// go out on the poster's goroutine (direct sends, which txFill does not
// frame) while each is one FPDU, and the EMSS is followed there too:
// once 64 KiB has been written, the direct send reads the EMSS of 1460,
// and from then on a 4 KiB Write goes out in three FPDUs (by the send
// goroutine: a direct send is one FPDU).
func TestULPDUFollowsEMSSDirect(t *testing.T) {
	p := newEMSSPair(t, 0)
	var fake atomic.Int64
	fake.Store(1460)
	p.a.tx.emssFn = func(uintptr) { p.a.tx.emss = int(fake.Load()) } // before any post
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const size = 4096
	var before QPStats
	for i := range 40 {
		WaitTxParked(p.a) // idle: the next post is a direct send
		before = p.a.Stats()
		p.next++
		wr := SendWR{ID: p.next, Op: WRWrite, SGL: []SGE{p.smr.SGE(i*size, size)},
			Remote: Remote{STag: p.dmr.STag(), Offset: uint64(i * size)}, Signaled: true}
		if err := p.a.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		var wc [1]WC
		for p.cq.Poll(wc[:]) == 0 {
			if err := p.cq.Wait(ctx); err != nil {
				t.Fatalf("Write %d: %v", i, err)
			}
		}
		if wc[0].ID != p.next || wc[0].Status != WCSuccess {
			t.Fatalf("completion %+v, want request %d done", wc[0], p.next)
		}
	}
	st := p.a.Stats()
	if st.TxDirect == 0 {
		t.Fatalf("stats %+v: no direct send", st)
	}
	if st.TxULPDU != 1454 {
		t.Fatalf("after %d KiB of direct Writes TxULPDU is %d, want 1454", 40*size>>10, st.TxULPDU)
	}
	// Three FPDUs no longer fit a direct send (one FPDU): the send
	// goroutine wrote the last Write.
	if n := st.TxFPDUs - before.TxFPDUs; n != 3 {
		t.Fatalf("the last Write went in %d FPDUs, want 3", n)
	}
}
