package rdmap

import (
	"encoding/binary"
	"net"
	"runtime"
	"sync"
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

// The send engine (one goroutine per QP):
//
//	PostSend ──> SQ ring ──┐        rx: Read/Atomic Requests ──> IRQ ──┐
//	                       v                                          v
//	        txPick: IRQ first (at most irqMaxBurst in a row while the SQ has
//	        work, siw's SIW_IRQ_MAXBURST_SQ_ACTIVE), then the SQ in order, a
//	        run of work requests started under one hold of sqMu; Fence and
//	        ORD credits stall the SQ, never the IRQ
//	                       │
//	        emit: messages cut into DDP segments of at most MULPDU, each an
//	        FPDU in the mpa.Writer's batch (headers in scratch, payload from
//	        MRs; with CRC everything copied into one batch buffer, CRC over
//	        the copy); a run's one-FPDU Sends and Writes in one loop
//	        (txEmitSmall)
//	                       │
//	        flush: one writev (or write) per batch; then the batch's Sends, Writes and
//	        Local Invalidates complete, in SQ order (Reads and atomics
//	        complete when the receive engine sees their responses)

// irqMaxBurst is how many responses the engine sends in a row while the
// SQ has work waiting.
const irqMaxBurst = 4

// maxCtrlHdr is the longest DDP+RDMAP header an FPDU starts with
// (untagged header and an Atomic Request), or a Terminate body.
const maxCtrlHdr = 18 + 64

// The send engine's buffers: the FPDU writer's batch buffers with CRC
// (sendBufPool) and its scratch arena and iovec array (package mpa's
// pool), which the writer takes when a batch gets its first FPDU (a
// batch of one small FPDU, a direct send's, stays in the writer's own
// small array and takes neither) and gives back when the batch is
// written (or the QP ends), and the lists of
// memory references to drop after a write (refPool for work requests,
// releasePool for Read Responses), taken with the first reference and
// given back once they are dropped: the buffers in use are bounded by
// the batches being written at once, and an idle QP holds none.
var (
	sendBufPool = bufpool.New(mpa.WriterBufLen)
	refPool     = sync.Pool{New: func() any {
		s := make([]txRef, 0, 64)
		return &s
	}}
	releasePool = sync.Pool{New: func() any {
		s := make([]*MR, 0, 16)
		return &s
	}}
)

// Bounds of a run, the work requests txPick starts under one hold of
// QP.sqMu: at most txRunMax, and no more once they carry txRunBytes of
// payload (a Response that arrives meanwhile waits for the run to be
// queued, so the run stays short in bytes as in requests). From 64-byte
// messages up the bytes decide; txRunMax bounds the runs of smaller
// ones (and the hold of sqMu a run's extension takes).
//
// txRunMax was 64 until lists were posted without sqMu (QP.postMu).
// With posters no longer waiting for that hold, every run's start
// (txPick: sqMu, the published tail, the first request's checks and
// reference) counted: 1024 took write/64 from 30.6-32.6 to 34.7-37.9
// Mmsg/s (CPU 57.6-60.4 to 51.2-54.6 ns/op) in 6 interleaved rounds
// (256: 34.8-36.2); 64-byte Writes with CRC and Sends moved within the
// noise.
const (
	txRunMax   = 1024
	txRunBytes = 64 << 10
)

// txRef is a reference the send engine holds on a region that started
// work requests send from: taken (MR.acquire) by the first of a stretch
// of them that read the region, in SQ order, and shared by the rest of
// the stretch, which only move upTo, so that a stream of requests from
// one region costs one atomic increment and decrement per batch, not per
// request. It drops once every work request before upTo is wholly
// written (written: queuedUpTo >= upTo after a write), so a request
// split across batches keeps its memory until its last byte is out.
type txRef struct {
	mr   *MR
	upTo uint64
}

// simpleSpan is a stretch of simple work requests the send engine
// queued, SQ indices from up to to-1: each a Send or Write of inline
// data or of one SGE, framed by txEmitSmall, which cleared its sge0.MR
// (its region stays referenced by txEngine.refs until it is written),
// so that it has no SGE after the first, no sqExt operand and no region
// for the sweep to drop, and the sweep has nothing to do for it but
// move the SQ's head past it and, for one that completes (signaled, or
// a status other than WCSuccess), push its completion. wcs holds the
// SQ indices of those that complete, in SQ order; the others complete
// without a completion (unsignaled successes). A sweep after a write
// that finds the SQ's head in the span crosses it, and the span is
// emptied once the head has passed it; so the span holds the requests
// between the head of the engine's last sweep and the tail then, and
// requests queued since (still in the SQ): wcs holds at most twice
// MaxSendWR indices. It keeps its array for the next span.
type simpleSpan struct {
	from, to uint64
	wcs      []uint64
}

// orqEntry is an outstanding Read or Atomic Request (the ORQ): the send
// engine appends, the receive engine matches responses at the head.
type orqEntry struct {
	atomic   bool
	hidden   bool   // the P2P Read RTR: no work request behind it
	sqIdx    uint64 // the work request
	mr       *MR    // sink memory, referenced until the response is placed
	off      uint64 // sink offset in mr (the Read's sink TO)
	sinkSTag STag
	length   uint32
	got      uint32
	reqID    uint32
	msn      uint32 // MSN of the request (to match a Terminate)
}

// irqEntry is an inbound Read or Atomic Request to answer (the IRQ): the
// receive engine appends, the send engine answers in order.
type irqEntry struct {
	atomic   bool
	mr       *MR    // pins src (the Read source's region), referenced until the response is sent
	src      []byte // the bytes to send, from the mapping the Read Request was checked against
	length   uint32
	sinkSTag STag
	sinkTO   uint64
	reqID    uint32
	orig     uint64
}

// jobKind is what the send engine is transmitting.
type jobKind uint8

const (
	jobNone jobKind = iota // nothing: txPick takes the next job
	jobSQ                  // the work request txEngine.wr
	jobIRQ                 // the Read or Atomic Response txEngine.resp
	jobRTR                 // the P2P ready-to-receive message
)

// txEngine is the send engine's state, owned by the send goroutine.
type txEngine struct {
	qp *QP

	// Framing: FPDUs go into w's batch; headers are built in hdr.
	w     mpa.Writer
	hdr   [maxCtrlHdr]byte
	ulpdu int // the ULPDU messages are framed to now (MULPDU or QPConfig.MaxULPDU)
	// The EMSS the MULPDU follows (no QPConfig.MaxULPDU, a connection
	// with a file descriptor: emssAuto): txEMSSDue reads TCP_MAXSEG
	// again (emssFn into emss) once the QP's bytes written reach emssAt,
	// and the engine frames to its MULPDU.
	emssAuto bool
	emssAt   uint64
	emss     int
	emssFn   func(fd uintptr)
	msn      [4]uint32 // next MSN per untagged queue (QN 0..3), from 1
	reqID    uint32    // last Atomic Request ID used

	// The job being transmitted (txPick starts it, txEmit continues it
	// across batches).
	job         jobKind
	wr          *sqEntry // jobSQ: its SQ slot
	wrIdx       uint64   // jobSQ: its SQ index
	atomicReqID uint32   // jobSQ, an atomic: the Request ID it carries
	immNext     bool     // jobSQ, WRWriteImm or WRImmData: the Immediate Data is next (the Write, if any, is queued)
	resp        irqEntry // jobIRQ: the response, copied from the IRQ head
	msgOff      uint32   // bytes of the current message queued
	sge         int      // the SGE the payload continues in
	sgeOff      uint32   // bytes of that SGE queued
	irqBurst    int      // responses started in a row while the SQ had work
	// The run (txPick): the work requests started under one hold of
	// sqMu, SQ indices wrIdx (the job) up to runEnd-1, the rest started
	// and waiting for the job. finishWR takes the next one's slot
	// without sqMu: the engine started it under sqMu, and a live entry's
	// slot never moves (ring.go).
	runEnd uint64

	// Memory references: refs[refsHead:] (while not empty: in ref1 while
	// they are one, the common batch from one region and every direct
	// send, else in *refsp, from refPool) are the references of started
	// work requests, in SQ order (see txRef); releases (in *releasesp,
	// from releasePool) the references of queued Read Responses. Both
	// drop once the batch holding their bytes is written (written).
	refs     []txRef
	refsp    *[]txRef
	refsHead int
	ref1     [1]txRef

	// Completion: work requests before queuedUpTo are wholly in the
	// writer's batches; those from completedUpTo on are marked done
	// (sqDone) once the batch holding them is written.
	queuedUpTo, completedUpTo uint64
	// simple is the last stretch of simple work requests txEmitSmall
	// queued (see simpleSpan), which the sweep after a write crosses in
	// one step.
	simple    simpleSpan
	releases  []*MR
	releasesp *[]*MR

	// The send goroutine (txLoop): txStopped, txRunning or txParked; the
	// connection a restarted one writes to; whether txGate has opened.
	state   atomic.Int32
	conn    net.Conn
	gated   bool
	restart func() // txLoop on conn, made once
	// parkHook, when set (tests, before Start), is called where parking
	// races with posters (parkStored, parkLooked, parkDirect).
	parkHook func(at int)

	// The direct send (txdirect.go): raw is the connection's RawConn
	// (nil without one); writeFn (t.directWrite), bound once, with its
	// argument pend and results dn, derr; rest is set while the writer
	// holds the unwritten rest of a batch a direct send began, of
	// restFPDUs FPDUs.
	raw       syscall.RawConn
	writeFn   func(fd uintptr) bool
	pend      [][]byte
	dn        int
	derr      error
	rest      bool
	restFPDUs int

	// The polling mode (txpoll.go): poll says QPConfig.PollTx is in
	// effect (set once, at Start, after idle: posters read it without a
	// lock); idle is the timer that starts the send goroutine for work
	// no Wait took, armed while idleArmed.
	poll      atomic.Bool
	idle      *time.Timer
	idleArmed atomic.Bool

	// Shutdown.
	closeTimer *time.Timer
	halfClose  bool  // the connection has CloseWrite
	err        error // the send direction's first fatal error (sticky)
}

func (t *txEngine) init(qp *QP, ulpdu int) {
	t.qp = qp
	t.conn = qp.conn
	t.restart = func() { qp.txLoop(t.conn) }
	t.ulpdu = ulpdu
	qp.stats.ulpdu.Store(int64(ulpdu))
	t.msn = [4]uint32{1, 1, 1, 1}
	t.w.Init(mpa.WriterConfig{CRC: qp.p.CRC, Markers: qp.p.MarkersTx, MaxHeader: maxCtrlHdr,
		Buffers: sendBufPool})
	_, t.halfClose = qp.conn.(interface{ CloseWrite() error })
	t.raw = rawConnOf(qp.conn)
	t.writeFn = t.directWrite
	if qp.cfg.MaxULPDU == 0 && t.raw != nil {
		t.emssAuto, t.emssAt = true, emssFirst
		t.emssFn = func(fd uintptr) { t.emss, _ = sys.TCPMaxSegFD(fd) } // 0 on an error
	}
	if qp.cfg.PollTx && t.raw != nil {
		t.idle = time.AfterFunc(time.Hour, qp.txPollIdle)
		t.idle.Stop()
		t.poll.Store(true)
	}
}

func (t *txEngine) release() {
	t.w.Release()
	if t.releasesp != nil {
		t.dropReleases()
	}
	t.dropRefs(true)
	t.runEnd = 0
	t.simple = simpleSpan{}
	// A response being sent still has its IRQ slot (freed only when its
	// last FPDU is queued), whose reference the QP's flush releases.
	t.resp = irqEntry{}
	t.wr = nil
	if t.closeTimer != nil {
		t.closeTimer.Stop()
	}
	if t.idle != nil {
		t.idle.Stop()
	}
}

// dropReleases drops the references of the jobs queued in the batch
// (after its write, or when the QP ends); the caller has seen releasesp
// set.
func (t *txEngine) dropReleases() {
	for i, mr := range t.releases {
		mr.release()
		t.releases[i] = nil
	}
	*t.releasesp = t.releases[:0]
	releasePool.Put(t.releasesp)
	t.releasesp, t.releases = nil, nil
}

// written drops what a write of the batch (of every work request before
// queuedUpTo) lets go: the queued Responses' references and those of the
// work requests wholly written.
func (t *txEngine) written() {
	if t.releasesp != nil {
		t.dropReleases()
	}
	t.dropRefs(false)
}

// takeRef makes the work request at SQ index idx hold a reference on mr
// (see txRef): it shares the last one when that is on mr, else acquires
// one. It reports false when mr cannot be acquired (deregistered and
// idle).
func (t *txEngine) takeRef(mr *MR, idx uint64) bool {
	if n := len(t.refs); n > t.refsHead && t.refs[n-1].mr == mr {
		t.refs[n-1].upTo = idx + 1
		return true
	}
	if !mr.acquire() {
		return false
	}
	switch {
	case t.refs == nil:
		// The first reference (every direct send's): in ref1.
		t.ref1[0] = txRef{mr: mr, upTo: idx + 1}
		t.refs = t.ref1[:]
		return true
	case t.refsp == nil && len(t.refs) == cap(t.refs):
		// A second reference: the list moves from ref1 to a pooled array.
		t.refsp = refPool.Get().(*[]txRef)
		t.refs = append((*t.refsp)[:0], t.refs[t.refsHead:]...)
		t.refsHead = 0
		t.ref1 = [1]txRef{}
	}
	t.refs = append(t.refs, txRef{mr: mr, upTo: idx + 1})
	return true
}

// dropRefs releases the references of the work requests wholly written
// (upTo <= queuedUpTo), or all of them.
func (t *txEngine) dropRefs(all bool) {
	if t.refsp == nil && len(t.refs) == 1 {
		// One reference, in ref1 (refsHead 0: see dropList), the common
		// batch's.
		if all || t.refs[0].upTo <= t.queuedUpTo {
			t.refs[0].mr.release()
			t.refs[0] = txRef{}
			t.refs = nil
		}
		return
	}
	t.dropList(all)
}

// dropList is dropRefs for references that are not one in ref1.
func (t *txEngine) dropList(all bool) {
	for t.refsHead < len(t.refs) && (all || t.refs[t.refsHead].upTo <= t.queuedUpTo) {
		t.refs[t.refsHead].mr.release()
		t.refs[t.refsHead] = txRef{}
		t.refsHead++
	}
	if t.refs != nil && t.refsHead == len(t.refs) {
		if t.refsp != nil {
			*t.refsp = t.refs[:0]
			refPool.Put(t.refsp)
		}
		t.refsp, t.refs, t.refsHead = nil, nil, 0
	}
}

// addRelease adds a reference to drop once the batch is written.
func (t *txEngine) addRelease(mr *MR) {
	if t.releasesp == nil {
		t.releasesp = releasePool.Get().(*[]*MR)
		t.releases = (*t.releasesp)[:0]
	}
	t.releases = append(t.releases, mr)
}

// The send goroutine runs only while the engine has something to do
// (an idle QP holds no send stack). Idle in RTS (nothing
// runnable, or a responder still waiting for the initiator's first FPDU)
// it parks: it marks the engine parked and exits, and the next doorbell
// (ring: PostSend, an inbound Read Request, a state change, the first
// FPDU) starts a new one, which continues with the same txEngine state.
// The doorbell is pushed before ring looks at the mark, and txPark looks
// for a doorbell after setting it, so no wakeup is lost: either ring
// sees the mark and starts the goroutine, or the parking goroutine sees
// the doorbell and carries on. Once the mark is set, another may take
// the engine before the parking goroutine looks (the goroutine ring
// starts, or a direct send: txdirect.go); a doorbell the parking
// goroutine then takes may be the new holder's, so it rings again
// rather than swallow it. While closing, the goroutine waits with
// its timer instead; it ends for good (closing txDone) only with the
// send direction, and is never restarted after that.
const (
	txStopped int32 = iota // not started (before Start)
	txRunning              // the send goroutine runs (or has ended for good)
	txParked               // no send goroutine: ring starts one
	txDirect               // no send goroutine: a direct send holds the engine (txdirect.go)
)

// txLoop is the send goroutine: Start starts it, ring restarts it after
// it parked.
func (qp *QP) txLoop(conn net.Conn) {
	t := &qp.tx
	for !t.gated {
		switch qp.txGate() {
		case gateClosed:
			qp.txShutdown(conn, false)
			close(qp.txDone)
			return
		case gateWait:
			if qp.txPark() {
				return
			}
			continue
		}
		t.gated = true
		if qp.p.P2P && qp.p.Initiator && qp.p.RTR != mpa.RTRNone {
			t.job = jobRTR
		}
	}
	if qp.txRun(conn) {
		close(qp.txDone)
	}
}

// txPark parks the send goroutine (see txStopped): it reports true when
// the goroutine is to exit, false when a doorbell came meanwhile and it
// carries on.
func (qp *QP) txPark() bool {
	t := &qp.tx
	// Let a poster that is about to ring run first: a doorbell that
	// comes now is taken without ending this goroutine and starting
	// another.
	runtime.Gosched()
	select {
	case <-qp.bell:
		return false
	default:
	}
	t.state.Store(txParked)
	if t.parkHook != nil {
		t.parkHook(parkStored)
	}
	// Rung before or while parking: carry on, unless another has taken
	// the engine since it was marked parked: the goroutine ring started
	// (which makes a full pass), or a direct send (txDirect), whose
	// txDirectEnd looks for the doorbell rung meanwhile.
	exit := !qp.txTakeRung()
	if t.parkHook != nil {
		t.parkHook(parkLooked)
	}
	return exit
}

// txTakeRung is what a holder that has just marked the engine parked does
// (txPark, txDirectEnd): it looks for a doorbell rung meanwhile and
// reports whether it took the engine back to serve it. When another took
// the engine since it was marked parked, the doorbell taken may be that
// one's: it rings again rather than swallow it.
func (qp *QP) txTakeRung() bool {
	select {
	case <-qp.bell:
		if qp.tx.state.CompareAndSwap(txParked, txRunning) {
			return true
		}
		qp.ring()
	default:
	}
	return false
}

// Where parkHook is called: in txPark after it marked the engine parked
// and after it looked for a doorbell then, and in txDirectEnd before it
// parks the engine.
const (
	parkStored = iota
	parkLooked
	parkDirect
)

// txRun is the send loop. It reports true when the send direction has
// ended, false when the goroutine parked.
func (qp *QP) txRun(conn net.Conn) bool {
	t := &qp.tx
	closing := false
	for {
		qp.mu.Lock()
		st := qp.state
		var ti termInfo
		pending := qp.termPending
		if pending {
			ti = qp.term
			qp.termPending = false
		}
		qp.mu.Unlock()
		switch st {
		case StateTerminate:
			if pending {
				qp.txSendTerminate(conn, &ti)
			}
			qp.txShutdown(conn, true)
			return true
		case StateError:
			qp.txShutdown(conn, true)
			return true
		case StateClosing:
			if !closing {
				closing = true
				_ = conn.SetWriteDeadline(time.Now().Add(qp.cfg.DisconnectTimeout))
				t.closeTimer = time.NewTimer(qp.cfg.DisconnectTimeout)
			}
		}
		rest := t.rest
		progressed, err := qp.guardTx(func() (bool, error) { return qp.txBatch(conn) }) // see fault.go
		if err != nil {
			if t.err == nil {
				t.err = err
			}
			qp.aborting.Store(true)
			qp.fail(err, nil)
			abortConn(conn)
			continue
		}
		if progressed {
			if rest && t.poll.Load() && qp.txPollPark() {
				return false // the next Wait sends what is queued (txpoll.go)
			}
			continue
		}
		// A connection without half-close ends with the close; it waits
		// for the responses to our Reads first.
		if closing && (qp.rx.ended.Load() || (qp.txIdle() && (t.halfClose || qp.orqEmpty()))) {
			qp.txShutdown(conn, false)
			return true
		}
		if closing {
			select {
			case <-qp.bell:
			case <-t.closeTimer.C:
				qp.txShutdown(conn, false)
				return true
			}
			continue
		}
		if qp.txPark() {
			return false
		}
	}
}

// txGate's answers.
type gate uint8

const (
	gateOpen   gate = iota // send
	gateWait               // a responder waiting for the first FPDU: park
	gateClosed             // the QP left RTS before anything could be sent
)

// txGate holds the first FPDU back: a responder waits for the
// initiator's first FPDU (RFC 5044; Linux siw drops a connection that
// sends right after its Reply) parked (gateWait: the receive engine
// rings when the FPDU arrives), an initiator waits FirstSendDelay. It
// reports gateClosed if the QP left RTS meanwhile: then nothing may be
// sent.
func (qp *QP) txGate() gate {
	if !qp.p.Initiator {
		select {
		case <-qp.rxFirst:
			return gateOpen
		default:
		}
		qp.mu.Lock()
		st := qp.state
		qp.mu.Unlock()
		if st != StateRTS {
			// A responder that has not heard from the initiator may
			// still close; a Terminate it could not send is dropped.
			select {
			case <-qp.rxFirst:
				return gateOpen
			default:
				return gateClosed
			}
		}
		return gateWait
	}
	if qp.p.FirstSendDelay <= 0 {
		return gateOpen
	}
	tm := time.NewTimer(qp.p.FirstSendDelay)
	defer tm.Stop()
	for {
		select {
		case <-tm.C:
			return gateOpen
		case <-qp.bell:
		}
		qp.mu.Lock()
		st := qp.state
		qp.mu.Unlock()
		if st != StateRTS {
			return gateOpen
		}
	}
}

// txIdle reports whether nothing is left to send.
func (qp *QP) txIdle() bool {
	if qp.tx.job != jobNone {
		return false
	}
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.sqNext == qp.sqTail.Load() && qp.irq.empty()
}

func (qp *QP) orqEmpty() bool {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.orq.empty()
}

// txShutdown ends the send direction: FIN when the connection supports
// half-close (else a full close), then a read deadline so the receive
// engine stops waiting for the peer (to drain after a Terminate, or for
// the peer's FIN after a graceful close).
func (qp *QP) txShutdown(conn net.Conn, errorPath bool) {
	defer qp.rxTakeBack() // PollRx: a free receive engine gets its goroutine back
	if qp.aborting.Load() {
		return // reset, not closed: no FIN before the RST
	}
	wait := qp.cfg.DisconnectTimeout
	if errorPath {
		wait = termLinger
	}
	if !closeWrite(conn) {
		qp.rx.selfClosed.Store(true)
		_ = conn.Close()
		return
	}
	dl := time.Now().Add(wait)
	qp.rx.shutdownAt.Store(dl.UnixNano()) // before the deadline: see rxio.go
	_ = conn.SetReadDeadline(dl)
}

// txSendTerminate sends the Terminate (best effort: the stream is at an
// FPDU boundary, since batches are written whole, a direct send's rest
// included).
func (qp *QP) txSendTerminate(conn net.Conn, ti *termInfo) {
	t := &qp.tx
	layout := wire.LayoutRFC
	if qp.p.TerminateLayoutSiw {
		layout = wire.LayoutSiw
	}
	msg := ti.message(layout)
	_ = conn.SetWriteDeadline(time.Now().Add(termWriteTimeout))
	if t.rest {
		// A direct send's unwritten rest ends its FPDU first.
		t.rest = false
		if _, err := t.w.Flush(conn); err != nil {
			qp.lg.Info("terminate not sent", zap.Error(err))
			return
		}
	}
	t.w.Reset()
	t.emitControl(func(h []byte) []byte {
		return wire.AppendTerminate(t.untagged(h, wire.OpTerminate, wire.QNTerminate), &msg)
	})
	n, err := t.w.Flush(conn)
	qp.stats.txBytes.Add(uint64(n))
	if err != nil {
		qp.lg.Info("terminate not sent", zap.Error(err))
		return
	}
	qp.stats.termSent.Add(1)
	qp.dev.stats.termSent.Add(1)
	qp.lg.Info("terminate sent", zap.Stringer("layer", ti.layer),
		zap.String("type", wire.ETypeName(ti.layer, ti.etype)), zap.String("code", wire.CodeName(ti.layer, ti.etype, ti.code)))
}

// txBatch fills one batch and writes it, or first writes the rest of
// the batch a direct send left (txdirect.go). It reports whether anything
// happened (FPDUs sent or work requests completed).
//
// The batch is filled, then written, on the send goroutine. Writing it on
// a goroutine of its own while the next one fills (two Writers in turn,
// the work requests of a batch completed once its writev returns) was
// measured on 2026-12-07, since in a stream of 64-byte Writes the send
// goroutine is the busiest (over 90% of the run; framing a third of
// that, the writev half) while the process keeps 1.66 of the two CPUs
// busy (a CPU profile of a 4-second run): no better, 12.9 against 13.8
// Mmsg/s (medians of 10 interleaved runs; best 17.8 against 20.3), with
// CRC 9.5 against 10.1.
func (qp *QP) txBatch(conn net.Conn) (bool, error) {
	t := &qp.tx
	if !t.rest {
		t.w.Reset()
		qp.txFill()
	}
	sent := !t.w.Empty()
	var err error
	if sent {
		fpdus := t.w.FPDUs()
		if t.rest {
			fpdus = t.restFPDUs
		}
		t.rest = false
		var n int
		n, err = t.w.Flush(conn)
		qp.stats.txBytes.Add(uint64(n))
		qp.stats.txWritevs.Add(1)
		if err == nil {
			qp.stats.txFPDUs.Add(uint64(fpdus))
		}
	}
	t.written()
	if err != nil {
		return sent, err
	}
	return qp.txWritten() || sent, nil
}

// txFill queues jobs into the batch until it is full, nothing is
// runnable or the QP broke.
func (qp *QP) txFill() {
	t := &qp.tx
	qp.txEMSSDue()
	for !qp.broken.Load() {
		if t.job == jobNone && !qp.txPick() {
			return
		}
		if !qp.txEmitSmall() {
			return
		}
		if t.job != jobNone && !qp.txEmit() {
			return
		}
	}
}

// The MULPDU follows the EMSS (RFC 5044 §4.5: the sender's MULPDU is
// derived from the current EMSS), as siw's follows the socket's MSS,
// which it reads for every work request (siw_update_tcpseg): the engine
// reads TCP_MAXSEG again (txEMSSDue) once emssFirst bytes have been
// written, and then every emssEvery more, and frames the FPDUs from
// there on to the MULPDU of what it read. A path MTU that shrinks thus
// shrinks the FPDUs within a MiB (siw's and a hardware peer's
// expectation: no FPDU over a segment), and they grow again when it
// recovers.
//
// On loopback the MSS is 32741 when the connection starts, 47616 after
// the first write and 65483 a few MiB later, so large messages go in
// FPDUs of twice the first size. Measured with make bench's 1 MiB
// cases, four interleaved rounds against the MULPDU of the first EMSS
// kept for the QP's life: four QPs 0.97-1.05 of four TCP streams
// against 0.65-1.19 (all four rounds passing 0.9 against two); one
// stream within the noise (Writes with CRC 0.96-1.45 against 1.06-1.23,
// Sends with CRC 0.92-1.23 against 0.90-1.03; Reads, in four more
// rounds, 1.29-2.04 against 1.26-1.80). Before the Reader let consumed
// bytes go at compaction (mpa.Reader.fillUpTo), the larger FPDUs had
// cost the one-stream CRC cases (Sends with CRC 0.63-0.85 against
// 0.92-1.15).
//
// A getsockopt per MiB costs nothing a MiB's writes would notice, and
// allocates nothing (emssFn is made once, in init).
const (
	emssFirst = 64 << 10
	emssEvery = 1 << 20
)

// txEMSSDue calls txFollowEMSS when the bytes written since its last
// look make it due: before a batch is framed (txFill, and a direct
// send's job, which does not go through it).
func (qp *QP) txEMSSDue() {
	if t := &qp.tx; t.emssAuto && qp.stats.txBytes.Load() >= t.emssAt {
		qp.txFollowEMSS()
	}
}

// txFollowEMSS reads the connection's TCP_MAXSEG and sets the ULPDU the
// engine frames to its MULPDU (ulpduFor). A message in progress goes on
// with segments of the new size, which DDP allows (its segments need
// not be equal). A failed read changes nothing.
func (qp *QP) txFollowEMSS() {
	t := &qp.tx
	t.emssAt = qp.stats.txBytes.Load() + emssEvery
	t.emss = 0
	if t.raw.Control(t.emssFn) != nil || t.emss <= 0 {
		return
	}
	if u := ulpduFor(t.emss, qp.p.MarkersTx); u != t.ulpdu {
		t.ulpdu = u
		qp.stats.ulpdu.Store(int64(u))
	}
}

// ulpduFor is the ULPDU a QP sends on a connection of EMSS emss, markers
// or not: the MULPDU (mpa.MULPDU), at least minULPDU.
func ulpduFor(emss int, markers bool) int {
	return min(max(mpa.MULPDU(emss, markers), minULPDU), mpa.MaxULPDU)
}

// txWritten completes what the batch just written held: its Sends,
// Writes and Local Invalidates, in SQ order. It reports whether any work
// request was completed.
func (qp *QP) txWritten() bool {
	t := &qp.tx
	done := t.completedUpTo != t.queuedUpTo
	if done {
		qp.sqMu.Lock()
		ok := qp.txWrittenLocked()
		qp.sqMu.Unlock()
		if !ok {
			qp.scq.overflowed()
		}
	}
	return done
}

// txWrittenLocked is txWritten's work under sqMu: it completes the work
// requests from completedUpTo to queuedUpTo (the sweep crossing the
// span of simple ones in one step) and reports false if the send CQ
// overflowed (the caller tells the CQ after releasing sqMu).
//
// +checklocks:qp.sqMu
func (qp *QP) txWrittenLocked() bool {
	t := &qp.tx
	ok := qp.sweepWrittenLocked(t.queuedUpTo, &t.simple)
	if sp := &t.simple; qp.sq.head >= sp.to {
		// The span is behind the head (swept): the next one starts where
		// it ended, empty.
		sp.from, sp.wcs = sp.to, sp.wcs[:0]
	}
	// What the sweep did not reach (behind a Read or atomic waiting for
	// its response) is marked done for a later sweep.
	for i := max(t.completedUpTo, qp.sq.head); i < t.queuedUpTo; i++ {
		if e := qp.sq.at(i); e.state == sqActive {
			e.state = sqDone
		}
	}
	t.completedUpTo = t.queuedUpTo
	return ok
}

// awaitsResponse reports whether a work request of op completes when
// the peer's response arrives (it takes an ORQ slot and an ORD credit).
func awaitsResponse(op WROpcode) bool {
	return op == WRRead || op == WRFetchAdd || op == WRCmpSwap
}

// txPick takes the next job: a response from the IRQ, or a run of work
// requests from the SQ, started under one hold of sqMu, whose first is
// the job (finishWR moves on to the next). It reports false when there
// is nothing runnable.
//
// A run is what the SQ order allows to start before any of it is
// queued: after its first request, txExtendRunLocked adds the Sends,
// Writes and Immediate Data that follow, while each is runnable and its
// local memory checks pass. A request whose start changes memory (Local
// Invalidate, fast registration, bind) or takes an ORQ entry and an MSN
// or Request ID at start (Read, atomics) starts only first in a run and
// ends it, so every start sees the effect of the earlier ones, and every
// earlier request's payload is queued (its bytes taken from the mapping
// it was checked against) before a later one changes a mapping. A
// request whose check fails in a run's tail is left to start first in
// the next run, which fails it after the requests before it are queued,
// as one job at a time would.
func (qp *QP) txPick() bool {
	t := &qp.tx
	qp.sqMu.Lock()
	e, sqRunnable := qp.sqRunnableLocked()
	if r := qp.irq.peek(); r != nil && (!sqRunnable || t.irqBurst < irqMaxBurst) {
		t.irqBurst++
		t.resp = *r
		qp.sqMu.Unlock()
		t.job, t.msgOff = jobIRQ, 0
		return true
	}
	t.irqBurst = 0
	if !sqRunnable {
		qp.sqMu.Unlock()
		return false
	}
	idx := qp.sqNext
	qp.sqNext++
	if status := qp.txStartLocked(e, idx); status != WCSuccess {
		e.state, e.status = sqDone, status
		qp.sqMu.Unlock()
		qp.txAbandon(e, idx, status)
		return false
	}
	if runOp(e.op) {
		qp.txExtendRunLocked(idx, uint64(e.length))
	}
	t.runEnd = qp.sqNext
	qp.sqMu.Unlock()
	t.job = jobSQ
	t.startJob(e, idx)
	return true
}

// runOp reports whether work requests of op may follow each other in a
// run (see txPick): their start only checks local memory and takes
// references.
func runOp(op WROpcode) bool {
	switch op {
	case WRSend, WRSendInv, WRWrite, WRWriteImm, WRImmData:
		return true
	}
	return false
}

// txExtendRunLocked starts the work requests after the run's first (SQ
// index first), in SQ order, while they are runnable run ops whose start
// succeeds, up to txRunMax of them and txRunBytes of payload (bytes so
// far).
//
// +checklocks:qp.sqMu
func (qp *QP) txExtendRunLocked(first, bytes uint64) {
	t := &qp.tx
	// Under sqMu the ORQ does not change (only this engine adds to it,
	// and a run adds nothing); the run ends at most at the tail
	// published now (posts go on meanwhile, past it: see QP.postMu).
	next, end, orqEmpty := qp.sqNext, min(qp.sqTail.Load(), first+txRunMax), qp.orq.empty()
	var lastMR *MR // the region of the last one-SGE request checked, its mapping lastBind
	var lastBind *mrBinding
	// last is the last reference, once this run has taken or shared it;
	// its upTo is set once the run leaves it (another region, another
	// kind of request, the run's end), not per request.
	var last *txRef
	for next != end && bytes < txRunBytes {
		e := qp.sq.at(next)
		if !runOp(e.op) || (e.fence && !orqEmpty) { // sqRunnableLocked's rule for run ops
			break
		}
		if e.nsge == 1 && !e.inline {
			// The common request, one SGE: txCheckLocked and
			// txRefsLocked in line. Requests from one region share its
			// check (localBinding: the run is started at one moment,
			// under sqMu) and the reference takeRef shares, kept at hand.
			s := &e.sge0
			if s.MR != lastMR {
				b, ae := s.MR.localBinding(qp.pd)
				if ae != accessOK {
					break // as below
				}
				lastMR, lastBind = s.MR, b
			}
			if _, ae := lastBind.slice(0, s.Offset, uint64(s.Length)); ae != accessOK {
				break // as below
			}
			if last == nil || last.mr != s.MR {
				if last != nil {
					last.upTo = next
					last = nil
				}
				if !t.takeRef(s.MR, next) { // shares the last reference or takes one
					break
				}
				last = &t.refs[len(t.refs)-1] // takeRef may have moved the list
			}
			e.state = sqActive
			next++
			bytes += uint64(e.length)
			// The requests that follow from the same region, in one
			// tight loop.
			next, bytes = qp.txExtendRegionLocked(next, end, bytes, lastMR, lastBind, orqEmpty)
			continue
		}
		if last != nil {
			last.upTo = next
			last = nil // txRefsLocked may add to the list or move it
		}
		if qp.txCheckLocked(e, qp.sq.slot(next)) != WCSuccess || !qp.txRefsLocked(e, next) {
			// Started first in the next run, it fails there, once the
			// requests before it are queued. References the refused
			// start took are shared with it (upTo next+1) and drop as
			// theirs do.
			break
		}
		e.state = sqActive
		next++
		bytes += uint64(e.length)
	}
	if last != nil {
		last.upTo = next // the requests that share it end at the last started
	}
	qp.sqNext = next
}

// txExtendRegionLocked is txExtendRunLocked's loop for the requests that
// follow a started one-SGE request on region mr, whose mapping b the
// run checked it against (and whose reference it shares): from SQ index
// next on, it starts, in SQ order, the runnable run ops of one SGE on
// mr, while each is within b's bounds, up to SQ index end and
// txRunBytes of payload (bytes so far), and returns the next index and
// the bytes. For such a request txExtendRunLocked's steps are that
// check (the region's own, localBinding's, is b's for the whole run)
// and the reference it shares (whose upTo txExtendRunLocked sets once
// the run leaves the region): here without a call, so that the loop
// keeps its state in registers. At the first other request it stops,
// and txExtendRunLocked takes that one (or stops the run there, as it
// would have).
//
// +checklocks:qp.sqMu
func (qp *QP) txExtendRegionLocked(next, end, bytes uint64, mr *MR, b *mrBinding, orqEmpty bool) (uint64, uint64) {
	// The ring's array, walked a chunk at a time (ring.at's steps once
	// per chunk); a ring of fewer slots than a chunk, which uses only
	// the first mask+1 of its chunk, is left to txExtendRunLocked.
	chunks, mask := qp.sq.chunks, qp.sq.mask
	if mask < ringChunk-1 {
		return next, bytes
	}
	base, size := b.base, uint64(len(b.buf))
	for next != end && bytes < txRunBytes {
		// The chunk of next, up to its last slot or end (next's slot in
		// it is next%ringChunk, mask being at least ringChunk-1).
		c := chunks[(next&mask)/ringChunk]
		for stop := min(end, next|(ringChunk-1)+1); next != stop && bytes < txRunBytes; {
			e := &c[next%ringChunk]
			s := &e.sge0
			if !runOp(e.op) || (e.fence && !orqEmpty) || e.nsge != 1 || e.inline || s.MR != mr {
				return next, bytes
			}
			// mrBinding.slice's bounds check (perm 0: no right to
			// check); an offset below base wraps past size.
			if off := s.Offset - base; off > size || uint64(s.Length)+off > size {
				return next, bytes
			}
			e.state = sqActive
			next++
			bytes += uint64(e.length)
		}
	}
	return next, bytes
}

// startJob makes the work request e (SQ index idx) of the run the job.
func (t *txEngine) startJob(e *sqEntry, idx uint64) {
	t.wr, t.wrIdx = e, idx
	t.msgOff, t.sge, t.sgeOff = 0, 0, 0
	t.immNext = e.op == WRImmData
}

// sqRunnableLocked returns the SQ entry the engine takes next, and
// whether it may start now: a Fence waits for the ORQ to drain, a Read or
// atomic for an ORD credit (unless the ORD is 0: then txAddORQLocked
// fails it).
func (qp *QP) sqRunnableLocked() (*sqEntry, bool) {
	if qp.sqNext == qp.sqTail.Load() {
		return nil, false
	}
	e := qp.sq.at(qp.sqNext)
	return e, qp.sqEntryRunnableLocked(e)
}

// sqEntryRunnableLocked is sqRunnableLocked's rule for e, the SQ entry
// at sqNext.
//
// +checklocks:qp.sqMu
func (qp *QP) sqEntryRunnableLocked(e *sqEntry) bool {
	if e.fence && !qp.orq.empty() {
		return false
	}
	return !awaitsResponse(e.op) || qp.orq.limit == 0 || !qp.orq.full()
}

// txStartLocked starts work request e (SQ index idx), in SQ order: it
// checks the local memory (executing a Local Invalidate), gives a Read or
// atomic its ORQ entry, and takes references to the source memory the
// request is sent from. It returns the completion status when the
// request cannot be sent.
func (qp *QP) txStartLocked(e *sqEntry, idx uint64) WCStatus {
	slot := qp.sq.slot(idx)
	if status := qp.txCheckLocked(e, slot); status != WCSuccess {
		return status
	}
	e.state = sqActive
	switch {
	case awaitsResponse(e.op):
		return qp.txAddORQLocked(e, idx)
	case e.op != WRLocalInv && e.op != WRRegMR && e.op != WRBindMW:
		if !qp.txRefsLocked(e, idx) {
			return WCLocProtErr
		}
	}
	return WCSuccess
}

// txRefsLocked makes the Send or Write e (SQ index idx) hold its source
// memory until it is written (see txRef). It reports false when a region
// cannot be acquired; the references taken before stay shared with e
// (upTo idx+1).
//
// +checklocks:qp.sqMu
func (qp *QP) txRefsLocked(e *sqEntry, idx uint64) bool {
	if e.inline {
		return true
	}
	t := &qp.tx
	slot := qp.sq.slot(idx)
	for i := range int(e.nsge) {
		if !t.takeRef(qp.sqSGE(e, slot, i).MR, idx) {
			return false
		}
	}
	return true
}

// txAddORQLocked appends the ORQ entry of a Read or atomic, which holds
// a reference to its sink memory until the response is placed.
func (qp *QP) txAddORQLocked(e *sqEntry, idx uint64) WCStatus {
	if qp.orq.limit == 0 {
		return WCLocQPOpErr // the handshake settled ORD 0
	}
	e.state = sqAwaiting
	sink := e.sge0
	if !sink.MR.acquire() {
		return WCLocProtErr
	}
	t := &qp.tx
	o := qp.orq.push()
	*o = orqEntry{atomic: e.op != WRRead, sqIdx: idx, mr: sink.MR, off: sink.Offset,
		sinkSTag: sink.MR.STag(), length: sink.Length, msn: t.msn[wire.QNReadRequest]}
	if o.atomic {
		o.msn = t.msn[wire.QNAtomic]
		t.reqID++
		o.reqID = t.reqID
		t.atomicReqID = t.reqID
	}
	return WCSuccess
}

// txAbandon ends work request e (SQ index idx), which could not be sent
// (its status is set): it completes with the QP's failure, which the
// peer learns from a local catastrophic Terminate.
func (qp *QP) txAbandon(e *sqEntry, idx uint64, status WCStatus) {
	t := &qp.tx
	// Its references (upTo idx+1) drop after the write of the batch.
	t.queuedUpTo = idx + 1
	ti := localCatastrophic(&localWRError{op: e.op, status: status})
	qp.fail(ti.err(), ti)
}

// localWRError is the cause of a QP failure on a work request the send
// engine could not execute.
type localWRError struct {
	op     WROpcode
	status WCStatus
}

func (e *localWRError) Error() string {
	return "rdmap: " + e.op.String() + " work request failed: " + e.status.String()
}

// txCheckLocked checks a work request's local memory (and executes a
// Local Invalidate) when the engine takes it, in SQ order.
func (qp *QP) txCheckLocked(e *sqEntry, slot int) WCStatus {
	switch e.op {
	case WRLocalInv:
		switch qp.dev.invalidateSTag(qp, e.invSTag, false) {
		case accessOK:
			return WCSuccess
		case accessPD:
			return WCLocProtErr
		}
		return WCLocQPOpErr
	case WRRegMR:
		return qp.execRegMR(&qp.sqExt[slot].mem)
	case WRBindMW:
		return qp.execBindMW(&qp.sqExt[slot].mem)
	case WRImmData:
		return WCSuccess
	}
	if e.inline {
		return WCSuccess
	}
	perm := Access(0)
	if awaitsResponse(e.op) {
		perm = AccessLocalWrite
	}
	for i := range int(e.nsge) {
		s := qp.sqSGE(e, slot, i)
		if _, ae := s.MR.checkLocal(qp.pd, perm, s.Offset, uint64(s.Length)); ae != accessOK {
			return WCLocProtErr
		}
	}
	return WCSuccess
}

// txEmit queues FPDUs of the current job until it is done (true) or the
// batch is full (false). A work request's FPDUs follow from its opcode,
// one case each.
func (qp *QP) txEmit() bool {
	t := &qp.tx
	switch t.job {
	case jobRTR:
		return qp.txEmitRTR()
	case jobIRQ:
		return qp.txEmitResponse()
	}
	e := t.wr
	switch e.op {
	case WRLocalInv, WRRegMR, WRBindMW: // executed by txCheckLocked; nothing to send
	case WRSend, WRSendInv:
		if !qp.txEmitData(e, sendOpcode(e)) {
			return false
		}
	case WRWrite, WRWriteImm, WRImmData:
		if !t.immNext {
			if !qp.txEmitData(e, wire.OpWrite) {
				return false
			}
			if e.op == WRWrite {
				break
			}
			t.immNext = true
		}
		op := wire.OpImmData
		if e.solicited {
			op = wire.OpImmDataSE
		}
		if !t.emitControl(func(h []byte) []byte {
			return binary.BigEndian.AppendUint64(t.untagged(h, op, wire.QNSend), qp.sqExt[qp.sq.slot(t.wrIdx)].imm)
		}) {
			return false
		}
	case WRRead:
		if !t.emitControl(func(h []byte) []byte {
			return wire.AppendReadRequest(t.untagged(h, wire.OpReadRequest, wire.QNReadRequest), &wire.ReadRequestFields{
				SinkSTag: e.sge0.MR.STag(), SinkTO: e.sge0.Offset, Size: e.length,
				SrcSTag: e.remote.STag, SrcTO: e.remote.Offset,
			})
		}) {
			return false
		}
	case WRFetchAdd, WRCmpSwap:
		x := &qp.sqExt[qp.sq.slot(t.wrIdx)]
		a := wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: t.atomicReqID, STag: e.remote.STag, TO: e.remote.Offset,
			AddSwap: x.cmpAdd, AddSwapMask: x.addMask}
		if e.op == WRCmpSwap {
			a = wire.AtomicRequest{Op: wire.AtomicCmpSwap, ReqID: t.atomicReqID, STag: e.remote.STag, TO: e.remote.Offset,
				AddSwap: x.swap, AddSwapMask: x.swapMask, Compare: x.cmpAdd, CompareMask: x.cmpMask}
		}
		if !t.emitControl(func(h []byte) []byte {
			return wire.AppendAtomicRequest(t.untagged(h, wire.OpAtomicRequest, wire.QNAtomic), &a)
		}) {
			return false
		}
	}
	t.finishWR()
	return true
}

