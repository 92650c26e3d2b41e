package rdmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/internal/bufpool"
	"github.com/gosiw/gosiw/rdmap/internal/sys"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// The receive engine (one goroutine per QP). Without markers it reads
// header first and places payload without an intermediate copy:
//
//	socket ──> rx buffer: ULPDU_Length, DDP header (+ RDMAP header)
//	             │ begin: validate (STag, PD, rights, bounds / QN, MSN, MO,
//	             │        a posted receive and its length), plan placement
//	             v
//	socket ──> target memory (io.ReadFull into the MR for the payload left
//	             │          after what the buffer already holds), CRC32c
//	             │          updated over the placed bytes
//	             v
//	           pad + CRC: check ──> end: commit (completions, MSNs, IRQ,
//	                                     invalidation, atomics)
//
// Placement before validation of the whole FPDU: RFC 5041 separates
// Placement (putting a segment's payload where its header says) from
// Delivery (telling the ULP a message is complete), lets a Data Sink
// place each segment as it arrives, and leaves a failed message
// undelivered with the bytes it placed undefined. Linux siw, too, places
// payload into the target before it has checked the CRC (siw_rx_umem
// updates the CRC over the placed bytes). What must not happen before
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
// Header first (issue 9): the DDP header, with the RDMAP control byte in
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
// With markers (or QPConfig.BufferedRx) the engine uses mpa.Deframer,
// which reads whole FPDUs, removes markers and checks the CRC first; the
// payload is then copied from its buffer. Its headers are checked once
// the whole FPDU is in (at most 64 KiB, and bounded by the stall timeout).

const (
	rxBufSize = 96 << 10 // holds any FPDU (65544 bytes) plus read-ahead
	// directMin is the payload remainder from which the engine reads
	// straight into the target instead of through its buffer.
	directMin = 4 << 10
	// bigSlack is how far past what it needs the engine reads while
	// payloads are large, so headers come with the previous trailer
	// without pulling the next payload into the buffer.
	bigSlack = 64
	// hdrCopy is how much of an FPDU's start the engine keeps for the
	// Terminate it may have to send.
	hdrCopy = mpa.LengthFieldLen + maxCtrlHdr
)

var rxPool = bufpool.New(rxBufSize)

// rxEngine is the receive engine's state, owned by the receive goroutine
// (ended and selfClosed are read by the send goroutine).
type rxEngine struct {
	qp       *QP
	conn     net.Conn
	crc      bool
	buffered bool
	df       *mpa.Deframer
	bufp     *[]byte
	b        []byte
	r, w     int
	big      bool

	rawc       syscall.RawConn
	viov       [2][]byte
	vn         int
	verr       error
	vfn        func(uintptr) bool
	ended      atomic.Bool // the receive goroutine has stopped reading
	selfClosed atomic.Bool // the send engine closed the connection itself
	// placing is the region a placement is writing into (nil between
	// placements), for fences to find whom to poke (MR.fence).
	placing atomic.Pointer[MR]
	// shutdownAt is the read deadline the send engine set when it shut
	// its side down (Unix ns; 0: none). See rxio.go.
	shutdownAt atomic.Int64
	stall      time.Duration // QPConfig.RxStallTimeout (0: off)
	progressAt time.Time     // when a read last returned data
	armed      bool          // the stall deadline is set
	inFPDU     bool          // fpduDirect is past the first bytes of an FPDU
	draining   bool
	// The placement in progress on the raw path (readvFD's check).
	curMR *MR
	curST uint64
	// err is the receive direction's first fatal error (sticky): the
	// Terminate it detected, or why reading stopped.
	err error

	// The current FPDU.
	hdr    [hdrCopy]byte // ULPDU_Length and the headers
	hn     int
	ulen   int
	ddpLen int
	op     wire.Opcode
	last   bool
	plen   int
	plan   [MaxSGE + 1][]byte
	planMR [MaxSGE + 1]*MR    // the region of each plan entry
	planST [MaxSGE + 1]uint64 // its STag word when validated
	nplan  int
	refs   [MaxSGE + 1]*MR
	nrefs  int
	c      uint32
	ti     termInfo
	first  bool

	msn [4]uint32 // expected MSN per untagged queue (QN 0..3), from 1

	// The untagged (QN 0) message in progress.
	recvActive bool
	recv       rqEntry
	recvMSN    uint32
	recvMO     uint32
	recvTotal  uint64
	recvSge    int
	recvSgeOff uint64
	recvStatus WCStatus
	recvOp     wire.Opcode
	recvInv    STag
	rtrSwallow bool
	rtrSeen    bool

	// The tagged message in progress.
	tagActive bool
	tagOp     wire.Opcode
	tagSTag   STag
	tagTO     uint64
	tagMR     *MR // Write target, referenced while the message lasts
	orqE      *orqEntry
}

