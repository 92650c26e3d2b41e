package rdmap

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

var rxShortSeed = flag.Int64("rxshort.seed", 0, "TestRxShortReads: the base seed (0: from the clock)")

// errDrained is what shortConn returns once the whole stream has been
// read: an engine that reads again before it has received every FPDU
// would wait on a real socket for bytes that never come.
var errDrained = errors.New("shortConn: the stream is all read (a socket would block here)")

// shortConn is a net.Conn whose reads serve a stream once, each read a
// random short one as a socket returns what has arrived: the read
// lengths follow a pattern that changes every few reads (single bytes, a
// few bytes, up to a few KiB, a cut just around the next FPDU boundary,
// in the length field, the headers or the CRC field, or large reads
// that leave whole FPDUs buffered). It has no file descriptor: the
// engine reads it through its buffer only (rxConn.ReadVec reads into
// the payload alone).
type shortConn struct {
	net.Conn // nil: only Read and SetReadDeadline are called
	ctx      context.Context
	rng      *rand.Rand
	data     []byte
	bounds   []int // stream offsets at which an FPDU starts, ascending
	bi       int   // bounds[bi] is the first boundary past off
	off      int   // data[:off] has been served (some of it may wait in the pipe)
	pat      int   // the current read pattern
	left     int   // reads before the pattern changes
	reads    int
	// The pipe of a shortFDConn (pipe[0] -1: none), and how many bytes
	// written into it have not been read yet.
	pipe    [2]int
	pending int
	rx      *rxEngine // the engine reading it (for readvFD's count)
}

const (
	patByte     = iota // 1 byte
	patFew             // 1..8 bytes
	patSmall           // 1..300 bytes
	patKiB             // 1..4096 bytes
	patBoundary        // up to a few bytes before or after an FPDU boundary
	patLarge           // 1..64 KiB
	patCount
)

// next returns the length of the next read (at least 1, at most what
// the stream has left), the read pattern's.
func (c *shortConn) next() int {
	if c.left == 0 {
		// Large reads last a few reads only, or they would carry most
		// of the stream.
		c.pat, c.left = c.rng.Intn(patCount), 1+c.rng.Intn(200)
		if c.pat == patLarge {
			c.left = 1 + c.rng.Intn(4)
		}
	}
	c.left--
	var n int
	switch c.pat {
	case patByte:
		n = 1
	case patFew:
		n = 1 + c.rng.Intn(8)
	case patSmall:
		n = 1 + c.rng.Intn(300)
	case patKiB:
		n = 1 + c.rng.Intn(4096)
	case patBoundary:
		// End the read near a boundary ahead: in the previous FPDU's
		// CRC field or pad, in the next one's length field, DDP or
		// RDMAP header, or just past them.
		for c.bi < len(c.bounds) && c.bounds[c.bi] <= c.off {
			c.bi++
		}
		b := len(c.data)
		if c.bi < len(c.bounds) {
			b = c.bounds[c.bi+c.rng.Intn(min(3, len(c.bounds)-c.bi))]
		}
		n = b - c.off + c.rng.Intn(36) - 8
	case patLarge:
		n = 1 + c.rng.Intn(64<<10)
	}
	return max(1, min(n, len(c.data)-c.off))
}

func (c *shortConn) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	c.reads++
	if c.pending > 0 {
		// What the last readv left in the pipe comes first.
		n, err := unix.Read(c.pipe[0], p[:min(len(p), c.pending)])
		if err != nil {
			return 0, err
		}
		c.pending -= n
		return n, nil
	}
	if c.off == len(c.data) {
		return 0, errDrained
	}
	n := min(c.next(), len(p))
	copy(p, c.data[c.off:c.off+n])
	c.off += n
	return n, nil
}

func (c *shortConn) SetReadDeadline(time.Time) error { return nil }

// shortFDConn is a shortConn with a file descriptor, through which the
// engine places large payloads without CRC straight into memory with
// readv (rxEngine.readvFD), the payload and the read-ahead after it in
// one call: each readv reads what one short read of the stream put into
// a pipe (less when the vector has less room; the rest is read next).
type shortFDConn struct{ *shortConn }

func (c shortFDConn) SyscallConn() (syscall.RawConn, error) { return shortRaw{c.shortConn}, nil }

// shortPipeMax bounds what shortRaw writes into its pipe at once: what
// an empty pipe takes without blocking.
const shortPipeMax = 64 << 10

