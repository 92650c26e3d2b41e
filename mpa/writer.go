package mpa

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// Limits of one Writer batch. A batch is written with one system call:
// its iovecs stay under Linux's IOV_MAX (1024).
const (
	// WriterMaxIOV bounds the iovecs of a batch without CRC.
	WriterMaxIOV = 1000
	// WriterMaxBytes is the size past which a batch takes no more FPDUs
	// (the FPDU that crosses it is the batch's last).
	WriterMaxBytes = 512 << 10
	// WriterBufLen is the least size of a batch buffer with CRC: a batch
	// of WriterMaxBytes plus the FPDU that crosses it, at most one ULPDU
	// (under 64 KiB) with its framing and markers.
	WriterBufLen = WriterMaxBytes + 80<<10
	// WriterSmallMaxBytes is the size past which a batch without CRC
	// takes no more small FPDUs (ULPDUs a Run takes, copied whole into
	// the scratch arena; BeginRun and Room hold to it): a stream of small messages
	// goes out in writes of at most 120 KiB, under two loopback segments
	// (MSS 65483), while the 512 KiB of WriterMaxBytes stays the bound of
	// large FPDUs, whose fewer system calls it buys. Chosen with
	// test/bench's 64-byte Write stream over loopback (SQ window 8192,
	// the send engine's batch bounded by this alone): batches of up to
	// 112000 to 130500 bytes ran 34-38 M msgs/s in one quiet phase of
	// the 2-CPU VM, while 131072 (1560 FPDUs of 84 bytes, just past two
	// segments) ran 19-20, as did 140000, 197000 and 240000. Those sizes
	// are slow with BBR, the VM's congestion control, alone: with cubic
	// 126000 and 131072 ran alike (26-28). Bounded so, a window deeper
	// than one batch lets the application post while the batch before
	// is being written. With CRC the bound stays WriterMaxBytes: a Run
	// there takes FPDUs of up to 8 KiB, and 4 KiB Writes with CRC ran
	// about 12% slower in batches bounded at 120 KiB.
	WriterSmallMaxBytes = 120 << 10
	// WriterScratchLen is the size of the scratch arena a Writer
	// borrows for each batch when WriterConfig.Scratch is empty. Small
	// FPDUs are copied into it whole, up to WriterSmallMaxBytes of them
	// (1462 FPDUs of a 64-byte Write), with room left for the headers of
	// larger FPDUs after them. Before that bound, the arena alone bounded
	// a batch of small FPDUs: 128 KiB held 1560 of a 64-byte Write, a
	// batch of 1024 at once (64 KiB held 780; the 64-byte Write stream of
	// test/bench, 1024 work requests outstanding, went from 9.7-11.5 to
	// 10.8-12.9 M msgs/s in three interleaved rounds).
	WriterScratchLen = 128 << 10
	// WriterCopyLen is the longest payload piece a Writer without CRC
	// and markers copies into its scratch arena instead of referring to
	// it (see Writer): every data FPDU of a link with an Ethernet MTU of
	// 1500 (MSS 1448 or 1460: payloads of at most 1440 bytes). The
	// kernel's copy out of a writev walks its iovecs one by one, and a
	// small piece costs about as much there as a large one: over a veth
	// with MTU 1500 (test/bench, 1 MiB Writes, gosiw's side alone, perf)
	// _copy_from_iter took 217 µs per MiB for gosiw's two iovecs per
	// FPDU against 108 for the bare stream's one write (62 once copied).
	// Copied, in four interleaved rounds of that case, gosiw ran
	// 1632-1848 MB/s at 820-910 µs of CPU per MiB instead of 1219-1507 at
	// 908-1105 (test/bench/RESULTS.md, 2026-12-07), with 8.75 writes per
	// MiB instead of 2.27 (small FPDUs bound a batch at
	// WriterSmallMaxBytes); over loopback, streams of 1024- and 1424-byte
	// Writes and Sends ran 1.7-3.0 M msgs/s instead of 1.3-2.6 in three
	// rounds, 2048-byte ones alike with and without the copy. It was 512
	// until then, chosen with BenchmarkWriterSmall (writev over loopback
	// to a reader that discards, 64 FPDUs of one 4 KiB source per
	// batch): 13-25% less CPU for payloads of 64 to 512 bytes, then none
	// at 1 KiB and 23% more at 2 KiB; on 2026-12-07 that benchmark
	// measured less with the copy at 1024, 1424 and 2048 bytes, too
	// noisy to choose by.
	WriterCopyLen = 1536
	// WriterSmallLen is the size of the array a Writer holds of its own
	// for a batch that a Run for one FPDU starts (see Writer): a whole
	// FPDU of a ULPDU of up to 634 bytes (a header of up to 122 bytes
	// and a payload of up to 512), so that a batch of one such FPDU (a
	// direct send) borrows, clears and gives back no arena or buffer; a
	// Run there takes no longer FPDU (Next returns nil), which then
	// goes to a borrowed arena.
	WriterSmallLen = 640
	// defaultMaxHeader is WriterConfig.MaxHeader when it is zero.
	defaultMaxHeader = 128
)

