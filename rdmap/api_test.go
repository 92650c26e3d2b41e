package rdmap_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

func TestSTagsAndMRs(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	buf := make([]byte, 100)
	if _, err := pd.RegisterMemory(buf, rdmap.AccessRemoteWrite); err != rdmap.ErrAccess {
		t.Fatalf("remote write without local write: %v", err)
	}
	if _, err := pd.RegisterMemory(buf, rdmap.AccessRemoteAtomic); err != rdmap.ErrAccess {
		t.Fatalf("remote atomic without local write: %v", err)
	}
	if _, err := pd.RegisterMemory(nil, 0); err == nil {
		t.Fatal("empty registration accepted")
	}
	m1, err := pd.RegisterMemory(buf, rdmap.AccessLocalWrite|rdmap.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := pd.RegisterMemory(buf[10:20], 0)
	// STag = 24-bit index << 8 | 8-bit key; key 0 at registration, indices
	// handed out cyclically from a random start (never index 0).
	if m1.STag()&0xff != 0 || m1.STag()>>8 == 0 {
		t.Fatalf("STag %#x", m1.STag())
	}
	if i1, i2 := m1.STag()>>8, m2.STag()>>8; i2 != i1+1 && !(i1 == 1<<24-1 && i2 == 1) {
		t.Fatalf("indices %#x then %#x", i1, i2)
	}
	if m2.Len() != 10 || m1.PD() != pd || m1.Access() != rdmap.AccessLocalWrite|rdmap.AccessRemoteRead {
		t.Fatal("MR attributes")
	}
	if got := m1.Access().String(); got != "local_write|remote_read" {
		t.Fatalf("Access.String() = %q", got)
	}
	if _, err := m1.Rekey(9); err != rdmap.ErrMRValid {
		t.Fatalf("Rekey of a valid MR: %v", err)
	}
	m1.Invalidate()
	m1.Invalidate() // invalidating an invalid STag is fine
	s, err := m1.Rekey(9)
	if err != nil || s != m1.STag() || s&0xff != 9 || !m1.Valid() {
		t.Fatalf("Rekey: %#x %v", s, err)
	}
	if err := m1.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := m1.Deregister(); err != rdmap.ErrClosed {
		t.Fatalf("second Deregister: %v", err)
	}
	if m1.Valid() {
		t.Fatal("deregistered MR valid")
	}
	if _, err := m1.Rekey(1); err != rdmap.ErrClosed {
		t.Fatalf("Rekey after Deregister: %v", err)
	}
	m2.Deregister()
	if s := dev.Stats(); s.MRs != 0 {
		t.Fatalf("%d MRs left", s.MRs)
	}
}

func TestAllocMemory(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	mem, err := dev.AllocMemory(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := mem.Bytes()
	if len(b) != 1<<20 || mem.Len() != 1<<20 {
		t.Fatalf("len %d", len(b))
	}
	for _, c := range b {
		if c != 0 {
			t.Fatal("memory not zeroed")
		}
	}
	mr, err := pd.RegisterMemory(b[4096:8192], rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// A slice straddling the mapping's end is refused.
	other := make([]byte, 16)
	if _, err := pd.RegisterMemory(other, 0); err != nil {
		t.Fatal(err)
	}
	// Close with a region still registered is refused: the mapping stays
	// usable until the region goes.
	if err := mem.Close(); err != rdmap.ErrBusy {
		t.Fatalf("Close with a registered region: %v, want ErrBusy", err)
	}
	mr.Bytes()[0] = 1 // still mapped
	mr.Deregister()
	if err := mem.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mem.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCQWaitDeadline: Wait on an empty CQ returns the context's error
// at its deadline (in the bubble's clock: no real time passes).
func TestCQWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cq, err := newDevice(t).CreateCQ(8)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := cq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on an empty CQ: %v", err)
		}
		if el := time.Since(start); el != 10*time.Millisecond {
			t.Fatalf("Wait returned after %v, want the 10ms deadline", el)
		}
	})
}

func TestCQ(t *testing.T) {
	dev := newDevice(t)
	if _, err := dev.CreateCQ(0); err == nil {
		t.Fatal("CQ of 0 accepted")
	}
	if _, err := dev.CreateCQ(rdmap.MaxCQE + 1); !errors.Is(err, rdmap.ErrConfig) || !strings.Contains(err.Error(), "CreateCQ") {
		t.Fatalf("CQ beyond MaxCQE: %v", err)
	}
	cq, _ := dev.CreateCQ(8)
	var wc [4]rdmap.WC
	if cq.Poll(wc[:]) != 0 || cq.Len() != 0 || cq.Cap() != 8 {
		t.Fatal("empty CQ")
	}
	pd := dev.AllocPD()
	qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err := cq.Close(); err != rdmap.ErrBusy {
		t.Fatalf("Close of a CQ in use: %v", err)
	}
	mr, _ := pd.RegisterMemory(make([]byte, 8), rdmap.AccessLocalWrite)
	defer mr.Deregister()
	mustPost(t, qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{mr.SGE(0, 8)}}))
	mustPost(t, qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{mr.SGE(0, 8)}}))
	// Closing a QP that never connected flushes what was posted.
	qp.Close()
	qp.Close()
	<-qp.Done()
	if n := cq.Poll(wc[:]); n != 2 || wc[0].Status != rdmap.WCWRFlushErr || wc[1].Status != rdmap.WCWRFlushErr {
		t.Fatalf("flushed %d: %+v", n, wc[:n])
	}
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Wait(context.Background()); err != rdmap.ErrClosed {
		t.Fatalf("Wait on a closed CQ: %v", err)
	}
}