// sendOpcode is the RDMAP opcode of a Send work request.
func sendOpcode(e *sqEntry) wire.Opcode {
	switch {
	case e.op == WRSendInv && e.solicited:
		return wire.OpSendSEInv
	case e.op == WRSendInv:
		return wire.OpSendInv
	case e.solicited:
		return wire.OpSendSE
	}
	return wire.OpSend
}

// finishWR ends the current work request: it is wholly queued (its
// memory references drop once the batch is written). The next work
// request of the run, if any, becomes the job.
func (t *txEngine) finishWR() {
	t.queuedUpTo = t.wrIdx + 1
	if next := t.wrIdx + 1; next < t.runEnd {
		t.startJob(t.qp.sq.at(next), next) // started under sqMu: see runEnd
		return
	}
	t.job, t.wr = jobNone, nil
}

// emitControl queues a control message: one FPDU whose ULPDU (at most
// maxCtrlHdr bytes, no payload) build appends to the header buffer it is
// given. It reports false when the batch has no room; build is then not
// called, so it takes no MSN.
func (t *txEngine) emitControl(build func(h []byte) []byte) bool {
	if !t.w.Room(maxCtrlHdr, 0) {
		return false
	}
	h := build(t.hdr[:0])
	t.w.Begin(h, len(h))
	t.w.End()
	return true
}

