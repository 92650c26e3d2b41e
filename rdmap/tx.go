package rdmap

import (
	"encoding/binary"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/internal/bufpool"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// The send engine (one goroutine per QP):
//
//	PostSend ──> SQ ring ──┐        rx: Read/Atomic Requests ──> IRQ ──┐
//	                       v                                          v
//	        txPick: IRQ first (at most irqMaxBurst in a row while the SQ has
//	        work, siw's SIW_IRQ_MAXBURST_SQ_ACTIVE), then the SQ in order;
//	        Fence and ORD credits stall the SQ, never the IRQ
//	                       │
//	        emit: messages cut into DDP segments of at most MULPDU, each an
//	        FPDU in the mpa.Writer's batch (headers in scratch, payload from
//	        MRs; with CRC everything copied into one batch buffer, CRC over
//	        the copy)
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

// The send engine's buffers (rdmap/internal/bufpool): the FPDU writer's
// scratch arena, taken when a QP starts and given back when it ends, and
// its batch buffers with CRC, which the writer takes when a batch gets
// its first byte and gives back when the batch is written (or the QP
// ends), so the buffers in use are bounded by the batches being written
// at once and an idle QP holds none.
var (
	scratchPool = bufpool.New(mpa.WriterScratchLen)
	sendBufPool = bufpool.New(mpa.WriterBufLen)
)

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
	mr       *MR // Read source, referenced until the response is sent
	off      uint64
	length   uint32
	sinkSTag STag
	sinkTO   uint64
	reqID    uint32
	orig     uint64
}

type jobKind uint8

const (
	jobNone jobKind = iota
	jobSQ
	jobIRQ
	jobRTR
)

// txEngine is the send engine's state, owned by the send goroutine.
type txEngine struct {
	qp      *QP
	fr      mpa.Writer
	scratch *[]byte
	ulpdu   int
	msn     [4]uint32 // next MSN per untagged queue (QN 0..3), from 1
	reqID   uint32    // last Atomic Request ID used
	hdr     [maxCtrlHdr]byte

	curReqID uint32 // the Request ID of the atomic being sent

	job      jobKind
	e        *sqEntry
	idx      uint64
	off      uint32 // bytes of the current message sent
	sge      int
	sgeOff   uint32
	phase    uint8 // WRWriteImm: 0 the Write, 1 the Immediate Data
	r        irqEntry
	irqBurst int

	// Work requests before doneUpTo have been handed to the writer;
	// those from marked on complete after the next flush.
	doneUpTo, marked uint64
	releases         []*MR // references to drop after the flush
	jrefs            [MaxSGE]*MR
	njrefs           int // references the current work request holds
	closeTimer       *time.Timer
	halfClose        bool  // the connection has CloseWrite
	err              error // the send direction's first fatal error (sticky)
}

func (t *txEngine) init(qp *QP, ulpdu int) {
	t.qp = qp
	t.ulpdu = ulpdu
	t.msn = [4]uint32{1, 1, 1, 1}
	t.scratch = scratchPool.Get()
	t.fr.Init(mpa.WriterConfig{CRC: qp.p.CRC, Markers: qp.p.MarkersTx, MaxHeader: maxCtrlHdr,
		Scratch: *t.scratch, Buffers: sendBufPool})
	t.releases = make([]*MR, 0, 2*mpa.WriterMaxIOV)
	_, t.halfClose = qp.conn.(interface{ CloseWrite() error })
}

func (t *txEngine) release() {
	t.fr.Release()
	if t.scratch != nil {
		scratchPool.Put(t.scratch)
		t.scratch = nil
	}
	for _, mr := range t.releases {
		mr.release()
	}
	t.releases = t.releases[:0]
	t.dropJobRefs()
	// A response being sent still has its IRQ slot (freed only when its
	// last FPDU is queued), whose reference the QP's flush releases.
	t.r = irqEntry{}
	t.e = nil
	if t.closeTimer != nil {
		t.closeTimer.Stop()
	}
}

