package layers

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// This file builds synthetic iWARP conversations for the tests: TCP
// segments on 127.0.0.1 with real sequence numbers, written to pcap or
// pcapng with pcapgo, or fed to a StreamDecoder directly.

// synthPkt is one TCP segment.
type synthPkt struct {
	src, dst netip.AddrPort
	seq, ack uint32
	syn, fin bool
	ackFlag  bool
	payload  []byte
}

// synthCapture is an ordered list of segments.
type synthCapture struct {
	pkts []synthPkt
}

// synthConn is one TCP connection of a capture. Side 0 is the client.
type synthConn struct {
	c   *synthCapture
	ep  [2]netip.AddrPort
	seq [2]uint32
}

func (c *synthCapture) conn(clientPort, serverPort uint16) *synthConn {
	lo := netip.MustParseAddr("127.0.0.1")
	return &synthConn{c: c,
		ep:  [2]netip.AddrPort{netip.AddrPortFrom(lo, clientPort), netip.AddrPortFrom(lo, serverPort)},
		seq: [2]uint32{0x10000000 + uint32(clientPort)*7919, 0xfffff000 - uint32(serverPort)}, // the server's wraps
	}
}

func (s *synthConn) pkt(side int, payload []byte, syn, fin bool) synthPkt {
	return synthPkt{src: s.ep[side], dst: s.ep[1-side], seq: s.seq[side], ack: s.seq[1-side],
		syn: syn, fin: fin, ackFlag: !(syn && side == 0), payload: payload}
}

// open adds the three-way handshake.
func (s *synthConn) open() {
	s.c.pkts = append(s.c.pkts, s.pkt(0, nil, true, false))
	s.seq[0]++
	s.c.pkts = append(s.c.pkts, s.pkt(1, nil, true, false))
	s.seq[1]++
	s.c.pkts = append(s.c.pkts, s.pkt(0, nil, false, false))
}

// send adds data from side as segments of the given sizes (the last size
// repeats; none means one segment).
func (s *synthConn) send(side int, data []byte, sizes ...int) {
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(sizes) > 0 {
			n = min(n, sizes[min(i, len(sizes)-1)])
		}
		s.c.pkts = append(s.c.pkts, s.pkt(side, data[:n], false, false))
		s.seq[side] += uint32(n)
		data = data[n:]
	}
}

// close adds FIN from both sides and the last ACK.
func (s *synthConn) close() {
	s.c.pkts = append(s.c.pkts, s.pkt(0, nil, false, true))
	s.seq[0]++
	s.c.pkts = append(s.c.pkts, s.pkt(1, nil, false, true))
	s.seq[1]++
	s.c.pkts = append(s.c.pkts, s.pkt(0, nil, false, false))
}

var synthTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// frame encodes p as Ethernet/IPv4/TCP with correct checksums.
func (p synthPkt) frame(tb testing.TB) []byte {
	tb.Helper()
	eth := &gplayers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: gplayers.EthernetTypeIPv4}
	var ip gopacket.NetworkLayer = &gplayers.IPv4{Version: 4, TTL: 64, Protocol: gplayers.IPProtocolTCP,
		Flags: gplayers.IPv4DontFragment, SrcIP: p.src.Addr().AsSlice(), DstIP: p.dst.Addr().AsSlice()}
	if p.src.Addr().Is6() {
		eth.EthernetType = gplayers.EthernetTypeIPv6
		ip = &gplayers.IPv6{Version: 6, HopLimit: 64, NextHeader: gplayers.IPProtocolTCP,
			SrcIP: p.src.Addr().AsSlice(), DstIP: p.dst.Addr().AsSlice()}
	}
	tcp := &gplayers.TCP{SrcPort: gplayers.TCPPort(p.src.Port()), DstPort: gplayers.TCPPort(p.dst.Port()),
		Seq: p.seq, Ack: p.ack, SYN: p.syn, FIN: p.fin, ACK: p.ackFlag, PSH: len(p.payload) > 0, Window: 65535}
	if !p.ackFlag {
		tcp.Ack = 0
	}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		tb.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip.(gopacket.SerializableLayer), tcp, gopacket.Payload(p.payload)); err != nil {
		tb.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func (c *synthCapture) ci(i int, n int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: synthTime.Add(time.Duration(i) * time.Millisecond), CaptureLength: n, Length: n}
}

