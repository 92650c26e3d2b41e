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

// The memory fences: once MR.Deregister, MR.Invalidate, a completed Local
// Invalidate, a received Send with Invalidate, QP.Close or Device.Close
// has returned (or completed), no byte of the FPDU in flight reaches the
// memory, on every receive path. A raw peer sends the start of a large
// message and stops; the test waits until the victim is placing it
// (straight from the socket on the direct paths), triggers the fence,
// fills the memory with a canary, lets the peer trickle the rest, and
// checks the canary and the Terminate on the wire.

const (
	fencePlen   = 60000
	fenceFirst  = 100 // payload bytes sent before the fence
	fenceCanary = 0xc3
	fencePeer   = 0x11
)

type fenceSetup struct {
	dev    *rdmap.Device
	pd     *rdmap.PD
	cq     *rdmap.CQ
	qp     *rdmap.QP
	mr     *rdmap.MR
	mem    *rdmap.Memory
	buf    []byte
	p      *rdmaptest.RawPeer
	offend []byte // the DDP header of the message being placed
	rest   []byte // the rest of its FPDU, to trickle after the fence
}

// newFence builds the victim for kind ("write", "send", "srq",
// "readresp") and sends the start of the message.
func newFence(t *testing.T, kind, path string, alloc bool) *fenceSetup {
	t.Helper()
	f := &fenceSetup{dev: newDevice(t)}
	f.pd = f.dev.AllocPD()
	var err error
	if f.cq, err = f.dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	cfg := rdmap.QPConfig{SendCQ: f.cq, RecvCQ: f.cq, BufferedRx: path == "buffered"}
	if kind == "srq" {
		srq, err := f.pd.CreateSRQ(nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.SRQ = srq
	}
	if f.qp, err = f.pd.CreateQP(&cfg); err != nil {
		t.Fatal(err)
	}
	f.buf = make([]byte, fencePlen)
	if alloc {
		if f.mem, err = f.dev.AllocMemory(fencePlen); err != nil {
			t.Fatal(err)
		}
		f.buf = f.mem.Bytes()
		t.Cleanup(func() { f.mem.Close() })
	}
	acc := rdmap.AccessLocalWrite
	if kind == "write" {
		acc |= rdmap.AccessRemoteWrite
	}
	if f.mr, err = f.pd.RegisterMemory(f.buf, acc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.mr.Deregister() })
	switch kind {
	case "send":
		mustPost(t, f.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{f.mr.SGE(0, fencePlen)}}))
	case "srq":
		mustPost(t, cfg.SRQ.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{f.mr.SGE(0, fencePlen/2), f.mr.SGE(fencePlen/2, fencePlen/2)}}))
	case "readresp":
		mustPost(t, f.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRRead, SGL: []rdmap.SGE{f.mr.SGE(0, fencePlen)}, Remote: rdmap.Remote{STag: 0x4400, Offset: 0}, Signaled: true}))
	}
	f.p = rdmaptest.NewRawPeer(t, f.qp, &rdmaptest.Options{Pipe: path == "pipe", CRC: path == "crc"}, false)
	if kind != "readresp" {
		f.p.Write(0x100, 0, nil, true) // a first FPDU: the victim's send engine may run
	}
	var hdr []byte
	switch kind {
	case "write":
		hdr = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: f.mr.STag(), TO: 0})
	case "send", "srq":
		hdr = rdmaptest.UntaggedHeader(wire.OpSend, wire.QNSend, 1, 0, true, 0)
	case "readresp":
		f.p.Write(0x100, 0, nil, true) // a first FPDU: the victim may send its Read Request
		ul, err := f.p.NextFPDU(10 * time.Second)
		if err != nil || rdmaptest.Opcode(ul) != wire.OpReadRequest {
			t.Fatalf("no Read Request: %v", err)
		}
		rr := wire.ReadRequest(ul[ddp.UntaggedHeaderLen:])
		hdr = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpReadResponse), STag: rr.SinkSTag(), TO: rr.SinkTO()})
	}
	f.offend = hdr
	fpdu := f.p.Framer.AppendFPDU(nil, append(hdr, bytes.Repeat([]byte{fencePeer}, fencePlen)...), nil)
	cut := 2 + len(hdr) + fenceFirst
	writeAll(f.p, fpdu[:cut])
	f.rest = fpdu[cut:]
	switch path {
	case "direct", "pipe":
		// Wait until the engine reads the payload straight into memory.
		waitFor(t, "direct placement", func() bool { return f.qp.Stats().RxPlacedDirect > 0 })
	case "crc":
		// With CRC the payload is checked in the buffer, then copied
		// in: wait until the first bytes were placed.
		waitFor(t, "placement", func() bool { return f.qp.Stats().RxPlacedCopied >= fenceFirst })
	}
	return f
}

// writeAll writes b ignoring errors (the victim may have closed).
func writeAll(p *rdmaptest.RawPeer, b []byte) { _, _ = p.Conn.Write(b) }

