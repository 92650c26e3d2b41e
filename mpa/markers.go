package mpa

import "encoding/binary"

// Markers (RFC 5044 §4.2, §4.3): when a receiver asks for them, the sender
// puts a 4-byte marker at every 512th octet of its TCP stream, counted from
// the first octet of its first FPDU of the Full Operation phase, so the
// first FPDU starts with a marker:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           RESERVED            |            FPDUPTR            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// FPDUPTR is the distance in octets back from the marker to the start of
// the FPDU it lies in. A marker that falls exactly where an FPDU begins
// belongs to that FPDU and has FPDUPTR 0; one that falls between the pad
// and the CRC belongs to the FPDU before it. The CRC covers the markers
// inside its FPDU, the leading one included (Wireshark's dissector computes
// it the same way). FPDUs are multiples of 4 bytes, so markers never split
// a field.
//
// All positions here are stream offsets from the marker origin (the first
// octet of the first FPDU), taken modulo 2^64. A marker occupies the
// positions p with p mod 512 < 4. In a well-formed stream every FPDU starts
// at a multiple of 4; the functions below also accept other offsets (a
// deframer configured mid-stream, fuzzed input) and then treat whatever
// part of a marker lies at or after pos as marker bytes, so that
// InsertMarkers, RemoveMarkers, MarkedLen and the Deframer always agree.

// markerSpan says what lies at stream offset p: the rest of a marker
// (marker true, n the marker bytes from p on) or data (n the bytes before
// the next marker). It is the one place that knows where markers fall;
// every walk over a marked stream steps with it.
func markerSpan(p uint64) (marker bool, n int) {
	off := int(p % MarkerInterval)
	if off < MarkerLen {
		return true, MarkerLen - off
	}
	return false, MarkerInterval - off
}

// appendMarker appends the marker at stream offset p, or the rest of it
// when p lies inside it, for the FPDU that starts at stream offset start:
// FPDUPTR is the distance from start to the marker's first octet (0 when
// that octet lies before start).
func appendMarker(dst []byte, p, start uint64) []byte {
	off := p % MarkerInterval
	var m [MarkerLen]byte
	if d := p - start; d >= off { // modulo 2^64
		binary.BigEndian.PutUint16(m[2:], uint16(d-off))
	}
	return append(dst, m[off:]...)
}

// markedLen walks an FPDU of n marker-free bytes that starts at stream
// offset pos and returns its length with markers and the marker count. A
// marker (or the tail of one) at pos counts; one just after the last byte
// does not (it belongs to the next FPDU).
func markedLen(pos uint64, n int) (total, markers int) {
	p := pos
	for n > 0 {
		marker, k := markerSpan(p)
		if marker {
			p += uint64(k)
			markers++
			continue
		}
		step := min(k, n)
		p += uint64(step)
		n -= step
	}
	return int(p - pos), markers
}

// MarkedLen returns how many bytes an FPDU of n marker-free bytes occupies
// when it starts at stream offset pos, and how many markers it holds.
func MarkedLen(pos uint64, n int) (total, markers int) { return markedLen(pos, n) }

// MarkersValid reports whether every marker in fpdu (the bytes of one
// FPDU with its markers, as on the wire, starting at stream offset pos) is
// the one InsertMarkers writes there: RESERVED zero and FPDUPTR the
// distance back to pos. A marker cut by the end of fpdu is checked as far
// as it goes; bytes between markers are not looked at. It does not
// allocate. A receiver that finds a wrong marker may answer with
// TermMarker.
func MarkersValid(fpdu []byte, pos uint64) bool {
	p := pos
	for len(fpdu) > 0 {
		marker, k := markerSpan(p)
		k = min(k, len(fpdu))
		if marker {
			var buf [MarkerLen]byte
			if want := appendMarker(buf[:0], p, pos); string(fpdu[:k]) != string(want[:k]) {
				return false
			}
		}
		fpdu = fpdu[k:]
		p += uint64(k)
	}
	return true
}

// InsertMarkers appends fpdu (a whole FPDU without markers, CRC field
// included but not yet computed) to dst with markers inserted as if it
// started at stream offset pos. If crc is set it computes the CRC over the
// marked bytes and fills the CRC field; otherwise the field is copied as
// is. It returns dst and the stream offset just after the FPDU. fpdu must
// hold at least CRCLen bytes. It does not allocate when dst has room.
//
// Each marker's FPDUPTR is its distance from pos. If pos is not a multiple
// of 4 and lies inside a marker, the rest of that marker is emitted first
// with FPDUPTR 0.
func InsertMarkers(dst, fpdu []byte, pos uint64, crc bool) ([]byte, uint64) {
	start := len(dst)
	p := pos
	for len(fpdu) > 0 {
		marker, k := markerSpan(p)
		if marker {
			dst = appendMarker(dst, p, pos)
			p += uint64(k)
			continue
		}
		step := min(k, len(fpdu))
		dst = append(dst, fpdu[:step]...)
		fpdu = fpdu[step:]
		p += uint64(step)
	}
	if crc {
		// The CRC covers everything before the CRC field itself; a marker
		// placed just before the CRC field is inside that range. The field
		// is the last CRCLen bytes: a marker never follows it.
		crcAt := len(dst) - CRCLen
		PutCRC(dst[crcAt:], UpdateCRC(0, dst[start:crcAt]))
	}
	return dst, p
}

// RemoveMarkers appends raw (bytes of the stream starting at stream offset
// pos, possibly cut anywhere) to dst with the markers taken out. A marker
// cut by the end of raw is dropped as far as it goes; the caller continues
// at pos+len(raw). It returns dst and does not allocate when dst has room.
func RemoveMarkers(dst, raw []byte, pos uint64) []byte {
	p := pos
	for len(raw) > 0 {
		marker, k := markerSpan(p)
		if marker {
			skip := min(k, len(raw))
			raw = raw[skip:]
			p += uint64(skip)
			continue
		}
		step := min(k, len(raw))
		dst = append(dst, raw[:step]...)
		raw = raw[step:]
		p += uint64(step)
	}
	return dst
}