func (rx *rxEngine) init(qp *QP, conn net.Conn) {
	rx.qp, rx.conn = qp, conn
	rx.crc = qp.p.CRC
	rx.msn = [4]uint32{1, 1, 1, 1}
	rx.stall = qp.cfg.RxStallTimeout
	rx.buffered = qp.cfg.BufferedRx || qp.p.MarkersRx || len(qp.p.Leftover) > rxBufSize/2
	if rx.buffered {
		var r io.Reader = rxReader{rx}
		if len(qp.p.Leftover) > 0 {
			r = io.MultiReader(bytes.NewReader(qp.p.Leftover), r)
		}
		rx.df = mpa.NewDeframer(r, mpa.DeframerConfig{CRC: qp.p.CRC, Markers: qp.p.MarkersRx})
		return
	}
	rx.bufp = rxPool.Get()
	rx.b = *rx.bufp
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rx.rawc = rc
			rx.vfn = rx.readvFD
		}
	}
	rx.w = copy(rx.b, qp.p.Leftover)
}

func (rx *rxEngine) release() {
	rx.dropRefs()
	if rx.tagMR != nil {
		rx.tagMR.release()
		rx.tagMR = nil
	}
	rx.orqE = nil
	if rx.bufp != nil {
		rxPool.Put(rx.bufp)
		rx.bufp, rx.b = nil, nil
	}
	rx.df = nil
}

// rxLoop is the receive goroutine. When it stops reading it waits for the
// send goroutine and then finishes the QP.
func (qp *QP) rxLoop(conn net.Conn) {
	rx := &qp.rx
	err := qp.guardRx(rx.run) // a fault in registered memory fails this QP only
	rx.ended.Store(true)
	if rx.err == nil && err != io.EOF {
		rx.err = err
	}
	qp.rxEnd(conn, err)
	<-qp.txDone
	qp.finish()
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
	case errors.Is(err, io.ErrUnexpectedEOF):
		// Best effort: the peer may still read after its FIN.
		ti := llpTerm(mpa.TermTCPClosed)
		ti.cause = errTruncated
		qp.fail(ti.err(), ti)
	case errors.Is(err, ErrRxStalled):
		ti := llpTerm(mpa.TermTCPClosed)
		ti.cause = ErrRxStalled
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
		qp.sqMu.Lock()
		qp.sqMode = postRefuse
		qp.sqMu.Unlock()
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
	if !rx.first {
		rx.first = true
		close(rx.qp.rxFirst)
	}
}