// waitFor polls cond (an event the test cannot be told about otherwise)
// for up to 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// trickle sends the rest of the FPDU in small pieces, then more garbage
// FPDUs aimed at the memory, in the background.
func (f *fenceSetup) trickle() *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for b := f.rest; len(b) > 0; {
			n := min(len(b), 1500)
			if _, err := f.p.Conn.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
		// And a second Write to the same STag.
		ul := append(ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: f.mr.STag(), TO: 0}), bytes.Repeat([]byte{fencePeer}, 4096)...)
		_, _ = f.p.Conn.Write(f.p.Framer.AppendFPDU(nil, ul, nil))
	})
	return &wg
}

func TestMemoryFence(t *testing.T) {
	for _, path := range []string{"direct", "buffered", "pipe", "crc"} {
		for _, kind := range []string{"write", "send", "srq", "readresp"} {
			for _, trig := range []string{"deregister", "invalidate", "invalidate-rekey", "local-invalidate", "send-invalidate", "qp-close", "device-close", "deregister-free"} {
				if trig == "local-invalidate" && kind == "readresp" {
					continue // its completion waits for the Read's, in SQ order
				}
				if trig == "invalidate-rekey" && kind != "write" {
					// Local buffers carry no key: valid again, a receive
					// or Read sink may take what arrives after Rekey.
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", path, kind, trig), func(t *testing.T) {
					runFence(t, path, kind, trig)
				})
			}
		}
	}
}

func runFence(t *testing.T, path, kind, trig string) {
	f := newFence(t, kind, path, trig == "deregister-free")
	switch trig {
	case "deregister", "deregister-free":
		if err := f.mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		if trig == "deregister-free" {
			// Released at once: nothing may fault.
			if err := f.mem.Close(); err != nil {
				t.Fatal(err)
			}
		}
	case "invalidate":
		if err := f.mr.Invalidate(); err != nil {
			t.Fatal(err)
		}
	case "invalidate-rekey":
		// Valid again at once, under a new key: the segment in flight
		// used the old STag and is still cut.
		if err := f.mr.Invalidate(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.mr.Rekey(uint8(f.mr.STag()) + 1); err != nil {
			t.Fatal(err)
		}
	case "local-invalidate":
		mustPost(t, f.qp.PostSend(rdmap.SendWR{ID: 9, Op: rdmap.WRLocalInv, InvalidateSTag: f.mr.STag(), Signaled: true}))
		expectWC(t, poll(t, f.cq), 9, rdmap.WCLocalInv, rdmap.WCSuccess)
	case "send-invalidate":
		// Another QP of the same PD receives the Send with Invalidate.
		cq2, err := f.dev.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		qp2, err := f.pd.CreateQP(&rdmap.QPConfig{SendCQ: cq2, RecvCQ: cq2})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := f.pd.RegisterMemory(make([]byte, 64), rdmap.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Deregister()
		mustPost(t, qp2.PostRecv(rdmap.RecvWR{ID: 5, SGL: []rdmap.SGE{rb.SGE(0, 64)}}))
		p2 := rdmaptest.NewRawPeer(t, qp2, nil, false)
		p2.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, wire.QNSend, 1, 0, true, f.mr.STag()), 1, 2, 3))
		wc := poll(t, cq2)
		expectWC(t, wc, 5, rdmap.WCRecv, rdmap.WCSuccess)
		if wc.Flags&rdmap.WCWithInv == 0 || wc.InvalidatedSTag != f.mr.STag() {
			t.Fatalf("receive %+v did not invalidate", wc)
		}
	case "qp-close":
		f.qp.Close()
	case "device-close":
		f.dev.Close()
	}
	if trig != "deregister-free" {
		for i := range f.buf {
			f.buf[i] = fenceCanary
		}
	}
	wg := f.trickle()
	switch trig {
	case "qp-close", "device-close":
		f.p.ExpectEOF(20 * time.Second)
	default:
		term, _ := f.p.ExpectTerminate(20 * time.Second)
		wantType, wantCode := uint8(ddp.ErrTypeTagged), uint8(ddp.CodeInvalidSTag)
		if kind == "send" || kind == "srq" {
			wantType, wantCode = uint8(ddp.ErrTypeLocalCatastrophic), uint8(ddp.CodeLocalCatastrophic)
		}
		if term.Layer != wire.LayerDDP || term.EType != wantType || term.Code != wantCode {
			t.Errorf("Terminate %v, want DDP type %d code %#x", &term, wantType, wantCode)
		}
		if !term.D || !bytes.Equal(term.DDPHeader, f.offend) {
			t.Errorf("Terminate DDP header % x, want % x", term.DDPHeader, f.offend)
		}
		f.p.ExpectEOF(20 * time.Second)
	}
	f.p.Conn.Close()
	wg.Wait()
	rdmaptest.WaitDone(t, f.qp, 20*time.Second)
	if trig != "deregister-free" {
		for i, c := range f.buf {
			if c != fenceCanary {
				t.Fatalf("byte %d changed to %#x after the fence returned", i, c)
			}
		}
	}
	// The work request the message was for did not succeed.
	wcs := make([]rdmap.WC, 16)
	n := f.cq.Poll(wcs)
	for _, wc := range wcs[:n] {
		if wc.ID == 1 && wc.Status == rdmap.WCSuccess {
			t.Fatalf("WR 1 completed successfully: %+v", wc)
		}
	}
}
