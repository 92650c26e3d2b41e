package mpa_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/gosiw/gosiw/mpa"
)

// chunkReader returns the data in random-sized reads (1..max bytes).
type chunkReader struct {
	data []byte
	r    *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.r.IntN(c.max), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// buildStream frames ulpdus (hdr and payload cut at random) with f.
func buildStream(r *rand.Rand, f *mpa.Framer, ulpdus [][]byte) []byte {
	var out []byte
	for _, u := range ulpdus {
		cut := r.IntN(len(u) + 1)
		out = f.AppendFPDU(out, u[:cut], u[cut:])
	}
	return out
}

func randULPDUs(r *rand.Rand, count, maxLen int) [][]byte {
	u := make([][]byte, count)
	for i := range u {
		n := r.IntN(maxLen + 1)
		if r.IntN(5) == 0 {
			n = r.IntN(8)
		}
		u[i] = randBytes(r, n)
	}
	return u
}

// readAll runs the deframer to the end and checks the ULPDUs.
func readAll(t *testing.T, d *mpa.Deframer, want [][]byte, crc bool) {
	t.Helper()
	for i, w := range want {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("FPDU %d: %v", i, err)
		}
		if !bytes.Equal(f.ULPDU, w) {
			t.Fatalf("FPDU %d: ULPDU %d bytes %x..., want %d bytes", i, len(f.ULPDU), f.ULPDU[:min(8, len(f.ULPDU))], len(w))
		}
		if f.CRCChecked != crc || f.CRCOK != crc {
			t.Fatalf("FPDU %d: CRCChecked %v CRCOK %v", i, f.CRCChecked, f.CRCOK)
		}
	}
	for range 2 {
		if f, err := d.Next(); err != io.EOF {
			t.Fatalf("after the last FPDU: %+v, %v; want io.EOF", f, err)
		}
	}
	if len(d.Buffered()) != 0 {
		t.Fatalf("Buffered() = %d bytes at EOF", len(d.Buffered()))
	}
}

var readerKinds = []struct {
	name string
	wrap func(io.Reader, *rand.Rand) io.Reader
}{
	{"whole", func(r io.Reader, _ *rand.Rand) io.Reader { return r }},
	{"onebyte", func(r io.Reader, _ *rand.Rand) io.Reader { return iotest.OneByteReader(r) }},
	{"half", func(r io.Reader, _ *rand.Rand) io.Reader { return iotest.HalfReader(r) }},
	{"dataerr", func(r io.Reader, _ *rand.Rand) io.Reader { return iotest.DataErrReader(r) }},
	{"chunks", func(r io.Reader, rnd *rand.Rand) io.Reader {
		b, _ := io.ReadAll(r)
		return &chunkReader{data: b, r: rnd, max: 1 + rnd.IntN(3000)}
	}},
}

// TestDeframerStreams: the Deframer gets back every ULPDU the Framer
// framed, for CRC and markers on and off, several start offsets, and the
// stream split in every way the readers above split it.
func TestDeframerStreams(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			offsets := []uint64{0}
			if markers {
				offsets = []uint64{0, 4, 256, 500, 508, 1<<64 - 1024}
			}
			for _, off := range offsets {
				for _, rk := range readerKinds {
					t.Run(fmt.Sprintf("crc=%v/markers=%v/off=%d/%s", crc, markers, off, rk.name), func(t *testing.T) {
						ulpdus := randULPDUs(r, 60, 3000)
						ulpdus = append(ulpdus, randBytes(r, mpa.MaxULPDU), nil)
						f := &mpa.Framer{CRC: crc, Markers: markers, Pos: off}
						stream := buildStream(r, f, ulpdus)
						if f.Pos != off+uint64(len(stream)) {
							t.Fatalf("Framer.Pos = %d, want %d", f.Pos, off+uint64(len(stream)))
						}
						d := mpa.NewDeframer(rk.wrap(bytes.NewReader(stream), r), mpa.DeframerConfig{CRC: crc, Markers: markers, StreamOffset: off})
						readAll(t, d, ulpdus, crc)
					})
				}
			}
		}
	}
}

