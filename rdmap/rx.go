package rdmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/internal/bufpool"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// The receive engine (one goroutine per QP). It reads FPDUs with an
// mpa.Reader, header first, and keeps RDMAP's and DDP's semantics only:
//
//	socket ──> mpa.Reader: ULPDU_Length, DDP header (+ RDMAP header)
//	             │ begin: validate (STag, PD, rights, bounds / QN, MSN, MO,
//	             │        a posted receive and its length), plan placement
//	             v
//	socket ──> Reader.Place into target memory, each write fenced by
//	             │          rxPlace (enterPlace .. leavePlace): straight
//	             │          from the socket (readv, rxConn.ReadVec) without
//	             │          CRC, through the reader's buffer with CRC (the
//	             │          CRC computed there), straight again with
//	             │          QPConfig.CRCInPlace (the CRC over the target)
//	             v
//	           Reader.Trailer: pad + CRC ──> end: commit (completions,
//	                                  MSNs, IRQ, invalidation, atomics)
//
// Placement before validation of the whole FPDU: RFC 5041 separates
// Placement (putting a segment's payload where its header says) from
// Delivery (telling the ULP a message is complete), lets a Data Sink
// place each segment as it arrives, and leaves a failed message
// undelivered with the bytes it placed undefined. Linux siw, too, places
// payload into the target before it has checked the CRC. siw_rx_umem
// computes the CRC over the socket buffer's bytes for a user QP and over
// the placed bytes for a kernel one; gosiw's default is the former (the
// bytes as they arrived, through the reader's buffer, so that memory
// written meanwhile by others cannot fail it: TestCRCChecksReceivedBytes),
// QPConfig.CRCInPlace the latter. What must not happen before
// validation is placement outside what the STag grants: every header
// check (STag, PD, access, bounds; QN, MSN, MO, receive buffer and its
// length) runs before the first payload byte is read, so a segment never
// lands outside the validated range. Delivery (completions, MSN advance,
// Read Request queueing, invalidation, atomics) waits for the trailer: a
// CRC error ends the connection with a Terminate and no completion for
// the message. The remaining risk is a header corrupted in transit that
// still names valid, granted memory: its payload is misplaced within
// memory the peer may write anyway, and the CRC error that follows fails
// the connection. A Data Sink that must never see such bytes can set
// QPConfig.BufferedRx, which checks the CRC before placing.
//
// Header first, as Linux siw checks: the DDP header, with the RDMAP control byte in
// it, is checked as soon as its bytes are in, before the rest of the
// ULPDU is awaited. Without CRC a failed check is answered at once with
// its Terminate (as siw does) and the rest of the stream is drained.
// With CRC, our reading of RFC 5044 (the CRC covers the whole FPDU, and
// an FPDU whose CRC fails is an MPA error, not a ULPDU to hand to DDP)
// and of RFC 5041 (only placement may precede validation; delivery may
// not) is that nothing is acted on, Terminate included, before the CRC
// that covers the header has checked: the engine reads (without placing)
// the at most 64 KiB left of the FPDU, and a bad CRC is what gets
// reported (bad-crc-hides-bad-stag in hostile_test.go). In both cases no
// state waits without an end: a partial FPDU that makes no progress for
// QPConfig.RxStallTimeout ends the QP with the LLP Terminate (rxio.go).
//
// Memory fences: every write into registered memory (placement from the
// socket or the buffer, atomics) happens between enterPlace and
// leavePlace, which publish the region and recheck its STag word; an
// invalidation waits for them (MR.fence, mr.go), so once Deregister or
// Invalidate has returned no byte lands there. A segment cut that way
// gets cutTerm's Terminate.
//
// An FPDU that is already all in the reader's buffer (without markers)
// is taken in one step instead (mpa.Reader.Whole, rxEngine.whole): its
// CRC, when in use, is checked over the buffered bytes first, so nothing
// of it is acted on before (as in Buffered mode); then the same header
// checks in the same order, and its payload is copied from the buffer,
// each copy fenced as Place fences it. When nothing is buffered the
// engine makes the read the header-first path would make first
// (mpa.Reader.Fill), so that the small FPDU one read brings, the
// latency-bound stream's, is taken whole too; a large payload still
// arrives as it would (only its first bytes come with that read) and
// goes straight into memory. The FPDUs buffered whole after it are taken
// in one loop (wholeRun): runs of small Writes and Sends into one region
// are checked by writeRun and sendRun, the region entered once per run,
// and once one is accepted the ones after it go through a tight loop of
// the same checks (writes, sends) until one is not (and an FPDU taken
// alone is tried as a run of one: runOne).
//
// With markers (or QPConfig.BufferedRx) the reader runs in its Buffered
// mode: the header is still checked as soon as it is in (and a bad one
// answered at once without CRC), but the payload is placed only once the
// whole FPDU is in and its CRC checked, copied from the reader's buffer.

const (
	// hdrCopy is how much of an FPDU's start the engine keeps for the
	// Terminate it may have to send.
	hdrCopy = mpa.LengthFieldLen + maxCtrlHdr
)

// rxPool lends the receive engines' readers their buffers while bytes
// move (mpa.ReaderConfig.Buffers), of the length a Reader needs
// (mpa.ReaderBufSize, 96 KiB).
//
// Longer buffers, so that a stream of small FPDUs costs fewer reads
// (a busy 64-byte stream's reads filled 84-91 KiB of the 96), were
// measured on 2026-12-07 and dropped. With 256 KiB (the Reader's direct
// reads still taking at most ReaderBufSize ahead), 64-byte Sends ran
// 2.7% faster at the median of 14 pairs of runs (gosiw's side alone),
// at 3.2% less CPU; but four QPs' 1 MiB Writes, whose reads of a next
// header then also took up to 256 KiB, copied 76-78% of their payload
// out of the buffer instead of 74-75% and gained nothing (4.2% faster,
// then 1.4% slower, at the medians of two sets of 12 pairs); 512 KiB did
// no better than 256 for the Sends. Not worth a busy QP's receive buffer
// at 2.7 times the memory.
var rxPool = bufpool.New(mpa.ReaderBufSize)

// wcsPool holds the receive engines' arrays of gathered completions
// (rxEngine.wcs), which an engine takes when more gather than its own
// rxInlineWCs slots hold and gives back when it settles with none
// gathered (before it reads the socket): an idle QP holds none.
var wcsPool = sync.Pool{New: func() any { return new([rxBatch]WC) }}

// rxEngine is the receive engine's state, owned by the receive goroutine
// but for the atomics the send goroutine and fences use (ended,
// selfClosed, placing, shutdownAt).
type rxEngine struct {
	qp   *QP
	conn net.Conn
	crc  bool // CRC32c negotiated for this direction
	// noWhole (tests: SetRxNoWhole, before the QP starts) reads every
	// FPDU header first, never with mpa.Reader.Whole.
	noWhole bool

	// Reading (rxio.go): the FPDU reader, which borrows its buffer from
	// rxPool while bytes move through it, and the raw readv path it
	// places large payloads through.
	rd      *mpa.Reader
	rawConn syscall.RawConn    // nil: the connection has no file descriptor
	iov     [2][]byte          // readvFD's vector: payload, then read-ahead
	iovN    int                // readvFD's result
	iovErr  error              //
	readvFn func(uintptr) bool // readvFD, bound once

	// Deadlines (rxio.go).
	stallTimeout time.Duration // QPConfig.RxStallTimeout (0: off)
	progressAt   int64         // monoNow when the engine began to wait for the rest of a partial FPDU (stamp)
	moved        bool          // a read returned data since the last stamp
	stallArmed   bool          // the stall deadline is set
	draining     bool          // reading only to drop what still comes
	// shutdownAt is the read deadline the send engine set when it shut
	// its side down (Unix ns; 0: none).
	shutdownAt atomic.Int64

	// Who holds the engine (rxpoll.go: rxGoroutine unless PollRx), and
	// the request to give it back; a PollRx QP's idle timer; run,
	// runDriven and qp.rxIdle, bound once.
	owner     atomic.Int32
	yield     atomic.Bool
	idle      *time.Timer
	idleArmed atomic.Bool  // idle is pending (rxIdle)
	freeSince atomic.Int64 // when the engine was last released (monoNow)
	runFn     func() error
	drivenFn  func() error
	idleFn    func()

	// runStep, when set (tests, before the engine runs), is called before
	// each FPDU of a run (wholeRun) with how many the run has received.
	runStep func(n int)

	ended      atomic.Bool // the receive goroutine has stopped reading
	selfClosed atomic.Bool // the send engine closed the connection itself
	peerSpoke  bool        // the first FPDU (or part of one) arrived: rxFirst closed
	// placing is the region the engine last placed into (nil before the
	// first placement and after each message), for fences to find whom
	// to poke (MR.fence): a poke of an engine not inside a placement only
	// makes its read retry. It stays set between the placements of one
	// message, so that entering one costs no atomic store. inPlace says
	// whether the engine is inside a placement now (receive goroutine
	// only: guardRx leaves it after a fault).
	placing atomic.Pointer[MR]
	inPlace bool
	// settled says that settle has nothing to do: set by rxDrive as it
	// starts a drive (the last holder's loop settled as it stopped, and
	// nothing changes the engine's state while it is free), cleared by
	// the drive's first read, which skips settle, or, when the drive's
	// first FPDU needs no read, once the reader has returned it, before
	// the engine acts on it (fpdu).
	settled bool
	// counts are the receive counters not yet added to qp.stats: the
	// engine publishes them before each read of the socket and when a
	// message other than a Write (or a control FPDU) is committed,
	// before its completion, not per FPDU.
	counts rxCounts
	// wcs[:nwcs] are receive completions not yet pushed into qp.rcq,
	// oldest first (pushRecv): they go in under one lock of the CQ, with
	// one wake-up, when rxBatch have gathered, before the engine's next
	// read of the socket, before any other completion it generates, and
	// when it stops (flushRecvs). wcs is wcsInline until more gather
	// in one read than it holds, then the whole of wcsPool's array
	// (pooledWCs; nextWC takes it, settle gives it back): a read that
	// completes one receive, the latency-bound exchange's, takes
	// nothing from the pool.
	wcs       []WC
	nwcs      int
	wcsInline [rxInlineWCs]WC
	// place is the placement in progress: the Placer the reader calls,
	// and what readvFD checks before each system call.
	place rxPlace
	// err is the receive direction's first fatal error (sticky): the
	// Terminate it detected, or why reading stopped.
	err error

	cur     rxFPDU   // the FPDU being received
	plan    rxPlan   // where its payload goes
	termBuf termInfo // the Terminate it may get (term, termFor)

	// DDP's placement state (package ddp decides what is valid): the
	// expected MSN per untagged queue and the untagged message in
	// progress; the tagged message in progress.
	untagged ddp.UntaggedSink
	tagged   ddp.TaggedSink

	// The QP's own RQ as the engine takes from it (QP.takeRecv): the
	// entries below rqTaken are taken, those below rqPopped removed from
	// the ring, those below rqAvail seen posted.
	rqTaken, rqPopped, rqAvail uint64

	// The receive (QN 0) the untagged message in progress fills.
	recv       rxRecv
	recvSGE    int    // the SGE the next byte goes to
	recvSGEOff uint64 // and its offset in it
	recvStatus WCStatus
	recvOp     wire.Opcode
	recvInv    STag // Send with Invalidate: the STag every segment names
	rtrSwallow bool // the current Send is the P2P RTR: consumed, not delivered
	rtrSeen    bool

	// The tagged message in progress.
	taggedOp wire.Opcode
	writeMR  *MR // a Write's target, referenced while the message lasts
	// held is a reference kept from an FPDU whose placement is over, for
	// the next one into the same region (takeRef, dropRef).
	held *MR
	// The region the last Write message found and its valid STag word
	// then (lookupWrite).
	lastMR   *MR
	lastWord uint64
	readResp *orqEntry // a Read Response's Read (the ORQ head)
}