// drain reads and drops what the peer still sends until the connection
// ends (the send engine bounds the wait with a read deadline).
func (rx *rxEngine) drain() error {
	var tmp [4096]byte
	buf := tmp[:]
	if rx.b != nil {
		buf = rx.b
		rx.r, rx.w = 0, 0
	}
	rx.draining = true
	for {
		if _, err := rx.read(buf); err != nil {
			return err
		}
	}
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// runDirect is the header-first receive path (no markers).
func (rx *rxEngine) runDirect() error {
	qp := rx.qp
	for {
		if qp.broken.Load() {
			return rx.drain()
		}
		ti, err := rx.fpduDirect()
		rx.inFPDU = false
		rx.dropRefs()
		if err != nil {
			return err
		}
		if ti != nil {
			rx.failWith(ti)
		}
	}
}

// fill makes n bytes available in b[r:]. It returns io.EOF only when the
// stream ended with nothing buffered.
func (rx *rxEngine) fill(n int) error {
	if rx.w-rx.r >= n {
		return nil
	}
	if rx.r == rx.w {
		rx.r, rx.w = 0, 0
	} else if rx.r+n > len(rx.b) {
		rx.w = copy(rx.b, rx.b[rx.r:rx.w])
		rx.r = 0
	}
	for {
		limit := len(rx.b)
		if rx.big {
			limit = min(limit, rx.r+n+bigSlack)
		}
		m, err := rx.read(rx.b[rx.w:limit])
		rx.w += m
		if rx.w-rx.r >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && rx.w > rx.r {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

// readInto fills d, part of mr validated with the STag word want, with
// the next payload bytes: first from the buffer, then, for a long
// remainder, straight from the socket. Every write into d happens inside
// a placement (enterPlace .. leavePlace) and only while mr's STag word is
// still want; it returns errCut as soon as it is not. Waiting for bytes
// that go through the buffer is not a placement.
func (rx *rxEngine) readInto(d []byte, mr *MR, want uint64) error {
	if !rx.enterPlace(mr, want) {
		return errCut
	}
	n := copy(d, rx.b[rx.r:rx.w])
	rx.r += n
	if n > 0 {
		rx.qp.stats.rxCopied.Add(uint64(n))
	}
	d = d[n:]
	if len(d) == 0 {
		rx.leavePlace(mr)
		return nil
	}
	if len(d) >= directMin {
		rx.qp.stats.rxDirect.Add(uint64(len(d)))
		var err error
		if rx.rawc != nil {
			rx.curMR, rx.curST = mr, want
			err = rx.readDirect(d)
			rx.curMR = nil
		} else {
			err = rx.readFull(d, mr, want)
		}
		rx.leavePlace(mr)
		return unexpected(err)
	}
	rx.leavePlace(mr)
	if err := rx.fill(len(d)); err != nil {
		return unexpected(err)
	}
	if !rx.enterPlace(mr, want) {
		return errCut
	}
	copy(d, rx.b[rx.r:rx.r+len(d)])
	rx.leavePlace(mr)
	rx.r += len(d)
	rx.qp.stats.rxCopied.Add(uint64(len(d)))
	return nil
}

// readIntoCRC is readInto under CRC: the payload goes through the buffer
// and is folded into the CRC there, before it is copied into d, so that
// the CRC checks the bytes that arrived even when d's memory changes
// meanwhile (the application, or another connection placing into a
// shared region); a check over d after placement would see those changes
// as a CRC error and end the connection.
//
// Like readInto, every copy into d is a placement into mr, made only while
// mr's STag word is still want (errCut when it is not); waiting for the
// next bytes is not.
func (rx *rxEngine) readIntoCRC(d []byte, mr *MR, want uint64) error {
	for len(d) > 0 {
		if rx.r == rx.w {
			if err := rx.fill(1); err != nil {
				return unexpected(err)
			}
		}
		src := rx.b[rx.r:min(rx.w, rx.r+len(d))]
		rx.c = mpa.UpdateCRC(rx.c, src)
		if !rx.enterPlace(mr, want) {
			return errCut
		}
		n := copy(d, src)
		rx.leavePlace(mr)
		rx.r += n
		d = d[n:]
		rx.qp.stats.rxCopied.Add(uint64(n))
	}
	return nil
}

// readDirect reads d straight from the socket and, in the same readv, up
// to lookahead bytes that follow (the trailer and the next header) into
// the buffer, which readInto has drained: one syscall per large FPDU
// instead of a payload read plus a small trailer read.
func (rx *rxEngine) readDirect(d []byte) error {
	const lookahead = bigSlack + 8
	rx.r, rx.w = 0, 0
	rx.arm()
	for len(d) > 0 {
		rx.viov[0] = d
		rx.viov[1] = rx.b[rx.w:min(len(rx.b), rx.w+lookahead)]
		err := rx.rawc.Read(rx.vfn)
		n := rx.vn
		if err == nil {
			err = rx.verr
		}
		if err != nil {
			rx.viov = [2][]byte{}
			if err == errCut || !errors.Is(err, os.ErrDeadlineExceeded) {
				return err
			}
			if !placeValid(rx.curMR, rx.curST) {
				return errCut
			}
			if err = rx.expired(); err != nil {
				return err
			}
			continue
		}
		if n == 0 {
			return io.EOF
		}
		rx.progress()
		if n <= len(d) {
			d = d[n:]
			continue
		}
		rx.w += n - len(d)
		d = nil
	}
	rx.viov = [2][]byte{}
	return nil
}

// readvFD is readDirect's raw read: false asks the poller to wait for
// the socket to become readable.
func (rx *rxEngine) readvFD(fd uintptr) bool {
	for {
		if !placeValid(rx.curMR, rx.curST) {
			rx.vn, rx.verr = 0, errCut
			return true
		}
		n, err := sys.Readv(fd, rx.viov[:])
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		rx.vn, rx.verr = n, err
		if err != nil {
			rx.vn, rx.verr = 0, os.NewSyscallError("readv", err)
		}
		return true
	}
}

// fpduDirect receives one FPDU on the header-first path.
func (rx *rxEngine) fpduDirect() (*termInfo, error) {
	if err := rx.fill(mpa.LengthFieldLen); err != nil {
		return nil, err
	}
	rx.gotFirst()
	rx.inFPDU = true
	ulen := int(binary.BigEndian.Uint16(rx.b[rx.r:]))
	if ulen < ddp.TaggedHeaderLen {
		return rx.malformedDirect(ulen)
	}
	if err := rx.fill(mpa.LengthFieldLen + 1); err != nil {
		return nil, unexpected(err)
	}
	hl := ddp.HeaderLen(rx.b[rx.r+mpa.LengthFieldLen])
	if ulen < hl {
		return rx.malformedDirect(ulen)
	}
	// Header first: the DDP header (with the RDMAP control byte) is
	// checked as soon as it is in, before any byte of the rest is
	// awaited; a control message's body (the rest of its ULPDU) is read
	// only once its header passed.
	if err := rx.fill(mpa.LengthFieldLen + hl); err != nil {
		return nil, unexpected(err)
	}
	h := rx.b[rx.r : rx.r+mpa.LengthFieldLen+hl]
	rx.c = 0
	if rx.crc {
		rx.c = mpa.UpdateCRC(0, h)
	}
	rx.r += len(h)
	if ti := rx.begin(ulen, h[mpa.LengthFieldLen:]); ti != nil {
		if !rx.crc {
			// Nothing to wait for: answer now (as siw does); the rest
			// of the FPDU is drained with the stream.
			return ti, nil
		}
		return rx.discardRest(ulen-hl, ti)
	}
	if need := headerNeed(h[mpa.LengthFieldLen:], ulen); need > hl {
		if err := rx.fill(need - hl); err != nil {
			return nil, unexpected(err)
		}
		body := rx.b[rx.r : rx.r+need-hl]
		if rx.crc {
			rx.c = mpa.UpdateCRC(rx.c, body)
		}
		rx.hn += copy(rx.hdr[rx.hn:], body)
		rx.r += len(body)
	}
	for i := range rx.nplan {
		d := rx.plan[i]
		var err error
		if rx.crc {
			err = rx.readIntoCRC(d, rx.planMR[i], rx.planST[i])
		} else {
			err = rx.readInto(d, rx.planMR[i], rx.planST[i])
		}
		if err != nil {
			if err == errCut {
				return rx.cutTerm(), nil
			}
			return nil, err
		}
		rx.plan[i] = nil
	}
	// Read the buffer one FPDU at a time only when the payload will go
	// straight from the socket into memory (readInto's direct case);
	// shorter payloads are copied through the buffer anyway, so read ahead.
	rx.big = !rx.crc && rx.plen >= directMin+bigSlack
	if ti, err := rx.trailer(ulen); ti != nil || err != nil {
		return ti, err
	}
	rx.qp.stats.rxFPDUs.Add(1)
	rx.qp.stats.rxBytes.Add(uint64(mpa.FPDULen(ulen)))
	return rx.end(), nil
}

// trailer reads pad and CRC and checks the CRC.
func (rx *rxEngine) trailer(ulen int) (*termInfo, error) {
	pad := mpa.PadLen(ulen)
	if err := rx.fill(pad + mpa.CRCLen); err != nil {
		return nil, unexpected(err)
	}
	t := rx.b[rx.r : rx.r+pad+mpa.CRCLen]
	rx.r += len(t)
	if !rx.crc {
		return nil, nil
	}
	if mpa.UpdateCRC(rx.c, t[:pad]) != mpa.GetCRC(t[pad:]) {
		rx.qp.stats.crcErrors.Add(1)
		return rx.crcTerm(), nil
	}
	return nil, nil
}

func (rx *rxEngine) crcTerm() *termInfo {
	ti := &rx.ti
	*ti = termInfo{layer: wire.LayerLLP, etype: mpa.TermTypeMPA, code: uint8(mpa.TermCRC), cause: mpa.ErrBadCRC}
	return ti
}

// discardRest reads the n ULPDU bytes left of an FPDU whose header failed
// validation, and its trailer, through the CRC: with CRC in use, a bad
// CRC is what gets reported (the header itself may be what is corrupt).
func (rx *rxEngine) discardRest(n int, ti *termInfo) (*termInfo, error) {
	for n > 0 {
		k := min(n, rxBufSize/2)
		if err := rx.fill(k); err != nil {
			return nil, unexpected(err)
		}
		if rx.crc {
			rx.c = mpa.UpdateCRC(rx.c, rx.b[rx.r:rx.r+k])
		}
		rx.r += k
		n -= k
	}
	saved := *ti
	crcTi, err := rx.trailer(rx.ulen)
	if err != nil {
		return nil, err
	}
	if crcTi != nil {
		return crcTi, nil
	}
	rx.ti = saved
	return &rx.ti, nil
}

// malformedDirect handles a ULPDU too short for the DDP header it
// announces: siw answers LLP/MPA "marker and ULPDU length mismatch".
func (rx *rxEngine) malformedDirect(ulen int) (*termInfo, error) {
	rx.ulen = ulen
	rx.c = 0
	if !rx.crc {
		return rx.shortTerm(), nil
	}
	if err := rx.fill(mpa.LengthFieldLen + ulen); err != nil {
		return nil, unexpected(err)
	}
	if rx.crc {
		rx.c = mpa.UpdateCRC(0, rx.b[rx.r:rx.r+mpa.LengthFieldLen+ulen])
	}
	rx.r += mpa.LengthFieldLen + ulen
	if ti, err := rx.trailer(ulen); ti != nil || err != nil {
		return ti, err
	}
	return rx.shortTerm(), nil
}

func (rx *rxEngine) shortTerm() *termInfo {
	ti := &rx.ti
	*ti = termInfo{layer: wire.LayerLLP, etype: mpa.TermTypeMPA, code: uint8(mpa.TermMarker), cause: errShortULPDU}
	return ti
}

var errShortULPDU = errors.New("rdmap: ULPDU too short for its headers")

// runBuffered is the receive path through mpa.Deframer (markers, or
// QPConfig.BufferedRx).
func (rx *rxEngine) runBuffered() error {
	qp := rx.qp
	for {
		if qp.broken.Load() {
			return rx.drain()
		}
		f, err := rx.df.Next()
		if err == mpa.ErrBadCRC {
			rx.gotFirst()
			qp.stats.crcErrors.Add(1)
			rx.failWith(rx.crcTerm())
			continue
		}
		if err != nil {
			if len(rx.df.Buffered()) > 0 {
				rx.gotFirst() // part of an FPDU came: the peer has spoken
			}
			return err
		}
		rx.gotFirst()
		qp.stats.rxFPDUs.Add(1)
		qp.stats.rxBytes.Add(uint64(f.WireLen))
		ti := rx.fpduBuffered(f.ULPDU)
		rx.dropRefs()
		if ti != nil {
			rx.failWith(ti)
		}
	}
}

func (rx *rxEngine) fpduBuffered(ul []byte) *termInfo {
	ulen := len(ul)
	rx.ulen = ulen
	if ulen < ddp.TaggedHeaderLen || ulen < ddp.HeaderLen(ul[0]) {
		return rx.shortTerm()
	}
	need := headerNeed(ul[:ddp.HeaderLen(ul[0])], ulen)
	if ti := rx.begin(ulen, ul[:need]); ti != nil {
		return ti
	}
	p := ul[need:]
	for i := range rx.nplan {
		mr := rx.planMR[i]
		if !rx.enterPlace(mr, rx.planST[i]) {
			return rx.cutTerm()
		}
		n := copy(rx.plan[i], p)
		rx.leavePlace(mr)
		p = p[n:]
		rx.plan[i] = nil
		rx.qp.stats.rxCopied.Add(uint64(n))
	}
	return rx.end()
}

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
	ti := &rx.ti
	*ti = termInfo{layer: layer, etype: etype, code: code}
	if hdrs {
		ti.m = true
		ti.ddpLen = copy(ti.ddpHdr[:], rx.hdr[mpa.LengthFieldLen:mpa.LengthFieldLen+rx.ddpLen])
		ti.ulpduLen = rx.ulen
		ti.payLen = max(rx.ulen-rx.ddpLen-rdmapHdrLen(rx.op, rx.ulen-rx.ddpLen), 0)
	}
	return ti
}

func (rx *rxEngine) termDDP(etype ddp.ErrorType, code ddp.ErrorCode) *termInfo {
	return rx.term(wire.LayerDDP, uint8(etype), uint8(code), true)
}

// termReadReq is an RDMAP remote protection error on a Read Request: M, D
// and R, with the Read Request header.
func (rx *rxEngine) termReadReq(code uint8) *termInfo {
	ti := rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, code, true)
	ti.hasRDMA = true
	copy(ti.rdmaHdr[:], rx.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:])
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
	if !mr.acquire() {
		return false
	}
	rx.refs[rx.nrefs] = mr
	rx.nrefs++
	return true
}

func (rx *rxEngine) dropRefs() {
	for i := range rx.nrefs {
		rx.refs[i].release()
		rx.refs[i] = nil
	}
	rx.nrefs = 0
	for i := range rx.nplan {
		rx.plan[i] = nil
		rx.planMR[i] = nil
	}
	rx.nplan = 0
}

// cutTerm is the Terminate for a segment whose target memory was
// invalidated or deregistered while it was being placed: the answer the
// header check would have given had the region been invalid then.
func (rx *rxEngine) cutTerm() *termInfo {
	switch rx.op {
	case wire.OpWrite:
		return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeInvalidSTag)
	case wire.OpReadResponse:
		rx.qp.setWRStatus(rx.orqE, WCLocProtErr)
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
	rx.ulen, rx.ddpLen, rx.plen, rx.nplan = ulen, hl, 0, 0
	binary.BigEndian.PutUint16(rx.hdr[:], uint16(ulen))
	rx.hn = mpa.LengthFieldLen + copy(rx.hdr[mpa.LengthFieldLen:], h)
	clear(rx.hdr[rx.hn:])
	dh, err := ddp.Parse(h)
	if err != nil {
		// RFC 5041 §7.2: invalid DDP version; siw sends no header back
		// (the layout is unknown).
		if h[0]&ddp.FlagTagged != 0 {
			return rx.term(wire.LayerDDP, uint8(ddp.ErrTypeTagged), uint8(ddp.CodeTaggedVersion), false)
		}
		return rx.term(wire.LayerDDP, uint8(ddp.ErrTypeUntagged), uint8(ddp.CodeUntaggedVersion), false)
	}
	ver, _, op := wire.Control(dh.RsvdULP())
	rx.op = op
	if ver != wire.Version1 {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeInvalidVersion, false)
	}
	if !rx.opAllowed(op) || op.Tagged() != dh.Tagged() {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnexpectedOpcode, false)
	}
	rx.last = dh.Last()
	switch op {
	case wire.OpWrite:
		return rx.beginWrite(dh, ulen-hl)
	case wire.OpReadResponse:
		return rx.beginReadResp(dh, ulen-hl)
	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		return rx.beginSend(dh, op, ulen-hl)
	}
	if !rx.last {
		// Read Requests, atomics, Immediate Data and Terminates are
		// single-segment messages (RFC 5040 §4.4, §4.8; RFC 7306).
		return rx.intersection()
	}
	body := ulen - hl
	size, minimum := ctrlBody(op)
	if body < minimum {
		ti := rx.shortTerm()
		return ti
	}
	if size >= 0 && body > size {
		// A Read Request (or atomic) carrying payload.
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnspecified, true)
	}
	if op == wire.OpTerminate {
		return nil // checked, as siw does, only to call it bogus
	}
	qn := dh.QN()
	if qn != queueOf(op) {
		return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeInvalidQN)
	}
	if dh.MSN() != rx.msn[qn] || (qn == wire.QNSend && rx.recvActive) {
		return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeMSNRange)
	}
	if dh.MO() != 0 {
		return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeInvalidMO)
	}
	return nil
}

