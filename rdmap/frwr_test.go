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

const (
	staleByte = 0xee // what attackers write; never a legitimate pattern
	accRW     = rdmap.AccessLocalWrite | rdmap.AccessRemoteWrite
)

// rawVictim is a QP of pd facing a raw peer, with its own CQ.
type rawVictim struct {
	qp *rdmap.QP
	cq *rdmap.CQ
	p  *rdmaptest.RawPeer
}

func newRawVictim(t *testing.T, pd *rdmap.PD) *rawVictim {
	t.Helper()
	v := &rawVictim{}
	var err error
	if v.cq, err = pd.Device().CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if v.qp, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: v.cq, RecvCQ: v.cq}); err != nil {
		t.Fatal(err)
	}
	v.p = rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{Pipe: true}, false)
	return v
}

// attackWrite has a fresh QP of pd take a 16-byte RDMA Write of staleByte
// to stag at to from its raw peer, and checks the Terminate (DDP, tagged
// buffer, code) and that the QP ends.
func attackWrite(t *testing.T, pd *rdmap.PD, stag rdmap.STag, to uint64, code ddp.ErrorCode) {
	t.Helper()
	v := newRawVictim(t, pd)
	ul := tagged(stag, to, bytes.Repeat([]byte{staleByte}, 16), true)
	v.p.SendULPDU(ul)
	term, _ := v.p.ExpectTerminate(20 * time.Second)
	if term.Layer != wire.LayerDDP || term.EType != uint8(ddp.ErrTypeTagged) || term.Code != uint8(code) {
		t.Fatalf("Write to %#x: Terminate %v, want DDP tagged buffer code %#x", stag, &term, code)
	}
	if !term.D || !bytes.Equal(term.DDPHeader, ul[:ddp.TaggedHeaderLen]) {
		t.Fatalf("Terminate DDP header % x, want % x", term.DDPHeader, ul[:ddp.TaggedHeaderLen])
	}
	v.p.ExpectEOF(20 * time.Second)
	rdmaptest.WaitDone(t, v.qp, 20*time.Second)
	v.qp.Close()
	v.p.Conn.Close()
	v.cq.Close()
}

// noStale fails if an attacker's byte landed anywhere in b.
func noStale(t *testing.T, b []byte) {
	t.Helper()
	if i := bytes.IndexByte(b, staleByte); i >= 0 {
		t.Fatalf("an attacker's byte landed at %d", i)
	}
}

