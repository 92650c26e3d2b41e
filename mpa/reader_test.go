package mpa_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// countPlacer counts the placements Place makes and checks they pair up.
type countPlacer struct {
	t      testing.TB
	inside bool
	enters int
	refuse error
	direct int // bytes announced as read straight from the source
	copied int
}

func (p *countPlacer) Enter(n int, direct bool) error {
	if p.inside {
		p.t.Fatal("Enter inside a placement")
	}
	if p.refuse != nil {
		return p.refuse
	}
	p.inside = true
	p.enters++
	if direct {
		p.direct += n
	} else {
		p.copied += n
	}
	return nil
}

func (p *countPlacer) Leave() {
	if !p.inside {
		p.t.Fatal("Leave outside a placement")
	}
	p.inside = false
}

// readStreamed reads the next FPDU the streaming way (Next, Header of
// its 18-byte untagged DDP header, Place of the rest through p, Trailer)
// and returns its ULPDU; any error fails the test, labelled with what.
func readStreamed(t *testing.T, rd *mpa.Reader, p mpa.Placer, what string) []byte {
	t.Helper()
	n, err := rd.Next()
	if err != nil {
		t.Fatalf("%s: Next = %d, %v", what, n, err)
	}
	got := make([]byte, n)
	h, err := rd.Header(18)
	if err != nil {
		t.Fatalf("%s: Header: %v", what, err)
	}
	copy(got, h)
	if err := rd.Place(got[18:], p); err != nil {
		t.Fatalf("%s: Place: %v", what, err)
	}
	if err := rd.Trailer(); err != nil {
		t.Fatalf("%s: Trailer: %v", what, err)
	}
	return got
}

// vecReader is a chunkReader that also reads vectors, and records how
// many bytes went into dst.
type vecReader struct {
	chunkReader
	reads    int // Read calls (ReadVec calls not included)
	vecBytes int
	maxAhead int // the longest ahead a ReadVec was given
	placer   *countPlacer
}

func (v *vecReader) Read(p []byte) (int, error) {
	v.reads++
	return v.chunkReader.Read(p)
}

func (v *vecReader) ReadVec(dst, ahead []byte) (int, error) {
	if v.placer != nil && !v.placer.inside {
		panic("ReadVec outside a placement")
	}
	if len(v.data) == 0 {
		return 0, io.EOF
	}
	v.maxAhead = max(v.maxAhead, len(ahead))
	n := copy(dst, v.data[:min(len(v.data), 1+v.r.IntN(v.max))])
	v.data = v.data[n:]
	v.vecBytes += n
	if len(dst) == n {
		m := copy(ahead, v.data)
		v.data = v.data[m:]
		n += m
	}
	return n, nil
}

// readHeaderFirst reads every FPDU of rd the header-first way: Header for
// a random prefix, Place into a few destinations, Trailer; or, every
// other FPDU at random, with Whole when the FPDU is all buffered.
func readHeaderFirst(t testing.TB, rd *mpa.Reader, r *rand.Rand, p *countPlacer) ([][]byte, error) {
	var out [][]byte
	for {
		if r.IntN(2) == 0 {
			before := rd.Buffered()
			ul, ok, err := rd.Whole()
			if ok {
				if rd.InFPDU() || err != nil && !errors.Is(err, mpa.ErrBadCRC) {
					t.Fatalf("Whole: in FPDU %v, %v", rd.InFPDU(), err)
				}
				if wl, m := rd.WireLen(); m != 0 || wl != mpa.FPDULen(len(ul)) || len(before) < wl ||
					!bytes.Equal(before[mpa.LengthFieldLen:mpa.LengthFieldLen+len(ul)], ul) ||
					rd.CRC() != binary.BigEndian.Uint32(before[wl-mpa.CRCLen:]) {
					t.Fatalf("Whole: WireLen %d, %d markers, CRC %#x, not what was buffered", wl, m, rd.CRC())
				}
				out = append(out, bytes.Clone(ul))
				if err != nil {
					return out, err
				}
				continue
			}
			if err != nil || ul != nil || len(rd.Buffered()) != len(before) {
				t.Fatalf("Whole without an FPDU: %d bytes, %v; buffered %d, was %d", len(ul), err, len(rd.Buffered()), len(before))
			}
		}
		n, err := rd.Next()
		if err != nil {
			return out, err
		}
		ul := make([]byte, n)
		h := r.IntN(min(n, mpa.MaxHeader) + 1)
		hb, err := rd.Header(h)
		if err != nil {
			return out, err
		}
		copy(ul, hb)
		for off := h; off < n; {
			k := 1 + r.IntN(n-off)
			if err := rd.Place(ul[off:off+k], p); err != nil {
				if errors.Is(err, mpa.ErrBadCRC) {
					// Buffered: the CRC is checked before anything is
					// placed; what the FPDU holds is still there.
					if p.inside {
						t.Fatal("ErrBadCRC inside a placement")
					}
					rest, rerr := rd.Rest()
					copy(ul[off:], rest)
					if rerr != mpa.ErrBadCRC || rd.InFPDU() {
						t.Fatalf("Rest after a bad CRC: %v, in FPDU %v", rerr, rd.InFPDU())
					}
					return append(out, ul), err
				}
				return out, err
			}
			off += k
		}
		err = rd.Trailer()
		if err != nil && !errors.Is(err, mpa.ErrBadCRC) {
			return out, err
		}
		out = append(out, ul)
		if err != nil {
			return out, err
		}
	}
}

