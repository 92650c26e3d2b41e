package layers

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/gosiw/gosiw/mpa"
)

// MPAFraming says how the FPDUs of one direction of a connection are
// framed: what the MPA handshake negotiated (RFC 5044 §7.1). It is the
// configuration of an MPA layer, not decoded from the bytes: DecodeFromBytes
// keeps it, and SerializeTo uses it.
type MPAFraming struct {
	// CRC: the CRC field carries a CRC32c (either side set C). When set,
	// DecodeFromBytes checks it (MPA.CRCValid) and SerializeTo with
	// ComputeChecksums computes it; when not, SerializeTo with
	// ComputeChecksums writes zero, as RFC 5044 §4.1 requires.
	CRC bool
	// Markers: the sender of this direction inserts markers (the receiver
	// asked for them with M). StreamOffset is the marker position of the
	// first byte given to DecodeFromBytes: its distance from the first octet
	// of the direction's first FPDU (RFC 5044 §5), always a multiple of 4.
	Markers      bool
	StreamOffset uint64
	// FullOperation: the connection is past its Request/Reply exchange, so
	// the bytes are an FPDU even if they begin with one of the two 16-byte
	// keys. Without it, DecodeFromBytes hands data that begins with a key to
	// the MPAStartup layer.
	FullOperation bool
}

// MPA is one FPDU (RFC 5044 §4.1), the unit MPA frames DDP segments in:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          ULPDU_Length         |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~                   ULPDU (the DDP segment)                     ~
//	|                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |        PAD (0-3 octets)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             CRC                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// with, when markers are in use, a 4-byte marker at every 512th octet of
// the stream. Contents is ULPDU_Length (and a marker in front of it);
// Payload is the ULPDU with markers removed; Padding and CRC hold the
// trailer. Per-packet decoding reads one FPDU from the start of the data;
// WireLen tells where the next one begins.
//
// When Framing.FullOperation is false and the data begins with the key of
// an MPA Request or Reply, DecodeFromBytes only sets Startup: the layer is
// then empty, its Payload is all the data and NextLayerType is
// LayerTypeMPAStartup.
//
// An MPA must be used from one goroutine.
type MPA struct {
	gplayers.BaseLayer
	// Framing is configuration; DecodeFromBytes keeps it.
	Framing MPAFraming

	// Startup: the data begins with an MPA Request/Reply key (see above).
	Startup bool
	// ULPDULength is the ULPDU_Length field.
	ULPDULength uint16
	// Padding holds the pad octets (0 to 3; zero on the wire).
	Padding []byte
	// CRC is the CRC field as the 32-bit number its octets spell in network
	// order, which is how Wireshark shows it (mpa.WireCRC). Linux siw puts
	// the CRC32c value on the wire little-endian, so this is the CRC32c
	// value byte-swapped.
	CRC uint32
	// CRCValid reports a good CRC32c. It is computed only when
	// Framing.CRC is set, and false otherwise.
	CRCValid bool
	// WireLen is the number of octets the FPDU occupies on the wire,
	// markers included.
	WireLen int
	// MarkerCount is the number of markers inside the FPDU. With markers
	// in use, MarkersValid reports that each of them (if any) has a zero
	// RESERVED half and an FPDUPTR pointing back to the start of this FPDU
	// (RFC 5044 §5.1); a receiver that finds otherwise terminates with
	// "marker and ULPDU length mismatch" (mpa.TermMarker).
	MarkerCount  int
	MarkersValid bool

	plain []byte // the FPDU with markers removed; reused
}

// Errors from the MPA layers.
var (
	errMPAStartupFrame = errors.New("layers: MPA layer marks a Request/Reply frame; serialize an MPAStartup layer instead")
	errULPDUTooLong    = errors.New("layers: ULPDU longer than 65535 octets")
	errStreamOffset    = errors.New("layers: MPA stream offset not a multiple of 4")
)

// LayerType returns LayerTypeMPA.
func (m *MPA) LayerType() gopacket.LayerType { return LayerTypeMPA }

// CanDecode returns LayerTypeMPA.
func (m *MPA) CanDecode() gopacket.LayerClass { return LayerTypeMPA }

// NextLayerType returns LayerTypeDDP, or LayerTypeMPAStartup when the data
// began with a Request/Reply key.
func (m *MPA) NextLayerType() gopacket.LayerType {
	if m.Startup {
		return LayerTypeMPAStartup
	}
	return LayerTypeDDP
}

// IsStartupFrame reports whether b begins with the key of an MPA Request
// or Reply frame ("MPA ID Req Frame" or "MPA ID Rep Frame").
func IsStartupFrame(b []byte) bool {
	if len(b) < mpa.KeyLen {
		return false
	}
	k := [mpa.KeyLen]byte(b[:mpa.KeyLen])
	return k == mpa.KeyRequest || k == mpa.KeyReply
}

