package ddp

import "fmt"

// DDP error types and codes carried in a Terminate whose layer is DDP
// (RFC 5041 §7.2, and RFC 5040 §4.8's Terminate Control field).

// ErrorType is a DDP error type.
type ErrorType uint8

// DDP error types.
const (
	ErrTypeLocalCatastrophic ErrorType = 0x0
	ErrTypeTagged            ErrorType = 0x1 // tagged buffer error
	ErrTypeUntagged          ErrorType = 0x2 // untagged buffer error
	ErrTypeLLP               ErrorType = 0x3 // reserved for the LLP
)

func (t ErrorType) String() string {
	switch t {
	case ErrTypeLocalCatastrophic:
		return "local catastrophic"
	case ErrTypeTagged:
		return "tagged buffer"
	case ErrTypeUntagged:
		return "untagged buffer"
	case ErrTypeLLP:
		return "reserved for LLP"
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// ErrorCode is a DDP error code; its meaning depends on the type.
type ErrorCode uint8

// Local catastrophic code.
const CodeLocalCatastrophic ErrorCode = 0x00

// Tagged buffer error codes.
const (
	CodeInvalidSTag   ErrorCode = 0x00
	CodeBaseBounds    ErrorCode = 0x01
	CodeSTagNotAssoc  ErrorCode = 0x02
	CodeTOWrap        ErrorCode = 0x03
	CodeTaggedVersion ErrorCode = 0x04
)

// Untagged buffer error codes.
const (
	CodeInvalidQN       ErrorCode = 0x01
	CodeNoBuffer        ErrorCode = 0x02 // invalid MSN, no buffer available
	CodeMSNRange        ErrorCode = 0x03 // invalid MSN, MSN range not valid
	CodeInvalidMO       ErrorCode = 0x04
	CodeTooLong         ErrorCode = 0x05 // message too long for the buffer
	CodeUntaggedVersion ErrorCode = 0x06
)

// CodeName names code c of type t, "unknown(N)" when it has none.
func CodeName(t ErrorType, c ErrorCode) string {
	switch t {
	case ErrTypeLocalCatastrophic:
		if c == CodeLocalCatastrophic {
			return "unspecified"
		}
	case ErrTypeTagged:
		switch c {
		case CodeInvalidSTag:
			return "invalid STag"
		case CodeBaseBounds:
			return "base or bounds violation"
		case CodeSTagNotAssoc:
			return "STag not associated with DDP stream"
		case CodeTOWrap:
			return "TO wrap"
		case CodeTaggedVersion:
			return "invalid DDP version"
		}
	case ErrTypeUntagged:
		switch c {
		case CodeInvalidQN:
			return "invalid QN"
		case CodeNoBuffer:
			return "invalid MSN - no buffer available"
		case CodeMSNRange:
			return "invalid MSN - MSN range is not valid"
		case CodeInvalidMO:
			return "invalid MO"
		case CodeTooLong:
			return "DDP message too long for available buffer"
		case CodeUntaggedVersion:
			return "invalid DDP version"
		}
	}
	return fmt.Sprintf("unknown(%d)", uint8(c))
}

// Error is a DDP error as the Data Sink reports it in a Terminate: its
// error type and code (RFC 5041 §7.2). The placement rules (place.go)
// return it; the ULP maps it to the Terminate it sends. Compare with
// errors.As.
type Error struct {
	Type ErrorType
	Code ErrorCode
}

func (e *Error) Error() string {
	return "ddp: " + e.Type.String() + ": " + CodeName(e.Type, e.Code)
}

// Version reports whether e is an invalid DDP version, after which the
// header's layout is unknown (RFC 5041 §7.2: a Terminate copies no
// header).
func (e *Error) Version() bool {
	return (e.Type == ErrTypeTagged && e.Code == CodeTaggedVersion) ||
		(e.Type == ErrTypeUntagged && e.Code == CodeUntaggedVersion)
}