// beginWrite validates an RDMA Write segment (RFC 5041 §5.3, tagged
// buffer model; siw_write_check_ntoh and siw_proc_write).
func (rx *rxEngine) beginWrite(dh ddp.Header, plen int) *termInfo {
	qp := rx.qp
	stag, to := dh.STag(), dh.TO()
	if rx.tagActive {
		if rx.tagOp != wire.OpWrite {
			return rx.intersection()
		}
		if stag != rx.tagSTag {
			return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeInvalidSTag)
		}
		if to != rx.tagTO {
			return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeBaseBounds)
		}
	}
	rx.plen = plen
	if plen > 0 {
		// A zero-length Write is accepted without a check (siw does; the
		// P2P RTR is one, to STag 1).
		mr := rx.tagMR
		if mr == nil {
			mr = qp.dev.lookupMR(stag)
			if mr == nil || !mr.acquire() {
				return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeInvalidSTag)
			}
			rx.tagMR = mr
		}
		st := mr.st.Load()
		if e := mr.check(qp.pd, stag, AccessRemoteWrite, to, uint64(plen)); e != accessOK {
			return rx.term(wire.LayerDDP, uint8(ddp.ErrTypeTagged), e.ddpCode(), true)
		}
		rx.plan[0], rx.planMR[0], rx.planST[0] = mr.buf[to:to+uint64(plen)], mr, st
		rx.nplan = 1
	}
	rx.tagActive, rx.tagOp, rx.tagSTag, rx.tagTO = true, wire.OpWrite, stag, to+uint64(plen)
	return nil
}

