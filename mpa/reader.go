package mpa

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ReaderConfig says how the FPDUs a Reader reads are framed, as the
// handshake negotiated, and how it delivers them.
type ReaderConfig struct {
	// CRC: the CRC field is checked.
	CRC bool
	// Markers: the sender inserts markers; StreamOffset is the marker
	// position of the first byte the Reader reads (0 when it starts at
	// the first FPDU).
	Markers      bool
	StreamOffset uint64
	// MaxULPDU bounds ULPDU_Length; 0 means MaxULPDU (65535).
	MaxULPDU int
	// Buffered: the whole FPDU is read into the Reader's buffer, and its
	// CRC checked, before Place writes the first payload byte into the
	// caller's memory. Headers still come first (Header returns as soon
	// as their bytes are in).
	Buffered bool
	// CRCInPlace: with CRC, Place reads a large payload remainder
	// straight into the destination, as without CRC, and folds it into
	// the CRC there, right after each read (within the placement), as
	// Linux siw does for kernel QPs. That saves a copy, but the CRC then
	// checks the destination's bytes, not the bytes that arrived: a
	// destination something else writes while the payload lands in it
	// can fail the CRC of an FPDU that arrived intact. Without it, with
	// CRC every byte goes through the Reader's buffer, the CRC is
	// computed there and the payload copied out. Ignored without CRC,
	// with Markers and in Buffered mode.
	CRCInPlace bool
	// Leftover holds stream bytes read before the Reader starts (past
	// the MPA handshake, say); the Reader reads them first. The Reader
	// keeps the slice, never writes into it, and drops it once consumed.
	Leftover []byte
	// Buffers, when set (and NewReader is given no buffer), lends the
	// Reader its buffer of at least ReaderBufSize bytes only while bytes
	// move through it: an idle Reader reads into a small array of its own
	// (ReaderSmallLen bytes), which holds an FPDU's length and headers, or
	// a whole small FPDU; it borrows a buffer when more is needed than
	// fits there, or when a read filled it (more is likely waiting), and
	// gives the buffer back when everything read has been consumed and
	// the last read found the source drained, before it reads again (so a
	// Reader waiting on an idle source holds none), and in Release.
	Buffers BufferPool
}

// Placer fences the writes Reader.Place makes into the caller's memory.
// Place calls Enter before each write into the destination and Leave
// after it: n is how many bytes that write puts there (at most), direct
// whether it is a read straight from the source (a VectorReader, which
// may wait for the peer inside the placement) rather than a copy out of
// the Reader's buffer (waiting for bytes that go through the buffer is
// never done inside a placement). A non-nil error from Enter stops
// Place, which returns that error unchanged and calls no Leave for it.
type Placer interface {
	Enter(n int, direct bool) error
	Leave()
}

// VectorReader is a source that can read into two buffers with one call
// (readv): ReadVec fills dst first and puts what follows into ahead. It
// returns the total number of bytes read, more than zero unless err is
// set; io.EOF when the stream has ended. A Reader calls ReadVec only
// between Placer.Enter and Placer.Leave, with dst a part of the caller's
// memory, so an implementation can check there that the placement is
// still allowed before each system call.
type VectorReader interface {
	io.Reader
	ReadVec(dst, ahead []byte) (int, error)
}

const (
	// ReaderBufSize is the buffer size a Reader needs: any FPDU (65544
	// bytes, plus its markers) with room to read ahead. A longer buffer
	// lets a read take more small FPDUs at once; a direct read (Place)
	// still reads at most ReaderBufSize ahead.
	ReaderBufSize = 96 << 10
	// DirectMin is the payload remainder from which Place reads straight
	// from a VectorReader into the destination instead of through the
	// buffer (without markers or Buffered, and without CRC or with
	// ReaderConfig.CRCInPlace).
	DirectMin = 4 << 10
	// DirectSoleMin is the payload remainder from which a direct read
	// reads ahead only the trailer and the next header (bigSlack bytes
	// past the payload), and the reads after it stay limited (see
	// readDirect): the next large payload goes straight into memory too,
	// not copied out of the buffer.
	DirectSoleMin = 48 << 10
	// MaxHeader is the largest ULPDU prefix Header returns.
	MaxHeader = 128
	// ReaderSmallLen is the size of the array a Reader with
	// ReaderConfig.Buffers reads into while it holds no buffer.
	ReaderSmallLen = 256
	// bigSlack is how far past what it needs the Reader reads while its
	// reads are limited (Reader.big), so that a header comes with the
	// previous trailer without pulling the next payload into the buffer.
	bigSlack = 64
)