// TestReaderHeaderFirst: the header-first path (Header, Place, Trailer)
// gives back every ULPDU the Framer framed, for CRC, markers and
// Buffered on and off, however the stream and the placements are cut;
// placements always pair up, and without markers and Buffered, and
// without CRC or with CRCInPlace (the CRC then computed over the
// destination), the large remainders are read straight into the
// destination.
func TestReaderHeaderFirst(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			for _, buffered := range []bool{false, true} {
				for _, off := range []uint64{0, 4, 510} {
					if off != 0 && !markers {
						continue
					}
					for _, v := range []struct{ lend, inPlace bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
						lend, inPlace := v.lend, v.inPlace
						if inPlace && !crc {
							continue
						}
						t.Run(fmt.Sprintf("crc=%v/inplace=%v/markers=%v/buffered=%v/off=%d/lend=%v", crc, inPlace, markers, buffered, off, lend), func(t *testing.T) {
							ulpdus := randULPDUs(r, 40, 20000)
							ulpdus = append(ulpdus, randBytes(r, mpa.MaxULPDU), nil)
							f := &mpa.Framer{CRC: crc, Markers: markers, Pos: off}
							stream := buildStream(r, f, ulpdus)
							p := &countPlacer{t: t}
							src := &vecReader{chunkReader: chunkReader{data: stream, r: r, max: 1 + r.IntN(70000)}, placer: p}
							cfg := mpa.ReaderConfig{CRC: crc, Markers: markers, StreamOffset: off, Buffered: buffered, CRCInPlace: inPlace}
							pool := &lendPool{t: t}
							if lend {
								cfg.Buffers = pool
							}
							rd := mpa.NewReader(src, nil, cfg)
							got, err := readHeaderFirst(t, rd, r, p)
							rd.Release()
							if pool.out != 0 {
								t.Fatalf("%d buffers not given back after Release", pool.out)
							}
							if err != io.EOF {
								t.Fatalf("after %d FPDUs: %v, want io.EOF", len(got), err)
							}
							if len(got) != len(ulpdus) {
								t.Fatalf("%d FPDUs, want %d", len(got), len(ulpdus))
							}
							for i := range got {
								if !bytes.Equal(got[i], ulpdus[i]) {
									t.Fatalf("FPDU %d differs (%d bytes)", i, len(got[i]))
								}
							}
							copied, direct := p.copied, p.direct
							if direct != src.vecBytes {
								t.Fatalf("Placer announced %d direct bytes, ReadVec placed %d", direct, src.vecBytes)
							}
							if wantDirect := (!crc || inPlace) && !markers && !buffered; (direct > 0) != wantDirect {
								t.Fatalf("direct %d bytes (copied %d); want direct placement %v", direct, copied, wantDirect)
							}
						})
					}
				}
			}
		}
	}
}

// blockReader serves data and then reports errBlock, as a peer that
// stopped sending.
type blockReader struct{ data []byte }

var errBlock = errors.New("no more bytes")

func (b *blockReader) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		return 0, errBlock
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

// TestReaderHeaderBeforePayload: the header of an FPDU that declares a
// large ULPDU is delivered while the rest has not arrived, on every
// configuration (Buffered included); the rest is awaited only by Place,
// Discard or Trailer.
func TestReaderHeaderBeforePayload(t *testing.T) {
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			for _, buffered := range []bool{false, true} {
				fr := &mpa.Framer{CRC: crc, Markers: markers}
				hdr := []byte("0123456789abcdefgh")
				full := fr.AppendFPDU(nil, hdr, make([]byte, 60000))
				cut := len(hdr) + 2
				if markers {
					cut += mpa.MarkerLen
				}
				rd := mpa.NewReader(&blockReader{data: full[:cut]}, nil, mpa.ReaderConfig{CRC: crc, Markers: markers, Buffered: buffered})
				n, err := rd.Next()
				if err != nil || n != len(hdr)+60000 {
					t.Fatalf("crc=%v markers=%v buffered=%v: Next = %d, %v", crc, markers, buffered, n, err)
				}
				h, err := rd.Header(len(hdr))
				if err != nil || !bytes.Equal(h, hdr) {
					t.Fatalf("crc=%v markers=%v buffered=%v: Header = %q, %v", crc, markers, buffered, h, err)
				}
				if !rd.Partial() {
					t.Fatal("Partial() false inside an FPDU")
				}
				p := &countPlacer{t: t}
				if err := rd.Place(make([]byte, 10), p); err != errBlock {
					t.Fatalf("Place past what arrived: %v, want the source's error", err)
				}
				if p.enters != 0 && (buffered || crc) {
					t.Fatalf("placed %d times before the FPDU (buffered) or its bytes arrived", p.enters)
				}
				if err := rd.Discard(); err != errBlock {
					t.Fatalf("Discard: %v, want the source's error", err)
				}
			}
		}
	}
}

