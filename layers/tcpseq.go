package layers

import "sort"

// tcpHalf rebuilds the byte stream of one direction of a TCP connection
// from captured segments, in whatever order they come, with whatever
// overlap (RFC 9293 §3.4, §3.10.7.4 "segment text" trimming):
//
//	segment ──► offset = seq − base ──► before next?  trim (retransmission)
//	                                    at next?      deliver, then drain the queue
//	                                    after next?   queue (out of order)
//
// Stream offsets are 64-bit and count from the first octet after the SYN
// (or, with no SYN in the capture, from the first octet seen). Sequence
// numbers are mapped to offsets relative to the next expected octet, so
// they may wrap. When retransmitted copies differ, the first copy to reach
// the stream wins, as in a receiver's queue.
type tcpHalf struct {
	started bool   // base is known
	synSeen bool   // a SYN from this side was seen
	isn     uint32 // its sequence number
	base    uint32 // sequence number of stream offset 0
	next    uint64 // stream offset of the next octet to deliver

	finSeen bool
	finAt   uint64 // stream offset just after the last octet (FIN)
	rst     bool

	ooo      []oooSegment // out-of-order segments, sorted by off
	oooBytes int

	// Counters for the end-of-capture notes.
	retransmitted int // segments whose text was entirely before next
	overflowed    bool
}

type oooSegment struct {
	off  uint64
	data []byte
}

// maxOOOBytes bounds what one direction queues while it waits for a
// missing segment. Past it the direction is abandoned (a gap is reported)
// rather than guessed across.
const maxOOOBytes = 32 << 20

// offset maps seq to a stream offset, assuming it lies within 2 GiB of the
// next expected octet. It returns a negative number for octets before the
// stream start.
func (h *tcpHalf) offset(seq uint32) int64 {
	rel := int32(seq - (h.base + uint32(h.next)))
	return int64(h.next) + int64(rel)
}

// segment takes one captured segment and calls deliver with every run of
// octets it makes contiguous, in stream order. It reports whether a SYN
// with a sequence number other than the one seen before arrived (a new
// connection on the same ports, or a SYN after stream data); the caller
// then starts over.
func (h *tcpHalf) segment(seq uint32, syn, fin, rst bool, data []byte, deliver func([]byte)) (newConn bool) {
	if syn {
		if h.started && (!h.synSeen || seq != h.isn) {
			return true
		}
		if !h.synSeen {
			h.synSeen, h.isn = true, seq
			if !h.started {
				h.started, h.base = true, seq+1
			}
		}
		seq++ // the SYN occupies one sequence number
	}
	if rst {
		h.rst = true
	}
	if !h.started {
		if len(data) == 0 && !fin {
			return false
		}
		h.started, h.base = true, seq
	}
	if h.overflowed {
		return false
	}
	off := h.offset(seq)
	if off < 0 {
		// Octets before the stream start: a retransmission of the SYN's
		// neighbourhood, or a capture that began mid-stream.
		if -off >= int64(len(data)) {
			return false
		}
		data, off = data[-off:], 0
	}
	start := uint64(off)
	end := start + uint64(len(data))
	if fin && !h.finSeen {
		h.finSeen, h.finAt = true, end
	}
	if h.finSeen && end > h.finAt {
		// Octets after the FIN do not exist.
		if start >= h.finAt {
			return false
		}
		data, end = data[:h.finAt-start], h.finAt
	}
	if len(data) == 0 {
		return false
	}
	switch {
	case end <= h.next:
		h.retransmitted++
		return false
	case start > h.next:
		h.queue(start, data)
		return false
	}
	deliver(data[h.next-start:])
	h.next = end
	h.drain(deliver)
	return false
}

// queue keeps a copy of an out-of-order segment.
func (h *tcpHalf) queue(off uint64, data []byte) {
	if h.oooBytes+len(data) > maxOOOBytes {
		h.overflowed = true
		h.ooo, h.oooBytes = nil, 0
		return
	}
	i := sort.Search(len(h.ooo), func(i int) bool { return h.ooo[i].off > off })
	h.ooo = append(h.ooo, oooSegment{})
	copy(h.ooo[i+1:], h.ooo[i:])
	h.ooo[i] = oooSegment{off: off, data: append([]byte(nil), data...)}
	h.oooBytes += len(data)
}

// drain delivers queued segments that have become contiguous.
func (h *tcpHalf) drain(deliver func([]byte)) {
	i := 0
	for ; i < len(h.ooo) && h.ooo[i].off <= h.next; i++ {
		s := h.ooo[i]
		h.oooBytes -= len(s.data)
		end := s.off + uint64(len(s.data))
		if h.finSeen && end > h.finAt {
			end = h.finAt
		}
		if end <= h.next {
			h.retransmitted++
			continue
		}
		deliver(s.data[h.next-s.off : end-s.off])
		h.next = end
	}
	h.ooo = h.ooo[i:]
	if len(h.ooo) == 0 {
		h.ooo = nil
	}
}

// missing reports the stream offset of the first octet the capture lacks
// and how many later octets wait behind it (or were dropped at overflow).
func (h *tcpHalf) missing() (at uint64, queued int, ok bool) {
	if h.overflowed {
		return h.next, 0, true
	}
	if len(h.ooo) == 0 {
		return 0, 0, false
	}
	return h.next, h.oooBytes, true
}
