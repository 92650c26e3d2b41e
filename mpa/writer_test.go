package mpa_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

// writeFPDU frames one FPDU into w, flushing to out first when the batch
// is full, with the payload given in pieces.
func writeFPDU(t testing.TB, w *mpa.Writer, out io.Writer, hdr []byte, pieces [][]byte) {
	t.Helper()
	n := len(hdr)
	for _, p := range pieces {
		n += len(p)
	}
	if !w.Room(n, len(pieces)) {
		if _, err := w.Flush(out); err != nil {
			t.Fatal(err)
		}
		if !w.Room(n, len(pieces)) {
			t.Fatalf("no room for a %d-byte FPDU in an empty batch", n)
		}
	}
	if len(pieces) == 1 && len(pieces[0])%2 == 0 {
		// Half the one-piece FPDUs go through FPDU, which must frame
		// them exactly as Begin, Payload and End do.
		w.FPDU(hdr, pieces[0])
		return
	}
	w.Begin(hdr, n)
	for _, p := range pieces {
		w.Payload(p)
	}
	w.End()
}

// split cuts p into pieces at random points.
func split(r *rand.Rand, p []byte) [][]byte {
	var pieces [][]byte
	for rest := p; len(rest) > 0; {
		k := 1 + r.IntN(len(rest))
		pieces = append(pieces, rest[:k])
		rest = rest[k:]
	}
	return pieces
}

// TestWriterMatchesReference checks the Writer, for every combination of
// CRC and markers, payloads split into pieces, and stream offsets that
// put markers everywhere in an FPDU, against the byte-by-byte marker
// reference (naiveInsert over AppendFPDU) and against Framer, and reads
// the stream back with the Deframer.
func TestWriterMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			for _, start := range []uint64{0, 4, 256, 508} {
				if !markers && start != 0 {
					continue
				}
				var w mpa.Writer
				w.Init(mpa.WriterConfig{CRC: crc, Markers: markers, StreamOffset: start, MaxHeader: 82})
				fr := mpa.Framer{CRC: crc, Markers: markers, Pos: start}
				var got, want, framed bytes.Buffer
				pos := start
				const count = 300
				for i := range count {
					hdr := randBytes(r, 14+r.IntN(60))
					n := r.IntN(3000)
					if i%7 == 0 {
						n = 0
					}
					payload := randBytes(r, n)
					writeFPDU(t, &w, &got, hdr, split(r, payload))
					plain := mpa.AppendFPDU(nil, hdr, payload, false)
					ref := plain
					if markers {
						ref = naiveInsert(plain, pos, crc)
					} else if crc {
						ref = mpa.AppendFPDU(nil, hdr, payload, true)
					}
					want.Write(ref)
					pos += uint64(len(ref))
					framed.Write(fr.AppendFPDU(nil, hdr, payload))
				}
				if _, err := w.Flush(&got); err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("crc %v markers %v start %d", crc, markers, start)
				if !w.Empty() || w.FPDUs() != 0 {
					t.Fatalf("%s: batch not empty after Flush", name)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Fatalf("%s: Writer output differs from the reference (%d vs %d bytes)", name, got.Len(), want.Len())
				}
				if !bytes.Equal(got.Bytes(), framed.Bytes()) {
					t.Fatalf("%s: Writer output differs from Framer's", name)
				}
				if w.Pos() != pos || fr.Pos != pos {
					t.Fatalf("%s: Pos %d, Framer %d, want %d", name, w.Pos(), fr.Pos, pos)
				}
				df := mpa.NewDeframer(bytes.NewReader(got.Bytes()), mpa.DeframerConfig{CRC: crc, Markers: markers, StreamOffset: start})
				for i := range count {
					if _, err := df.Next(); err != nil {
						t.Fatalf("%s: deframer, FPDU %d: %v", name, i, err)
					}
				}
			}
		}
	}
}

