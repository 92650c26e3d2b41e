package mpa_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// writeSome is a non-blocking writev's model: it takes at most k bytes
// of iov, in order.
func writeSome(out *bytes.Buffer, iov [][]byte, k int) int {
	n := 0
	for _, p := range iov {
		if n == k {
			break
		}
		m := min(len(p), k-n)
		out.Write(p[:m])
		n += m
	}
	return n
}

// TestWriterPartialWrites: a batch written in parts (Pending, Wrote: a
// non-blocking writev that takes any amount, zero included), and perhaps
// finished by Flush, puts on the stream exactly what one Flush of the
// same batch does, in every mode; the batch is Empty only once all of it
// is written.
func TestWriterPartialWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			name := fmt.Sprintf("crc %v markers %v", crc, markers)
			var wa, wb mpa.Writer
			wa.Init(mpa.WriterConfig{CRC: crc, Markers: markers, MaxHeader: 82})
			wb.Init(mpa.WriterConfig{CRC: crc, Markers: markers, MaxHeader: 82})
			var want, got bytes.Buffer
			for batch := range 200 {
				for range 1 + r.IntN(20) {
					hdr := randBytes(r, 14+r.IntN(20))
					payload := randBytes(r, r.IntN(2000))
					if r.IntN(2) == 0 {
						payload = payload[:len(payload)%100] // a small message
					}
					pieces := split(r, payload)
					small := len(pieces) <= 1 && r.IntN(2) == 0
					for _, w := range []*mpa.Writer{&wa, &wb} {
						if small {
							// The small-message path (one slice of scratch
							// without CRC and markers).
							if !w.AddFPDU(hdr, payload) {
								t.Fatalf("%s: no room", name)
							}
							continue
						}
						if !w.Room(len(hdr)+len(payload), len(pieces)) {
							t.Fatalf("%s: no room", name)
						}
						w.Begin(hdr, len(hdr)+len(payload))
						for _, p := range pieces {
							w.Payload(p)
						}
						w.End()
					}
				}
				if _, err := wa.Flush(&want); err != nil {
					t.Fatal(err)
				}
				total := 0
				for _, p := range wb.Pending() {
					total += len(p)
				}
				left := total
				for left > 0 {
					if r.IntN(8) == 0 {
						n, err := wb.Flush(&got)
						if err != nil || n != left {
							t.Fatalf("%s batch %d: Flush of the rest wrote %d (%v), want %d", name, batch, n, err, left)
						}
						left = 0
						break
					}
					k := r.IntN(left + 1)
					n := writeSome(&got, wb.Pending(), k)
					left -= n
					if done := wb.Wrote(n); done != (left == 0) {
						t.Fatalf("%s batch %d: Wrote reports %v with %d bytes left", name, batch, done, left)
					}
					if wb.Empty() != (left == 0) {
						t.Fatalf("%s batch %d: Empty %v with %d bytes left", name, batch, wb.Empty(), left)
					}
				}
				if !wb.Empty() || len(wb.Pending()) != 0 {
					t.Fatalf("%s batch %d: not empty once written", name, batch)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Fatalf("%s batch %d: partial writes put other bytes on the stream", name, batch)
				}
			}
		}
	}
}