// TestReaderErrors: CRC mismatches (detected by Trailer, or by Place in
// Buffered mode before anything is placed), a refusing Placer, misuse,
// and a stream cut inside an FPDU.
func TestReaderErrors(t *testing.T) {
	good := mpa.AppendFPDU(nil, []byte("header"), bytes.Repeat([]byte{7}, 100), true)
	bad := bytes.Clone(good)
	bad[20] ^= 1
	stream := append(bytes.Clone(bad), good...)
	for _, buffered := range []bool{false, true} {
		rd := mpa.NewReader(bytes.NewReader(stream), nil, mpa.ReaderConfig{CRC: true, Buffered: buffered})
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.Header(6); err != nil {
			t.Fatal(err)
		}
		p := &countPlacer{t: t}
		d := make([]byte, 100)
		err := rd.Place(d, p)
		if buffered {
			if err != mpa.ErrBadCRC || p.enters != 0 {
				t.Fatalf("buffered Place: %v after %d placements, want ErrBadCRC before any", err, p.enters)
			}
			if err := rd.Discard(); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if err := rd.Trailer(); err != mpa.ErrBadCRC {
			t.Fatalf("Trailer: %v, want ErrBadCRC", err)
		}
		// The next FPDU is intact.
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		ul, err := rd.Rest()
		if err != nil || !bytes.HasPrefix(ul, []byte("header")) || rd.CRC() != mpa.WireCRC(good[len(good)-4:]) {
			t.Fatalf("second FPDU: %q, %v", ul, err)
		}
	}

	// A Placer that refuses: its error comes back, nothing is written.
	rd := mpa.NewReader(bytes.NewReader(good), nil, mpa.ReaderConfig{})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	cut := errors.New("cut")
	d := make([]byte, 106)
	if err := rd.Place(d, &countPlacer{t: t, refuse: cut}); err != cut || d[0] != 0 {
		t.Fatalf("refused Place: %v, d[0] = %d", err, d[0])
	}

	// Misuse is an error, never a panic or a read past the ULPDU.
	rd = mpa.NewReader(bytes.NewReader(good), nil, mpa.ReaderConfig{})
	if _, err := rd.Header(1); err == nil {
		t.Fatal("Header before Next")
	}
	if err := rd.Trailer(); err == nil {
		t.Fatal("Trailer before Next")
	}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Trailer(); err == nil {
		t.Fatal("Trailer before the ULPDU was consumed")
	}
	if err := rd.Place(make([]byte, 107), &countPlacer{t: t}); err == nil {
		t.Fatal("Place past the ULPDU")
	}
	if _, err := rd.Header(mpa.MaxHeader + 1); err == nil {
		t.Fatal("Header over MaxHeader")
	}

	// Cut inside an FPDU, at every point.
	for i := 1; i < len(good); i++ {
		rd := mpa.NewReader(bytes.NewReader(good[:i]), nil, mpa.ReaderConfig{CRC: true})
		_, err := readHeaderFirst(t, rd, rand.New(rand.NewPCG(uint64(i), 1)), &countPlacer{t: t})
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", i, err)
		}
	}
}

// TestReaderLeftover: bytes read before the Reader started come first.
func TestReaderLeftover(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	ulpdus := randULPDUs(r, 20, 9000)
	stream := buildStream(r, &mpa.Framer{}, ulpdus)
	for _, cut := range []int{0, 1, 7, 5000, len(stream)} {
		p := &countPlacer{t: t}
		src := &vecReader{chunkReader: chunkReader{data: stream[cut:], r: r, max: 9000}, placer: p}
		rd := mpa.NewReader(src, nil, mpa.ReaderConfig{Leftover: stream[:cut]})
		got, err := readHeaderFirst(t, rd, r, p)
		if err != io.EOF || len(got) != len(ulpdus) {
			t.Fatalf("cut %d: %d FPDUs, %v", cut, len(got), err)
		}
		for i := range got {
			if !bytes.Equal(got[i], ulpdus[i]) {
				t.Fatalf("cut %d: FPDU %d differs", cut, i)
			}
		}
	}
}