// errPastULPDU reports a caller asking for more bytes than the ULPDU has.
var errPastULPDU = errors.New("mpa: read past the end of the ULPDU")

// Reader reads the FPDUs of one direction from a byte stream, header
// first: Next reads ULPDU_Length, Header the ULPDU's first bytes as soon
// as they have arrived, and the caller, once it has checked them, either
// places the payload into its own memory (Place, which reads straight
// from a VectorReader when it can) or drops it (Discard); Trailer then
// reads the pad and the CRC field and checks the CRC. The CRC covers the
// bytes as they were read from the source (into the Reader's buffer, or
// counted as they arrived), never re-read from caller memory. Markers
// are removed, every marker byte folded into the CRC. Rest reads the
// whole remaining ULPDU into the buffer instead (the Deframer's way).
// Whole takes an FPDU that is already all buffered in one step, its CRC
// checked first (the small FPDUs of a stream read in large chunks), and
// Fill makes the read Next would make without starting an FPDU, so that
// Whole can take the small FPDU one read brings.
//
// The errors are io errors from the source (io.EOF only between FPDUs; a
// stream that ends inside an FPDU gives io.ErrUnexpectedEOF),
// ErrULPDUTooLong, ErrBadCRC, and whatever a Placer returns. After an
// error from the source the Reader keeps what it has read, and calling
// the same method again continues. A Reader must be used from one
// goroutine; it allocates only in NewReader (and in Rest with markers,
// until its scratch has grown).
type Reader struct {
	src io.Reader
	vec VectorReader // src, when it reads vectors; nil otherwise
	cfg ReaderConfig
	pre []byte // what is left of cfg.Leftover
	// wholeMax is the longest ULPDU Whole takes on its short path:
	// MaxULPDU without CRC and markers; -1 with either (every FPDU goes
	// to whole).
	wholeMax int

	buf  []byte // stream bytes in buf[r:w]: *lent, small, or the caller's
	r, w int
	pos  uint64 // stream offset of buf[r]
	// big limits reads to what is needed and bigSlack more: the last
	// payload went straight into memory with a read that left the
	// buffer room (the source had no more then), so the next payload,
	// which has not all arrived, goes straight too.
	big bool

	// Lending (cfg.Buffers set): buf is small until a buffer is lent.
	lent    *[]byte
	drained bool // the last unlimited read returned less than it had room for
	// directDrained: a direct read of the current FPDU's payload left
	// the buffer room (Trailer's big).
	directDrained bool
	small         [ReaderSmallLen]byte

	// The current FPDU (valid while in is set).
	in      bool
	ulen    int    // ULPDU_Length
	done    int    // ULPDU bytes consumed
	wlen    int    // its length on the wire, markers included (WireLen)
	end     uint64 // stream offset just after its CRC field (unset by Whole)
	markers int    // markers within it (always 0 without ReaderConfig.Markers)
	fstart  int    // buf index of its first byte; -1 once it left the buffer
	crc     uint32 // CRC so far, over buf[fstart:crcAt] (folded lazily)
	crcAt   int    // buf index up to which consumed bytes are in crc
	checked bool   // Buffered: the whole FPDU was read and its CRC checked
	crcOK   bool
	wireCRC uint32 // its CRC field, as WireCRC reads it (after the check)
	hdr     [MaxHeader]byte
	hn      int

	plain []byte // Rest's marker-free copy (markers only)
}

// maxEmptyReads bounds the reads that return no data and no error before
// the Reader gives up with io.ErrNoProgress (as bufio does).
const maxEmptyReads = 100

// NewReader returns a Reader reading src into buf (the caller's, used
// until the Reader is dropped). Without buf (shorter than ReaderBufSize)
// it borrows its buffer from cfg.Buffers while bytes move, or, without
// those either, makes one. If src is a VectorReader, Place reads large
// payloads straight into the caller's memory with it.
func NewReader(src io.Reader, buf []byte, cfg ReaderConfig) *Reader {
	if cfg.MaxULPDU <= 0 || cfg.MaxULPDU > MaxULPDU {
		cfg.MaxULPDU = MaxULPDU
	}
	rd := &Reader{src: src, cfg: cfg, pre: cfg.Leftover, pos: cfg.StreamOffset, wholeMax: -1}
	if !cfg.CRC && !cfg.Markers {
		rd.wholeMax = cfg.MaxULPDU
	}
	switch {
	case len(buf) >= ReaderBufSize:
		rd.cfg.Buffers = nil
		rd.buf = buf
	case cfg.Buffers != nil:
		rd.buf, rd.drained = rd.small[:], true
	default:
		rd.buf = make([]byte, ReaderBufSize)
	}
	rd.cfg.Leftover = nil
	rd.vec, _ = src.(VectorReader)
	return rd
}

