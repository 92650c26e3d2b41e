package mpa

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MPA Request and Reply frames (RFC 5044 §7.1, RFC 6581 §5).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+         Key (16 bytes containing "MPA ID Req Frame")          +
//	|      (4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65)        |
//	+      Or  (16 bytes containing "MPA ID Rep Frame")             +
//	|      (4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|H| Res   |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~   Private Data (PD_Length bytes; with H, first the 4-byte     ~
//	~   RFC 6581 block below)                                       ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RFC 6581 §5 (enhanced connection setup), prepended to the private data
// when H is set in a revision 2 frame:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|B|         IRD               |C|D|          ORD              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A: peer-to-peer mode; B: zero-length Send RTR; C: zero-length RDMA Write
// RTR; D: zero-length RDMA Read RTR; IRD and ORD are 14-bit values.
const (
	KeyLen         = 16
	keyOffset      = 0
	flagsOffset    = 16
	revOffset      = 17
	pdLengthOffset = 18
	// HeaderLen is the length of a Request/Reply frame without private data.
	HeaderLen = 20
	// EnhancedLen is the length of the RFC 6581 IRD/ORD block.
	EnhancedLen = 4
	// MaxPrivateData is RFC 5044's limit on PD_Length.
	MaxPrivateData = 512
	// MaxIRDORD is the largest IRD or ORD value the 14-bit fields carry.
	MaxIRDORD = 0x3fff
)

// Flag bits in byte 16 of a Request/Reply frame.
const (
	FlagMarkers  = 0x80 // M
	FlagCRC      = 0x40 // C
	FlagReject   = 0x20 // R
	FlagEnhanced = 0x10 // H (RFC 6581); reserved in revision 1
	flagRes      = 0x0f
)

// RFC 6581 control bits in the IRD and ORD words.
const (
	ctrlP2P      = 0x8000 // A, in the IRD word
	ctrlRTRSend  = 0x4000 // B, in the IRD word
	ctrlRTRWrite = 0x8000 // C, in the ORD word
	ctrlRTRRead  = 0x4000 // D, in the ORD word
	irdOrdMask   = 0x3fff
)

// Supported revisions.
const (
	Rev1 = 1
	Rev2 = 2
)

// The two 16-byte keys.
var (
	KeyRequest = [KeyLen]byte{'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e'}
	KeyReply   = [KeyLen]byte{'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e'}
)

// Parse errors for Request/Reply frames. Each malformed case has its own
// error so that the connection manager can answer each as RFC 5044 and
// Linux siw do.
var (
	// ErrTruncated: fewer bytes than the header or than PD_Length announces.
	ErrTruncated = errors.New("mpa: truncated request/reply frame")
	// ErrBadKey: the first 16 bytes are neither key (or not the one expected).
	ErrBadKey = errors.New("mpa: bad request/reply key")
	// ErrPDTooLong: PD_Length above MaxPrivateData (or a caller's lower limit).
	ErrPDTooLong = errors.New("mpa: PD_Length over the limit")
	// ErrEnhancedShort: H set in revision 2 but PD_Length < 4, so the
	// RFC 6581 IRD/ORD block is missing.
	ErrEnhancedShort = errors.New("mpa: enhanced (H) frame without the 4-byte IRD/ORD block")
	// ErrReservedBits: reserved flag bits are set. It is returned with the
	// frame fully decoded, so a receiver that follows RFC 5044 ("ignored on
	// receipt") may carry on.
	ErrReservedBits = errors.New("mpa: reserved bits set")
)

// RevisionError reports a revision other than 1 or 2.
type RevisionError struct{ Rev uint8 }

func (e *RevisionError) Error() string { return fmt.Sprintf("mpa: unknown revision %d", e.Rev) }

// ErrUnknownRevision matches any *RevisionError with errors.Is.
var ErrUnknownRevision = errors.New("mpa: unknown revision")

// Is makes errors.Is(err, ErrUnknownRevision) true.
func (e *RevisionError) Is(t error) bool { return t == ErrUnknownRevision }

// Frame is a decoded MPA Request or Reply. After ParseFrame, PrivateData
// aliases the parsed buffer.
type Frame struct {
	Reply    bool // key is "MPA ID Rep Frame"
	Markers  bool // M
	CRC      bool // C
	Reject   bool // R
	Enhanced bool // H, in a revision 2 frame (RFC 6581)
	// Reserved holds the reserved flag bits as on the wire (the low nibble,
	// plus 0x10 when H is set in a frame whose revision is not 2). Linux siw
	// uses 0x08 for its private GSO flag.
	Reserved uint8
	Rev      uint8

	// RFC 6581 fields, meaningful when Enhanced.
	IRD, ORD uint16 // 14-bit
	P2P      bool   // A: peer-to-peer mode
	RTRSend  bool   // B: zero-length Send RTR
	RTRWrite bool   // C: zero-length RDMA Write RTR
	RTRRead  bool   // D: zero-length RDMA Read RTR

	// [MS-SMBD] IRD/ORD Negotiate Header (smbd.go), meaningful when SMBD:
	// the private data starts with the 8-byte header carrying SMBDIRD and
	// SMBDORD. ParseFrame never sets SMBD (nothing on the wire marks the
	// header; see SplitSMBD); AppendFrame writes the header when it is set.
	SMBD             bool
	SMBDIRD, SMBDORD uint32

	// PrivateData is the ULP private data, without the RFC 6581 block
	// (and without the [MS-SMBD] header when SMBD).
	PrivateData []byte
	// PDLength is PD_Length as on the wire (set by ParseFrame; AppendFrame
	// computes it).
	PDLength uint16
}