// rxCounts are receive counters kept by the receive goroutine between
// two publications (rxEngine.publish).
type rxCounts struct {
	fpdus, bytes, direct, copied, driven uint64
}

// publish adds the counters kept since the last call to the QP's stats.
func (rx *rxEngine) publish() {
	if c := &rx.counts; c.fpdus|c.direct|c.copied|c.driven != 0 { // bytes count with fpdus
		rx.publishCounts()
	}
}

// publishCounts is publish of counters of which one is not zero.
func (rx *rxEngine) publishCounts() {
	c, st := &rx.counts, &rx.qp.stats
	if c.fpdus != 0 {
		st.rxFPDUs.Add(c.fpdus)
		st.rxBytes.Add(c.bytes)
	}
	if c.direct != 0 {
		st.rxDirect.Add(c.direct)
	}
	if c.copied != 0 {
		st.rxCopied.Add(c.copied)
	}
	if c.driven != 0 {
		st.rxDriven.Add(c.driven)
	}
	*c = rxCounts{}
}

// settle is what the engine does before each read of the socket and
// when it stops: it pushes the receive completions it gathered
// (flushRecvs), publishes its counters, releases the region reference
// it kept (releaseHeld) and, between FPDUs, forgets the region it last
// placed into (placing), so that fences on it no longer poke this
// engine.
func (rx *rxEngine) settle() {
	if rx.nwcs != 0 {
		rx.flushRecvs() // publishes first
	} else {
		if rx.rqPopped != rx.rqTaken {
			rx.qp.rqPop()
		}
		rx.publish()
	}
	rx.putWCs()
	rx.releaseHeld()
	if rx.placing.Load() != nil && !rx.inPlace && (rx.rd == nil || !rx.rd.InFPDU()) {
		rx.placing.Store(nil)
	}
}

// rxFPDU is what the receive engine keeps of the FPDU it is receiving.
type rxFPDU struct {
	hdr        [hdrCopy]byte // ULPDU_Length and the headers
	hdrLen     int           // bytes of hdr in use; the rest is zero
	ulpduLen   int
	ddpHdrLen  int
	op         wire.Opcode
	last       bool // DDP's L flag
	payloadLen int
}

// rxPlan is where the payload of the current FPDU goes: up to MaxSGE+1
// pieces of registered memory, each with its region and the STag word it
// was validated with, and the regions referenced meanwhile.
type rxPlan struct {
	dst   [MaxSGE + 1][]byte
	mr    [MaxSGE + 1]*MR
	word  [MaxSGE + 1]uint64
	n     int
	refs  [MaxSGE + 1]*MR
	nrefs int
}

func (rx *rxEngine) init(qp *QP, conn net.Conn) {
	rx.qp, rx.conn = qp, conn
	rx.crc = qp.p.CRC
	rx.untagged.Reset()
	rx.wcs = rx.wcsInline[:]
	rx.stallTimeout = qp.cfg.RxStallTimeout
	rx.place.rx = rx
	rx.runFn, rx.drivenFn, rx.idleFn = rx.run, rx.runDriven, qp.rxIdle
	if rc := rawConnOf(conn); rc != nil {
		rx.rawConn = rc
		rx.readvFn = rx.readvFD
	}
	// With markers (or QPConfig.BufferedRx) whole FPDUs are read and
	// checked before their payload is placed; headers still come first.
	// An idle reader holds no buffer from rxPool (see
	// mpa.ReaderConfig.Buffers).
	rx.rd = mpa.NewReader(rxConn{rx}, nil, mpa.ReaderConfig{
		CRC:        qp.p.CRC,
		Markers:    qp.p.MarkersRx,
		Buffered:   qp.cfg.BufferedRx || qp.p.MarkersRx,
		CRCInPlace: qp.cfg.CRCInPlace,
		Leftover:   qp.p.Leftover,
		Buffers:    rxPool,
	})
}

func (rx *rxEngine) release() {
	rx.putWCs()
	rx.dropRefs()
	if rx.writeMR != nil {
		rx.writeMR.release()
		rx.writeMR = nil
	}
	rx.releaseHeld()
	rx.readResp, rx.lastMR = nil, nil
	if rx.rd != nil {
		rx.rd.Release()
		rx.rd = nil
	}
}

// rxLoop is the receive goroutine. When it stops reading it waits for the
// send goroutine and then finishes the QP.
func (qp *QP) rxLoop(conn net.Conn) {
	err := qp.guardRx(qp.rx.runFn) // a fault in registered memory fails this QP only
	if err == errYield {
		qp.rxYielded() // PollRx: a waiter takes the engine (rxpoll.go)
		return
	}
	qp.rxFinal(conn, err)
}

// errTruncated is the cause of a Terminate for an FPDU cut short by the
// end of the stream.
var errTruncated = errors.New("rdmap: connection closed in the middle of an FPDU")

// rxEnd classifies why reading stopped.
func (qp *QP) rxEnd(conn net.Conn, err error) {
	if qp.broken.Load() {
		qp.ring()
		return
	}
	switch {
	case err == io.EOF:
		if rerr := sockError(conn); rerr != nil {
			// A FIN and then a RST: recv reports the FIN first (and
			// a send may already have consumed the error), so ask the
			// socket. An abrupt close is never a graceful one.
			qp.aborting.Store(true)
			qp.fail(fmt.Errorf("rdmap: receive: connection reset by the peer after its FIN: %w", rerr), nil)
			abortConn(conn)
			return
		}
		qp.peerClosed()
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, ErrRxStalled):
		// Best effort after a truncation: the peer may still read after
		// its FIN.
		ti := qp.rx.termFor(err)
		qp.fail(ti.err(), ti)
	case qp.rx.selfClosed.Load():
		qp.ring()
	default:
		qp.mu.Lock()
		graceful := qp.localClose && qp.state == StateClosing && errors.Is(err, os.ErrDeadlineExceeded)
		qp.mu.Unlock()
		if graceful {
			qp.ring()
			return
		}
		qp.aborting.Store(true)
		qp.fail(fmt.Errorf("rdmap: receive: %w", err), nil)
		abortConn(conn)
	}
}

// peerClosed handles the peer's FIN between FPDUs: a graceful close.
func (qp *QP) peerClosed() {
	qp.mu.Lock()
	if qp.state == StateRTS {
		_ = qp.setStateLocked(StateClosing)
		qp.postMu.Lock()
		qp.sqMu.Lock()
		qp.sqMode = postRefuse
		qp.sqMu.Unlock()
		qp.postMu.Unlock()
		qp.lg.Info("peer closed")
	}
	qp.mu.Unlock()
	qp.ring()
}

// failWith records the receive direction's error and fails the QP with
// the Terminate ti.
func (rx *rxEngine) failWith(ti *termInfo) {
	err := ti.err()
	if rx.err == nil {
		rx.err = err
	}
	rx.qp.fail(err, ti)
}

func (rx *rxEngine) gotFirst() {
	if !rx.peerSpoke {
		rx.peerSpoke = true
		close(rx.qp.rxFirst)
		rx.qp.ring() // a responder's send engine parked until now
	}
}

// drain reads and drops what the peer still sends until the connection
// ends (the send engine bounds the wait with a read deadline).
func (rx *rxEngine) drain() error {
	bufp := rxPool.Get()
	defer rxPool.Put(bufp)
	rx.draining = true
	for {
		if _, err := rx.read(*bufp); err != nil {
			return err
		}
	}
}

// run is the receive goroutine's loop: one FPDU at a time, until reading
// stops (or, PollRx, the engine is to yield: rxpoll.go).
func (rx *rxEngine) run() error { return rx.loop(false) }

// runDriven is the receive loop of a driver (rxDrive): FPDUs until the
// engine is to yield (nil, or errYield from a read a kick interrupted),
// the QP breaks (errHandoff: the receive goroutine drains), or reading
// stops.
func (rx *rxEngine) runDriven() error { return rx.loop(true) }

// loop is run's and runDriven's loop; a driven one that is to yield
// returns nil (no error to compare on its way out: rxDrive), the receive
// goroutine's errYield.
func (rx *rxEngine) loop(driven bool) error {
	qp := rx.qp
	defer rx.settle()
	for {
		if qp.broken.Load() {
			if driven {
				return errHandoff
			}
			return rx.drain()
		}
		if rx.yield.Load() {
			if driven {
				return nil
			}
			return errYield
		}
		// fpdus(rxRunMax), written out: one call fewer per FPDU.
		ti, err := rx.fpdu()
		n, more := 1, rx.rd.Partial() // more: the reader holds more bytes
		if more && err == nil && ti == nil && !rx.noWhole {
			rx.dropRefs()
			var k int
			k, ti = rx.wholeRun(rxRunMax - 1)
			n += k
			more = rx.rd.Partial()
		}
		rx.dropRefs()
		if err != nil {
			return err
		}
		if driven {
			rx.counts.driven += uint64(n)
		}
		if ti != nil {
			rx.failWith(ti)
		} else if driven && rx.nwcs > 0 && !more {
			// A receive completed and nothing more is buffered: the
			// next step would be a read, before which the completion is
			// pushed and the driver asked to yield (settle, wakeBy).
			// Yield now; the deferred settle pushes it.
			return nil
		}
	}
}

// rxPlace is the fence of one plan entry's placement, as the FPDU reader
// calls it (mpa.Placer): every write into registered memory happens
// between Enter and Leave, and only while the region's STag word is still
// the one it was validated with.
type rxPlace struct {
	rx   *rxEngine
	mr   *MR
	want uint64
}

// Enter begins a placement of n bytes into p.mr (errCut: the region was
// invalidated since it was validated).
func (p *rxPlace) Enter(n int, direct bool) error {
	rx := p.rx
	if !rx.enterPlace(p.mr, p.want) {
		return errCut
	}
	if direct {
		rx.counts.direct += uint64(n)
	} else {
		rx.counts.copied += uint64(n)
	}
	return nil
}

// Leave ends the placement Enter began.
func (p *rxPlace) Leave() {
	p.rx.leavePlace(p.mr)
}

