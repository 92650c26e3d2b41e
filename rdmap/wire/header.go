package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gosiw/gosiw/ddp"
)

// RDMAP control field (RFC 5040 §4.2), carried in the first RsvdULP byte of
// the DDP header:
//
//	 0 1 2 3 4 5 6 7
//	+-+-+-+-+-+-+-+-+
//	|RV |Rsv|OpCode |
//	+-+-+-+-+-+-+-+-+
//
// In untagged messages RsvdULP[8:39] holds the Invalidate STag (Send with
// Invalidate, Send with SE and Invalidate) and is reserved otherwise.

// Version1 is the RDMAP version of RFC 5040.
const Version1 = 1

const (
	rvShift    = 6
	rsvMask    = 0x30
	opcodeMask = 0x0f
)

// Opcode is an RDMAP opcode (RFC 5040 §4.2, RFC 7306 §9).
type Opcode uint8

// RDMAP opcodes.
const (
	OpWrite          Opcode = 0x0
	OpReadRequest    Opcode = 0x1
	OpReadResponse   Opcode = 0x2
	OpSend           Opcode = 0x3
	OpSendInv        Opcode = 0x4
	OpSendSE         Opcode = 0x5
	OpSendSEInv      Opcode = 0x6
	OpTerminate      Opcode = 0x7
	OpImmData        Opcode = 0x8 // RFC 7306
	OpImmDataSE      Opcode = 0x9 // RFC 7306
	OpAtomicRequest  Opcode = 0xa // RFC 7306
	OpAtomicResponse Opcode = 0xb // RFC 7306
)

var opcodeNames = [...]string{
	OpWrite:          "rdma_write",
	OpReadRequest:    "read_request",
	OpReadResponse:   "read_response",
	OpSend:           "send",
	OpSendInv:        "send_inv",
	OpSendSE:         "send_se",
	OpSendSEInv:      "send_se_inv",
	OpTerminate:      "terminate",
	OpImmData:        "imm_data",
	OpImmDataSE:      "imm_data_se",
	OpAtomicRequest:  "atomic_request",
	OpAtomicResponse: "atomic_response",
}

// String returns the opcode's short name ("rdma_write", "send_se_inv", ...).
func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("unknown(%d)", uint8(o))
}

// Known reports whether o is defined by RFC 5040 or RFC 7306.
func (o Opcode) Known() bool { return int(o) < len(opcodeNames) }

// Tagged reports whether messages with opcode o use the tagged model.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// HasInvalidateSTag reports whether o carries an Invalidate STag.
func (o Opcode) HasInvalidateSTag() bool { return o == OpSendInv || o == OpSendSEInv }

// Untagged queue numbers (RFC 5040 §5, RFC 7306).
const (
	QNSend        = 0 // Sends (and Immediate Data)
	QNReadRequest = 1
	QNTerminate   = 2
	QNAtomic      = 3 // RFC 7306 Atomic Requests and Responses
)

// ControlByte builds an RDMAP control field.
func ControlByte(version uint8, op Opcode) byte {
	return version<<rvShift | byte(op)&opcodeMask
}

// Control splits an RDMAP control field.
func Control(c byte) (version uint8, reserved uint8, op Opcode) {
	return c >> rvShift, c & rsvMask, Opcode(c & opcodeMask)
}

// Errors from the header parsers.
var (
	ErrShortHeader = errors.New("rdmap: short header")
)

// Read Request header (RFC 5040 §4.4), after the untagged DDP header:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Data Sink STag                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Data Sink Tagged Offset (64)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 RDMA Read Message Size                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Data Source STag                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Data Source Tagged Offset (64)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	ReadRequestLen = 28
	rrSinkSTag     = 0
	rrSinkTO       = 4
	rrSize         = 12
	rrSrcSTag      = 16
	rrSrcTO        = 20
)

// ReadRequest is a view of a Read Request header.
type ReadRequest []byte

// ParseReadRequest returns a view of the Read Request header at b.
func ParseReadRequest(b []byte) (ReadRequest, error) {
	if len(b) < ReadRequestLen {
		return nil, ErrShortHeader
	}
	return ReadRequest(b[:ReadRequestLen]), nil
}

func (r ReadRequest) SinkSTag() ddp.STag { return ddp.STag(binary.BigEndian.Uint32(r[rrSinkSTag:])) }
func (r ReadRequest) SinkTO() uint64     { return binary.BigEndian.Uint64(r[rrSinkTO:]) }
func (r ReadRequest) Size() uint32       { return binary.BigEndian.Uint32(r[rrSize:]) }
func (r ReadRequest) SrcSTag() ddp.STag  { return ddp.STag(binary.BigEndian.Uint32(r[rrSrcSTag:])) }
func (r ReadRequest) SrcTO() uint64      { return binary.BigEndian.Uint64(r[rrSrcTO:]) }

