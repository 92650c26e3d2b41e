package mpa_test

import (
	"bytes"
	"errors"
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
