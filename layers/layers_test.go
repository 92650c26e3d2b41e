package layers

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

func mustHex(tb testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// Real octets, TCP payloads of testdata/captures/crc-rping-default.pcap
// (Linux siw 6.1, rping, siw.mpa_crc_required=1).
//
// Frame 4, the MPA Request (rev 2, C and H set, IRD 1, ORD 1):
//
//	0000  4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65   MPA ID Req Frame
//	0010  50 02 00 04 00 01 00 01                           P.......
const siwRequestHex = "4d504120494420526571204672616d655002000400010001"

// Frame 8, the initiator's first Send (untagged, QN 0, MSN 1, 16 octets of
// rping payload, CRC 0x180dc2b4 as Wireshark shows it):
//
//	0000  00 22 41 43 00 00 00 00 00 00 00 00 00 00 00 01   ."AC............
//	0010  00 00 00 00 00 00 56 40 2c d8 bb 80 bf 38 84 00   ......V@,....8..
//	0020  00 00 00 40 18 0d c2 b4                           ...@....
const siwSendHex = "0022414300000000000000000000000100000000000056402cd8bb80bf38840000000040180dc2b4"

// Frame 9, the responder's Read Request (QN 1, MSN 1, 64 octets from
// STag 0xbf388400 into STag 0x8ad0ef00):
//
//	0000  00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01   ..AA............
//	0010  00 00 00 00 8a d0 ef 00 00 00 55 6e 5a 37 e5 30   ..........UnZ7.0
//	0020  00 00 00 40 bf 38 84 00 00 00 56 40 2c d8 bb 80   ...@.8....V@,...
//	0030  b4 32 86 a6                                       .2..
const siwReadRequestHex = "002e4141000000000000000100000001000000008ad0ef000000556e5a37e53000000040bf388400000056402cd8bb80b43286a6"

// Frame 10, the Read Response (tagged, 64 octets to STag 0x8ad0ef00).
const siwReadResponseHex = "004ec1428ad0ef000000556e5a37e53072646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071720082a71542"

// testdata/captures/ib_write_bw.pcap frame 15: a Send of 2 octets whose two
// pad octets siw fills with 00 40 (RFC 5044 asks for zeros; receivers
// ignore them), no CRC.
const siwNonZeroPadHex = "00144143000000000000000000000004000000003300004000000000"

// Linux siw's Terminate for a Send to an invalid queue, built from the
// octets observed in the interop lab: DDP ctrl 0x41, RDMAP ctrl 0x47,
// QN 2, MSN 1, MO 0, control word "21 01 03 00" (siw's bitfield layout:
// DDP / untagged buffer / invalid QN, M and D), segment length 16 and the
// terminated untagged header (QN 7).
const siwTerminateHex = "414700000000000000020000000100000000" + "21010300" + "0010" + "414300000000000000070000000100000000"

var cmpLayers = cmp.Options{
	cmpopts.IgnoreFields(gplayers.BaseLayer{}, "Contents", "Payload"),
	cmpopts.IgnoreUnexported(MPA{}),
	cmp.Comparer(bytes.Equal),
}

func TestMPAStartupSiwRequest(t *testing.T) {
	data := mustHex(t, siwRequestHex)
	var s MPAStartup
	if err := s.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	want := MPAStartup{Frame: mpa.Frame{CRC: true, Enhanced: true, Rev: 2, IRD: 1, ORD: 1, PDLength: 4}}
	if d := cmp.Diff(want, s, cmpLayers); d != "" {
		t.Errorf("decode (-want +got):\n%s", d)
	}
	if !bytes.Equal(s.Contents, data) || len(s.Payload()) != 0 {
		t.Errorf("contents %x payload %x", s.Contents, s.Payload())
	}
	if s.NextLayerType() != gopacket.LayerTypePayload {
		t.Errorf("next layer %v", s.NextLayerType())
	}
	checkReserialize(t, &s, data, nil)
}

func TestMPAFPDUSiwSend(t *testing.T) {
	data := mustHex(t, siwSendHex)
	m := MPA{Framing: MPAFraming{CRC: true, FullOperation: true}}
	if err := m.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	want := MPA{Framing: m.Framing, ULPDULength: 34, CRC: 0x180dc2b4, CRCValid: true, WireLen: 40}
	if d := cmp.Diff(want, m, cmpLayers); d != "" {
		t.Errorf("decode (-want +got):\n%s", d)
	}
	if !bytes.Equal(m.Contents, data[:2]) || !bytes.Equal(m.Payload, data[2:36]) || m.NextLayerType() != LayerTypeDDP {
		t.Errorf("contents %x payload %x next %v", m.Contents, m.Payload, m.NextLayerType())
	}
	var d DDP
	if err := d.DecodeFromBytes(m.Payload, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	wantDDP := DDP{Last: true, Version: 1, RDMAPVersion: 1, Opcode: OpSend, MSN: 1}
	if diff := cmp.Diff(wantDDP, d, cmpLayers); diff != "" {
		t.Errorf("DDP (-want +got):\n%s", diff)
	}
	if len(d.Payload()) != 16 || d.NextLayerType() != gopacket.LayerTypePayload {
		t.Errorf("DDP payload %x next %v", d.Payload(), d.NextLayerType())
	}
	checkReserialize(t, &m, data, m.Payload)
	checkReserialize(t, &d, m.Payload, d.Payload())

	// A flipped octet anywhere makes the CRC bad.
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x20
		if err := m.DecodeFromBytes(bad, gopacket.NilDecodeFeedback); err != nil {
			continue // the length octets changed: truncated
		}
		if m.CRCValid {
			t.Errorf("octet %d flipped: CRC still valid", i)
		}
	}
}

func TestSiwReadRequestAndResponse(t *testing.T) {
	data := mustHex(t, siwReadRequestHex)
	var m MPA
	m.Framing = MPAFraming{CRC: true, FullOperation: true}
	var d DDP
	var rr RDMAPReadRequest
	var pl gopacket.Payload
	p := gopacket.NewDecodingLayerParser(LayerTypeMPA, &m, &d, &rr, &pl)
	var got []gopacket.LayerType
	if err := p.DecodeLayers(data, &got); err != nil {
		t.Fatal(err)
	}
	if want := []gopacket.LayerType{LayerTypeMPA, LayerTypeDDP, LayerTypeRDMAPReadRequest}; !cmp.Equal(want, got) {
		t.Errorf("layers %v, want %v", got, want)
	}
	if !m.CRCValid || m.CRC != 0xb43286a6 {
		t.Errorf("CRC %#x valid %v", m.CRC, m.CRCValid)
	}
	wantDDP := DDP{Last: true, Version: 1, RDMAPVersion: 1, Opcode: OpReadRequest, QN: 1, MSN: 1}
	if diff := cmp.Diff(wantDDP, d, cmpLayers); diff != "" {
		t.Errorf("DDP (-want +got):\n%s", diff)
	}
	wantRR := RDMAPReadRequest{SinkSTag: 0x8ad0ef00, SinkTO: 0x556e5a37e530, Size: 64, SrcSTag: 0xbf388400, SrcTO: 0x56402cd8bb80}
	if diff := cmp.Diff(wantRR, rr, cmpLayers); diff != "" {
		t.Errorf("Read Request (-want +got):\n%s", diff)
	}
	checkReserialize(t, &rr, d.Payload(), nil)

	data = mustHex(t, siwReadResponseHex)
	if err := p.DecodeLayers(data, &got); err != nil {
		t.Fatal(err)
	}
	if want := []gopacket.LayerType{LayerTypeMPA, LayerTypeDDP, gopacket.LayerTypePayload}; !cmp.Equal(want, got) {
		t.Errorf("layers %v, want %v", got, want)
	}
	wantDDP = DDP{Tagged: true, Last: true, Version: 1, RDMAPVersion: 1, Opcode: OpReadResponse, STag: 0x8ad0ef00, TO: 0x556e5a37e530}
	if diff := cmp.Diff(wantDDP, d, cmpLayers); diff != "" {
		t.Errorf("DDP (-want +got):\n%s", diff)
	}
	if !m.CRCValid || len(pl) != 64 || !bytes.HasPrefix(pl, []byte("rdma-ping-0: ")) {
		t.Errorf("CRC valid %v payload %q", m.CRCValid, pl)
	}
}

func TestSiwNonZeroPad(t *testing.T) {
	data := mustHex(t, siwNonZeroPadHex)
	m := MPA{Framing: MPAFraming{FullOperation: true}}
	if err := m.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Padding, []byte{0x00, 0x40}) || m.CRCValid || m.CRC != 0 {
		t.Errorf("padding %x CRC %#x valid %v", m.Padding, m.CRC, m.CRCValid)
	}
	// Serializing keeps the pad octets as decoded.
	checkReserialize(t, &m, data, m.Payload)
}