// fpdu receives one FPDU, header first: the DDP header (with the RDMAP
// control byte in it) is checked as soon as its bytes are in, before any
// byte of the rest is awaited; a control message's body (the rest of its
// ULPDU) is read only once its header passed.
//
// An FPDU the reader holds whole is taken whole instead (Reader.Whole):
// when nothing is buffered, the read Next would make comes first
// (Reader.Fill: the same read, so a large payload still goes straight
// into memory), and the small FPDU it brings all of is taken whole too;
// a Write or single-segment Send that writeRun's or sendOne's checks
// accept as a run of one (runOne), the rest through whole.
func (rx *rxEngine) fpdu() (*termInfo, error) {
	rd := rx.rd
	if !rx.noWhole {
		err := rd.Fill()
		rx.settled = false
		if err != nil {
			if rd.Partial() {
				rx.gotFirst() // part of an FPDU came: the peer has spoken
			}
			return nil, err
		}
		if u, ok, err := rd.Whole(); ok {
			rx.gotFirst()
			if err != nil {
				return rx.readerErr(err)
			}
			if rx.runOne(u) {
				return nil, nil
			}
			return rx.whole(u), nil
		}
	}
	ulen, err := rd.Next()
	rx.settled = false
	if err != nil {
		if rd.Partial() {
			rx.gotFirst() // part of an FPDU came: the peer has spoken
		}
		return nil, err
	}
	rx.gotFirst()
	if ulen < ddp.TaggedHeaderLen {
		return rx.malformed(ulen)
	}
	// Every DDP header is at least a tagged one long, and ulen is too:
	// the first TaggedHeaderLen bytes belong to this header whatever its
	// kind. When its first byte is in, the whole header is asked for at
	// once.
	hl := ddp.TaggedHeaderLen
	if b, ok := rd.First(); ok && ddp.HeaderLen(b) <= ulen {
		hl = ddp.HeaderLen(b)
	}
	h, err := rd.Header(hl)
	if err != nil {
		return nil, err
	}
	hl = ddp.HeaderLen(h[0])
	if ulen < hl {
		return rx.malformed(ulen)
	}
	if hl > len(h) {
		if h, err = rd.Header(hl); err != nil {
			return nil, err
		}
	}
	if ti := rx.begin(ulen, h); ti != nil {
		if !rx.crc {
			// Nothing to wait for: answer now (as siw does); the rest
			// of the FPDU is drained with the stream.
			return ti, nil
		}
		return rx.discardRest(ti)
	}
	if need := headerNeed(h, ulen); need > hl {
		if h, err = rd.Header(min(need, hdrCopy-mpa.LengthFieldLen)); err != nil {
			return nil, err
		}
		rx.cur.hdrLen = mpa.LengthFieldLen + copy(rx.cur.hdr[mpa.LengthFieldLen:], h)
		if need > len(h) {
			if err := rd.Discard(); err != nil {
				return nil, err
			}
		}
	}
	for i := range rx.plan.n {
		rx.place.mr, rx.place.want = rx.plan.mr[i], rx.plan.word[i]
		err := rd.Place(rx.plan.dst[i], &rx.place)
		rx.place.mr = nil
		if err != nil { // ErrBadCRC here: Buffered, checked before placing
			return rx.readerErr(err)
		}
		rx.plan.dst[i] = nil
	}
	if err := rd.Trailer(); err != nil {
		return rx.readerErr(err)
	}
	wl, _ := rd.WireLen()
	rx.counts.fpdus++
	rx.counts.bytes += uint64(wl)
	return rx.end(), nil
}

// rxRunMax bounds the FPDUs the receive loop takes in one call of fpdus:
// none, in effect (a run ends with what the reader has buffered).
const rxRunMax = 1 << 30

// fpdus receives up to max FPDUs (at least one): one as fpdu does and,
// unless that one failed, the ones the reader already holds whole after
// it (wholeRun; none when it holds no byte more). It returns how many it
// received, and the Terminate or the error of the last. The engine
// checks between FPDUs, as its loop does, whether the QP broke or it is
// to yield. The loop has these lines in place (fpdus(rxRunMax)).
func (rx *rxEngine) fpdus(max int) (int, *termInfo, error) {
	ti, err := rx.fpdu()
	if err != nil || ti != nil || max <= 1 || rx.noWhole || !rx.rd.Partial() {
		return 1, ti, err
	}
	rx.dropRefs()
	n, ti := rx.wholeRun(max - 1)
	return 1 + n, ti, nil
}

// wholeRun receives, in one loop, up to max FPDUs the reader holds whole
// (mpa.Reader.Whole), until one fails, the reader holds no whole FPDU or
// the QP broke or the engine is to yield. A run of Write segments into
// the region the last Write placed into, or of single-segment Sends into
// receives of one SGE in the region the last Send placed into (the
// message-rate workload: many small messages in one socket read), is
// received by writeRun's and sendRun's checks, with the region entered
// (enterPlace) once for the run rather than once per FPDU, and the FPDUs
// after the first that writeRun or sendRun accepted by the tight loops
// writes and sends (the same checks, the copy and the state update per
// FPDU, the header recorded once at the end); everything else, and any
// FPDU those checks do not accept as they stand, goes through whole,
// which gives the answer for it. An FPDU writes or sends took but did
// not accept comes back to this loop, which receives it as it receives
// any other (writeRun, sendRun, then whole). It returns how many FPDUs
// it received and the Terminate of the last.
//
// The region stays entered across the run's FPDUs: an invalidation waits
// for the run to leave it (MR.fence), which is bounded by one buffer's
// copies (the run never reads the socket), and every FPDU of the run
// rechecks its STag word before its copy, as enterPlace would, so the
// first one after an invalidation is cut as it would have been between
// two FPDUs. The region is left before anything else is done (whole,
// pushing completions into the CQ).
func (rx *rxEngine) wholeRun(max int) (int, *termInfo) {
	qp, rd := rx.qp, rx.rd
	var w runRegion
	n := 0
	var (
		u    []byte
		err  error
		back bool // u (and err) is an FPDU writes or sends took and handed back
	)
run:
	for {
		if !back {
			if n >= max || qp.broken.Load() || rx.yield.Load() {
				break
			}
			if rx.runStep != nil {
				rx.runStep(n)
			}
			var ok bool
			if u, ok, err = rd.Whole(); !ok {
				break
			}
			n++
		}
		back = false
		if err == nil && len(u) > 1 {
			switch u[1] {
			case writeCtrl:
				if rx.writeRun(&w, u) {
					if n, u, err, back = rx.writes(&w, n, max); !back {
						break run // it stopped where this loop would
					}
					continue
				}
			case sendCtrl, sendSECtrl:
				if rx.sendRun(&w, u) {
					if n, u, err, back = rx.sends(&w, n, max); !back {
						break run // it stopped where this loop would
					}
					continue
				}
			}
		}
		rx.leaveRun(&w)
		if err != nil {
			ti, _ := rx.readerErr(err) // ErrBadCRC: a Terminate, no error
			return n, ti
		}
		ti := rx.whole(u)
		rx.dropRefs()
		if ti != nil {
			return n, ti
		}
	}
	rx.leaveRun(&w)
	return n, nil
}

// runOne receives the FPDU with ULPDU u, taken whole and its CRC
// checked, as a run of one when the checks of writeRun (leaving the
// region at once) or of sendOne (sendRun's, without a run's region)
// accept it; false: the caller receives it through whole.
func (rx *rxEngine) runOne(u []byte) bool {
	if len(u) < 2 {
		return false
	}
	switch u[1] {
	case writeCtrl:
		var w runRegion
		ok := rx.writeRun(&w, u)
		rx.leaveRun(&w)
		return ok
	case sendCtrl, sendSECtrl:
		return rx.sendOne(u)
	}
	return false
}

// runRegion is the region a run is placing into (wholeRun): the region
// entered, its STag word when it was entered and the mapping that word
// names, and which placements MR.check and MR.checkLocal allow into it
// for this QP whatever their bounds: remote writes (Writes) and local
// writes (receives).
type runRegion struct {
	mr            *MR
	want          uint64
	buf           []byte // the mapping's: buf, base and parent
	base          uint64
	parent        *MR
	remote, local bool
}

// The RDMAP control bytes of the messages a run takes: RDMA Write, Send
// and Send with Solicited Event.
var (
	writeCtrl  = wire.ControlByte(wire.Version1, wire.OpWrite)
	sendCtrl   = wire.ControlByte(wire.Version1, wire.OpSend)
	sendSECtrl = wire.ControlByte(wire.Version1, wire.OpSendSE)
)

// enterRun enters mr for a run (wholeRun) that is in no region yet: its
// STag word valid, and what it allows looked up.
func (rx *rxEngine) enterRun(w *runRegion, mr *MR) bool {
	if w.mr != nil {
		return false
	}
	want := mr.st.Load()
	b := mr.bind.Load()
	if want&mrValid == 0 || b == nil {
		return false
	}
	qp := rx.qp
	remote := mr.pd == qp.pd && (b.qp == nil || b.qp == qp) && b.access&AccessRemoteWrite == AccessRemoteWrite
	local := mr.pd == qp.pdForRecv() && !mr.kind.window() && b.access&AccessLocalWrite == AccessLocalWrite
	if !remote && !local || !rx.enterPlace(mr, want) {
		return false
	}
	*w = runRegion{mr: mr, want: want, buf: b.buf, base: b.base, parent: b.parent, remote: remote, local: local}
	return true
}

// leaveRun leaves the region the run entered, if any.
func (rx *rxEngine) leaveRun(w *runRegion) {
	if w.mr != nil {
		rx.leavePlace(w.mr)
		*w = runRegion{}
	}
}

// runBytes returns the n bytes at tagged offset to of the run's region,
// as mrBinding.slice would (false: out of bounds), once its STag word
// is still the one it was entered with (that of the mapping the run
// looked up) and, for a window, its parent region valid.
func (w *runRegion) runBytes(to uint64, n int) ([]byte, bool) {
	if w.mr.st.Load() != w.want || w.parent != nil && w.parent.st.Load()&mrValid == 0 {
		return nil, false
	}
	off := to - w.base
	if to < w.base || off > uint64(len(w.buf)) || uint64(n) > uint64(len(w.buf))-off {
		return nil, false
	}
	return w.buf[off : off+uint64(n)], true
}

// runCount counts an FPDU a run received, ULPDU of ulen bytes after a
// DDP header of hl, as whole counts it: an FPDU, its wire bytes, its
// payload copied.
func (rx *rxEngine) runCount(ulen, hl int) {
	rx.counts.copied += uint64(ulen - hl)
	rx.counts.fpdus++
	rx.counts.bytes += uint64(mpa.FPDULen(ulen))
}

// runHeader records the header of an FPDU a run received as begin does:
// ULPDU u, DDP header length hl, the rest of rx.cur set by the caller.
// It counts nothing (runCount).
func (rx *rxEngine) runHeader(u []byte, hl int) {
	binary.BigEndian.PutUint16(rx.cur.hdr[:], uint16(len(u)))
	if d := rx.cur.hdr[mpa.LengthFieldLen:]; hl == ddp.TaggedHeaderLen {
		*(*[ddp.TaggedHeaderLen]byte)(d) = [ddp.TaggedHeaderLen]byte(u)
	} else { // as begin copies it, without a call
		*(*[16]byte)(d) = [16]byte(u)
		d[16], d[17] = u[16], u[17]
	}
	prev := rx.cur.hdrLen
	rx.cur.hdrLen = mpa.LengthFieldLen + hl
	if prev > rx.cur.hdrLen {
		clear(rx.cur.hdr[rx.cur.hdrLen:prev])
	}
	rx.cur.ulpduLen, rx.cur.ddpHdrLen, rx.cur.payloadLen = len(u), hl, len(u)-hl
}