// pcap returns the capture as a pcap file.
func (c *synthCapture) pcap(tb testing.TB) []byte {
	tb.Helper()
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	if err := w.WriteFileHeader(65536, gplayers.LinkTypeEthernet); err != nil {
		tb.Fatal(err)
	}
	for i, p := range c.pkts {
		f := p.frame(tb)
		if err := w.WritePacket(c.ci(i, len(f)), f); err != nil {
			tb.Fatal(err)
		}
	}
	return out.Bytes()
}

// pcapng returns the capture as a pcapng file.
func (c *synthCapture) pcapng(tb testing.TB) []byte {
	tb.Helper()
	var out bytes.Buffer
	w, err := pcapgo.NewNgWriter(&out, gplayers.LinkTypeEthernet)
	if err != nil {
		tb.Fatal(err)
	}
	for i, p := range c.pkts {
		f := p.frame(tb)
		ci := c.ci(i, len(f))
		if err := w.WritePacket(ci, f); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// mpaFrame encodes a Request or Reply.
func mpaFrame(tb testing.TB, f mpa.Frame) []byte {
	tb.Helper()
	b, err := mpa.AppendFrame(nil, &f)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// fpdu serializes one FPDU through the layers: MPA framing fr, DDP header
// d, an optional RDMAP header and the payload.
func fpdu(tb testing.TB, fr MPAFraming, d DDP, hdr gopacket.SerializableLayer, payload []byte) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	ls := []gopacket.SerializableLayer{&MPA{Framing: fr}, &d}
	if hdr != nil {
		ls = append(ls, hdr)
	}
	ls = append(ls, gopacket.Payload(payload))
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// pattern returns n octets of a recognisable pattern.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// untagged and tagged build DDP headers for an opcode.
func untagged(op RDMAPOpcode, qn, msn, mo uint32, last bool) DDP {
	return DDP{Last: last, Version: 1, RDMAPVersion: 1, Opcode: op, QN: qn, MSN: msn, MO: mo}
}

func tagged(op RDMAPOpcode, stag uint32, to uint64, last bool) DDP {
	return DDP{Tagged: true, Last: last, Version: 1, RDMAPVersion: 1, Opcode: op, STag: stag, TO: to}
}

// allOpcodeFPDUs returns one FPDU of every RDMAP opcode and a few sizes,
// framed as fr. The Terminate is in RFC layout (tshark reads that one).
func allOpcodeFPDUs(tb testing.TB, fr MPAFraming) [][]byte {
	tb.Helper()
	sendInv := untagged(OpSendInv, 0, 3, 0, true)
	sendInv.InvalidateSTag = 0x1234ab00
	sendSEInv := untagged(OpSendSEInv, 0, 5, 0, true)
	sendSEInv.InvalidateSTag = 0x5678cd01
	termDDP := untagged(OpSend, 0, 9, 0, true)
	var termHdr []byte
	{
		buf := gopacket.NewSerializeBuffer()
		if err := termDDP.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
			tb.Fatal(err)
		}
		termHdr = bytes.Clone(buf.Bytes())
	}
	out := [][]byte{
		fpdu(tb, fr, tagged(OpWrite, 0x11223300, 0x7f0000001000, true), nil, pattern(64, 1)),
		fpdu(tb, fr, tagged(OpWrite, 0x11223300, 0x7f0000002000, false), nil, pattern(1, 2)), // pad 1
		fpdu(tb, fr, tagged(OpWrite, 0x11223300, 0x7f0000002001, false), nil, pattern(2, 3)), // pad 0
		fpdu(tb, fr, tagged(OpWrite, 0x11223300, 0x7f0000002003, true), nil, pattern(3, 4)),  // pad 3
		fpdu(tb, fr, tagged(OpWrite, 0x11223300, 0x7f0000003000, true), nil, nil),            // zero length
		fpdu(tb, fr, untagged(OpReadRequest, 1, 1, 0, true), &RDMAPReadRequest{
			SinkSTag: 0x8ad0ef00, SinkTO: 0x556e5a37e530, Size: 1400, SrcSTag: 0xbf388400, SrcTO: 0x56402cd8bb80}, nil),
		fpdu(tb, fr, tagged(OpReadResponse, 0x8ad0ef00, 0x556e5a37e530, true), nil, pattern(1400, 5)),
		fpdu(tb, fr, untagged(OpSend, 0, 1, 0, true), nil, pattern(16, 6)),
		fpdu(tb, fr, untagged(OpSend, 0, 2, 0, false), nil, pattern(4000, 7)),
		fpdu(tb, fr, untagged(OpSend, 0, 2, 4000, true), nil, pattern(5, 8)),
		fpdu(tb, fr, sendInv, nil, pattern(8, 9)),
		fpdu(tb, fr, untagged(OpSendSE, 0, 4, 0, true), nil, pattern(33, 10)),
		fpdu(tb, fr, sendSEInv, nil, pattern(7, 11)),
		fpdu(tb, fr, untagged(OpImmData, 0, 6, 0, true), nil, pattern(8, 12)),
		fpdu(tb, fr, untagged(OpImmDataSE, 0, 7, 0, true), nil, pattern(8, 13)),
		fpdu(tb, fr, untagged(OpAtomicRequest, 3, 1, 0, true), &RDMAPAtomicRequest{AtomicRequest: wire.AtomicRequest{
			Op: wire.AtomicCmpSwap, ReqID: 77, STag: 0x00aa5500, TO: 0x1000, AddSwap: 5, AddSwapMask: ^uint64(0),
			Compare: 4, CompareMask: ^uint64(0)}}, nil),
		fpdu(tb, fr, untagged(OpAtomicResponse, 3, 1, 0, true), &RDMAPAtomicResponse{AtomicResponse: wire.AtomicResponse{
			ReqID: 77, OriginalValue: 4}}, nil),
		fpdu(tb, fr, untagged(OpAtomicRequest, 3, 2, 0, true), &RDMAPAtomicRequest{AtomicRequest: wire.AtomicRequest{
			Op: wire.AtomicFetchAdd, ReqID: 78, STag: 0x00aa5500, TO: 0x1008, AddSwap: 1}}, nil),
		fpdu(tb, fr, untagged(OpAtomicResponse, 3, 2, 0, true), &RDMAPAtomicResponse{AtomicResponse: wire.AtomicResponse{
			ReqID: 78, OriginalValue: 0x0102030405060708}}, nil),
	}
	// Terminates (queue 2): DDP error with the terminated DDP header;
	// RDMAP error without headers; LLP (MPA) error with only the segment
	// length; RDMAP error on a Read Request with both headers.
	rrHdr := wire.AppendReadRequest(nil, &wire.ReadRequestFields{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5})
	for i, t := range []wire.Terminate{
		{Layer: wire.LayerDDP, EType: 2, Code: 1, M: true, D: true, SegLen: 20, DDPHeader: termHdr},
		{Layer: wire.LayerRDMAP, EType: wire.ETypeRemoteOperation, Code: wire.CodeUnexpectedOpcode},
		{Layer: wire.LayerLLP, EType: mpa.TermTypeMPA, Code: uint8(mpa.TermCRC), M: true, SegLen: 34},
		{Layer: wire.LayerRDMAP, EType: wire.ETypeRemoteProtection, Code: wire.CodeInvalidSTag, M: true, D: true, R: true,
			SegLen: 28, DDPHeader: termHdr, RDMAHeader: rrHdr},
	} {
		out = append(out, fpdu(tb, fr, untagged(OpTerminate, 2, uint32(i+1), 0, true), &RDMAPTerminate{Terminate: t}, nil))
	}
	return out
}

// siwTerminate is a Terminate as Linux siw writes it on x86 (its control
// word in little-endian bitfield order): DDP / untagged / invalid QN with
// M and D set, as observed in the interop lab: "21 01 03 00" (the layout
// rdmap/wire.LayoutSiw documents).
func siwTerminate(tb testing.TB, fr MPAFraming, msn uint32) []byte {
	tb.Helper()
	hdr := untagged(OpSend, 7, 1, 0, true)
	buf := gopacket.NewSerializeBuffer()
	if err := hdr.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
		tb.Fatal(err)
	}
	return fpdu(tb, fr, untagged(OpTerminate, 2, msn, 0, true), &RDMAPTerminate{Terminate: wire.Terminate{
		Layer: wire.LayerDDP, EType: 2, Code: 1, M: true, D: true, SegLen: 16, DDPHeader: bytes.Clone(buf.Bytes()),
		Layout: wire.LayoutSiw}}, nil)
}

// decodeAll runs a capture through DecodeCapture and returns copies of the
// records.
func decodeAll(tb testing.TB, file []byte) []rec {
	tb.Helper()
	var out []rec
	if err := DecodeCapture(bytes.NewReader(file), func(r *Record) { out = append(out, copyRecord(r)) }); err != nil {
		tb.Fatal(err)
	}
	return out
}

// rec is a deep copy of a Record, for comparisons.
type rec struct {
	Conn    string
	Dir     Dir
	Index   int
	Kind    Kind
	Packet  int
	Wire    []byte
	Startup *MPAStartup
	MPA     *MPA
	DDP     *DDP
	RR      *RDMAPReadRequest
	Term    *RDMAPTerminate
	AReq    *RDMAPAtomicRequest
	AResp   *RDMAPAtomicResponse
	Payload []byte
	Err     string
	Note    string
}

func copyRecord(r *Record) rec {
	c := rec{Conn: r.Conn.String(), Dir: r.Dir, Index: r.Index, Kind: r.Kind, Packet: r.Packet,
		Wire: bytes.Clone(r.Wire), Payload: bytes.Clone(r.Payload), Note: r.Note}
	if r.Err != nil {
		c.Err = r.Err.Error()
	}
	// Layers are re-decoded from copied bytes so nothing aliases the
	// decoder's buffers.
	if r.Startup != nil {
		c.Startup = &MPAStartup{}
		_ = c.Startup.DecodeFromBytes(c.Wire, gopacket.NilDecodeFeedback)
	}
	if r.MPA != nil {
		m := *r.MPA
		m.Contents, m.Payload, m.Padding, m.plain = bytes.Clone(m.Contents), bytes.Clone(m.Payload), bytes.Clone(m.Padding), nil
		c.MPA = &m
	}
	if r.DDP != nil {
		d := *r.DDP
		d.Contents, d.BaseLayer.Payload = bytes.Clone(d.Contents), bytes.Clone(d.BaseLayer.Payload)
		c.DDP = &d
	}
	if r.ReadRequest != nil {
		x := *r.ReadRequest
		x.Contents, x.Payload = bytes.Clone(x.Contents), bytes.Clone(x.Payload)
		c.RR = &x
	}
	if r.Terminate != nil {
		x := *r.Terminate
		x.Contents, x.Payload = bytes.Clone(x.Contents), bytes.Clone(x.Payload)
		x.DDPHeader, x.RDMAHeader = bytes.Clone(x.DDPHeader), bytes.Clone(x.RDMAHeader)
		c.Term = &x
	}
	if r.AtomicRequest != nil {
		x := *r.AtomicRequest
		x.Contents, x.Payload = bytes.Clone(x.Contents), bytes.Clone(x.Payload)
		c.AReq = &x
	}
	if r.AtomicResponse != nil {
		x := *r.AtomicResponse
		x.Contents, x.Payload = bytes.Clone(x.Contents), bytes.Clone(x.Payload)
		c.AResp = &x
	}
	return c
}