// TestDeframerMarkersEveryOffset: for every start offset 0..511 (aligned or
// not), a marked stream cut into random chunks deframes to its ULPDUs, and
// the CRC, which covers the markers, checks.
func TestDeframerMarkersEveryOffset(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for off := uint64(0); off < 512; off++ {
		ulpdus := randULPDUs(r, 6, 1100)
		f := &mpa.Framer{CRC: true, Markers: true, Pos: off}
		stream := buildStream(r, f, ulpdus)
		d := mpa.NewDeframer(&chunkReader{data: stream, r: r, max: 1 + r.IntN(600)}, mpa.DeframerConfig{CRC: true, Markers: true, StreamOffset: off})
		readAll(t, d, ulpdus, true)
	}
}

// TestDeframerCRCCoversMarkers: flipping a bit in a marker breaks the CRC
// of the FPDU the marker lies in, and only that one.
func TestDeframerCRCCoversMarkers(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	ulpdus := [][]byte{randBytes(r, 100), randBytes(r, 1000), randBytes(r, 100)}
	f := &mpa.Framer{CRC: true, Markers: true}
	stream := buildStream(r, f, ulpdus)
	// FPDU 0 is [marker 0][2+100+2+4] = 112 bytes; FPDU 1 starts at 112
	// and holds the marker at 512.
	stream[512+3] ^= 4
	d := mpa.NewDeframer(bytes.NewReader(stream), mpa.DeframerConfig{CRC: true, Markers: true})
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	fp, err := d.Next()
	if !errors.Is(err, mpa.ErrBadCRC) || !bytes.Equal(fp.ULPDU, ulpdus[1]) || fp.Markers != 2 {
		t.Fatalf("FPDU 1: %v, markers %d", err, fp.Markers)
	}
	if fp, err := d.Next(); err != nil || !bytes.Equal(fp.ULPDU, ulpdus[2]) {
		t.Fatalf("FPDU 2: %v", err)
	}
}

// resumableReader hands out data as it arrives and io.EOF when it has
// none, like a non-blocking source that gets more later.
type resumableReader struct{ data []byte }

func (rr *resumableReader) Read(p []byte) (int, error) {
	if len(rr.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, rr.data)
	rr.data = rr.data[n:]
	return n, nil
}

func TestDeframerResume(t *testing.T) {
	for _, markers := range []bool{false, true} {
		r := rand.New(rand.NewPCG(15, 16))
		ulpdus := randULPDUs(r, 20, 1500)
		stream := buildStream(r, &mpa.Framer{CRC: true, Markers: markers}, ulpdus)
		// Feed the stream in pieces that end anywhere, each followed by
		// io.EOF.
		src := &resumableReader{}
		d := mpa.NewDeframer(src, mpa.DeframerConfig{CRC: true, Markers: markers})
		got := 0
		rest := stream
		for len(rest) > 0 {
			n := min(1+r.IntN(700), len(rest))
			src.data = append(src.data, rest[:n]...)
			rest = rest[n:]
			for {
				f, err := d.Next()
				if err == io.ErrUnexpectedEOF {
					if len(d.Buffered()) == 0 {
						t.Fatal("io.ErrUnexpectedEOF with nothing buffered")
					}
					break
				}
				if err == io.EOF {
					if len(d.Buffered()) != 0 {
						t.Fatal("io.EOF with bytes buffered")
					}
					break
				}
				if err != nil {
					t.Fatalf("markers=%v FPDU %d: %v", markers, got, err)
				}
				if !bytes.Equal(f.ULPDU, ulpdus[got]) {
					t.Fatalf("markers=%v FPDU %d differs", markers, got)
				}
				got++
			}
		}
		if got != len(ulpdus) {
			t.Fatalf("markers=%v: got %d FPDUs, want %d", markers, got, len(ulpdus))
		}
	}
}

// TestDeframerUnexpectedEOF: a stream cut inside an FPDU (at every point of
// one) ends with io.ErrUnexpectedEOF, never a panic or io.EOF.
func TestDeframerUnexpectedEOF(t *testing.T) {
	for _, markers := range []bool{false, true} {
		fr := &mpa.Framer{CRC: true, Markers: markers}
		stream := fr.AppendFPDU(nil, []byte("first"), nil)
		first := len(stream)
		stream = fr.AppendFPDU(stream, make([]byte, 700), nil)
		for cut := first + 1; cut < len(stream); cut++ {
			d := mpa.NewDeframer(bytes.NewReader(stream[:cut]), mpa.DeframerConfig{CRC: true, Markers: markers})
			if _, err := d.Next(); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Next(); err != io.ErrUnexpectedEOF {
				t.Fatalf("markers=%v cut %d: %v, want io.ErrUnexpectedEOF", markers, cut, err)
			}
			if got := d.Buffered(); !bytes.Equal(got, stream[first:cut]) {
				t.Fatalf("Buffered() = %d bytes, want %d", len(got), cut-first)
			}
		}
	}
	d := mpa.NewDeframer(bytes.NewReader(nil), mpa.DeframerConfig{})
	if _, err := d.Next(); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
}