// writeRun receives the Write segment with ULPDU u (taken whole, its CRC
// checked; its control byte the Write's) in the run's region w, entering
// it first if w has none, when the segment is what whole would accept
// and place there: a tagged, DDP version 1 header, a non-empty payload,
// the region the segment's message places into (the message in
// progress, or the region the last Write found, referenced and with its
// STag word unchanged: what CheckRegion would look up and take), its
// access (as MR.check checks it, against the mapping the unchanged word
// names) and the DDP rules (ddp.TaggedSink.Whole for a message of one
// segment, else ddp.TaggedSink.Continue). It then leaves the
// engine as whole would have: the FPDU's header and counters, the DDP
// state, the message's reference and the payload placed. It reports
// false, having changed nothing but the region entered, otherwise: the
// caller receives the FPDU through whole.
func (rx *rxEngine) writeRun(w *runRegion, u []byte) bool {
	if len(u) <= ddp.TaggedHeaderLen || u[0]&(ddp.FlagTagged|ddp.VersionMask) != ddp.FlagTagged|ddp.Version1 {
		return false
	}
	h := ddp.Header(u[:ddp.TaggedHeaderLen])
	stag, plen := h.STag(), len(u)-ddp.TaggedHeaderLen
	active := rx.tagged.Active()
	mr := rx.lastMR
	if active {
		if rx.taggedOp != wire.OpWrite {
			return false
		}
		mr = rx.writeMR
	} else if rx.held != mr || STag(uint32(rx.lastWord)) != stag {
		return false
	}
	if mr == nil || w.mr != mr && !rx.enterRun(w, mr) || !w.remote || STag(uint32(w.want)) != stag || !active && rx.lastWord != w.want {
		return false
	}
	dst, ok := w.runBytes(h.TO(), plen)
	one := rx.tagged.Whole(h, plen)
	if !ok || !one && !rx.tagged.Continue(h, plen) {
		return false
	}
	// The segment is in the message (as after Segment), its region
	// taken for it (takeRef's reference, as CheckRegion takes it); then
	// the payload, then what begin and end would have left. A message
	// of one segment (ddp.TaggedSink.Whole) leaves the sink idle, and
	// its reference, which end would hand back to rx.held, stays there.
	rx.taggedOp = wire.OpWrite
	if one {
		copy(dst, u[ddp.TaggedHeaderLen:])
		rx.runCount(len(u), ddp.TaggedHeaderLen)
		rx.runHeader(u, ddp.TaggedHeaderLen)
		rx.cur.op, rx.cur.last = wire.OpWrite, true
		if rx.writeMR != nil {
			rx.writeMR = nil // as end leaves it
		}
		return true
	}
	if !active {
		rx.held, rx.writeMR = nil, mr
	}
	copy(dst, u[ddp.TaggedHeaderLen:])
	rx.runCount(len(u), ddp.TaggedHeaderLen)
	rx.runHeader(u, ddp.TaggedHeaderLen)
	rx.cur.op, rx.cur.last = wire.OpWrite, h.Last()
	rx.tagged.Placed(rx.cur.last)
	if rx.cur.last {
		rx.dropRef(mr)
		rx.writeMR = nil
	}
	return true
}

// writes receives, after writeRun accepted an FPDU of the run into w (n
// FPDUs of the run received so far, at most max in all), the Write
// segments the reader holds whole after it, as long as writeRun would
// accept each one as it stands: between two FPDUs it stops as wholeRun
// does (the QP broke, the engine is to yield, max, no whole FPDU) and
// calls rx.runStep first. Each segment gets writeRun's checks (with
// those that hold for the whole run made once: the region entered, its
// access, the region and word the last Write found) and leaves the
// state writeRun leaves, in writeRun's order: the DDP state, the
// message's reference, the payload copied, then counted. rx.cur, which
// nothing reads between the FPDUs of a run, is written once, for the
// last segment accepted, before it returns (writesEnd). It returns the
// run's count and, when it stopped at an FPDU it took but does not
// accept, that FPDU (ULPDU u, the reader's error err; back true), with
// nothing changed for it: the caller receives it as any other FPDU of
// the run.
//
// A memory fault in a copy (guardRx) leaves the segments before the
// faulting one placed and counted, the faulting one's DDP state as
// writeRun leaves it (Continue done; for a message of one segment, the
// sink idle, as Whole leaves it) and rx.cur with the header of a
// segment received before it (writeRun's: the one just before; here:
// the last one writeRun or writesEnd recorded). What the fault leads to
// reads none of rx.cur: its Terminate is local catastrophic, with no
// header (memoryFault), and the engine stops. The reference of a
// message of one segment stays in rx.held through its copy (writeRun
// moves it to writeMR for the copy); release drops either.
func (rx *rxEngine) writes(w *runRegion, n, max int) (int, []byte, error, bool) {
	// writeRun starts a new message (in the region the last Write
	// found) only in the run's region and with the word the run entered
	// it with: neither lastMR nor lastWord changes during the run. Then
	// the engine must keep its reference (rx.held).
	fresh := rx.lastMR == w.mr && rx.lastWord == w.want
	var last []byte // the ULPDU of the last segment accepted
	for n < max && !rx.qp.broken.Load() && !rx.yield.Load() {
		if rx.runStep != nil {
			rx.runStep(n)
		}
		u, ok, err := rx.rd.Whole()
		if !ok {
			break
		}
		n++
		if err != nil || len(u) <= ddp.TaggedHeaderLen || u[1] != writeCtrl || u[0]&(ddp.FlagTagged|ddp.VersionMask) != ddp.FlagTagged|ddp.Version1 {
			rx.writesEnd(last)
			return n, u, err, true
		}
		h := ddp.Header(u[:ddp.TaggedHeaderLen])
		to, plen := h.TO(), uint64(len(u)-ddp.TaggedHeaderLen)
		// As writeRun: the message in progress is a Write (every segment
		// the run took was one) into writeMR, or a new one into the
		// region the last Write found; either is the run's region. Then
		// runBytes's checks, and the DDP rules.
		// A message of one segment (ddp.TaggedSink.Whole: Continue and
		// Placed(true) in one check, the sink left idle) is the common
		// case; any other goes through Continue and Placed.
		active := rx.tagged.Active()
		one := rx.tagged.Whole(h, int(plen))
		off := to - w.base
		if h.STag() != STag(uint32(w.want)) || active && rx.writeMR != w.mr || !active && (!fresh || rx.held != w.mr) ||
			w.mr.st.Load() != w.want || w.parent != nil && w.parent.st.Load()&mrValid == 0 ||
			to < w.base || off > uint64(len(w.buf)) || plen > uint64(len(w.buf))-off ||
			!one && !rx.tagged.Continue(h, int(plen)) {
			rx.writesEnd(last)
			return n, u, nil, true
		}
		if one {
			// Its region taken for it: writeRun would hand the
			// reference the engine keeps to writeMR and back; it stays
			// in rx.held instead, and writeMR is left nil.
			copy(w.buf[off:off+plen], u[ddp.TaggedHeaderLen:])
			rx.runCount(len(u), ddp.TaggedHeaderLen)
			if rx.writeMR != nil {
				rx.writeMR = nil
			}
			last = u
			continue
		}
		// The segment is in the message (Continue), its region taken
		// for it.
		l := h.Last()
		if !active {
			rx.held, rx.writeMR = nil, w.mr
		}
		copy(w.buf[off:off+plen], u[ddp.TaggedHeaderLen:])
		rx.runCount(len(u), ddp.TaggedHeaderLen)
		rx.tagged.Placed(l)
		if l {
			rx.dropRef(w.mr)
			rx.writeMR = nil
		}
		last = u
	}
	rx.writesEnd(last)
	return n, nil, nil, false
}

// writesEnd records in rx.cur, as writeRun does, the Write segment with
// ULPDU u that writes accepted last (none: nil).
func (rx *rxEngine) writesEnd(u []byte) {
	if u != nil {
		rx.runHeader(u, ddp.TaggedHeaderLen)
		rx.cur.op, rx.cur.last = wire.OpWrite, ddp.Header(u).Last()
	}
}

// sendRun receives the Send with ULPDU u (taken whole, its CRC checked;
// its control byte a Send's or a Send with Solicited Event's) in the
// run's region w, entering it first if w has none, when it is what whole
// would accept and place there: an untagged, DDP version 1 header, a
// message of one segment (ddp.UntaggedSink.Deliver) with a non-empty
// payload, and the next receive posted on the QP's own RQ (no SRQ) of
// one SGE, in that region (referenced as addRef would take it: the
// reference the engine keeps, rx.held, or a new one when it keeps none),
// with room for it and local write access (as MR.checkLocal checks it). It
// then leaves the engine as whole would have: the FPDU's header and
// counters, the DDP state, the receive taken and its completion
// gathered (pushRecv), the payload placed. It reports false, having
// changed nothing but the region entered, otherwise: the caller receives
// the FPDU through whole. The DDP state is recorded (Deliver) before the
// payload is placed: a memory fault in the copy leaves the message
// delivered there, which nothing reads once the engine has stopped.
func (rx *rxEngine) sendRun(w *runRegion, u []byte) bool {
	qp := rx.qp
	if len(u) <= ddp.UntaggedHeaderLen || u[0]&(ddp.FlagTagged|ddp.VersionMask) != ddp.Version1 || qp.srq != nil || rx.rqTaken == rx.rqAvail {
		return false
	}
	h := ddp.Header(u[:ddp.UntaggedHeaderLen])
	plen := len(u) - ddp.UntaggedHeaderLen
	e := qp.rq.at(rx.rqTaken)
	mr := e.sge.MR
	if e.nsge != 1 || mr == nil || rx.held != mr && rx.held != nil || w.mr != mr && !rx.enterRun(w, mr) || !w.local {
		return false
	}
	length := uint64(e.sge.Length)
	dst, ok := w.runBytes(e.sge.Offset, plen)
	if !ok {
		return false
	}
	acquired := rx.held == nil
	if acquired {
		// The first placement into the region since the engine let its
		// reference go (before it read: releaseHeld): a new one, kept
		// as dropRef keeps it. The region entered (its STag word valid)
		// still has its registration's reference, so this succeeds.
		if !mr.acquire() {
			return false
		}
		rx.held = mr
	}
	// The DDP rules, and the DDP state the message leaves
	// (ddp.UntaggedSink.Deliver: Message and Delivered in one step);
	// refused, the reference just taken goes again.
	if !rx.untagged.Deliver(h, wire.QNSend, plen, length) {
		if acquired {
			rx.held = nil
			mr.release()
		}
		return false
	}
	// The payload first: should the copy fault (guardRx), the receive
	// is still posted, to be flushed, and the FPDU not counted (the DDP
	// state, which nothing reads once the engine stops, has the message
	// delivered). Then what begin, TakeBuffer, beginSend, end and
	// completeRecv would have left. The receive's completion is gathered
	// last: should it fill the batch, the batch goes into the CQ outside
	// the region.
	copy(dst, u[ddp.UntaggedHeaderLen:])
	// What begin, TakeBuffer, beginSend, end and completeRecv would have
	// left: the receive taken, the FPDU's header and counters, and its
	// completion written in place (sendOne has the same lines: a call
	// per FPDU costs more than the lines).
	id := e.id
	e.sge.MR = nil // takeAt's: the RQ holds no reference
	rx.rqTaken++
	op := wire.OpSend
	if u[1] == sendSECtrl {
		op = wire.OpSendSE
	}
	rx.runCount(len(u), ddp.UntaggedHeaderLen)
	rx.runHeader(u, ddp.UntaggedHeaderLen)
	rx.cur.op, rx.cur.last = op, true
	rx.recvOp, rx.recvStatus, rx.recvSGE, rx.recvSGEOff = op, WCSuccess, 0, uint64(plen)
	rx.recvInv = STag(h.RsvdULP32())
	wc := rx.nextWC()
	*wc = WC{ID: id, Op: WCRecv, ByteLen: uint32(plen), QPN: qp.qpn}
	if op == wire.OpSendSE {
		wc.Flags = WCSolicited
	}
	if rx.nwcs+1 == rxBatch {
		rx.leaveRun(w)
	}
	rx.gathered()
	return true
}

