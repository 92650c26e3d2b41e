package rdmap_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// directVictim returns a QP connected to a raw peer that has sent its
// first FPDU (so the QP's send engine may run), and a 64 KiB source
// region of random bytes.
func directVictim(t *testing.T, crc bool) (*side, *rdmaptest.RawPeer, *rdmap.MR, []byte) {
	t.Helper()
	v := newSide(t, newDevice(t), rdmap.QPConfig{})
	p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{CRC: crc}, false)
	p.Write(0x100, 0, nil, true)
	// Once the QP has received it, its send engine has passed its gate
	// (a direct send never runs before): WaitTxParked then waits for the
	// gated engine to park.
	waitFor(t, "the first FPDU received", func() bool { return v.qp.Stats().RxFPDUs >= 1 })
	buf := randBytes(rand.New(rand.NewPCG(7, 8)), 64<<10)
	return v, p, v.reg(t, buf, rdmap.AccessLocalWrite), buf
}

// expectFPDU reads the peer's next FPDU and checks its opcode, its
// placement field (MSN of an untagged FPDU, TO of a tagged one) and its
// payload.
func expectFPDU(t *testing.T, p *rdmaptest.RawPeer, op wire.Opcode, place uint64, payload []byte) {
	t.Helper()
	ul, err := p.NextFPDU(20 * time.Second)
	if err != nil {
		t.Fatalf("peer: %v", err)
	}
	h, err := ddp.Parse(ul)
	if err != nil {
		t.Fatalf("peer: %v", err)
	}
	got := uint64(h.MSN())
	if h.Tagged() {
		got = h.TO()
	}
	if rdmaptest.Opcode(ul) != op || got != place || !bytes.Equal(ul[h.Len():], payload) {
		t.Fatalf("peer got %v at %d with %d payload bytes, want %v at %d with %d (or other bytes)",
			rdmaptest.Opcode(ul), got, len(ul)-h.Len(), op, place, len(payload))
	}
}

// TestDirectSend: a small Send posted to a QP whose send goroutine is
// parked is written on the poster's goroutine (QPStats.TxDirect), and
// its completion is in the CQ when PostSend returns; the peer gets the
// messages whole, in order, with their MSNs.
func TestDirectSend(t *testing.T) {
	for _, crc := range []bool{false, true} {
		t.Run(fmt.Sprintf("crc=%v", crc), func(t *testing.T) {
			v, p, src, buf := directVictim(t, crc)
			const n = 50
			direct := 0
			var wc [1]rdmap.WC
			for i := range n {
				rdmap.WaitTxParked(v.qp)
				before := v.qp.Stats().TxDirect
				mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(i, 64)}, Signaled: true}))
				if v.qp.Stats().TxDirect == before+1 {
					direct++
					if v.cq.Poll(wc[:]) != 1 {
						t.Fatalf("send %d written directly, but its completion is not in the CQ", i)
					}
				} else {
					wc[0] = poll(t, v.cq)
				}
				expectWC(t, wc[0], uint64(i), rdmap.WCSend, rdmap.WCSuccess)
				expectFPDU(t, p, wire.OpSend, uint64(i+1), buf[i:i+64])
			}
			// Each send found the send goroutine parked with no doorbell
			// pending, so each is written on this goroutine.
			if direct != n {
				t.Fatalf("%d of %d sends written directly", direct, n)
			}
			if st := v.qp.Stats(); st.TxDirectRest != 0 {
				t.Fatalf("TxDirectRest %d with a reading peer", st.TxDirectRest)
			}
		})
	}
}

