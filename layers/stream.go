package layers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/gosiw/gosiw/mpa"
)

// Dir is the direction of a frame within an iWARP connection.
type Dir uint8

// Directions.
const (
	DirNone Dir = iota // a note about the whole connection
	DirI2R             // initiator to responder
	DirR2I             // responder to initiator
)

func (d Dir) String() string {
	switch d {
	case DirI2R:
		return "i2r"
	case DirR2I:
		return "r2i"
	}
	return ""
}

// Kind says what a Record holds.
type Kind uint8

// Record kinds.
const (
	// KindMPARequest and KindMPAReply: a handshake frame (Record.Startup).
	KindMPARequest Kind = iota + 1
	KindMPAReply
	// KindFPDU: an FPDU (Record.MPA, DDP and RDMAP layers).
	KindFPDU
	// KindNoHandshake: a TCP connection whose MPA Request is not at the
	// start of either direction in the capture. None of it is decoded:
	// CRC, markers and even the FPDU boundaries are unknown without the
	// handshake, and nothing is guessed.
	KindNoHandshake
	// KindRejected: the Reply had R set; the connection carries no FPDUs.
	KindRejected
	// KindNote: anything else about a connection or direction: octets
	// left undecoded at the end of the capture, a gap in the TCP stream,
	// data after a rejection or after a malformed handshake frame.
	KindNote
)

var kindNames = [...]string{
	KindMPARequest:  "mpa_request",
	KindMPAReply:    "mpa_reply",
	KindFPDU:        "fpdu",
	KindNoHandshake: "no_handshake",
	KindRejected:    "rejected",
	KindNote:        "note",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("unknown(%d)", uint8(k))
}

// Conn names an iWARP connection by its TCP endpoints, the MPA initiator
// first. For a connection without a handshake in the capture the TCP
// client comes first: the sender of the SYN, or else of the first segment
// seen.
type Conn struct {
	Initiator, Responder netip.AddrPort
}

// String returns "ip:port-ip:port", the initiator first.
func (c Conn) String() string { return c.Initiator.String() + "-" + c.Responder.String() }

// Record is one thing the StreamDecoder saw: a handshake frame, an FPDU,
// or a note about a connection. A Record and everything it points to
// belong to the decoder and are valid only until the emit function
// returns; copy what must outlive it.
type Record struct {
	Conn Conn
	// Dir and Index place a frame: Index counts the frames of one
	// direction of one connection from 0 (the Request or Reply is 0).
	// Notes have Index -1, and DirNone when they are about the whole
	// connection.
	Dir   Dir
	Index int
	Kind  Kind
	// Packet is the number (from 1, as Wireshark counts) of the capture
	// packet that completed the frame, or that led to the note (for notes
	// about what a connection left undecoded, the packet that ended it);
	// 0 for notes made at the end of the capture.
	Packet int
	// Wire holds the frame's octets as they were on the wire (markers
	// included); for a malformed handshake frame, what the capture has of
	// it.
	Wire []byte

	// Startup is set for handshake frames.
	Startup *MPAStartup
	// MPA, DDP and one of the RDMAP headers are set for FPDUs as far as
	// they decode.
	MPA            *MPA
	DDP            *DDP
	ReadRequest    *RDMAPReadRequest
	Terminate      *RDMAPTerminate
	AtomicRequest  *RDMAPAtomicRequest
	AtomicResponse *RDMAPAtomicResponse
	// Payload is what follows the last decoded header: the ULP data.
	Payload []byte

	// Err is set when the frame is malformed; the layers above show how
	// far it decoded. A malformed FPDU does not stop its direction (the
	// framing holds); a malformed handshake frame stops the connection.
	Err error
	// Note says what a note (KindNoHandshake, KindRejected, KindNote) is
	// about.
	Note string
}

