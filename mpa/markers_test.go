package mpa_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// The reference marker implementation: walk the stream one byte at a time
// with a position counter. Stream positions p with p mod 512 < 4 hold
// marker bytes; a marker's FPDUPTR is its distance from the FPDU start (0
// for the tail of a marker that began before the FPDU).

func naiveInsert(fpdu []byte, pos uint64, crc bool) []byte {
	out := make([]byte, 0, len(fpdu)+4*(len(fpdu)/508+2))
	p := pos
	for i := 0; i < len(fpdu); p++ {
		k := p % 512
		if k < 4 {
			var m [4]byte
			if d := p - pos; d >= k { // the marker starts at or after pos (mod 2^64)
				binary.BigEndian.PutUint16(m[2:], uint16(d-k))
			}
			out = append(out, m[k])
			continue
		}
		out = append(out, fpdu[i])
		i++
	}
	if crc {
		binary.LittleEndian.PutUint32(out[len(out)-4:], mpa.UpdateCRC(0, out[:len(out)-4]))
	}
	return out
}

func naiveRemove(raw []byte, pos uint64) []byte {
	out := make([]byte, 0, len(raw))
	for i, c := range raw {
		if (pos+uint64(i))%512 >= 4 {
			out = append(out, c)
		}
	}
	return out
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func markerTestSizes() []int {
	// FPDUs of 8, 12, 16, 108, 504 .. 520, 1008, 2048 bytes.
	return []int{0, 1, 5, 13, 100, 497, 498, 500, 502, 504, 506, 508, 510, 511, 512, 1000, 2040}
}

// TestMarkersEveryOffset: at every start offset 0..511, InsertMarkers
// matches the byte-by-byte reference, MarkedLen agrees with it, and
// RemoveMarkers gives the FPDU back (also when the marked bytes are cut
// anywhere).
func TestMarkersEveryOffset(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range markerTestSizes() {
		fpdu := mpa.AppendFPDU(nil, nil, randBytes(r, n), false)
		for off := uint64(0); off < 512; off++ {
			for _, base := range []uint64{0, 1<<64 - 512} { // positions wrap modulo 2^64
				pos := base + off
				for _, crc := range []bool{base == 0, (n+int(off))%3 == 0} {
					got, end := mpa.InsertMarkers([]byte{0xee}, fpdu, pos, crc)
					if got[0] != 0xee {
						t.Fatal("InsertMarkers overwrote dst")
					}
					got = got[1:]
					want := naiveInsert(fpdu, pos, crc)
					if !bytes.Equal(got, want) {
						t.Fatalf("n=%d pos=%d crc=%v: InsertMarkers differs from the reference\n got %x\nwant %x", n, pos, crc, got, want)
					}
					if end != pos+uint64(len(got)) {
						t.Fatalf("n=%d pos=%d: end %d, want %d", n, pos, end, pos+uint64(len(got)))
					}
					ml, markers := mpa.MarkedLen(pos, len(fpdu))
					if ml != len(got) || markers != countMarkers(pos, len(got)) {
						t.Fatalf("n=%d pos=%d: MarkedLen = %d, %d; want %d, %d", n, pos, ml, markers, len(got), countMarkers(pos, len(got)))
					}
					back := mpa.RemoveMarkers(nil, got, pos)
					if !bytes.Equal(back, naiveRemove(got, pos)) {
						t.Fatalf("n=%d pos=%d: RemoveMarkers differs from the reference", n, pos)
					}
					if !crc && !bytes.Equal(back, fpdu) {
						t.Fatalf("n=%d pos=%d: RemoveMarkers(InsertMarkers(x)) != x", n, pos)
					}
					if crc && !bytes.Equal(back[:len(back)-4], fpdu[:len(fpdu)-4]) {
						t.Fatalf("n=%d pos=%d: RemoveMarkers(InsertMarkers(x)) != x", n, pos)
					}
					// Cut the marked bytes at a random point (and at every
					// point for one size).
					cutsAt := []int{r.IntN(len(got) + 1)}
					if n == 13 && base == 0 {
						cutsAt = cutsAt[:0]
						for i := range len(got) + 1 {
							cutsAt = append(cutsAt, i)
						}
					}
					for _, c := range cutsAt {
						b := mpa.RemoveMarkers(nil, got[:c], pos)
						b = mpa.RemoveMarkers(b, got[c:], pos+uint64(c))
						if !bytes.Equal(b, back) {
							t.Fatalf("n=%d pos=%d cut %d: split RemoveMarkers differs", n, pos, c)
						}
					}
				}
			}
		}
	}
}

// TestMarkersValid: at every start offset, the markers the reference
// writes are valid (also cut anywhere), a change to any marker byte makes
// them invalid, and a change to a byte between markers does not.
func TestMarkersValid(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range markerTestSizes() {
		fpdu := mpa.AppendFPDU(nil, nil, randBytes(r, n), false)
		for off := uint64(0); off < 512; off++ {
			for _, base := range []uint64{0, 1<<64 - 512} {
				pos := base + off
				got := naiveInsert(fpdu, pos, false)
				if !mpa.MarkersValid(got, pos) {
					t.Fatalf("n=%d pos=%d: InsertMarkers' markers invalid", n, pos)
				}
				if c := r.IntN(len(got) + 1); !mpa.MarkersValid(got[:c], pos) {
					t.Fatalf("n=%d pos=%d: markers invalid when cut at %d", n, pos, c)
				}
				for i := range got {
					bit := byte(1) << (i % 8)
					got[i] ^= bit
					isMarker := (pos+uint64(i))%512 < 4
					if v := mpa.MarkersValid(got, pos); v == isMarker {
						t.Fatalf("n=%d pos=%d: byte %d (marker %v) changed, MarkersValid %v", n, pos, i, isMarker, v)
					}
					got[i] ^= bit
				}
			}
		}
	}
}

func countMarkers(pos uint64, n int) int {
	c := 0
	for i := range n {
		if p := pos + uint64(i); p%512 == 0 || (i == 0 && p%512 < 4) {
			c++
		}
	}
	return c
}

// TestMarkerPlacement checks RFC 5044 §4.3 on aligned streams: markers sit
// at multiples of 512 from the origin, their reserved half is zero, and
// FPDUPTR points back to the start of the FPDU they lie in (a marker just
// before an FPDU belongs to it, with FPDUPTR 0; one between pad and CRC
// belongs to the FPDU before).
func TestMarkerPlacement(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var stream []byte
	var starts []uint64
	pos := uint64(0)
	for range 400 {
		n := r.IntN(1500)
		if r.IntN(4) == 0 {
			n = r.IntN(20)
		}
		fpdu := mpa.AppendFPDU(nil, nil, randBytes(r, n), false)
		starts = append(starts, pos)
		stream, pos = mpa.InsertMarkers(stream, fpdu, pos, true)
	}
	// Find, for each marker, the FPDU it belongs to: the last start at or
	// before it.
	si := 0
	sawBeforeCRC, sawAtStart := false, false
	for m := uint64(0); m < uint64(len(stream)); m += 512 {
		for si+1 < len(starts) && starts[si+1] <= m {
			si++
		}
		mk := stream[m : m+4]
		if mk[0] != 0 || mk[1] != 0 {
			t.Fatalf("marker at %d: reserved %x", m, mk[:2])
		}
		ptr := uint64(binary.BigEndian.Uint16(mk[2:]))
		if ptr != m-starts[si] || ptr%4 != 0 {
			t.Fatalf("marker at %d: FPDUPTR %d, want %d", m, ptr, m-starts[si])
		}
		if ptr == 0 {
			sawAtStart = true
		}
		end := uint64(len(stream))
		if si+1 < len(starts) {
			end = starts[si+1]
		}
		if m+8 == end {
			sawBeforeCRC = true
		}
	}
	if !sawAtStart || !sawBeforeCRC {
		t.Errorf("test did not cover a marker at an FPDU start (%v) or before a CRC (%v)", sawAtStart, sawBeforeCRC)
	}
}

// TestMarkerBeforeCRC builds the case by hand: an FPDU with a 506-byte
// ULPDU at offset 0 has a marker at 0 and another between its pad and its
// CRC, and the CRC covers both.
func TestMarkerBeforeCRC(t *testing.T) {
	fpdu := mpa.AppendFPDU(nil, nil, make([]byte, 506), false) // 2+506+0+4 = 512
	got, end := mpa.InsertMarkers(nil, fpdu, 0, true)
	if len(got) != 520 || end != 520 {
		t.Fatalf("len %d end %d", len(got), end)
	}
	// [marker: FPDUPTR 0][len][ULPDU 506][marker: FPDUPTR 512][CRC]
	if !bytes.Equal(got[0:4], []byte{0, 0, 0, 0}) || !bytes.Equal(got[512:516], []byte{0, 0, 2, 0}) {
		t.Errorf("markers %x %x", got[0:4], got[512:516])
	}
	if mpa.GetCRC(got[516:]) != mpa.UpdateCRC(0, got[:516]) {
		t.Error("CRC does not cover both markers")
	}
	// The next FPDU starts at 520; the marker at 1024 falls inside it.
	got2, _ := mpa.InsertMarkers(nil, mpa.AppendFPDU(nil, nil, make([]byte, 600), false), end, false)
	if ptr := binary.BigEndian.Uint16(got2[1024-520+2:]); ptr != 1024-520 {
		t.Errorf("FPDUPTR %d, want %d", ptr, 1024-520)
	}
	// An FPDU that ends at a marker position leaves the marker to the next
	// FPDU, with FPDUPTR 0.
	fpdu = mpa.AppendFPDU(nil, nil, make([]byte, 502), false) // 508 + the marker at 0
	got, end = mpa.InsertMarkers(nil, fpdu, 0, false)
	if len(got) != 512 || end != 512 {
		t.Fatalf("len %d end %d", len(got), end)
	}
	got, _ = mpa.InsertMarkers(nil, fpdu, end, false)
	if !bytes.Equal(got[:4], []byte{0, 0, 0, 0}) || len(got) != 512 {
		t.Errorf("next FPDU starts %x, len %d", got[:4], len(got))
	}
}

func TestMarkersAllocs(t *testing.T) {
	fpdu := mpa.AppendFPDU(nil, nil, make([]byte, 4000), false)
	dst := make([]byte, 0, 8192)
	var marked []byte
	if a := testing.AllocsPerRun(50, func() {
		marked, _ = mpa.InsertMarkers(dst[:0], fpdu, 100, true)
	}); a != 0 {
		t.Errorf("InsertMarkers: %v allocs", a)
	}
	dst2 := make([]byte, 0, 8192)
	if a := testing.AllocsPerRun(50, func() {
		_ = mpa.RemoveMarkers(dst2[:0], marked, 100)
	}); a != 0 {
		t.Errorf("RemoveMarkers: %v allocs", a)
	}
	if a := testing.AllocsPerRun(50, func() {
		_ = mpa.MarkersValid(marked, 100)
	}); a != 0 {
		t.Errorf("MarkersValid: %v allocs", a)
	}
}
