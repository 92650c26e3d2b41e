package mpa

import (
	"io"
	"testing"
)

// TestWriterIdleHoldsNothing: a Writer configured without Scratch
// borrows its scratch arena and (without CRC) its iovec array when a
// batch gets its first FPDU, and holds neither once the batch is
// flushed or reset; a Writer given Scratch keeps using it.
func TestWriterIdleHoldsNothing(t *testing.T) {
	for _, crc := range []bool{false, true} {
		var w Writer
		w.Init(WriterConfig{CRC: crc})
		idle := func(when string) {
			t.Helper()
			if w.scratch != nil || w.scratchp != nil || w.iov != nil || w.iovp != nil || w.buf != nil {
				t.Fatalf("crc %v, %s: the Writer holds scratch %v, iovecs %v, batch buffer %v", crc, when, w.scratchp != nil, w.iovp != nil, w.buf != nil)
			}
		}
		idle("after Init")
		if !w.Room(100, 1) {
			t.Fatal("no room in an empty batch")
		}
		idle("after Room")
		w.Begin(make([]byte, 18), 100)
		if w.scratchp == nil || (!crc && w.iovp == nil) {
			t.Fatalf("crc %v: Begin borrowed scratch %v, iovecs %v", crc, w.scratchp != nil, w.iovp != nil)
		}
		w.Payload(make([]byte, 82))
		w.End()
		if _, err := w.Flush(io.Discard); err != nil {
			t.Fatal(err)
		}
		idle("after Flush")
		w.Begin(make([]byte, 18), 18)
		w.End()
		w.Reset()
		idle("after Reset")
	}
	own := make([]byte, 0, WriterScratchLen)
	var w Writer
	w.Init(WriterConfig{Scratch: own})
	w.Begin(make([]byte, 18), 18)
	w.End()
	if w.scratchp != nil || &w.scratch[:1][0] != &own[:1][0] {
		t.Fatal("a Writer given Scratch borrowed another")
	}
	w.Reset()
	if w.scratch == nil {
		t.Fatal("Reset dropped the caller's Scratch")
	}
}