// sends receives, after sendRun accepted an FPDU of the run into w (n
// FPDUs of the run received so far, at most max in all), the
// single-segment Sends the reader holds whole after it, as long as
// sendRun would accept each one as it stands: between two FPDUs it stops
// as wholeRun does (the QP broke, the engine is to yield, max, no whole
// FPDU) and calls rx.runStep first. Each Send gets sendRun's checks (but
// for the QP's SRQ: none for the whole run) and leaves, in sendRun's
// order, the DDP state, the payload copied, the receive taken, the
// counters and its completion gathered (a full batch pushed outside the
// region, as sendRun pushes it: the region is entered again for the next
// Send). rx.cur and the receive's state (recvOp, recvStatus, recvSGE,
// recvSGEOff, recvInv), which nothing reads between the FPDUs of a run,
// are written once, for the last Send accepted, before it returns
// (sendsEnd). It returns the run's count and, when it stopped at an FPDU
// it took but does not accept, that FPDU (ULPDU u, the reader's error
// err; back true), with nothing changed for it but the region entered:
// the caller receives it as any other FPDU of the run.
//
// A memory fault in a copy (guardRx) leaves, as sendRun does, the Sends
// before the faulting one received, counted and their completions
// gathered (the QP's flush pushes them), the faulting one's receive
// still posted (flushed) and nothing counted for it (but its DDP
// state, recorded before the copy, which nothing reads once the engine
// has stopped); rx.cur and the
// receive's state hold a Send received before it (the last one sendRun
// or sendsEnd recorded). What the fault leads to reads none of them:
// its Terminate is local catastrophic, with no header (memoryFault),
// the engine stops, and the flush reads recvStatus only for a message
// in progress, which a Send of one segment received whole never leaves.
func (rx *rxEngine) sends(w *runRegion, n, max int) (int, []byte, error, bool) {
	var last []byte // the ULPDU of the last Send accepted
	for n < max && !rx.qp.broken.Load() && !rx.yield.Load() {
		if rx.runStep != nil {
			rx.runStep(n)
		}
		u, ok, err := rx.rd.Whole()
		if !ok {
			break
		}
		n++
		if err != nil || len(u) <= ddp.UntaggedHeaderLen || u[1] != sendCtrl && u[1] != sendSECtrl ||
			u[0]&(ddp.FlagTagged|ddp.VersionMask) != ddp.Version1 || rx.rqTaken == rx.rqAvail {
			rx.sendsEnd(last)
			return n, u, err, true
		}
		h := ddp.Header(u[:ddp.UntaggedHeaderLen])
		plen := len(u) - ddp.UntaggedHeaderLen
		e := rx.qp.rq.at(rx.rqTaken)
		mr := e.sge.MR
		if e.nsge != 1 || mr == nil || rx.held != mr && rx.held != nil || w.mr != mr && !rx.enterRun(w, mr) || !w.local {
			rx.sendsEnd(last)
			return n, u, nil, true
		}
		length := uint64(e.sge.Length)
		dst, ok := w.runBytes(e.sge.Offset, plen)
		if !ok {
			rx.sendsEnd(last)
			return n, u, nil, true
		}
		acquired := rx.held == nil
		if acquired {
			// As sendRun: the region entered keeps its registration's
			// reference, so this succeeds.
			if !mr.acquire() {
				rx.sendsEnd(last)
				return n, u, nil, true
			}
			rx.held = mr
		}
		if !rx.untagged.Deliver(h, wire.QNSend, plen, length) {
			if acquired { // as sendRun
				rx.held = nil
				mr.release()
			}
			rx.sendsEnd(last)
			return n, u, nil, true
		}
		copy(dst, u[ddp.UntaggedHeaderLen:])
		id := e.id
		e.sge.MR = nil // takeAt's: the RQ holds no reference
		rx.rqTaken++
		rx.runCount(len(u), ddp.UntaggedHeaderLen)
		wc := rx.nextWC()
		*wc = WC{ID: id, Op: WCRecv, ByteLen: uint32(plen), QPN: rx.qp.qpn}
		if u[1] == sendSECtrl {
			wc.Flags = WCSolicited
		}
		last = u
		if rx.nwcs++; rx.nwcs == rxBatch {
			// gathered's flush (no SRQ), outside the region.
			rx.leaveRun(w)
			rx.flushRecvs()
		}
	}
	rx.sendsEnd(last)
	return n, nil, nil, false
}

// sendsEnd records in rx.cur and the receive's state, as sendRun does,
// the Send with ULPDU u that sends accepted last (none: nil).
func (rx *rxEngine) sendsEnd(u []byte) {
	if u == nil {
		return
	}
	h := ddp.Header(u[:ddp.UntaggedHeaderLen])
	op := wire.OpSend
	if u[1] == sendSECtrl {
		op = wire.OpSendSE
	}
	rx.runHeader(u, ddp.UntaggedHeaderLen)
	rx.cur.op, rx.cur.last = op, true
	rx.recvOp, rx.recvStatus, rx.recvSGE, rx.recvSGEOff = op, WCSuccess, 0, uint64(len(u)-ddp.UntaggedHeaderLen)
	rx.recvInv = STag(h.RsvdULP32())
}

// sendOne receives, outside a run, the Send with ULPDU u (taken whole,
// its CRC checked; its control byte a Send's or a Send with Solicited
// Event's) when sendRun would accept it as a run of one, with the checks
// whole would make (beginSend's: UntaggedSink.Message for Segment, Begin
// and Fit, and MR.checkLocal of the receive's one SGE with the STag word
// loaded first), without a run's region: its one placement fenced as
// whole fences it (enterPlace .. leavePlace, against that word), the
// region referenced as addRef would take it (the reference the engine
// keeps, rx.held, or a new one when it keeps none). It then leaves the
// engine as whole would have (sendRun's lines, the completion gathered). It
// reports false, having changed nothing but the reference it may keep
// for the region (rx.held, which whole's addRef then takes),
// otherwise: the caller receives the FPDU through whole.
func (rx *rxEngine) sendOne(u []byte) bool {
	qp := rx.qp
	if len(u) <= ddp.UntaggedHeaderLen || u[0]&(ddp.FlagTagged|ddp.VersionMask) != ddp.Version1 || qp.srq != nil || rx.rqTaken == rx.rqAvail {
		return false
	}
	h := ddp.Header(u[:ddp.UntaggedHeaderLen])
	plen := len(u) - ddp.UntaggedHeaderLen
	e := qp.rq.at(rx.rqTaken)
	mr := e.sge.MR
	if e.nsge != 1 || mr == nil || rx.held != mr && rx.held != nil {
		return false
	}
	length := uint64(e.sge.Length)
	if !rx.untagged.Message(h, wire.QNSend, plen, length) {
		return false
	}
	want := mr.st.Load()
	dst, ae := mr.checkLocal(qp.pd, AccessLocalWrite, e.sge.Offset, uint64(plen))
	if ae != accessOK {
		return false
	}
	if rx.held == nil {
		// Kept as dropRef keeps it. It fails only for a region
		// deregistered since checkLocal, which whole then answers.
		if !mr.acquire() {
			return false
		}
		rx.held = mr
	}
	if !rx.enterPlace(mr, want) {
		return false
	}
	// The payload first, as sendRun: should the copy fault (guardRx),
	// the receive is still posted, to be flushed, and the FPDU not
	// counted.
	copy(dst, u[ddp.UntaggedHeaderLen:])
	rx.leavePlace(mr)
	// sendRun's lines, as it has them.
	id := e.id
	e.sge.MR = nil // takeAt's: the RQ holds no reference
	rx.rqTaken++
	rx.untagged.Delivered(h, wire.QNSend, plen, length)
	op := wire.OpSend
	if u[1] == sendSECtrl {
		op = wire.OpSendSE
	}
	rx.runCount(len(u), ddp.UntaggedHeaderLen)
	rx.runHeader(u, ddp.UntaggedHeaderLen)
	rx.cur.op, rx.cur.last = op, true
	rx.recvOp, rx.recvStatus, rx.recvSGE, rx.recvSGEOff = op, WCSuccess, 0, uint64(plen)
	rx.recvInv = STag(h.RsvdULP32())
	wc := rx.nextWC()
	*wc = WC{ID: id, Op: WCRecv, ByteLen: uint32(plen), QPN: qp.qpn}
	if op == wire.OpSendSE {
		wc.Flags = WCSolicited
	}
	rx.gathered()
	return true
}

// whole receives an FPDU the reader had buffered whole (mpa.Reader.Whole;
// its CRC checked), ULPDU u: the same checks as fpdu's, in the same
// order, then the payload copied from the reader's buffer into the
// planned memory, each copy fenced as a Place would fence it (enterPlace
// .. leavePlace).
func (rx *rxEngine) whole(u []byte) *termInfo {
	ulen := len(u)
	if ulen < ddp.TaggedHeaderLen || ulen < ddp.HeaderLen(u[0]) {
		rx.cur.ulpduLen = ulen
		return rx.termFor(errShortULPDU)
	}
	hl := ddp.HeaderLen(u[0])
	if ti := rx.begin(ulen, u[:hl]); ti != nil {
		return ti
	}
	if need := headerNeed(u[:hl], ulen); need > hl {
		rx.cur.hdrLen = mpa.LengthFieldLen + copy(rx.cur.hdr[mpa.LengthFieldLen:], u[:min(need, hdrCopy-mpa.LengthFieldLen)])
	}
	p := u[hl:]
	for i := range rx.plan.n {
		d, mr := rx.plan.dst[i], rx.plan.mr[i]
		if !rx.enterPlace(mr, rx.plan.word[i]) {
			return rx.cutTerm()
		}
		k := copy(d, p) // the plan covers the payload exactly (begin)
		rx.leavePlace(mr)
		p = p[k:]
		rx.counts.copied += uint64(k)
		rx.plan.dst[i], rx.plan.mr[i] = nil, nil
	}
	rx.plan.n = 0
	rx.counts.fpdus++
	rx.counts.bytes += uint64(mpa.FPDULen(ulen))
	return rx.end()
}

// readerErr sorts an error of the FPDU reader: a CRC mismatch and a
// placement cut by a fence are answered with their Terminate; anything
// else (the stream's) ends reading.
func (rx *rxEngine) readerErr(err error) (*termInfo, error) {
	switch err {
	case errCut:
		return rx.cutTerm(), nil
	case mpa.ErrBadCRC:
		rx.qp.stats.crcErrors.Add(1)
		return rx.termFor(err), nil
	}
	return nil, err
}

// discardRest drops the rest of an FPDU whose header failed validation,
// and its trailer, through the CRC: with CRC in use, a bad CRC is what
// gets reported (the header itself may be what is corrupt).
func (rx *rxEngine) discardRest(ti *termInfo) (*termInfo, error) {
	saved := *ti
	if err := rx.rd.Discard(); err != nil {
		return nil, err
	}
	if err := rx.rd.Trailer(); err != nil {
		return rx.readerErr(err)
	}
	rx.termBuf = saved
	return &rx.termBuf, nil
}

// malformed handles a ULPDU too short for the DDP header it announces:
// siw answers LLP/MPA "marker and ULPDU length mismatch" (after the CRC,
// when one is in use).
func (rx *rxEngine) malformed(ulen int) (*termInfo, error) {
	rx.cur.ulpduLen = ulen
	if !rx.crc {
		return rx.termFor(errShortULPDU), nil
	}
	return rx.discardRest(rx.termFor(errShortULPDU))
}