// BufferPool lends a Writer with CRC its batch buffers, and a Reader its
// buffer (ReaderConfig.Buffers). Get returns a buffer of at least
// WriterBufLen bytes for a Writer, ReaderBufSize for a Reader (its
// contents do not matter); Put takes back a buffer Get returned, once
// its user no longer refers to it. A pool shared by several users must
// be safe for concurrent use.
type BufferPool interface {
	Get() *[]byte
	Put(b *[]byte)
}

// WriterConfig says how a Writer frames the FPDUs of one direction, as
// the handshake negotiated.
type WriterConfig struct {
	// CRC: fill the CRC field with the CRC32c. The FPDUs are then copied
	// into a batch buffer and the CRC computed over the copy.
	CRC bool
	// Markers: insert markers; StreamOffset is the marker position of the
	// first byte the Writer produces (0 at the first FPDU of the Full
	// Operation phase), a multiple of 4.
	Markers      bool
	StreamOffset uint64
	// MaxHeader is the longest hdr Begin is given (zero means 128): Room
	// reserves that much scratch for every FPDU.
	MaxHeader int
	// Scratch is the arena for ULPDU_Length fields, headers and markers;
	// its capacity bounds what one batch holds of them. The Writer uses
	// it from Init until Release. Empty, the Writer borrows an arena of
	// WriterScratchLen bytes from a pool shared by all Writers when a
	// batch gets its first FPDU (Begin; a batch in the Writer's small
	// array, see Writer, only when it moves out) and gives it back when
	// the batch is written or reset (Flush, Reset, Release): an idle
	// Writer holds none.
	Scratch []byte
	// Buffers lends the batch buffers with CRC. Nil, the Writer allocates
	// one the first time it needs it and keeps it.
	Buffers BufferPool
}

// Writer frames FPDUs (RFC 5044 §4) into batches, each written with one
// system call, with the markers of RFC 5044 §4.3 every 512 octets of the
// stream when configured. A batch is filled FPDU by FPDU: Room, Begin,
// Payload (any number of pieces), End, or for an FPDU whose payload is
// one piece AddFPDU (Room and all of it in one call), or for a stretch
// of small FPDUs a Run (BeginRun, Next for each, EndRun: the
// small-message path, the caller filling each ULPDU in place); Flush
// writes it. Its two modes, fixed by WriterConfig.CRC:
//
// Without CRC (zero copy) the batch is a list of iovecs for one writev
// (net.Buffers): ULPDU_Length, headers and markers from the scratch
// arena, payload slices as Payload was given them, pad and the zero CRC
// field from a constant (with markers) or the arena (without). Nothing
// but the headers is copied, except that without markers a payload
// piece of at most WriterCopyLen bytes is copied into the arena beside
// its header (in a Run, or by AddFPDU, the payload of a ULPDU of at most
// MaxHeader+WriterCopyLen bytes), while the arena has room; pieces of the arena that follow
// each other there go out as one iovec, so a batch of small FPDUs is
// one iovec instead of three or four per FPDU (the kernel walks iovecs
// one by one). The payload slices must stay valid until Flush returns;
// bytes that change before then are sent as they are then, or, for a
// copied piece, as they were when Payload copied them (verbs leave such
// data undefined).
//
//	FPDU: [len|hdr]   [payload ...]    [pad|CRC=0]
//	      scratch     caller's memory  scratch (constant with markers)
//	small: [len|hdr|payload|pad|CRC=0][len|hdr|payload|pad|CRC=0]...
//	      one scratch iovec
//
// With CRC (copy mode) every byte is copied into one batch buffer (from
// WriterConfig.Buffers) and the CRC32c is computed over that copy, piece
// by piece right after copying it, while it is in cache. The batch goes
// out with one write of that buffer, so the CRC covers exactly the bytes
// on the wire even when the payload's memory changes meanwhile, and
// Payload's slices need stay valid only until it returns. The buffer is
// taken when the batch gets its first byte (or moves out of the small
// array, below) and given back when it is written or reset: an idle
// Writer holds none.
//
//	batch buffer: [len|hdr|payload|pad|CRC][len|hdr|payload|pad|CRC]...
//
// An empty batch that a Run for one FPDU starts (BeginRun(1), AddFPDU;
// without markers) is laid out in the Writer's own array of
// WriterSmallLen bytes (its scratch arena and one iovec without CRC, its
// batch buffer with CRC) and moves to a borrowed arena or buffer, copied
// there, only when it grows past one run for one FPDU: a Run for more,
// or any other call that adds to the batch (Begin, FPDU, AddFPDU of an
// FPDU small has no room for). A batch of one small FPDU, the direct
// send of an idle QP, borrows nothing.
//
// Markers are placed with the layout functions of InsertMarkers, so a
// Writer's stream equals the one Framer (and InsertMarkers) build. A
// Writer must be used from one goroutine; its zero value is ready after
// Init.
type Writer struct {
	crc, markers bool
	maxHeader    int
	buffers      BufferPool
	pos          uint64 // stream offset of the next byte

	scratch  []byte      // never grows past its capacity (Room); nil while lent and idle
	scratchp *[]byte     // the arena borrowed from scratchPool for this batch (nil: none, or Scratch)
	iov      [][]byte    // zero copy: the batch, in *iovp
	iovp     *[][]byte   // zero copy: the iovec array borrowed from iovPool for this batch
	wv       net.Buffers // zero copy: Flush's writev argument
	buf      *[]byte     // copy mode: the batch buffer, while the batch is not empty
	batch    []byte      // copy mode: the batch so far, in *buf

	// arena, zero copy without WriterConfig.Scratch: the arena and iovec
	// array of the batch lent together (zeroCopyPool), which scratchp and
	// iovp then point into.
	arena *writerArena

	// onSmall: the batch is in small (a Run for one FPDU started it: see Writer),
	// without CRC scratch in small and iov in smallIOV (at most one
	// iovec, the open one: only EndRun adds to such a batch), with CRC
	// batch in small (buf nil). promote moves it out.
	onSmall  bool
	small    [WriterSmallLen]byte
	smallIOV [1][]byte

	batchBytes int // bytes in the batch
	fpdus      int // FPDUs in the batch

	// join: zero copy without markers, where pieces of scratch that
	// follow each other share an iovec. When the last iovec is a piece
	// of scratch that may still grow (the open iovec), scrEnd is where
	// in scratch it ends (-1 otherwise) and scrStart where it starts; it
	// grows by moving scrEnd alone, and syncIOV writes its extent into
	// iov before anything reads or appends iovecs. spare is the scratch
	// the last Room left beyond what it reserved for its FPDU, which
	// Payload may fill with copies.
	join     bool
	scrStart int
	scrEnd   int
	spare    int
	// A batch partly written (Wrote): zero copy, iov[iovHead:] is the
	// rest (iov[iovHead] trimmed in place); copy mode, batch[batchOff:].
	// batchOff is the bytes Wrote has recorded, in both modes.
	iovHead  int
	batchOff int
	pend     [1][]byte // copy mode: Pending's result

	fpduStart uint64 // stream offset of the current FPDU
	fpduCRC   uint32 // CRC so far of the current FPDU (copy mode)
	ulpduLen  int    // ULPDU_Length of the current FPDU
}

