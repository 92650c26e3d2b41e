package mpa

import (
	"errors"
	"io"
)

// errShortWrite guards Framer users against io.Writer misbehaviour.
var errShortWrite = errors.New("mpa: short write")

// Framer builds FPDUs for one direction. It tracks the stream offset for
// markers. It must be used from one goroutine.
type Framer struct {
	CRC     bool
	Markers bool
	// Pos is the stream offset of the next byte (marker origin 0 at the
	// first FPDU).
	Pos     uint64
	scratch []byte // the marker-free FPDU (markers only)
	out     []byte // WriteFPDU's buffer
}

// AppendFPDU appends one FPDU whose ULPDU is hdr followed by payload to b,
// with markers and CRC as configured, and advances Pos.
func (f *Framer) AppendFPDU(b []byte, hdr, payload []byte) []byte {
	if !f.Markers {
		start := len(b)
		b = AppendFPDU(b, hdr, payload, f.CRC)
		f.Pos += uint64(len(b) - start)
		return b
	}
	f.scratch = AppendFPDU(f.scratch[:0], hdr, payload, false)
	b, f.Pos = InsertMarkers(b, f.scratch, f.Pos, f.CRC)
	return b
}

// WriteFPDU writes one FPDU to w (see AppendFPDU) with a single Write. It
// reuses an internal buffer, so it does not allocate in steady state. If
// the write fails, Pos still accounts for the bytes that went out.
func (f *Framer) WriteFPDU(w io.Writer, hdr, payload []byte) error {
	pos := f.Pos
	f.out = f.AppendFPDU(f.out[:0], hdr, payload)
	n, err := w.Write(f.out)
	if err == nil && n != len(f.out) {
		err = errShortWrite
	}
	if err != nil {
		f.Pos = pos + uint64(n)
	}
	return err
}