// untagged appends an untagged DDP header (L set, MO 0) with the RDMAP
// control byte of op, taking the next MSN of qn (the caller emits a
// one-segment message).
func (t *txEngine) untagged(h []byte, op wire.Opcode, qn uint32) []byte {
	h = ddp.AppendUntagged(h, &ddp.UntaggedFields{
		Last: true, RsvdULP: wire.ControlByte(wire.Version1, op), QN: qn, MSN: t.msn[qn],
	})
	t.msn[qn]++
	return h
}

// txEmitData queues the segments of a Send (untagged) or Write (tagged)
// message carrying the work request's payload. It reports true when the
// whole message is queued.
func (qp *QP) txEmitData(e *sqEntry, op wire.Opcode) bool {
	t := &qp.tx
	hlen := dataHeaderLen(op)
	maxPay := t.ulpdu - hlen
	pieces := int(e.nsge) + 1
	for {
		n, last := ddp.NextSegment(int(t.msgOff), int(e.length), maxPay)
		if !t.w.Room(hlen+n, pieces) {
			return false
		}
		h := t.hdr[:hlen]
		t.putDataHeader(h, e, op, last)
		if e.inline || e.nsge == 1 {
			t.w.FPDU(h, qp.txPiece(e, n))
		} else {
			t.w.Begin(h, hlen+n)
			qp.txGather(e, n)
			t.w.End()
		}
		t.msgOff += uint32(n)
		if last {
			if op != wire.OpWrite {
				t.msn[wire.QNSend]++
			}
			t.msgOff = 0
			return true
		}
	}
}

