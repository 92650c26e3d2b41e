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

// TestRxRunFence is the memory fence for runs of small messages, which the
// receive engine takes from its buffer in one loop with their region
// entered once (rx.go: wholeRun): a raw peer streams 64-byte Writes (or
// Sends into receives in the region) in large TCP writes while the
// region is invalidated or deregistered; once that has returned no byte
// lands in the memory (a canary written then stays), and the QP ends
// with the Terminate for the first FPDU into it.
func TestRxRunFence(t *testing.T) {
	for _, kind := range []string{"write", "send"} {
		for _, trig := range []string{"invalidate", "deregister"} {
			for _, crc := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/crc=%v", kind, trig, crc), func(t *testing.T) {
					runRxRunFence(t, kind, trig, crc)
				})
			}
		}
	}
}

func runRxRunFence(t *testing.T, kind, trig string, crc bool) {
	const (
		size  = 64
		slots = 1024 // Writes land on size*slots bytes; receives posted
		batch = 128  // FPDUs per TCP write
	)
	dev := newDevice(t)
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(2 * slots)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxRecvWR: slots})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size*slots)
	mr, err := pd.RegisterMemory(buf, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	if kind == "send" {
		for i := range slots {
			mustPost(t, qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{mr.SGE(i*size, size)}}))
		}
	}
	p := rdmaptest.NewRawPeer(t, qp, &rdmaptest.Options{CRC: crc}, false)
	stag := mr.STag()
	payload := bytes.Repeat([]byte{fencePeer}, size)
	fpdu := func(b []byte, i int) []byte {
		var h []byte
		if kind == "write" {
			h = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: uint64(i%slots) * size})
		} else {
			h = rdmaptest.UntaggedHeader(wire.OpSend, wire.QNSend, uint32(i+1), 0, true, 0)
		}
		return p.Framer.AppendFPDU(b, append(h, payload...), nil)
	}
	// The peer: Writes until the connection fails; Sends for all but the
	// last few receives, then (once the fence returned) the rest, which
	// find the region invalid whenever the fence came.
	fenced := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		sent := 0
		for kind == "write" || sent < slots-batch/2 {
			var b []byte
			for range min(batch, slots-batch/2-sent) {
				b = fpdu(b, sent)
				sent++
			}
			if kind == "write" {
				for range batch {
					b = fpdu(b, sent)
					sent++
				}
			}
			if _, err := p.Conn.Write(b); err != nil {
				return
			}
		}
		<-fenced
		var b []byte
		for sent < slots {
			b = fpdu(b, sent)
			sent++
		}
		_, _ = p.Conn.Write(b)
	})
	waitFor(t, "FPDUs received", func() bool { return qp.Stats().RxFPDUs >= 3*batch })
	switch trig {
	case "invalidate":
		if err := mr.Invalidate(); err != nil {
			t.Fatal(err)
		}
	case "deregister":
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range buf {
		buf[i] = fenceCanary
	}
	close(fenced)
	term, _ := p.ExpectTerminate(20 * time.Second)
	wantType, wantCode := uint8(ddp.ErrTypeTagged), uint8(ddp.CodeInvalidSTag)
	if kind == "send" {
		wantType, wantCode = uint8(ddp.ErrTypeLocalCatastrophic), uint8(ddp.CodeLocalCatastrophic)
	}
	if term.Layer != wire.LayerDDP || term.EType != wantType || term.Code != wantCode {
		t.Errorf("Terminate %v, want DDP type %d code %#x", &term, wantType, wantCode)
	}
	p.ExpectEOF(20 * time.Second)
	p.Conn.Close()
	wg.Wait()
	rdmaptest.WaitDone(t, qp, 20*time.Second)
	for i, c := range buf {
		if c != fenceCanary {
			t.Fatalf("byte %d changed to %#x after the fence returned", i, c)
		}
	}
}