func TestPostValidation(t *testing.T) {
	dev := newDevice(t)
	s := newSide(t, dev, rdmap.QPConfig{MaxSendWR: 2, MaxSendSGE: 2, MaxInline: 16})
	mr := s.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
	for _, c := range []struct {
		wr  rdmap.SendWR
		err error
	}{
		{rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{mr.SGE(0, 1), mr.SGE(1, 1), mr.SGE(2, 1)}}, rdmap.ErrTooManySGE},
		{rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{{Length: 4}}}, rdmap.ErrInvalidSGE},
		{rdmap.SendWR{Op: rdmap.WRSend, InlineData: make([]byte, 17)}, rdmap.ErrInvalidWR},
		{rdmap.SendWR{Op: rdmap.WRRead, InlineData: make([]byte, 4)}, rdmap.ErrInvalidWR},
		{rdmap.SendWR{Op: rdmap.WRRead, SGL: []rdmap.SGE{mr.SGE(0, 1), mr.SGE(1, 1)}}, rdmap.ErrTooManySGE},
		{rdmap.SendWR{Op: rdmap.WRFetchAdd, SGL: []rdmap.SGE{mr.SGE(0, 8)}}, rdmap.ErrNotSupported},
		{rdmap.SendWR{Op: rdmap.WRImmData}, rdmap.ErrNotSupported},
		{rdmap.SendWR{Op: rdmap.WRWriteImm}, rdmap.ErrNotSupported},
		{rdmap.SendWR{Op: 99}, rdmap.ErrInvalidWR},
		{rdmap.SendWR{Op: rdmap.WRSend}, nil},
		{rdmap.SendWR{Op: rdmap.WRSend}, nil},
		{rdmap.SendWR{Op: rdmap.WRSend}, rdmap.ErrQueueFull},
	} {
		if err := s.qp.PostSend(c.wr); err != c.err {
			t.Errorf("PostSend(%v): %v, want %v", c.wr.Op, err, c.err)
		}
	}
	// With RFC 7306 the atomics want exactly one 8-byte SGE.
	s2 := newSide(t, dev, rdmap.QPConfig{RFC7306: true})
	if err := s2.qp.PostSend(rdmap.SendWR{Op: rdmap.WRCmpSwap, SGL: []rdmap.SGE{mr.SGE(0, 4)}}); err != rdmap.ErrInvalidSGE {
		t.Errorf("4-byte atomic sink: %v", err)
	}
	if _, err := s.pd.CreateQP(&rdmap.QPConfig{}); !errors.Is(err, rdmap.ErrConfig) {
		t.Errorf("QP without CQs: %v", err)
	}
	if _, err := s.pd.CreateQP(&rdmap.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendSGE: rdmap.MaxSGE + 1}); !errors.Is(err, rdmap.ErrConfig) {
		t.Errorf("too many SGEs: %v", err)
	}
	a, b := rdmaptest.ConnPair(t, false)
	defer b.Close()
	if err := s.qp.Start(a, (&rdmaptest.Options{}).Params(true)); err != nil {
		t.Fatal(err)
	}
	if err := s.qp.Start(a, (&rdmaptest.Options{}).Params(true)); err != rdmap.ErrQPState {
		t.Errorf("second Start: %v", err)
	}
}

func TestMsgPool(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, nil)
	sp, err := a.pd.NewMsgPool(256, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	rp, err := b.pd.NewMsgPool(256, 4, rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	var held []rdmap.Msg
	for range 4 {
		m, ok := rp.TryGet()
		if !ok {
			t.Fatal("pool empty early")
		}
		held = append(held, m)
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: uint64(len(held) - 1), SGL: []rdmap.SGE{m.SGE(256)}}))
	}
	if _, ok := rp.TryGet(); ok {
		t.Fatal("a fifth buffer from a pool of four")
	}
	for i := range 4 {
		m, err := sp.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := copy(m.Buf, []byte{byte(i), 'x', 'y'})
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{m.SGE(n)}, Signaled: true}))
		poll(t, a.cq)
		sp.Put(m)
	}
	for range 4 {
		wc := poll(t, b.cq)
		m := held[wc.ID]
		if wc.ByteLen != 3 || m.Buf[0] != byte(wc.ID) {
			t.Fatalf("%+v % x", wc, m.Buf[:3])
		}
		rp.Put(m)
	}
}

func TestQPStats(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, &rdmaptest.Options{CRC: true})
	buf := b.reg(t, make([]byte, 32), rdmap.AccessLocalWrite)
	msg := a.reg(t, []byte("counted"), 0)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{buf.SGE(0, 32)}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{msg.SGE(0, 7)}, Signaled: true}))
	poll(t, a.cq) // the sender counts before it completes
	poll(t, b.cq) // the receiver counts before it completes
	sa, sb := a.qp.Stats(), b.qp.Stats()
	if sa.TxFPDUs == 0 || sa.TxBytes == 0 || sa.TxWritevs == 0 || sb.RxFPDUs == 0 || sb.RxBytes != sa.TxBytes {
		t.Fatalf("stats a %+v b %+v", sa, sb)
	}
	if p := a.qp.Params(); !p.Initiator || !p.CRC {
		t.Fatalf("params %+v", p)
	}
}