// Init configures w, dropping any batch in progress.
func (w *Writer) Init(cfg WriterConfig) {
	w.Release()
	w.crc, w.markers = cfg.CRC, cfg.Markers
	w.join = !cfg.CRC && !cfg.Markers
	w.scrEnd, w.spare = -1, 0
	w.pos = cfg.StreamOffset
	w.maxHeader = cfg.MaxHeader
	if w.maxHeader <= 0 {
		w.maxHeader = defaultMaxHeader
	}
	w.buffers = cfg.Buffers
	if w.buffers == nil {
		w.buffers = &ownBuffer{}
	}
	w.scratch = nil
	if cap(cfg.Scratch) > 0 {
		w.scratch = cfg.Scratch[:0]
	}
}

// The arenas and iovec arrays Writers borrow per batch (pointers, so that
// a Put does not allocate); zeroCopyPool lends both at once to a Writer
// without CRC and WriterConfig.Scratch, so that its batch costs one Get
// and one Put.
var (
	scratchPool = sync.Pool{New: func() any {
		b := make([]byte, 0, WriterScratchLen)
		return &b
	}}
	iovPool = sync.Pool{New: func() any {
		v := make([][]byte, 0, WriterMaxIOV+8)
		return &v
	}}
	zeroCopyPool = sync.Pool{New: func() any {
		return &writerArena{
			scratch: make([]byte, 0, WriterScratchLen),
			iov:     make([][]byte, 0, WriterMaxIOV+8),
		}
	}}
)

// writerArena is a scratch arena and an iovec array lent together
// (zeroCopyPool).
type writerArena struct {
	scratch []byte
	iov     [][]byte
}

// borrow takes the batch's scratch arena (when WriterConfig.Scratch was
// empty) and, without CRC, its iovec array; a batch without CRC in small
// moves there (promote; with CRC takeBuf moves it).
func (w *Writer) borrow() {
	if w.onSmall && !w.crc {
		w.promote(len(w.scratch))
		return
	}
	if w.scratch == nil && !w.crc && w.iovp == nil {
		a := zeroCopyPool.Get().(*writerArena)
		w.arena, w.scratchp, w.iovp = a, &a.scratch, &a.iov
		w.scratch, w.iov = a.scratch[:0], a.iov[:0]
		return
	}
	if w.scratch == nil {
		w.scratchp = scratchPool.Get().(*[]byte)
		w.scratch = (*w.scratchp)[:0]
	}
	if !w.crc && w.iovp == nil {
		w.iovp = iovPool.Get().(*[][]byte)
		w.iov = (*w.iovp)[:0]
	}
}