// shortRaw is shortFDConn's syscall.RawConn: Read writes the next short
// read of the stream into the pipe when it is empty, then lets f readv
// it.
type shortRaw struct{ c *shortConn }

func (r shortRaw) Read(f func(fd uintptr) bool) error {
	c := r.c
	for {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if c.pending == 0 {
			if c.off == len(c.data) {
				return errDrained
			}
			n := min(c.next(), shortPipeMax)
			if _, err := unix.Write(c.pipe[1], c.data[c.off:c.off+n]); err != nil {
				return err
			}
			c.off += n
			c.pending = n
		}
		c.reads++
		if f(uintptr(c.pipe[0])) {
			// readvFD's count (the pipe never has it wait: it holds
			// bytes).
			c.pending -= c.rx.iovN
			return nil
		}
	}
}

func (shortRaw) Control(func(fd uintptr)) error    { return nil }
func (shortRaw) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }

// shortStream is a stream of valid FPDUs for one region, what it leaves
// in the region and the receive completions it must give, in order.
type shortStream struct {
	data   []byte
	bounds []int
	fpdus  int
	recvs  []RecvWR
	wcs    []WC
	mem    []byte // the region's expected contents
	writes int
	sends  int
}

const (
	shortWriteArea = 512 << 10 // Writes go to [0, shortWriteArea)
	shortRecvSlot  = 4 << 10   // each receive gets a slot this long after it
	shortRecvSlots = 32
	shortMemLen    = shortWriteArea + shortRecvSlots*shortRecvSlot
)

// buildShortStream returns a stream of about size bytes: RDMA Writes of
// 0 B .. 64 KiB to random offsets of stag, each cut into segments of one
// of several ULPDU sizes (a TCP segment's MULPDU, 4 KiB and 16 KiB of
// payload, the largest ULPDU, and odd sizes), and Sends and Sends with
// Solicited Event of 1 B .. 4 KiB, some of several segments, into
// receives of one or two SGEs posted for them.
func buildShortStream(rng *rand.Rand, mr *MR, size int, crc bool) *shortStream {
	stag := mr.STag()
	s := &shortStream{mem: make([]byte, shortMemLen)}
	pool := make([]byte, 128<<10)
	rng.Read(pool)
	payload := func(n int) []byte {
		o := rng.Intn(len(pool) - n + 1)
		return pool[o : o+n]
	}
	ulpdus := []int{mpa.MULPDU(1448, false), 4096 + ddp.UntaggedHeaderLen, 16384 + ddp.UntaggedHeaderLen, mpa.MaxULPDU, 40, 1000, 16384, 16384 + ddp.TaggedHeaderLen}
	writeSizes := []int{0, 1, 2, 3, 7, 64, 100, 1000, 4095, 4096, 4097, 4160, 16383, 16384, 16385, 32768, 65521, 65522, 65536}
	fpdu := func(h, p []byte) {
		s.bounds = append(s.bounds, len(s.data))
		s.data = mpa.AppendFPDU(s.data, h, p, crc)
		s.fpdus++
	}
	msn := uint32(1)
	for len(s.data) < size {
		ulpdu := ulpdus[rng.Intn(len(ulpdus))]
		if rng.Intn(4) != 0 {
			n := writeSizes[rng.Intn(len(writeSizes))]
			if rng.Intn(3) == 0 {
				n = 1 + rng.Intn(64<<10)
			}
			to := rng.Intn(shortWriteArea - n + 1)
			p := payload(n)
			copy(s.mem[to:], p)
			max := ulpdu - ddp.TaggedHeaderLen
			for off := 0; ; {
				k, last := ddp.NextSegment(off, n, max)
				h := ddp.AppendTagged(nil, &ddp.TaggedFields{
					Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: uint64(to + off),
				})
				fpdu(h, p[off:off+k])
				off += k
				if last {
					break
				}
			}
			s.writes++
			continue
		}
		n := 1 + rng.Intn(shortRecvSlot)
		if rng.Intn(2) == 0 {
			n = 1 + rng.Intn(300)
		}
		op, flags := wire.OpSend, WCFlags(0)
		if rng.Intn(4) == 0 {
			op, flags = wire.OpSendSE, WCSolicited
		}
		slot := shortWriteArea + (s.sends%shortRecvSlots)*shortRecvSlot
		id := uint64(1000 + s.sends)
		sgl := []SGE{mr.SGE(slot, shortRecvSlot)}
		if rng.Intn(3) == 0 {
			cut := rng.Intn(shortRecvSlot + 1)
			sgl = []SGE{mr.SGE(slot, cut), mr.SGE(slot+cut, shortRecvSlot-cut)}
		}
		s.recvs = append(s.recvs, RecvWR{ID: id, SGL: sgl})
		s.wcs = append(s.wcs, WC{ID: id, Status: WCSuccess, Op: WCRecv, Flags: flags, ByteLen: uint32(n)})
		p := payload(n)
		copy(s.mem[slot:], p)
		max := min(ulpdu, 4096) - ddp.UntaggedHeaderLen
		for off := 0; ; {
			k, last := ddp.NextSegment(off, n, max)
			h := ddp.AppendUntagged(nil, &ddp.UntaggedFields{
				Last: last, RsvdULP: wire.ControlByte(wire.Version1, op), QN: wire.QNSend, MSN: msn, MO: uint32(off),
			})
			fpdu(h, p[off:off+k])
			off += k
			if last {
				break
			}
		}
		msn++
		s.sends++
	}
	return s
}