// Length returns the encoded length of f: len(AppendFrame(nil, f)).
func (f *Frame) Length() int {
	n := HeaderLen + len(f.PrivateData)
	if f.Enhanced {
		n += EnhancedLen
	}
	if f.SMBD {
		n += SMBDHeaderLen
	}
	return n
}

// FrameLen reports the total length of the frame that starts at b, from its
// header: HeaderLen + PD_Length. It needs HeaderLen bytes and checks nothing
// but that.
func FrameLen(b []byte) (int, error) {
	if len(b) < HeaderLen {
		return 0, ErrTruncated
	}
	return HeaderLen + int(binary.BigEndian.Uint16(b[pdLengthOffset:])), nil
}

// ParseFrame decodes the Request or Reply frame at the start of b into f and
// returns the number of bytes it occupies. It does not allocate;
// f.PrivateData aliases b. Checks, in order: length of the header, key,
// revision, PD_Length against MaxPrivateData, length of the whole frame,
// the RFC 6581 block, reserved bits (ErrReservedBits comes with f complete).
func ParseFrame(b []byte, f *Frame) (int, error) {
	*f = Frame{}
	if len(b) < HeaderLen {
		return 0, ErrTruncated
	}
	switch [KeyLen]byte(b[:KeyLen]) {
	case KeyRequest:
	case KeyReply:
		f.Reply = true
	default:
		return 0, ErrBadKey
	}
	flags := b[flagsOffset]
	f.Rev = b[revOffset]
	if f.Rev != Rev1 && f.Rev != Rev2 {
		return 0, &RevisionError{Rev: f.Rev}
	}
	f.PDLength = binary.BigEndian.Uint16(b[pdLengthOffset:])
	if f.PDLength > MaxPrivateData {
		return 0, ErrPDTooLong
	}
	n := HeaderLen + int(f.PDLength)
	if len(b) < n {
		return 0, ErrTruncated
	}
	f.Markers = flags&FlagMarkers != 0
	f.CRC = flags&FlagCRC != 0
	f.Reject = flags&FlagReject != 0
	f.Reserved = flags & flagRes
	pd := b[HeaderLen:n]
	if flags&FlagEnhanced != 0 {
		if f.Rev != Rev2 {
			f.Reserved |= FlagEnhanced
		} else {
			if len(pd) < EnhancedLen {
				return 0, ErrEnhancedShort
			}
			f.Enhanced = true
			ird := binary.BigEndian.Uint16(pd[0:])
			ord := binary.BigEndian.Uint16(pd[2:])
			f.IRD, f.ORD = ird&irdOrdMask, ord&irdOrdMask
			f.P2P = ird&ctrlP2P != 0
			f.RTRSend = ird&ctrlRTRSend != 0
			f.RTRWrite = ord&ctrlRTRWrite != 0
			f.RTRRead = ord&ctrlRTRRead != 0
			pd = pd[EnhancedLen:]
		}
	}
	f.PrivateData = pd
	if f.Reserved != 0 {
		return n, ErrReservedBits
	}
	return n, nil
}

// Errors from AppendFrame for fields that cannot be encoded.
var (
	ErrIRDORDRange = errors.New("mpa: IRD or ORD above 14 bits")
	ErrPDEncode    = errors.New("mpa: private data too long for PD_Length")
)

// AppendFrame appends the encoded frame to b. It encodes whatever is
// representable, including revisions and lengths that a receiver refuses,
// so that tests and probes can build them; it fails only for IRD/ORD above
// 14 bits or private data longer than 65535 bytes in all. The private data
// is the RFC 6581 block when Enhanced, then the [MS-SMBD] header when
// SMBD, then PrivateData. Of f.Reserved
// only the bits Frame.Reserved documents (0x1f) are written. It does not
// allocate when b has room for f.Length() more bytes.
func AppendFrame(b []byte, f *Frame) ([]byte, error) {
	if f.IRD > MaxIRDORD || f.ORD > MaxIRDORD {
		return b, ErrIRDORDRange
	}
	pdLen := len(f.PrivateData)
	if f.Enhanced {
		pdLen += EnhancedLen
	}
	if f.SMBD {
		pdLen += SMBDHeaderLen
	}
	if pdLen > 0xffff {
		return b, ErrPDEncode
	}
	key := &KeyRequest
	if f.Reply {
		key = &KeyReply
	}
	b = append(b, key[:]...)
	flags := f.Reserved & (flagRes | FlagEnhanced)
	if f.Markers {
		flags |= FlagMarkers
	}
	if f.CRC {
		flags |= FlagCRC
	}
	if f.Reject {
		flags |= FlagReject
	}
	if f.Enhanced {
		flags |= FlagEnhanced
	}
	b = append(b, flags, f.Rev)
	b = binary.BigEndian.AppendUint16(b, uint16(pdLen))
	if f.Enhanced {
		ird, ord := f.IRD, f.ORD
		if f.P2P {
			ird |= ctrlP2P
		}
		if f.RTRSend {
			ird |= ctrlRTRSend
		}
		if f.RTRWrite {
			ord |= ctrlRTRWrite
		}
		if f.RTRRead {
			ord |= ctrlRTRRead
		}
		b = binary.BigEndian.AppendUint16(b, ird)
		b = binary.BigEndian.AppendUint16(b, ord)
	}
	if f.SMBD {
		b = AppendSMBDHeader(b, f.SMBDIRD, f.SMBDORD)
	}
	return append(b, f.PrivateData...), nil
}