// txEmitSmall queues, in one loop, the work requests of the run from the
// job on that are one FPDU each with one piece of payload: a Send or
// Write of inline data or one SGE whose message is one DDP segment, the
// small message, framed as txEmitData frames it without its per-segment
// steps: the FPDUs go into one mpa.Run, the DDP header and the payload
// written straight into each, and the engine's cursor moves once at the
// end. The requests it queues are simple (see simpleSpan): it adds them
// to the engine's span, which it starts anew at the job when the job
// does not follow it. It stops at the first other job (left to txEmit)
// and reports false when the batch is full.
func (qp *QP) txEmitSmall() bool {
	t := &qp.tx
	if t.job != jobSQ || t.msgOff != 0 {
		return true
	}
	e, idx, end := t.wr, t.wrIdx, t.runEnd
	if sp := &t.simple; sp.to != idx {
		// What the loop queues does not follow the span: a new one
		// starts here.
		sp.from, sp.to, sp.wcs = idx, idx, sp.wcs[:0]
	}
	full := false
	// The Run opens at the first small message (BeginRun may take the
	// batch's arena or buffer: a job that sends nothing must not), for
	// the run's requests from there on (a run of one, a direct send's,
	// stays in the writer's small array when it fits there).
	var run mpa.Run
	open := false
	for !qp.broken.Load() {
		op, hlen := wire.OpWrite, ddp.TaggedHeaderLen // dataHeaderLen(op), set with op
		switch e.op {
		case WRWrite:
		case WRSend, WRSendInv:
			op, hlen = sendOpcode(e), ddp.UntaggedHeaderLen
		default:
			hlen = 0 // not a data message
		}
		n := int(e.length)
		if hlen == 0 || (!e.inline && e.nsge != 1) || n > t.ulpdu-hlen {
			break // not a small message: txEmit's
		}
		// The job's cursor is at the start of every message here (msgOff
		// and sgeOff 0): e is framed as its first and last segment.
		if !open {
			run, open = t.w.BeginRun(int(end-idx)), true
		}
		if b := run.Next(hlen + n); b != nil {
			if op == wire.OpWrite {
				var f ddp.TaggedFields
				t.writeFields(&f, e, true)
				ddp.PutTagged(b, &f)
			} else {
				var f ddp.UntaggedFields
				t.sendFields(&f, e, op, true)
				ddp.PutUntagged(b, &f)
			}
			if e.inline {
				copy(b[hlen:], qp.onePiece(e, idx, 0, n))
			} else {
				copy(b[hlen:], e.sge0.MR.localBytes(e.sge0.Offset, uint64(n))) // onePiece's SGE case, in line
			}
		} else {
			// Not one for a run (a payload the Writer does not copy,
			// markers) or no room left: the general call frames it or
			// tells a full batch.
			t.w.EndRun(&run)
			open = false
			h := t.hdr[:dataHeaderLen(op)]
			t.putDataHeader(h, e, op, true)
			if !t.w.AddFPDU(h, qp.onePiece(e, idx, 0, n)) {
				full = true
				break
			}
		}
		if op != wire.OpWrite {
			t.msn[wire.QNSend]++
		}
		// e is queued: nothing reads its sge0.MR from now on (its region
		// stays referenced by t.refs until the batch is written), and
		// the sweep under sqMu, which reads only its other fields before
		// it is done (txWrittenLocked marks it, after this), need not
		// drop it. It is simple (see simpleSpan).
		e.sge0.MR = nil
		if e.signaled || e.status != WCSuccess {
			t.simple.wcs = append(t.simple.wcs, idx)
		}
		idx++
		if idx == end {
			break
		}
		e = qp.sq.at(idx) // started under sqMu: see runEnd
	}
	t.w.EndRun(&run)
	t.simple.to = idx // the loop queued the requests before idx, all simple
	switch {
	case idx == end:
		// The run is queued (finishWR's end of a run).
		t.queuedUpTo = idx
		t.job, t.wr = jobNone, nil
	case idx != t.wrIdx:
		t.queuedUpTo = idx
		t.startJob(e, idx)
	}
	return !full
}

