package rdmap_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

var sizes = []int{0, 1, 63, 64, 4095, 4096, 65535, 65536, 1 << 20}

// connVariants are the framings every operation is tried over.
var connVariants = []struct {
	name string
	cfg  rdmap.QPConfig
	o    rdmaptest.Options
}{
	{"plain", rdmap.QPConfig{}, rdmaptest.Options{}},
	{"crc", rdmap.QPConfig{}, rdmaptest.Options{CRC: true}},
	{"markers-crc", rdmap.QPConfig{}, rdmaptest.Options{CRC: true, MarkersAB: true, MarkersBA: true}},
	{"markers-one-way", rdmap.QPConfig{}, rdmaptest.Options{MarkersAB: true}},
	{"buffered-rx", rdmap.QPConfig{BufferedRx: true}, rdmaptest.Options{CRC: true}},
	{"large-fpdu", rdmap.QPConfig{MaxULPDU: 65535}, rdmaptest.Options{CRC: true}},
	{"small-fpdu-pipe", rdmap.QPConfig{}, rdmaptest.Options{Pipe: true, CRC: true}},
	{"crc-in-place", rdmap.QPConfig{CRCInPlace: true}, rdmaptest.Options{CRC: true}},
	{"crc-in-place-pipe", rdmap.QPConfig{CRCInPlace: true}, rdmaptest.Options{Pipe: true, CRC: true}},
	{"pollrx", rdmap.QPConfig{PollRx: true}, rdmaptest.Options{}},
	{"pollrx-crc", rdmap.QPConfig{PollRx: true}, rdmaptest.Options{CRC: true}},
	{"pollrx-pipe", rdmap.QPConfig{PollRx: true}, rdmaptest.Options{Pipe: true}},
	{"polltx", rdmap.QPConfig{PollTx: true}, rdmaptest.Options{}},
	{"polltx-markers-crc", rdmap.QPConfig{PollTx: true}, rdmaptest.Options{CRC: true, MarkersAB: true, MarkersBA: true}},
	{"polltx-pollrx", rdmap.QPConfig{PollTx: true, PollRx: true}, rdmaptest.Options{}},
}

// split cuts n bytes of mr at off into k SGEs of uneven sizes.
func split(mr *rdmap.MR, off, n, k int) []rdmap.SGE {
	var sgl []rdmap.SGE
	for i := range k {
		m := n / k
		if i == k-1 {
			m = n - (k-1)*(n/k)
		}
		sgl = append(sgl, mr.SGE(off, m))
		off += m
	}
	return sgl
}

// TestOps runs every operation at every size over every framing, with
// random data verified on the far side.
func TestOps(t *testing.T) {
	for _, v := range connVariants {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.RFC7306 = true
			o := v.o
			a, b := pair(t, cfg, &o)
			r := rand.New(rand.NewPCG(1, 2))
			for _, n := range sizes {
				if v.o.Pipe && n > 65536 {
					continue
				}
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					testSends(t, r, a, b, n)
					testWriteRead(t, r, a, b, n)
					testWriteImm(t, r, a, b, n)
				})
			}
			testAtomics(t, a, b)
			testInvalidate(t, a, b)
		})
	}
}

func testSends(t *testing.T, r *rand.Rand, a, b *side, n int) {
	src := randBytes(r, n+8)
	dst := make([]byte, n+16)
	smr := a.reg(t, src, 0)
	dmr := b.reg(t, dst, rdmap.AccessLocalWrite)
	for _, c := range []struct {
		op  rdmap.WROpcode
		se  bool
		inv bool
	}{{rdmap.WRSend, false, false}, {rdmap.WRSend, true, false}, {rdmap.WRSendInv, false, true}, {rdmap.WRSendInv, true, true}} {
		clear(dst)
		// The receive buffer: two SGEs (the first may be empty).
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 100, SGL: []rdmap.SGE{dmr.SGE(3, n/3), dmr.SGE(3+n/3, n-n/3+5)}}))
		wr := rdmap.SendWR{ID: 1, Op: c.op, SGL: split(smr, 4, n, 3), Signaled: true, Solicited: c.se}
		var victim *rdmap.MR
		if c.inv {
			victim = b.reg(t, make([]byte, 16), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
			wr.InvalidateSTag = victim.STag()
		}
		mustPost(t, a.qp.PostSend(wr))
		expectWC(t, poll(t, a.cq), 1, rdmap.WCSend, rdmap.WCSuccess)
		wc := poll(t, b.cq)
		expectWC(t, wc, 100, rdmap.WCRecv, rdmap.WCSuccess)
		if int(wc.ByteLen) != n || !bytes.Equal(dst[3:3+n], src[4:4+n]) {
			t.Fatalf("%v: received %d bytes, data equal %v", c.op, wc.ByteLen, bytes.Equal(dst[3:3+n], src[4:4+n]))
		}
		if got := wc.Flags&rdmap.WCSolicited != 0; got != c.se {
			t.Fatalf("%v: solicited flag %v", c.op, got)
		}
		if c.inv {
			if wc.Flags&rdmap.WCWithInv == 0 || wc.InvalidatedSTag != victim.STag() || victim.Valid() {
				t.Fatalf("send with invalidate: flags %v stag %#x valid %v", wc.Flags, wc.InvalidatedSTag, victim.Valid())
			}
		}
	}
	// Inline data.
	if n <= 64 {
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 101, SGL: []rdmap.SGE{dmr.SGE(0, n)}}))
		inl := append([]byte(nil), src[:n]...)
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, InlineData: inl, Signaled: true}))
		clear(inl) // the data was copied at post time
		expectWC(t, poll(t, a.cq), 2, rdmap.WCSend, rdmap.WCSuccess)
		wc := poll(t, b.cq)
		expectWC(t, wc, 101, rdmap.WCRecv, rdmap.WCSuccess)
		if !bytes.Equal(dst[:n], src[:n]) {
			t.Fatal("inline send: data differs")
		}
	}
}

