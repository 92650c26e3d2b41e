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

// TestMWFence is TestMemoryFence for windows: a raw peer sends the start
// of a large Write through a window and stops; once the victim places it,
// the test unbinds the window (or invalidates its region) and fills the
// memory with a canary; the peer trickles the rest. When the unbinding
// call returns (or its work request completed), no byte lands: the
// segment is cut and the QP ends with the invalid-STag Terminate.
func TestMWFence(t *testing.T) {
	for _, path := range []string{"direct", "buffered", "pipe", "crc"} {
		for _, trig := range []string{"unbind", "rebind", "dealloc", "region-invalidate", "type2-local-invalidate", "type2-region-local-invalidate"} {
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
	p := rdmaptest.NewRawPeer(t, qp, &rdmaptest.Options{Pipe: path == "pipe", CRC: path == "crc"}, false)
	p.Write(0x100, 0, nil, true) // a first FPDU: the victim's send engine may run
	if typ == rdmap.MWType1 {
		if _, err := mw.Bind(mr, 4096, fencePlen, rdmap.AccessRemoteWrite, true); err != nil {
			t.Fatal(err)
		}
	} else {
		mustPost(t, qp.PostSend(rdmap.SendWR{ID: 7, Op: rdmap.WRBindMW, Signaled: true,
			Mem: rdmap.MemOp{MW: mw, MR: mr, Offset: 4096, Length: fencePlen, Access: rdmap.AccessRemoteWrite, Key: 3, ZeroBased: true}}))
		expectWC(t, poll(t, cq), 7, rdmap.WCBindMW, rdmap.WCSuccess)
	}
	stag := mw.STag()
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
	}
	if err != nil {
		t.Fatal(err)
	}
	if trig != "rebind" && mw.Valid() {
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