// txEmitOne is txEmitSmall for the job a direct send started
// (txDirectStartLocked: a Send or Write of one SGE, a run of one, its
// cursor at the start) in an empty batch: when the message is one small
// FPDU the writer lays out in its own array (mpa.Writer.One), it frames
// it there as txEmitSmall would, with the same bytes and the same
// bookkeeping, and reports true; otherwise it queues nothing and
// reports false (txEmitSmall and txEmit go on with the job).
func (qp *QP) txEmitOne() bool {
	t := &qp.tx
	e := t.wr
	n := int(e.length)
	op := wire.OpWrite
	if e.op != WRWrite {
		op = sendOpcode(e)
	}
	hl := dataHeaderLen(op)
	if n > t.ulpdu-hl || qp.broken.Load() {
		return false
	}
	b := t.w.One(hl + n)
	if b == nil {
		return false
	}
	t.putDataHeader(b, e, op, true)
	copy(b[hl:], e.sge0.MR.localBytes(e.sge0.Offset, uint64(n))) // onePiece's SGE case
	if op != wire.OpWrite {
		t.msn[wire.QNSend]++
	}
	t.w.EndOne()
	// The run of one is queued (finishWR's end of a run).
	t.queuedUpTo = t.wrIdx + 1
	t.job, t.wr = jobNone, nil
	return true
}

