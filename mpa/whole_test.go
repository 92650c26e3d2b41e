package mpa_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// noReader fails the test if the Reader reads from it.
type noReader struct{ t *testing.T }

func (n noReader) Read([]byte) (int, error) {
	n.t.Fatal("Whole read from the source")
	return 0, nil
}

// TestReaderWhole: Whole returns an FPDU only when all of it is buffered,
// never reads from the source, checks the CRC over the buffered bytes
// (ErrBadCRC, the FPDU finished all the same), and changes nothing when
// it says no: an FPDU cut short, one over the length limit, one started
// with Next, a stream with markers. Next then reads what Whole left.
func TestReaderWhole(t *testing.T) {
	ul1, ul2 := []byte("first-ulpdu-bytes"), []byte("second")
	for _, crc := range []bool{false, true} {
		for _, buffered := range []bool{false, true} {
			var stream []byte
			stream = mpa.AppendFPDU(stream, ul1, nil, crc)
			stream = mpa.AppendFPDU(stream, ul2, nil, crc)
			cfg := mpa.ReaderConfig{CRC: crc, Buffered: buffered}
			// The first read brings the first FPDU and part of the
			// second.
			cut := mpa.FPDULen(len(ul1)) + 5
			src := &blockReader{data: stream[:cut]}
			rd := mpa.NewReader(src, nil, cfg)
			if _, ok, _ := rd.Whole(); ok {
				t.Fatal("Whole before anything was read: ok")
			}
			n, err := rd.Next()
			if err != nil || n != len(ul1) {
				t.Fatalf("Next = %d, %v", n, err)
			}
			if _, ok, _ := rd.Whole(); ok {
				t.Fatal("Whole inside an FPDU started with Next: ok")
			}
			if rest, err := rd.Rest(); err != nil || !bytes.Equal(rest, ul1) {
				t.Fatalf("Rest = %q, %v", rest, err)
			}
			// The second FPDU is buffered in part only.
			before := len(rd.Buffered())
			if u, ok, err := rd.Whole(); ok || u != nil || err != nil || len(rd.Buffered()) != before || rd.InFPDU() {
				t.Fatalf("Whole of a partial FPDU = %q, %v, %v; buffered %d, was %d", u, ok, err, len(rd.Buffered()), before)
			}
			src.data = stream[cut:]
			if rest, err := readOne(rd); err != nil || !bytes.Equal(rest, ul2) {
				t.Fatalf("the partial FPDU read with Next: %q, %v", rest, err)
			}

			// All of it buffered: Whole takes FPDU after FPDU without
			// reading.
			var many []byte
			for i := range 5 {
				many = mpa.AppendFPDU(many, bytes.Repeat([]byte{byte(i)}, 10+i), nil, crc)
			}
			rd = mpa.NewReader(&blockReader{data: many}, nil, cfg)
			if _, err := rd.Next(); err != nil { // the read
				t.Fatal(err)
			}
			if rest, err := rd.Rest(); err != nil || len(rest) != 10 {
				t.Fatalf("Rest = %q, %v", rest, err)
			}
			for i := 1; i < 5; i++ {
				u, ok, err := rd.Whole()
				if !ok || err != nil || !bytes.Equal(u, bytes.Repeat([]byte{byte(i)}, 10+i)) {
					t.Fatalf("Whole %d = %q, %v, %v", i, u, ok, err)
				}
				if wl, m := rd.WireLen(); wl != mpa.FPDULen(10+i) || m != 0 || rd.InFPDU() {
					t.Fatalf("after Whole %d: WireLen %d, %d markers, in FPDU %v", i, wl, m, rd.InFPDU())
				}
			}
			if rd.Partial() {
				t.Fatal("Partial after the last FPDU")
			}

			if !crc {
				continue
			}
			// A bad CRC (a ULPDU byte flipped): reported, the FPDU
			// finished, the next one whole.
			good := mpa.AppendFPDU(nil, ul2, nil, true)
			corrupt := bytes.Clone(good)
			corrupt[3] ^= 1
			rd = mpa.NewReader(&blockReader{data: append(append(bytes.Clone(good), corrupt...), good...)}, nil, cfg)
			if u, err := readOne(rd); err != nil || !bytes.Equal(u, ul2) {
				t.Fatal(u, err)
			}
			u, ok, err := rd.Whole()
			if !ok || !errors.Is(err, mpa.ErrBadCRC) || rd.InFPDU() || len(u) != len(ul2) {
				t.Fatalf("Whole of a corrupt FPDU = %q, %v, %v; in FPDU %v", u, ok, err, rd.InFPDU())
			}
			if u, ok, err := rd.Whole(); !ok || err != nil || !bytes.Equal(u, ul2) {
				t.Fatalf("Whole after a corrupt FPDU = %q, %v, %v", u, ok, err)
			}
		}
	}

	// Over the length limit: no, and Next reports it.
	long := mpa.AppendFPDU(nil, make([]byte, 100), nil, false)
	rd := mpa.NewReader(&blockReader{data: append(mpa.AppendFPDU(nil, ul1, nil, false), long...)}, nil, mpa.ReaderConfig{MaxULPDU: 50})
	if u, err := readOne(rd); err != nil || !bytes.Equal(u, ul1) {
		t.Fatal(u, err)
	}
	if _, ok, _ := rd.Whole(); ok {
		t.Fatal("Whole of an FPDU over MaxULPDU: ok")
	}
	if _, err := rd.Next(); err != mpa.ErrULPDUTooLong {
		t.Fatalf("Next after Whole said no: %v, want ErrULPDUTooLong", err)
	}

	// Markers: never.
	fr := &mpa.Framer{Markers: true}
	marked := fr.AppendFPDU(nil, ul1, nil)
	marked = fr.AppendFPDU(marked, ul2, nil)
	rd = mpa.NewReader(&blockReader{data: marked}, nil, mpa.ReaderConfig{Markers: true})
	if u, err := readOne(rd); err != nil || !bytes.Equal(u, ul1) {
		t.Fatal(u, err)
	}
	if _, ok, _ := rd.Whole(); ok {
		t.Fatal("Whole on a stream with markers: ok")
	}

	// Whole never reads.
	rd = mpa.NewReader(noReader{t}, nil, mpa.ReaderConfig{Leftover: mpa.AppendFPDU(nil, ul1, nil, false)})
	if _, ok, _ := rd.Whole(); ok {
		t.Fatal("Whole of bytes not yet read (Leftover): ok")
	}
}

