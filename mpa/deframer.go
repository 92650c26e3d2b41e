package mpa

import (
	"encoding/binary"
	"io"
)

// DeframerConfig says how the FPDUs of one direction are framed, as the
// handshake negotiated.
type DeframerConfig struct {
	// CRC: the CRC field is checked.
	CRC bool
	// Markers: the sender inserts markers; StreamOffset is the marker
	// position of the first byte the deframer will read (0 when it starts
	// at the first FPDU).
	Markers      bool
	StreamOffset uint64
	// MaxULPDU bounds ULPDU_Length; 0 means MaxULPDU (65535).
	MaxULPDU int
}

// Deframer cuts a byte stream into FPDUs. It is used by the QP receive
// path and, fed from reassembled captures, by the layers stream decoder:
// there is one framing implementation.
//
// A Deframer is resumable: when its reader returns an error (io.EOF
// included) in the middle of an FPDU, Next returns it (io.EOF as
// io.ErrUnexpectedEOF) and keeps what it has, so a later Next continues
// once the reader has more. It must be used from one goroutine.
type Deframer struct {
	r   io.Reader
	cfg DeframerConfig

	buf        []byte // raw stream bytes in buf[start:end]
	start, end int
	pos        uint64 // stream offset of buf[start]
	plain      []byte // marker-free copy of the current FPDU (markers only)
	fpdu       FPDU
}

// deframerInitSize is the initial read buffer. It grows (to about twice
// the largest FPDU seen, at most some 130 KiB) when an FPDU does not fit.
const deframerInitSize = 16 << 10

// NewDeframer returns a Deframer reading from r.
func NewDeframer(r io.Reader, cfg DeframerConfig) *Deframer {
	if cfg.MaxULPDU <= 0 || cfg.MaxULPDU > MaxULPDU {
		cfg.MaxULPDU = MaxULPDU
	}
	return &Deframer{r: r, cfg: cfg, pos: cfg.StreamOffset, buf: make([]byte, deframerInitSize)}
}

// Buffered returns the bytes read from the reader but not yet consumed.
func (d *Deframer) Buffered() []byte { return d.buf[d.start:d.end] }

// maxEmptyReads bounds the reads that return no data and no error before
// fill gives up with io.ErrNoProgress (as bufio does).
const maxEmptyReads = 100

// fill makes at least n raw bytes available in buf[start:].
func (d *Deframer) fill(n int) error {
	empty := 0
	for d.end-d.start < n {
		if d.start+n > len(d.buf) {
			buf := d.buf
			if n > len(buf) {
				buf = make([]byte, max(2*n, 2*len(buf)))
			}
			copy(buf, d.buf[d.start:d.end])
			d.buf = buf
			d.end -= d.start
			d.start = 0
		}
		m, err := d.r.Read(d.buf[d.end:])
		d.end += m
		if d.end-d.start >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && d.end > d.start {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if m == 0 {
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		}
	}
	return nil
}

// Next returns the next FPDU. Its ULPDU is valid until the next call. On a
// CRC mismatch it returns the FPDU together with ErrBadCRC and moves past
// it. io.EOF means the stream ended cleanly between FPDUs; a stream that
// ends inside an FPDU gives io.ErrUnexpectedEOF. After any error from the
// reader the Deframer keeps what it has read, and a later call continues
// where this one stopped. ErrULPDUTooLong consumes nothing and repeats.
// In steady state (markers off) Next does not allocate.
func (d *Deframer) Next() (*FPDU, error) {
	// The length field, with any marker in front of (or inside) it.
	hdrWire := LengthFieldLen
	if d.cfg.Markers {
		hdrWire, _ = markedLen(d.pos, LengthFieldLen)
	}
	if err := d.fill(hdrWire); err != nil {
		return nil, err
	}
	var n int
	if hdrWire == LengthFieldLen {
		n = int(binary.BigEndian.Uint16(d.buf[d.start:]))
	} else {
		var lb [8]byte
		l := RemoveMarkers(lb[:0], d.buf[d.start:d.start+hdrWire], d.pos)
		n = int(binary.BigEndian.Uint16(l))
	}
	if n > d.cfg.MaxULPDU {
		return nil, ErrULPDUTooLong
	}
	plainLen := FPDULen(n)
	wire, markers := plainLen, 0
	if d.cfg.Markers {
		wire, markers = markedLen(d.pos, plainLen)
	}
	if err := d.fill(wire); err != nil {
		return nil, err
	}
	raw := d.buf[d.start : d.start+wire]
	body := raw
	if markers != 0 {
		d.plain = RemoveMarkers(d.plain[:0], raw, d.pos)
		body = d.plain
	}
	f := &d.fpdu
	*f = FPDU{
		ULPDU:   body[LengthFieldLen : LengthFieldLen+n],
		CRC:     WireCRC(raw[wire-CRCLen:]),
		WireLen: wire,
		Markers: markers,
	}
	d.start += wire
	d.pos += uint64(wire)
	if d.cfg.CRC {
		f.CRCChecked = true
		f.CRCOK = UpdateCRC(0, raw[:wire-CRCLen]) == GetCRC(raw[wire-CRCLen:])
		if !f.CRCOK {
			return f, ErrBadCRC
		}
	}
	return f, nil
}