// dataHeaderLen is the DDP header length of a data message of opcode op:
// tagged for a Write, untagged for a Send.
func dataHeaderLen(op wire.Opcode) int {
	if op == wire.OpWrite {
		return ddp.TaggedHeaderLen
	}
	return ddp.UntaggedHeaderLen
}

// putDataHeader writes into h, at least dataHeaderLen(op) bytes, the DDP
// header of the job's next segment of a Write or a Send e of opcode op
// (writeFields, sendFields).
func (t *txEngine) putDataHeader(h []byte, e *sqEntry, op wire.Opcode, last bool) {
	if op == wire.OpWrite {
		var f ddp.TaggedFields
		t.writeFields(&f, e, last)
		ddp.PutTagged(h, &f)
		return
	}
	var f ddp.UntaggedFields
	t.sendFields(&f, e, op, last)
	ddp.PutUntagged(h, &f)
}

// writeFields sets f, a zero value, to the tagged DDP header of the
// job's next segment of a Write e: at message offset msgOff of the
// request's remote buffer. It sets the fields one by one: a composite
// literal returned by value is built in a temporary with narrow stores
// and copied into the caller's variable with 16-byte loads, which the
// CPU cannot forward from those stores (a stall of its own per FPDU, a
// third of txEmitSmall's time for 64-byte Sends).
func (t *txEngine) writeFields(f *ddp.TaggedFields, e *sqEntry, last bool) {
	f.Last = last
	f.RsvdULP = wire.ControlByte(wire.Version1, wire.OpWrite)
	f.STag = e.remote.STag
	f.TO = e.remote.Offset + uint64(t.msgOff)
}

