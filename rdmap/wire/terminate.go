package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
)

// Terminate message (RFC 5040 §4.8), sent as an untagged DDP message on
// QN 2 with MSN and MO 0 for the first (and only) segment:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|       Reserved          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      DDP Segment Length       |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~     Terminated DDP Header (14 or 18 bytes, if D)              ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~     Terminated RDMA Header (28 bytes, if R)                   ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M: the DDP Segment Length is valid; D: the terminated DDP header is
// included; R: the terminated RDMAP header (a Read Request's) is included.
// The DDP Segment Length field is present whenever M, D or R is set (Linux
// siw fills it with the terminated segment's payload length).
//
// Linux siw builds the control word from C bitfields, so on x86 its bytes
// are not in RFC order: byte 0 holds EType in the high nibble and Layer in
// the low one, and M/D/R are bits 0/1/2 of byte 2. ParseTerminate detects
// that layout (see DetectLayout) and reports it; AppendTerminate can write
// it for a siw peer that should log the right codes.
const (
	TermCtrlLen   = 4
	TermSegLenLen = 2
	termFlagM     = 0x80
	termFlagD     = 0x40
	termFlagR     = 0x20
	siwFlagM      = 0x01
	siwFlagD      = 0x02
	siwFlagR      = 0x04
)

// Layer is the layer field of a Terminate.
type Layer uint8

// Terminate layers.
const (
	LayerRDMAP Layer = 0
	LayerDDP   Layer = 1
	LayerLLP   Layer = 2
)

func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return fmt.Sprintf("unknown(%d)", uint8(l))
}

// RDMAP error types (RFC 5040 §7.1).
const (
	ETypeLocalCatastrophic = 0x0
	ETypeRemoteProtection  = 0x1
	ETypeRemoteOperation   = 0x2
)

// RDMAP error codes (RFC 5040 §7.2; RFC 7306 adds none).
const (
	CodeInvalidSTag          = 0x00
	CodeBaseBounds           = 0x01
	CodeAccessRights         = 0x02
	CodeSTagNotAssoc         = 0x03
	CodeTOWrap               = 0x04
	CodeInvalidVersion       = 0x05
	CodeUnexpectedOpcode     = 0x06
	CodeCatastrophicStream   = 0x07
	CodeCatastrophicGlobal   = 0x08
	CodeCannotInvalidate     = 0x09
	CodeUnspecified          = 0xff
	CodeLocalCatastrophicAll = 0x00 // the code of a local catastrophic error
)

// Layout says how a Terminate control word is laid out.
type Layout uint8

const (
	// LayoutRFC is RFC 5040's order.
	LayoutRFC Layout = iota
	// LayoutSiw is Linux siw's little-endian bitfield order.
	LayoutSiw
)

func (l Layout) String() string {
	if l == LayoutSiw {
		return "siw"
	}
	return "rfc"
}

// Terminate is a decoded Terminate message.
type Terminate struct {
	Layer   Layer
	EType   uint8
	Code    uint8
	M, D, R bool
	// Reserved holds reserved control bits as found (in the layout read).
	Reserved uint16
	// SegLen is the DDP Segment Length (when M, D or R is set).
	SegLen uint16
	// DDPHeader and RDMAHeader are the terminated headers when D and R
	// are set; they alias the parsed bytes.
	DDPHeader  []byte
	RDMAHeader []byte
	// Layout is the control word layout the parser found (or the one
	// AppendTerminate writes).
	Layout Layout
}

// ErrTerminateShort is returned for a Terminate cut short.
var ErrTerminateShort = errors.New("rdmap: short terminate message")

func validPair(layer, etype uint8) bool {
	switch Layer(layer) {
	case LayerRDMAP:
		return etype <= ETypeRemoteOperation
	case LayerDDP:
		return etype <= uint8(ddp.ErrTypeLLP)
	case LayerLLP:
		return etype == mpa.TermTypeMPA
	}
	return false
}

