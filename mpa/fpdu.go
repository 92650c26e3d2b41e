package mpa

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// FPDU format (RFC 5044 §4.1):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          ULPDU_Length         |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~                            ULPDU                              ~
//	|                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |        PAD (0-3 octets)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             CRC                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// PAD makes ULPDU_Length + 2 + PAD a multiple of 4. The CRC field is always
// present; it holds zero when CRC is not in use. The CRC is CRC32c
// (Castagnoli) over the whole FPDU before the CRC field, markers included,
// and goes on the wire as Linux siw sends it: the 32-bit value in
// little-endian byte order (siw's __le32; Wireshark's "Good CRC32" agrees).
const (
	// LengthFieldLen is the size of ULPDU_Length.
	LengthFieldLen = 2
	// CRCLen is the size of the CRC field.
	CRCLen = 4
	// MaxULPDU is the largest ULPDU_Length.
	MaxULPDU = 0xffff
	// MinFPDULen is the size of an FPDU with an empty ULPDU.
	MinFPDULen = LengthFieldLen + 2 + CRCLen
	// MarkerInterval is the spacing of markers in the TCP stream.
	MarkerInterval = 512
	// MarkerLen is the size of a marker.
	MarkerLen = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors from FPDU parsing.
var (
	ErrFPDUTruncated = errors.New("mpa: truncated FPDU")
	ErrBadCRC        = errors.New("mpa: CRC mismatch")
	ErrULPDUTooLong  = errors.New("mpa: ULPDU_Length over the receive limit")
)

// PadLen returns the number of pad bytes after a ULPDU of n bytes: what
// brings the length field and the ULPDU to a multiple of 4,
// (4 - (n+LengthFieldLen)%4) % 4, computed as -(n+LengthFieldLen) mod 4.
func PadLen(n int) int { return -(n + LengthFieldLen) & 3 }

// FPDULen returns the length on the wire of an FPDU carrying n ULPDU bytes,
// without markers: LengthFieldLen + n + PadLen(n) + CRCLen, computed as
// the length field and the ULPDU rounded up to a multiple of 4, plus the
// CRC field (an add and a mask: it is taken per small FPDU).
func FPDULen(n int) int { return (n+LengthFieldLen+3)&^3 + CRCLen }

// UpdateCRC extends a CRC32c computed over earlier bytes with p. Start with
// 0; UpdateCRC(UpdateCRC(0, a), b) equals the CRC of a followed by b.
func UpdateCRC(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// PutCRC stores crc in a 4-byte CRC field.
func PutCRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// GetCRC reads a CRC field as CRC32c value (the inverse of PutCRC).
func GetCRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// WireCRC reads a CRC field as the 32-bit number its bytes spell in network
// order, which is how Wireshark shows it.
func WireCRC(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

var zeroPad [4]byte

// AppendFPDU appends an FPDU without markers whose ULPDU is hdr followed by
// payload (either may be empty). With crc false the CRC field is zero.
// The caller keeps len(hdr)+len(payload) <= MaxULPDU.
func AppendFPDU(b []byte, hdr, payload []byte, crc bool) []byte {
	n := len(hdr) + len(payload)
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	b = append(b, hdr...)
	b = append(b, payload...)
	b = append(b, zeroPad[:PadLen(n)]...)
	var c uint32
	if crc {
		c = UpdateCRC(0, b[start:])
	}
	return binary.LittleEndian.AppendUint32(b, c)
}

// FPDU is one parsed FPDU.
type FPDU struct {
	// ULPDU is the payload (DDP segment), markers removed. It aliases the
	// parsed bytes or the deframer's buffer; see the producer for how long
	// it stays valid.
	ULPDU []byte
	// CRC is the CRC field as Wireshark shows it (WireCRC).
	CRC uint32
	// CRCChecked reports that CRC was in use and was checked; CRCOK is the
	// result.
	CRCChecked, CRCOK bool
	// WireLen is the number of bytes the FPDU occupied on the wire,
	// markers included; Markers is the number of markers within.
	WireLen, Markers int
}

// ParseFPDU decodes the marker-free FPDU at the start of b. With crc set it
// checks the CRC and returns the decoded FPDU together with ErrBadCRC on a
// mismatch. ULPDU aliases b. It does not allocate.
func ParseFPDU(b []byte, crc bool) (FPDU, error) {
	if len(b) < LengthFieldLen {
		return FPDU{}, ErrFPDUTruncated
	}
	n := int(binary.BigEndian.Uint16(b))
	total := FPDULen(n)
	if len(b) < total {
		return FPDU{}, ErrFPDUTruncated
	}
	f := FPDU{
		ULPDU:   b[LengthFieldLen : LengthFieldLen+n],
		CRC:     WireCRC(b[total-CRCLen:]),
		WireLen: total,
	}
	if crc {
		f.CRCChecked = true
		f.CRCOK = UpdateCRC(0, b[:total-CRCLen]) == GetCRC(b[total-CRCLen:])
		if !f.CRCOK {
			return f, ErrBadCRC
		}
	}
	return f, nil
}

// MULPDU returns the largest ULPDU that fits one TCP segment of emss bytes
// (RFC 5044 §4.5, "MULPDU"):
//
//	without markers: MULPDU = EMSS - (6 + EMSS mod 4)
//	with markers:    MULPDU = EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)
//
// where 6 is ULPDU_Length plus CRC. The result is never below zero.
func MULPDU(emss int, markers bool) int {
	over := 6 + emss%4
	if markers {
		over += MarkerLen * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	if emss <= over {
		return 0
	}
	return emss - over
}
