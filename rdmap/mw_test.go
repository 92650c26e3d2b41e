package rdmap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

const accMW = accAll | rdmap.AccessMWBind

// peerWriteAndSync has v's raw peer write pat at to through stag, then
// Send into the receive v posted (id): the receive's completion proves
// the Write was placed (a QP processes its stream in order).
func peerWriteAndSync(t *testing.T, v *rawVictim, rb *rdmap.MR, id uint64, stag rdmap.STag, to uint64, pat []byte) {
	t.Helper()
	mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: id, SGL: []rdmap.SGE{rb.SGE(0, 16)}}))
	v.p.Write(stag, to, pat, true)
	v.p.Send([]byte{1})
	expectWC(t, poll(t, v.cq), id, rdmap.WCRecv, rdmap.WCSuccess)
}

// TestMWType1Cycles binds a type 1 window over a moving part of a region
// 300 times, alternating zero-based and address-based offsets and
// unbinding by Unbind or by rebinding; a raw peer writes through each
// window, and another peer of the PD tries the previous window STag
// (the invalid-STag Terminate, no byte landed).
func TestMWType1Cycles(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	mem, err := dev.AllocMemory(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	buf := mem.Bytes()
	mr, err := pd.RegisterMemory(buf, accMW)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	mw, err := pd.AllocMW(rdmap.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	if mw.Valid() || mw.Type() != rdmap.MWType1 || mw.PD() != pd {
		t.Fatal("a new window is valid or misdescribed")
	}
	v := newRawVictim(t, pd)
	rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Deregister()

	const n = 2048
	prev := mw.STag()
	for i := range 300 {
		off := uint64(i*777) % uint64(len(buf)-n)
		zero := i%2 == 0
		stag, err := mw.Bind(mr, off, n, rdmap.AccessRemoteWrite, zero)
		if err != nil {
			t.Fatalf("round %d: Bind: %v", i, err)
		}
		if stag == prev || stag>>8 != prev>>8 || !mw.Valid() || mw.STag() != stag {
			t.Fatalf("round %d: bound STag %#x after %#x", i, stag, prev)
		}
		to := uint64(10)
		if !zero {
			to += off
		}
		pat := bytes.Repeat([]byte{byte(i%200) + 1}, 32)
		peerWriteAndSync(t, v, rb, uint64(i), stag, to, pat)
		if got := buf[off+10 : off+42]; !bytes.Equal(got, pat) {
			t.Fatalf("round %d: Write through the window landed wrong: % x", i, got[:8])
		}
		attackWrite(t, pd, prev, 0, ddp.CodeInvalidSTag)
		if i%3 == 0 {
			if err := mw.Unbind(); err != nil {
				t.Fatal(err)
			}
			if mw.Valid() {
				t.Fatal("window valid after Unbind")
			}
			attackWrite(t, pd, stag, to, ddp.CodeInvalidSTag)
		}
		noStale(t, buf)
		prev = stag
	}
	if v.qp.Err() != nil {
		t.Fatalf("the victim failed: %v", v.qp.Err())
	}
}

// TestMWType2Cycles runs 300 rounds of the type 2 life cycle against a
// raw peer: a bind work request and, without waiting for it, a Send
// advertising the window's STag; the peer writes through the window and
// invalidates it with a Send with Invalidate. Each round a peer of
// another QP of the PD tries the valid window (not associated with its
// QP), and one tries the previous key.
func TestMWType2Cycles(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	buf := make([]byte, 1<<16)
	mr, err := pd.RegisterMemory(buf, accMW)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	mw, err := pd.AllocMW(rdmap.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	v := newRawVictim(t, pd)
	rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Deregister()
	v.p.Write(0x100, 0, nil, true) // a first FPDU: the victim's send engine may run

	const n = 1024
	prev := mw.STag()
	for i := range 300 {
		key := uint8(i + 1)
		if key == uint8(prev) {
			key++
		}
		off := uint64(i*333) % uint64(len(buf)-n)
		mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{rb.SGE(0, 16)}}))
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRBindMW, Signaled: true,
			Mem: rdmap.MemOp{MW: mw, MR: mr, Offset: off, Length: n, Access: rdmap.AccessRemoteWrite, Key: key, ZeroBased: true}}))
		var adv [4]byte
		binary.BigEndian.PutUint32(adv[:], uint32(mw.STag()&^0xff|rdmap.STag(key)))
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, InlineData: adv[:], Signaled: true}))
		ul, err := v.p.NextFPDU(20 * time.Second)
		if err != nil || rdmaptest.Opcode(ul) != wire.OpSend || len(ul) != ddp.UntaggedHeaderLen+4 {
			t.Fatalf("round %d: no advertising Send (%v, % x)", i, err, ul)
		}
		stag := rdmap.STag(binary.BigEndian.Uint32(ul[ddp.UntaggedHeaderLen:]))
		pat := bytes.Repeat([]byte{byte(i%200) + 1}, 16)
		v.p.Write(stag, n-16, pat, true)
		expectWC(t, poll(t, v.cq), 1, rdmap.WCBindMW, rdmap.WCSuccess)
		expectWC(t, poll(t, v.cq), 2, rdmap.WCSend, rdmap.WCSuccess)
		// Another QP's peer, same PD: the window is not its stream's.
		attackWrite(t, pd, stag, 0, ddp.CodeSTagNotAssoc)
		attackWrite(t, pd, prev, 0, ddp.CodeInvalidSTag)

		v.p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, wire.QNSend, v.p.MSN[0], 0, true, stag), 7))
		v.p.MSN[0]++
		wc := poll(t, v.cq)
		expectWC(t, wc, uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
		if wc.Flags&rdmap.WCWithInv == 0 || wc.InvalidatedSTag != stag || mw.Valid() {
			t.Fatalf("round %d: receive %+v did not invalidate %#x", i, wc, stag)
		}
		if !mr.Valid() {
			t.Fatal("invalidating the window invalidated its region")
		}
		if got := buf[off+n-16 : off+n]; !bytes.Equal(got, pat) {
			t.Fatalf("round %d: the Write did not land: % x", i, got[:8])
		}
		noStale(t, buf)
		prev = stag
	}
	if v.qp.Err() != nil {
		t.Fatalf("the victim failed: %v", v.qp.Err())
	}
}

