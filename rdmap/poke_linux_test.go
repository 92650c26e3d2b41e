package rdmap_test

import (
	"bytes"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestPokeDuringDirectPlacement: a read deadline poked into the past
// (what fences and PollRx kicks do) while the engine waits inside a
// placement straight from the socket is a retry, never a read: the
// Write's bytes land whole where they belong and the stream stays in
// step (the Send behind it completes; no Terminate). RawConn.Read returns
// the deadline error without calling its function, so a result left
// from the placement's earlier read must not count again.
func TestPokeDuringDirectPlacement(t *testing.T) {
	dev := newDevice(t)
	s := newSide(t, dev, rdmap.QPConfig{})
	const plen = 60000
	buf := make([]byte, plen)
	mr := s.reg(t, buf, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	rbuf := make([]byte, 64)
	rmr := s.reg(t, rbuf, rdmap.AccessLocalWrite)
	mustPost(t, s.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{rmr.SGE(0, 64)}}))
	p := rdmaptest.NewRawPeer(t, s.qp, nil, false)
	payload := bytes.Repeat([]byte{0x5a}, plen)
	hdr := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: mr.STag(), TO: 0})
	fpdu := p.Framer.AppendFPDU(nil, append(hdr, payload...), nil)
	cut := 2 + len(hdr) + 100
	writeAll(p, fpdu[:cut])
	waitFor(t, "direct placement", func() bool { return s.qp.Stats().RxPlacedDirect > 0 && rdmap.RxInQueue(s.qp) == 0 })
	// A piece read straight into the region, then pokes while the
	// engine waits for (or is about to wait for) the next one.
	mid := cut + 5000
	writeAll(p, fpdu[cut:mid])
	waitFor(t, "the piece read", func() bool { return rdmap.RxInQueue(s.qp) == 0 })
	for range 3 {
		rdmap.PokeRx(s.qp)
	}
	writeAll(p, fpdu[mid:])
	p.Send([]byte("behind the write"))
	expectWC(t, poll(t, s.cq), 1, rdmap.WCRecv, rdmap.WCSuccess)
	if !bytes.Equal(buf, payload) {
		i := 0
		for i < plen && buf[i] == payload[i] {
			i++
		}
		t.Fatalf("the Write's bytes differ from offset %d", i)
	}
	if got := string(rbuf[:16]); got != "behind the write" {
		t.Fatalf("the Send behind the Write delivered %q", got)
	}
	if st := s.qp.Stats(); st.TerminatesSent != 0 {
		t.Fatalf("a Terminate was sent (stats %+v)", st)
	}
}
