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