func TestSiwTerminateLayout(t *testing.T) {
	data := mustHex(t, siwTerminateHex)
	var d DDP
	if err := d.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	if d.Opcode != OpTerminate || d.QN != wire.QNTerminate || d.NextLayerType() != LayerTypeRDMAPTerminate {
		t.Fatalf("DDP %+v", d)
	}
	var term RDMAPTerminate
	if err := term.DecodeFromBytes(d.Payload(), gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	want := RDMAPTerminate{Terminate: wire.Terminate{Layer: wire.LayerDDP, EType: 2, Code: 1, M: true, D: true,
		SegLen: 16, DDPHeader: mustHex(t, "414300000000000000070000000100000000"), Layout: wire.LayoutSiw}}
	if diff := cmp.Diff(want, term, cmpLayers); diff != "" {
		t.Errorf("Terminate (-want +got):\n%s", diff)
	}
	if got := term.Terminate.String(); got != "DDP/untagged buffer: invalid QN" {
		t.Errorf("String() = %q", got)
	}
	checkReserialize(t, &term, d.Payload(), term.Payload)
}

// checkReserialize serializes the decoded layer l over payload and checks
// that the octets equal data, what l was decoded from (DecodeFromBytes then
// SerializeTo gives back the same octets), with and without FixLengths and
// ComputeChecksums.
func checkReserialize(t *testing.T, l gopacket.SerializableLayer, data, payload []byte) {
	t.Helper()
	for _, opts := range []gopacket.SerializeOptions{{}, {FixLengths: true, ComputeChecksums: true}} {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, opts, l, gopacket.Payload(payload)); err != nil {
			t.Fatalf("%v: serialize: %v", l.LayerType(), err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Errorf("%v %+v: serialized\n%x, want\n%x", l.LayerType(), opts, buf.Bytes(), data)
		}
	}
}

// roundTrip serializes layers (the last one's payload given) with
// FixLengths and ComputeChecksums, decodes the octets back with a
// DecodingLayerParser, and compares every layer.
type layerCase struct {
	name    string
	first   gopacket.LayerType
	layers  []gopacket.SerializableLayer
	payload []byte
}

func layerCases() []layerCase {
	crc := MPAFraming{CRC: true, FullOperation: true}
	marked := MPAFraming{CRC: true, Markers: true, StreamOffset: 500, FullOperation: true}
	noCRC := MPAFraming{FullOperation: true}
	rrq := &RDMAPReadRequest{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5}
	termDDP := mustHex(nil, "414300000000000000070000000100000000")
	return []layerCase{
		{"request rev1", LayerTypeMPAStartup, []gopacket.SerializableLayer{&MPAStartup{Frame: mpa.Frame{Rev: 1, Markers: true}}}, []byte("pd")},
		{"request rev2 enhanced", LayerTypeMPAStartup, []gopacket.SerializableLayer{&MPAStartup{Frame: mpa.Frame{Rev: 2, CRC: true,
			Enhanced: true, IRD: 0x3fff, ORD: 7, P2P: true, RTRSend: true, RTRWrite: true, RTRRead: true}}}, []byte("hello")},
		{"reply reject reserved", LayerTypeMPAStartup, []gopacket.SerializableLayer{&MPAStartup{Frame: mpa.Frame{Reply: true, Rev: 1,
			Reject: true, Reserved: 0x08}}}, nil},
		{"send crc", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: crc}, &DDP{Last: true, Version: 1, RDMAPVersion: 1,
			Opcode: OpSend, MSN: 1}}, []byte("0123456789abcdef")},
		{"write pad 3 no crc", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: noCRC}, &DDP{Tagged: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpWrite, STag: 0xdeadbe00, TO: 1 << 60}}, []byte("abc")},
		{"send inv markers", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: marked}, &DDP{Last: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpSendSEInv, InvalidateSTag: 0x12345678, MSN: 9, MO: 100}}, pattern(1500, 3)},
		{"read request", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: crc}, &DDP{Last: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpReadRequest, QN: 1, MSN: 1}, rrq}, nil},
		{"terminate rfc", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: crc}, &DDP{Last: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpTerminate, QN: 2, MSN: 1}, &RDMAPTerminate{Terminate: wire.Terminate{Layer: wire.LayerRDMAP,
			EType: 1, Code: 0, M: true, D: true, R: true, SegLen: 28, DDPHeader: termDDP,
			RDMAHeader: mustHex(nil, "00000001000000000000000200000003000000040000000000000005")}}}, nil},
		{"terminate siw", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: noCRC}, &DDP{Last: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpTerminate, QN: 2, MSN: 1}, &RDMAPTerminate{Terminate: wire.Terminate{Layer: wire.LayerDDP,
			EType: 2, Code: 1, M: true, D: true, SegLen: 16, DDPHeader: termDDP, Layout: wire.LayoutSiw}}}, nil},
		{"atomic request", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: crc}, &DDP{Last: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpAtomicRequest, QN: 3, MSN: 4}, &RDMAPAtomicRequest{AtomicRequest: wire.AtomicRequest{
			Op: wire.AtomicCmpSwap, Reserved: 0xabc0, ReqID: 9, STag: 10, TO: 11, AddSwap: 12, AddSwapMask: 13, Compare: 14, CompareMask: 15}}}, nil},
		{"atomic response", LayerTypeMPA, []gopacket.SerializableLayer{&MPA{Framing: crc}, &DDP{Last: true, Version: 1,
			RDMAPVersion: 1, Opcode: OpAtomicResponse, QN: 3, MSN: 4}, &RDMAPAtomicResponse{AtomicResponse: wire.AtomicResponse{
			ReqID: 9, OriginalValue: 1 << 63}}}, nil},
		{"bad versions and reserved bits", LayerTypeDDP, []gopacket.SerializableLayer{&DDP{Version: 0, Reserved: 0x3c,
			RDMAPVersion: 2, RDMAPReserved: 0x30, Opcode: 15, QN: 5}}, []byte{1}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range layerCases() {
		t.Run(tc.name, func(t *testing.T) {
			buf := gopacket.NewSerializeBuffer()
			ls := append(tc.layers[:len(tc.layers):len(tc.layers)], gopacket.Payload(tc.payload))
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
				t.Fatal(err)
			}
			wire := bytes.Clone(buf.Bytes())
			// Decode with fresh layers, framed as the originals.
			var dec []gopacket.DecodingLayer
			for _, l := range tc.layers {
				switch l := l.(type) {
				case *MPA:
					dec = append(dec, &MPA{Framing: l.Framing})
				case *MPAStartup:
					dec = append(dec, &MPAStartup{})
				case *DDP:
					dec = append(dec, &DDP{})
				case *RDMAPReadRequest:
					dec = append(dec, &RDMAPReadRequest{})
				case *RDMAPTerminate:
					dec = append(dec, &RDMAPTerminate{})
				case *RDMAPAtomicRequest:
					dec = append(dec, &RDMAPAtomicRequest{})
				case *RDMAPAtomicResponse:
					dec = append(dec, &RDMAPAtomicResponse{})
				}
			}
			var pl gopacket.Payload
			p := gopacket.NewDecodingLayerParser(tc.first, append(dec, &pl)...)
			var got []gopacket.LayerType
			err := p.DecodeLayers(wire, &got)
			var ve *ddp.VersionError
			if err != nil && !errors.As(err, &ve) {
				t.Fatal(err)
			}
			for i, l := range tc.layers {
				want := l
				if m, ok := want.(*MPA); ok {
					// SerializeTo stored the length and CRC it wrote.
					m.WireLen, m.CRCValid = len(wire), m.Framing.CRC
					if m.Framing.Markers {
						_, m.MarkerCount = mpa.MarkedLen(m.Framing.StreamOffset, mpa.FPDULen(int(m.ULPDULength)))
						m.MarkersValid = true
					}
					m.Padding = make([]byte, mpa.PadLen(int(m.ULPDULength)))
				}
				if s, ok := want.(*MPAStartup); ok {
					s.PrivateData = tc.payload
				}
				if d := cmp.Diff(want, dec[i], cmpLayers); d != "" {
					t.Errorf("layer %d (-serialized +decoded):\n%s", i, d)
				}
			}
			if errors.As(err, &ve) {
				return // the DDP layer reported the version it decoded
			}
			if !bytes.Equal(pl, tc.payload) {
				t.Errorf("payload %x, want %x", pl, tc.payload)
			}
			// Decoded layers serialize back to the same octets.
			buf2 := gopacket.NewSerializeBuffer()
			ls2 := []gopacket.SerializableLayer{}
			for _, d := range dec {
				ls2 = append(ls2, d.(gopacket.SerializableLayer))
			}
			ls2 = append(ls2, pl)
			if err := gopacket.SerializeLayers(buf2, gopacket.SerializeOptions{}, ls2...); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf2.Bytes(), wire) {
				t.Errorf("reserialized\n%x\nwant\n%x", buf2.Bytes(), wire)
			}
		})
	}
}