// sendFields sets f, a zero value, to the untagged DDP header of the
// job's next segment of a Send e of opcode op: QN 0, the next MSN, MO
// msgOff (field by field, as writeFields).
func (t *txEngine) sendFields(f *ddp.UntaggedFields, e *sqEntry, op wire.Opcode, last bool) {
	f.Last = last
	f.RsvdULP = wire.ControlByte(wire.Version1, op)
	f.RsvdULP32 = uint32(e.invSTag)
	f.QN = wire.QNSend
	f.MSN = t.msn[wire.QNSend]
	f.MO = t.msgOff
}

// txPiece returns the next n payload bytes of the job e whose payload is
// one piece: its inline data or its one SGE.
func (qp *QP) txPiece(e *sqEntry, n int) []byte {
	t := &qp.tx
	if e.inline {
		return qp.onePiece(e, t.wrIdx, int(t.msgOff), n)
	}
	p := qp.onePiece(e, t.wrIdx, int(t.sgeOff), n)
	t.sgeOff += uint32(n)
	return p
}

// onePiece returns n payload bytes from offset off of e (SQ index idx),
// whose payload is one piece: its inline data or its one SGE.
func (qp *QP) onePiece(e *sqEntry, idx uint64, off, n int) []byte {
	if e.inline {
		s := qp.sq.slot(idx)*qp.cfg.MaxInline + off
		return qp.inline[s : s+n]
	}
	return e.sge0.MR.localBytes(e.sge0.Offset+uint64(off), uint64(n))
}