// Release gives a lent buffer back to ReaderConfig.Buffers. The Reader
// must not be used afterwards, nor anything it returned.
func (rd *Reader) Release() {
	if rd.lent != nil {
		rd.cfg.Buffers.Put(rd.lent)
		rd.lent = nil
	}
	rd.buf, rd.r, rd.w = rd.small[:0], 0, 0
}

// lend switches, before a read for n bytes, between the small array and
// a lent buffer (ReaderConfig.Buffers).
func (rd *Reader) lend(n int) {
	keep := rd.keep()
	if rd.lent == nil {
		if rd.r+n > len(rd.buf) || !rd.drained {
			rd.grow(keep)
		}
		return
	}
	// Everything read is consumed, and the source had no more at the
	// last read (or reads are limited to headers and trailers): the
	// next bytes go into the small array.
	if rd.r == rd.w && keep == rd.r && (rd.drained || rd.big) && n <= len(rd.small) {
		rd.foldCRC()
		rd.r, rd.w, rd.fstart, rd.crcAt = 0, 0, 0, 0
		rd.cfg.Buffers.Put(rd.lent)
		rd.lent, rd.buf = nil, rd.small[:]
	}
}

// grow moves what the small array holds from keep on into a lent buffer.
func (rd *Reader) grow(keep int) {
	b := rd.cfg.Buffers.Get()
	if len(*b) < ReaderBufSize {
		panic(fmt.Sprintf("mpa: BufferPool gave a %d-byte buffer, want at least ReaderBufSize", len(*b)))
	}
	rd.foldCRC()
	rd.w = copy(*b, rd.buf[keep:rd.w])
	rd.r -= keep
	rd.crcAt = rd.r
	if rd.fstart >= 0 {
		rd.fstart -= keep
	}
	rd.lent, rd.buf = b, *b
}

// keep returns the buf index from which bytes must stay buffered.
func (rd *Reader) keep() int {
	if rd.in && rd.fstart >= 0 {
		return rd.fstart
	}
	return rd.r
}

// Buffered returns the stream bytes the Reader holds that no FPDU has
// consumed: from the start of the current FPDU when one is being read
// (and still in the buffer), otherwise what was read ahead.
func (rd *Reader) Buffered() []byte {
	if rd.in && rd.fstart >= 0 {
		return rd.buf[rd.fstart:rd.w]
	}
	return rd.buf[rd.r:rd.w]
}

// Partial reports whether part of an FPDU has arrived and its rest is
// awaited: an FPDU is being read, or bytes of the next one are buffered.
func (rd *Reader) Partial() bool { return rd.in || rd.w > rd.r || len(rd.pre) > 0 }

// InFPDU reports whether an FPDU has been started (Next) and not yet
// finished (Trailer or Rest).
func (rd *Reader) InFPDU() bool { return rd.in }

// WireLen returns the length on the wire of the current (or last) FPDU,
// markers included, and how many markers it holds.
func (rd *Reader) WireLen() (n, markers int) { return rd.wlen, rd.markers }

// fill makes at least n stream bytes available in buf[r:]. It reports
// io.EOF only when the stream ended with nothing buffered.
func (rd *Reader) fill(n int) error { return rd.fillUpTo(n, n) }