// TestWriterSmallBatch: a batch that a Run for one FPDU starts is laid
// out in the Writer's small array, borrowing nothing, while it fits
// there (a batch of one small FPDU: the direct send); it moves to a
// borrowed arena or buffer, its bytes intact, through AddFPDU of an FPDU
// small has no room for, a Run for more FPDUs or Begin; either way the
// stream is what Framer frames, and a written or reset batch holds
// nothing.
func TestWriterSmallBatch(t *testing.T) {
	for _, crc := range []bool{false, true} {
		var w Writer
		w.Init(WriterConfig{CRC: crc, MaxHeader: 18})
		fr := Framer{CRC: crc}
		var want []byte
		var out sinkWriter
		borrowed := func() bool { return w.arena != nil || w.scratchp != nil || w.iovp != nil || w.buf != nil }
		hdr := make([]byte, 18)
		for i := range hdr {
			hdr[i] = byte(i + 1)
		}
		payload := make([]byte, 64)
		for i := range payload {
			payload[i] = byte(100 + i)
		}
		// One small FPDU: in small, written whole by Pending and Wrote.
		if !w.AddFPDU(hdr, payload) {
			t.Fatal("no room in an empty batch")
		}
		want = fr.AppendFPDU(want, hdr, payload)
		if !w.onSmall || borrowed() {
			t.Fatalf("crc %v: a batch of one small FPDU is not in small (borrowed %v)", crc, borrowed())
		}
		n := 0
		for _, p := range w.Pending() {
			out.b = append(out.b, p...)
			n += len(p)
		}
		if !w.Wrote(n) || w.onSmall || borrowed() || w.scratch != nil || w.iov != nil || w.batch != nil {
			t.Fatalf("crc %v: the written batch holds something", crc)
		}
		// A run for one FPDU in small refuses what small has no room
		// for; AddFPDU moves the batch, its bytes intact. A run for more
		// moves it at once.
		for k := 0; k < 3; k++ {
			for j := 0; ; j++ {
				r := w.BeginRun(1)
				b := r.Next(len(hdr) + len(payload))
				if b == nil {
					w.EndRun(&r)
					if !w.onSmall || j == 0 || FPDULen(len(hdr)+len(payload))*(j+1) <= WriterSmallLen {
						t.Fatalf("crc %v: a run in small refused FPDU %d", crc, j)
					}
					if !w.AddFPDU(hdr, payload) || w.onSmall || !borrowed() {
						t.Fatalf("crc %v: AddFPDU did not move the batch out of small", crc)
					}
					want = fr.AppendFPDU(want, hdr, payload)
					break
				}
				copy(b, hdr)
				copy(b[len(hdr):], payload)
				w.EndRun(&r)
				want = fr.AppendFPDU(want, hdr, payload)
				payload[0]++
			}
			if _, err := w.Flush(&out); err != nil {
				t.Fatal(err)
			}
			w.AddFPDU(hdr, payload)
			want = fr.AppendFPDU(want, hdr, payload)
			r := w.BeginRun(20)
			for range 20 {
				b := r.Next(len(hdr) + len(payload))
				if b == nil {
					t.Fatalf("crc %v: the run refused an FPDU", crc)
				}
				copy(b, hdr)
				copy(b[len(hdr):], payload)
				want = fr.AppendFPDU(want, hdr, payload)
				payload[0]++
			}
			w.EndRun(&r)
			if w.onSmall || !borrowed() {
				t.Fatalf("crc %v: a batch past WriterSmallLen is still in small", crc)
			}
			if _, err := w.Flush(&out); err != nil {
				t.Fatal(err)
			}
			// A batch in small that Begin (not a Run) adds to moves too.
			if !w.AddFPDU(hdr, payload) {
				t.Fatal("no room in an empty batch")
			}
			want = fr.AppendFPDU(want, hdr, payload)
			if !w.Room(len(hdr)+700, 1) {
				t.Fatal("no room")
			}
			w.Begin(hdr, len(hdr)+700)
			w.Payload(make([]byte, 700))
			w.End()
			want = fr.AppendFPDU(want, hdr, make([]byte, 700))
			if w.onSmall || !borrowed() {
				t.Fatalf("crc %v: Begin left the batch in small", crc)
			}
			if k == 2 {
				w.Reset()
				want = want[:len(out.b)]
				break
			}
			if _, err := w.Flush(&out); err != nil {
				t.Fatal(err)
			}
		}
		if borrowed() || w.onSmall {
			t.Fatalf("crc %v: a reset batch holds something", crc)
		}
		if string(out.b) != string(want) {
			t.Fatalf("crc %v: the stream differs from Framer's (%d vs %d bytes)", crc, len(out.b), len(want))
		}
	}
}

// sinkWriter collects what is written to it.
type sinkWriter struct{ b []byte }

func (s *sinkWriter) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

// TestWriterSmallOwnScratch: with CRC, a batch in small still measures
// headers against the caller's Scratch, not the arena a Writer without
// one would borrow, and its Reset keeps the Scratch.
func TestWriterSmallOwnScratch(t *testing.T) {
	var w Writer
	w.Init(WriterConfig{CRC: true, MaxHeader: 18, Scratch: make([]byte, 0, 20)})
	if !w.AddFPDU(make([]byte, 18), make([]byte, 64)) || !w.onSmall {
		t.Fatal("a small FPDU did not go into small")
	}
	if w.Room(100, 1) {
		t.Fatal("Room counted scratch beyond the caller's Scratch")
	}
	w.Reset()
	if w.scratch == nil || cap(w.scratch) != 20 {
		t.Fatal("Reset of a batch in small dropped the caller's Scratch")
	}
}

