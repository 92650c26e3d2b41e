package rdmap

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// TestFramerMatchesMPA checks the iovec framer against mpa.Framer (the
// reference implementation of FPDU framing and marker insertion) for
// every combination of CRC and markers, payloads split into pieces, and
// stream positions that put markers everywhere in an FPDU.
func TestFramerMatchesMPA(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			var f framer
			f.init(make([]byte, 0, scratchSize), crc, markers)
			ref := mpa.Framer{CRC: crc, Markers: markers}
			var got, want bytes.Buffer
			for i := range 300 {
				hdr := make([]byte, 14+r.IntN(60))
				for j := range hdr {
					hdr[j] = byte(r.Uint32())
				}
				n := r.IntN(3000)
				if i%7 == 0 {
					n = 0
				}
				payload := make([]byte, n)
				for j := range payload {
					payload[j] = byte(r.Uint32())
				}
				// Split the payload into up to 5 pieces.
				pieces := [][]byte{}
				for rest := payload; len(rest) > 0; {
					k := 1 + r.IntN(len(rest))
					pieces = append(pieces, rest[:k])
					rest = rest[k:]
				}
				if !f.room(len(hdr)+n, len(pieces)) {
					if _, err := f.flush(&got); err != nil {
						t.Fatal(err)
					}
				}
				f.begin(hdr, len(hdr)+n)
				for _, p := range pieces {
					f.payload(p)
				}
				f.end()
				want.Write(ref.AppendFPDU(nil, hdr, payload))
			}
			if _, err := f.flush(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("crc %v markers %v: framer output differs from mpa.Framer (%d vs %d bytes)", crc, markers, got.Len(), want.Len())
			}
			// And the deframer reads it back.
			df := mpa.NewDeframer(bytes.NewReader(got.Bytes()), mpa.DeframerConfig{CRC: crc, Markers: markers})
			for range 300 {
				if _, err := df.Next(); err != nil {
					t.Fatalf("crc %v markers %v: deframer: %v", crc, markers, err)
				}
			}
		}
	}
}

func TestMaskedAdd(t *testing.T) {
	for _, c := range []struct{ x, y, mask, want uint64 }{
		{1, 2, 0, 3},
		{^uint64(0), 1, 0, 0},
		{0x00000001_ffffffff, 0x00000001_00000001, 0x80000000_80000000, 0x00000002_00000000},
		{0xff, 0x01, 0x80, 0x00},
		{0xff, 0x01, 0x8000, 0x100},
	} {
		if got := maskedAdd(c.x, c.y, c.mask); got != c.want {
			t.Errorf("maskedAdd(%#x, %#x, %#x) = %#x, want %#x", c.x, c.y, c.mask, got, c.want)
		}
	}
}

func TestStateTransitions(t *testing.T) {
	legal := map[[2]QPState]bool{
		{StateIdle, StateRTR}: true, {StateIdle, StateRTS}: true, {StateIdle, StateError}: true,
		{StateRTR, StateRTS}: true, {StateRTR, StateError}: true,
		{StateRTS, StateClosing}: true, {StateRTS, StateTerminate}: true, {StateRTS, StateError}: true,
		{StateClosing, StateTerminate}: true, {StateClosing, StateError}: true,
		{StateTerminate, StateError}: true,
	}
	for from := StateIdle; from <= StateError; from++ {
		for to := StateIdle; to <= StateError; to++ {
			if got := legalTransition(from, to); got != legal[[2]QPState{from, to}] {
				t.Errorf("%v -> %v legal = %v", from, to, got)
			}
		}
	}
	qp := &QP{state: StateError}
	func() {
		defer func() {
			if r := recover(); r == nil && debugChecks {
				t.Error("illegal transition did not panic in a race build")
			}
		}()
		if err := qp.setStateLocked(StateRTS); err == nil {
			t.Error("ERROR -> RTS allowed")
		}
	}()
}

// BenchmarkFramer frames 1 MiB messages in MSS-sized FPDUs into
// io.Discard: without CRC (zero copy, iovecs), with CRC (copy mode: copy
// and CRC into the batch buffer), and, for reference, the CRC alone over
// the same bytes (what the zero-copy CRC path cost before copy mode,
// less its iovec handling).
func BenchmarkFramer(b *testing.B) {
	const msg, seg = 1 << 20, 32 << 10
	src := make([]byte, msg)
	for i := range src {
		src[i] = byte(i * 7)
	}
	hdr := make([]byte, 14)
	for _, crc := range []bool{false, true} {
		b.Run(fmt.Sprintf("crc=%v", crc), func(b *testing.B) {
			var f framer
			f.init(make([]byte, 0, scratchSize), crc, false)
			b.SetBytes(msg)
			b.ReportAllocs()
			for b.Loop() {
				f.reset()
				for off := 0; off < msg; off += seg {
					if !f.room(len(hdr)+seg, 1) {
						if _, err := f.flush(io.Discard); err != nil {
							b.Fatal(err)
						}
					}
					f.begin(hdr, len(hdr)+seg)
					f.payload(src[off : off+seg])
					f.end()
				}
				if _, err := f.flush(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("crc-only", func(b *testing.B) {
		b.SetBytes(msg)
		b.ReportAllocs()
		var c uint32
		for b.Loop() {
			for off := 0; off < msg; off += seg {
				c = mpa.UpdateCRC(0, src[off:off+seg])
			}
		}
		_ = c
	})
}

// TestFramerCopyBufferBound fills copy-mode batches with the largest
// FPDUs, with and without markers, and checks that room keeps every batch
// inside its pooled buffer (never a reallocation by append), that the
// buffer goes back to the pool with each flush, and that the stream still
// deframes.
func TestFramerCopyBufferBound(t *testing.T) {
	payload := make([]byte, 65535-14)
	for i := range payload {
		payload[i] = byte(i)
	}
	hdr := make([]byte, 14)
	for _, markers := range []bool{false, true} {
		var f framer
		f.init(make([]byte, 0, scratchSize), true, markers)
		var out bytes.Buffer
		const n = 40
		flushes := 0
		for range n {
			if !f.room(len(hdr)+len(payload), 1) {
				if _, err := f.flush(&out); err != nil {
					t.Fatal(err)
				}
				flushes++
				if f.buf != nil || f.lin != nil {
					t.Fatal("batch buffer kept after a flush")
				}
			}
			f.begin(hdr, len(hdr)+len(payload))
			f.payload(payload)
			f.end()
			if cap(f.lin) != sendBufSize || &f.lin[0] != &(*f.buf)[0] {
				t.Fatalf("markers %v: the batch left its buffer (cap %d)", markers, cap(f.lin))
			}
		}
		if _, err := f.flush(&out); err != nil {
			t.Fatal(err)
		}
		if flushes == 0 {
			t.Fatal("no batch was full")
		}
		df := mpa.NewDeframer(bytes.NewReader(out.Bytes()), mpa.DeframerConfig{CRC: true, Markers: markers})
		for i := range n {
			if _, err := df.Next(); err != nil {
				t.Fatalf("markers %v: FPDU %d: %v", markers, i, err)
			}
		}
	}
}
