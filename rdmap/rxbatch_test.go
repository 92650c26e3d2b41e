package rdmap_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestRecvBurstWakes: the receive completions of many Sends that arrive
// in one read of the socket (one write of the peer) are polled in the
// order of the Sends, with their payloads in place, and a waiter asleep
// in CQ.Wait is woken for every burst (the engine pushes them in batches
// with one wake-up each, the last batch before it reads again: a batch
// left behind, or a lost wake-up, leaves the waiter asleep until its
// deadline; a burst is not a multiple of the batch). The RQ is as deep
// as a burst and each receive polled is reposted at once: a receive
// leaves the RQ before its completion can be polled (no ErrQueueFull).
// With PollRx the waiter runs the engine itself and gives it back after
// a batch.
func TestRecvBurstWakes(t *testing.T) {
	for _, pollRx := range []bool{false, true} {
		t.Run(fmt.Sprintf("pollrx=%v", pollRx), func(t *testing.T) {
			if pollRx {
				pollIdleForever(t)
			}
			const rounds, burst, size = 16, 37, 8
			dev := newDevice(t)
			s := newSide(t, dev, rdmap.QPConfig{MaxRecvWR: burst, PollRx: pollRx})
			// Receive i lands in slot i mod 2*burst: reposted after
			// receive i-burst was checked, refilled after receive i
			// was.
			buf := s.reg(t, make([]byte, 2*burst*size), rdmap.AccessLocalWrite)
			post := func(i int) error {
				slot := i % (2 * burst)
				return s.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{buf.SGE(slot*size, size)}})
			}
			for i := range burst {
				mustPost(t, post(i))
			}
			p := rdmaptest.NewRawPeer(t, s.qp, nil, false)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			wcs := make([]rdmap.WC, burst)
			next := 0
			for r := range rounds {
				var fpdus []byte
				for i := range burst {
					h := rdmaptest.UntaggedHeader(wire.OpSend, wire.QNSend, p.MSN[0], 0, true, 0)
					p.MSN[0]++
					fpdus = p.Framer.AppendFPDU(fpdus, binary.BigEndian.AppendUint64(h, uint64(r*burst+i)), nil)
				}
				p.SendRaw(fpdus)
				for end := next + burst; next < end; {
					k := s.cq.Poll(wcs[:end-next])
					for _, wc := range wcs[:k] {
						if wc.ID != uint64(next) || wc.Status != rdmap.WCSuccess || wc.Op != rdmap.WCRecv || wc.ByteLen != size {
							t.Fatalf("round %d: completion %+v, want receive %d", r, wc, next)
						}
						if got := binary.BigEndian.Uint64(buf.Bytes()[next%(2*burst)*size:]); got != uint64(next) {
							t.Fatalf("receive %d holds Send %d", next, got)
						}
						if err := post(next + burst); err != nil {
							t.Fatalf("reposting after receive %d: %v", next, err)
						}
						next++
					}
					if k == 0 {
						if err := s.cq.Wait(ctx); err != nil {
							t.Fatalf("round %d: waiting for receive %d: %v", r, next, err)
						}
					}
				}
			}
			if err := s.qp.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriteSTagChanges: Writes to a region the previous Write messages
// named are checked against the region's state when they arrive, not
// when the first one did: after Deregister (or Invalidate) returns, a
// Write naming the old STag places nothing and gets the Terminate for an
// invalid STag; after a Rekey, Writes with the new STag land and Writes
// with the old one are refused.
func TestWriteSTagChanges(t *testing.T) {
	for _, change := range []string{"deregister", "invalidate", "rekey"} {
		t.Run(change, func(t *testing.T) {
			const n, size = 16, 8
			dev := newDevice(t)
			s := newSide(t, dev, rdmap.QPConfig{})
			mem := make([]byte, n*size)
			mr, err := s.pd.RegisterMemory(mem, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mr.Deregister() })
			recv := s.reg(t, make([]byte, 16), rdmap.AccessLocalWrite)
			for i := range 2 {
				mustPost(t, s.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{recv.SGE(0, 16)}}))
			}
			p := rdmaptest.NewRawPeer(t, s.qp, nil, false)
			// burst writes n Writes of v to stag and then a Send, whose
			// completion says the Writes before it are placed.
			burst := func(stag rdmap.STag, v byte) {
				var fpdus []byte
				for i := range n {
					fpdus = p.Framer.AppendFPDU(fpdus, tagged(stag, uint64(i*size), bytes.Repeat([]byte{v}, size), true), nil)
				}
				h := rdmaptest.UntaggedHeader(wire.OpSend, wire.QNSend, p.MSN[0], 0, true, 0)
				p.MSN[0]++
				p.SendRaw(p.Framer.AppendFPDU(fpdus, h, nil))
			}
			old := mr.STag()
			burst(old, 0x11)
			expectWC(t, poll(t, s.cq), 0, rdmap.WCRecv, rdmap.WCSuccess)
			if !bytes.Equal(mem, bytes.Repeat([]byte{0x11}, n*size)) {
				t.Fatalf("first burst: memory % x", mem)
			}
			switch change {
			case "deregister":
				err = mr.Deregister()
			case "invalidate":
				err = mr.Invalidate()
			case "rekey":
				if err = mr.Invalidate(); err == nil {
					_, err = mr.Rekey(uint8(old) + 1)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if change == "rekey" {
				burst(mr.STag(), 0x22)
				expectWC(t, poll(t, s.cq), 1, rdmap.WCRecv, rdmap.WCSuccess)
				if !bytes.Equal(mem, bytes.Repeat([]byte{0x22}, n*size)) {
					t.Fatalf("burst with the new STag: memory % x", mem)
				}
			}
			before := bytes.Clone(mem)
			p.SendULPDU(tagged(old, 0, bytes.Repeat([]byte{0x33}, size), true))
			term, _ := p.ExpectTerminate(10 * time.Second)
			if term.Layer != wire.LayerDDP || term.EType != uint8(ddp.ErrTypeTagged) || term.Code != uint8(ddp.CodeInvalidSTag) {
				t.Errorf("Terminate %v, want DDP tagged invalid STag", &term)
			}
			p.ExpectEOF(10 * time.Second)
			p.Conn.Close()
			rdmaptest.WaitDone(t, s.qp, 10*time.Second)
			if !bytes.Equal(mem, before) {
				t.Errorf("a Write with the old STag placed bytes: % x", mem)
			}
		})
	}
}