// TestFRWRCycles runs 1000 rounds of the FRWR life cycle against a raw
// peer: the victim posts a register work request and, without waiting
// for it, a Send advertising the new STag; the peer Writes through that
// STag and answers with a Send with Invalidate of it. Each round another
// peer of the same PD tries the previous round's key while the region is
// valid under the new one, and the current key after the invalidation:
// both get the invalid-STag Terminate and no byte lands.
func TestFRWRCycles(t *testing.T) {
	rounds := 1000
	if testing.Short() {
		rounds = 100
	}
	dev := newDevice(t)
	pd := dev.AllocPD()
	mem, err := dev.AllocMemory(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := mem.Close(); err != nil {
			t.Errorf("Memory.Close after Deregister: %v", err)
		}
	}()
	buf := mem.Bytes()
	mr, err := pd.AllocMR(2)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Valid() || mr.Len() != 0 {
		t.Fatalf("a new fast-register region is valid (%v) or mapped (%d bytes)", mr.Valid(), mr.Len())
	}
	first := mr.STag()
	// Never registered: its STag is refused.
	attackWrite(t, pd, first, 0, ddp.CodeInvalidSTag)

	v := newRawVictim(t, pd)
	rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Deregister()
	v.p.Write(0x100, 0, nil, true) // a first FPDU: the victim's send engine may run

	const n = 4096
	prev := first
	for i := range rounds {
		key := uint8(i + 1)
		if key == uint8(prev) {
			key++
		}
		off := (i * 1000) % (len(buf) - n)
		mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{rb.SGE(0, 16)}}))
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRRegMR, Signaled: true,
			Mem: rdmap.MemOp{MR: mr, Mem: buf[off : off+n], Access: accRW | rdmap.AccessRemoteRead, Key: key}}))
		var adv [4]byte
		binary.BigEndian.PutUint32(adv[:], uint32(mr.STag()&^0xff|rdmap.STag(key)))
		mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, InlineData: adv[:], Signaled: true}))

		// The peer learns the STag from the Send and writes through it.
		ul, err := v.p.NextFPDU(20 * time.Second)
		if err != nil || rdmaptest.Opcode(ul) != wire.OpSend || len(ul) != ddp.UntaggedHeaderLen+4 {
			t.Fatalf("round %d: no advertising Send (%v, % x)", i, err, ul)
		}
		stag := rdmap.STag(binary.BigEndian.Uint32(ul[ddp.UntaggedHeaderLen:]))
		pat := byte(i%200) + 1
		v.p.Write(stag, 100, bytes.Repeat([]byte{pat}, 64), true)

		expectWC(t, poll(t, v.cq), 1, rdmap.WCRegMR, rdmap.WCSuccess)
		expectWC(t, poll(t, v.cq), 2, rdmap.WCSend, rdmap.WCSuccess)
		if !mr.Valid() || mr.STag() != stag || !bytes.Equal(mr.Bytes(), buf[off:off+n]) || mr.Access() != accRW|rdmap.AccessRemoteRead {
			t.Fatalf("round %d: region %v %#x %v after its registration, want STag %#x", i, mr.Valid(), mr.STag(), mr.Access(), stag)
		}
		// The peer reads back what it wrote, through the same STag.
		v.p.ReadRequest(&wire.ReadRequestFields{SinkSTag: 0x7700, SinkTO: 0, Size: 64, SrcSTag: stag, SrcTO: 100})
		rr, err := v.p.NextFPDU(20 * time.Second)
		if err != nil || rdmaptest.Opcode(rr) != wire.OpReadResponse || !bytes.Equal(rr[ddp.TaggedHeaderLen:], bytes.Repeat([]byte{pat}, 64)) {
			t.Fatalf("round %d: Read Response (%v) % x", i, err, rr)
		}
		// The previous key, while the region is valid under this one.
		attackWrite(t, pd, prev, 0, ddp.CodeInvalidSTag)

		v.p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, wire.QNSend, v.p.MSN[0], 0, true, stag), 7))
		v.p.MSN[0]++
		wc := poll(t, v.cq)
		expectWC(t, wc, uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
		if wc.Flags&rdmap.WCWithInv == 0 || wc.InvalidatedSTag != stag || mr.Valid() {
			t.Fatalf("round %d: receive %+v did not invalidate %#x", i, wc, stag)
		}
		got := buf[off+100 : off+164]
		if !bytes.Equal(got, bytes.Repeat([]byte{pat}, 64)) {
			t.Fatalf("round %d: the Write did not land: % x", i, got[:8])
		}
		// The current key after the invalidation.
		attackWrite(t, pd, stag, 100, ddp.CodeInvalidSTag)
		noStale(t, buf)
		prev = stag
	}
	if err := mem.Close(); !errors.Is(err, rdmap.ErrBusy) {
		t.Fatalf("Memory.Close under a fast-register region: %v, want ErrBusy", err)
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if v.qp.Err() != nil {
		t.Fatalf("the victim failed: %v", v.qp.Err())
	}
}

// TestFRWRPostChecks: what PostSend refuses at once.
func TestFRWRPostChecks(t *testing.T) {
	dev := newDevice(t)
	s := newSide(t, dev, rdmap.QPConfig{})
	mem, err := dev.AllocMemory(4 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	mr, err := s.pd.AllocMR(2)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	if _, err := s.pd.AllocMR(0); err == nil {
		t.Fatal("AllocMR(0) succeeded")
	}
	other, err := dev.AllocPD().AllocMR(2)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Deregister()
	regular := s.reg(t, make([]byte, 64), accAll)
	b := mem.Bytes()
	goBuf := make([]byte, 8192)
	for _, c := range []struct {
		name string
		wr   rdmap.SendWR
		want error
	}{
		{"remote-write-without-local-write", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Mem: b[:4096], Access: rdmap.AccessRemoteWrite}}, rdmap.ErrAccess},
		{"remote-atomic-without-local-write", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Mem: b[:4096], Access: rdmap.AccessRemoteAtomic}}, rdmap.ErrAccess},
		{"unknown-right", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Mem: b[:4096], Access: 0x80}}, rdmap.ErrAccess},
		{"more-pages-than-allocated", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Mem: b[:3*4096], Access: accRW}}, rdmap.ErrInvalidSGE},
		{"unaligned-range-over-three-pages", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Mem: b[100 : 100+2*4096], Access: accRW}}, rdmap.ErrInvalidSGE},
		{"empty", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Access: accRW}}, rdmap.ErrInvalidSGE},
		{"not-fast-register", rdmap.SendWR{Mem: rdmap.MemOp{MR: regular, Mem: b[:4096], Access: accRW}}, rdmap.ErrInvalidWR},
		{"no-region", rdmap.SendWR{Mem: rdmap.MemOp{Mem: b[:4096], Access: accRW}}, rdmap.ErrInvalidWR},
		{"other-pd", rdmap.SendWR{Mem: rdmap.MemOp{MR: other, Mem: b[:4096], Access: accRW}}, rdmap.ErrWrongPD},
		{"with-sgl", rdmap.SendWR{SGL: []rdmap.SGE{regular.SGE(0, 8)}, Mem: rdmap.MemOp{MR: mr, Mem: b[:4096], Access: accRW}}, rdmap.ErrInvalidWR},
		{"ok-go-memory", rdmap.SendWR{Mem: rdmap.MemOp{MR: mr, Mem: goBuf[:4096], Access: accRW}}, nil},
	} {
		c.wr.Op = rdmap.WRRegMR
		if err := s.qp.PostSend(c.wr); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("%s: PostSend = %v, want %v", c.name, err, c.want)
		}
	}
}

