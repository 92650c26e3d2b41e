package rdmap_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestMWFence is TestMemoryFence for windows and fast-register regions: a
// raw peer sends the start of a large Write through a window (or a
// fast-register region's STag) and stops; once the victim places it, the
// test unbinds the window (or invalidates its region) and fills the
// memory with a canary; the peer trickles the rest. When the unbinding
// call returns (or its work request or receive completed), no byte
// lands: the segment is cut and the QP ends with the invalid-STag
// Terminate.
func TestMWFence(t *testing.T) {
	for _, path := range []string{"direct", "buffered", "pipe", "crc"} {
		for _, trig := range []string{"unbind", "rebind", "dealloc", "region-invalidate", "type2-local-invalidate", "type2-region-local-invalidate",
			"fr-local-invalidate", "fr-send-invalidate"} {
			t.Run(fmt.Sprintf("%s/%s", path, trig), func(t *testing.T) { runMWFence(t, path, trig) })
		}
	}
}

func runMWFence(t *testing.T, path, trig string) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, BufferedRx: path == "buffered"})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, fencePlen+4096)
	mr, err := pd.RegisterMemory(buf, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	typ := rdmap.MWType1
	if trig == "type2-local-invalidate" || trig == "type2-region-local-invalidate" {
		typ = rdmap.MWType2
	}
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	fr, err := pd.AllocMR(fencePlen/4096 + 2)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Deregister()
	p := rdmaptest.NewRawPeer(t, qp, &rdmaptest.Options{Pipe: path == "pipe", CRC: path == "crc"}, false)
	p.Write(0x100, 0, nil, true) // a first FPDU: the victim's send engine may run
	isFR := trig == "fr-local-invalidate" || trig == "fr-send-invalidate"
	if isFR {
		mustPost(t, qp.PostSend(rdmap.SendWR{ID: 7, Op: rdmap.WRRegMR, Signaled: true,
			Mem: rdmap.MemOp{MR: fr, Mem: buf[4096 : 4096+fencePlen], Access: rdmap.AccessLocalWrite | rdmap.AccessRemoteWrite, Key: 0x21}}))
		expectWC(t, poll(t, cq), 7, rdmap.WCRegMR, rdmap.WCSuccess)
	} else if typ == rdmap.MWType1 {
		if _, err := mw.Bind(mr, 4096, fencePlen, rdmap.AccessRemoteWrite, true); err != nil {
			t.Fatal(err)
		}
	} else {
		mustPost(t, qp.PostSend(rdmap.SendWR{ID: 7, Op: rdmap.WRBindMW, Signaled: true,
			Mem: rdmap.MemOp{MW: mw, MR: mr, Offset: 4096, Length: fencePlen, Access: rdmap.AccessRemoteWrite, Key: 3, ZeroBased: true}}))
		expectWC(t, poll(t, cq), 7, rdmap.WCBindMW, rdmap.WCSuccess)
	}
	stag := mw.STag()
	if isFR {
		stag = fr.STag()
	}
	hdr := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: 0})
	fpdu := p.Framer.AppendFPDU(nil, append(hdr, bytes.Repeat([]byte{fencePeer}, fencePlen)...), nil)
	cut := 2 + len(hdr) + fenceFirst
	writeAll(p, fpdu[:cut])
	if path == "crc" {
		waitFor(t, "placement", func() bool { return qp.Stats().RxPlacedCopied >= fenceFirst })
	} else if path != "buffered" {
		waitFor(t, "direct placement", func() bool { return qp.Stats().RxPlacedDirect > 0 })
	}

	switch trig {
	case "unbind":
		err = mw.Unbind()
	case "rebind":
		// Valid again at once under a new key: the segment in flight
		// used the old STag and is still cut.
		_, err = mw.Bind(mr, 4096, fencePlen, rdmap.AccessRemoteWrite, true)
	case "dealloc":
		err = mw.Dealloc()
	case "region-invalidate":
		err = mr.Invalidate()
	case "type2-local-invalidate", "type2-region-local-invalidate":
		inv := stag
		if trig == "type2-region-local-invalidate" {
			inv = mr.STag()
		}
		mustPost(t, qp.PostSend(rdmap.SendWR{ID: 9, Op: rdmap.WRLocalInv, InvalidateSTag: inv, Signaled: true}))
		expectWC(t, poll(t, cq), 9, rdmap.WCLocalInv, rdmap.WCSuccess)
	case "fr-local-invalidate":
		mustPost(t, qp.PostSend(rdmap.SendWR{ID: 9, Op: rdmap.WRLocalInv, InvalidateSTag: stag, Signaled: true}))
		expectWC(t, poll(t, cq), 9, rdmap.WCLocalInv, rdmap.WCSuccess)
	case "fr-send-invalidate":
		// Another QP of the PD receives the Send with Invalidate.
		v2 := newRawVictim(t, pd)
		rb, err := pd.RegisterMemory(make([]byte, 16), rdmap.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Deregister()
		mustPost(t, v2.qp.PostRecv(rdmap.RecvWR{ID: 5, SGL: []rdmap.SGE{rb.SGE(0, 16)}}))
		v2.p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, wire.QNSend, 1, 0, true, stag), 1))
		wc := poll(t, v2.cq)
		expectWC(t, wc, 5, rdmap.WCRecv, rdmap.WCSuccess)
		if wc.Flags&rdmap.WCWithInv == 0 || wc.InvalidatedSTag != stag {
			t.Fatalf("receive %+v did not invalidate", wc)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if isFR && fr.Valid() {
		t.Fatal("fast-register region still valid")
	}
	if !isFR && trig != "rebind" && mw.Valid() {
		t.Fatal("window still valid")
	}
	for i := range buf {
		buf[i] = fenceCanary
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for b := fpdu[cut:]; len(b) > 0; {
			n := min(len(b), 1500)
			if _, err := p.Conn.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
		ul := append(ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: 0}), bytes.Repeat([]byte{fencePeer}, 4096)...)
		_, _ = p.Conn.Write(p.Framer.AppendFPDU(nil, ul, nil))
	})
	term, _ := p.ExpectTerminate(20 * time.Second)
	if term.Layer != wire.LayerDDP || term.EType != uint8(ddp.ErrTypeTagged) || term.Code != uint8(ddp.CodeInvalidSTag) {
		t.Errorf("Terminate %v, want DDP tagged buffer invalid STag", &term)
	}
	if !term.D || !bytes.Equal(term.DDPHeader, hdr) {
		t.Errorf("Terminate DDP header % x, want % x", term.DDPHeader, hdr)
	}
	p.ExpectEOF(20 * time.Second)
	p.Conn.Close()
	wg.Wait()
	rdmaptest.WaitDone(t, qp, 20*time.Second)
	for i, c := range buf {
		if c != fenceCanary {
			t.Fatalf("byte %d changed to %#x after the window's fence returned", i, c)
		}
	}
}