// promote moves a batch in small (onSmall) to a borrowed arena and iovec
// array (without CRC) or a batch buffer (with CRC), copying its first
// live bytes (the batch and, from a Run, the FPDUs it laid out so far).
func (w *Writer) promote(live int) {
	w.onSmall = false
	if w.crc {
		n := len(w.batch)
		w.batch = nil
		w.takeBuf()
		copy(w.batch[:live], w.small[:live])
		w.batch = w.batch[:n]
		return
	}
	n, iovs := len(w.scratch), len(w.iov)
	a := zeroCopyPool.Get().(*writerArena)
	w.arena, w.scratchp, w.iovp = a, &a.scratch, &a.iov
	w.scratch = a.scratch[:live]
	copy(w.scratch, w.small[:live])
	w.scratch = w.scratch[:n]
	// The one iovec is the open one, rebuilt from scrStart and scrEnd by
	// syncIOV.
	w.iov = a.iov[:iovs]
	if iovs > 0 {
		w.iov[0] = nil
	}
	w.smallIOV[0] = nil
}

// Reset empties the batch, giving its buffers back; the stream position
// stays.
func (w *Writer) Reset() {
	if w.onSmall {
		// Nothing borrowed: no buffer, arena or iovec array (promote
		// takes them), and with CRC scratch is as an empty batch leaves
		// it (nothing adds to it in small).
		w.onSmall = false
		if w.crc {
			w.batch = nil
		} else {
			w.smallIOV[0] = nil
			w.scratch, w.iov = nil, nil
		}
		w.batchBytes, w.fpdus = 0, 0
		w.scrEnd, w.spare = -1, 0
		w.iovHead, w.batchOff = 0, 0
		w.pend[0] = nil
		return
	}
	if w.buf != nil {
		w.buffers.Put(w.buf)
		w.buf, w.batch = nil, nil
	}
	if a := w.arena; a != nil {
		clear(w.iov)
		a.iov = w.iov[:0]
		zeroCopyPool.Put(a)
		w.arena, w.scratchp, w.scratch, w.iovp, w.iov = nil, nil, nil, nil, nil
	}
	if w.scratchp != nil {
		scratchPool.Put(w.scratchp)
		w.scratchp, w.scratch = nil, nil
	} else if w.scratch != nil {
		w.scratch = w.scratch[:0]
	}
	if w.iovp != nil {
		clear(w.iov)
		*w.iovp = w.iov[:0]
		iovPool.Put(w.iovp)
		w.iovp, w.iov = nil, nil
	}
	w.batchBytes, w.fpdus = 0, 0
	w.scrEnd, w.spare = -1, 0
	w.iovHead, w.batchOff = 0, 0
	w.pend[0] = nil
}

// Release empties the batch and lets go of WriterConfig.Scratch and of
// everything the batch referred to; the caller may then reuse Scratch.
// Only Init makes w usable again.
func (w *Writer) Release() {
	if w.buffers != nil {
		w.Reset()
	}
	w.scratch = nil
}

// Empty reports whether the batch holds nothing.
func (w *Writer) Empty() bool { return len(w.iov) == 0 && len(w.batch) == 0 }

// FPDUs returns the number of FPDUs in the batch.
func (w *Writer) FPDUs() int { return w.fpdus }

// Pos returns the stream offset of the next byte (the marker position).
func (w *Writer) Pos() uint64 { return w.pos }

// Room reports whether an FPDU with a ULPDU of ulen bytes, whose payload
// comes in at most pieces slices, fits in the batch. Begin must follow
// only a Room that reported true for the same FPDU. With a scratch
// arena of WriterScratchLen bytes an empty batch has room for any FPDU
// of up to MaxULPDU bytes whose payload comes in up to 700 pieces.
// Without CRC a batch that is not empty has no room for a small FPDU
// (a ULPDU a Run takes) past WriterSmallMaxBytes, as a Run has none.
func (w *Writer) Room(ulen, pieces int) bool {
	if w.fpdus > 0 && w.batchBytes+ulen > WriterMaxBytes {
		return false
	}
	if w.join && w.fpdus > 0 && ulen <= w.smallULen() && w.batchBytes+FPDULen(ulen) > WriterSmallMaxBytes {
		return false
	}
	needScratch, needIOV := LengthFieldLen+w.maxHeader+8, pieces+2
	if w.markers {
		m := (ulen+LengthFieldLen+CRCLen+3)/MarkerInterval + 2
		needScratch += m * MarkerLen
		needIOV += 2 * m
	}
	if w.crc {
		// The whole FPDU goes into the batch buffer: length field, ULPDU,
		// pad of at most 3, CRC, and the markers counted in needScratch.
		if len(w.batch)+needScratch+ulen+3+CRCLen > WriterBufLen {
			return false
		}
	}
	scratchCap := cap(w.scratch)
	if w.scratch == nil || (w.onSmall && w.join) {
		scratchCap = WriterScratchLen // borrowed by Begin (a batch in small moves there)
	}
	if len(w.scratch)+needScratch > scratchCap || len(w.iov)+needIOV > WriterMaxIOV {
		return false
	}
	w.spare = scratchCap - len(w.scratch) - needScratch
	return true
}