// TestWriterCRCOverCopy: with CRC the batch holds a copy of the payload
// and the CRC covers that copy, so a payload that changes after Payload
// returned (memory a remote Write or the application changes while the
// batch waits for its write) is sent as it was, with a good CRC. Without
// CRC the batch refers to the payload itself (zero copy): the change is
// sent, as verbs allow.
func TestWriterCRCOverCopy(t *testing.T) {
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			var w mpa.Writer
			w.Init(mpa.WriterConfig{CRC: crc, Markers: markers})
			hdr := []byte("header: 14 byt")
			mem := bytes.Repeat([]byte{0xaa}, 3000)
			w.Begin(hdr, len(hdr)+len(mem))
			w.Payload(mem[:1000])
			w.Payload(mem[1000:])
			w.End()
			for i := range mem {
				mem[i] = 0x55
			}
			var out bytes.Buffer
			if _, err := w.Flush(&out); err != nil {
				t.Fatal(err)
			}
			f, err := mpa.NewDeframer(&out, mpa.DeframerConfig{CRC: crc, Markers: markers}).Next()
			if err != nil {
				t.Fatalf("crc %v markers %v: %v", crc, markers, err)
			}
			sent := f.ULPDU[len(hdr):]
			want := byte(0x55)
			if crc {
				want = 0xaa
			}
			if !bytes.Equal(sent, bytes.Repeat([]byte{want}, len(mem))) {
				t.Fatalf("crc %v markers %v: payload sent as %x..., want %#x", crc, markers, sent[:8], want)
			}
		}
	}
}

// countingPool is a BufferPool that records what it lends.
type countingPool struct {
	out  map[*[]byte]bool
	gets int
}

func (p *countingPool) Get() *[]byte {
	b := make([]byte, mpa.WriterBufLen)
	p.out[&b] = true
	p.gets++
	return &b
}

func (p *countingPool) Put(b *[]byte) {
	if !p.out[b] {
		panic("Put of a buffer the pool did not lend")
	}
	delete(p.out, b)
}

// batchCheck is the io.Writer of TestWriterCopyBufferBound: every batch
// must arrive as one write of a buffer the pool lent, never a
// reallocation by append.
type batchCheck struct {
	t      *testing.T
	pool   *countingPool
	out    bytes.Buffer
	writes int
}

func (c *batchCheck) Write(b []byte) (int, error) {
	lent := false
	for buf := range c.pool.out {
		lent = lent || (cap(b) == cap(*buf) && &b[:1][0] == &(*buf)[0])
	}
	if !lent {
		c.t.Fatalf("batch of %d bytes written from a buffer the pool did not lend", len(b))
	}
	c.writes++
	return c.out.Write(b)
}

// TestWriterCopyBufferBound fills copy-mode batches with the largest
// FPDUs, with and without markers, and checks that Room keeps every
// batch inside its pooled buffer, that the buffer goes back to the pool
// with each flush (an idle Writer holds none), and that the stream
// deframes.
func TestWriterCopyBufferBound(t *testing.T) {
	payload := make([]byte, mpa.MaxULPDU-14)
	for i := range payload {
		payload[i] = byte(i)
	}
	hdr := make([]byte, 14)
	for _, markers := range []bool{false, true} {
		pool := &countingPool{out: map[*[]byte]bool{}}
		var w mpa.Writer
		w.Init(mpa.WriterConfig{CRC: true, Markers: markers, Buffers: pool})
		check := &batchCheck{t: t, pool: pool}
		const n = 40
		for range n {
			writeFPDU(t, &w, check, hdr, [][]byte{payload})
			if len(pool.out) != 1 {
				t.Fatalf("markers %v: %d buffers lent while a batch is filled", markers, len(pool.out))
			}
		}
		if _, err := w.Flush(check); err != nil {
			t.Fatal(err)
		}
		if len(pool.out) != 0 {
			t.Fatalf("markers %v: %d buffers kept after the last flush", markers, len(pool.out))
		}
		if check.writes < 2 || pool.gets != check.writes {
			t.Fatalf("markers %v: %d writes, %d buffers lent (want one per batch, and more than one batch)", markers, check.writes, pool.gets)
		}
		df := mpa.NewDeframer(&check.out, mpa.DeframerConfig{CRC: true, Markers: markers})
		for i := range n {
			if _, err := df.Next(); err != nil {
				t.Fatalf("markers %v: FPDU %d: %v", markers, i, err)
			}
		}
	}
}