func TestDeframerBadCRCContinues(t *testing.T) {
	fr := &mpa.Framer{CRC: true}
	var stream []byte
	stream = fr.AppendFPDU(stream, []byte("one"), nil)
	at := len(stream)
	stream = fr.AppendFPDU(stream, []byte("two"), []byte("!"))
	stream = fr.AppendFPDU(stream, []byte("three"), nil)
	stream[at+3] ^= 0x80 // inside "two"
	d := mpa.NewDeframer(iotest.OneByteReader(bytes.NewReader(stream)), mpa.DeframerConfig{CRC: true})
	want := []struct {
		ulpdu string
		err   error
	}{{"one", nil}, {"t\xf7o!", mpa.ErrBadCRC}, {"three", nil}}
	for i, w := range want {
		f, err := d.Next()
		if !errors.Is(err, w.err) || f == nil || string(f.ULPDU) != w.ulpdu {
			t.Fatalf("FPDU %d: %+v, %v; want %q, %v", i, f, err, w.ulpdu, w.err)
		}
		if f.CRCOK != (w.err == nil) || !f.CRCChecked {
			t.Fatalf("FPDU %d: CRCOK %v", i, f.CRCOK)
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	// With CRC off the same stream reads without complaint.
	d = mpa.NewDeframer(bytes.NewReader(stream), mpa.DeframerConfig{})
	for i := range 3 {
		if f, err := d.Next(); err != nil || f.CRCChecked {
			t.Fatalf("CRC off, FPDU %d: %v", i, err)
		}
	}
}

func TestDeframerMaxULPDU(t *testing.T) {
	for _, markers := range []bool{false, true} {
		fr := &mpa.Framer{Markers: markers}
		stream := fr.AppendFPDU(nil, make([]byte, 100), nil)
		stream = fr.AppendFPDU(stream, make([]byte, 101), nil)
		d := mpa.NewDeframer(bytes.NewReader(stream), mpa.DeframerConfig{Markers: markers, MaxULPDU: 100})
		if f, err := d.Next(); err != nil || len(f.ULPDU) != 100 {
			t.Fatalf("100 bytes: %v", err)
		}
		for range 2 { // the error repeats: nothing was consumed
			if _, err := d.Next(); !errors.Is(err, mpa.ErrULPDUTooLong) {
				t.Fatalf("101 bytes: %v, want ErrULPDUTooLong", err)
			}
		}
		if len(d.Buffered()) == 0 {
			t.Fatal("Buffered() empty after ErrULPDUTooLong")
		}
	}
	// 0 and out-of-range values mean 65535.
	for _, max := range []int{0, -1, 1 << 20} {
		stream := mpa.AppendFPDU(nil, make([]byte, mpa.MaxULPDU), nil, false)
		d := mpa.NewDeframer(bytes.NewReader(stream), mpa.DeframerConfig{MaxULPDU: max})
		if f, err := d.Next(); err != nil || len(f.ULPDU) != mpa.MaxULPDU {
			t.Fatalf("MaxULPDU %d: %v", max, err)
		}
	}
}

func TestDeframerBuffered(t *testing.T) {
	stream := mpa.AppendFPDU(nil, []byte("a"), nil, false)
	second := len(stream)
	stream = mpa.AppendFPDU(stream, []byte("bb"), nil, false)
	stream = append(stream, 0, 9) // the start of a third
	d := mpa.NewDeframer(bytes.NewReader(stream), mpa.DeframerConfig{})
	if len(d.Buffered()) != 0 {
		t.Fatal("Buffered() before Next")
	}
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	// bytes.Reader hands over everything in one Read.
	if !bytes.Equal(d.Buffered(), stream[second:]) {
		t.Fatalf("Buffered() = %x, want %x", d.Buffered(), stream[second:])
	}
	if f, err := d.Next(); err != nil || string(f.ULPDU) != "bb" {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Buffered(), []byte{0, 9}) {
		t.Fatalf("Buffered() = %x", d.Buffered())
	}
	if _, err := d.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("partial third FPDU: %v", err)
	}
}

type errAfter struct {
	data []byte
	err  error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func TestDeframerReaderErrors(t *testing.T) {
	stream := mpa.AppendFPDU(nil, []byte("hello"), nil, true)
	boom := errors.New("boom")
	src := &errAfter{data: stream[:5], err: boom}
	d := mpa.NewDeframer(src, mpa.DeframerConfig{CRC: true})
	if _, err := d.Next(); err != boom {
		t.Fatalf("err = %v, want the reader's error", err)
	}
	src.data = stream[5:]
	if f, err := d.Next(); err != nil || string(f.ULPDU) != "hello" {
		t.Fatalf("after the error: %v", err)
	}
	if _, err := d.Next(); err != boom {
		t.Fatalf("err = %v, want the reader's error at a boundary", err)
	}
	// A reader that never makes progress.
	d = mpa.NewDeframer(&errAfter{}, mpa.DeframerConfig{})
	if _, err := d.Next(); err != io.ErrNoProgress {
		t.Fatalf("empty reads: %v, want io.ErrNoProgress", err)
	}
}

// cycleReader serves the same bytes forever without allocating.
type cycleReader struct {
	data []byte
	off  int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := copy(p, c.data[c.off:])
	c.off = (c.off + n) % len(c.data)
	return n, nil
}

func TestDeframerAllocs(t *testing.T) {
	var stream []byte
	for _, n := range []int{0, 18, 100, 1442, 5000} {
		stream = mpa.AppendFPDU(stream, make([]byte, n), nil, true)
	}
	d := mpa.NewDeframer(&cycleReader{data: stream}, mpa.DeframerConfig{CRC: true})
	for range 10 {
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(500, func() {
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Deframer.Next: %v allocs", a)
	}
	// With markers the marker-free copy is reused once it has grown.
	fr := &mpa.Framer{CRC: true, Markers: true}
	stream = stream[:0]
	for range 64 { // marker + 2 + 502 + 4: each FPDU is 512 bytes, so the cycle stays aligned
		stream = fr.AppendFPDU(stream, make([]byte, 502), nil)
	}
	d = mpa.NewDeframer(&cycleReader{data: stream}, mpa.DeframerConfig{CRC: true, Markers: true})
	for range 1000 {
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(500, func() {
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Deframer.Next with markers: %v allocs", a)
	}
}

type shortWriter struct{ n int }

func (s *shortWriter) Write(p []byte) (int, error) { return min(s.n, len(p)), nil }

func TestFramerWrite(t *testing.T) {
	for _, markers := range []bool{false, true} {
		var buf bytes.Buffer
		fr := &mpa.Framer{CRC: true, Markers: markers}
		ref := &mpa.Framer{CRC: true, Markers: markers}
		var want []byte
		for i := range 10 {
			p := bytes.Repeat([]byte{byte(i)}, i*100)
			if err := fr.WriteFPDU(&buf, []byte("hdr"), p); err != nil {
				t.Fatal(err)
			}
			want = ref.AppendFPDU(want, []byte("hdr"), p)
		}
		if !bytes.Equal(buf.Bytes(), want) || fr.Pos != uint64(len(want)) {
			t.Fatalf("markers=%v: WriteFPDU wrote %d bytes, AppendFPDU %d; Pos %d", markers, buf.Len(), len(want), fr.Pos)
		}
		big := make([]byte, 900)
		if a := testing.AllocsPerRun(100, func() {
			if err := fr.WriteFPDU(io.Discard, []byte("hdr"), big); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("markers=%v: WriteFPDU: %v allocs", markers, a)
		}
	}
	fr := &mpa.Framer{}
	if err := fr.WriteFPDU(&shortWriter{n: 3}, []byte("hello"), nil); err == nil {
		t.Error("short write not reported")
	}
	if fr.Pos != 3 {
		t.Errorf("Pos after short write = %d, want 3", fr.Pos)
	}
}