// TestDirectSendRest: once the socket's send buffer is full (the peer
// does not read), a direct send's non-blocking writev takes part of the
// batch or none; PostSend returns at once anyway, the send goroutine
// writes the rest before anything else, and the stream the peer reads is
// whole and in order: every Write at its offset with its bytes, then the
// Sends posted behind, and the completions come in SQ order.
func TestDirectSendRest(t *testing.T) {
	for _, crc := range []bool{false, true} {
		t.Run(fmt.Sprintf("crc=%v", crc), func(t *testing.T) {
			v, p, src, buf := directVictim(t, crc)
			const size = 8 << 10
			chunk := func(i int) (uint64, []byte) {
				off := (i * 1000) % (len(buf) - size)
				return uint64(off), buf[off : off+size]
			}
			var wc [1]rdmap.WC
			writes := 0
			for v.qp.Stats().TxDirectRest == 0 {
				if writes == 8000 { // 64 MiB unread: more than any loopback socket buffers
					t.Fatal("no direct send met a full socket")
				}
				rdmap.WaitTxParked(v.qp)
				off, _ := chunk(writes)
				o := int(off)
				before := v.qp.Stats()
				mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: uint64(writes), Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(o, size)},
					Remote: rdmap.Remote{STag: 0x1234, Offset: uint64(writes) * size}, Signaled: true}))
				writes++
				after := v.qp.Stats()
				switch {
				case after.TxDirectRest != before.TxDirectRest:
					// The rest is the send goroutine's.
				case after.TxDirect != before.TxDirect:
					if v.cq.Poll(wc[:]) != 1 {
						t.Fatalf("write %d written directly, but its completion is not in the CQ", writes-1)
					}
					expectWC(t, wc[0], uint64(writes-1), rdmap.WCWrite, rdmap.WCSuccess)
				default:
					expectWC(t, poll(t, v.cq), uint64(writes-1), rdmap.WCWrite, rdmap.WCSuccess)
				}
			}
			const sends = 3
			for i := range sends {
				mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: uint64(writes + i), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(i, 64)}, Signaled: true}))
			}
			for i := range writes {
				_, want := chunk(i)
				expectFPDU(t, p, wire.OpWrite, uint64(i)*size, want)
			}
			for i := range sends {
				expectFPDU(t, p, wire.OpSend, uint64(i+1), buf[i:i+64])
			}
			expectWC(t, poll(t, v.cq), uint64(writes-1), rdmap.WCWrite, rdmap.WCSuccess)
			for i := range sends {
				expectWC(t, poll(t, v.cq), uint64(writes+i), rdmap.WCSend, rdmap.WCSuccess)
			}
			t.Logf("%d writes, the last one's rest written by the send goroutine; stats %+v", writes, v.qp.Stats())
		})
	}
}

// TestDirectSendParkRace: a send goroutine that has marked the engine
// parked but not yet looked for a doorbell, when a direct send takes the
// engine meanwhile and a request posted during that direct send rings,
// must not swallow the doorbell: the direct send parks the engine
// looking for it, and the request would stay in the SQ, never written.
// The hook (SetTxParkHook) orders the three: the goroutine waits after
// marking the engine parked; the direct send, about to park it, posts
// the second request (which finds the engine held and rings) and then
// waits until the goroutine has looked.
func TestDirectSendParkRace(t *testing.T) {
	v := newSide(t, newDevice(t), rdmap.QPConfig{})
	var stage atomic.Int32
	parked, resume, looked := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var src *rdmap.MR
	var postErr error
	rdmap.SetTxParkHook(v.qp, func(at int) {
		switch {
		case at == rdmap.ParkStored && stage.CompareAndSwap(1, 2):
			close(parked)
			<-resume
		case at == rdmap.ParkDirect && stage.CompareAndSwap(2, 3):
			postErr = v.qp.PostSend(rdmap.SendWR{ID: 4, Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(3, 1)}, Signaled: true})
			close(resume)
			<-looked
		case at == rdmap.ParkLooked && stage.CompareAndSwap(3, 4):
			close(looked)
		}
	})
	p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{}, false)
	p.Write(0x100, 0, nil, true)
	waitFor(t, "the first FPDU received", func() bool { return v.qp.Stats().RxFPDUs >= 1 })
	buf := []byte{1, 2, 3, 4}
	src = v.reg(t, buf, rdmap.AccessLocalWrite)
	rdmap.WaitTxParked(v.qp)
	// A list of two goes to a send goroutine, which then parks (and
	// waits in the hook).
	stage.Store(1)
	if _, err := v.qp.PostSends([]rdmap.SendWR{
		{ID: 1, Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 1)}},
		{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(1, 1)}, Signaled: true},
	}); err != nil {
		t.Fatal(err)
	}
	<-parked
	// The engine is marked parked: this one is a direct send.
	before := v.qp.Stats().TxDirect
	mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(2, 1)}, Signaled: true}))
	if postErr != nil {
		t.Fatal(postErr)
	}
	if stage.Load() != 4 || v.qp.Stats().TxDirect != before+1 {
		t.Fatalf("stage %d, %d direct sends: the race was not staged", stage.Load(), v.qp.Stats().TxDirect-before)
	}
	for i := range 4 {
		expectFPDU(t, p, wire.OpSend, uint64(i+1), buf[i:i+1])
	}
	for _, id := range []uint64{2, 3, 4} {
		expectWC(t, poll(t, v.cq), id, rdmap.WCSend, rdmap.WCSuccess)
	}
}