// TestMarkersAgainstFramer checks the MPA layer's markers against the mpa
// package's Framer (the engine's sender) at many stream offsets.
func TestMarkersAgainstFramer(t *testing.T) {
	d := DDP{Last: true, Version: 1, RDMAPVersion: 1, Opcode: OpSend, MSN: 1}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &d); err != nil {
		t.Fatal(err)
	}
	hdr := bytes.Clone(buf.Bytes())
	for _, pos := range []uint64{0, 4, 8, 252, 508, 512, 1020, 1 << 40} {
		for _, n := range []int{0, 1, 2, 3, 490, 491, 1000, 5000} {
			payload := pattern(n, byte(n))
			fr := mpa.Framer{CRC: true, Markers: true, Pos: pos}
			want := fr.AppendFPDU(nil, hdr, payload)
			m := MPA{Framing: MPAFraming{CRC: true, Markers: true, StreamOffset: pos, FullOperation: true}}
			got := fpdu(t, m.Framing, d, nil, payload)
			if !bytes.Equal(got, want) {
				t.Fatalf("pos %d n %d: layer\n%x\nFramer\n%x", pos, n, got, want)
			}
			if err := m.DecodeFromBytes(want, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if !m.CRCValid || !m.MarkersValid || m.WireLen != len(want) || !bytes.Equal(m.Payload[len(hdr):], payload) {
				t.Errorf("pos %d n %d: %+v", pos, n, m)
			}
			if _, markers := mpa.MarkedLen(pos, mpa.FPDULen(len(hdr)+n)); markers != m.MarkerCount {
				t.Errorf("pos %d n %d: %d markers, want %d", pos, n, m.MarkerCount, markers)
			}
		}
	}
	// A marker with a wrong FPDUPTR is reported.
	fr := mpa.Framer{Markers: true, Pos: 0}
	b := fr.AppendFPDU(nil, hdr, pattern(600, 1))
	b[3] ^= 1 // the first marker's FPDUPTR
	m := MPA{Framing: MPAFraming{Markers: true, FullOperation: true}}
	if err := m.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil || m.MarkersValid {
		t.Errorf("bad marker: err %v valid %v", err, m.MarkersValid)
	}
}