var errShortULPDU = errors.New("rdmap: ULPDU too short for its headers")

// headerNeed returns how many ULPDU bytes make up the headers of an FPDU
// whose DDP header is h: the DDP header for data messages (Write, Read
// Response, Sends), the whole ULPDU for the others, which carry no
// payload.
func headerNeed(h []byte, ulen int) int {
	_, _, op := wire.Control(h[1])
	switch op {
	case wire.OpWrite, wire.OpReadResponse, wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		return len(h)
	}
	return ulen
}

// ctrlBody returns the exact body size of a control message (-1: at
// least minimum bytes, as a Terminate).
func ctrlBody(op wire.Opcode) (size, minimum int) {
	switch op {
	case wire.OpReadRequest:
		return wire.ReadRequestLen, wire.ReadRequestLen
	case wire.OpImmData, wire.OpImmDataSE:
		return wire.ImmDataLen, wire.ImmDataLen
	case wire.OpAtomicRequest:
		return wire.AtomicRequestLen, wire.AtomicRequestLen
	case wire.OpAtomicResponse:
		return wire.AtomicResponseLen, wire.AtomicResponseLen
	}
	return -1, wire.TermCtrlLen
}

// queueOf returns the untagged queue of a control message.
func queueOf(op wire.Opcode) uint32 {
	switch op {
	case wire.OpReadRequest:
		return wire.QNReadRequest
	case wire.OpTerminate:
		return wire.QNTerminate
	case wire.OpAtomicRequest, wire.OpAtomicResponse:
		return wire.QNAtomic
	}
	return wire.QNSend
}

// rdmapHdrLen is the RDMAP header length after the DDP header.
func rdmapHdrLen(op wire.Opcode, body int) int {
	if s, _ := ctrlBody(op); s >= 0 {
		return s
	}
	if op == wire.OpTerminate {
		return body
	}
	return 0
}

// term builds the Terminate for the current FPDU; hdrs copies its DDP
// header (M and D).
func (rx *rxEngine) term(layer wire.Layer, etype, code uint8, hdrs bool) *termInfo {
	ti := &rx.termBuf
	*ti = termInfo{layer: layer, etype: etype, code: code}
	if hdrs {
		ti.m = true
		ti.ddpLen = copy(ti.ddpHdr[:], rx.cur.hdr[mpa.LengthFieldLen:mpa.LengthFieldLen+rx.cur.ddpHdrLen])
		ti.ulpduLen = rx.cur.ulpduLen
		ti.payLen = max(rx.cur.ulpduLen-rx.cur.ddpHdrLen-rdmapHdrLen(rx.cur.op, rx.cur.ulpduLen-rx.cur.ddpHdrLen), 0)
	}
	return ti
}

// termDDP is termFor for the DDP error of the given type and code.
func (rx *rxEngine) termDDP(etype ddp.ErrorType, code ddp.ErrorCode) *termInfo {
	return rx.termFor(&ddp.Error{Type: etype, Code: code})
}

// termReadReq is an RDMAP remote protection error on a Read Request: M, D
// and R, with the Read Request header.
func (rx *rxEngine) termReadReq(code uint8) *termInfo {
	ti := rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, code, true)
	ti.hasRDMA = true
	copy(ti.rdmaHdr[:], rx.cur.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:])
	return ti
}

func (rx *rxEngine) intersection() *termInfo {
	return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnexpectedOpcode, true)
}

func (rx *rxEngine) opAllowed(op wire.Opcode) bool {
	if op <= wire.OpTerminate {
		return true
	}
	return rx.qp.cfg.RFC7306 && op <= wire.OpAtomicResponse
}

func (rx *rxEngine) addRef(mr *MR) bool {
	if !rx.takeRef(mr) {
		return false
	}
	rx.plan.refs[rx.plan.nrefs] = mr
	rx.plan.nrefs++
	return true
}

// dropRefs ends the current FPDU's plan: the references it took
// (dropRef) and its pieces. It is inlined where the plan is empty
// already (a Write's region is referenced with the message: writeMR; an
// FPDU taken whole clears its pieces as it places them).
func (rx *rxEngine) dropRefs() {
	if rx.plan.nrefs|rx.plan.n != 0 {
		rx.dropPlan()
	}
}

func (rx *rxEngine) dropPlan() {
	for i := range rx.plan.nrefs {
		rx.dropRef(rx.plan.refs[i])
		rx.plan.refs[i] = nil
	}
	rx.plan.nrefs = 0
	for i := range rx.plan.n {
		rx.plan.dst[i] = nil
		rx.plan.mr[i] = nil
	}
	rx.plan.n = 0
}

// takeRef takes a reference on mr for a placement: the one the engine
// holds (rx.held) if it is mr's, else a new one (false: the region is
// deregistered and idle).
func (rx *rxEngine) takeRef(mr *MR) bool {
	if mr == rx.held {
		rx.held = nil
		return true
	}
	return mr.acquire()
}

// dropRef gives up a reference taken with takeRef once its placement is
// over: the engine keeps it (rx.held) for the next FPDU that places into
// the same region, and releases the one it kept before. The reference
// kept is released before the engine reads the socket again and when it
// stops (releaseHeld), so a region stays referenced at most one socket
// read's worth of FPDUs longer than its placements need, and never while
// the engine waits for the peer.
func (rx *rxEngine) dropRef(mr *MR) {
	if rx.held != nil {
		rx.held.release()
	}
	rx.held = mr
}

// releaseHeld releases the reference dropRef kept.
func (rx *rxEngine) releaseHeld() {
	if rx.held != nil {
		rx.held.release()
		rx.held = nil
	}
}

// cutTerm is the Terminate for a segment whose target memory was
// invalidated or deregistered while it was being placed: the answer the
// header check would have given had the region been invalid then.
func (rx *rxEngine) cutTerm() *termInfo {
	switch rx.cur.op {
	case wire.OpWrite:
		return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeInvalidSTag)
	case wire.OpReadResponse:
		rx.qp.setWRStatus(rx.readResp, WCLocProtErr)
		return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeInvalidSTag)
	}
	rx.recvStatus = WCLocProtErr
	return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
}

// begin validates the FPDU whose ULPDU is ulen bytes long and starts with
// h (the DDP header; for control messages the whole ULPDU), and plans the
// placement of its payload. Nothing changes that a failed CRC would need
// undone. It returns the Terminate for an invalid FPDU.
func (rx *rxEngine) begin(ulen int, h []byte) *termInfo {
	hl := ddp.HeaderLen(h[0])
	rx.cur.ulpduLen, rx.cur.ddpHdrLen, rx.cur.payloadLen, rx.plan.n = ulen, hl, 0, 0
	binary.BigEndian.PutUint16(rx.cur.hdr[:], uint16(ulen))
	// The bytes of hdr past hdrLen are zero: clear only what the last
	// FPDU's headers used beyond this one's.
	prev := rx.cur.hdrLen
	switch d := rx.cur.hdr[mpa.LengthFieldLen:]; len(h) {
	case ddp.UntaggedHeaderLen: // copies of fixed size, without a call
		*(*[16]byte)(d) = [16]byte(h)
		d[16], d[17] = h[16], h[17]
	case ddp.TaggedHeaderLen:
		*(*[ddp.TaggedHeaderLen]byte)(d) = [ddp.TaggedHeaderLen]byte(h)
	default:
		copy(d, h)
	}
	rx.cur.hdrLen = mpa.LengthFieldLen + min(len(h), hdrCopy-mpa.LengthFieldLen)
	if prev > rx.cur.hdrLen {
		clear(rx.cur.hdr[rx.cur.hdrLen:prev])
	}
	dh, err := ddp.Parse(h)
	if err != nil {
		// RFC 5041 §7.2: invalid DDP version; siw sends no header back
		// (the layout is unknown).
		if h[0]&ddp.FlagTagged != 0 {
			return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeTaggedVersion)
		}
		return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeUntaggedVersion)
	}
	ver, _, op := wire.Control(dh.RsvdULP())
	rx.cur.op = op
	if ver != wire.Version1 {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeInvalidVersion, false)
	}
	if !rx.opAllowed(op) || op.Tagged() != dh.Tagged() {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnexpectedOpcode, false)
	}
	rx.cur.last = dh.Last()
	switch op {
	case wire.OpWrite:
		return rx.beginWrite(dh, ulen-hl)
	case wire.OpReadResponse:
		return rx.beginReadResp(dh, ulen-hl)
	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		return rx.beginSend(dh, op, ulen-hl)
	}
	if !rx.cur.last {
		// Read Requests, atomics, Immediate Data and Terminates are
		// single-segment messages (RFC 5040 §4.4, §4.8; RFC 7306).
		return rx.intersection()
	}
	body := ulen - hl
	size, minimum := ctrlBody(op)
	if body < minimum {
		ti := rx.termFor(errShortULPDU)
		return ti
	}
	if size >= 0 && body > size {
		// A Read Request (or atomic) carrying payload.
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnspecified, true)
	}
	if op == wire.OpTerminate {
		return nil // checked, as siw does, only to call it bogus
	}
	if err := rx.untagged.Single(dh, queueOf(op)); err != nil {
		return rx.termFor(err)
	}
	return nil
}

// beginWrite validates an RDMA Write segment (RFC 5041 §5.3, tagged
// buffer model; siw_write_check_ntoh and siw_proc_write).
func (rx *rxEngine) beginWrite(dh ddp.Header, plen int) *termInfo {
	if rx.tagged.Active() && rx.taggedOp != wire.OpWrite {
		return rx.intersection()
	}
	rx.cur.payloadLen = plen
	if err := rx.tagged.Segment(dh, plen, rx); err != nil {
		return rx.termFor(err)
	}
	rx.taggedOp = wire.OpWrite
	return nil
}

// CheckRegion is the tagged side of placement (ddp.Regions): it checks
// the region the current segment names, takes it (a Write's target is
// referenced while its message lasts) and plans the placement. The region
// is found through the device's STag lookup (Write) or the Read at the
// head of the ORQ (Read Response).
func (rx *rxEngine) CheckRegion(stag ddp.STag, to uint64, n int) error {
	qp := rx.qp
	if rx.cur.op == wire.OpReadResponse {
		o := rx.readResp
		st := o.mr.st.Load()
		b, e := o.mr.checkLocal(qp.pd, AccessLocalWrite, to, uint64(n))
		if e != accessOK {
			qp.setWRStatus(o, WCLocProtErr)
			return &ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.ErrorCode(e.ddpCode())}
		}
		rx.plan.dst[0], rx.plan.mr[0], rx.plan.word[0] = b, o.mr, st
		rx.plan.n = 1
		return nil
	}
	mr := rx.writeMR
	if mr == nil {
		mr = rx.lookupWrite(stag)
		if mr == nil || !rx.takeRef(mr) {
			return &ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.CodeInvalidSTag}
		}
		rx.writeMR = mr
	}
	st := mr.st.Load()
	b, e := mr.check(qp, stag, AccessRemoteWrite, to, uint64(n))
	if e != accessOK {
		return &ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.ErrorCode(e.ddpCode())}
	}
	rx.plan.dst[0], rx.plan.mr[0], rx.plan.word[0] = b, mr, st
	rx.plan.n = 1
	return nil
}