// ReadRequestFields describes a Read Request header to encode.
type ReadRequestFields struct {
	SinkSTag ddp.STag
	SinkTO   uint64
	Size     uint32
	SrcSTag  ddp.STag
	SrcTO    uint64
}

// AppendReadRequest appends an encoded Read Request header to b.
func AppendReadRequest(b []byte, f *ReadRequestFields) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(f.SinkSTag))
	b = binary.BigEndian.AppendUint64(b, f.SinkTO)
	b = binary.BigEndian.AppendUint32(b, f.Size)
	b = binary.BigEndian.AppendUint32(b, uint32(f.SrcSTag))
	return binary.BigEndian.AppendUint64(b, f.SrcTO)
}

// Atomic Request header (RFC 7306 §5.2), after the untagged DDP header:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Reserved (28 bits)                  |AtomOp |
//	|                       Request Identifier                      |
//	|                          Remote STag                          |
//	|                    Remote Tagged Offset (64)                  |
//	|                  Add or Swap Data (64)                        |
//	|                  Add or Swap Mask (64)                        |
//	|                  Compare Data (64)                            |
//	|                  Compare Mask (64)                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Atomic Response header: Original Request Identifier (32), Original
// Remote Data Value (64). Immediate Data: 8 bytes of data.
const (
	AtomicRequestLen  = 52
	AtomicResponseLen = 12
	ImmDataLen        = 8
)

// AtomicOp is the operation of an Atomic Request.
type AtomicOp uint8

// RFC 7306 atomic operations.
const (
	AtomicFetchAdd AtomicOp = 0x0
	AtomicCmpSwap  AtomicOp = 0x2
)

func (a AtomicOp) String() string {
	switch a {
	case AtomicFetchAdd:
		return "fetch_add"
	case AtomicCmpSwap:
		return "cmp_swap"
	}
	return fmt.Sprintf("unknown(%d)", uint8(a))
}

// AtomicRequest is a decoded Atomic Request header.
type AtomicRequest struct {
	Op          AtomicOp
	Reserved    uint32 // the 28 reserved bits, in place (op bits cleared)
	ReqID       uint32
	STag        ddp.STag
	TO          uint64
	AddSwap     uint64
	AddSwapMask uint64
	Compare     uint64
	CompareMask uint64
}

// ParseAtomicRequest decodes the Atomic Request header at b.
func ParseAtomicRequest(b []byte, a *AtomicRequest) error {
	if len(b) < AtomicRequestLen {
		return ErrShortHeader
	}
	w := binary.BigEndian.Uint32(b)
	*a = AtomicRequest{
		Op:          AtomicOp(w & 0xf),
		Reserved:    w &^ 0xf,
		ReqID:       binary.BigEndian.Uint32(b[4:]),
		STag:        ddp.STag(binary.BigEndian.Uint32(b[8:])),
		TO:          binary.BigEndian.Uint64(b[12:]),
		AddSwap:     binary.BigEndian.Uint64(b[20:]),
		AddSwapMask: binary.BigEndian.Uint64(b[28:]),
		Compare:     binary.BigEndian.Uint64(b[36:]),
		CompareMask: binary.BigEndian.Uint64(b[44:]),
	}
	return nil
}

// AppendAtomicRequest appends an encoded Atomic Request header to b.
func AppendAtomicRequest(b []byte, a *AtomicRequest) []byte {
	b = binary.BigEndian.AppendUint32(b, a.Reserved&^0xf|uint32(a.Op&0xf))
	b = binary.BigEndian.AppendUint32(b, a.ReqID)
	b = binary.BigEndian.AppendUint32(b, uint32(a.STag))
	b = binary.BigEndian.AppendUint64(b, a.TO)
	b = binary.BigEndian.AppendUint64(b, a.AddSwap)
	b = binary.BigEndian.AppendUint64(b, a.AddSwapMask)
	b = binary.BigEndian.AppendUint64(b, a.Compare)
	return binary.BigEndian.AppendUint64(b, a.CompareMask)
}

// AtomicResponse is a decoded Atomic Response header.
type AtomicResponse struct {
	ReqID         uint32
	OriginalValue uint64
}

// ParseAtomicResponse decodes the Atomic Response header at b.
func ParseAtomicResponse(b []byte, a *AtomicResponse) error {
	if len(b) < AtomicResponseLen {
		return ErrShortHeader
	}
	a.ReqID = binary.BigEndian.Uint32(b)
	a.OriginalValue = binary.BigEndian.Uint64(b[4:])
	return nil
}

// AppendAtomicResponse appends an encoded Atomic Response header to b.
func AppendAtomicResponse(b []byte, a *AtomicResponse) []byte {
	b = binary.BigEndian.AppendUint32(b, a.ReqID)
	return binary.BigEndian.AppendUint64(b, a.OriginalValue)
}
