package rdmap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// BufferDesc tells a peer where a registered buffer is, so that it can
// RDMA-Write into it or RDMA-Read from it: the buffer's STag, the tagged
// offset of its first byte (as a Remote.Offset: 0 is the start of the MR)
// and its length. It has a fixed binary form of BufferDescLen bytes that
// fits in MPA private data (next to the RFC 6581 block, and well under
// Linux siw's limit) and in a Send:
//
//	bytes 0-3   STag, big-endian
//	bytes 4-11  offset, big-endian
//	bytes 12-15 length, big-endian
//
// A BufferDesc is a plain value: it grants nothing by itself. What the
// peer may do is what the MR's Access allows, for as long as the MR stays
// registered with that STag.
type BufferDesc struct {
	STag   STag
	Offset uint64
	Len    uint32
}

// BufferDescLen is the length of a BufferDesc's binary form.
const BufferDescLen = 16

// ErrBufferDesc is returned by ParseBufferDesc for bytes that are not a
// BufferDesc.
var ErrBufferDesc = errors.New("rdmap: not a buffer descriptor")

// Describe returns the BufferDesc of n bytes of mr from off, to send to a
// peer. It does not check off and n against mr: the peer's accesses are
// checked against the MR when they arrive.
func (mr *MR) Describe(off uint64, n uint32) BufferDesc {
	return BufferDesc{STag: mr.STag(), Offset: off, Len: n}
}

// AppendBinary appends d's binary form (BufferDescLen bytes) to b and
// returns the extended slice; it implements encoding.BinaryAppender and
// never fails.
func (d BufferDesc) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, uint32(d.STag))
	b = binary.BigEndian.AppendUint64(b, d.Offset)
	return binary.BigEndian.AppendUint32(b, d.Len), nil
}

// MarshalBinary returns d's binary form (encoding.BinaryMarshaler).
func (d BufferDesc) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, BufferDescLen))
}

// UnmarshalBinary sets d from exactly BufferDescLen bytes
// (encoding.BinaryUnmarshaler).
func (d *BufferDesc) UnmarshalBinary(b []byte) error {
	if len(b) != BufferDescLen {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBufferDesc, len(b), BufferDescLen)
	}
	v, _, err := ParseBufferDesc(b)
	if err == nil {
		*d = v
	}
	return err
}

// ParseBufferDesc reads a BufferDesc from the start of b (private data or
// a received Send) and returns it with the bytes after it. Fewer than
// BufferDescLen bytes, or an offset+length past 2^64, is ErrBufferDesc.
// It does not retain b.
func ParseBufferDesc(b []byte) (BufferDesc, []byte, error) {
	if len(b) < BufferDescLen {
		return BufferDesc{}, b, fmt.Errorf("%w: %d bytes, want %d", ErrBufferDesc, len(b), BufferDescLen)
	}
	d := BufferDesc{
		STag:   STag(binary.BigEndian.Uint32(b)),
		Offset: binary.BigEndian.Uint64(b[4:]),
		Len:    binary.BigEndian.Uint32(b[12:]),
	}
	if d.Offset+uint64(d.Len) < d.Offset {
		return BufferDesc{}, b, fmt.Errorf("%w: offset %#x + length %d wraps", ErrBufferDesc, d.Offset, d.Len)
	}
	return d, b[BufferDescLen:], nil
}

// Remote is where the buffer starts, for a SendWR's Remote; add to Offset
// to address a later byte (at most Len bytes from the start).
func (d BufferDesc) Remote() Remote { return Remote{STag: d.STag, Offset: d.Offset} }

// String formats d as "stag 0x12345601 offset 0 len 4096".
func (d BufferDesc) String() string {
	return fmt.Sprintf("stag %#08x offset %d len %d", uint32(d.STag), d.Offset, d.Len)
}