// readOne reads one FPDU with Next and Rest.
func readOne(rd *mpa.Reader) ([]byte, error) {
	if _, err := rd.Next(); err != nil {
		return nil, err
	}
	return rd.Rest()
}

// logVecReader is a queueVecReader that logs every call: its kind and
// how much room it was given.
type logVecReader struct {
	queueVecReader
	log []string
}

func (l *logVecReader) Read(p []byte) (int, error) {
	l.log = append(l.log, fmt.Sprintf("read %d", len(p)))
	return l.queueVecReader.Read(p)
}

func (l *logVecReader) ReadVec(dst, ahead []byte) (int, error) {
	l.log = append(l.log, fmt.Sprintf("readv %d+%d", len(dst), len(ahead)))
	return l.queueVecReader.ReadVec(dst, ahead)
}

// TestReaderFill: Fill makes the read Next would make, and only that
// one: a Reader that calls Fill and takes what it can with Whole before
// each Next reads a stream (small FPDUs one per read, a large one whose
// payload goes straight into memory, a burst) with exactly the calls of
// one that never does, the large payload still read straight into the
// destination; the small FPDUs that came alone are taken whole. Fill reads nothing
// inside an FPDU, with the length field buffered or with markers, and
// reports the stream's end as Next does.
func TestReaderFill(t *testing.T) {
	small := bytes.Repeat([]byte{1}, 82)
	large := bytes.Repeat([]byte{2}, 20000)
	for _, crc := range []bool{false, true} {
		for _, lend := range []bool{false, true} {
			var chunks [][]byte
			for range 3 {
				chunks = append(chunks, mpa.AppendFPDU(nil, small[:18], small[18:], crc))
			}
			fp := mpa.AppendFPDU(nil, large[:18], large[18:], crc)
			chunks = append(chunks, fp[:100], fp[100:9000], fp[9000:])
			var burst []byte
			for range 20 {
				burst = mpa.AppendFPDU(burst, small[:18], small[18:], crc)
			}
			chunks = append(chunks, burst, mpa.AppendFPDU(nil, small[:18], small[18:], crc))
			run := func(fill bool) ([]string, int, int) {
				src := &logVecReader{queueVecReader: queueVecReader{queueReader: queueReader{chunks: slices.Clone(chunks)}}}
				cfg := mpa.ReaderConfig{CRC: crc}
				if lend {
					cfg.Buffers = &lendPool{t: t}
				}
				rd := mpa.NewReader(src, nil, cfg)
				p := &countPlacer{t: t}
				wholes := 0
				for i := range 3 + 1 + 20 + 1 {
					want := small
					if i == 3 {
						want = large
					}
					if fill {
						if err := rd.Fill(); err != nil {
							t.Fatalf("crc=%v lend=%v: Fill before FPDU %d: %v", crc, lend, i, err)
						}
						if u, ok, err := rd.Whole(); ok {
							if err != nil || !bytes.Equal(u, want) {
								t.Fatalf("crc=%v lend=%v: Whole %d = %d bytes, %v", crc, lend, i, len(u), err)
							}
							wholes++
							continue
						}
					}
					got := readStreamed(t, rd, p, fmt.Sprintf("crc=%v lend=%v: FPDU %d", crc, lend, i))
					if !bytes.Equal(got, want) {
						t.Fatalf("crc=%v lend=%v: FPDU %d differs", crc, lend, i)
					}
				}
				if _, err := rd.Next(); err != errBlock {
					t.Fatalf("Next at the end = %v", err)
				}
				return src.log, p.direct, wholes
			}
			plain, direct, _ := run(false)
			filled, fdirect, wholes := run(true)
			if !slices.Equal(plain, filled) {
				t.Errorf("crc=%v lend=%v: reads with Fill\n%v\nwithout\n%v", crc, lend, filled, plain)
			}
			if fdirect != direct || !crc && direct == 0 {
				t.Errorf("crc=%v lend=%v: %d payload bytes read straight into memory with Fill, %d without", crc, lend, fdirect, direct)
			}
			if wholes < 3+1 {
				// The small FPDUs that came one per read, and the one
				// after the burst; of the burst itself, those read
				// whole (reads are limited after a large payload).
				t.Errorf("crc=%v lend=%v: %d FPDUs taken whole after Fill, want at least 4", crc, lend, wholes)
			}
		}
	}

	// No read inside an FPDU, with the length field buffered, with
	// markers.
	two := mpa.AppendFPDU(nil, small[:18], small[18:], false)
	two = append(two, mpa.AppendFPDU(nil, small[:18], small[18:], false)...)
	once := &onceReader{t: t, data: two[:30]}
	rd := mpa.NewReader(once, nil, mpa.ReaderConfig{})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Fill(); err != nil || !rd.InFPDU() {
		t.Fatal(err)
	}
	once.data = two[30:]
	if _, err := readOne(rd); err != nil {
		t.Fatal(err)
	}
	// The second FPDU is all buffered now.
	if err := rd.Fill(); err != nil {
		t.Fatal(err)
	}
	if u, ok, err := rd.Whole(); !ok || err != nil || !bytes.Equal(u, small) {
		t.Fatalf("Whole after Fill = %q, %v, %v", u, ok, err)
	}
	fr := &mpa.Framer{Markers: true}
	rd = mpa.NewReader(noReader{t}, nil, mpa.ReaderConfig{Markers: true, Leftover: fr.AppendFPDU(nil, small, nil)})
	if err := rd.Fill(); err != nil || rd.InFPDU() {
		t.Fatal(err)
	}

	// The end of the stream, as Next reports it.
	rd = mpa.NewReader(&blockReader{data: nil}, nil, mpa.ReaderConfig{})
	if err := rd.Fill(); err != errBlock {
		t.Fatalf("Fill on a blocked source = %v", err)
	}
	rd = mpa.NewReader(eofReader{}, nil, mpa.ReaderConfig{})
	if err := rd.Fill(); err != io.EOF {
		t.Fatalf("Fill at the end = %v, want io.EOF", err)
	}
	rd = mpa.NewReader(eofReader{}, nil, mpa.ReaderConfig{Leftover: two[:1]})
	if err := rd.Fill(); err != io.ErrUnexpectedEOF {
		t.Fatalf("Fill at the end inside a length field = %v, want io.ErrUnexpectedEOF", err)
	}
}

