package mpa_test

import (
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

var benchSizes = []int{64, 1 << 10, 16 << 10, 65000}

// BenchmarkAppendFPDU: FPDU build with CRC32c (header and payload copied
// into the output buffer, as a sender without writev does).
func BenchmarkAppendFPDU(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			hdr := make([]byte, 18)
			payload := make([]byte, n-len(hdr))
			buf := make([]byte, 0, mpa.FPDULen(n))
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				buf = mpa.AppendFPDU(buf[:0], hdr, payload, true)
			}
		})
	}
}

// BenchmarkParseFPDU: FPDU parse with CRC32c check.
func BenchmarkParseFPDU(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			fpdu := mpa.AppendFPDU(nil, nil, make([]byte, n), true)
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, err := mpa.ParseFPDU(fpdu, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDeframer: Next over a stream of FPDUs with CRC, without and
// with markers.
func BenchmarkDeframer(b *testing.B) {
	for _, markers := range []bool{false, true} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("markers=%v/%d", markers, n), func(b *testing.B) {
				fr := &mpa.Framer{CRC: true, Markers: markers}
				var stream []byte
				for range 64 {
					stream = fr.AppendFPDU(stream, make([]byte, n), nil)
				}
				for fr.Pos%512 != 0 { // keep the cycle marker-aligned
					stream = fr.AppendFPDU(stream, nil, nil)
				}
				d := mpa.NewDeframer(&cycleReader{data: stream}, mpa.DeframerConfig{CRC: true, Markers: markers})
				b.ReportAllocs()
				b.SetBytes(int64(n))
				for b.Loop() {
					f, err := d.Next()
					if err != nil {
						b.Fatal(err)
					}
					if len(f.ULPDU) == 0 { // the padding FPDUs
						if _, err := d.Next(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

func BenchmarkInsertMarkers(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			fpdu := mpa.AppendFPDU(nil, nil, make([]byte, n), false)
			dst := make([]byte, 0, 2*len(fpdu))
			b.ReportAllocs()
			b.SetBytes(int64(len(fpdu)))
			for b.Loop() {
				dst, _ = mpa.InsertMarkers(dst[:0], fpdu, 100, false)
			}
		})
	}
}

func BenchmarkRemoveMarkers(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			marked, _ := mpa.InsertMarkers(nil, mpa.AppendFPDU(nil, nil, make([]byte, n), false), 100, false)
			dst := make([]byte, 0, len(marked))
			b.ReportAllocs()
			b.SetBytes(int64(len(marked)))
			for b.Loop() {
				dst = mpa.RemoveMarkers(dst[:0], marked, 100)
			}
		})
	}
}

// nopPlacer is a Placer that fences nothing.
type nopPlacer struct{}

func (nopPlacer) Enter(int, bool) error { return nil }
func (nopPlacer) Leave()                {}

// BenchmarkReaderHeaderFirst: the receive engine's way through FPDUs
// (Next, Header of a 14-byte tagged DDP header, Place of the payload,
// Trailer) over a stream of FPDUs of one TCP MSS (1448: a 1500-byte
// MTU) and of MULPDU 65535, read from memory; without CRC and with.
// Bytes per op are the payload placed.
//
// Since 2026-12-06 the buffer's compaction lets the consumed bytes of
// the FPDU being read go (outside Buffered mode nothing reads them
// again) instead of moving them with the rest: 65000-byte FPDUs went
// from 2618-2670 to 2194-2238 ns/op without CRC (through the buffer:
// this source has no ReadVec) and from 5208-5315 to 4776-5130 with,
// three interleaved rounds; 1442-byte FPDUs stayed within 1-3%.
func BenchmarkReaderHeaderFirst(b *testing.B) {
	const hdr = 14
	for _, crc := range []bool{false, true} {
		for _, ulen := range []int{mpa.MULPDU(1448, false), 65000} {
			b.Run(fmt.Sprintf("crc=%v/%d", crc, ulen), func(b *testing.B) {
				fr := &mpa.Framer{CRC: crc}
				var stream []byte
				for range max(64, 1<<20/ulen) {
					stream = fr.AppendFPDU(stream, make([]byte, hdr), make([]byte, ulen-hdr))
				}
				rd := mpa.NewReader(&cycleReader{data: stream}, nil, mpa.ReaderConfig{CRC: crc})
				dst := make([]byte, ulen-hdr)
				b.ReportAllocs()
				b.SetBytes(int64(len(dst)))
				for b.Loop() {
					if _, err := rd.Next(); err != nil {
						b.Fatal(err)
					}
					if _, err := rd.Header(hdr); err != nil {
						b.Fatal(err)
					}
					if err := rd.Place(dst, nopPlacer{}); err != nil {
						b.Fatal(err)
					}
					if err := rd.Trailer(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRun: the small-message path of the send side, a Run of 32
// FPDUs of a 64-byte ULPDU (BeginRun, Next and a fill of each, EndRun)
// added to an empty batch, which Reset then drops (nothing is written);
// without CRC (the FPDUs in the scratch arena) and with (in the batch
// buffer, EndRun computing each CRC). An op is one FPDU.
func BenchmarkRun(b *testing.B) {
	const run, ulen = 32, 64
	for _, crc := range []bool{false, true} {
		b.Run(fmt.Sprintf("crc=%v", crc), func(b *testing.B) {
			var w mpa.Writer
			w.Init(mpa.WriterConfig{CRC: crc, MaxHeader: 28})
			defer w.Release()
			b.ReportAllocs()
			b.SetBytes(ulen)
			i := 0
			var r mpa.Run
			for b.Loop() {
				if i%run == 0 {
					w.EndRun(&r)
					w.Reset()
					r = w.BeginRun(run)
				}
				i++
				u := r.Next(ulen)
				if u == nil {
					b.Fatal("Next refused a small FPDU")
				}
				u[0], u[ulen-1] = byte(i), byte(i)
			}
			w.EndRun(&r)
			w.Reset()
		})
	}
}

// BenchmarkWhole: the small-message path of the receive side, Whole over
// a stream of FPDUs of a 64-byte ULPDU read from memory in chunks of
// many FPDUs (Fill when the buffer is empty); without CRC and with. An
// op is one FPDU.
func BenchmarkWhole(b *testing.B) {
	const ulen = 64
	for _, crc := range []bool{false, true} {
		b.Run(fmt.Sprintf("crc=%v", crc), func(b *testing.B) {
			fr := &mpa.Framer{CRC: crc}
			var stream []byte
			for range 1024 { // 72 KiB: every read brings the whole cycle
				stream = fr.AppendFPDU(stream, make([]byte, 18), make([]byte, ulen-18))
			}
			rd := mpa.NewReader(&cycleReader{data: stream}, nil, mpa.ReaderConfig{CRC: crc})
			b.ReportAllocs()
			b.SetBytes(ulen)
			for b.Loop() {
				u, ok, err := rd.Whole()
				if !ok {
					if err := rd.Fill(); err != nil {
						b.Fatal(err)
					}
					u, ok, err = rd.Whole()
				}
				if !ok || err != nil || len(u) != ulen {
					b.Fatal("Whole:", ok, err, len(u))
				}
			}
		})
	}
}