// beginReadResp validates a Read Response segment against the Read at
// the head of the ORQ (siw_rresp_check_ntoh).
func (rx *rxEngine) beginReadResp(dh ddp.Header, plen int) *termInfo {
	qp := rx.qp
	if rx.tagActive && rx.tagOp != wire.OpReadResponse {
		return rx.intersection()
	}
	o := qp.orqFront()
	if o == nil || o.atomic {
		// A Read Response with no Read outstanding (siw: DDP, local
		// catastrophic).
		return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
	}
	stag, to := dh.STag(), dh.TO()
	if stag != o.sinkSTag {
		return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeInvalidSTag)
	}
	if to != o.off+uint64(o.got) || uint64(o.got)+uint64(plen) > uint64(o.length) ||
		(rx.last && o.got+uint32(plen) != o.length) {
		return rx.termDDP(ddp.ErrTypeTagged, ddp.CodeBaseBounds)
	}
	rx.plen = plen
	if plen > 0 {
		start := o.off + uint64(o.got)
		st := o.mr.st.Load()
		if e := o.mr.checkLocal(qp.pd, AccessLocalWrite, start, uint64(plen)); e != accessOK {
			qp.setWRStatus(o, WCLocProtErr)
			return rx.term(wire.LayerDDP, uint8(ddp.ErrTypeTagged), e.ddpCode(), true)
		}
		rx.plan[0], rx.planMR[0], rx.planST[0] = o.mr.buf[start:start+uint64(plen)], o.mr, st
		rx.nplan = 1
	}
	rx.orqE = o
	rx.tagActive, rx.tagOp = true, wire.OpReadResponse
	return nil
}