// TestReaderAllocs: the header-first path allocates nothing per FPDU.
func TestReaderAllocs(t *testing.T) {
	var stream []byte
	for _, n := range []int{0, 18, 100, 1442, 5000, 20000} {
		stream = mpa.AppendFPDU(stream, make([]byte, n), nil, false)
	}
	p := &countPlacer{t: t}
	rd := mpa.NewReader(&cycleReader{data: stream}, nil, mpa.ReaderConfig{})
	dst := make([]byte, mpa.MaxULPDU)
	one := func() {
		n, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		h := min(n, 18)
		if _, err := rd.Header(h); err != nil {
			t.Fatal(err)
		}
		if err := rd.Place(dst[:n-h], p); err != nil {
			t.Fatal(err)
		}
		if err := rd.Trailer(); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		one()
	}
	if a := testing.AllocsPerRun(500, one); a != 0 {
		t.Errorf("header-first FPDU: %v allocs", a)
	}
}

// FuzzReader feeds arbitrary bytes to a Reader with an arbitrary
// configuration, read the header-first way with placements cut as the
// fuzzer chooses. It must never panic, place outside the destinations or
// past the ULPDU, and must agree with the whole-FPDU way (Rest) on every
// ULPDU and error, and, without markers, with ParseFPDU.
func FuzzReader(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			for _, buffered := range []bool{false, true} {
				for _, off := range []uint64{0, 508, 1<<64 - 4} {
					fr := &mpa.Framer{CRC: crc, Markers: markers, Pos: off}
					stream := buildStream(r, fr, randULPDUs(r, 4, 700))
					f.Add(stream, crc, markers, buffered, off, uint64(off)+1)
				}
			}
		}
	}
	f.Add(hexBytes(f, siwSendFPDU+siwReadReqFPDU+siwReadRespFPDU), true, false, false, uint64(0), uint64(7))
	// One payload long enough for the direct read.
	f.Add(mpa.AppendFPDU(nil, nil, make([]byte, mpa.DirectMin+100), false), false, false, false, uint64(0), uint64(1))
	// A large FPDU (reads then limited to trailer and header) followed
	// by a small one whose payload tail arrives in pieces.
	tail := mpa.AppendFPDU(nil, nil, make([]byte, mpa.DirectMin+200), false)
	tail = mpa.AppendFPDU(tail, nil, make([]byte, 1550), false)
	f.Add(tail, false, false, false, uint64(0), uint64(300))
	// A run of large FPDUs, lent buffers (seed bit 20): direct reads
	// that read the next FPDUs ahead into a borrowed buffer.
	var run []byte
	for i := range 6 {
		run = mpa.AppendFPDU(run, nil, bytes.Repeat([]byte{byte(i)}, mpa.DirectMin*5+i), false)
	}
	f.Add(run, false, false, false, uint64(0), uint64(1<<20|4999))
	// Large FPDUs with CRC, whose bytes all go through the buffer: the
	// buffer is compacted in the middle of an FPDU (outside Buffered
	// mode its consumed bytes are let go, not moved; in Buffered mode
	// they stay), with and without lent buffers.
	var large []byte
	fr := &mpa.Framer{CRC: true}
	for i := range 5 {
		large = fr.AppendFPDU(large, nil, bytes.Repeat([]byte{byte(i + 1)}, 40000+i*997))
	}
	for _, buffered := range []bool{false, true} {
		f.Add(large, true, false, buffered, uint64(0), uint64(8191))
		f.Add(large, true, false, buffered, uint64(0), uint64(1<<20|65000))
	}
	// CRCInPlace (seed bit 21): the large FPDUs with CRC read straight
	// into the destination, their CRC computed there; one damaged.
	f.Add(large, true, false, false, uint64(0), uint64(1<<21|30000))
	damaged := bytes.Clone(large)
	damaged[50000] ^= 0x40
	f.Add(damaged, true, false, false, uint64(0), uint64(1<<21|1<<20|9000))
	// Lent buffers (seed bit 20), small and large FPDUs.
	for _, crc := range []bool{false, true} {
		stream := buildStream(r, &mpa.Framer{CRC: crc}, randULPDUs(r, 6, 3000))
		f.Add(stream, crc, false, false, uint64(0), uint64(1<<20|77))
	}
	// Long lent buffers (seed bits 20 and 22): the run of large FPDUs
	// read straight (a read ahead of at most ReaderBufSize), and the
	// large FPDUs with CRC, all through the buffer.
	f.Add(run, false, false, false, uint64(0), uint64(1<<22|1<<20|300000))
	f.Add(large, true, false, false, uint64(0), uint64(1<<22|1<<20|200000))
	f.Fuzz(func(t *testing.T, data []byte, crc, markers, buffered bool, off, seed uint64) {
		cfg := mpa.ReaderConfig{CRC: crc, Markers: markers, StreamOffset: off, Buffered: buffered}
		pool := &lendPool{t: t}
		if seed&(1<<20) != 0 {
			cfg.Buffers = pool // the buffer lent while bytes move
			if seed&(1<<22) != 0 {
				pool.size = longBuf // longer than a Reader needs
			}
		}
		cfg.CRCInPlace = seed&(1<<21) != 0
		rnd := rand.New(rand.NewPCG(seed, seed>>32))
		p := &countPlacer{t: t}
		src := &vecReader{chunkReader: chunkReader{data: data, r: rnd, max: 1 + int(seed%5000)}, placer: p}
		rd := mpa.NewReader(src, nil, cfg)
		got, gerr := readHeaderFirst(t, rd, rnd, p)
		rd.Release()
		if pool.out != 0 {
			t.Fatalf("%d buffers not given back after Release", pool.out)
		}
		if src.maxAhead > mpa.ReaderBufSize {
			t.Fatalf("a direct read read %d bytes ahead, more than ReaderBufSize", src.maxAhead)
		}
		want := deframeAll(bytes.NewReader(data), mpa.DeframerConfig{CRC: crc, Markers: markers, StreamOffset: off})
		if p.inside {
			t.Fatal("left inside a placement")
		}
		if errors.Is(gerr, mpa.ErrBadCRC) {
			if len(got) == 0 || len(got) > len(want) || want[len(got)-1].err != mpa.ErrBadCRC {
				t.Fatalf("header-first: bad CRC at FPDU %d, whole: %d results", len(got)-1, len(want))
			}
		} else if last := want[len(want)-1]; len(got) != len(want)-1 || gerr != last.err {
			t.Fatalf("%d FPDUs header-first ending %v, %d whole ending %v", len(got), gerr, len(want)-1, last.err)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i].ulpdu) {
				t.Fatalf("FPDU %d differs", i)
			}
		}
		if markers {
			return
		}
		// Without markers, ParseFPDU over the same bytes agrees.
		rest := data
		for i := range got {
			fp, err := mpa.ParseFPDU(rest, crc)
			if err != nil && !(errors.Is(err, mpa.ErrBadCRC) && i == len(got)-1) {
				t.Fatalf("ParseFPDU of FPDU %d: %v", i, err)
			}
			if !bytes.Equal(fp.ULPDU, got[i]) {
				t.Fatalf("ParseFPDU: FPDU %d differs", i)
			}
			rest = rest[fp.WireLen:]
		}
	})
}