// TestWriterAllocs: filling and flushing a batch allocates nothing once
// the Writer has its buffers.
func TestWriterAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random: the borrowed scratch and iovecs are then allocated again")
	}
	hdr := make([]byte, 18)
	payload := make([]byte, 1000)
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			var w mpa.Writer
			w.Init(mpa.WriterConfig{CRC: crc, Markers: markers})
			if a := testing.AllocsPerRun(100, func() {
				for range 8 {
					writeFPDU(t, &w, io.Discard, hdr, [][]byte{payload[:300], payload[300:]})
					writeFPDU(t, &w, io.Discard, hdr, [][]byte{payload[:64]})
				}
				if _, err := w.Flush(io.Discard); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("crc %v markers %v: %v allocs per batch", crc, markers, a)
			}
		}
	}
}

// BenchmarkWriter frames 1 MiB messages in 32 KiB FPDUs into io.Discard:
// without CRC (zero copy, iovecs), with CRC (copy mode: copy and CRC into
// the batch buffer), and, for reference, the CRC alone over the same
// bytes (what a zero-copy CRC would cost, less its iovec handling).
func BenchmarkWriter(b *testing.B) {
	const msg, seg = 1 << 20, 32 << 10
	src := make([]byte, msg)
	for i := range src {
		src[i] = byte(i * 7)
	}
	hdr := make([]byte, 14)
	for _, crc := range []bool{false, true} {
		b.Run(fmt.Sprintf("crc=%v", crc), func(b *testing.B) {
			var w mpa.Writer
			w.Init(mpa.WriterConfig{CRC: crc})
			b.SetBytes(msg)
			b.ReportAllocs()
			for b.Loop() {
				for off := 0; off < msg; off += seg {
					if !w.Room(len(hdr)+seg, 1) {
						if _, err := w.Flush(io.Discard); err != nil {
							b.Fatal(err)
						}
					}
					w.Begin(hdr, len(hdr)+seg)
					w.Payload(src[off : off+seg])
					w.End()
				}
				if _, err := w.Flush(io.Discard); err != nil {
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

// iovecLog is an io.Writer that keeps every slice written to it:
// net.Buffers.WriteTo, given a writer that is not a connection, writes
// the batch one iovec at a time, so the slices are the iovecs.
type iovecLog struct {
	iovs [][]byte
	out  bytes.Buffer
}

func (l *iovecLog) Write(b []byte) (int, error) {
	l.iovs = append(l.iovs, b)
	return l.out.Write(b)
}

// TestWriterJoinsSmallFPDUs: without CRC and markers, payload pieces of
// up to WriterCopyLen bytes are copied into scratch and a batch of small
// FPDUs leaves as one iovec; a longer piece is still sent from its own
// memory (zero copy) between two scratch iovecs; a piece copied before
// its memory changed is sent as it was. With a small arena the copies
// stop where the arena is short (the pieces are then referred to), and
// the bytes still equal AppendFPDU's.
func TestWriterJoinsSmallFPDUs(t *testing.T) {
	var w mpa.Writer
	w.Init(mpa.WriterConfig{MaxHeader: 28})
	hdr := make([]byte, 18)
	small := bytes.Repeat([]byte{0xab}, mpa.WriterCopyLen)
	var want []byte
	for i := range 100 {
		hdr[0] = byte(i)
		p := small[:i*mpa.WriterCopyLen/99]
		writeFPDU(t, &w, io.Discard, hdr, [][]byte{p[:len(p)/2], p[len(p)/2:]})
		want = mpa.AppendFPDU(want, hdr, p, false)
	}
	var log iovecLog
	if _, err := w.Flush(&log); err != nil {
		t.Fatal(err)
	}
	if len(log.iovs) != 1 {
		t.Errorf("100 small FPDUs in %d iovecs, want 1", len(log.iovs))
	}

	large := bytes.Repeat([]byte{0xcd}, mpa.WriterCopyLen+1)
	writeFPDU(t, &w, io.Discard, hdr, [][]byte{small[:1]})
	writeFPDU(t, &w, io.Discard, hdr, [][]byte{large})
	writeFPDU(t, &w, io.Discard, hdr, [][]byte{small[:64]})
	want = mpa.AppendFPDU(want, hdr, small[:1], false)
	want = mpa.AppendFPDU(want, hdr, large, false)
	want = mpa.AppendFPDU(want, hdr, small[:64], false)
	small[0] = 0 // copied: changing it now changes nothing sent
	if _, err := w.Flush(&log); err != nil {
		t.Fatal(err)
	}
	if n := len(log.iovs) - 1; n != 3 || &log.iovs[2][0] != &large[0] {
		t.Errorf("small, %d-byte, small FPDU: %d iovecs, the second aliasing the payload: %v; want 3, aliased",
			len(large), n, n > 1 && &log.iovs[2][0] == &large[0])
	}
	if !bytes.Equal(log.out.Bytes(), want) {
		t.Fatalf("Writer output differs from AppendFPDU's (%d vs %d bytes)", log.out.Len(), len(want))
	}

	small[0] = 0xab
	w.Init(mpa.WriterConfig{MaxHeader: 28, Scratch: make([]byte, 0, 700)})
	log, want = iovecLog{}, nil
	for i := range 50 {
		p := small[:(i*37)%mpa.WriterCopyLen]
		writeFPDU(t, &w, &log, hdr, [][]byte{p, p[:i%3]})
		want = mpa.AppendFPDU(want, hdr, append(p[:len(p):len(p)], p[:i%3]...), false)
	}
	if _, err := w.Flush(&log); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(log.out.Bytes(), want) {
		t.Fatalf("700-byte arena: Writer output differs from AppendFPDU's (%d vs %d bytes)", log.out.Len(), len(want))
	}
}

// BenchmarkWriterSmall frames FPDUs of small payloads without CRC and
// writes them, a batch of 64 at a time, with writev to a TCP connection
// over loopback (drained by another goroutine), with payload pieces up
// to each size copied into the arena (copy=N) or none (copy=0): the
// sweep that chose WriterCopyLen. ns/op is per FPDU; cpu-ns/op is the
// CPU time of the whole process (writer and drain) per FPDU, the figure
// that counts on a busy machine.
func BenchmarkWriterSmall(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	dial, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer dial.Close()
	peer, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, peer)
	}()
	defer func() {
		dial.Close()
		<-drained
		peer.Close()
	}()
	src := make([]byte, 4096)
	hdr := make([]byte, 18)
	const batch = 64
	for _, size := range []int{64, 128, 256, 512, 1024, 1424, 2048} {
		for _, copyLen := range []int{0, size} {
			b.Run(fmt.Sprintf("size=%d/copy=%d", size, copyLen), func(b *testing.B) {
				defer mpa.SetWriterCopyLen(copyLen)()
				var w mpa.Writer
				w.Init(mpa.WriterConfig{MaxHeader: 28})
				b.SetBytes(int64(size))
				b.ReportAllocs()
				i := 0
				cpu := testutil.CPUTime()
				for b.Loop() {
					writeFPDU(b, &w, dial, hdr, [][]byte{src[:size]})
					if i++; i%batch == 0 {
						if _, err := w.Flush(dial); err != nil {
							b.Fatal(err)
						}
					}
				}
				if _, err := w.Flush(dial); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(testutil.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestWriterFPDU: FPDU frames exactly as Begin, Payload and End, with and
// without CRC and markers; without either, small FPDUs share one iovec
// and their payload is copied (a later change is not sent).
func TestWriterFPDU(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			var w mpa.Writer
			w.Init(mpa.WriterConfig{CRC: crc, Markers: markers, MaxHeader: 28})
			var want []byte
			var log iovecLog
			fr := mpa.Framer{CRC: crc, Markers: markers}
			src := randBytes(r, 2*mpa.WriterCopyLen)
			for i := range 200 {
				hdr := randBytes(r, 14+i%15)
				p := src[:r.IntN(len(src))]
				if i%3 == 0 {
					p = src[:i%80]
				}
				if !w.Room(len(hdr)+len(p), 1) {
					if _, err := w.Flush(&log); err != nil {
						t.Fatal(err)
					}
				}
				w.FPDU(hdr, p)
				want = fr.AppendFPDU(want, hdr, p)
			}
			if _, err := w.Flush(&log); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(log.out.Bytes(), want) {
				t.Fatalf("crc %v markers %v: FPDU output differs from Framer's (%d vs %d bytes)", crc, markers, log.out.Len(), len(want))
			}
		}
	}
	var w mpa.Writer
	w.Init(mpa.WriterConfig{MaxHeader: 28})
	hdr, p := make([]byte, 18), bytes.Repeat([]byte{7}, 64)
	var want []byte
	for range 100 {
		if !w.Room(len(hdr)+len(p), 1) {
			t.Fatal("no room for 100 small FPDUs")
		}
		w.FPDU(hdr, p)
		want = mpa.AppendFPDU(want, hdr, p, false)
	}
	p[0] = 0
	var log iovecLog
	if _, err := w.Flush(&log); err != nil {
		t.Fatal(err)
	}
	if len(log.iovs) != 1 || !bytes.Equal(log.out.Bytes(), want) {
		t.Fatalf("100 small FPDUs: %d iovecs, output as framed before the change: %v; want 1, true", len(log.iovs), bytes.Equal(log.out.Bytes(), want))
	}
}

// TestWriterAddFPDU: AddFPDU frames exactly as Framer, with and without
// CRC and markers, for payloads on both sides of the small-FPDU limits;
// when it reports false the batch is unchanged (what the flush then
// writes is exactly the FPDUs added before), and an empty batch takes the
// FPDU. Without CRC and markers a batch of small FPDUs fills the arena
// and leaves as one iovec.
func TestWriterAddFPDU(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			var w mpa.Writer
			w.Init(mpa.WriterConfig{CRC: crc, Markers: markers, MaxHeader: 28})
			var want, pending []byte
			var log iovecLog
			fr := mpa.Framer{CRC: crc, Markers: markers}
			src := randBytes(r, 3*mpa.WriterCopyLen)
			refused := 0
			for i := range 3000 {
				hdr := randBytes(r, 14+i%15)
				p := src[:r.IntN(80)]
				if i%5 == 0 {
					p = src[:r.IntN(len(src))]
				}
				if !w.AddFPDU(hdr, p) {
					refused++
					before := log.out.Len()
					if _, err := w.Flush(&log); err != nil {
						t.Fatal(err)
					}
					if got := log.out.Bytes()[before:]; !bytes.Equal(got, pending) {
						t.Fatalf("crc %v markers %v: a refused AddFPDU changed the batch (%d bytes written, want %d)", crc, markers, len(got), len(pending))
					}
					pending = pending[:0]
					if !w.AddFPDU(hdr, p) {
						t.Fatalf("crc %v markers %v: an empty batch refused a %d-byte ULPDU", crc, markers, len(hdr)+len(p))
					}
				}
				next := fr.AppendFPDU(want, hdr, p)
				pending = append(pending, next[len(want):]...)
				want = next
			}
			if _, err := w.Flush(&log); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(log.out.Bytes(), want) {
				t.Fatalf("crc %v markers %v: AddFPDU output differs from Framer's (%d vs %d bytes)", crc, markers, log.out.Len(), len(want))
			}
			if refused == 0 {
				t.Fatalf("crc %v markers %v: no batch filled up", crc, markers)
			}
		}
	}
	// Without CRC a batch takes small FPDUs up to WriterSmallMaxBytes
	// (each 2+14+64+4 = 84 bytes, no pad), all in one iovec, and larger
	// ones after that, up to WriterMaxBytes.
	var w mpa.Writer
	w.Init(mpa.WriterConfig{MaxHeader: 82})
	hdr, p := make([]byte, 14), bytes.Repeat([]byte{9}, 64)
	n := 0
	for w.AddFPDU(hdr, p) {
		n++
	}
	if want := mpa.WriterSmallMaxBytes / 84; n != want {
		t.Fatalf("%d small FPDUs in one batch, want %d (WriterSmallMaxBytes)", n, want)
	}
	big := bytes.Repeat([]byte{7}, 4<<10) // longer than any run takes
	if !w.AddFPDU(hdr, big) {
		t.Fatalf("a batch of small FPDUs refused a %d-byte FPDU", len(big))
	}
	if w.AddFPDU(hdr, p) {
		t.Fatal("a small FPDU went in past WriterSmallMaxBytes")
	}
	var log iovecLog
	if _, err := w.Flush(&log); err != nil {
		t.Fatal(err)
	}
	if want := 84*n + mpa.FPDULen(14+len(big)); log.out.Len() != want {
		t.Fatalf("%d bytes written, want %d", log.out.Len(), want)
	}
	if len(log.iovs[0]) < 84*n {
		// The big FPDU's length field and header may join the iovec.
		t.Fatalf("%d small FPDUs: first iovec of %d bytes, want them all in it (%d)", n, len(log.iovs[0]), 84*n)
	}
}

// TestWriterRun: FPDUs laid out by a Run, their ULPDUs filled after
// Next, leave exactly as Framer frames them, with and without CRC (the
// CRC computed by EndRun over the filled bytes), interleaved with FPDUs
// added otherwise; Next refuses a ULPDU too long for a run and, once the
// batch is full, any; with markers a run takes nothing.
func TestWriterRun(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, crc := range []bool{false, true} {
		var w mpa.Writer
		w.Init(mpa.WriterConfig{CRC: crc, MaxHeader: 28})
		var want []byte
		var log iovecLog
		fr := mpa.Framer{CRC: crc}
		src := randBytes(r, 600)
		fpdus, flushes := 0, 0
		total := 3000
		if crc {
			total = 12000 // a batch buffer of WriterMaxBytes
		}
		for i := 0; i < total; {
			asked := min(1+i%40, total-i)
			run := w.BeginRun(asked)
			for range asked {
				hdr := randBytes(r, 14+i%15)
				p := src[:r.IntN(100)]
				b := run.Next(len(hdr) + len(p))
				if b == nil {
					break
				}
				// The ULPDU is the caller's to fill, every byte.
				copy(b, hdr)
				copy(b[len(hdr):], p)
				want = fr.AppendFPDU(want, hdr, p)
				i++
			}
			n := run.FPDUs()
			w.EndRun(&run)
			fpdus += n
			if run.FPDUs() != 0 {
				t.Fatal("EndRun left the run non-empty")
			}
			full := n < asked
			if i%7 == 0 {
				hdr, p := randBytes(r, 18), src[:r.IntN(len(src))]
				if w.AddFPDU(hdr, p) {
					want = fr.AppendFPDU(want, hdr, p)
					fpdus++
				} else {
					full = true
				}
			}
			if w.FPDUs() != fpdus {
				t.Fatalf("crc %v: the batch has %d FPDUs, want %d", crc, w.FPDUs(), fpdus)
			}
			if full {
				if _, err := w.Flush(&log); err != nil {
					t.Fatal(err)
				}
				fpdus = 0
				flushes++
			}
		}
		if _, err := w.Flush(&log); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(log.out.Bytes(), want) {
			t.Fatalf("crc %v: Run output differs from Framer's (%d vs %d bytes)", crc, log.out.Len(), len(want))
		}
		if flushes == 0 {
			t.Fatalf("crc %v: no batch filled up", crc)
		}
	}
	var w mpa.Writer
	w.Init(mpa.WriterConfig{MaxHeader: 18})
	run := w.BeginRun(1)
	if run.Next(18+mpa.WriterCopyLen+1) != nil {
		t.Fatal("a run took a payload longer than WriterCopyLen without CRC")
	}
	w.EndRun(&run)
	w.Init(mpa.WriterConfig{Markers: true})
	run = w.BeginRun(1)
	if run.Next(20) != nil {
		t.Fatal("a run took an FPDU with markers")
	}
	w.EndRun(&run)
}