// txGather queues n payload bytes from the work request's SGL.
func (qp *QP) txGather(e *sqEntry, n int) {
	t := &qp.tx
	slot := qp.sq.slot(t.wrIdx)
	for n > 0 {
		s := qp.sqSGE(e, slot, t.sge)
		avail := int(s.Length - t.sgeOff)
		if avail == 0 {
			t.sge++
			t.sgeOff = 0
			continue
		}
		k := min(avail, n)
		start := s.Offset + uint64(t.sgeOff)
		t.w.Payload(s.MR.localBytes(start, uint64(k)))
		t.sgeOff += uint32(k)
		n -= k
	}
}

// txEmitResponse queues a Read Response or an Atomic Response. The IRQ
// slot is freed when its last FPDU is queued, before the write, so the
// peer's next request (which may arrive as soon as it sees the response)
// finds the IRD credit back.
func (qp *QP) txEmitResponse() bool {
	t := &qp.tx
	r := &t.resp
	if r.atomic {
		if !t.emitControl(func(h []byte) []byte {
			h = t.untagged(h, wire.OpAtomicResponse, wire.QNAtomic)
			return wire.AppendAtomicResponse(h, &wire.AtomicResponse{ReqID: r.reqID, OriginalValue: r.orig})
		}) {
			return false
		}
	} else {
		maxPay := t.ulpdu - ddp.TaggedHeaderLen
		for {
			n, last := ddp.NextSegment(int(t.msgOff), int(r.length), maxPay)
			if !t.w.Room(ddp.TaggedHeaderLen+n, 1) {
				return false
			}
			h := ddp.AppendTagged(t.hdr[:0], &ddp.TaggedFields{
				Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpReadResponse), STag: r.sinkSTag, TO: r.sinkTO + uint64(t.msgOff),
			})
			t.w.Begin(h, ddp.TaggedHeaderLen+n)
			if n > 0 {
				t.w.Payload(r.src[t.msgOff : t.msgOff+uint32(n)])
			}
			t.w.End()
			t.msgOff += uint32(n)
			if last {
				break
			}
		}
		if r.mr != nil {
			t.addRelease(r.mr)
		}
	}
	qp.sqMu.Lock()
	*qp.irq.pop() = irqEntry{}
	qp.sqMu.Unlock()
	t.resp = irqEntry{}
	t.job, t.msgOff = jobNone, 0
	return true
}

// txEmitRTR queues the P2P ready-to-receive message the initiator sends
// first (RFC 6581 §3), as wire.AppendRTR builds it (as siw does): a
// zero-length RDMA Write, Read Request or Send. The Read Request takes a
// hidden ORQ entry, so its zero-length Read Response completes nothing;
// an untagged RTR takes MSN 1 of its queue.
func (qp *QP) txEmitRTR() bool {
	t := &qp.tx
	if !t.emitControl(func(h []byte) []byte {
		rtr := qp.p.RTR
		switch rtr {
		case mpa.RTRWrite:
		case mpa.RTRRead:
			qp.sqMu.Lock()
			*qp.orq.push() = orqEntry{hidden: true}
			qp.sqMu.Unlock()
			t.msn[wire.QNReadRequest]++
		default: // a Send, as for any value Start let through
			rtr = mpa.RTRSend
			t.msn[wire.QNSend]++
		}
		return wire.AppendRTR(h, rtr)
	}) {
		return false
	}
	t.job = jobNone
	return true
}