// DecodeFromBytes decodes the FPDU at the start of data, framed as
// m.Framing says. It resets every decoded field, does not allocate once the
// marker scratch buffer has grown, and leaves Contents, Payload and Padding
// aliasing data (or the scratch buffer, when markers were removed; then
// they stay valid until the next call). A bad CRC is not an error: it shows
// in CRCValid.
func (m *MPA) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	fr, plain := m.Framing, m.plain[:0]
	*m = MPA{Framing: fr, plain: plain}
	if !fr.FullOperation && IsStartupFrame(data) {
		m.Startup = true
		m.Payload = data
		return nil
	}
	if fr.Markers && fr.StreamOffset%4 != 0 {
		// FPDUs and markers are multiples of 4 octets, so every FPDU
		// starts at a multiple of 4; anything else is a caller's error.
		return errStreamOffset
	}
	// A marker may sit right where the FPDU begins; it belongs to this
	// FPDU (RFC 5044 §5) and precedes ULPDU_Length, which then ends where
	// mpa's marker layout puts the FPDU's first LengthFieldLen bytes.
	lenAt := 0
	if fr.Markers {
		ml, _ := mpa.MarkedLen(fr.StreamOffset, mpa.LengthFieldLen)
		lenAt = ml - mpa.LengthFieldLen
	}
	if len(data) < lenAt+mpa.LengthFieldLen {
		df.SetTruncated()
		return mpa.ErrFPDUTruncated
	}
	n := int(binary.BigEndian.Uint16(data[lenAt:]))
	wire, markers := mpa.FPDULen(n), 0
	if fr.Markers {
		wire, markers = mpa.MarkedLen(fr.StreamOffset, wire)
	}
	if len(data) < wire {
		df.SetTruncated()
		return mpa.ErrFPDUTruncated
	}
	raw := data[:wire]
	body := raw
	if markers > 0 {
		m.plain = mpa.RemoveMarkers(m.plain[:0], raw, fr.StreamOffset)
		body = m.plain
	}
	if fr.Markers {
		m.MarkersValid = mpa.MarkersValid(raw, fr.StreamOffset)
	}
	f, err := mpa.ParseFPDU(body, false)
	if err != nil {
		return err // cannot happen: body holds the whole FPDU
	}
	m.ULPDULength = uint16(n)
	m.Contents = raw[:lenAt+mpa.LengthFieldLen]
	m.Payload = f.ULPDU
	m.Padding = body[mpa.LengthFieldLen+n : mpa.LengthFieldLen+n+mpa.PadLen(n)]
	m.CRC = f.CRC
	m.WireLen = wire
	m.MarkerCount = markers
	if fr.CRC {
		// The CRC covers every octet before the CRC field, markers
		// included (RFC 5044 §4.1, §5).
		m.CRCValid = mpa.UpdateCRC(0, raw[:wire-mpa.CRCLen]) == mpa.GetCRC(raw[wire-mpa.CRCLen:])
	}
	return nil
}

// SerializeTo frames the bytes already in b (the ULPDU) as one FPDU:
// ULPDU_Length in front, pad and CRC behind, and markers if
// m.Framing.Markers. With opts.FixLengths ULPDU_Length is the ULPDU's
// length, otherwise m.ULPDULength; with opts.ComputeChecksums the CRC
// field is the CRC32c (or zero without m.Framing.CRC), otherwise m.CRC as
// given, so tests can build frames with a bad CRC. Pad octets are
// m.Padding when it has the right length, zeros otherwise. SerializeTo
// stores the length and CRC it wrote back into m.
func (m *MPA) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if m.Startup {
		return errMPAStartupFrame
	}
	if m.Framing.Markers && m.Framing.StreamOffset%4 != 0 {
		return errStreamOffset
	}
	n := len(b.Bytes())
	if n > mpa.MaxULPDU {
		return errULPDUTooLong
	}
	if opts.FixLengths {
		m.ULPDULength = uint16(n)
	}
	hdr, err := b.PrependBytes(mpa.LengthFieldLen)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint16(hdr, m.ULPDULength)
	padLen := mpa.PadLen(n)
	tr, err := b.AppendBytes(padLen + mpa.CRCLen)
	if err != nil {
		return err
	}
	if len(m.Padding) == padLen {
		copy(tr, m.Padding)
	} else {
		clear(tr[:padLen])
	}
	crcField := tr[padLen:]
	computeCRC := opts.ComputeChecksums && m.Framing.CRC
	if !computeCRC {
		if opts.ComputeChecksums {
			m.CRC = 0
		}
		binary.BigEndian.PutUint32(crcField, m.CRC)
	}
	if !m.Framing.Markers {
		if computeCRC {
			all := b.Bytes()
			mpa.PutCRC(crcField, mpa.UpdateCRC(0, all[:len(all)-mpa.CRCLen]))
		}
		m.CRC = mpa.WireCRC(crcField)
		return nil
	}
	marked, _ := mpa.InsertMarkers(nil, b.Bytes(), m.Framing.StreamOffset, computeCRC)
	if _, err := b.PrependBytes(len(marked) - len(b.Bytes())); err != nil {
		return err
	}
	copy(b.Bytes(), marked)
	m.CRC = mpa.WireCRC(marked[len(marked)-mpa.CRCLen:])
	return nil
}