// TestFRWRRefusedAtExecution: a register work request for a valid region
// or with the previous key completes with a local QP operation error (and
// fails the QP, as every work request error does); the region keeps its
// mapping.
func TestFRWRRefusedAtExecution(t *testing.T) {
	for _, c := range []string{"valid", "same-key", "deregistered"} {
		t.Run(c, func(t *testing.T) {
			a, b := pair(t, rdmap.QPConfig{}, &rdmaptest.Options{Pipe: true})
			_ = b
			mr, err := a.pd.AllocMR(1)
			if err != nil {
				t.Fatal(err)
			}
			defer mr.Deregister()
			buf := make([]byte, 4096)
			reg := func(id uint64, key uint8) {
				mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: id, Op: rdmap.WRRegMR, Signaled: true,
					Mem: rdmap.MemOp{MR: mr, Mem: buf[:1024], Access: accRW, Key: key}}))
			}
			reg(1, 5)
			expectWC(t, poll(t, a.cq), 1, rdmap.WCRegMR, rdmap.WCSuccess)
			want := rdmap.WCLocQPOpErr
			switch c {
			case "same-key":
				mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRLocalInv, InvalidateSTag: mr.STag(), Signaled: true}))
				expectWC(t, poll(t, a.cq), 2, rdmap.WCLocalInv, rdmap.WCSuccess)
			case "deregistered":
				mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRLocalInv, InvalidateSTag: mr.STag(), Signaled: true}))
				expectWC(t, poll(t, a.cq), 2, rdmap.WCLocalInv, rdmap.WCSuccess)
				if err := mr.Deregister(); err != nil {
					t.Fatal(err)
				}
				want = rdmap.WCLocProtErr
			}
			old := mr.STag()
			reg(3, 5)
			expectWC(t, poll(t, a.cq), 3, rdmap.WCRegMR, want)
			if mr.STag() != old || mr.Len() != 1024 {
				t.Fatalf("refused registration changed the region: %#x (was %#x), %d bytes", mr.STag(), old, mr.Len())
			}
			rdmaptest.WaitDone(t, a.qp, 20*time.Second)
		})
	}
}

// TestFRWRPinsMemory: a fast-register region keeps every AllocMemory
// region it was mapped over from closing until it is deregistered, even
// once re-registered elsewhere (a Read Response or Send of the old
// mapping may still be in flight).
func TestFRWRPinsMemory(t *testing.T) {
	a, _ := pair(t, rdmap.QPConfig{}, &rdmaptest.Options{Pipe: true})
	memA, err := a.dev.AllocMemory(8192)
	if err != nil {
		t.Fatal(err)
	}
	memB, err := a.dev.AllocMemory(8192)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := a.pd.AllocMR(2)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []*rdmap.Memory{memA, memB, memA} {
		if i > 0 {
			mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 10 + uint64(i), Op: rdmap.WRLocalInv, InvalidateSTag: mr.STag(), Signaled: true}))
			expectWC(t, poll(t, a.cq), 10+uint64(i), rdmap.WCLocalInv, rdmap.WCSuccess)
		}
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRRegMR, Signaled: true,
			Mem: rdmap.MemOp{MR: mr, Mem: m.Bytes()[:4096], Access: rdmap.AccessLocalWrite, Key: uint8(i + 1)}}))
		expectWC(t, poll(t, a.cq), uint64(i), rdmap.WCRegMR, rdmap.WCSuccess)
	}
	for _, m := range []*rdmap.Memory{memA, memB} {
		if err := m.Close(); !errors.Is(err, rdmap.ErrBusy) {
			t.Fatalf("Memory.Close under a fast-register region: %v, want ErrBusy", err)
		}
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*rdmap.Memory{memA, memB} {
		if err := m.Close(); err != nil {
			t.Fatalf("Memory.Close after Deregister: %v", err)
		}
	}
}