// StreamDecoder follows iWARP connections through the TCP segments of a
// capture and emits every MPA handshake frame and FPDU in order, with the
// layers of this package decoded:
//
//	capture packet ─► Ethernet/SLL/IP/TCP (gopacket DecodingLayerParser)
//	  ─► tcpHalf: per-direction reassembly (out of order, retransmissions,
//	     overlap) ─► octets in stream order
//	  ─► MPA Request, then Reply (MPAStartup; learn revision, CRC, markers)
//	  ─► mpa.Deframer (the one framing implementation) ─► FPDU boundaries,
//	     CRC verdict ─► MPA, DDP, RDMAP layers ─► emit(*Record)
//
// An FPDU is emitted when the packet that completes it is processed, so
// FPDUs split across segments and several FPDUs in one segment come out
// whole and in stream order. The connection's initiator is the side whose
// stream begins with "MPA ID Req Frame"; if neither does, the connection
// gets one KindNoHandshake record and nothing else.
//
// A StreamDecoder starts no goroutines and must be used from one
// goroutine.
type StreamDecoder struct {
	emit  func(*Record)
	conns map[connKey]*conn
	order []*conn
	pkt   int // number of the packet being processed

	rec Record
	// Layers reused for every record.
	startup MPAStartup
	mpa     MPA
	ddp     DDP
	rr      RDMAPReadRequest
	term    RDMAPTerminate
	areq    RDMAPAtomicRequest
	aresp   RDMAPAtomicResponse

	parsers map[gopacket.LayerType]*packetParser
}

// NewStreamDecoder returns a decoder that passes each record to emit.
func NewStreamDecoder(emit func(*Record)) *StreamDecoder {
	return &StreamDecoder{emit: emit, conns: make(map[connKey]*conn)}
}

type connKey struct{ a, b netip.AddrPort }

func makeKey(x, y netip.AddrPort) connKey {
	if x.Compare(y) > 0 {
		x, y = y, x
	}
	return connKey{x, y}
}

type connPhase uint8

const (
	phaseDetect    connPhase = iota // looking for the Request key
	phaseHandshake                  // Request and Reply being read
	phaseFull                       // FPDUs (RFC 5044 "full operation")
	phaseRejected                   // the Reply had R set
	phaseFailed                     // a handshake frame was malformed
	phaseNone                       // no handshake: the connection is not decoded
	phaseDone                       // finished; later segments are ignored
)

type halfState uint8

const (
	hsIdle      halfState = iota
	hsRequest             // expects the MPA Request
	hsReply               // expects the MPA Reply
	hsWaitReply           // initiator's side: FPDUs follow once the Reply is known
	hsFPDU                // FPDUs through the deframer
	hsStopped             // framing lost; nothing more is decoded
)

// conn is one TCP connection. Side i is the endpoint ep[i]; h[i] carries
// the octets ep[i] sends. Side 0 is the sender of the first segment seen.
type conn struct {
	ep     [2]netip.AddrPort
	h      [2]half
	client int // side that sent the SYN, or -1
	init   int // MPA initiator side, or -1
	phase  connPhase
	id     Conn
	// Negotiated: flags of the Request and Reply.
	reqCRC, reqMarkers bool
}

// half is one direction of a conn.
type half struct {
	tcp tcpHalf
	dir Dir
	// buf holds the octets delivered and not yet consumed; buf[0] is at
	// stream offset bufOff. consumed is the offset after the last whole
	// frame; readOff how far the deframer has read.
	buf      []byte
	bufOff   uint64
	consumed uint64
	readOff  uint64

	state   halfState
	notInit bool // its stream does not begin with the Request key
	discard bool // nothing more is decoded: count octets, keep none
	df      *mpa.Deframer
	framing MPAFraming
	origin  uint64 // stream offset of the first FPDU octet (marker origin)
	frames  int    // index of the next frame
	lastPkt int    // number of the last capture packet of this direction
}

// Read hands the deframer the octets after readOff. It returns io.EOF when
// it has none; the deframer keeps a partial FPDU and resumes.
func (h *half) Read(p []byte) (int, error) {
	avail := h.buf[h.readOff-h.bufOff:]
	if len(avail) == 0 {
		return 0, io.EOF
	}
	n := copy(p, avail)
	h.readOff += uint64(n)
	return n, nil
}