// onceReader serves data with one read, then fails the test if read
// again before data is set anew.
type onceReader struct {
	t    *testing.T
	data []byte
}

func (o *onceReader) Read(p []byte) (int, error) {
	if o.data == nil {
		o.t.Fatal("read when no read was due")
	}
	n := copy(p, o.data)
	o.data = nil
	return n, nil
}

// eofReader is a source that has ended.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// TestReaderFillRandom: Fill (with Whole after it) makes the reads Next
// alone makes, over random streams of FPDUs of random sizes cut into
// random reads, some of exactly what the buffer has room for (so that a
// read fills it and the source does not look drained), with and without
// CRC and a lending pool.
func TestReaderFillRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		crc, lend := iter%2 == 1, iter%4 >= 2
		var ulpdus [][]byte
		var stream []byte
		for range 1 + rng.IntN(40) {
			n := 18 + rng.IntN(200)
			switch rng.IntN(8) {
			case 0:
				n = 18 + rng.IntN(30000)
			case 1:
				n = mpa.ReaderSmallLen - 8 // its FPDU fills the small array
			}
			u := make([]byte, n)
			for i := range u {
				u[i] = byte(rng.Uint32())
			}
			ulpdus = append(ulpdus, u)
			stream = mpa.AppendFPDU(stream, u[:18], u[18:], crc)
		}
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			var k int
			switch rng.IntN(6) {
			case 0:
				k = mpa.ReaderSmallLen
			case 1:
				k = mpa.ReaderBufSize
			case 2:
				k = 1 + rng.IntN(4)
			default:
				k = 1 + rng.IntN(3000)
			}
			k = min(k, len(rest))
			chunks = append(chunks, rest[:k])
			rest = rest[k:]
		}
		run := func(fill bool) []string {
			src := &logVecReader{queueVecReader: queueVecReader{queueReader: queueReader{chunks: slices.Clone(chunks)}}}
			cfg := mpa.ReaderConfig{CRC: crc}
			if lend {
				cfg.Buffers = &lendPool{t: t}
			}
			rd := mpa.NewReader(src, nil, cfg)
			p := &countPlacer{t: t}
			for i, want := range ulpdus {
				if fill {
					if err := rd.Fill(); err != nil {
						t.Fatalf("iter %d: Fill: %v", iter, err)
					}
					if u, ok, err := rd.Whole(); ok {
						if err != nil || !bytes.Equal(u, want) {
							t.Fatalf("iter %d: Whole %d: %v", iter, i, err)
						}
						continue
					}
				}
				got := readStreamed(t, rd, p, fmt.Sprintf("iter %d: FPDU %d", iter, i))
				if !bytes.Equal(got, want) {
					t.Fatalf("iter %d: FPDU %d differs", iter, i)
				}
			}
			return src.log
		}
		if plain, filled := run(false), run(true); !slices.Equal(plain, filled) {
			t.Fatalf("iter %d (crc=%v lend=%v): reads with Fill\n%v\nwithout\n%v", iter, crc, lend, filled, plain)
		}
	}
}

