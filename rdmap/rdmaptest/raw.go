package rdmaptest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// RawPeer is the far end of a QP built from the wire packages alone: it
// frames and reads FPDUs itself, so a test can send anything, including
// what no well-behaved peer sends.
type RawPeer struct {
	tb   testing.TB
	Conn net.Conn
	// CRC and Markers say how the peer frames what it sends and reads.
	Framer   mpa.Framer
	Deframer *mpa.Deframer
	// MSN is the next MSN the peer uses per untagged queue.
	MSN [4]uint32
}

// NewRawPeer connects qp to a raw peer and starts qp. With
// qpInitiator false (the usual case for hostile tests) the raw peer is
// the MPA initiator and the QP waits for its first FPDU.
func NewRawPeer(tb testing.TB, qp *rdmap.QP, o *Options, qpInitiator bool) *RawPeer {
	tb.Helper()
	if o == nil {
		o = &Options{}
	}
	cq, cr := ConnPair(tb, o.Pipe)
	tb.Cleanup(func() {
		qp.Close()
		cr.Close()
	})
	p := o.Params(qpInitiator)
	if err := qp.Start(cq, p); err != nil {
		cq.Close()
		tb.Fatal(err)
	}
	return NewRawPeerConn(tb, cr, p)
}

// NewRawPeerConn wraps conn, the far end of a QP started with params p,
// as a raw peer.
func NewRawPeerConn(tb testing.TB, conn net.Conn, p *mpa.Params) *RawPeer {
	return &RawPeer{
		tb:       tb,
		Conn:     conn,
		Framer:   mpa.Framer{CRC: p.CRC, Markers: p.MarkersRx},
		Deframer: mpa.NewDeframer(conn, mpa.DeframerConfig{CRC: p.CRC, Markers: p.MarkersTx}),
		MSN:      [4]uint32{1, 1, 1, 1},
	}
}

// SendULPDU frames ulpdu as one FPDU and writes it.
func (p *RawPeer) SendULPDU(ulpdu []byte) {
	p.tb.Helper()
	if err := p.Framer.WriteFPDU(p.Conn, ulpdu, nil); err != nil {
		p.tb.Fatalf("raw peer: write: %v", err)
	}
}

// SendRaw writes b to the connection as is.
func (p *RawPeer) SendRaw(b []byte) {
	p.tb.Helper()
	if _, err := p.Conn.Write(b); err != nil {
		p.tb.Fatalf("raw peer: write: %v", err)
	}
}

// Write sends one RDMA Write segment.
func (p *RawPeer) Write(stag rdmap.STag, to uint64, payload []byte, last bool) {
	h := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: to})
	p.SendULPDU(append(h, payload...))
}

// UntaggedHeader builds an untagged DDP header with RDMAP opcode op.
func UntaggedHeader(op wire.Opcode, qn, msn, mo uint32, last bool, inv rdmap.STag) []byte {
	return ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, op), RsvdULP32: uint32(inv), QN: qn, MSN: msn, MO: mo})
}

// Send sends a whole Send message in one segment with the next MSN.
func (p *RawPeer) Send(payload []byte) {
	h := UntaggedHeader(wire.OpSend, wire.QNSend, p.MSN[0], 0, true, 0)
	p.MSN[0]++
	p.SendULPDU(append(h, payload...))
}

// ReadRequest sends a Read Request with the next MSN.
func (p *RawPeer) ReadRequest(f *wire.ReadRequestFields) {
	h := UntaggedHeader(wire.OpReadRequest, wire.QNReadRequest, p.MSN[1], 0, true, 0)
	p.MSN[1]++
	p.SendULPDU(wire.AppendReadRequest(h, f))
}

// SendTerminate sends a Terminate.
func (p *RawPeer) SendTerminate(t *wire.Terminate) {
	h := UntaggedHeader(wire.OpTerminate, wire.QNTerminate, p.MSN[2], 0, true, 0)
	p.MSN[2]++
	p.SendULPDU(wire.AppendTerminate(h, t))
}

// NextFPDU reads the next FPDU (within d) and returns a copy of its
// ULPDU.
func (p *RawPeer) NextFPDU(d time.Duration) ([]byte, error) {
	_ = p.Conn.SetReadDeadline(time.Now().Add(d))
	f, err := p.Deframer.Next()
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), f.ULPDU...), nil
}

// Opcode returns the RDMAP opcode of a ULPDU.
func Opcode(ulpdu []byte) wire.Opcode {
	_, _, op := wire.Control(ulpdu[1])
	return op
}

// ExpectTerminate reads FPDUs until a Terminate arrives and returns it
// decoded, with the DDP header it came in. Other FPDUs are skipped.
func (p *RawPeer) ExpectTerminate(d time.Duration) (wire.Terminate, ddp.Header) {
	p.tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ul, err := p.NextFPDU(time.Until(deadline))
		if err != nil {
			p.tb.Fatalf("raw peer: no Terminate: %v", err)
		}
		if len(ul) < ddp.UntaggedHeaderLen || Opcode(ul) != wire.OpTerminate {
			continue
		}
		h, err := ddp.Parse(ul)
		if err != nil {
			p.tb.Fatalf("raw peer: Terminate DDP header: %v", err)
		}
		var t wire.Terminate
		if err := wire.ParseTerminate(ul[h.Len():], &t); err != nil {
			p.tb.Fatalf("raw peer: Terminate: %v", err)
		}
		t.DDPHeader = append([]byte(nil), t.DDPHeader...)
		t.RDMAHeader = append([]byte(nil), t.RDMAHeader...)
		return t, h
	}
}

// ExpectEOF reads (and drops) until the QP closes the connection.
func (p *RawPeer) ExpectEOF(d time.Duration) {
	p.tb.Helper()
	_ = p.Conn.SetReadDeadline(time.Now().Add(d))
	var buf [4096]byte
	for {
		_, err := p.Conn.Read(buf[:])
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return
		}
		p.tb.Fatalf("raw peer: waiting for the QP to close: %v", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// ExpectEOFNoData waits for the QP to close the connection and fails the
// test if anything but the end of the stream arrives first.
func (p *RawPeer) ExpectEOFNoData(d time.Duration) {
	p.tb.Helper()
	_ = p.Conn.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	n, err := p.Conn.Read(buf[:])
	if n > 0 {
		p.tb.Fatalf("raw peer: got %d bytes (% x) where only the end of the stream was expected", n, buf[:n])
	}
	if err == nil || !(errors.Is(err, io.EOF) || isReset(err)) {
		p.tb.Fatalf("raw peer: waiting for the end of the stream: %v", err)
	}
}

// CloseWrite half-closes the raw side (FIN).
func (p *RawPeer) CloseWrite() {
	if tc, ok := p.Conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// BE32 is a helper for building headers by hand.
func BE32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