// lendPool is a BufferPool for a Reader that counts the buffers out and
// overwrites every buffer given back, so that a Reader still reading a
// buffer it gave back reads garbage (and a test fails).
type lendPool struct {
	t         testing.TB
	size      int // of the buffers lent: 0 is ReaderBufSize
	free      []*[]byte
	out, gets int
}

func (p *lendPool) Get() *[]byte {
	p.out++
	p.gets++
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	b := make([]byte, max(p.size, mpa.ReaderBufSize))
	return &b
}

func (p *lendPool) Put(b *[]byte) {
	if p.out--; p.out < 0 {
		p.t.Fatal("Put of a buffer not lent")
	}
	for i := range *b {
		(*b)[i] = 0xee
	}
	p.free = append(p.free, b)
}

// queueReader serves queued chunks, one per Read at most (the rest of a
// chunk stays for the next), and errBlock when none is queued: a peer
// that sends now and then.
type queueReader struct{ chunks [][]byte }

func (q *queueReader) Read(p []byte) (int, error) {
	if len(q.chunks) == 0 {
		return 0, errBlock
	}
	n := copy(p, q.chunks[0])
	if q.chunks[0] = q.chunks[0][n:]; len(q.chunks[0]) == 0 {
		q.chunks = q.chunks[1:]
	}
	return n, nil
}

