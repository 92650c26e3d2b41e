package ddp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RFC 5041 §4.2 (tagged) and §4.3 (untagged) DDP headers. The first byte is
// the DDP control field; the RsvdULP bytes belong to the upper layer
// (RDMAP keeps its control byte and, untagged, the Invalidate STag there).
//
// Tagged Buffer Model header, 14 bytes:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV|   RsvdULP     |             STag              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             STag              |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                  TO (64 bits)                                 |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Untagged Buffer Model header, 18 bytes:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV|              RsvdULP[0:23]                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| RsvdULP[24:39]|                QN ...                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  ... QN       |                MSN ...                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  ... MSN      |                MO ...                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  ... MO       |
//	+-+-+-+-+-+-+-+-+
const (
	controlOffset   = 0
	rsvdULPOffset   = 1 // the first RsvdULP byte (RDMAP control)
	rsvdULP2Offset  = 2 // untagged: the 32-bit RsvdULP[8:39]
	stagOffset      = 2
	toOffset        = 6
	qnOffset        = 6
	msnOffset       = 10
	moOffset        = 14
	TaggedHeaderLen = 14
	// UntaggedHeaderLen is the length of an untagged DDP header.
	UntaggedHeaderLen = 18
)

// Control field bits.
const (
	FlagTagged   = 0x80 // T
	FlagLast     = 0x40 // L
	ReservedMask = 0x3c // Resrv
	VersionMask  = 0x03 // DV
)

// Version1 is the DDP version of RFC 5041.
const Version1 = 1

// Errors from Parse.
var (
	ErrShortHeader = errors.New("ddp: short header")
)

// VersionError reports a DDP version other than 1. Parse returns it with a
// usable header so that the receiver can build the Terminate RFC 5041
// prescribes (tagged or untagged "invalid DDP version").
type VersionError struct{ Version uint8 }

func (e *VersionError) Error() string { return fmt.Sprintf("ddp: invalid version %d", e.Version) }

// STag is a steering tag (RFC 5041 §3).
type STag uint32

// Header is a view of a tagged or untagged DDP header. Make it with Parse;
// accessors assume the length Parse checked.
type Header []byte

