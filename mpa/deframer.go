package mpa

import "io"

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

// Deframer cuts a byte stream into whole FPDUs: a Reader in Buffered mode
// that hands out each ULPDU at once. Tools, tests and raw peers
// (rdmaptest) use it; a QP's receive engine uses the Reader itself, so
// there is one framing implementation.
//
// A Deframer is resumable: when its reader returns an error (io.EOF
// included) in the middle of an FPDU, Next returns it (io.EOF as
// io.ErrUnexpectedEOF) and keeps what it has, so a later Next continues
// once the reader has more. It must be used from one goroutine.
type Deframer struct {
	rd   *Reader
	crc  bool
	fpdu FPDU
}

// NewDeframer returns a Deframer reading from r.
func NewDeframer(r io.Reader, cfg DeframerConfig) *Deframer {
	return &Deframer{crc: cfg.CRC, rd: NewReader(r, nil, ReaderConfig{
		CRC: cfg.CRC, Markers: cfg.Markers, StreamOffset: cfg.StreamOffset, MaxULPDU: cfg.MaxULPDU, Buffered: true,
	})}
}

// Buffered returns the bytes read from the reader but not yet consumed
// (an FPDU cut short by an error counts from its first byte).
func (d *Deframer) Buffered() []byte { return d.rd.Buffered() }

// Next returns the next FPDU. Its ULPDU is valid until the next call. On a
// CRC mismatch it returns the FPDU together with ErrBadCRC and moves past
// it. io.EOF means the stream ended cleanly between FPDUs; a stream that
// ends inside an FPDU gives io.ErrUnexpectedEOF. After any error from the
// reader the Deframer keeps what it has read, and a later call continues
// where this one stopped. ErrULPDUTooLong consumes nothing and repeats.
// In steady state Next does not allocate.
func (d *Deframer) Next() (*FPDU, error) {
	if _, err := d.rd.Next(); err != nil {
		return nil, err
	}
	ul, err := d.rd.Rest()
	if err != nil && err != ErrBadCRC {
		return nil, err
	}
	wire, markers := d.rd.WireLen()
	f := &d.fpdu
	*f = FPDU{ULPDU: ul, CRC: d.rd.CRC(), CRCChecked: d.crc, CRCOK: d.crc && err == nil, WireLen: wire, Markers: markers}
	return f, err
}