// TestReaderLendsWhileMoving: a Reader with ReaderConfig.Buffers reads a
// small FPDU without borrowing, borrows a buffer for a large FPDU or
// when bytes keep coming, and holds none once it waits on a source that
// has nothing more (with and without CRC).
func TestReaderLendsWhileMoving(t *testing.T) {
	for _, crc := range []bool{false, true} {
		pool := &lendPool{t: t}
		src := &queueReader{}
		rd := mpa.NewReader(src, nil, mpa.ReaderConfig{CRC: crc, Buffers: pool})
		p := &countPlacer{t: t}
		read := func(want []byte) {
			t.Helper()
			got := readStreamed(t, rd, p, fmt.Sprintf("crc=%v", crc))
			if !bytes.Equal(got, want) {
				t.Fatalf("crc=%v: ULPDU of %d bytes differs", crc, len(want))
			}
		}
		idle := func(what string) {
			t.Helper()
			if _, err := rd.Next(); err != errBlock {
				t.Fatalf("crc=%v: Next on an idle source = %v", crc, err)
			}
			if pool.out != 0 {
				t.Fatalf("crc=%v: %s: %d buffers held while idle", crc, what, pool.out)
			}
		}
		small := bytes.Repeat([]byte{1}, 82) // a 64-byte Send: 88 bytes on the wire
		src.chunks = append(src.chunks, mpa.AppendFPDU(nil, small[:18], small[18:], crc))
		read(small)
		idle("small FPDU")
		if pool.gets != 0 {
			t.Fatalf("crc=%v: a small FPDU borrowed %d buffers", crc, pool.gets)
		}
		// A large FPDU in two parts: the buffer is held while it is
		// partial, and given back once it is consumed.
		large := bytes.Repeat([]byte{2}, 20000)
		fp := mpa.AppendFPDU(nil, large[:18], large[18:], crc)
		src.chunks = append(src.chunks, fp[:9000])
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.Header(18); err != nil {
			t.Fatal(err)
		}
		if err := rd.Place(make([]byte, 15000), p); err != errBlock {
			t.Fatalf("Place past what arrived: %v", err)
		}
		if pool.out != 1 {
			t.Fatalf("crc=%v: %d buffers held inside a large FPDU, want 1", crc, pool.out)
		}
		// Start over on a fresh Reader for the whole FPDU (the first one
		// is mid-FPDU); the one above gives its buffer back on Release.
		rd.Release()
		src.chunks = [][]byte{fp}
		rd = mpa.NewReader(src, nil, mpa.ReaderConfig{CRC: crc, Buffers: pool})
		read(large)
		idle("large FPDU")
		// Many small FPDUs at once: the first read fills the small array,
		// the Reader borrows for the rest, and gives it back at the end.
		var burst []byte
		for range 50 {
			burst = mpa.AppendFPDU(burst, small[:18], small[18:], crc)
		}
		src.chunks = [][]byte{burst}
		gets := pool.gets
		for range 50 {
			read(small)
		}
		if pool.gets == gets {
			t.Fatalf("crc=%v: a burst of FPDUs read without a buffer", crc)
		}
		idle("burst")
	}
}

// queueVecReader is a queueReader that also reads vectors (as a socket
// does with readv: what has arrived, dst first), and counts the calls.
type queueVecReader struct {
	queueReader
	reads, vecs int
}

func (q *queueVecReader) Read(p []byte) (int, error) {
	q.reads++
	return q.queueReader.Read(p)
}

func (q *queueVecReader) ReadVec(dst, ahead []byte) (int, error) {
	q.vecs++
	n, err := q.queueReader.Read(dst)
	if err != nil || n < len(dst) || len(q.chunks) == 0 {
		return n, err
	}
	m, _ := q.queueReader.Read(ahead)
	return n + m, nil
}

// TestReaderTailReads: after a large payload placed straight into
// memory by a read that found the source drained (reads limited to
// trailer and header), the tail of a payload that arrives later is read
// with one call per piece that arrived, not one per few dozen bytes.
func TestReaderTailReads(t *testing.T) {
	large := bytes.Repeat([]byte{3}, 20000)
	small := bytes.Repeat([]byte{4}, 1550)
	stream := mpa.AppendFPDU(nil, large[:14], large[14:], false)
	stream = mpa.AppendFPDU(stream, small[:14], small[14:], false)
	cut := len(stream) - 1400 // the small FPDU's payload tail comes later
	src := &queueVecReader{queueReader: queueReader{chunks: [][]byte{stream[:cut]}}}
	rd := mpa.NewReader(src, nil, mpa.ReaderConfig{})
	p := &countPlacer{t: t}
	got := make([][]byte, 2)
	for i, want := range [][]byte{large, small} {
		n, err := rd.Next()
		if err != nil || n != len(want) {
			t.Fatalf("FPDU %d: Next = %d, %v", i, n, err)
		}
		h, err := rd.Header(14)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = append(make([]byte, 0, n), h...)[:n]
		if i == 1 {
			// Place what has arrived, then the tail arrives.
			if err := rd.Place(got[i][14:], p); err != errBlock {
				t.Fatalf("Place before the tail arrived: %v", err)
			}
			placed := p.copied - (len(large) - 14) // of this payload
			src.chunks = append(src.chunks, stream[cut:])
			src.reads, src.vecs = 0, 0
			if err := rd.Place(got[i][14+placed:], p); err != nil {
				t.Fatal(err)
			}
			if calls := src.reads + src.vecs; calls > 1 {
				t.Errorf("the %d-byte tail took %d reads and %d readvs, want one call", len(stream)-cut, src.reads, src.vecs)
			}
		} else if err := rd.Place(got[i][14:], p); err != nil {
			t.Fatal(err)
		}
		if err := rd.Trailer(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[i], want) {
			t.Fatalf("FPDU %d differs", i)
		}
	}
}