// beginSend validates a Send segment and plans its scatter into the
// receive buffer (RFC 5041 §5.4, untagged buffer model;
// siw_send_check_ntoh and siw_proc_send).
func (rx *rxEngine) beginSend(dh ddp.Header, op wire.Opcode, plen int) *termInfo {
	qp := rx.qp
	msn, mo := dh.MSN(), dh.MO()
	if dh.QN() != wire.QNSend {
		return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeInvalidQN)
	}
	if rx.recvActive {
		if msn != rx.recvMSN {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeMSNRange)
		}
		if mo != rx.recvMO {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeInvalidMO)
		}
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
		if msn != rx.msn[wire.QNSend] {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeMSNRange)
		}
		if mo != 0 {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeInvalidMO)
		}
		if !rx.rtrSeen && !qp.p.Initiator && qp.p.P2P && qp.p.RTR == mpa.RTRSend && op == wire.OpSend && plen == 0 && rx.last {
			// The zero-length Send RTR: consumed, not delivered.
			rx.rtrSwallow = true
			return nil
		}
		if !qp.takeRecv(&rx.recv) {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeNoBuffer)
		}
		rx.recvActive, rx.recvMSN, rx.recvMO, rx.recvOp = true, msn, 0, op
		rx.recvStatus, rx.recvSge, rx.recvSgeOff = WCSuccess, 0, 0
		rx.recvInv = STag(dh.RsvdULP32())
		rx.recvTotal = 0
		for i := range rx.recv.nsge {
			rx.recvTotal += uint64(rx.recv.sgl[i].Length)
		}
	}
	rx.plen = plen
	if uint64(rx.recvMO)+uint64(plen) > rx.recvTotal {
		// siw reports a Send too long for the buffer as "no buffer"
		// (0x02), not RFC 5041's "message too long" (0x05).
		rx.recvStatus = WCLocLenErr
		return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeNoBuffer)
	}
	pd := qp.pdForRecv()
	for n := uint64(plen); n > 0; {
		if rx.recvSge >= int(rx.recv.nsge) {
			// Unreachable while recvMO+plen <= recvTotal <= MaxRecvLen;
			// a guard, never an index past the SGL.
			rx.recvStatus = WCLocLenErr
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeNoBuffer)
		}
		s := &rx.recv.sgl[rx.recvSge]
		avail := uint64(s.Length) - rx.recvSgeOff
		if avail == 0 {
			rx.recvSge++
			rx.recvSgeOff = 0
			continue
		}
		k := min(avail, n)
		start := s.Offset + rx.recvSgeOff
		st := s.MR.st.Load()
		if s.MR.checkLocal(pd, AccessLocalWrite, start, k) != accessOK || !rx.addRef(s.MR) {
			rx.recvStatus = WCLocProtErr
			return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
		}
		rx.plan[rx.nplan], rx.planMR[rx.nplan], rx.planST[rx.nplan] = s.MR.buf[start:start+k], s.MR, st
		rx.nplan++
		rx.recvSgeOff += k
		n -= k
	}
	return nil
}