// avail returns the delivered octets not yet consumed.
func (h *half) avail() []byte { return h.buf[h.consumed-h.bufOff:] }

// compact drops consumed octets from buf.
func (h *half) compact() {
	if k := h.consumed - h.bufOff; k > 0 {
		h.buf = append(h.buf[:0], h.buf[k:]...)
		h.bufOff = h.consumed
	}
}

// Segment processes one TCP segment from src to dst as the next capture
// packet. truncated says that the capture holds only part of its payload
// (snap length): the payload is then treated as missing.
func (d *StreamDecoder) Segment(src, dst netip.AddrPort, tcp *gplayers.TCP, truncated bool) {
	d.pkt++
	d.segment(src, dst, tcp, truncated)
}

// Skip counts a capture packet that holds no TCP segment, so that Packet
// numbers keep matching the capture's.
func (d *StreamDecoder) Skip() { d.pkt++ }

func (d *StreamDecoder) segment(src, dst netip.AddrPort, tcp *gplayers.TCP, truncated bool) {
	key := makeKey(src, dst)
	c := d.conns[key]
	if c != nil && c.phase == phaseDone && !(tcp.SYN && !tcp.ACK) {
		return // a late segment of a finished connection
	}
	if c == nil || c.phase == phaseDone {
		c = d.newConn(key, src)
	}
	side := 0
	if c.ep[1] == src {
		side = 1
	}
	h := &c.h[side]
	h.lastPkt = d.pkt
	payload, fin := tcp.Payload, tcp.FIN
	if truncated {
		payload, fin = nil, false
	}
	if tcp.SYN && !tcp.ACK && c.client < 0 {
		c.client = side
	}
	if h.tcp.segment(tcp.Seq, tcp.SYN, fin, tcp.RST, payload, h.deliver) {
		// A new connection on the same ports.
		d.finish(c)
		c = d.newConn(key, src)
		if tcp.SYN && !tcp.ACK {
			c.client = 0
		}
		h = &c.h[0]
		h.lastPkt = d.pkt
		h.tcp.segment(tcp.Seq, tcp.SYN, fin, tcp.RST, payload, h.deliver)
	}
	d.process(c)
	if c.ended() {
		d.finish(c)
	}
}

func (d *StreamDecoder) newConn(key connKey, first netip.AddrPort) *conn {
	c := &conn{client: -1, init: -1}
	c.ep[0] = first
	c.ep[1] = key.a
	if key.a == first {
		c.ep[1] = key.b
	}
	d.conns[key] = c
	d.order = append(d.order, c)
	return c
}

// lastPacket is the number of the last packet in direction dir (DirNone:
// either), 0 if none.
func (c *conn) lastPacket(dir Dir) int {
	n := 0
	for i := range c.h {
		if dir == DirNone || c.h[i].dir == dir {
			n = max(n, c.h[i].lastPkt)
		}
	}
	return n
}

// deliver appends octets in stream order.
func (h *half) deliver(b []byte) {
	if !h.discard {
		h.buf = append(h.buf, b...)
	}
}

// ended reports that both directions are closed and fully delivered (or
// reset), so later segments are stragglers.
func (c *conn) ended() bool {
	for i := range c.h {
		t := &c.h[i].tcp
		if t.rst {
			return true
		}
		if !t.finSeen || t.next != t.finAt {
			return false
		}
	}
	return true
}

// process advances the connection as far as the delivered octets allow.
func (d *StreamDecoder) process(c *conn) {
	for i := range c.h {
		c.h[i].compact()
	}
	for {
		switch c.phase {
		case phaseDetect:
			if !d.detect(c) {
				return
			}
		case phaseHandshake, phaseFull:
			progress := false
			for _, side := range [2]int{c.init, 1 - c.init} {
				if d.advance(c, side) {
					progress = true
				}
			}
			if !progress {
				return
			}
		default:
			return
		}
	}
}