// TestReaderDirectReadsAhead: a stream of large FPDUs that has all
// arrived (a bulk stream the sender keeps ahead of) is read with reads
// that bring several FPDUs each, not one readv per FPDU: the read that
// places a payload straight into memory also fills the buffer with what
// follows, and reads are not limited to a header while the source keeps
// the buffer full. Every payload arrives intact; a Reader that borrows
// its buffer borrows one for the read ahead and holds none once the
// source is idle.
func TestReaderDirectReadsAhead(t *testing.T) {
	const fpdus, plen = 40, 32 << 10 // loopback's MSS-sized FPDUs
	var stream []byte
	want := make([][]byte, fpdus)
	for i := range want {
		want[i] = bytes.Repeat([]byte{byte(i + 1)}, plen)
		stream = mpa.AppendFPDU(stream, want[i][:18], want[i][18:], false)
	}
	for _, lend := range []bool{false, true} {
		pool := &lendPool{t: t}
		cfg := mpa.ReaderConfig{}
		if lend {
			cfg.Buffers = pool
		}
		for _, cut := range []int{0, 100, 40000} {
			// The stream arrives whole, or its first cut bytes first and
			// the rest once they are read (a direct read first).
			src := &queueVecReader{queueReader: queueReader{chunks: [][]byte{stream}}}
			if cut > 0 {
				src.chunks = [][]byte{stream[:cut], stream[cut:]}
			}
			rd := mpa.NewReader(src, nil, cfg)
			p := &countPlacer{t: t}
			for i := range want {
				got := readStreamed(t, rd, p, fmt.Sprintf("lend=%v cut=%d FPDU %d", lend, cut, i))
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("lend=%v cut=%d: FPDU %d differs", lend, cut, i)
				}
			}
			// One readv per FPDU without the read ahead.
			if calls := src.reads + src.vecs; calls > 2*fpdus/3 {
				t.Errorf("lend=%v cut=%d: %d FPDUs of %d bytes took %d reads and %d readvs, want at most %d calls",
					lend, cut, fpdus, plen, src.reads, src.vecs, 2*fpdus/3)
			}
			if p.direct+p.copied != fpdus*(plen-18) {
				t.Errorf("lend=%v cut=%d: %d bytes placed straight and %d copied, want %d in all", lend, cut, p.direct, p.copied, fpdus*(plen-18))
			}
			if _, err := rd.Next(); err != errBlock {
				t.Fatalf("lend=%v cut=%d: Next on an idle source = %v", lend, cut, err)
			}
			if lend && (pool.gets == 0 || pool.out != 0) {
				t.Errorf("lend=true cut=%d: %d buffers borrowed, %d held while idle; want some, and none held", cut, pool.gets, pool.out)
			}
		}
	}
}

// TestReaderDirectCRC: with CRC and CRCInPlace, a large payload read
// straight into the destination is folded into the CRC as placed: a byte
// damaged in transit in the part read directly fails the FPDU's CRC (its
// bytes are placed, as Linux siw places them), and the FPDU after it
// reads intact. Without CRCInPlace the same comes through the buffer.
func TestReaderDirectCRC(t *testing.T) {
	payload := bytes.Repeat([]byte{0x5a, 0xa5, 3}, 9000)
	good := mpa.AppendFPDU(nil, []byte("header"), payload, true)
	for _, c := range []struct {
		inPlace bool
		at      int
	}{
		{true, -1}, {true, 4}, {true, 2 + 6 + 20000}, {true, len(good) - 5}, // none, the header, the direct part, the payload's last byte
		{false, -1}, {false, 2 + 6 + 20000},
	} {
		at := c.at
		bad := bytes.Clone(good)
		if at >= 0 {
			bad[at] ^= 0x10
		}
		// The first chunk holds the header and a little payload: the
		// rest of it is read directly.
		src := &queueVecReader{queueReader: queueReader{chunks: [][]byte{bad[:100], bad[100:], good}}}
		rd := mpa.NewReader(src, nil, mpa.ReaderConfig{CRC: true, CRCInPlace: c.inPlace})
		p := &countPlacer{t: t}
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.Header(6); err != nil {
			t.Fatal(err)
		}
		d := make([]byte, len(payload))
		if err := rd.Place(d, p); err != nil {
			t.Fatalf("damaged at %d: Place: %v", at, err)
		}
		if c.inPlace && p.direct < len(payload)-100 || !c.inPlace && p.direct != 0 {
			t.Errorf("in place %v, damaged at %d: %d bytes placed directly, %d copied", c.inPlace, at, p.direct, p.copied)
		}
		err := rd.Trailer()
		if want := at >= 0; (err == mpa.ErrBadCRC) != want || err != nil && err != mpa.ErrBadCRC {
			t.Fatalf("damaged at %d: Trailer: %v, want ErrBadCRC %v", at, err, want)
		}
		if at < 0 && !bytes.Equal(d, payload) {
			t.Fatal("undamaged FPDU: payload differs")
		}
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		ul, err := rd.Rest()
		if err != nil || !bytes.Equal(ul[6:], payload) || rd.CRC() != mpa.WireCRC(good[len(good)-4:]) {
			t.Fatalf("damaged at %d: the next FPDU: %d bytes, %v", at, len(ul), err)
		}
	}
}

