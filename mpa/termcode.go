package mpa

import "fmt"

// TermCode is an MPA error code, carried in a Terminate whose layer is LLP
// and whose error type is 0 ("MPA error") (RFC 5044 §8, RFC 6581 §7).
type TermCode uint8

// MPA (LLP) Terminate error codes.
const (
	TermTCPClosed        TermCode = 0x01 // TCP connection closed, terminated or lost
	TermCRC              TermCode = 0x02 // MPA CRC error
	TermMarker           TermCode = 0x03 // marker and ULPDU_Length mismatch
	TermInvalidReqRep    TermCode = 0x04 // invalid MPA Request or Reply frame
	TermLocalCatastrophe TermCode = 0x05 // local catastrophic error
	TermInsufficientIRD  TermCode = 0x06 // insufficient IRD resources (RFC 6581)
	TermNoMatchingRTR    TermCode = 0x07 // no matching RTR option (RFC 6581)
)

// TermTypeMPA is the only LLP error type MPA defines.
const TermTypeMPA = 0

func (c TermCode) String() string {
	switch c {
	case TermTCPClosed:
		return "TCP connection closed, terminated or lost"
	case TermCRC:
		return "MPA CRC error"
	case TermMarker:
		return "MPA marker and ULPDU length mismatch"
	case TermInvalidReqRep:
		return "invalid MPA request or reply frame"
	case TermLocalCatastrophe:
		return "local catastrophic error"
	case TermInsufficientIRD:
		return "insufficient IRD resources"
	case TermNoMatchingRTR:
		return "no matching RTR option"
	}
	return fmt.Sprintf("unknown(%d)", uint8(c))
}