// detect looks for the Request key at the start of each direction. RFC
// 5044 names the Initiator by the Request it sends (the first to send
// data), not by who sent the TCP SYN. If both directions begin with the
// key, the first to show all 16 octets wins.
func (d *StreamDecoder) detect(c *conn) bool {
	for i := range c.h {
		h := &c.h[i]
		if h.notInit {
			continue
		}
		b := h.buf
		k := min(len(b), mpa.KeyLen)
		if !bytes.Equal(b[:k], mpa.KeyRequest[:k]) {
			h.notInit = true
			continue
		}
		if k < mpa.KeyLen {
			continue
		}
		c.init = i
		c.phase = phaseHandshake
		c.id = Conn{Initiator: c.ep[i], Responder: c.ep[1-i]}
		c.h[i].dir, c.h[1-i].dir = DirI2R, DirR2I
		c.h[i].state, c.h[1-i].state = hsRequest, hsReply
		return true
	}
	if c.h[0].notInit && c.h[1].notInit {
		d.noHandshake(c)
	}
	return false
}

func (d *StreamDecoder) noHandshake(c *conn) {
	c.phase = phaseNone
	a, b := 0, 1
	if c.client == 1 {
		a, b = 1, 0
	}
	c.id = Conn{Initiator: c.ep[a], Responder: c.ep[b]}
	na, nb := c.h[a].tcp.next, c.h[b].tcp.next
	note := "no MPA Request at the start of either direction: the handshake is not in the capture, " +
		"so nothing of this connection is decoded"
	if na+nb == 0 {
		note = "no MPA Request in the capture (no TCP payload)"
	}
	c.h[0].discard, c.h[1].discard = true, true
	d.note(c, DirNone, KindNoHandshake, note)
}

// advance handles the octets waiting in one direction.
func (d *StreamDecoder) advance(c *conn, side int) bool {
	h := &c.h[side]
	switch h.state {
	case hsRequest:
		return d.handshakeFrame(c, h)
	case hsReply:
		if c.h[c.init].state == hsRequest {
			return false // a Reply answers a Request
		}
		return d.handshakeFrame(c, h)
	case hsFPDU:
		return d.fpdus(c, h)
	}
	return false
}

// handshakeFrame reads the Request or Reply at the start of h.
func (d *StreamDecoder) handshakeFrame(c *conn, h *half) bool {
	b := h.avail()
	s := &d.startup
	err := s.DecodeFromBytes(b, gopacket.NilDecodeFeedback)
	if errors.Is(err, mpa.ErrTruncated) {
		return false
	}
	kind := KindMPARequest
	if h.state == hsReply {
		kind = KindMPAReply
	}
	whole := err == nil || errors.Is(err, mpa.ErrEnhancedShort)
	if err == nil && s.Reply != (kind == KindMPAReply) {
		err = fmt.Errorf("layers: expected an MPA %s frame, got a %s key", kindWord(kind), kindWord(otherKind(kind)))
	}
	d.rec = Record{Conn: c.id, Dir: h.dir, Index: h.frames, Kind: kind, Packet: d.pkt}
	if err != nil {
		// Without a valid frame the framing of the connection is unknown.
		// Most errors come from the 20-octet header alone, and its
		// PD_Length cannot be trusted: report the header. A frame found
		// wrong only as a whole (an RFC 6581 block missing, the wrong key
		// for its direction) is reported whole.
		n := mpa.HeaderLen
		if whole {
			n, _ = mpa.FrameLen(b)
		}
		d.rec.Wire = b[:n]
		d.rec.Err = err
		h.frames++
		h.consumed += uint64(n)
		d.emitRecord()
		c.phase = phaseFailed
		for i := range c.h {
			c.h[i].state, c.h[i].discard = hsStopped, true
		}
		return false
	}
	n := len(s.Contents) + len(s.BaseLayer.Payload)
	d.rec.Wire = b[:n]
	d.rec.Startup = s
	h.frames++
	h.consumed += uint64(n)
	d.emitRecord()
	if kind == KindMPARequest {
		h.state = hsWaitReply
		c.reqCRC, c.reqMarkers = s.CRC, s.Markers
		return true
	}
	if s.Reject {
		c.phase = phaseRejected
		h.state = hsStopped
		c.h[c.init].state = hsStopped
		c.h[0].discard, c.h[1].discard = true, true
		d.note(c, DirNone, KindRejected, "MPA Reply has R set: connection rejected, no FPDUs follow")
		return false
	}
	// RFC 5044 §7.1: CRC is used if either side asked for it; each side's
	// M asks the peer to send markers.
	crc := c.reqCRC || s.CRC
	i2r, r2i := &c.h[c.init], h
	i2r.startFPDUs(MPAFraming{CRC: crc, Markers: s.Markers, FullOperation: true})
	r2i.startFPDUs(MPAFraming{CRC: crc, Markers: c.reqMarkers, FullOperation: true})
	c.phase = phaseFull
	return true
}