// end commits a received FPDU whose CRC checked: completions, MSNs, queued
// responses, invalidations, atomics. It returns the Terminate for an error
// found only now.
func (rx *rxEngine) end() *termInfo {
	qp := rx.qp
	switch rx.op {
	case wire.OpWrite:
		if rx.last {
			rx.tagActive = false
			if rx.tagMR != nil {
				rx.tagMR.release()
				rx.tagMR = nil
			}
		}
	case wire.OpReadResponse:
		rx.orqE.got += uint32(rx.plen)
		if rx.last {
			rx.tagActive, rx.orqE = false, nil
			qp.completeORQ()
		}
	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		if rx.rtrSwallow {
			rx.rtrSwallow, rx.rtrSeen = false, true
			rx.msn[wire.QNSend]++
			return nil
		}
		rx.recvMO += uint32(rx.plen)
		if rx.last {
			return rx.completeRecv()
		}
	case wire.OpImmData, wire.OpImmDataSE:
		rx.msn[wire.QNSend]++
		if !qp.takeRecv(&rx.recv) {
			return rx.termDDP(ddp.ErrTypeUntagged, ddp.CodeNoBuffer)
		}
		wc := WC{ID: rx.recv.id, Op: WCRecvImm, Flags: WCWithImm, QPN: qp.qpn,
			Imm: binary.BigEndian.Uint64(rx.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:])}
		if rx.op == wire.OpImmDataSE {
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

// pushRecv queues a receive completion; an overflow fails the QPs of the
// CQ.
func (qp *QP) pushRecv(wc *WC) {
	if !qp.rcq.push(wc) {
		qp.rcq.overflowed()
	}
}

// completeRecv completes the receive of the last segment of a Send,
// invalidating the Send with Invalidate's STag first (RFC 5040 §5.2).
func (rx *rxEngine) completeRecv() *termInfo {
	qp := rx.qp
	rx.msn[wire.QNSend]++
	rx.recvActive = false
	wc := WC{ID: rx.recv.id, Op: WCRecv, ByteLen: rx.recvMO, QPN: qp.qpn}
	if rx.recvOp == wire.OpSendSE || rx.recvOp == wire.OpSendSEInv {
		wc.Flags |= WCSolicited
	}
	var ti *termInfo
	if rx.recvOp == wire.OpSendInv || rx.recvOp == wire.OpSendSEInv {
		s := rx.recvInv
		mr := qp.dev.lookupMR(s)
		switch {
		case mr == nil || STag(uint32(mr.st.Load())) != s:
			ti = rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCannotInvalidate, true)
		case mr.pd != qp.pd:
			ti = rx.term(wire.LayerRDMAP, wire.ETypeRemoteProtection, wire.CodeCannotInvalidate, true)
		default:
			mr.invalidate()
			wc.Flags |= WCWithInv
			wc.InvalidatedSTag = s
		}
		if ti != nil {
			wc.Status = WCRemInvReqErr
		}
	}
	for i := range rx.recv.nsge {
		rx.recv.sgl[i].MR = nil
	}
	qp.pushRecv(&wc)
	return ti
}

// readRequest queues an inbound Read Request for the send engine, after
// checking the IRD and the source memory (RFC 5040 §5.3).
func (rx *rxEngine) readRequest() *termInfo {
	qp := rx.qp
	rr := wire.ReadRequest(rx.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen : mpa.LengthFieldLen+ddp.UntaggedHeaderLen+wire.ReadRequestLen])
	if qp.irqFull() {
		// More Read Requests than the IRD (siw: RDMAP, remote operation,
		// catastrophic error localized to the stream).
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCatastrophicStream, true)
	}
	size := rr.Size()
	var mr *MR
	if size > 0 {
		mr = qp.dev.lookupMR(rr.SrcSTag())
		if mr == nil {
			return rx.termReadReq(wire.CodeInvalidSTag)
		}
		if e := mr.check(qp.pd, rr.SrcSTag(), AccessRemoteRead, rr.SrcTO(), uint64(size)); e != accessOK {
			return rx.termReadReq(e.rdmapCode())
		}
		if !mr.acquire() {
			return rx.termReadReq(wire.CodeInvalidSTag)
		}
	}
	qp.irqPush(irqEntry{mr: mr, off: rr.SrcTO(), length: size, sinkSTag: rr.SinkSTag(), sinkTO: rr.SinkTO()})
	rx.msn[wire.QNReadRequest]++
	qp.ring()
	return nil
}