// longBuf is the length of a lent buffer longer than ReaderBufSize (a
// BufferPool may lend one).
const longBuf = 256 << 10

// TestReaderLongBuffer: a lent buffer longer than ReaderBufSize takes
// more small FPDUs a read (fewer reads for the same stream), while a
// direct read of a large payload still reads at most ReaderBufSize
// ahead, and one of DirectSoleMin or more only the trailer and the next
// header (BigSlack bytes, into the small array: no buffer borrowed), so
// that the payloads after it go straight into memory too; every FPDU
// arrives intact either way.
func TestReaderLongBuffer(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	small := make([][]byte, 6000)
	for i := range small {
		small[i] = bytes.Repeat([]byte{byte(i)}, 64)
	}
	large := make([][]byte, 8)
	for i := range large {
		large[i] = bytes.Repeat([]byte{byte(i + 1)}, mpa.DirectSoleMin-20000+i)
	}
	sole := make([][]byte, 8)
	for i := range sole {
		sole[i] = bytes.Repeat([]byte{byte(i + 1)}, mpa.DirectSoleMin+10000+i)
	}
	lent := 0 // buffers the last read borrowed
	read := func(ulpdus [][]byte, size int) (reads, maxAhead, direct int) {
		stream := buildStream(r, &mpa.Framer{}, ulpdus)
		p := &countPlacer{t: t}
		src := &vecReader{chunkReader: chunkReader{data: stream, r: r, max: 1 << 30}, placer: p}
		pool := &lendPool{t: t, size: size}
		rd := mpa.NewReader(src, nil, mpa.ReaderConfig{Buffers: pool})
		for i, want := range ulpdus {
			what := fmt.Sprintf("buffer of %d, FPDU %d", size, i)
			if got := readStreamed(t, rd, p, what); !bytes.Equal(got, want) {
				t.Fatalf("%s differs", what)
			}
		}
		if n, err := rd.Next(); err != io.EOF {
			t.Fatalf("buffer of %d: after the last FPDU, Next = %d, %v; want EOF", size, n, err)
		}
		rd.Release()
		lent = pool.gets
		return src.reads, src.maxAhead, src.vecBytes
	}
	shortReads, _, _ := read(small, 0)
	longReads, _, _ := read(small, longBuf)
	// The stream is about 420 KiB: five reads or so of a full short
	// buffer, two of a long one.
	if longReads >= shortReads {
		t.Errorf("small FPDUs: %d reads with a buffer of %d bytes, %d with %d", longReads, longBuf, shortReads, mpa.ReaderBufSize)
	}
	_, ahead, direct := read(large, longBuf)
	if direct == 0 {
		t.Fatal("large FPDUs: no payload read straight into memory")
	}
	if ahead != mpa.ReaderBufSize {
		t.Errorf("large FPDUs with a buffer of %d bytes: read ahead at most %d bytes, want %d", longBuf, ahead, mpa.ReaderBufSize)
	}
	_, ahead, direct = read(sole, longBuf)
	total := 0
	for _, u := range sole {
		total += len(u)
	}
	if ahead != mpa.BigSlack {
		t.Errorf("FPDUs of DirectSoleMin or more: read ahead at most %d bytes, want %d", ahead, mpa.BigSlack)
	}
	// The read ahead fits the small array: no buffer is borrowed.
	if lent != 0 {
		t.Errorf("FPDUs of DirectSoleMin or more: %d buffers borrowed, want 0", lent)
	}
	// All but the first payload's head and what each limited read
	// brings past a header come straight.
	if copied := total - direct; copied > len(sole)*mpa.BigSlack+mpa.ReaderSmallLen {
		t.Errorf("FPDUs of DirectSoleMin or more: %d of %d payload bytes came through the buffer", copied, total)
	}
	// A large payload followed by a short one that has not all arrived
	// (the tail of a long message): the short one's rest is read limited
	// to what it needs and BigSlack more, so the large payload after it
	// goes straight too, not into the buffer with it.
	var mixed [][]byte
	total = 0
	for i, u := range sole {
		short := bytes.Repeat([]byte{byte(100 + i)}, mpa.DirectMin/2+i)
		mixed = append(mixed, u, short)
		total += len(u)
	}
	_, _, direct = read(mixed, longBuf)
	if copied := total - direct; copied > len(sole)*mpa.BigSlack+mpa.ReaderSmallLen {
		t.Errorf("FPDUs of DirectSoleMin or more, each followed by a short one: %d of %d large payload bytes came through the buffer", copied, total)
	}
}