// validCode reports whether code is defined for the layer and error type
// (RFC 5040 §7.2 for RDMAP, RFC 5041 §7.2 for DDP, the MPA codes of
// RFC 5044 and RFC 6581 for the LLP; the same table as Wireshark's
// packet-iwarp-ddp-rdmap.c, with RDMAP's codes split by error type). DDP's
// type 3, reserved for the LLP, takes any code.
func validCode(layer, etype, code uint8) bool {
	switch Layer(layer) {
	case LayerRDMAP:
		switch etype {
		case ETypeLocalCatastrophic:
			// RFC 5040 has 0x00; Linux siw sends 0xff (RDMAP_ECODE_UNSPECIFIED).
			return code == CodeLocalCatastrophicAll || code == CodeUnspecified
		case ETypeRemoteProtection:
			return code <= CodeTOWrap || code == CodeCannotInvalidate || code == CodeUnspecified
		case ETypeRemoteOperation:
			return code >= CodeInvalidVersion && code <= CodeCannotInvalidate || code == CodeUnspecified
		}
	case LayerDDP:
		switch ddp.ErrorType(etype) {
		case ddp.ErrTypeLocalCatastrophic:
			return ddp.ErrorCode(code) == ddp.CodeLocalCatastrophic
		case ddp.ErrTypeTagged:
			return ddp.ErrorCode(code) <= ddp.CodeTaggedVersion
		case ddp.ErrTypeUntagged:
			return ddp.ErrorCode(code) >= ddp.CodeInvalidQN && ddp.ErrorCode(code) <= ddp.CodeUntaggedVersion
		case ddp.ErrTypeLLP:
			return true
		}
	case LayerLLP:
		return etype == mpa.TermTypeMPA && mpa.TermCode(code) >= mpa.TermTCPClosed && mpa.TermCode(code) <= mpa.TermNoMatchingRTR
	}
	return false
}

// DetectLayout guesses which layout the 4-byte control word c uses. A word
// is taken as siw's only when byte 2 has none of the RFC's M/D/R bits
// (bits 7-5, reserved in siw's layout, which siw leaves zero) and siw's
// reading is a valid layer/type pair, and then when one of these holds:
//
//  1. one of siw's M/D/R bits (bits 0-2 of byte 2) is set;
//  2. the RFC reading is an impossible layer/type pair;
//  3. both pairs are possible, but the error code is undefined for the RFC
//     pair and defined for siw's (siw's MPA CRC error 02 02 00 00 reads
//     the RFC way as RDMAP/remote operation/0x02, which RFC 5040 does not
//     define).
//
// Everything else is taken as RFC. That leaves words that are valid both
// ways and carry no flags; they are read the RFC way, which is wrong for a
// siw peer in these cases (byte 0, code):
//
//	20, 05..07: RFC LLP/MPA (local catastrophic, insufficient IRD, no
//	            matching RTR) or siw RDMAP/remote operation (invalid
//	            version, unexpected opcode, catastrophic); siw sends
//	            20 06 00 00 for an unknown RDMAP opcode
//	02, 05..07: RFC RDMAP/remote operation or siw LLP/MPA
//	01, 00:     RFC RDMAP/remote protection/invalid STag or siw
//	            DDP/local catastrophic
//	10, 00:     RFC DDP/local catastrophic or siw RDMAP/remote
//	            protection/invalid STag
//
// (00 and 11 read the same both ways.) A receiver that knows its peer is
// Linux siw should call ParseTerminateLayout with LayoutSiw instead.
func DetectLayout(c []byte) Layout {
	if len(c) < TermCtrlLen || c[2]&0xe0 != 0 {
		return LayoutRFC
	}
	rfcLayer, rfcType := c[0]>>4, c[0]&0xf
	siwLayer, siwType := c[0]&0xf, c[0]>>4
	if !validPair(siwLayer, siwType) {
		return LayoutRFC
	}
	switch {
	case c[2]&0x07 != 0:
		return LayoutSiw
	case !validPair(rfcLayer, rfcType):
		return LayoutSiw
	case !validCode(rfcLayer, rfcType, c[1]) && validCode(siwLayer, siwType, c[1]):
		return LayoutSiw
	}
	return LayoutRFC
}

// ParseTerminate decodes the Terminate message body at b (what follows the
// untagged DDP header), detecting the control word layout.
func ParseTerminate(b []byte, t *Terminate) error {
	if len(b) < TermCtrlLen {
		return ErrTerminateShort
	}
	return ParseTerminateLayout(b, DetectLayout(b), t)
}

// ParseTerminateLayout decodes b reading the control word in layout l.
func ParseTerminateLayout(b []byte, l Layout, t *Terminate) error {
	*t = Terminate{Layout: l}
	if len(b) < TermCtrlLen {
		return ErrTerminateShort
	}
	if l == LayoutSiw {
		t.Layer, t.EType = Layer(b[0]&0xf), b[0]>>4
		t.M, t.D, t.R = b[2]&siwFlagM != 0, b[2]&siwFlagD != 0, b[2]&siwFlagR != 0
		t.Reserved = uint16(b[2]&^0x07)<<8 | uint16(b[3])
	} else {
		t.Layer, t.EType = Layer(b[0]>>4), b[0]&0xf
		t.M, t.D, t.R = b[2]&termFlagM != 0, b[2]&termFlagD != 0, b[2]&termFlagR != 0
		t.Reserved = uint16(b[2]&0x1f)<<8 | uint16(b[3])
	}
	t.Code = b[1]
	rest := b[TermCtrlLen:]
	if !t.M && !t.D && !t.R {
		return nil
	}
	if len(rest) < TermSegLenLen {
		return ErrTerminateShort
	}
	t.SegLen = binary.BigEndian.Uint16(rest)
	rest = rest[TermSegLenLen:]
	if t.D {
		if len(rest) < 1 {
			return ErrTerminateShort
		}
		n := ddp.HeaderLen(rest[0])
		if len(rest) < n {
			return ErrTerminateShort
		}
		t.DDPHeader, rest = rest[:n], rest[n:]
	}
	if t.R {
		if len(rest) < ReadRequestLen {
			return ErrTerminateShort
		}
		t.RDMAHeader = rest[:ReadRequestLen]
	}
	return nil
}