// HeaderLen returns the header length implied by a DDP control byte.
func HeaderLen(control byte) int {
	if control&FlagTagged != 0 {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// Parse returns a view of the DDP header at the start of b. On a version
// other than 1 it returns the view together with a *VersionError.
func Parse(b []byte) (Header, error) {
	if len(b) < 1 {
		return nil, ErrShortHeader
	}
	n := HeaderLen(b[0])
	if len(b) < n {
		return nil, ErrShortHeader
	}
	h := Header(b[:n])
	if v := h.Version(); v != Version1 {
		return h, &VersionError{Version: v}
	}
	return h, nil
}

// Len returns the header length (14 or 18).
func (h Header) Len() int { return len(h) }

// Tagged reports the T bit.
func (h Header) Tagged() bool { return h[controlOffset]&FlagTagged != 0 }

// Last reports the L bit: the last segment of a message.
func (h Header) Last() bool { return h[controlOffset]&FlagLast != 0 }

// Version returns DV.
func (h Header) Version() uint8 { return h[controlOffset] & VersionMask }

// Reserved returns the Resrv bits of the control field, in place.
func (h Header) Reserved() uint8 { return h[controlOffset] & ReservedMask }

// RsvdULP returns the first RsvdULP byte (RDMAP's control field).
func (h Header) RsvdULP() uint8 { return h[rsvdULPOffset] }

// RsvdULP32 returns untagged RsvdULP[8:39] (RDMAP's Invalidate STag).
func (h Header) RsvdULP32() uint32 { return binary.BigEndian.Uint32(h[rsvdULP2Offset:]) }

// STag returns the tagged header's STag.
func (h Header) STag() STag { return STag(binary.BigEndian.Uint32(h[stagOffset:])) }

// TO returns the tagged header's tagged offset.
func (h Header) TO() uint64 { return binary.BigEndian.Uint64(h[toOffset:]) }

// QN returns the untagged header's queue number.
func (h Header) QN() uint32 { return binary.BigEndian.Uint32(h[qnOffset:]) }

// MSN returns the untagged header's message sequence number.
func (h Header) MSN() uint32 { return binary.BigEndian.Uint32(h[msnOffset:]) }

// MO returns the untagged header's message offset.
func (h Header) MO() uint32 { return binary.BigEndian.Uint32(h[moOffset:]) }

// TaggedFields describes a tagged header to encode.
type TaggedFields struct {
	Last    bool
	Version uint8 // 0 means Version1
	RsvdULP uint8
	STag    STag
	TO      uint64
}

// UntaggedFields describes an untagged header to encode.
type UntaggedFields struct {
	Last      bool
	Version   uint8 // 0 means Version1
	RsvdULP   uint8
	RsvdULP32 uint32
	QN, MSN   uint32
	MO        uint32
}

func control(tagged, last bool, version uint8) byte {
	if version == 0 {
		version = Version1
	}
	c := version & VersionMask
	if tagged {
		c |= FlagTagged
	}
	if last {
		c |= FlagLast
	}
	return c
}

// AppendTagged appends an encoded tagged header to b.
func AppendTagged(b []byte, f *TaggedFields) []byte {
	b, h := grow(b, TaggedHeaderLen)
	putTagged((*[TaggedHeaderLen]byte)(h), f)
	return b
}

// AppendUntagged appends an encoded untagged header to b.
func AppendUntagged(b []byte, f *UntaggedFields) []byte {
	b, h := grow(b, UntaggedHeaderLen)
	putUntagged((*[UntaggedHeaderLen]byte)(h), f)
	return b
}

// PutTagged encodes a tagged header into h[:TaggedHeaderLen]; h must
// have at least that length (it panics otherwise).
func PutTagged(h []byte, f *TaggedFields) { putTagged((*[TaggedHeaderLen]byte)(h), f) }

// PutUntagged encodes an untagged header into h[:UntaggedHeaderLen]; h
// must have at least that length (it panics otherwise).
func PutUntagged(h []byte, f *UntaggedFields) { putUntagged((*[UntaggedHeaderLen]byte)(h), f) }

// grow extends b by n bytes (reallocating only when its capacity is
// short) and returns it with the n new bytes, whose contents are
// undefined.
func grow(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l < n {
		b = append(b, make([]byte, n)...)
	} else {
		b = b[:l+n]
	}
	return b, b[l:]
}

// putTagged and putUntagged write every byte of a header: the fixed-size
// array lets the compiler drop the bounds checks of each field.
func putTagged(h *[TaggedHeaderLen]byte, f *TaggedFields) {
	h[controlOffset] = control(true, f.Last, f.Version)
	h[rsvdULPOffset] = f.RsvdULP
	binary.BigEndian.PutUint32(h[stagOffset:], uint32(f.STag))
	binary.BigEndian.PutUint64(h[toOffset:], f.TO)
}

func putUntagged(h *[UntaggedHeaderLen]byte, f *UntaggedFields) {
	h[controlOffset] = control(false, f.Last, f.Version)
	h[rsvdULPOffset] = f.RsvdULP
	binary.BigEndian.PutUint32(h[rsvdULP2Offset:], f.RsvdULP32)
	binary.BigEndian.PutUint32(h[qnOffset:], f.QN)
	binary.BigEndian.PutUint32(h[msnOffset:], f.MSN)
	binary.BigEndian.PutUint32(h[moOffset:], f.MO)
}

// NextSegment cuts a message of total bytes into DDP segments of at most
// maxPayload payload bytes (the MULPDU less the header, RFC 5041 §5.2).
// Given the offset of the next segment it returns that segment's length
// and whether it is the last; a zero-length message is one empty segment.
// Callers loop: for off := 0; ; off += n { n, last := NextSegment(off,
// total, max); ...; if last { break } }. maxPayload must be positive.
func NextSegment(off, total, maxPayload int) (n int, last bool) {
	rem := total - off
	if rem <= maxPayload {
		return rem, true
	}
	return maxPayload, false
}

// Segments returns the number of segments NextSegment cuts total into;
// maxPayload must be positive.
func Segments(total, maxPayload int) int {
	if total == 0 {
		return 1
	}
	return (total + maxPayload - 1) / maxPayload
}