func TestSerializeBadCRC(t *testing.T) {
	m := MPA{Framing: MPAFraming{CRC: true, FullOperation: true}, CRC: 0xdeadbeef}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, &m, gopacket.Payload(pattern(20, 1))); err != nil {
		t.Fatal(err)
	}
	var d MPA
	d.Framing = m.Framing
	if err := d.DecodeFromBytes(buf.Bytes(), gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	if d.CRC != 0xdeadbeef || d.CRCValid {
		t.Errorf("CRC %#x valid %v", d.CRC, d.CRCValid)
	}
	// Without CRC in use, ComputeChecksums writes a zero CRC field.
	m = MPA{Framing: MPAFraming{FullOperation: true}, CRC: 0xdeadbeef}
	buf = gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, &m, gopacket.Payload(pattern(20, 1))); err != nil {
		t.Fatal(err)
	}
	if tail := buf.Bytes()[len(buf.Bytes())-4:]; !bytes.Equal(tail, []byte{0, 0, 0, 0}) || m.CRC != 0 {
		t.Errorf("CRC field %x, m.CRC %#x", tail, m.CRC)
	}
}

func TestSerializeErrors(t *testing.T) {
	for name, l := range map[string]gopacket.SerializableLayer{
		"ddp version":        &DDP{Version: 4},
		"ddp reserved":       &DDP{Reserved: 0x01},
		"rdmap version":      &DDP{RDMAPVersion: 4},
		"opcode":             &DDP{Opcode: 16},
		"terminate no hdr":   &RDMAPTerminate{Terminate: wire.Terminate{D: true}},
		"terminate short rr": &RDMAPTerminate{Terminate: wire.Terminate{R: true, RDMAHeader: []byte{1}}},
		"atomic op":          &RDMAPAtomicRequest{AtomicRequest: wire.AtomicRequest{Op: 16}},
		"ird":                &MPAStartup{Frame: mpa.Frame{Rev: 2, Enhanced: true, IRD: 0x4000}},
		"startup marker":     &MPA{Startup: true},
	} {
		if err := gopacket.SerializeLayers(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{FixLengths: true}, l); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := gopacket.SerializeLayers(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{FixLengths: true},
		&MPA{}, gopacket.Payload(make([]byte, 65536))); err == nil {
		t.Error("ULPDU of 65536 octets: no error")
	}
}

// TestTruncations decodes every prefix of a valid frame of each layer:
// each is an error (and marked truncated), never a panic or a success.
func TestTruncations(t *testing.T) {
	cases := []struct {
		name string
		l    gopacket.DecodingLayer
		data []byte
	}{
		{"MPAStartup", &MPAStartup{}, mustHex(t, siwRequestHex)},
		{"MPA", &MPA{Framing: MPAFraming{CRC: true, FullOperation: true}}, mustHex(t, siwReadRequestHex)},
		{"MPA markers", &MPA{Framing: MPAFraming{Markers: true, FullOperation: true}},
			(&mpa.Framer{Markers: true}).AppendFPDU(nil, nil, pattern(1100, 1))},
		{"DDP tagged", &DDP{}, mustHex(t, siwReadResponseHex)[2:16]},
		{"DDP untagged", &DDP{}, mustHex(t, siwSendHex)[2:20]},
		{"ReadRequest", &RDMAPReadRequest{}, mustHex(t, siwReadRequestHex)[20:48]},
		{"Terminate", &RDMAPTerminate{}, mustHex(t, siwTerminateHex)[18:42]},
		{"AtomicRequest", &RDMAPAtomicRequest{}, make([]byte, wire.AtomicRequestLen)},
		{"AtomicResponse", &RDMAPAtomicResponse{}, make([]byte, wire.AtomicResponseLen)},
	}
	for _, c := range cases {
		if err := c.l.DecodeFromBytes(c.data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("%s: whole frame: %v", c.name, err)
		}
		for i := range c.data {
			var df truncFeedback
			if err := c.l.DecodeFromBytes(c.data[:i], &df); err == nil || !df.truncated {
				t.Errorf("%s: %d of %d octets: err %v truncated %v", c.name, i, len(c.data), err, df.truncated)
			}
		}
	}
}

type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }

// TestZeroAlloc asserts that DecodeFromBytes of every layer allocates
// nothing (the MPA layer's marker buffer after its first use).
func TestZeroAlloc(t *testing.T) {
	for _, c := range decodeBenchCases(t) {
		c.l.DecodeFromBytes(c.data, gopacket.NilDecodeFeedback) // warm the marker buffer
		if n := testing.AllocsPerRun(100, func() {
			if err := c.l.DecodeFromBytes(c.data, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per DecodeFromBytes", c.name, n)
		}
	}
}

type decodeCase struct {
	name string
	l    gopacket.DecodingLayer
	data []byte
}

func decodeBenchCases(tb testing.TB) []decodeCase {
	terminate := mustHex(tb, siwTerminateHex)[18:]
	return []decodeCase{
		{"MPAStartup", &MPAStartup{}, mustHex(tb, siwRequestHex)},
		{"MPA", &MPA{Framing: MPAFraming{CRC: true, FullOperation: true}}, mustHex(tb, siwReadResponseHex)},
		{"MPAMarkers", &MPA{Framing: MPAFraming{CRC: true, Markers: true, FullOperation: true}},
			(&mpa.Framer{CRC: true, Markers: true}).AppendFPDU(nil, nil, pattern(4000, 1))},
		{"DDP", &DDP{}, mustHex(tb, siwSendHex)[2:]},
		{"RDMAPReadRequest", &RDMAPReadRequest{}, mustHex(tb, siwReadRequestHex)[20:48]},
		{"RDMAPTerminate", &RDMAPTerminate{}, terminate},
		{"RDMAPAtomicRequest", &RDMAPAtomicRequest{}, make([]byte, wire.AtomicRequestLen)},
		{"RDMAPAtomicResponse", &RDMAPAtomicResponse{}, make([]byte, wire.AtomicResponseLen)},
	}
}

func benchDecode(b *testing.B, name string) {
	for _, c := range decodeBenchCases(b) {
		if c.name != name {
			continue
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(c.data)))
		for b.Loop() {
			if err := c.l.DecodeFromBytes(c.data, gopacket.NilDecodeFeedback); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.Fatalf("no case %s", name)
}

func BenchmarkDecodeMPAStartup(b *testing.B)          { benchDecode(b, "MPAStartup") }
func BenchmarkDecodeMPA(b *testing.B)                 { benchDecode(b, "MPA") }
func BenchmarkDecodeMPAMarkers(b *testing.B)          { benchDecode(b, "MPAMarkers") }
func BenchmarkDecodeDDP(b *testing.B)                 { benchDecode(b, "DDP") }
func BenchmarkDecodeRDMAPReadRequest(b *testing.B)    { benchDecode(b, "RDMAPReadRequest") }
func BenchmarkDecodeRDMAPTerminate(b *testing.B)      { benchDecode(b, "RDMAPTerminate") }
func BenchmarkDecodeRDMAPAtomicRequest(b *testing.B)  { benchDecode(b, "RDMAPAtomicRequest") }
func BenchmarkDecodeRDMAPAtomicResponse(b *testing.B) { benchDecode(b, "RDMAPAtomicResponse") }

// TestNewPacket decodes whole captured packets with gopacket.NewPacket
// after RegisterPort, the per-packet path (a test may change gopacket's
// port table; library code never does).
func TestNewPacket(t *testing.T) {
	RegisterPort(7174)
	datagrams := gopacket.DecodeOptions{DecodeStreamsAsDatagrams: true}
	eth := func(payload []byte) []byte {
		p := synthPkt{src: netip.MustParseAddrPort("127.0.0.1:40000"), dst: netip.MustParseAddrPort("127.0.0.1:7174"),
			seq: 1, ack: 1, ackFlag: true, payload: payload}
		return p.frame(t)
	}
	pkt := gopacket.NewPacket(eth(mustHex(t, siwRequestHex)), gplayers.LayerTypeEthernet, datagrams)
	if pkt.ErrorLayer() != nil {
		t.Fatal(pkt.ErrorLayer().Error())
	}
	s, ok := pkt.Layer(LayerTypeMPAStartup).(*MPAStartup)
	if !ok || !s.Enhanced || s.IRD != 1 || pkt.ApplicationLayer() != s {
		t.Fatalf("layers %v", pkt.Layers())
	}
	pkt = gopacket.NewPacket(eth(mustHex(t, siwReadRequestHex)), gplayers.LayerTypeEthernet, datagrams)
	if pkt.ErrorLayer() != nil {
		t.Fatal(pkt.ErrorLayer().Error())
	}
	rr, ok := pkt.Layer(LayerTypeRDMAPReadRequest).(*RDMAPReadRequest)
	if !ok || rr.Size != 64 || pkt.Layer(LayerTypeMPA) == nil || pkt.Layer(LayerTypeDDP) == nil {
		t.Fatalf("layers %v", pkt.Layers())
	}
	// Per packet, nothing says CRC was negotiated: CRCValid stays unset.
	if m := pkt.Layer(LayerTypeMPA).(*MPA); m.CRCValid || m.CRC != 0xb43286a6 {
		t.Errorf("MPA %+v", m)
	}
}