// String describes the FPDU briefly.
func (m *MPA) String() string {
	if m.Startup {
		return "MPA Request/Reply"
	}
	return fmt.Sprintf("FPDU ulpdu %d crc %#08x", m.ULPDULength, m.CRC)
}

func decodeMPA(data []byte, p gopacket.PacketBuilder) error {
	if IsStartupFrame(data) {
		return decodeMPAStartup(data, p)
	}
	m := &MPA{}
	if err := m.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(m)
	return p.NextDecoder(m.NextLayerType())
}

// MPAStartup is an MPA Request or Reply frame (RFC 5044 §7.1) with the
// RFC 6581 enhanced connection setup block:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~      Key: "MPA ID Req Frame" or "MPA ID Rep Frame" (16)       ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|H| Res   |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|B|         IRD (if H)        |C|D|         ORD (if H)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~                  Private Data (the ULP's)                     ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The fields are those of mpa.Frame, which decodes them (ParseFrame).
// Contents is the header with the RFC 6581 block; Payload is the ULP
// private data (mpa.Frame.PrivateData), and NextLayerType is
// gopacket.LayerTypePayload. A frame whose reserved flag bits are set
// decodes without error (RFC 5044: ignored on receipt); they show in
// Frame.Reserved.
//
// An MPAStartup must be used from one goroutine.
type MPAStartup struct {
	gplayers.BaseLayer
	mpa.Frame
}

// LayerType returns LayerTypeMPAStartup.
func (s *MPAStartup) LayerType() gopacket.LayerType { return LayerTypeMPAStartup }

// CanDecode returns LayerTypeMPAStartup.
func (s *MPAStartup) CanDecode() gopacket.LayerClass { return LayerTypeMPAStartup }

// NextLayerType returns gopacket.LayerTypePayload: the private data.
func (s *MPAStartup) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes the Request or Reply frame at the start of data
// with mpa.ParseFrame. Octets after the frame are not part of the layer.
// It does not allocate; the slices alias data.
func (s *MPAStartup) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*s = MPAStartup{}
	n, err := mpa.ParseFrame(data, &s.Frame)
	switch {
	case errors.Is(err, mpa.ErrTruncated):
		df.SetTruncated()
		return err
	case err != nil && !errors.Is(err, mpa.ErrReservedBits):
		return err
	}
	s.Contents = data[:n-len(s.PrivateData)]
	s.BaseLayer.Payload = s.PrivateData
	return nil
}

// SerializeTo prepends the frame header (and the RFC 6581 block when
// Enhanced) to the bytes already in b, which are the private data. With
// opts.FixLengths PD_Length counts them (and the block); otherwise it is
// s.PDLength as given. Frame.PrivateData is not read: serialize the
// private data as a gopacket.Payload layer.
func (s *MPAStartup) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	f := s.Frame
	f.PrivateData = nil
	var scratch [mpa.HeaderLen + mpa.EnhancedLen]byte
	hdr, err := mpa.AppendFrame(scratch[:0], &f)
	if err != nil {
		return err
	}
	pdLen := len(b.Bytes()) + len(hdr) - mpa.HeaderLen
	if pdLen > 0xffff {
		return fmt.Errorf("layers: MPA private data of %d octets does not fit PD_Length", pdLen)
	}
	if opts.FixLengths {
		s.PDLength = uint16(pdLen)
	}
	bytes, err := b.PrependBytes(len(hdr))
	if err != nil {
		return err
	}
	copy(bytes, hdr)
	binary.BigEndian.PutUint16(bytes[mpa.HeaderLen-2:], s.PDLength)
	return nil
}

func decodeMPAStartup(data []byte, p gopacket.PacketBuilder) error {
	s := &MPAStartup{}
	if err := s.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(s)
	p.SetApplicationLayer(s)
	return p.NextDecoder(s.NextLayerType())
}

// Payload returns the ULP private data (gopacket.ApplicationLayer).
func (s *MPAStartup) Payload() []byte { return s.BaseLayer.Payload }