// TestWriterOne: One and EndOne lay out in small, borrowing nothing, the
// FPDU a Run of one (BeginRun(1), Next, EndRun) adds to an empty batch:
// the same stream as Framer's, whole or written in parts (Wrote, the
// rest added to by nothing) and followed by more FPDUs; One refuses,
// changing nothing, a batch that is not empty, an FPDU Next would refuse
// there, markers, and a caller's Scratch without CRC; Reset between One
// and EndOne drops the FPDU.
func TestWriterOne(t *testing.T) {
	for _, crc := range []bool{false, true} {
		var w Writer
		w.Init(WriterConfig{CRC: crc, MaxHeader: 18})
		fr := Framer{CRC: crc}
		var want []byte
		var out sinkWriter
		borrowed := func() bool { return w.arena != nil || w.scratchp != nil || w.iovp != nil || w.buf != nil }
		hdr := make([]byte, 18)
		for i := range hdr {
			hdr[i] = byte(i + 1)
		}
		plens := []int{0, 1, 2, 3, 64, 500, 600, 614} // up to all of small
		for _, plen := range plens {
			payload := make([]byte, plen)
			for i := range payload {
				payload[i] = byte(100 + i + plen)
			}
			b := w.One(len(hdr) + plen)
			if b == nil {
				t.Fatalf("crc %v: One refused a %d-byte payload", crc, plen)
			}
			if !w.Empty() || w.FPDUs() != 0 || borrowed() {
				t.Fatalf("crc %v: One added to the batch before EndOne", crc)
			}
			copy(b, hdr)
			copy(b[len(hdr):], payload)
			w.EndOne()
			want = fr.AppendFPDU(want, hdr, payload)
			if !w.onSmall || borrowed() || w.FPDUs() != 1 || w.Empty() {
				t.Fatalf("crc %v: the batch of One is not one FPDU in small (borrowed %v)", crc, borrowed())
			}
			if w.One(len(hdr)) != nil {
				t.Fatalf("crc %v: One took a second FPDU", crc)
			}
			switch plen % 3 {
			case 0: // written whole
				n := 0
				for _, p := range w.Pending() {
					out.b = append(out.b, p...)
					n += len(p)
				}
				if !w.Wrote(n) || w.onSmall || borrowed() || w.scratch != nil || w.iov != nil || w.batch != nil {
					t.Fatalf("crc %v: the written batch holds something", crc)
				}
			case 1: // written in two parts
				p := w.Pending()[0]
				k := min(len(p), 5)
				out.b = append(out.b, p[:k]...)
				if w.Wrote(k) {
					t.Fatalf("crc %v: a part written counted as the whole", crc)
				}
				if _, err := w.Flush(&out); err != nil {
					t.Fatal(err)
				}
			default: // more FPDUs after it (in small while they fit there)
				if !w.AddFPDU(hdr, payload) || w.onSmall != (2*FPDULen(len(hdr)+plen) <= WriterSmallLen) {
					t.Fatalf("crc %v: AddFPDU after One: in small %v", crc, w.onSmall)
				}
				want = fr.AppendFPDU(want, hdr, payload)
				if _, err := w.Flush(&out); err != nil {
					t.Fatal(err)
				}
			}
			if borrowed() || w.onSmall || !w.Empty() {
				t.Fatalf("crc %v: a written batch holds something", crc)
			}
		}
		if string(out.b) != string(want) {
			t.Fatalf("crc %v: the stream differs from Framer's (%d vs %d bytes)", crc, len(out.b), len(want))
		}
		// What a run of one in small refuses, One refuses.
		if FPDULen(len(hdr)+700) <= WriterSmallLen || w.One(len(hdr)+700) != nil || w.onSmall {
			t.Fatalf("crc %v: One took an FPDU past small", crc)
		}
		// Reset between One and EndOne drops the FPDU.
		if w.One(40) == nil {
			t.Fatal("One refused")
		}
		w.Reset()
		if borrowed() || w.onSmall || !w.Empty() || w.FPDUs() != 0 {
			t.Fatalf("crc %v: Reset after One left something", crc)
		}
		// A batch not empty: One refuses.
		w.Begin(hdr, len(hdr))
		w.End()
		if w.One(40) != nil {
			t.Fatalf("crc %v: One took an FPDU into a batch not empty", crc)
		}
		w.Reset()
	}
	var w Writer
	w.Init(WriterConfig{Markers: true})
	if w.One(40) != nil {
		t.Fatal("One with markers")
	}
	w.Init(WriterConfig{CRC: true, Markers: true})
	if w.One(40) != nil {
		t.Fatal("One with CRC and markers")
	}
	w.Init(WriterConfig{Scratch: make([]byte, 0, 1024)})
	if w.One(40) != nil {
		t.Fatal("One with the caller's Scratch, without CRC")
	}
	// Without CRC a Run copies payloads of up to writerCopyLen bytes:
	// with less than small holds, One takes no more.
	defer func(n int) { writerCopyLen = n }(writerCopyLen)
	writerCopyLen = 100
	w.Init(WriterConfig{MaxHeader: 18})
	if w.One(18+101) != nil {
		t.Fatal("One without CRC took a ULPDU past MaxHeader+writerCopyLen")
	}
	if w.One(18+100) == nil {
		t.Fatal("One without CRC refused a ULPDU of MaxHeader+writerCopyLen")
	}
}