// Len returns the encoded length of t's body.
func (t *Terminate) Len() int {
	n := TermCtrlLen
	if t.M || t.D || t.R {
		n += TermSegLenLen
	}
	if t.D {
		n += len(t.DDPHeader)
	}
	if t.R {
		n += len(t.RDMAHeader)
	}
	return n
}

// AppendTerminate appends the encoded Terminate body (without the DDP
// header) to b in layout t.Layout. DDPHeader and RDMAHeader are written
// when D and R are set; the caller supplies headers of the right length.
func AppendTerminate(b []byte, t *Terminate) []byte {
	var b0, b2 byte
	if t.Layout == LayoutSiw {
		b0 = t.EType<<4 | uint8(t.Layer)&0xf
		if t.M {
			b2 |= siwFlagM
		}
		if t.D {
			b2 |= siwFlagD
		}
		if t.R {
			b2 |= siwFlagR
		}
		b2 |= byte(t.Reserved>>8) &^ 0x07
	} else {
		b0 = uint8(t.Layer)<<4 | t.EType&0xf
		if t.M {
			b2 |= termFlagM
		}
		if t.D {
			b2 |= termFlagD
		}
		if t.R {
			b2 |= termFlagR
		}
		b2 |= byte(t.Reserved>>8) & 0x1f
	}
	b = append(b, b0, t.Code, b2, byte(t.Reserved))
	if t.M || t.D || t.R {
		b = binary.BigEndian.AppendUint16(b, t.SegLen)
	}
	if t.D {
		b = append(b, t.DDPHeader...)
	}
	if t.R {
		b = append(b, t.RDMAHeader...)
	}
	return b
}

// ETypeName names an error type of a layer.
func ETypeName(l Layer, etype uint8) string {
	switch l {
	case LayerRDMAP:
		switch etype {
		case ETypeLocalCatastrophic:
			return "local catastrophic"
		case ETypeRemoteProtection:
			return "remote protection"
		case ETypeRemoteOperation:
			return "remote operation"
		}
	case LayerDDP:
		if etype <= uint8(ddp.ErrTypeLLP) {
			return ddp.ErrorType(etype).String()
		}
	case LayerLLP:
		if etype == mpa.TermTypeMPA {
			return "MPA"
		}
	}
	return fmt.Sprintf("unknown(%d)", etype)
}

// CodeName names an error code of a layer and type.
func CodeName(l Layer, etype, code uint8) string {
	switch l {
	case LayerRDMAP:
		if etype == ETypeLocalCatastrophic {
			if code == CodeLocalCatastrophicAll || code == CodeUnspecified {
				return "unspecified"
			}
			break
		}
		switch code {
		case CodeInvalidSTag:
			return "invalid STag"
		case CodeBaseBounds:
			return "base or bounds violation"
		case CodeAccessRights:
			return "access rights violation"
		case CodeSTagNotAssoc:
			return "STag not associated with RDMAP stream"
		case CodeTOWrap:
			return "TO wrap"
		case CodeInvalidVersion:
			return "invalid RDMAP version"
		case CodeUnexpectedOpcode:
			return "unexpected opcode"
		case CodeCatastrophicStream:
			return "catastrophic error, localized to RDMAP stream"
		case CodeCatastrophicGlobal:
			return "catastrophic error, global"
		case CodeCannotInvalidate:
			return "STag cannot be invalidated"
		case CodeUnspecified:
			return "unspecified error"
		}
	case LayerDDP:
		return ddp.CodeName(ddp.ErrorType(etype), ddp.ErrorCode(code))
	case LayerLLP:
		if etype == mpa.TermTypeMPA {
			return mpa.TermCode(code).String()
		}
	}
	return fmt.Sprintf("unknown(%d)", code)
}

// String describes t as "DDP/untagged buffer: invalid QN".
func (t *Terminate) String() string {
	return fmt.Sprintf("%s/%s: %s", t.Layer, ETypeName(t.Layer, t.EType), CodeName(t.Layer, t.EType, t.Code))
}
