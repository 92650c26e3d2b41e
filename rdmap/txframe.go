package rdmap

import (
	"encoding/binary"
	"io"
	"net"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/internal/bufpool"
)

// Framing limits of one batch (one writev): the iovec count stays under
// Linux's IOV_MAX so a batch is a single system call.
const (
	maxBatchIOV   = 1000
	maxBatchBytes = 512 << 10
	scratchSize   = 64 << 10
	// maxCtrlHdr is the longest DDP+RDMAP header an FPDU starts with
	// (untagged header and an Atomic Request), or a Terminate body.
	maxCtrlHdr = 18 + 64
	// sendBufSize is the size of a copy-mode batch buffer: a batch stops
	// taking FPDUs at maxBatchBytes, and the FPDU that crosses it is at
	// most one ULPDU (under 64 KiB) plus its framing and markers.
	sendBufSize = maxBatchBytes + 80<<10
)

// sendBufPool holds the batch buffers of the framers in copy mode. A
// framer takes one when its batch gets its first byte and gives it back
// when the batch is written (or the QP ends), so the buffers in use are
// bounded by the batches being written at once, and an idle QP holds
// none.
var sendBufPool = bufpool.New(sendBufSize)

// framer builds FPDUs (RFC 5044 §4) into a batch for one write, with
// markers (RFC 5044 §5) every 512 bytes of the stream when the peer asked
// for them. It has two modes, fixed by whether CRC32c was negotiated:
//
// Without CRC (zero copy) the batch is a list of iovecs for one writev:
// ULPDU_Length and headers from a scratch arena, payload slices straight
// from registered memory, pad from the arena again. Nothing is copied but
// headers; memory that changes before the write is sent as it is then,
// which verbs allow (the data is undefined, the protocol intact).
//
//	FPDU: [len|DDP hdr|RDMAP hdr]  [payload ...]  [pad|CRC]
//	          scratch               MR memory      scratch
//
// With CRC (copy mode) every byte is copied into one pooled batch buffer
// (sendBufPool) and the CRC32c is computed over that copy, piece by piece
// right after copying it, while it is in cache. The batch goes out with
// one write of that buffer, so the CRC covers exactly the bytes on the
// wire even when the source memory changes meanwhile (a remote Write
// from another connection into a shared region, or the application).
//
//	batch buffer: [len|hdrs|payload|pad|CRC][len|hdrs|payload|pad|CRC]...
//
// A framer must be used from one goroutine.
type framer struct {
	crc, markers bool
	buf          *[]byte  // copy mode: the batch buffer while the batch is not empty
	lin          []byte   // copy mode: the batch so far, in *buf
	pos          uint64   // stream offset of the next byte (markers)
	scratch      []byte   // never grows past its capacity
	iov          [][]byte // reused backing array
	nb           net.Buffers
	bytes        int
	fpdus        int

	start uint64 // stream offset of the current FPDU
	c     uint32 // CRC so far of the current FPDU
	ulen  int
}

func (f *framer) init(scratch []byte, crc, markers bool) {
	f.crc, f.markers = crc, markers
	f.scratch = scratch[:0]
	if f.iov == nil {
		f.iov = make([][]byte, 0, maxBatchIOV+8)
	}
	f.reset()
}

// reset empties the batch (in copy mode giving its buffer back).
func (f *framer) reset() {
	f.dropBuf()
	f.scratch = f.scratch[:0]
	f.iov = f.iov[:0]
	f.bytes, f.fpdus = 0, 0
}

func (f *framer) empty() bool { return len(f.iov) == 0 && len(f.lin) == 0 }

// dropBuf gives the copy-mode batch buffer back to the pool, discarding
// the batch in it.
func (f *framer) dropBuf() {
	if f.buf != nil {
		sendBufPool.Put(f.buf)
		f.buf, f.lin = nil, nil
	}
}

// room reports whether an FPDU with a ULPDU of ulen bytes whose payload
// spans up to pieces slices fits in the batch.
func (f *framer) room(ulen, pieces int) bool {
	if f.fpdus > 0 && f.bytes+ulen > maxBatchBytes {
		return false
	}
	needS, needI := mpa.LengthFieldLen+maxCtrlHdr+8, pieces+2
	if f.markers {
		m := (ulen+mpa.LengthFieldLen+mpa.CRCLen+3)/mpa.MarkerInterval + 2
		needS += m * mpa.MarkerLen
		needI += 2 * m
	}
	if f.crc {
		// The whole FPDU goes into the batch buffer: length field, ULPDU,
		// pad of at most 3, CRC, and the markers counted in needS.
		if len(f.lin)+needS+ulen+3+mpa.CRCLen > sendBufSize {
			return false
		}
	}
	return len(f.scratch)+needS <= cap(f.scratch) && len(f.iov)+needI <= maxBatchIOV
}