// Begin starts an FPDU whose ULPDU is hdr (at most MaxHeader bytes)
// followed by ulen-len(hdr) payload bytes, which Payload then takes.
func (w *Writer) Begin(hdr []byte, ulen int) {
	if w.scratch == nil || (!w.crc && w.iovp == nil) {
		w.borrow()
	}
	w.fpduStart, w.fpduCRC, w.ulpduLen = w.pos, 0, ulen
	s := len(w.scratch)
	w.scratch = binary.BigEndian.AppendUint16(w.scratch, uint16(ulen))
	w.scratch = append(w.scratch, hdr...)
	if w.join {
		w.putScratch(s)
		return
	}
	w.emit(w.scratch[s:len(w.scratch):len(w.scratch)])
}

// Payload adds payload bytes to the current FPDU. Without CRC the batch
// refers to p until Flush or Reset, unless p is a piece of at most
// WriterCopyLen bytes copied into scratch (without markers); with CRC p
// is copied at once.
func (w *Writer) Payload(p []byte) {
	switch {
	case len(p) == 0:
	case w.join && len(p) <= writerCopyLen && len(p) <= w.spare:
		w.spare -= len(p)
		s := len(w.scratch)
		w.scratch = append(w.scratch, p...) // Room left the capacity
		w.putScratch(s)
	default:
		w.emit(p)
	}
}

// End adds the pad and the CRC field, completing the FPDU.
func (w *Writer) End() {
	if w.join {
		// Room reserved 8 bytes for the pad and the CRC field.
		s := len(w.scratch)
		w.scratch = append(w.scratch, zeroPad[:PadLen(w.ulpduLen)]...)
		w.scratch = append(w.scratch, zeroPad[:CRCLen]...)
		w.putScratch(s)
		w.fpdus++
		return
	}
	if pad := PadLen(w.ulpduLen); pad > 0 {
		w.emit(zeroPad[:pad])
	}
	if w.markers {
		// A marker just before the CRC field belongs to this FPDU and is
		// covered by its CRC.
		if marker, _ := markerSpan(w.pos); marker {
			w.marker()
		}
	}
	if w.crc {
		w.batch = binary.LittleEndian.AppendUint32(w.batch, w.fpduCRC) // PutCRC's order
	} else {
		w.iov = append(w.iov, zeroPad[:CRCLen])
	}
	w.pos += CRCLen
	w.batchBytes += CRCLen
	w.fpdus++
}

// FPDU adds a whole FPDU whose ULPDU is hdr (at most MaxHeader bytes)
// followed by payload: Begin(hdr, len(hdr)+len(payload)), Payload(payload)
// and End in one call, with the same result and the same rules (Room
// must have reported true for it, with one piece). With CRC and without
// markers an FPDU of up to 8 KiB is copied into the batch buffer in one
// step; AddFPDU is the small-message path of both modes.
func (w *Writer) FPDU(hdr, payload []byte) {
	if w.crc && !w.markers && len(hdr)+len(payload) <= copyChunk {
		w.takeBuf()
		w.copyFPDU(hdr, payload)
		return
	}
	w.Begin(hdr, len(hdr)+len(payload))
	w.Payload(payload)
	w.End()
}

// AddFPDU adds the whole FPDU that FPDU(hdr, payload) adds if the batch
// has room for it, and reports whether it did; when it reports false the
// batch is as it was, and the caller flushes it and adds the FPDU to the
// next one (an empty batch has room for any FPDU Room accepts there).
// It is Room(len(hdr)+len(payload), 1) and FPDU in one call, except that
// a small FPDU (one a Run takes) is measured by the bytes it takes
// rather than by Room's bound for any FPDU. hdr must be at most
// MaxHeader bytes long.
func (w *Writer) AddFPDU(hdr, payload []byte) bool {
	if len(hdr) <= w.maxHeader {
		r := w.BeginRun(1)
		if b := r.Next(len(hdr) + len(payload)); b != nil {
			putHeader(b, hdr)
			copy(b[len(hdr):], payload)
			w.EndRun(&r)
			return true
		}
		w.EndRun(&r)
	}
	if !w.Room(len(hdr)+len(payload), 1) {
		return false
	}
	w.FPDU(hdr, payload)
	return true
}

// Run is a stretch of whole small FPDUs added to a Writer's batch in one
// pass, the small-message path: BeginRun opens it on the free space of
// the batch, Next lays out each FPDU there (its length field, pad and
// CRC field) and returns its ULPDU, which the caller fills, header and
// payload, with one copy of each, and EndRun adds them all to the batch
// at once (with CRC computing each FPDU's CRC over its bytes there, so
// that the CRC covers the bytes sent). Between BeginRun and EndRun the
// caller makes no other call on the Writer.
//
// A run holds FPDUs whose ULPDU is small: without CRC at most
// MaxHeader+WriterCopyLen bytes (a header and a payload the Writer would
// copy beside it), placed in the scratch arena (one iovec for the run, joined to the arena's open
// one); with CRC at most 8 KiB, in the batch buffer. With markers a run
// takes none. Next refusing an FPDU tells neither that it is not small
// nor that the batch is full: the caller ends the run and adds the FPDU
// with AddFPDU, which tells.
type Run struct {
	free  []byte // the free space of the batch the run fills, from its next FPDU on
	size  int    // the length of free at BeginRun
	fpdus int    // FPDUs taken
	max   int    // the longest ULPDU the run takes
}