// TestReaderWholeEdges: a Reader that takes what it can with Whole
// (after Fill) and the rest with Next, Place and Trailer reads a stream
// of FPDUs around the lengths that matter to it (DirectMin+bigSlack,
// from which a payload not all buffered may go straight into memory;
// MaxULPDU) with exactly the reads, ULPDUs, WireLen and CRC of a
// Reader that never calls Whole: with and without CRC, Buffered, a
// VectorReader and a lower MaxULPDU.
func TestReaderWholeEdges(t *testing.T) {
	const edge = mpa.DirectMin + 64 // DirectMin+bigSlack
	for _, crc := range []bool{false, true} {
		for _, buffered := range []bool{false, true} {
			for _, maxU := range []int{0, edge, edge - 1, edge - 2} {
				var chunks [][]byte
				var sizes []int
				for _, c := range [][]int{{10, edge - 1}, {edge}, {3, edge + 1, 0}, {edge - 2, 1}, {edge, edge, 5}} {
					var b []byte
					for _, n := range c {
						b = mpa.AppendFPDU(b, bytes.Repeat([]byte{byte(n)}, n), nil, crc)
						sizes = append(sizes, n)
					}
					chunks = append(chunks, b)
				}
				type got struct {
					u       []byte
					wl, crc uint32
					err     error
				}
				run := func(whole bool) ([]got, []string) {
					src := &logVecReader{queueVecReader: queueVecReader{queueReader: queueReader{chunks: slices.Clone(chunks)}}}
					rd := mpa.NewReader(src, nil, mpa.ReaderConfig{CRC: crc, Buffered: buffered, MaxULPDU: maxU})
					var out []got
					for range sizes {
						if whole {
							if err := rd.Fill(); err != nil {
								out = append(out, got{err: err})
								break
							}
							if u, ok, err := rd.Whole(); ok {
								wl, _ := rd.WireLen()
								out = append(out, got{bytes.Clone(u), uint32(wl), rd.CRC(), err})
								continue
							}
						}
						n, err := rd.Next()
						if err != nil {
							out = append(out, got{err: err})
							break
						}
						d := make([]byte, n)
						if err := rd.Place(d, nopPlacer{}); err != nil {
							out = append(out, got{err: err})
							break
						}
						err = rd.Trailer()
						wl, _ := rd.WireLen()
						out = append(out, got{d, uint32(wl), rd.CRC(), err})
					}
					return out, src.log
				}
				want, wantLog := run(false)
				have, haveLog := run(true)
				name := fmt.Sprintf("crc=%v buffered=%v max=%d", crc, buffered, maxU)
				if !slices.Equal(haveLog, wantLog) {
					t.Errorf("%s: reads with Whole %v, without %v", name, haveLog, wantLog)
				}
				if len(have) != len(want) {
					t.Fatalf("%s: %d results with Whole, %d without", name, len(have), len(want))
				}
				for i := range want {
					h, w := have[i], want[i]
					if !bytes.Equal(h.u, w.u) || h.wl != w.wl || h.crc != w.crc || h.err != w.err {
						t.Errorf("%s: FPDU %d with Whole: %d bytes, WireLen %d, CRC %#x, %v; without: %d bytes, WireLen %d, CRC %#x, %v",
							name, i, len(h.u), h.wl, h.crc, h.err, len(w.u), w.wl, w.crc, w.err)
					}
				}
				if maxU == 0 && len(want) != len(sizes) {
					t.Errorf("%s: %d FPDUs read, want %d (last: %v)", name, len(want), len(sizes), want[len(want)-1].err)
				}
			}
		}
	}
}