// shortMode is how TestRxShortReads has the engine take its stream.
type shortMode struct {
	name     string
	noWhole  bool // header first only (rx.fpdu), never mpa.Reader.Whole
	buffered bool // QPConfig.BufferedRx: the CRC checked before placing
	readv    bool // large payloads without CRC placed by readv from a file descriptor
	inPlace  bool // QPConfig.CRCInPlace: with CRC too, the CRC computed over the placed bytes (CRC streams only)
}

// TestRxShortReads: a long stream of valid FPDUs (RDMA Writes of 0 B ..
// 64 KiB cut at several ULPDU sizes, Sends of one or more segments into
// posted receives), with CRC on and off, the start of it (for every
// other seed) handed over as the bytes read with the MPA handshake
// (mpa.Params.Leftover), the rest read through a connection
// whose every read is a random short one (single bytes, cuts in the
// length field, the headers and the CRC field, a few KiB, large reads
// that leave FPDUs whole in the buffer), is received as the receive
// loop takes it (rx.fpdus: whole FPDUs and runs, the header-first path,
// direct placement without CRC, and with CRC under QPConfig.CRCInPlace),
// header first only, and in BufferedRx mode: every byte lands where its
// header says, every receive completes, in order, with its length,
// every FPDU is received without a read past the end of the stream
// (which on a socket would wait for bytes that never come) and nothing
// is left buffered. A failure names its seed S: go test -run
// 'TestRxShortReads/seed=S/' -args -rxshort.seed=S repeats it (the
// stream and the reads derive from it).
func TestRxShortReads(t *testing.T) {
	base := *rxShortSeed
	if base == 0 {
		base = time.Now().UnixNano()
	}
	t.Logf("seed %d (-rxshort.seed=%d repeats this run)", base, base)
	seeds, size := 4, 3<<20
	if testing.Short() {
		seeds, size = 1, 1<<20
	}
	modes := []shortMode{
		{name: "loop"}, {name: "loop-readv", readv: true},
		{name: "header-first", noWhole: true}, {name: "header-first-readv", noWhole: true, readv: true},
		{name: "buffered", buffered: true},
		{name: "loop-inplace", inPlace: true}, {name: "loop-readv-inplace", inPlace: true, readv: true},
	}
	for i := range seeds {
		for _, crc := range []bool{false, true} {
			for _, m := range modes {
				if m.inPlace && !crc {
					continue
				}
				seed := base + int64(i)
				t.Run(fmt.Sprintf("seed=%d/crc=%v/%s", seed, crc, m.name), func(t *testing.T) {
					rxShortRun(t, seed, size, crc, m)
				})
			}
		}
	}
}

// rxShortTimeout bounds one rxShortRun: a hang fails it rather than the
// whole test binary's timeout.
const rxShortTimeout = 3 * time.Minute