// lookupWrite finds the region a Write message names: the one the last
// Write named (rx.lastMR) while its STag word is still the valid word
// with this STag it was found with, else the device's table. The shortcut
// gives what the table would: a region leaves the table (and its index
// can name another) only after Deregister or Dealloc has invalidated it,
// which changes its word, and a rekey or re-registration changes the
// word too. The caller still checks and references what it gets, as
// for a lookup. lastMR holds no reference; it keeps the region's struct
// (and its mapping) reachable until a Write names another STag or the
// QP is released.
func (rx *rxEngine) lookupWrite(stag STag) *MR {
	if mr := rx.lastMR; mr != nil && STag(uint32(rx.lastWord)) == stag && mr.st.Load() == rx.lastWord {
		return mr
	}
	rx.lastMR = nil
	mr := rx.qp.dev.lookupMR(stag)
	if mr != nil {
		if w := mr.st.Load(); w&mrValid != 0 && STag(uint32(w)) == stag {
			rx.lastMR, rx.lastWord = mr, w
		}
	}
	return mr
}

// beginReadResp validates a Read Response segment against the Read at
// the head of the ORQ (siw_rresp_check_ntoh).
func (rx *rxEngine) beginReadResp(dh ddp.Header, plen int) *termInfo {
	qp := rx.qp
	if rx.tagged.Active() && rx.taggedOp != wire.OpReadResponse {
		return rx.intersection()
	}
	o := qp.orqFront()
	if o == nil || o.atomic {
		// A Read Response with no Read outstanding (siw: DDP, local
		// catastrophic).
		return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
	}
	// It lands where its Read said, from where the last segment ended,
	// and ends with the Read.
	rx.cur.payloadLen, rx.readResp = plen, o
	rx.tagged.Expect(o.sinkSTag, o.off+uint64(o.got), o.off+uint64(o.length))
	if err := rx.tagged.Segment(dh, plen, rx); err != nil {
		rx.readResp = nil
		return rx.termFor(err)
	}
	rx.taggedOp = wire.OpReadResponse
	return nil
}

// beginSend validates a Send segment and plans its scatter into the
// receive buffer (RFC 5041 §5.4, untagged buffer model;
// siw_send_check_ntoh and siw_proc_send).
func (rx *rxEngine) beginSend(dh ddp.Header, op wire.Opcode, plen int) *termInfo {
	_ = dh[ddp.UntaggedHeaderLen-1] // one bounds check for the fields read
	qp := rx.qp
	if err := rx.untagged.Segment(dh, wire.QNSend); err != nil {
		return rx.termFor(err)
	}
	if rx.untagged.Continues(dh) {
		if op != rx.recvOp {
			return rx.intersection()
		}
		if (op == wire.OpSendInv || op == wire.OpSendSEInv) && STag(dh.RsvdULP32()) != rx.recvInv {
			// Every segment of a Send with Invalidate names the same
			// STag.
			rx.recvStatus = WCRemInvReqErr
			return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCannotInvalidate, true)
		}
	} else {
		if plen == 0 && !rx.rtrSeen && !qp.p.Initiator && qp.p.P2P && qp.p.RTR == mpa.RTRSend && op == wire.OpSend && rx.cur.last {
			// The zero-length Send RTR: consumed, not delivered.
			rx.rtrSwallow = true
			return nil
		}
		if err := rx.untagged.Begin(dh, rx); err != nil {
			return rx.termFor(err)
		}
		rx.recvOp = op
		rx.recvStatus, rx.recvSGE, rx.recvSGEOff = WCSuccess, 0, 0
		rx.recvInv = STag(dh.RsvdULP32())
	}
	rx.cur.payloadLen = plen
	if err := rx.untagged.Fit(plen); err != nil {
		rx.recvStatus = WCLocLenErr
		return rx.termFor(err)
	}
	pd := qp.pdForRecv()
	for n := uint64(plen); n > 0; {
		if rx.recvSGE >= int(rx.recv.nsge) {
			// Unreachable while Fit holds (MO+plen <= the SGL's total
			// <= MaxRecvLen);
			// a guard, never an index past the SGL.
			rx.recvStatus = WCLocLenErr
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeNoBuffer)
		}
		s := &rx.recv.sgl[rx.recvSGE]
		avail := uint64(s.Length) - rx.recvSGEOff
		if avail == 0 {
			rx.recvSGE++
			rx.recvSGEOff = 0
			continue
		}
		k := min(avail, n)
		start := s.Offset + rx.recvSGEOff
		st := s.MR.st.Load()
		b, e := s.MR.checkLocal(pd, AccessLocalWrite, start, k)
		if e != accessOK || !rx.addRef(s.MR) {
			rx.recvStatus = WCLocProtErr
			return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
		}
		rx.plan.dst[rx.plan.n], rx.plan.mr[rx.plan.n], rx.plan.word[rx.plan.n] = b, s.MR, st
		rx.plan.n++
		rx.recvSGEOff += k
		n -= k
	}
	return nil
}

// TakeBuffer is the untagged side of placement (ddp.Buffers): the
// receive posted on the QP (or its SRQ) for the Send that begins, and its
// total length.
func (rx *rxEngine) TakeBuffer(qn uint32) (uint64, bool) {
	if qn != wire.QNSend || !rx.qp.takeRecv(&rx.recv) {
		return 0, false
	}
	if rx.recv.nsge == 1 {
		return uint64(rx.recv.sgl[0].Length), true
	}
	var total uint64
	for i := range rx.recv.nsge {
		total += uint64(rx.recv.sgl[i].Length)
	}
	return total, true
}

// end commits a received FPDU whose CRC checked: completions, MSNs, queued
// responses, invalidations, atomics. It returns the Terminate for an error
// found only now.
func (rx *rxEngine) end() *termInfo {
	qp := rx.qp
	if rx.cur.last {
		switch rx.cur.op {
		case wire.OpWrite:
			// No completion: counted with the next read.
		case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv, wire.OpImmData, wire.OpImmDataSE:
			// Counted before its completion is pushed (flushRecvs).
		default:
			// A Read Response or a control message: what it did is
			// counted before anyone can see it done.
			rx.publish()
		}
	}
	switch rx.cur.op {
	case wire.OpWrite:
		rx.tagged.Placed(rx.cur.last)
		if rx.cur.last && rx.writeMR != nil {
			rx.dropRef(rx.writeMR)
			rx.writeMR = nil
		}
	case wire.OpReadResponse:
		rx.readResp.got += uint32(rx.cur.payloadLen)
		rx.tagged.Placed(rx.cur.last)
		if rx.cur.last {
			rx.readResp = nil
			qp.completeORQ()
		}
	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		if rx.rtrSwallow {
			rx.rtrSwallow, rx.rtrSeen = false, true
			rx.untagged.Skip(wire.QNSend)
			return nil
		}
		rx.untagged.Placed(rx.cur.payloadLen, rx.cur.last)
		if rx.cur.last {
			return rx.completeRecv()
		}
	case wire.OpImmData, wire.OpImmDataSE:
		rx.untagged.Skip(wire.QNSend)
		if !qp.takeRecv(&rx.recv) {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeNoBuffer)
		}
		wc := WC{ID: rx.recv.id, Op: WCRecvImm, Flags: WCWithImm, QPN: qp.qpn,
			Imm: binary.BigEndian.Uint64(rx.cur.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:])}
		if rx.cur.op == wire.OpImmDataSE {
			wc.Flags |= WCSolicited
		}
		qp.pushRecv(&wc)
	case wire.OpReadRequest:
		return rx.readRequest()
	case wire.OpTerminate:
		rx.terminate()
	case wire.OpAtomicRequest:
		return rx.atomicRequest()
	case wire.OpAtomicResponse:
		return rx.atomicResponse()
	}
	return nil
}

// rxBatch is how many receive completions the receive engine gathers
// at most before it pushes them into the CQ: enough to make the lock of
// the RQ (rqPop), the counters (publish), the lock of the CQ and the
// wake-up a small part of a completion's cost, and, in the polling mode
// (QPConfig.PollRx), the driver's round (CQ.Wait takes the engine, runs
// it until a batch is pushed, gives it back, and the application polls
// and reposts). The engine pushes what it gathered before each read of
// the socket whatever the count, so a batch holds only completions of
// FPDUs one read brought, and latency does not depend on it.
// BenchmarkRxSmall (op=send, crc=false), CPU per 64-byte Send received:
// 8, 30 ns; 32, 23.3; 64, 22.2; later, on another machine, ns/fpdu in
// three interleaved rounds: 64, 20.3-20.8; 128, 19.4-19.9; 256,
// 19.3-19.8 (512 is more than the benchmark's receives). In test/bench,
// send/64 with the server polling went from 25.6-31.6 Mmsg/s (CPU
// 62.9-71.5 ns per message, both ends) with 64 to 30.6-31.8 (60.6-63.4)
// with 256, in four interleaved rounds. The array (8 KiB) comes from
// wcsPool while completions come in, so an idle QP carries none (with
// the array in the engine, 8 was what the idle-pair figure allowed).
const rxBatch = 256

// rxInlineWCs is how many gathered completions the engine holds in its
// own array (rxEngine.wcsInline) before it takes wcsPool's. In
// BenchmarkPingPong (mode=pollrx) the Get and Put of the pool's array
// for each message took about 190 instructions a round trip (callgrind,
// the difference of two -test.benchtime counts). One slot keeps the QP
// in its allocation size class: 4856 bytes and the heap's 8-byte header
// of an object with pointers fill the 4864-byte class (with four slots
// it took the next, 5376, and test/bench's idle pair grew by 1 KiB).
const rxInlineWCs = 1

// pushRecv queues a receive completion (receive engine only). The
// completions of one socket read are gathered and pushed into the CQ
// rxBatch at a time with one lock and one wake-up (flushRecvs), and the
// rest before the engine reads again: a waiter asleep in CQ.Wait is
// woken before the engine itself waits for the peer. A QP on an SRQ
// pushes each at once: the CQ's overrun bound (CQ.overflowBoundLocked)
// counts one receive completing per such QP.
func (qp *QP) pushRecv(wc *WC) {
	rx := &qp.rx
	*rx.nextWC() = *wc
	rx.gathered()
}

// putWCs gives the array of gathered completions back to wcsPool when
// it holds none.
func (rx *rxEngine) putWCs() {
	if rx.pooledWCs() && rx.nwcs == 0 {
		wcsPool.Put((*[rxBatch]WC)(rx.wcs))
		rx.wcs = rx.wcsInline[:]
	}
}

// pooledWCs reports whether wcs is wcsPool's array.
func (rx *rxEngine) pooledWCs() bool { return len(rx.wcs) == rxBatch }

// nextWC returns the slot of the next gathered completion,
// rx.wcs[rx.nwcs], moving to wcsPool's array when the inline slots are
// full. The caller writes every field of it (the slot holds an earlier
// completion, maybe another engine's) and then calls gathered.
func (rx *rxEngine) nextWC() *WC {
	if rx.nwcs == len(rx.wcs) {
		rx.growWCs()
	}
	return &rx.wcs[rx.nwcs]
}

// growWCs moves the gathered completions from wcsInline into wcsPool's
// array (nextWC, when the inline slots are full). It is not inlined, so
// that nextWC is, in the receive loops.
//
//go:noinline
func (rx *rxEngine) growWCs() {
	p := wcsPool.Get().(*[rxBatch]WC)
	copy(p[:], rx.wcs[:rx.nwcs])
	rx.wcs = p[:]
}