// fillUpTo is fill for a caller that needs n bytes now and up to upTo
// (at least n) soon: while reads are limited (big), a read may bring up
// to upTo bytes and the slack past them, not only n; a payload's tail
// that arrives in pieces is thus read with one system call per piece
// that came, not one per bigSlack bytes.
func (rd *Reader) fillUpTo(n, upTo int) error {
	empty := 0
	for rd.w-rd.r < n {
		if rd.cfg.Buffers != nil {
			rd.lend(n)
		}
		keep := rd.keep()
		switch {
		case rd.r == rd.w && keep == rd.r:
			// Nothing to keep: start over at the front.
			rd.foldCRC()
			rd.r, rd.w, rd.fstart, rd.crcAt = 0, 0, 0, 0
		case rd.r+n > len(rd.buf):
			rd.foldCRC()
			if rd.r+n-keep > len(rd.buf) || !rd.cfg.Buffered {
				// The current FPDU's consumed bytes no longer fit
				// beside what is needed, or nothing reads them again
				// (outside Buffered mode they are placed and folded
				// into the CRC; only Buffered would show them): let
				// them go rather than move them. With CRC, which
				// keeps a large FPDU's bytes going through the buffer,
				// moving them was a copy of up to a whole FPDU more.
				keep, rd.fstart = rd.r, -1
			}
			rd.w = copy(rd.buf, rd.buf[keep:rd.w])
			rd.r -= keep
			rd.crcAt = rd.r
			if rd.fstart >= 0 {
				rd.fstart -= keep
			}
		}
		limit := len(rd.buf)
		if rd.big {
			limit = min(limit, rd.r+upTo+bigSlack)
		}
		var m int
		var err error
		if len(rd.pre) > 0 {
			m = copy(rd.buf[rd.w:limit], rd.pre)
			rd.pre = rd.pre[m:]
		} else {
			m, err = rd.src.Read(rd.buf[rd.w:limit])
			if limit == len(rd.buf) {
				rd.drained = m < limit-rd.w
			}
		}
		rd.w += m
		if rd.w-rd.r >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && (rd.w > rd.r || rd.in) {
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

// rawFor returns how many stream bytes hold the next n marker-free bytes.
func (rd *Reader) rawFor(n int) int {
	if !rd.cfg.Markers {
		return n
	}
	t, _ := markedLen(rd.pos, n)
	return t
}

// consume drops k buffered stream bytes. They stay in the buffer until
// they are folded into the CRC (foldCRC), so that the CRC covers them as
// they were read.
func (rd *Reader) consume(k int) []byte {
	p := rd.buf[rd.r : rd.r+k]
	rd.r += k
	rd.pos += uint64(k)
	return p
}

// foldCRC folds the consumed bytes not yet in the CRC into it. It runs
// before those bytes could leave the buffer (compaction, a direct read),
// and the rest is folded with the trailer in one pass.
func (rd *Reader) foldCRC() {
	if rd.in && rd.cfg.CRC && !rd.checked && rd.r > rd.crcAt {
		rd.crc = UpdateCRC(rd.crc, rd.buf[rd.crcAt:rd.r])
	}
	rd.crcAt = rd.r
}

// take consumes the markers at the read position and then up to max
// marker-free bytes that are buffered and contiguous, and returns those
// (nil when none is buffered).
func (rd *Reader) take(max int) []byte {
	if rd.cfg.Markers {
		for rd.r < rd.w {
			off := int(rd.pos % MarkerInterval)
			if off >= MarkerLen {
				max = min(max, MarkerInterval-off)
				break
			}
			rd.consume(min(MarkerLen-off, rd.w-rd.r))
		}
	}
	n := min(max, rd.w-rd.r)
	if n <= 0 {
		return nil
	}
	return rd.consume(n)
}

// Next starts the next FPDU: it reads its ULPDU_Length and returns it.
// It returns io.EOF when the stream ended cleanly before it, and
// ErrULPDUTooLong (consuming nothing; the same call repeats it) for a
// length over the limit. The FPDU must be finished (Trailer or Rest)
// before the next call.
func (rd *Reader) Next() (int, error) {
	if rd.in {
		return rd.ulen, nil
	}
	if !rd.cfg.Markers && rd.w-rd.r >= LengthFieldLen {
		// The length field is buffered (an FPDU of a stream read in
		// large chunks): no fill, no marker walk.
		n := int(binary.BigEndian.Uint16(rd.buf[rd.r:]))
		if n > rd.cfg.MaxULPDU {
			return 0, ErrULPDUTooLong
		}
		wire := FPDULen(n)
		rd.in, rd.ulen, rd.done, rd.hn = true, n, 0, 0
		rd.wlen, rd.end, rd.markers, rd.fstart = wire, rd.pos+uint64(wire), 0, rd.r
		rd.crc, rd.crcAt, rd.checked, rd.crcOK, rd.wireCRC = 0, rd.r, false, false, 0
		rd.r += LengthFieldLen
		rd.pos += LengthFieldLen
		return n, nil
	}
	lw := rd.rawFor(LengthFieldLen)
	if err := rd.fill(lw); err != nil {
		return 0, err
	}
	var n int
	if lw == LengthFieldLen {
		n = int(binary.BigEndian.Uint16(rd.buf[rd.r:]))
	} else {
		var lb [8]byte
		n = int(binary.BigEndian.Uint16(RemoveMarkers(lb[:0], rd.buf[rd.r:rd.r+lw], rd.pos)))
	}
	if n > rd.cfg.MaxULPDU {
		return 0, ErrULPDUTooLong
	}
	wire, markers := FPDULen(n), 0
	if rd.cfg.Markers {
		wire, markers = markedLen(rd.pos, wire)
	}
	rd.in, rd.ulen, rd.done, rd.hn = true, n, 0, 0
	rd.wlen, rd.end, rd.markers, rd.fstart = wire, rd.pos+uint64(wire), markers, rd.r
	rd.crc, rd.crcAt, rd.checked, rd.crcOK, rd.wireCRC = 0, rd.r, false, false, 0
	for got := 0; got < LengthFieldLen; {
		got += len(rd.take(LengthFieldLen - got))
	}
	return n, nil
}

// Whole reads the next FPDU in one step when all of it (length field,
// ULPDU, pad and CRC field) is already buffered and the stream has no
// markers, as it is for the small FPDUs of a stream read in large
// chunks; it never reads from the source. It checks the CRC (with
// ReaderConfig.CRC) over the buffered bytes in one pass, finishes the
// FPDU (as Trailer would: WireLen and CRC report it) and returns its
// ULPDU. The ULPDU is a view of the Reader's buffer: the caller must not
// write into it, and it stays valid until the Reader's next method call
// other than WireLen, CRC, Partial, InFPDU and Buffered. With ok, err is
// nil or ErrBadCRC (the FPDU is finished either way, its ULPDU returned
// too). ok is false and nothing
// changes when an FPDU has been started (Next) and not finished, the
// stream has markers, the FPDU is not all buffered or its ULPDU_Length is
// over the limit: Next reads it then (and reports ErrULPDUTooLong). In
// Buffered mode Whole is what Buffered asks for: the CRC is checked
// before the caller places a byte.
func (rd *Reader) Whole() (ulpdu []byte, ok bool, err error) {
	if r, w := rd.r, rd.w; !rd.in && w-r >= LengthFieldLen {
		b := rd.buf[r:w:w]
		n := int(b[0])<<8 | int(b[1])
		wire := FPDULen(n)
		if n <= rd.wholeMax && wire <= len(b) {
			// The short path: an FPDU all buffered, without CRC and
			// markers; none of its payload went straight into memory,
			// so the next reads are not limited (as Trailer leaves big).
			rd.wlen, rd.wireCRC, rd.big = wire, WireCRC(b[wire-CRCLen:wire]), false
			rd.r = r + wire
			rd.pos += uint64(wire)
			return b[LengthFieldLen : LengthFieldLen+n], true, nil
		}
		return rd.whole(b, n, wire)
	}
	return nil, false, nil
}

// whole is Whole for an FPDU its short path leaves (with CRC or
// markers, large, over the limit or not all buffered), with no FPDU
// started: b is the buffered bytes, n the ULPDU_Length they begin with
// (unless there are markers) and wire FPDULen(n).
func (rd *Reader) whole(b []byte, n, wire int) (ulpdu []byte, ok bool, err error) {
	if rd.cfg.Markers || n > rd.cfg.MaxULPDU || len(b) < wire {
		return nil, false, nil
	}
	f := b[:wire:wire]
	// What WireLen and CRC report (markers is 0 without markers), and
	// what Trailer would leave: the rest of the FPDU state (end among
	// it) is set by the next Next.
	rd.wlen = wire
	rd.wireCRC = WireCRC(f[wire-CRCLen:])
	// As Trailer: no payload went straight into memory, so the next
	// reads are not limited.
	rd.big = false
	rd.r += wire
	rd.pos += uint64(wire)
	ulpdu = f[LengthFieldLen : LengthFieldLen+n]
	if rd.cfg.CRC && UpdateCRC(0, f[:wire-CRCLen]) != GetCRC(f[wire-CRCLen:]) {
		return ulpdu, true, ErrBadCRC
	}
	return ulpdu, true, nil
}

// Fill makes the read Next would make first, without starting an FPDU,
// so that Whole can take the next FPDU when that one read brought all of
// it (the small FPDU a latency-bound stream delivers one at a time): when
// no FPDU has been started, the stream has no markers and fewer than
// LengthFieldLen bytes are buffered, it reads from the source exactly as
// Next would then (as much as the buffer has room for, or a header's
// worth after a payload that went straight into memory), and otherwise
// it does nothing. A large payload therefore still reaches Place's
// direct read as it would without Fill. Its errors are Next's: io.EOF
// when the stream ended cleanly before the next FPDU, io.ErrUnexpectedEOF
// when it ended inside one.
func (rd *Reader) Fill() error {
	if rd.in || rd.cfg.Markers || rd.w-rd.r >= LengthFieldLen {
		return nil
	}
	if rd.r == rd.w && len(rd.pre) == 0 && !rd.big && rd.keepsBuf() {
		// Nothing buffered, no read limit, and no buffer to borrow or
		// give back (lend would keep the one in use): fillUpTo's first
		// read (from the front, as much as the buffer holds), without
		// its walk.
		rd.r, rd.w, rd.fstart, rd.crcAt = 0, 0, 0, 0
		m, err := rd.src.Read(rd.buf)
		rd.drained = m < len(rd.buf)
		rd.w = m
		if m >= LengthFieldLen {
			return nil
		}
		if err != nil {
			if err == io.EOF && m > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		// Less than the length field: fillUpTo reads on (counting
		// empty reads from there).
	}
	return rd.fill(LengthFieldLen)
}

// keepsBuf reports that lend, before a read for the length field with
// nothing buffered, would leave the buffer as it is: there is no
// ReaderConfig.Buffers, or the small array is in use, with room, and the
// source drained (a lent buffer is left to lend, which may give it back).
func (rd *Reader) keepsBuf() bool {
	if rd.cfg.Buffers == nil {
		return true
	}
	return rd.lent == nil && rd.drained && rd.r+LengthFieldLen <= len(rd.buf)
}

// Header makes the first n bytes of the current ULPDU available, reading
// only as many as are missing, and returns them (valid until the next
// Next; n at most MaxHeader and the ULPDU's length). A header can thus be
// checked as soon as its bytes are in, before the rest of the FPDU has
// arrived.
func (rd *Reader) Header(n int) ([]byte, error) {
	if n > MaxHeader || n > rd.ulen || !rd.in {
		return nil, errPastULPDU
	}
	if k := n - rd.hn; k > 0 && !rd.cfg.Markers && rd.w-rd.r >= k {
		// Buffered and marker-free: one copy.
		copy(rd.hdr[rd.hn:n], rd.buf[rd.r:rd.r+k])
		rd.r += k
		rd.pos += uint64(k)
		rd.hn, rd.done = n, rd.done+k
		return rd.hdr[:n], nil
	}
	for rd.hn < n {
		if err := rd.fill(rd.rawFor(n - rd.hn)); err != nil {
			return nil, err
		}
		for rd.hn < n {
			p := rd.take(n - rd.hn)
			if len(p) == 0 {
				break
			}
			rd.hn += copy(rd.hdr[rd.hn:], p)
			rd.done += len(p)
		}
	}
	return rd.hdr[:n], nil
}

// First returns the first byte of the current ULPDU, without consuming
// it, when that byte is already buffered, no header byte has been taken
// yet (Header) and the stream has no markers; ok is false otherwise, and
// nothing changes. A caller whose header length depends on its first byte
// (DDP's T flag) can thus ask Header for the whole header at once instead
// of the shortest header first and then the rest. First never reads from
// the source.
func (rd *Reader) First() (b byte, ok bool) {
	if !rd.in || rd.done != 0 || rd.ulen == 0 || rd.r >= rd.w || rd.cfg.Markers {
		return 0, false
	}
	return rd.buf[rd.r], true
}

// complete reads the rest of the current FPDU into the buffer and checks
// its CRC (Buffered, and Rest).
func (rd *Reader) complete() error {
	rem := int(rd.end - rd.pos)
	if rd.w-rd.r < rem { // not all buffered yet (fillUpTo is not inlined)
		if err := rd.fill(rem); err != nil {
			return err
		}
	}
	t := rd.buf[rd.r : rd.r+rem]
	rd.wireCRC = WireCRC(t[rem-CRCLen:])
	rd.crcOK = true
	if rd.cfg.CRC {
		rd.crcOK = UpdateCRC(rd.crc, rd.buf[rd.crcAt:rd.r+rem-CRCLen]) == GetCRC(t[rem-CRCLen:])
	}
	rd.checked = true
	if !rd.crcOK {
		return ErrBadCRC
	}
	return nil
}

// Place reads the next len(d) payload bytes of the current ULPDU into d,
// each write into d between p.Enter and p.Leave. Bytes already buffered
// are copied; without markers and Buffered, and without CRC or with
// CRCInPlace, a remainder of at least DirectMin is read straight from a
// VectorReader source into d (and with CRC folded into it there). In
// Buffered mode the whole FPDU is read and its CRC checked (ErrBadCRC)
// before the first byte is written.
func (rd *Reader) Place(d []byte, p Placer) error {
	if !rd.in || len(d) > rd.ulen-rd.done {
		return errPastULPDU
	}
	if rd.cfg.Buffered && !rd.checked {
		if err := rd.complete(); err != nil {
			return err
		}
	}
	if n := len(d); n > 0 && n <= rd.w-rd.r && !rd.cfg.Markers {
		// All of it is buffered, without markers (a small FPDU read
		// with others): one placement, one copy.
		if err := p.Enter(n, false); err != nil {
			return err
		}
		copy(d, rd.buf[rd.r:rd.r+n])
		p.Leave()
		rd.r += n
		rd.pos += uint64(n)
		rd.done += n
		return nil
	}
	for len(d) > 0 {
		if src := rd.take(len(d)); len(src) > 0 {
			if err := p.Enter(len(src), false); err != nil {
				return err
			}
			n := copy(d, src)
			p.Leave()
			d = d[n:]
			rd.done += n
			continue
		}
		if len(d) >= DirectMin && rd.vec != nil && (!rd.cfg.CRC || rd.cfg.CRCInPlace) && !rd.cfg.Markers && !rd.cfg.Buffered && len(rd.pre) == 0 {
			if err := p.Enter(len(d), true); err != nil {
				return err
			}
			err := rd.readDirect(d)
			p.Leave()
			return err
		}
		// Wait for more bytes, outside a placement; place them as they
		// come (a read may bring the rest of the payload, and the
		// trailer and next header after it).
		if err := rd.fillUpTo(rd.rawFor(1), rd.rawFor(len(d))); err != nil {
			return err
		}
	}
	return nil
}

// readDirect reads d straight from the source and, in the same call,
// what follows it into the empty buffer, as much as the buffer holds
// up to ReaderBufSize (below DirectSoleMin; see below): the trailer and
// the next header, and on a busy stream the FPDUs after
// them, which Whole and Place then take from the buffer. A stream of
// large FPDUs thus costs one system call per buffer's worth of FPDUs,
// not one per FPDU: the bytes read ahead are copied once more, but a
// readv costs more than the copy of the FPDUs it saves a readv for
// (make bench, 1 MiB Writes without CRC over loopback, where an FPDU
// is 32 KiB: readv calls 32 -> about 8 per MiB, less CPU on both
// sides; one QP 4.7-5.3 -> 5.8-6.5 GB/s, four QPs 4.5-5.2 -> 5.9-6.0
// GB/s in aggregate; the read ahead limited to the trailer and next
// header, and the reads after every large FPDU limited likewise, had
// made it one readv per FPDU). A Reader that borrows its buffer
// borrows one for the read ahead when the last read filled the room it
// had (the source had more), and otherwise reads ahead into its small
// array: a stream that has gone quiet does not take a buffer back.
//
// A remainder of DirectSoleMin or more (loopback's 62 KiB FPDUs: the
// MULPDU follows the EMSS) is read ahead only bigSlack bytes, the
// trailer and the next header, and the reads after it stay limited
// (Trailer's big), so that the next payload goes straight too, also
// past a short FPDU (a long message's tail) whose rest a limited read
// brings without the large payload after it. A full
// read ahead there copied about 70% of a 1 MiB Write stream
// (QPStats.RxPlacedCopied) and took half the readv calls (12.5 against
// 22 per MiB). On the AMD VMs of 2026-12-07 both used the same CPU per
// MiB (541 and 560 µs on four QPs). On an Intel VM, where system calls
// cost a third as much, ten interleaved rounds of test/bench put four
// QPs at 0.95-1.16 of four bare streams against 0.72-1.00 with the full
// read ahead, and one QP at 1.28-1.69 against 1.11-1.70
// (test/bench/RESULTS.md). The bigSlack bytes go into the small array:
// a Reader that borrows its buffer borrows none for them. Below
// DirectSoleMin the full read ahead stays: at 32 KiB FPDUs it was the
// gain above.
//
// The read ahead takes at most ReaderBufSize bytes, however long the
// buffer: a longer one (a BufferPool may lend one) serves the reads of
// small FPDUs, and here would only copy more of the next payloads.
func (rd *Reader) readDirect(d []byte) error {
	rd.foldCRC()
	// A sole read's bigSlack bytes fit the small array: it borrows no
	// buffer for them.
	sole := len(d) >= DirectSoleMin
	if rd.cfg.Buffers != nil && rd.lent == nil && !rd.drained && !sole {
		rd.grow(rd.r) // nothing buffered: an empty buffer
	}
	rd.r, rd.w, rd.fstart, rd.crcAt = 0, 0, -1, 0
	ahead := min(len(rd.buf), ReaderBufSize)
	if sole {
		ahead = min(ahead, bigSlack)
	}
	for len(d) > 0 {
		n, err := rd.vec.ReadVec(d, rd.buf[rd.w:ahead])
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		k := min(n, len(d))
		if rd.cfg.CRC {
			// CRCInPlace: the bytes as placed, read back within the
			// placement (the Placer's fence keeps the memory there).
			rd.crc = UpdateCRC(rd.crc, d[:k])
		}
		d = d[k:]
		rd.pos += uint64(k)
		rd.done += k
		rd.w += n - k
	}
	// An unlimited read, as fillUpTo's: drained when it left room. A
	// sole read leaves the reads after it limited (Trailer's big).
	rd.drained = rd.w < ahead
	rd.directDrained = rd.drained || sole
	return nil
}

// Discard drops the rest of the current ULPDU (folded into the CRC).
func (rd *Reader) Discard() error {
	if !rd.in {
		return errPastULPDU
	}
	for rd.done < rd.ulen {
		k := min(rd.ulen-rd.done, ReaderBufSize/2)
		if err := rd.fill(rd.rawFor(k)); err != nil {
			return err
		}
		for k > 0 {
			p := rd.take(k)
			if len(p) == 0 {
				break
			}
			k -= len(p)
			rd.done += len(p)
		}
	}
	return nil
}

// Trailer finishes the current FPDU once its whole ULPDU has been
// consumed (Header, Place, Discard): it reads the pad and the CRC field
// and checks the CRC over every byte of the FPDU as it was read
// (ErrBadCRC on a mismatch; the FPDU is finished either way).
func (rd *Reader) Trailer() error {
	if !rd.in || rd.done != rd.ulen {
		return errPastULPDU
	}
	// A payload that went straight into memory and found the source
	// drained: read this trailer and the next header only, not the next
	// payload. A busy stream's reads fill the buffer (see readDirect).
	rd.big = rd.directDrained
	if !rd.checked {
		if err := rd.complete(); err != nil && err != ErrBadCRC {
			return err
		}
	}
	rd.finish()
	if !rd.crcOK {
		return ErrBadCRC
	}
	return nil
}

// finish consumes the checked rest of the current FPDU.
func (rd *Reader) finish() {
	rem := int(rd.end - rd.pos)
	rd.r += rem
	rd.pos += uint64(rem)
	rd.in, rd.directDrained = false, false
}

// Rest reads the whole rest of the current FPDU, checks its CRC and
// finishes the FPDU. It returns the rest of the ULPDU (from where
// Header left off; markers removed), valid until the next Next, together
// with ErrBadCRC on a mismatch.
func (rd *Reader) Rest() ([]byte, error) {
	if !rd.in {
		return nil, errPastULPDU
	}
	if !rd.checked {
		if err := rd.complete(); err != nil && err != ErrBadCRC {
			return nil, err
		}
	}
	n := rd.ulen - rd.done
	rem := int(rd.end - rd.pos)
	raw := rd.buf[rd.r : rd.r+rem]
	ul := raw[:min(n, len(raw))]
	if rd.markers != 0 {
		rd.plain = RemoveMarkers(rd.plain[:0], raw, rd.pos)
		ul = rd.plain[:n]
	}
	rd.done = rd.ulen
	rd.finish()
	if !rd.crcOK {
		return ul, ErrBadCRC
	}
	return ul, nil
}

// CRC returns the current (or last) FPDU's CRC field as WireCRC reads it,
// once its trailer has been read.
func (rd *Reader) CRC() uint32 { return rd.wireCRC }