func rxShortRun(t *testing.T, seed int64, size int, crc bool, m shortMode) {
	rng := rand.New(rand.NewSource(seed))
	mem := make([]byte, shortMemLen)
	qp, cq, mr := engineQP(t, 1<<14, QPConfig{MaxRecvWR: 1 << 14, BufferedRx: m.buffered, CRCInPlace: m.inPlace}, mem)
	s := buildShortStream(rng, mr, size, crc)
	if len(s.recvs) > 1<<14 {
		t.Fatalf("seed %d: %d receives", seed, len(s.recvs))
	}
	if _, err := qp.PostRecvs(s.recvs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rxShortTimeout)
	defer cancel()
	rx := &qp.rx
	conn := &shortConn{ctx: ctx, rng: rand.New(rand.NewSource(seed ^ 0x5eed)), data: s.data, bounds: s.bounds, pipe: [2]int{-1, -1}, rx: rx}
	var nc net.Conn = conn
	if m.readv {
		if err := unix.Pipe(conn.pipe[:]); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(conn.pipe[0])
		defer unix.Close(conn.pipe[1])
		nc = shortFDConn{conn}
	}
	qp.p = mpa.Params{CRC: crc}
	if seed%2 == 0 {
		// Part of the stream came with the MPA handshake (Leftover):
		// up to the first few FPDUs, cut anywhere.
		k := rng.Intn(min(len(s.data), 70000))
		qp.p.Leftover, conn.off = s.data[:k], k
	}
	rx.noWhole = m.noWhole
	rx.init(qp, nc)
	released := false
	defer func() {
		if !released {
			rx.release()
		}
	}()
	if m.readv != (rx.rawConn != nil) {
		t.Fatalf("readv %v: the engine has raw connection %v", m.readv, rx.rawConn)
	}

	type result struct {
		done int
		err  error
		wcs  []WC
	}
	res := make(chan result, 1)
	go func() {
		var r result
		wcs := make([]WC, 64)
		poll := func() {
			for {
				n := cq.Poll(wcs)
				r.wcs = append(r.wcs, wcs[:n]...)
				if n < len(wcs) {
					return
				}
			}
		}
		for r.done < s.fpdus {
			n, ti, err := rx.fpdus(s.fpdus - r.done)
			rx.dropRefs()
			r.done += n
			if err != nil {
				r.err = fmt.Errorf("after %d of %d FPDUs (stream offset %d of %d, %d reads): %w", r.done-n, s.fpdus, conn.off, len(s.data), conn.reads, err)
				break
			}
			if ti != nil {
				r.err = fmt.Errorf("FPDU %d of %d: Terminate %+v", r.done, s.fpdus, *ti)
				break
			}
			poll()
		}
		rx.flushRecvs()
		poll()
		res <- r
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		// The engine sees the context at its next read; if it does
		// not read, it spins or is blocked: say where, and stop the
		// binary (the engine is still running).
		select {
		case r = <-res:
		case <-time.After(10 * time.Second):
			released = true // the engine is not ours to release
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("seed %d: the receive engine hangs:\n%s", seed, buf[:runtime.Stack(buf, true)]))
		}
	}
	partial, in, held := rx.rd.Partial(), rx.rd.InFPDU(), len(rx.rd.Buffered())
	direct := qp.stats.rxDirect.Load() + rx.counts.direct // published, and since
	rx.release()
	released = true
	where := fmt.Sprintf("seed %d (%d FPDUs, %d Writes, %d Sends, %d bytes, %d reads)", seed, s.fpdus, s.writes, s.sends, len(s.data), conn.reads)
	if r.err != nil {
		t.Fatalf("%s: %v", where, r.err)
	}
	if conn.off != len(s.data) || conn.pending != 0 || partial || in {
		t.Fatalf("%s: every FPDU received with %d of %d bytes read (%d in the pipe), the reader holding %d (in an FPDU: %v)",
			where, conn.off, len(s.data), conn.pending, held, in)
	}
	if len(r.wcs) != len(s.wcs) {
		t.Fatalf("%s: %d receive completions, want %d", where, len(r.wcs), len(s.wcs))
	}
	for i, wc := range r.wcs {
		want := s.wcs[i]
		want.QPN = wc.QPN
		if wc != want {
			t.Fatalf("%s: completion %d is %+v, want %+v", where, i, wc, want)
		}
	}
	if !bytes.Equal(mem, s.mem) {
		i := 0
		for mem[i] == s.mem[i] {
			i++
		}
		t.Fatalf("%s: the region differs from byte %d on (Writes below %d, receives from there)", where, i, shortWriteArea)
	}
	if crc && !m.buffered && (direct != 0) != m.inPlace {
		t.Errorf("%s: %d bytes placed straight from the connection with CRC, in place %v", where, direct, m.inPlace)
	}
	t.Logf("%s: %d bytes placed straight", where, direct)
}