// gathered counts the completion just written into rx.wcs[rx.nwcs] as
// gathered, and flushes when pushRecv would.
func (rx *rxEngine) gathered() {
	rx.nwcs++
	if rx.nwcs == rxBatch || rx.qp.srq != nil {
		rx.flushRecvs()
	}
}

// flushRecvs pushes the gathered receive completions into the receive CQ
// in order, under one lock, and wakes its waiters (wakeBy: a PollRx
// driver running this engine is asked to yield, and looks at that after
// the FPDU and before it blocks in a read). First the receives taken
// leave the RQ (rqPop: reposting after polling a completion finds room)
// and the counters are published (what the FPDUs did is counted before
// anyone can poll their completions). An overrun fails the QPs of the
// CQ.
func (rx *rxEngine) flushRecvs() {
	if rx.rqPopped != rx.rqTaken {
		rx.qp.rqPop() // their receives leave the RQ first
	}
	if rx.nwcs == 0 {
		return
	}
	rx.publish()
	cq := rx.qp.rcq
	cq.mu.Lock()
	ok := cq.pushAllLocked(rx.wcs[:rx.nwcs])
	cq.mu.Unlock()
	rx.nwcs = 0
	cq.wakeBy(rx.qp)
	if !ok {
		cq.overflowed()
	}
}

// completeRecv completes the receive of the last segment of a Send,
// invalidating the Send with Invalidate's STag first (RFC 5040 §5.2).
func (rx *rxEngine) completeRecv() *termInfo {
	qp := rx.qp
	for i := range rx.recv.nsge {
		rx.recv.sgl[i].MR = nil
	}
	if rx.recvOp == wire.OpSend || rx.recvOp == wire.OpSendSE {
		// Nothing to invalidate: the completion is written in place,
		// among the gathered ones.
		wc := rx.nextWC()
		*wc = WC{ID: rx.recv.id, Op: WCRecv, ByteLen: rx.untagged.MO(), QPN: qp.qpn}
		if rx.recvOp == wire.OpSendSE {
			wc.Flags = WCSolicited
		}
		rx.gathered()
		return nil
	}
	// A Send with Invalidate.
	wc := WC{ID: rx.recv.id, Op: WCRecv, ByteLen: rx.untagged.MO(), QPN: qp.qpn}
	if rx.recvOp == wire.OpSendSEInv {
		wc.Flags |= WCSolicited
	}
	var ti *termInfo
	s := rx.recvInv
	switch qp.dev.invalidateSTag(qp, s, true) {
	case accessOK:
		wc.Flags |= WCWithInv
		wc.InvalidatedSTag = s
	case accessInvalidSTag:
		ti = rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCannotInvalidate, true)
	default:
		ti = rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, wire.CodeCannotInvalidate, true)
	}
	if ti != nil {
		wc.Status = WCRemInvReqErr
	}
	qp.pushRecv(&wc)
	return ti
}

// readRequest queues an inbound Read Request for the send engine, after
// checking the IRD and the source memory (RFC 5040 §5.3).
func (rx *rxEngine) readRequest() *termInfo {
	qp := rx.qp
	rr := wire.ReadRequest(rx.cur.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen : mpa.LengthFieldLen+ddp.UntaggedHeaderLen+wire.ReadRequestLen])
	if qp.irqFull() {
		// More Read Requests than the IRD (siw: RDMAP, remote operation,
		// catastrophic error localized to the stream).
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCatastrophicStream, true)
	}
	size := rr.Size()
	var pin *MR
	var src []byte
	if size > 0 {
		mr := qp.dev.lookupMR(rr.SrcSTag())
		if mr == nil {
			return rx.termReadReq(wire.CodeInvalidSTag)
		}
		st := mr.st.Load()
		b := mr.bind.Load()
		var e accessErr
		if src, e = mr.check(qp, rr.SrcSTag(), AccessRemoteRead, rr.SrcTO(), uint64(size)); e != accessOK {
			return rx.termReadReq(e.rdmapCode())
		}
		// pin keeps src mapped; an unchanged STag word means b is the
		// mapping check saw (a re-registration changes the key).
		if pin = mr.pin(b); !pin.acquire() {
			return rx.termReadReq(wire.CodeInvalidSTag)
		}
		if mr.st.Load() != st {
			pin.release()
			return rx.termReadReq(wire.CodeInvalidSTag)
		}
	}
	qp.irqPush(irqEntry{mr: pin, src: src, length: size, sinkSTag: rr.SinkSTag(), sinkTO: rr.SinkTO()})
	rx.untagged.Skip(wire.QNReadRequest)
	qp.ring()
	return nil
}

// terminate handles a received Terminate: the QP fails with the peer's
// error and sends nothing back (siw_proc_terminate).
func (rx *rxEngine) terminate() {
	qp := rx.qp
	dh := ddp.Header(rx.cur.hdr[mpa.LengthFieldLen : mpa.LengthFieldLen+rx.cur.ddpHdrLen])
	bogus := dh.QN() != wire.QNTerminate || dh.MSN() != rx.untagged.MSN(wire.QNTerminate) || dh.MO() != 0
	var t wire.Terminate
	body := rx.cur.hdr[mpa.LengthFieldLen+rx.cur.ddpHdrLen : rx.cur.hdrLen]
	var perr error
	if qp.p.TerminateLayoutSiw {
		// The peer is Linux siw: read its layout, no guessing.
		perr = wire.ParseTerminateLayout(body, wire.LayoutSiw, &t)
	} else {
		perr = wire.ParseTerminate(body, &t)
	}
	te := &TerminateError{Remote: true, Layer: t.Layer, EType: t.EType, Code: t.Code, Layout: t.Layout, Bogus: bogus || perr != nil}
	qp.stats.termRecvd.Add(1)
	qp.dev.stats.termRecvd.Add(1)
	qp.lg.Info("terminate received", zap.Stringer("layer", t.Layer),
		zap.String("type", wire.ETypeName(t.Layer, t.EType)), zap.String("code", wire.CodeName(t.Layer, t.EType, t.Code)),
		zap.Stringer("layout", t.Layout), zap.Bool("bogus", te.Bogus))
	// A Terminate about one of our Read or Atomic Requests fails that
	// work request with a remote error rather than a flush.
	if perr == nil && t.D && len(t.DDPHeader) == ddp.UntaggedHeaderLen && t.DDPHeader[0]&ddp.FlagTagged == 0 {
		th := ddp.Header(t.DDPHeader)
		if qn := th.QN(); qn == wire.QNReadRequest || qn == wire.QNAtomic {
			st := WCRemOpErr
			if t.Layer == wire.LayerRDMAP && t.EType == wire.ETypeRemoteProtection {
				st = WCRemAccessErr
			}
			qp.failRequest(qn == wire.QNAtomic, th.MSN(), st)
		}
	}
	qp.fail(te, nil)
}

// atomicRequest executes an inbound RFC 7306 atomic and queues its
// response. Atomics of one device are atomic with respect to each other;
// the target is a little-endian (host order) 64-bit word.
func (rx *rxEngine) atomicRequest() *termInfo {
	qp := rx.qp
	var a wire.AtomicRequest
	_ = wire.ParseAtomicRequest(rx.cur.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:], &a)
	if qp.irqFull() {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCatastrophicStream, true)
	}
	if a.Op != wire.AtomicFetchAdd && a.Op != wire.AtomicCmpSwap {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnexpectedOpcode, true)
	}
	mr := qp.dev.lookupMR(a.STag)
	if mr == nil {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, wire.CodeInvalidSTag, true)
	}
	st := mr.st.Load()
	p, e := mr.check(qp, a.STag, AccessRemoteAtomic, a.TO, 8)
	if e == accessOK && a.TO%8 != 0 {
		e = accessBounds
	}
	if e != accessOK {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, e.rdmapCode(), true)
	}
	if !mr.acquire() {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, wire.CodeInvalidSTag, true)
	}
	if !rx.enterPlace(mr, st) {
		mr.release()
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, wire.CodeInvalidSTag, true)
	}
	qp.dev.atomicMu.Lock()
	orig := binary.LittleEndian.Uint64(p)
	v := orig
	if a.Op == wire.AtomicFetchAdd {
		v = maskedAdd(orig, a.AddSwap, a.AddSwapMask)
	} else if (orig^a.Compare)&a.CompareMask == 0 {
		v = orig&^a.AddSwapMask | a.AddSwap&a.AddSwapMask
	}
	binary.LittleEndian.PutUint64(p, v)
	qp.dev.atomicMu.Unlock()
	rx.leavePlace(mr)
	mr.release()
	qp.irqPush(irqEntry{atomic: true, reqID: a.ReqID, orig: orig})
	rx.untagged.Skip(wire.QNAtomic)
	qp.ring()
	return nil
}

// maskedAdd adds y to x; a bit set in mask marks the top of a field, and
// no carry crosses it (RFC 7306 masked Fetch-and-Add). A zero mask is a
// plain 64-bit add.
func maskedAdd(x, y, mask uint64) uint64 {
	if mask == 0 {
		return x + y
	}
	var r, carry uint64
	for i := range 64 {
		s := x>>i&1 + y>>i&1 + carry
		r |= (s & 1) << i
		carry = s >> 1
		if mask>>i&1 != 0 {
			carry = 0
		}
	}
	return r
}

// atomicResponse completes the atomic at the head of the ORQ.
func (rx *rxEngine) atomicResponse() *termInfo {
	qp := rx.qp
	var a wire.AtomicResponse
	_ = wire.ParseAtomicResponse(rx.cur.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:], &a)
	o := qp.orqFront()
	if o == nil || !o.atomic || o.reqID != a.ReqID {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnexpectedOpcode, true)
	}
	rx.untagged.Skip(wire.QNAtomic)
	st := o.mr.st.Load()
	p, e := o.mr.checkLocal(qp.pd, AccessLocalWrite, o.off, 8)
	if e != accessOK || !rx.enterPlace(o.mr, st) {
		qp.setWRStatus(o, WCLocProtErr)
		return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
	}
	binary.LittleEndian.PutUint64(p, a.OriginalValue)
	rx.leavePlace(o.mr)
	qp.completeORQ()
	return nil
}

// completeORQ completes the Read or atomic at the head of the ORQ
// (receive engine only), after the receive completions gathered before
// it.
func (qp *QP) completeORQ() {
	qp.rx.flushRecvs()
	qp.sqMu.Lock()
	o := qp.orq.pop()
	if !o.hidden {
		qp.sq.at(o.sqIdx).state = sqDone
	}
	if o.mr != nil {
		o.mr.release()
	}
	*o = orqEntry{}
	ok := qp.sweepLocked()
	qp.sqMu.Unlock()
	if !ok {
		qp.scq.overflowed()
	}
	qp.ring()
}

// setWRStatus gives the work request of an ORQ entry an error status; it
// completes with it when the QP is flushed.
func (qp *QP) setWRStatus(o *orqEntry, st WCStatus) {
	if o.hidden {
		return
	}
	qp.sqMu.Lock()
	qp.sq.at(o.sqIdx).status = st
	qp.sqMu.Unlock()
}

// failRequest gives the outstanding Read (or atomic) sent with the given
// MSN the status st.
func (qp *QP) failRequest(atomic bool, msn uint32, st WCStatus) {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	for i := qp.orq.head; i != qp.orq.tail; i++ {
		o := qp.orq.at(i)
		if !o.hidden && o.atomic == atomic && o.msn == msn {
			qp.sq.at(o.sqIdx).status = st
			return
		}
	}
}