// terminate handles a received Terminate: the QP fails with the peer's
// error and sends nothing back (siw_proc_terminate).
func (rx *rxEngine) terminate() {
	qp := rx.qp
	dh := ddp.Header(rx.hdr[mpa.LengthFieldLen : mpa.LengthFieldLen+rx.ddpLen])
	bogus := dh.QN() != wire.QNTerminate || dh.MSN() != rx.msn[wire.QNTerminate] || dh.MO() != 0
	var t wire.Terminate
	body := rx.hdr[mpa.LengthFieldLen+rx.ddpLen : rx.hn]
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
	_ = wire.ParseAtomicRequest(rx.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:], &a)
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
	e := mr.check(qp.pd, a.STag, AccessRemoteAtomic, a.TO, 8)
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
	p := mr.buf[a.TO : a.TO+8]
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
	rx.msn[wire.QNAtomic]++
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
	_ = wire.ParseAtomicResponse(rx.hdr[mpa.LengthFieldLen+ddp.UntaggedHeaderLen:], &a)
	o := qp.orqFront()
	if o == nil || !o.atomic || o.reqID != a.ReqID {
		return rx.term(wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeUnexpectedOpcode, true)
	}
	rx.msn[wire.QNAtomic]++
	st := o.mr.st.Load()
	if o.mr.checkLocal(qp.pd, AccessLocalWrite, o.off, 8) != accessOK || !rx.enterPlace(o.mr, st) {
		qp.setWRStatus(o, WCLocProtErr)
		return rx.termDDP(ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic)
	}
	binary.LittleEndian.PutUint64(o.mr.buf[o.off:o.off+8], a.OriginalValue)
	rx.leavePlace(o.mr)
	qp.completeORQ()
	return nil
}

// completeORQ completes the Read or atomic at the head of the ORQ.
func (qp *QP) completeORQ() {
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