// BeginRun opens a run on the batch's free space for about n FPDUs (a
// hint). A run for one FPDU (n <= 1) on an empty batch, or on a batch in
// the Writer's small array, opens there (see Writer): Next refuses what
// small has no room for, and the caller's AddFPDU moves the batch out.
// Any other run borrows the batch's arena or buffer, as Begin would,
// moving a batch in small there first.
func (w *Writer) BeginRun(n int) Run {
	var free []byte
	switch {
	case w.join:
		switch {
		case n <= 1 && w.scratch == nil:
			// An empty batch with nothing borrowed (WriterConfig.Scratch
			// empty): the run is all of small.
			w.scratch, w.iov, w.onSmall = w.small[:0], w.smallIOV[:0], true
			return Run{free: w.small[:], size: WriterSmallLen, max: w.smallULen()}
		case n <= 1 && w.onSmall:
		case w.scratch == nil || w.iovp == nil:
			w.borrow() // a batch's first FPDU, or one in small
		}
		s := len(w.scratch)
		if s != w.scrEnd && len(w.iov) >= WriterMaxIOV {
			return Run{} // the run would take one more iovec
		}
		free = w.scratch[s:min(cap(w.scratch), s+max(0, WriterSmallMaxBytes-w.batchBytes))]
		return Run{free: free, size: len(free), max: w.smallULen()}
	case w.crc && !w.markers:
		switch {
		case n <= 1 && w.buf == nil:
			if !w.onSmall {
				w.batch, w.onSmall = w.small[:0], true // an empty batch
			}
		default:
			w.takeBuf() // moves a batch in small
		}
		s := len(w.batch)
		free = w.batch[s:min(cap(w.batch), s+max(0, WriterMaxBytes-w.batchBytes))]
		return Run{free: free, size: len(free), max: copyChunk}
	}
	return Run{}
}

// Next lays out, after the run's FPDUs, a whole FPDU with a ULPDU of
// ulen bytes (its length field, its pad and a zero CRC field) and
// returns the ULPDU for the caller to fill, every byte of it; nil when
// the run cannot take it (see Run).
func (r *Run) Next(ulen int) []byte {
	n := FPDULen(ulen)
	if ulen > r.max || n > len(r.free) {
		return nil
	}
	b := r.free[:n:n] // capped at n: b[n-8:] needs no check of the capacity left
	r.free = r.free[n:]
	r.fpdus++
	// Pad and the CRC field, 4 to 7 bytes, in one word of 8 (an FPDU
	// has at least 8 bytes) that may reach back into the ULPDU, which
	// the caller then fills; the length field after it.
	binary.LittleEndian.PutUint64(b[n-8:], 0)
	binary.BigEndian.PutUint16(b, uint16(ulen))
	return b[LengthFieldLen:][:ulen]
}

// FPDUs returns the number of FPDUs in the run.
func (r *Run) FPDUs() int { return r.fpdus }

// EndRun adds the run's FPDUs, filled by now, to the batch; with CRC it
// computes the CRC of each over its bytes in the batch buffer. r is
// empty afterwards.
func (w *Writer) EndRun(r *Run) {
	n := r.size - len(r.free)
	if n == 0 {
		return
	}
	w.fpdus += r.fpdus
	if w.join {
		s := len(w.scratch)
		w.scratch = w.scratch[:s+n]
		w.putScratch(s)
	} else {
		// The run's FPDUs, walked by their length fields.
		for b := w.batch[len(w.batch) : len(w.batch)+n]; len(b) > 0; {
			ulen := int(binary.BigEndian.Uint16(b))
			c := LengthFieldLen + ulen + PadLen(ulen)                 // the bytes the CRC covers
			binary.LittleEndian.PutUint32(b[c:], UpdateCRC(0, b[:c])) // PutCRC's order
			b = b[c+CRCLen:]
		}
		w.batch = w.batch[:len(w.batch)+n]
		w.pos += uint64(n)
		w.batchBytes += n
	}
	*r = Run{}
}

