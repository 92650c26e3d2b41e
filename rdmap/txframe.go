package rdmap

import (
	"encoding/binary"
	"io"
	"net"

	"github.com/gosiw/gosiw/mpa"
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
)

// framer builds FPDUs (RFC 5044 §4) into a batch of iovecs for one
// writev: ULPDU_Length and headers from a scratch arena, payload slices
// straight from registered memory, pad and CRC from the arena again, and,
// when the peer asked for them, markers (RFC 5044 §5) every 512 bytes of
// the stream. The CRC32c is computed over the bytes as they are queued.
// Nothing is copied but headers. It must be used from one goroutine.
//
//	FPDU: [len|DDP hdr|RDMAP hdr]  [payload ...]  [pad|CRC]
//	          scratch               MR memory      scratch
type framer struct {
	crc, markers bool
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

func (f *framer) reset() {
	f.scratch = f.scratch[:0]
	f.iov = f.iov[:0]
	f.bytes, f.fpdus = 0, 0
}

func (f *framer) empty() bool { return len(f.iov) == 0 }

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
	s := len(f.scratch)
	var c uint32
	if f.crc {
		c = f.c
	}
	f.scratch = binary.LittleEndian.AppendUint32(f.scratch, c)
	f.iov = append(f.iov, f.scratch[s:len(f.scratch):len(f.scratch)])
	f.pos += mpa.CRCLen
	f.bytes += mpa.CRCLen
	f.fpdus++
}

// emit queues p, inserting markers where the stream crosses a 512-byte
// boundary, and folds everything queued into the CRC.
func (f *framer) emit(p []byte) {
	if !f.markers {
		f.iov = append(f.iov, p)
		if f.crc {
			f.c = mpa.UpdateCRC(f.c, p)
		}
		f.pos += uint64(len(p))
		f.bytes += len(p)
		return
	}
	for len(p) > 0 {
		off := int(f.pos % mpa.MarkerInterval)
		if off == 0 {
			f.marker()
			continue
		}
		step := min(mpa.MarkerInterval-off, len(p))
		f.iov = append(f.iov, p[:step])
		if f.crc {
			f.c = mpa.UpdateCRC(f.c, p[:step])
		}
		f.pos += uint64(step)
		f.bytes += step
		p = p[step:]
	}
}

// marker queues a marker pointing back to the current FPDU's start.
func (f *framer) marker() {
	s := len(f.scratch)
	f.scratch = append(f.scratch, 0, 0)
	f.scratch = binary.BigEndian.AppendUint16(f.scratch, uint16(f.pos-f.start))
	m := f.scratch[s:len(f.scratch):len(f.scratch)]
	f.iov = append(f.iov, m)
	if f.crc {
		f.c = mpa.UpdateCRC(f.c, m)
	}
	f.pos += mpa.MarkerLen
	f.bytes += mpa.MarkerLen
}

// flush writes the batch with one writev (net.Buffers) and empties it.
func (f *framer) flush(w io.Writer) (int, error) {
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