// begin starts an FPDU whose ULPDU is hdr followed by ulen-len(hdr)
// payload bytes.
func (f *framer) begin(hdr []byte, ulen int) {
	f.start, f.c, f.ulen = f.pos, 0, ulen
	s := len(f.scratch)
	f.scratch = binary.BigEndian.AppendUint16(f.scratch, uint16(ulen))
	f.scratch = append(f.scratch, hdr...)
	f.emit(f.scratch[s:len(f.scratch):len(f.scratch)])
}

// payload queues payload bytes of the current FPDU.
func (f *framer) payload(p []byte) {
	if len(p) > 0 {
		f.emit(p)
	}
}

// end queues pad and CRC, completing the FPDU.
func (f *framer) end() {
	if pad := mpa.PadLen(f.ulen); pad > 0 {
		s := len(f.scratch)
		f.scratch = append(f.scratch, make([]byte, pad)...)
		f.emit(f.scratch[s:len(f.scratch):len(f.scratch)])
	}
	if f.markers && f.pos%mpa.MarkerInterval == 0 {
		// A marker just before the CRC field belongs to this FPDU and is
		// covered by its CRC.
		f.marker()
	}
	if f.crc {
		f.lin = binary.LittleEndian.AppendUint32(f.lin, f.c)
	} else {
		s := len(f.scratch)
		f.scratch = append(f.scratch, 0, 0, 0, 0)
		f.iov = append(f.iov, f.scratch[s:len(f.scratch):len(f.scratch)])
	}
	f.pos += mpa.CRCLen
	f.bytes += mpa.CRCLen
	f.fpdus++
}

// emit queues p, inserting markers where the stream crosses a 512-byte
// boundary.
func (f *framer) emit(p []byte) {
	if !f.markers {
		f.put(p)
		return
	}
	for len(p) > 0 {
		off := int(f.pos % mpa.MarkerInterval)
		if off == 0 {
			f.marker()
			continue
		}
		step := min(mpa.MarkerInterval-off, len(p))
		f.put(p[:step])
		p = p[step:]
	}
}

// copyChunk is how much copy mode copies before folding it into the CRC,
// so that the CRC reads the copy from the L1 cache.
const copyChunk = 8 << 10

// put adds p to the batch: without CRC as an iovec that aliases p; with
// CRC as a copy in the batch buffer, folded into the CRC from the copy.
func (f *framer) put(p []byte) {
	f.pos += uint64(len(p))
	f.bytes += len(p)
	if !f.crc {
		f.iov = append(f.iov, p)
		return
	}
	if f.buf == nil {
		f.buf = sendBufPool.Get()
		f.lin = (*f.buf)[:0]
	}
	for len(p) > 0 {
		k := min(len(p), copyChunk)
		s := len(f.lin)
		f.lin = append(f.lin, p[:k]...) // room reserved the capacity
		f.c = mpa.UpdateCRC(f.c, f.lin[s:])
		p = p[k:]
	}
}

// marker queues a marker pointing back to the current FPDU's start.
func (f *framer) marker() {
	s := len(f.scratch)
	f.scratch = append(f.scratch, 0, 0)
	f.scratch = binary.BigEndian.AppendUint16(f.scratch, uint16(f.pos-f.start))
	f.put(f.scratch[s:len(f.scratch):len(f.scratch)])
}

// flush writes the batch with one writev (net.Buffers), or in copy mode
// one write of the batch buffer, and empties it.
func (f *framer) flush(w io.Writer) (int, error) {
	if f.crc {
		if len(f.lin) == 0 {
			return 0, nil
		}
		n, err := w.Write(f.lin)
		f.reset()
		return n, err
	}
	if len(f.iov) == 0 {
		return 0, nil
	}
	f.nb = f.iov
	n, err := f.nb.WriteTo(w)
	f.nb = nil
	clear(f.iov)
	f.reset()
	return int(n), err
}