// One lays out, as the whole of an empty batch, one FPDU with a ULPDU
// of ulen bytes in the Writer's own array (see Writer), and returns the
// ULPDU for the caller to fill, every byte of it; EndOne then adds the
// FPDU to the batch, as BeginRun(1), Next and EndRun would (the same
// bytes, the same batch). It returns nil, changing nothing, when the
// batch is not empty or holds a borrowed arena or buffer, with markers,
// or when a run would not take the FPDU there (Next's bounds): the
// caller then adds it with a Run or AddFPDU. Between One and EndOne the
// caller makes no other call on the Writer but Reset, which drops the
// FPDU.
func (w *Writer) One(ulen int) []byte {
	n := FPDULen(ulen)
	switch {
	case n > WriterSmallLen:
		return nil
	case w.join:
		if w.scratch != nil || ulen > w.smallULen() {
			return nil
		}
		// Nothing borrowed, nothing in the batch (WriterConfig.Scratch
		// empty): BeginRun(1)'s small.
		w.scratch, w.iov = w.small[:0], w.smallIOV[:0]
	case w.crc && !w.markers:
		if w.buf != nil || w.onSmall {
			return nil
		}
		w.batch = w.small[:0]
	default:
		return nil
	}
	w.onSmall = true
	b := w.small[:n]
	// Next's layout: pad and the CRC field in one word, then the length.
	binary.LittleEndian.PutUint64(b[n-8:], 0)
	binary.BigEndian.PutUint16(b, uint16(ulen))
	return b[LengthFieldLen:][:ulen]
}

// EndOne adds the FPDU One laid out, filled by now, to the batch (EndRun
// of a run of that one FPDU): with CRC it computes its CRC over its
// bytes in small.
func (w *Writer) EndOne() {
	n := FPDULen(int(binary.BigEndian.Uint16(w.small[:])))
	w.fpdus++
	w.pos += uint64(n)
	w.batchBytes += n
	if w.join {
		// putScratch's open iovec, all of small up to n.
		w.scratch = w.small[:n]
		w.iov = w.smallIOV[:1]
		w.scrStart, w.scrEnd = 0, n
		return
	}
	c := n - CRCLen
	binary.LittleEndian.PutUint32(w.small[c:], UpdateCRC(0, w.small[:c])) // PutCRC's order
	w.batch = w.small[:n]
}

// copyFPDU copies a whole FPDU into the batch buffer at once (the caller
// made sure of the room) and computes the CRC over that copy. The batch's
// bookkeeping comes first, so that only the FPDU's bytes are live across
// the copy and the CRC.
func (w *Writer) copyFPDU(hdr, payload []byte) {
	ulen := len(hdr) + len(payload)
	s := len(w.batch)
	c := LengthFieldLen + ulen + PadLen(ulen) // the bytes the CRC covers
	b := w.batch[s : s+c+CRCLen]
	w.batch = w.batch[:s+c+CRCLen]
	w.fpduStart, w.ulpduLen = w.pos, ulen
	w.pos += uint64(c + CRCLen)
	w.batchBytes += c + CRCLen
	w.fpdus++
	binary.BigEndian.PutUint16(b, uint16(ulen))
	putHeader(b[LengthFieldLen:], hdr)
	binary.LittleEndian.PutUint32(b[LengthFieldLen+ulen:], 0) // the pad (0 to 3 bytes; the CRC follows)
	copy(b[LengthFieldLen+len(hdr):], payload)
	crc := UpdateCRC(0, b[:c])
	binary.LittleEndian.PutUint32(b[c:], crc) // PutCRC's order
	w.fpduCRC = crc
}

// putHeader copies hdr to the start of b (which has room for it): the
// DDP headers of the data path (14 bytes tagged, 18 untagged) as
// fixed-size moves the compiler writes in line, anything else with copy.
func putHeader(b, hdr []byte) {
	switch len(hdr) {
	case 14:
		*(*[14]byte)(b) = [14]byte(hdr)
	case 18:
		// 16 and 2 bytes: moves in line (18 at once is a memmove call).
		*(*[16]byte)(b) = [16]byte(hdr)
		*(*[2]byte)(b[16:]) = [2]byte(hdr[16:])
	default:
		copy(b, hdr)
	}
}

// emit adds p to the batch, inserting markers where the stream reaches
// one.
func (w *Writer) emit(p []byte) {
	if !w.markers {
		w.put(p)
		return
	}
	for len(p) > 0 {
		marker, k := markerSpan(w.pos)
		if marker {
			w.marker()
			continue
		}
		step := min(k, len(p))
		w.put(p[:step])
		p = p[step:]
	}
}

// marker adds the marker at the stream position, pointing back to the
// current FPDU's start.
func (w *Writer) marker() {
	s := len(w.scratch)
	w.scratch = appendMarker(w.scratch, w.pos, w.fpduStart)
	w.put(w.scratch[s:len(w.scratch):len(w.scratch)])
}

// copyChunk is how much copy mode copies before folding it into the CRC,
// so that the CRC reads the copy from the L1 cache.
const copyChunk = 8 << 10

// put adds p to the batch: without CRC as an iovec that aliases p; with
// CRC as a copy in the batch buffer, folded into the CRC from the copy.
func (w *Writer) put(p []byte) {
	w.pos += uint64(len(p))
	w.batchBytes += len(p)
	if !w.crc {
		w.syncIOV()
		w.iov = append(w.iov, p)
		w.scrEnd = -1
		return
	}
	w.takeBuf()
	for len(p) > 0 {
		k := min(len(p), copyChunk)
		s := len(w.batch)
		w.batch = append(w.batch, p[:k]...) // Room reserved the capacity
		w.fpduCRC = UpdateCRC(w.fpduCRC, w.batch[s:])
		p = p[k:]
	}
}