func testWriteRead(t *testing.T, r *rand.Rand, a, b *side, n int) {
	src := randBytes(r, n+8)
	remote := make([]byte, n+32)
	back := make([]byte, n+8)
	smr := a.reg(t, src, 0)
	bmr := a.reg(t, back, rdmap.AccessLocalWrite)
	rmr := b.reg(t, remote, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
	// Write with an SGL to TO 16, unsignaled; then Read it back (one SGE,
	// at an offset): the Read's completion also covers the Write.
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: split(smr, 2, n, 4), Remote: rdmap.Remote{STag: rmr.STag(), Offset: 16}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRRead, SGL: []rdmap.SGE{bmr.SGE(5, n)}, Remote: rdmap.Remote{STag: rmr.STag(), Offset: 16}, Signaled: true}))
	wc := poll(t, a.cq)
	expectWC(t, wc, 2, rdmap.WCRead, rdmap.WCSuccess)
	if int(wc.ByteLen) != n || !bytes.Equal(back[5:5+n], src[2:2+n]) {
		t.Fatalf("read back %d bytes, equal %v", wc.ByteLen, bytes.Equal(back[5:5+n], src[2:2+n]))
	}
	// The other direction: b reads from a.
	amr := a.reg(t, randBytes(r, n+1), rdmap.AccessLocalWrite|rdmap.AccessRemoteRead)
	bdst := make([]byte, n+1)
	bdmr := b.reg(t, bdst, rdmap.AccessLocalWrite)
	mustPost(t, b.qp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRRead, SGL: []rdmap.SGE{bdmr.SGE(0, n)}, Remote: rdmap.Remote{STag: amr.STag()}, Signaled: true}))
	expectWC(t, poll(t, b.cq), 3, rdmap.WCRead, rdmap.WCSuccess)
	if !bytes.Equal(bdst[:n], amr.Bytes()[:n]) {
		t.Fatal("reverse read differs")
	}
}

func testWriteImm(t *testing.T, r *rand.Rand, a, b *side, n int) {
	src := randBytes(r, n+1)
	remote := make([]byte, n+1)
	smr := a.reg(t, src, 0)
	rmr := b.reg(t, remote, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 200}))
	imm := r.Uint64()
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 4, Op: rdmap.WRWriteImm, SGL: []rdmap.SGE{smr.SGE(0, n)}, Remote: rdmap.Remote{STag: rmr.STag()}, Imm: imm, Signaled: true, Solicited: true}))
	expectWC(t, poll(t, a.cq), 4, rdmap.WCWrite, rdmap.WCSuccess)
	wc := poll(t, b.cq)
	expectWC(t, wc, 200, rdmap.WCRecvImm, rdmap.WCSuccess)
	if wc.Imm != imm || wc.Flags&rdmap.WCWithImm == 0 || wc.Flags&rdmap.WCSolicited == 0 {
		t.Fatalf("write with immediate: %+v", wc)
	}
	if !bytes.Equal(remote[:n], src[:n]) {
		t.Fatal("write with immediate: data differs")
	}
}