// TestMWRules checks the verbs rules of windows, synchronously where
// they can be and through a raw peer where the wire decides.
func TestMWRules(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	buf := make([]byte, 8192)
	mr, err := pd.RegisterMemory(buf, accMW)
	if err != nil {
		t.Fatal(err)
	}
	noBind, err := pd.RegisterMemory(buf, accAll)
	if err != nil {
		t.Fatal(err)
	}
	defer noBind.Deregister()
	readOnly, err := pd.RegisterMemory(buf, rdmap.AccessRemoteRead|rdmap.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	defer readOnly.Deregister()
	otherPD := dev.AllocPD()
	otherMR, err := otherPD.RegisterMemory(buf, accMW)
	if err != nil {
		t.Fatal(err)
	}
	defer otherMR.Deregister()
	w1, err := pd.AllocMW(rdmap.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := pd.AllocMW(rdmap.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Dealloc()
	if _, err := pd.AllocMW(3); err == nil {
		t.Fatal("AllocMW(3) succeeded")
	}

	t.Run("bind-checks", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			mr     *rdmap.MR
			off, n uint64
			acc    rdmap.Access
			want   error
		}{
			{"region-without-bind-right", noBind, 0, 64, rdmap.AccessRemoteWrite, rdmap.ErrAccess},
			{"rights-not-the-regions", readOnly, 0, 64, rdmap.AccessRemoteWrite, rdmap.ErrAccess},
			{"local-right", mr, 0, 64, rdmap.AccessLocalWrite, rdmap.ErrAccess},
			{"bind-right", mr, 0, 64, rdmap.AccessMWBind, rdmap.ErrAccess},
			{"past-the-region", mr, 8192 - 32, 64, rdmap.AccessRemoteWrite, rdmap.ErrInvalidSGE},
			{"offset-past-the-region", mr, 1 << 40, 64, rdmap.AccessRemoteWrite, rdmap.ErrInvalidSGE},
			{"other-pd", otherMR, 0, 64, rdmap.AccessRemoteWrite, rdmap.ErrWrongPD},
			{"zero-length", mr, 0, 0, rdmap.AccessRemoteWrite, rdmap.ErrInvalidWR},
		} {
			if _, err := w1.Bind(c.mr, c.off, c.n, c.acc, true); !errors.Is(err, c.want) {
				t.Errorf("%s: Bind = %v, want %v", c.name, err, c.want)
			}
			if w1.Valid() {
				t.Fatalf("%s: window valid after a refused bind", c.name)
			}
		}
		if _, err := w2.Bind(mr, 0, 64, rdmap.AccessRemoteWrite, true); !errors.Is(err, rdmap.ErrInvalidWR) {
			t.Errorf("Bind of a type 2 window: %v", err)
		}
	})

	t.Run("overlapping-windows", func(t *testing.T) {
		wa, err := pd.AllocMW(rdmap.MWType1)
		if err != nil {
			t.Fatal(err)
		}
		defer wa.Dealloc()
		sa, err := wa.Bind(mr, 0, 4096, rdmap.AccessRemoteWrite, false)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := w1.Bind(mr, 2048, 4096, rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead, false)
		if err != nil {
			t.Fatal(err)
		}
		v := newRawVictim(t, pd)
		rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Deregister()
		peerWriteAndSync(t, v, rb, 1, sa, 3000, []byte("through-a"))
		peerWriteAndSync(t, v, rb, 2, sb, 3000+16, []byte("through-b"))
		if string(buf[3000:3009]) != "through-a" || string(buf[3016:3025]) != "through-b" {
			t.Fatalf("overlapping windows: %q %q", buf[3000:3009], buf[3016:3025])
		}
		// Unbinding one leaves the other.
		if err := wa.Unbind(); err != nil {
			t.Fatal(err)
		}
		peerWriteAndSync(t, v, rb, 3, sb, 3032, []byte("still-b"))
		if string(buf[3032:3039]) != "still-b" {
			t.Fatalf("window b after a's unbind: %q", buf[3032:3039])
		}
		attackWrite(t, pd, sa, 3000, ddp.CodeInvalidSTag)
		// b's bounds are its own, not the region's.
		attackWrite(t, pd, sb, 2048+4096-8, ddp.CodeBaseBounds)
		// Address-based: a TO below the window is out of bounds too.
		attackWrite(t, pd, sb, 2000, ddp.CodeBaseBounds)
		if v.qp.Err() != nil {
			t.Fatal(v.qp.Err())
		}
	})

	t.Run("pd-association", func(t *testing.T) {
		s, err := w1.Bind(mr, 0, 64, rdmap.AccessRemoteWrite, true)
		if err != nil {
			t.Fatal(err)
		}
		attackWrite(t, otherPD, s, 0, ddp.CodeSTagNotAssoc)
	})

	t.Run("rights", func(t *testing.T) {
		s, err := w1.Bind(mr, 0, 64, rdmap.AccessRemoteRead, true)
		if err != nil {
			t.Fatal(err)
		}
		// A window without remote write refuses a Write even though its
		// region has it (siw's code for a missing right: invalid STag).
		attackWrite(t, pd, s, 0, ddp.CodeInvalidSTag)
	})

	t.Run("type1-not-invalidatable", func(t *testing.T) {
		s, err := w1.Bind(mr, 0, 64, rdmap.AccessRemoteWrite, true)
		if err != nil {
			t.Fatal(err)
		}
		v := newRawVictim(t, pd)
		rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Deregister()
		mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{rb.SGE(0, 16)}}))
		v.p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, wire.QNSend, 1, 0, true, s), 7))
		term, _ := v.p.ExpectTerminate(20 * time.Second)
		if term.Layer != wire.LayerRDMAP || term.EType != wire.ETypeRemoteProtection || term.Code != wire.CodeCannotInvalidate {
			t.Fatalf("Send with Invalidate of a type 1 window: Terminate %v", &term)
		}
		if !w1.Valid() || w1.STag() != s {
			t.Fatal("the peer invalidated a type 1 window")
		}
		// Nor a Local Invalidate.
		lv := newRawVictim(t, pd)
		lv.p.Write(0x100, 0, nil, true)
		mustPost(t, lv.qp.PostSend(rdmap.SendWR{ID: 9, Op: rdmap.WRLocalInv, InvalidateSTag: s, Signaled: true}))
		expectWC(t, poll(t, lv.cq), 9, rdmap.WCLocalInv, rdmap.WCLocQPOpErr)
		if !w1.Valid() {
			t.Fatal("a Local Invalidate invalidated a type 1 window")
		}
	})

	t.Run("region-deregistration", func(t *testing.T) {
		if _, err := w1.Bind(mr, 0, 64, rdmap.AccessRemoteWrite, true); err != nil {
			t.Fatal(err)
		}
		if err := mr.Deregister(); !errors.Is(err, rdmap.ErrBusy) {
			t.Fatalf("Deregister with a bound window: %v, want ErrBusy", err)
		}
		if !mr.Valid() || !w1.Valid() {
			t.Fatal("a refused Deregister changed the region or the window")
		}
		// Invalidating the region unbinds its windows.
		s := w1.STag()
		if err := mr.Invalidate(); err != nil {
			t.Fatal(err)
		}
		if w1.Valid() {
			t.Fatal("window valid after its region's invalidation")
		}
		attackWrite(t, pd, s, 0, ddp.CodeInvalidSTag)
		if _, err := w1.Bind(mr, 0, 64, rdmap.AccessRemoteWrite, true); !errors.Is(err, rdmap.ErrMRInvalid) {
			t.Fatalf("Bind over an invalid region: %v, want ErrMRInvalid", err)
		}
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		if _, err := w1.Bind(mr, 0, 64, rdmap.AccessRemoteWrite, true); !errors.Is(err, rdmap.ErrClosed) {
			t.Fatalf("Bind over a deregistered region: %v, want ErrClosed", err)
		}
		if err := w1.Dealloc(); err != nil {
			t.Fatal(err)
		}
		if _, err := w1.Bind(noBind, 0, 64, rdmap.AccessRemoteWrite, true); err == nil {
			t.Fatal("Bind of a deallocated window succeeded")
		}
	})
}