func kindWord(k Kind) string {
	if k == KindMPAReply {
		return "Reply"
	}
	return "Request"
}

func otherKind(k Kind) Kind {
	if k == KindMPAReply {
		return KindMPARequest
	}
	return KindMPAReply
}

// startFPDUs switches h to FPDUs from its current offset on.
func (h *half) startFPDUs(f MPAFraming) {
	h.framing = f
	h.origin = h.consumed
	h.readOff = h.consumed
	h.df = mpa.NewDeframer(h, mpa.DeframerConfig{CRC: f.CRC, Markers: f.Markers})
	h.state = hsFPDU
}

// fpdus emits every FPDU the deframer can complete.
func (d *StreamDecoder) fpdus(c *conn, h *half) bool {
	progress := false
	for {
		f, err := h.df.Next()
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return progress
		}
		if err != nil && !errors.Is(err, mpa.ErrBadCRC) {
			h.state = hsStopped
			h.discard = true
			d.note(c, h.dir, KindNote, fmt.Sprintf("framing lost at stream offset %d: %v; the rest of this direction is not decoded",
				h.consumed, err))
			return progress
		}
		progress = true
		start := h.consumed
		h.consumed += uint64(f.WireLen)
		raw := h.buf[start-h.bufOff : h.consumed-h.bufOff]
		d.rec = Record{Conn: c.id, Dir: h.dir, Index: h.frames, Kind: KindFPDU, Packet: d.pkt, Wire: raw}
		h.frames++
		d.decodeFPDU(h, start, raw, f)
		d.emitRecord()
	}
}

var errFramingMismatch = errors.New("layers: internal error: MPA layer and deframer disagree")

// decodeFPDU decodes the layers of one FPDU into d.rec.
func (d *StreamDecoder) decodeFPDU(h *half, start uint64, raw []byte, f *mpa.FPDU) {
	r := &d.rec
	m := &d.mpa
	m.Framing = h.framing
	m.Framing.StreamOffset = start - h.origin
	if err := m.DecodeFromBytes(raw, gopacket.NilDecodeFeedback); err != nil {
		r.Err = err
		return
	}
	r.MPA = m
	if m.WireLen != f.WireLen || m.CRCValid != f.CRCOK || !bytes.Equal(m.Payload, f.ULPDU) {
		r.Err = errFramingMismatch
		return
	}
	dd := &d.ddp
	err := dd.DecodeFromBytes(m.Payload, gopacket.NilDecodeFeedback)
	if err != nil && len(dd.Contents) == 0 {
		r.Err = err
		return
	}
	r.DDP = dd
	if err != nil {
		r.Err = err
		return
	}
	payload := dd.Payload()
	var l gopacket.DecodingLayer
	switch dd.NextLayerType() {
	case LayerTypeRDMAPReadRequest:
		l, r.ReadRequest = &d.rr, &d.rr
	case LayerTypeRDMAPTerminate:
		l, r.Terminate = &d.term, &d.term
	case LayerTypeRDMAPAtomicRequest:
		l, r.AtomicRequest = &d.areq, &d.areq
	case LayerTypeRDMAPAtomicResponse:
		l, r.AtomicResponse = &d.aresp, &d.aresp
	}
	if l != nil {
		if err := l.DecodeFromBytes(payload, gopacket.NilDecodeFeedback); err != nil {
			r.ReadRequest, r.Terminate, r.AtomicRequest, r.AtomicResponse = nil, nil, nil, nil
			r.Err = err
			r.Payload = payload
			return
		}
		payload = l.LayerPayload()
	}
	r.Payload = payload
}