// takeBuf takes the batch buffer (with CRC) from the pool, unless the
// batch has it; a batch in small moves there (promote).
func (w *Writer) takeBuf() {
	if w.onSmall {
		w.promote(len(w.batch))
		return
	}
	if w.buf == nil {
		w.buf = w.buffers.Get()
		if cap(*w.buf) < WriterBufLen {
			panic(fmt.Sprintf("mpa: BufferPool gave a %d-byte buffer, want at least WriterBufLen", cap(*w.buf)))
		}
		w.batch = (*w.buf)[:0]
	}
}

// smallULen is the longest ULPDU of a small FPDU without CRC: one a
// Run copies whole into the scratch arena (a header and a payload of at
// most writerCopyLen), and WriterSmallMaxBytes bounds.
func (w *Writer) smallULen() int { return w.maxHeader + writerCopyLen }

// writerCopyLen is WriterCopyLen, a variable so that a benchmark can
// sweep it.
var writerCopyLen = WriterCopyLen

// putScratch adds scratch[s:], all of it appended since s, to a batch
// without CRC and markers, extending the open iovec instead when that
// one ends at s in scratch.
func (w *Writer) putScratch(s int) {
	n := len(w.scratch) - s
	w.pos += uint64(n)
	w.batchBytes += n
	if w.scrEnd != s {
		w.syncIOV()
		w.iov = append(w.iov, nil) // syncIOV's to fill
		w.scrStart = s
	}
	w.scrEnd = len(w.scratch)
}

// syncIOV writes the open iovec's extent (see scrEnd) into iov.
func (w *Writer) syncIOV() {
	if w.scrEnd >= 0 {
		w.iov[len(w.iov)-1] = w.scratch[w.scrStart:w.scrEnd:w.scrEnd]
	}
}

// Pending returns the bytes of the batch not yet written, in order, as
// the iovecs of one writev: the whole batch, or its rest after Wrote.
// The slices are valid until the next call that changes w; nothing may
// be added to a batch between its first Wrote and its end.
func (w *Writer) Pending() [][]byte {
	if w.crc {
		if w.batchOff == len(w.batch) {
			return nil
		}
		w.pend[0] = w.batch[w.batchOff:]
		return w.pend[:]
	}
	w.syncIOV()
	return w.iov[w.iovHead:]
}

// Wrote records that the first n bytes of Pending have been written
// (by a write of the caller's: a non-blocking writev may take any part of
// a batch). Once the whole batch is written it empties the batch, as
// Flush does, and reports true; otherwise the rest stays for Pending, a
// later Wrote or Flush, and the batch counts as not Empty.
func (w *Writer) Wrote(n int) bool {
	w.batchOff += n
	if w.crc {
		if w.batchOff < len(w.batch) {
			return false
		}
		w.Reset()
		return true
	}
	if w.batchOff >= w.batchBytes {
		// The whole batch (batchBytes is the sum of its iovecs): nothing
		// to trim.
		w.Reset()
		return true
	}
	// The batch is closed (nothing is added after a Wrote): the open
	// iovec, if any, is written into iov for the trimming below.
	w.syncIOV()
	w.scrEnd = -1
	for n > 0 && w.iovHead < len(w.iov) {
		p := w.iov[w.iovHead]
		if n < len(p) {
			w.iov[w.iovHead] = p[n:]
			return false
		}
		n -= len(p)
		w.iov[w.iovHead] = nil
		w.iovHead++
	}
	for w.iovHead < len(w.iov) && len(w.iov[w.iovHead]) == 0 {
		w.iovHead++
	}
	if w.iovHead < len(w.iov) {
		return false
	}
	w.Reset()
	return true
}

// Flush writes the batch (or the rest Wrote left of it), without CRC
// with one writev (net.Buffers), with CRC with one write of the batch
// buffer, and empties it. It returns the bytes written.
func (w *Writer) Flush(dst io.Writer) (int, error) {
	if w.crc {
		if len(w.batch) == w.batchOff {
			return 0, nil
		}
		n, err := dst.Write(w.batch[w.batchOff:])
		w.Reset()
		return n, err
	}
	if len(w.iov) == w.iovHead {
		return 0, nil
	}
	w.syncIOV()
	w.wv = w.iov[w.iovHead:]
	n, err := w.wv.WriteTo(dst)
	w.wv = nil
	w.Reset()
	return int(n), err
}

// ownBuffer is the BufferPool of a Writer configured without one: one
// buffer, allocated at first use and kept.
type ownBuffer struct{ b *[]byte }

func (o *ownBuffer) Get() *[]byte {
	if o.b == nil {
		b := make([]byte, WriterBufLen)
		o.b = &b
	}
	return o.b
}

func (o *ownBuffer) Put(*[]byte) {}