// txLoop is the send goroutine.
func (qp *QP) txLoop(conn net.Conn) {
	defer close(qp.txDone)
	t := &qp.tx
	if !qp.txGate() {
		qp.txShutdown(conn, false)
		return
	}
	if qp.p.P2P && qp.p.Initiator && qp.p.RTR != mpa.RTRNone {
		t.job = jobRTR
	}
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
			return
		case StateError:
			qp.txShutdown(conn, true)
			return
		case StateClosing:
			if !closing {
				closing = true
				_ = conn.SetWriteDeadline(time.Now().Add(qp.cfg.DisconnectTimeout))
				t.closeTimer = time.NewTimer(qp.cfg.DisconnectTimeout)
			}
		}
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
			continue
		}
		// A connection without half-close ends with the close; it waits
		// for the responses to our Reads first.
		if closing && (qp.rx.ended.Load() || (qp.txIdle() && (t.halfClose || qp.orqEmpty()))) {
			qp.txShutdown(conn, false)
			return
		}
		if closing {
			select {
			case <-qp.bell:
			case <-t.closeTimer.C:
				qp.txShutdown(conn, false)
				return
			}
			continue
		}
		<-qp.bell
	}
}

// txGate holds the first FPDU back: a responder waits for the
// initiator's first FPDU (RFC 5044; Linux siw drops a connection that
// sends right after its Reply), an initiator waits FirstSendDelay. It
// reports false if the QP left RTS meanwhile: then nothing may be sent.
func (qp *QP) txGate() bool {
	var timer <-chan time.Time
	first := qp.rxFirst
	if qp.p.Initiator {
		if qp.p.FirstSendDelay <= 0 {
			return true
		}
		tm := time.NewTimer(qp.p.FirstSendDelay)
		defer tm.Stop()
		timer = tm.C
		first = nil // the initiator waits for its delay only
	}
	for {
		select {
		case <-first:
			return true
		case <-timer:
			return true
		case <-qp.bell:
		}
		qp.mu.Lock()
		st := qp.state
		qp.mu.Unlock()
		if st != StateRTS {
			if qp.p.Initiator {
				return true
			}
			// A responder that has not heard from the initiator may
			// still close; a Terminate it could not send is dropped.
			select {
			case <-qp.rxFirst:
				return true
			default:
				return false
			}
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
	return qp.sqNext == qp.sqTail && qp.irqHead == qp.irqTail
}

func (qp *QP) orqEmpty() bool {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.orqHead == qp.orqTail
}

// txShutdown ends the send direction: FIN when the connection supports
// half-close (else a full close), then a read deadline so the receive
// engine stops waiting for the peer (to drain after a Terminate, or for
// the peer's FIN after a graceful close).
func (qp *QP) txShutdown(conn net.Conn, errorPath bool) {
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
// FPDU boundary, since batches are written whole).
func (qp *QP) txSendTerminate(conn net.Conn, ti *termInfo) {
	t := &qp.tx
	layout := wire.LayoutRFC
	if qp.p.TerminateLayoutSiw {
		layout = wire.LayoutSiw
	}
	msg := ti.message(layout)
	h := ddp.AppendUntagged(t.hdr[:0], &ddp.UntaggedFields{
		Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpTerminate),
		QN: wire.QNTerminate, MSN: t.msn[wire.QNTerminate], MO: 0,
	})
	t.msn[wire.QNTerminate]++
	h = wire.AppendTerminate(h, &msg)
	t.fr.Reset()
	t.fr.Begin(h, len(h))
	t.fr.End()
	_ = conn.SetWriteDeadline(time.Now().Add(termWriteTimeout))
	n, err := t.fr.Flush(conn)
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

// txBatch fills one batch and writes it. It reports whether anything
// happened (FPDUs sent or work requests completed).
func (qp *QP) txBatch(conn net.Conn) (bool, error) {
	t := &qp.tx
	t.fr.Reset()
	for !qp.broken.Load() {
		if t.job == jobNone && !qp.txPick() {
			break
		}
		if !qp.txEmit() {
			break
		}
	}
	sent := !t.fr.Empty()
	var err error
	if sent {
		fpdus := t.fr.FPDUs()
		var n int
		n, err = t.fr.Flush(conn)
		qp.stats.txBytes.Add(uint64(n))
		qp.stats.txWritevs.Add(1)
		if err == nil {
			qp.stats.txFPDUs.Add(uint64(fpdus))
		}
	}
	for i, mr := range t.releases {
		mr.release()
		t.releases[i] = nil
	}
	t.releases = t.releases[:0]
	if err != nil {
		return sent, err
	}
	done := t.marked != t.doneUpTo
	if done {
		qp.sqMu.Lock()
		for i := t.marked; i < t.doneUpTo; i++ {
			if e := &qp.sq[i&qp.sqMask]; e.state == sqActive {
				e.state = sqDone
			}
		}
		t.marked = t.doneUpTo
		ok := qp.sweepLocked()
		qp.sqMu.Unlock()
		if !ok {
			qp.scq.overflowed()
		}
	}
	return sent || done, nil
}

// txPick takes the next job: a response from the IRQ or a work request
// from the SQ. It reports false when there is nothing runnable.
func (qp *QP) txPick() bool {
	t := &qp.tx
	qp.sqMu.Lock()
	irqReady := qp.irqHead != qp.irqTail
	var e *sqEntry
	sqRunnable := false
	if qp.sqNext != qp.sqTail {
		e = &qp.sq[qp.sqNext&qp.sqMask]
		sqRunnable = true
		if e.fence && qp.orqHead != qp.orqTail {
			sqRunnable = false
		}
		if (e.op == WRRead || e.op == WRFetchAdd || e.op == WRCmpSwap) && qp.orqTail-qp.orqHead >= uint64(qp.orqCap) {
			sqRunnable = false
		}
	}
	if irqReady && (!sqRunnable || t.irqBurst < irqMaxBurst) {
		t.irqBurst++
		t.r = qp.irq[qp.irqHead%uint64(len(qp.irq))]
		qp.sqMu.Unlock()
		t.job, t.off = jobIRQ, 0
		return true
	}
	t.irqBurst = 0
	if !sqRunnable {
		qp.sqMu.Unlock()
		return false
	}
	idx := qp.sqNext
	qp.sqNext++
	status := qp.txCheckLocked(e)
	if status == WCSuccess {
		e.state = sqActive
		if e.op == WRRead || e.op == WRFetchAdd || e.op == WRCmpSwap {
			if qp.orqCap == 0 {
				status = WCLocQPOpErr // the handshake settled ORD 0
			} else {
				e.state = sqAwaiting
				if e.sgl[0].MR.acquire() {
					o := &qp.orq[qp.orqTail%uint64(len(qp.orq))]
					*o = orqEntry{atomic: e.op != WRRead, sqIdx: idx, mr: e.sgl[0].MR, off: e.sgl[0].Offset,
						sinkSTag: e.sgl[0].MR.STag(), length: e.sgl[0].Length, msn: t.msn[wire.QNReadRequest]}
					if o.atomic {
						o.msn = t.msn[wire.QNAtomic]
						t.reqID++
						o.reqID = t.reqID
						t.curReqID = t.reqID
					}
					qp.orqTail++
				} else {
					status = WCLocProtErr
				}
			}
		} else if !e.inline && e.op != WRLocalInv {
			// Hold the source memory until the request is written.
			for i := range e.nsge {
				if !e.sgl[i].MR.acquire() {
					status = WCLocProtErr
					break
				}
				t.jrefs[t.njrefs] = e.sgl[i].MR
				t.njrefs++
			}
		}
	}
	if status != WCSuccess {
		e.state, e.status = sqDone, status
		qp.sqMu.Unlock()
		t.dropJobRefs()
		t.doneUpTo = idx + 1
		ti := localCatastrophic(&localWRError{op: e.op, status: status})
		qp.fail(ti.err(), ti)
		return false
	}
	qp.sqMu.Unlock()
	t.job, t.e, t.idx = jobSQ, e, idx
	t.off, t.sge, t.sgeOff, t.phase = 0, 0, 0, 0
	if e.op == WRImmData {
		t.phase = 1
	}
	return true
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
func (qp *QP) txCheckLocked(e *sqEntry) WCStatus {
	switch e.op {
	case WRLocalInv:
		mr := qp.dev.lookupMR(e.invSTag)
		if mr == nil || mr.index != uint32(e.invSTag)>>8 || STag(uint32(mr.st.Load())) != e.invSTag {
			return WCLocQPOpErr
		}
		if mr.pd != qp.pd {
			return WCLocProtErr
		}
		mr.invalidate()
		return WCSuccess
	case WRImmData:
		return WCSuccess
	}
	if e.inline {
		return WCSuccess
	}
	perm := Access(0)
	if e.op == WRRead || e.op == WRFetchAdd || e.op == WRCmpSwap {
		perm = AccessLocalWrite
	}
	for i := range e.nsge {
		s := &e.sgl[i]
		if s.MR.checkLocal(qp.pd, perm, s.Offset, uint64(s.Length)) != accessOK {
			return WCLocProtErr
		}
	}
	return WCSuccess
}

// txEmit queues FPDUs of the current job until it is done (true) or the
// batch is full (false).
func (qp *QP) txEmit() bool {
	t := &qp.tx
	switch t.job {
	case jobRTR:
		return qp.txEmitRTR()
	case jobIRQ:
		return qp.txEmitResponse()
	}
	e := t.e
	switch e.op {
	case WRLocalInv:
	case WRSend, WRSendInv:
		op := wire.OpSend
		switch {
		case e.op == WRSendInv && e.solicited:
			op = wire.OpSendSEInv
		case e.op == WRSendInv:
			op = wire.OpSendInv
		case e.solicited:
			op = wire.OpSendSE
		}
		if !qp.txEmitData(e, op) {
			return false
		}
	case WRWrite, WRWriteImm, WRImmData:
		if t.phase == 0 {
			if !qp.txEmitData(e, wire.OpWrite) {
				return false
			}
			if e.op == WRWrite {
				break
			}
			t.phase = 1
		}
		op := wire.OpImmData
		if e.solicited {
			op = wire.OpImmDataSE
		}
		if !t.fr.Room(maxCtrlHdr, 0) {
			return false
		}
		h := t.untagged(op, wire.QNSend, 0, 0)
		h = binary.BigEndian.AppendUint64(h, e.imm)
		t.fr.Begin(h, len(h))
		t.fr.End()
	case WRRead:
		if !t.fr.Room(maxCtrlHdr, 0) {
			return false
		}
		h := t.untagged(wire.OpReadRequest, wire.QNReadRequest, 0, 0)
		h = wire.AppendReadRequest(h, &wire.ReadRequestFields{
			SinkSTag: e.sgl[0].MR.STag(), SinkTO: e.sgl[0].Offset, Size: e.length,
			SrcSTag: e.remote.STag, SrcTO: e.remote.Offset,
		})
		t.fr.Begin(h, len(h))
		t.fr.End()
	case WRFetchAdd, WRCmpSwap:
		if !t.fr.Room(maxCtrlHdr, 0) {
			return false
		}
		reqID := t.curReqID
		a := wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: reqID, STag: e.remote.STag, TO: e.remote.Offset,
			AddSwap: e.cmpAdd, AddSwapMask: e.addMask}
		if e.op == WRCmpSwap {
			a = wire.AtomicRequest{Op: wire.AtomicCmpSwap, ReqID: reqID, STag: e.remote.STag, TO: e.remote.Offset,
				AddSwap: e.swap, AddSwapMask: e.swapMask, Compare: e.cmpAdd, CompareMask: e.cmpMask}
		}
		h := t.untagged(wire.OpAtomicRequest, wire.QNAtomic, 0, 0)
		h = wire.AppendAtomicRequest(h, &a)
		t.fr.Begin(h, len(h))
		t.fr.End()
	}
	t.doneUpTo = t.idx + 1
	t.job, t.e = jobNone, nil
	for i := range t.njrefs {
		t.releases = append(t.releases, t.jrefs[i])
		t.jrefs[i] = nil
	}
	t.njrefs = 0
	return true
}

// dropJobRefs releases the memory references of an abandoned job.
func (t *txEngine) dropJobRefs() {
	for i := range t.njrefs {
		t.jrefs[i].release()
		t.jrefs[i] = nil
	}
	t.njrefs = 0
}

// untagged builds an untagged DDP header (L set) with the RDMAP control
// byte of op, taking the next MSN of qn (the caller emits one message).
func (t *txEngine) untagged(op wire.Opcode, qn uint32, mo uint32, inv STag) []byte {
	h := ddp.AppendUntagged(t.hdr[:0], &ddp.UntaggedFields{
		Last: true, RsvdULP: wire.ControlByte(wire.Version1, op), RsvdULP32: uint32(inv),
		QN: qn, MSN: t.msn[qn], MO: mo,
	})
	t.msn[qn]++
	return h
}

// txEmitData queues the segments of a Send (untagged) or Write (tagged)
// message carrying the work request's payload. It reports true when the
// whole message is queued.
func (qp *QP) txEmitData(e *sqEntry, op wire.Opcode) bool {
	t := &qp.tx
	tagged := op == wire.OpWrite
	hlen := ddp.UntaggedHeaderLen
	if tagged {
		hlen = ddp.TaggedHeaderLen
	}
	maxPay := t.ulpdu - hlen
	pieces := int(e.nsge) + 1
	for {
		n, last := ddp.NextSegment(int(t.off), int(e.length), maxPay)
		if !t.fr.Room(hlen+n, pieces) {
			return false
		}
		var h []byte
		if tagged {
			h = ddp.AppendTagged(t.hdr[:0], &ddp.TaggedFields{
				Last: last, RsvdULP: wire.ControlByte(wire.Version1, op), STag: e.remote.STag, TO: e.remote.Offset + uint64(t.off),
			})
		} else {
			h = ddp.AppendUntagged(t.hdr[:0], &ddp.UntaggedFields{
				Last: last, RsvdULP: wire.ControlByte(wire.Version1, op), RsvdULP32: uint32(e.invSTag),
				QN: wire.QNSend, MSN: t.msn[wire.QNSend], MO: t.off,
			})
		}
		t.fr.Begin(h, hlen+n)
		if e.inline {
			s := int(t.idx&qp.sqMask) * qp.cfg.MaxInline
			t.fr.Payload(qp.inline[s+int(t.off) : s+int(t.off)+n])
		} else {
			t.gather(e, n)
		}
		t.fr.End()
		t.off += uint32(n)
		if last {
			if !tagged {
				t.msn[wire.QNSend]++
			}
			t.off = 0
			return true
		}
	}
}

// gather queues n payload bytes from the work request's SGL.
func (t *txEngine) gather(e *sqEntry, n int) {
	for n > 0 {
		s := &e.sgl[t.sge]
		avail := int(s.Length - t.sgeOff)
		if avail == 0 {
			t.sge++
			t.sgeOff = 0
			continue
		}
		k := min(avail, n)
		start := s.Offset + uint64(t.sgeOff)
		t.fr.Payload(s.MR.buf[start : start+uint64(k)])
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
	r := &t.r
	if r.atomic {
		if !t.fr.Room(maxCtrlHdr, 0) {
			return false
		}
		h := t.untagged(wire.OpAtomicResponse, wire.QNAtomic, 0, 0)
		h = wire.AppendAtomicResponse(h, &wire.AtomicResponse{ReqID: r.reqID, OriginalValue: r.orig})
		t.fr.Begin(h, len(h))
		t.fr.End()
	} else {
		maxPay := t.ulpdu - ddp.TaggedHeaderLen
		for {
			n, last := ddp.NextSegment(int(t.off), int(r.length), maxPay)
			if !t.fr.Room(ddp.TaggedHeaderLen+n, 1) {
				return false
			}
			h := ddp.AppendTagged(t.hdr[:0], &ddp.TaggedFields{
				Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpReadResponse), STag: r.sinkSTag, TO: r.sinkTO + uint64(t.off),
			})
			t.fr.Begin(h, ddp.TaggedHeaderLen+n)
			if n > 0 {
				src := r.off + uint64(t.off)
				t.fr.Payload(r.mr.buf[src : src+uint64(n)])
			}
			t.fr.End()
			t.off += uint32(n)
			if last {
				break
			}
		}
		if r.mr != nil {
			t.releases = append(t.releases, r.mr)
		}
	}
	qp.sqMu.Lock()
	qp.irq[qp.irqHead%uint64(len(qp.irq))] = irqEntry{}
	qp.irqHead++
	qp.sqMu.Unlock()
	t.r = irqEntry{}
	t.job, t.off = jobNone, 0
	return true
}

// txEmitRTR queues the P2P ready-to-receive message the initiator sends
// first (RFC 6581 §3), as wire.AppendRTR builds it (as siw does): a
// zero-length RDMA Write, Read Request or Send. The Read Request takes a
// hidden ORQ entry, so its zero-length Read Response completes nothing;
// an untagged RTR takes MSN 1 of its queue.
func (qp *QP) txEmitRTR() bool {
	t := &qp.tx
	if !t.fr.Room(maxCtrlHdr, 0) {
		return false
	}
	rtr := qp.p.RTR
	switch rtr {
	case mpa.RTRWrite:
	case mpa.RTRRead:
		qp.sqMu.Lock()
		qp.orq[qp.orqTail%uint64(len(qp.orq))] = orqEntry{hidden: true}
		qp.orqTail++
		qp.sqMu.Unlock()
		t.msn[wire.QNReadRequest]++
	default: // a Send, as for any value Start let through
		rtr = mpa.RTRSend
		t.msn[wire.QNSend]++
	}
	h := wire.AppendRTR(t.hdr[:0], rtr)
	t.fr.Begin(h, len(h))
	t.fr.End()
	t.job = jobNone
	return true
}