// TestMWType2Rules: the bind work request's refusals, and a Local
// Invalidate of a type 2 window.
func TestMWType2Rules(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	buf := make([]byte, 8192)
	mr, err := pd.RegisterMemory(buf, accMW)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	noBind, err := pd.RegisterMemory(buf, accAll)
	if err != nil {
		t.Fatal(err)
	}
	defer noBind.Deregister()
	w1, err := pd.AllocMW(rdmap.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Dealloc()
	other, err := dev.AllocPD().AllocMW(rdmap.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Dealloc()
	w2, err := pd.AllocMW(rdmap.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Dealloc()

	gone, err := pd.RegisterMemory(buf, accMW)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Deregister(); err != nil {
		t.Fatal(err)
	}
	s := newRawVictim(t, pd)
	for _, c := range []struct {
		name string
		op   rdmap.MemOp
		want error
	}{
		{"type1", rdmap.MemOp{MW: w1, MR: mr, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.ErrInvalidWR},
		{"no-window", rdmap.MemOp{MR: mr, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.ErrInvalidWR},
		{"other-pd", rdmap.MemOp{MW: other, MR: mr, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.ErrWrongPD},
		{"local-right", rdmap.MemOp{MW: w2, MR: mr, Length: 64, Access: rdmap.AccessLocalWrite, Key: 1}, rdmap.ErrAccess},
		{"zero-length", rdmap.MemOp{MW: w2, MR: mr, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.ErrInvalidWR},
	} {
		if err := s.qp.PostSend(rdmap.SendWR{Op: rdmap.WRBindMW, Mem: c.op}); !errors.Is(err, c.want) {
			t.Errorf("%s: PostSend = %v, want %v", c.name, err, c.want)
		}
	}

	// Execution-time refusals fail their QP: one QP each.
	for _, c := range []struct {
		name string
		op   rdmap.MemOp
		want rdmap.WCStatus
	}{
		{"region-without-bind-right", rdmap.MemOp{MW: w2, MR: noBind, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.WCLocProtErr},
		{"past-the-region", rdmap.MemOp{MW: w2, MR: mr, Offset: 8000, Length: 400, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.WCLocProtErr},
		{"deregistered-region", rdmap.MemOp{MW: w2, MR: gone, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 1}, rdmap.WCLocProtErr},
		{"first-key-unchanged", rdmap.MemOp{MW: w2, MR: mr, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 0}, rdmap.WCSuccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newRawVictim(t, pd)
			v.p.Write(0x100, 0, nil, true)
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRBindMW, Signaled: true, Mem: c.op}))
			expectWC(t, poll(t, v.cq), 1, rdmap.WCBindMW, c.want)
			if w2.Valid() != (c.want == rdmap.WCSuccess) {
				t.Fatalf("window valid %v", w2.Valid())
			}
			if c.want != rdmap.WCSuccess {
				return
			}
			// Bound: binding again is refused, and after a Local
			// Invalidate (from any QP of the PD) the same key is too.
			st := w2.STag()
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRLocalInv, InvalidateSTag: st, Signaled: true}))
			expectWC(t, poll(t, v.cq), 2, rdmap.WCLocalInv, rdmap.WCSuccess)
			if w2.Valid() {
				t.Fatal("type 2 window valid after a Local Invalidate")
			}
			attackWrite(t, pd, st, 0, ddp.CodeInvalidSTag)
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRBindMW, Signaled: true, Mem: c.op}))
			expectWC(t, poll(t, v.cq), 3, rdmap.WCBindMW, rdmap.WCLocQPOpErr)
		})
	}
	t.Run("bound-window", func(t *testing.T) {
		v := newRawVictim(t, pd)
		v.p.Write(0x100, 0, nil, true)
		op := rdmap.MemOp{MW: w2, MR: mr, Length: 64, Access: rdmap.AccessRemoteWrite, Key: 9}
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRBindMW, Signaled: true, Mem: op}))
		expectWC(t, poll(t, v.cq), 1, rdmap.WCBindMW, rdmap.WCSuccess)
		op.Key = 10
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRBindMW, Signaled: true, Mem: op}))
		expectWC(t, poll(t, v.cq), 2, rdmap.WCBindMW, rdmap.WCLocQPOpErr)
		if uint8(w2.STag()) != 9 || !w2.Valid() {
			t.Fatalf("refused bind changed the window: %#x", w2.STag())
		}
		// The peer of another QP cannot invalidate it.
		v2 := newRawVictim(t, pd)
		rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Deregister()
		mustPost(t, v2.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{rb.SGE(0, 16)}}))
		v2.p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, wire.QNSend, 1, 0, true, w2.STag()), 7))
		term, _ := v2.p.ExpectTerminate(20 * time.Second)
		if term.Layer != wire.LayerRDMAP || term.EType != wire.ETypeRemoteProtection || term.Code != wire.CodeCannotInvalidate {
			t.Fatalf("Send with Invalidate of another QP's window: Terminate %v", &term)
		}
		if !w2.Valid() {
			t.Fatal("another QP's peer invalidated a type 2 window")
		}
		if err := w2.Dealloc(); err != nil {
			t.Fatal(err)
		}
		if w2.Valid() {
			t.Fatal("window valid after Dealloc")
		}
	})
}