// note emits a note about c (one direction, or DirNone: the connection),
// numbered with the last packet it refers to: that direction's (the
// connection's) last packet, not the packet being read when the note is
// made (at Close, none).
func (d *StreamDecoder) note(c *conn, dir Dir, k Kind, text string) {
	pkt := d.pkt
	if last := c.lastPacket(dir); last > 0 {
		pkt = last
	}
	d.rec = Record{Conn: c.id, Dir: dir, Index: -1, Kind: k, Packet: pkt, Note: text}
	d.emitRecord()
}

func (d *StreamDecoder) emitRecord() {
	if d.emit != nil {
		d.emit(&d.rec)
	}
}

// Close ends the capture: every connection still open gets the notes it
// needs (no handshake, a handshake cut short, octets left undecoded, gaps),
// in the order the connections appeared.
func (d *StreamDecoder) Close() {
	d.pkt = 0
	for _, c := range d.order {
		if c.phase != phaseDone {
			d.finish(c)
		}
	}
	d.order = nil
	clear(d.conns)
}

// finish reports what a connection leaves undecoded and retires it.
func (d *StreamDecoder) finish(c *conn) {
	if c.phase == phaseDetect {
		d.noHandshake(c)
	}
	if c.phase != phaseNone {
		for _, side := range [2]int{c.init, 1 - c.init} {
			h := &c.h[side]
			d.finishHalf(c, h)
		}
	}
	c.phase = phaseDone
	c.h = [2]half{} // free the buffers
}

func (d *StreamDecoder) finishHalf(c *conn, h *half) {
	left := h.tcp.next - h.consumed
	switch {
	case left == 0:
	case h.state == hsRequest:
		d.note(c, h.dir, KindNote, fmt.Sprintf("capture ends inside the MPA Request frame: %d octets", left))
	case h.state == hsReply:
		d.note(c, h.dir, KindNote, fmt.Sprintf("capture ends inside the MPA Reply frame: %d octets", left))
	case h.state == hsWaitReply:
		d.note(c, h.dir, KindNote, fmt.Sprintf("no MPA Reply in the capture: %d octets after the Request not decoded", left))
	case h.state == hsFPDU:
		d.note(c, h.dir, KindNote, fmt.Sprintf("capture ends inside an FPDU: %d octets not decoded", left))
	case c.phase == phaseRejected:
		d.note(c, h.dir, KindNote, fmt.Sprintf("%d octets after the rejecting Reply not decoded", left))
	case c.phase == phaseFailed:
		d.note(c, h.dir, KindNote, fmt.Sprintf("%d octets after the malformed handshake frame not decoded", left))
	default:
		d.note(c, h.dir, KindNote, fmt.Sprintf("%d octets not decoded", left))
	}
	if h.state == hsReply && h.tcp.next == 0 && c.phase == phaseHandshake && !h.tcp.overflowed && len(h.tcp.ooo) == 0 {
		d.note(c, h.dir, KindNote, "no MPA Reply in the capture")
	}
	if at, queued, ok := h.tcp.missing(); ok {
		d.note(c, h.dir, KindNote, fmt.Sprintf("TCP stream gap at offset %d (a segment is missing from the capture): "+
			"%d queued octets after it not decoded", at, queued))
	}
}