func testAtomics(t *testing.T, a, b *side) {
	target := make([]byte, 64)
	binary.LittleEndian.PutUint64(target[8:], 1000)
	tmr := b.reg(t, target, rdmap.AccessLocalWrite|rdmap.AccessRemoteAtomic)
	res := make([]byte, 8)
	resMR := a.reg(t, res, rdmap.AccessLocalWrite)
	rem := rdmap.Remote{STag: tmr.STag(), Offset: 8}
	atomic := func(wr rdmap.SendWR) uint64 {
		t.Helper()
		wr.SGL = []rdmap.SGE{resMR.SGE(0, 8)}
		wr.Remote = rem
		wr.Signaled = true
		mustPost(t, a.qp.PostSend(wr))
		wc := poll(t, a.cq)
		if wc.Status != rdmap.WCSuccess || wc.ByteLen != 8 {
			t.Fatalf("atomic %v: %+v", wr.Op, wc)
		}
		return binary.LittleEndian.Uint64(res)
	}
	if old := atomic(rdmap.SendWR{ID: 1, Op: rdmap.WRFetchAdd, CompareAdd: 5}); old != 1000 {
		t.Fatalf("fetch-add returned %d", old)
	}
	if old := atomic(rdmap.SendWR{ID: 2, Op: rdmap.WRCmpSwap, CompareAdd: 999, Swap: 7}); old != 1005 {
		t.Fatalf("failing cmp-swap returned %d", old)
	}
	if old := atomic(rdmap.SendWR{ID: 3, Op: rdmap.WRCmpSwap, CompareAdd: 1005, Swap: 7}); old != 1005 {
		t.Fatalf("cmp-swap returned %d", old)
	}
	// Masked fetch-add: two 32-bit fields, no carry between them. (Memory
	// the peer accesses is written before it is registered: registration
	// orders it before the peer's engine, for the race detector too.)
	target2 := make([]byte, 8)
	binary.LittleEndian.PutUint64(target2, 0x00000001_ffffffff)
	tmr2 := b.reg(t, target2, rdmap.AccessLocalWrite|rdmap.AccessRemoteAtomic|rdmap.AccessRemoteRead)
	rem = rdmap.Remote{STag: tmr2.STag()}
	if old := atomic(rdmap.SendWR{ID: 4, Op: rdmap.WRFetchAdd, CompareAdd: 0x00000001_00000001, AddMask: 0x80000000_80000000}); old != 0x00000001_ffffffff {
		t.Fatalf("masked fetch-add returned %#x", old)
	}
	// A read of the target through the same QP orders after the atomics.
	chk := make([]byte, 8)
	cmr := a.reg(t, chk, rdmap.AccessLocalWrite)
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 5, Op: rdmap.WRRead, SGL: []rdmap.SGE{cmr.SGE(0, 8)}, Remote: rdmap.Remote{STag: tmr2.STag()}, Signaled: true}))
	expectWC(t, poll(t, a.cq), 5, rdmap.WCRead, rdmap.WCSuccess)
	if v := binary.LittleEndian.Uint64(chk); v != 0x00000002_00000000 {
		t.Fatalf("masked fetch-add left %#x", v)
	}
	// Immediate Data on its own.
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 300}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 6, Op: rdmap.WRImmData, Imm: 0xfeedface, Signaled: true}))
	expectWC(t, poll(t, a.cq), 6, rdmap.WCImmData, rdmap.WCSuccess)
	wc := poll(t, b.cq)
	expectWC(t, wc, 300, rdmap.WCRecvImm, rdmap.WCSuccess)
	if wc.Imm != 0xfeedface || wc.Flags&rdmap.WCSolicited != 0 {
		t.Fatalf("immediate data: %+v", wc)
	}
}

func testInvalidate(t *testing.T, a, b *side) {
	// Local Invalidate in SQ order, then re-key and use the new STag.
	buf := make([]byte, 32)
	mr := a.reg(t, buf, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	old := mr.STag()
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 9, Op: rdmap.WRLocalInv, InvalidateSTag: old, Signaled: true}))
	expectWC(t, poll(t, a.cq), 9, rdmap.WCLocalInv, rdmap.WCSuccess)
	if mr.Valid() {
		t.Fatal("MR valid after Local Invalidate")
	}
	if _, err := mr.Rekey(uint8(old) + 1); err != nil {
		t.Fatal(err)
	}
	if mr.STag() == old || !mr.Valid() || mr.STag()>>8 != old>>8 {
		t.Fatalf("rekeyed STag %#x from %#x", mr.STag(), old)
	}
	if _, err := mr.Rekey(3); err != rdmap.ErrMRValid {
		t.Fatalf("Rekey of a valid MR: %v", err)
	}
	// The peer writes through the new STag.
	src := []byte("rekeyed")
	smr := b.reg(t, src, 0)
	mustPost(t, b.qp.PostSend(rdmap.SendWR{ID: 10, Op: rdmap.WRWrite, SGL: []rdmap.SGE{smr.SGE(0, len(src))}, Remote: rdmap.Remote{STag: mr.STag()}, Signaled: true}))
	expectWC(t, poll(t, b.cq), 10, rdmap.WCWrite, rdmap.WCSuccess)
	// A Read by b of the same memory proves the write landed (a reads
	// nothing; b reads a's MR, which needs remote read).
	chkMR := a.reg(t, buf, rdmap.AccessRemoteRead)
	dst := make([]byte, len(src))
	dmr := b.reg(t, dst, rdmap.AccessLocalWrite)
	mustPost(t, b.qp.PostSend(rdmap.SendWR{ID: 11, Op: rdmap.WRRead, SGL: []rdmap.SGE{dmr.SGE(0, len(dst))}, Remote: rdmap.Remote{STag: chkMR.STag()}, Signaled: true}))
	expectWC(t, poll(t, b.cq), 11, rdmap.WCRead, rdmap.WCSuccess)
	if !bytes.Equal(dst, src) {
		t.Fatalf("write through rekeyed STag: %q", dst)
	}
}
