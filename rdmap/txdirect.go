package rdmap

import (
	"errors"
	"runtime/debug"
	"syscall"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap/internal/sys"
)

// The direct send: a work request posted to an idle QP is written on the
// poster's goroutine, so that a small message costs no handoff to the
// send goroutine (none is started).
//
// The send engine's state (txEngine: the writer, the SQ cursor, the job)
// belongs to the send goroutine while txEngine.state is txRunning. Once
// the goroutine has parked (txParked: it has exited), PostSend may take
// the engine by moving the state from txParked to txDirect (a
// compare-and-swap; it never waits), which it tries, still holding
// QP.sqMu after pushing its work request (txDirectTakeLocked), only when
// the request is the only one the engine has not taken, no Read or
// Atomic Response is queued, and the request is no Local Invalidate,
// fast registration or window bind (their fences may wait: directOp).
// Holding the engine and sqMu, it checks that the engine has passed its
// gate (a responder's wait for the initiator's first FPDU, the
// initiator's first-send delay), that the QP is in RTS with nothing in
// progress, and that the message is runnable and one FPDU
// (txDirectFitsLocked: a larger one is the send goroutine's, which
// batches it). The common request, a Send or Write of one SGE, it starts
// there too, as txPick would (txDirectStartLocked: the same check of its
// local memory and the same reference, under the same hold of sqMu);
// then, without sqMu (txDirectRun), it runs one job (txPick first for any
// other request, or when that check failed: txPick fails it) and txEmit
// as the send goroutine would (a started request that is one small FPDU
// framed by txEmitOne in the writer's own array), and one non-blocking
// writev (sys.Writev through RawConn.Write, whose callback never asks to
// wait: EAGAIN writes nothing; a small FPDU is one slice, written with
// write(2)). When the writev took the whole batch, the batch's work
// requests complete there (txDirectRun, as txWritten, under the hold of
// sqMu that looks for more), so a signaled one's completion is in the CQ
// when PostSend returns.
//
// Whatever that leaves (the unwritten rest of the batch, t.rest; another
// work request or a Response queued meanwhile; a state change; an error)
// is the send goroutine's: txDirectEnd starts one, which writes the rest
// first (blocking, as any batch) and goes on. Otherwise txDirectEnd parks
// the engine again and then looks for a doorbell rung meanwhile (ring
// starts no goroutine while the state is txDirect), exactly as txPark
// does (txTakeRung), so no wakeup is lost: a send goroutine still
// parking when the direct send took the engine may take that doorbell,
// and then rings again, as txDirectEnd does when another took the engine
// from it. FPDUs leave in the order the one engine emits them, a batch
// is written before the next one is built, and completions stay in SQ
// order. The send goroutine's final exit leaves the state txRunning, so
// no direct send runs once the send direction has ended (finish releases
// the engine's buffers after that).
//
// A fault in registered memory while the batch is built fails the QP as
// in the send goroutine (txDirectRun holds guardTx's guard in line) and
// drops the unwritten batch; a write
// error is left to the send goroutine's own write of the rest, which
// meets it again and ends the QP as it always does.

// txDirectTakeLocked is the direct-send decision of PostSend and
// PostSends, under sqMu right after they pushed the work request e (see
// above): it takes the send engine (txParked to txDirect; it never
// waits) when e is the only request the engine has not taken, no
// Response is queued and e is a directOp. It reports whether it took the
// engine, and whether e is to be written here (run: the engine has
// passed its gate, has nothing in progress, the QP is in RTS and e is
// runnable and one FPDU, txDirectFitsLocked), and when run it may have
// started e (txDirectStartLocked). Holding sqMu and the engine, nothing
// it looked at changes before txDirectRun (or, when not run, the
// txDirectEnd that gives the engine to a send goroutine) but what a
// later post adds (which the send goroutine takes after this one). fast
// says that e is the common request, a Send or Write of one SGE
// (validFast), for which the tests of its opcode and SGEs are known to
// pass.
//
// +checklocks:qp.sqMu
func (qp *QP) txDirectTakeLocked(e *sqEntry, fast bool) (took, run bool) {
	t := &qp.tx
	if t.raw == nil || qp.sqNext != qp.sqTail.Load()-1 || !qp.irq.empty() || (!fast && !directOp(e.op)) ||
		!t.state.CompareAndSwap(txParked, txDirect) {
		return false, false
	}
	if !t.gated || t.job != jobNone || t.rest || qp.broken.Load() || !qp.rtsNow() {
		return true, false
	}
	if !fast {
		if !qp.txDirectFitsLocked(e) {
			return true, false
		}
		if e.nsge == 1 && !e.inline && (e.op == WRSend || e.op == WRWrite) {
			qp.txDirectStartLocked(e)
		}
		return true, true
	}
	// txDirectFitsLocked for a Send or Write of one SGE: no ORQ entry to
	// wait for, the fence's wait for the ORQ to drain
	// (sqEntryRunnableLocked), one FPDU.
	if (e.fence && !qp.orq.empty()) || int(e.length)+ddp.TaggedHeaderLen > t.ulpdu {
		return true, false
	}
	qp.txDirectStartLocked(e)
	return true, true
}

// txDirectStartLocked starts e, the SQ entry at sqNext (nothing after
// it, the IRQ empty: txDirectTakeLocked), a Send or Write of one SGE
// (the caller tested that), exactly as txPick would start it as a run
// of one: the check of its SGE (txCheckLocked's, as txExtendRunLocked
// does it in line) and the reference that keeps its region until the
// batch holding it is written (takeRef), then the job. When the check
// or the reference fails it starts nothing (and takes no reference),
// and the direct send's txPick starts, and fails, e as the send
// goroutine would.
//
// +checklocks:qp.sqMu
func (qp *QP) txDirectStartLocked(e *sqEntry) {
	t, s, idx := &qp.tx, &e.sge0, qp.sqNext
	if b, ae := s.MR.localBinding(qp.pd); ae != accessOK {
		return
	} else if _, ae := b.slice(0, s.Offset, uint64(s.Length)); ae != accessOK {
		return
	}
	if t.refs == nil {
		// takeRef's first reference, in line (every direct send's).
		if !s.MR.acquire() {
			return
		}
		t.ref1[0] = txRef{mr: s.MR, upTo: idx + 1}
		t.refs = t.ref1[:]
	} else if !t.takeRef(s.MR, idx) {
		return
	}
	e.state = sqActive
	qp.sqNext = idx + 1
	t.irqBurst = 0
	t.runEnd = idx + 1
	t.job = jobSQ
	t.startJob(e, idx)
}

// rtsNow reports whether the QP is in RTS, without QP.mu (the state
// changes under mu; a send that saw RTS just before a change is one that
// the change found under way, as with the lock).
func (qp *QP) rtsNow() bool { return qp.inRTS.Load() }

// txDirectRun builds and writes one batch (see above) and gives the
// engine back (txDirectEnd), to a send goroutine when the engine has
// more to do.
func (qp *QP) txDirectRun() {
	if more, held, _ := qp.txDirectBatch(false); held {
		qp.txDirectEnd(more)
	}
}

// txDirectBatch builds one batch on the goroutine that holds the engine
// (txDirect: a direct send's poster, or a PollTx waiter) and writes it
// with one non-blocking writev. A direct send's batch (all false) is its
// one job, a PollTx waiter's (all true) every runnable job up to a full
// batch, as txBatch builds it. When the batch was written whole, or held
// nothing, it reports held: the caller still holds the engine and gives
// it back; more says whether the engine has more to do (txDirectMore),
// progressed whether it wrote or completed anything. Otherwise (a fault,
// or a rest the socket did not take) it has given the engine to a send
// goroutine.
//
// The batch is built under guardTx's guard, in line: faults are panics
// while building is set, and the one deferred call recovers only then
// (a build that returned has nothing to recover). A fault in registered
// memory there fails the QP with the Terminate (sendFault), drops the
// unwritten batch and leaves the rest to a send goroutine, as guardTx's
// progress does in the send loop. Once building is clear the deferred
// call touches nothing of the engine, which txDirectEnd may have given
// away by then.
func (qp *QP) txDirectBatch(all bool) (more, held, progressed bool) {
	t := &qp.tx
	// The batch before was written whole (Wrote reset it) or dropped
	// (Reset), or held nothing; Reset is for what nothing should leave
	// (an empty batch's bookkeeping is as Reset leaves it, and an arena
	// it may hold serves this batch and goes back when it is written).
	if !t.w.Empty() {
		t.w.Reset()
	}
	old := debug.SetPanicOnFault(true)
	building := true
	defer func() {
		if !building {
			return
		}
		v := recover()
		debug.SetPanicOnFault(old)
		if v == nil {
			return // runtime.Goexit: nothing to fail
		}
		qp.sendFault(v)
		// Nothing of the batch is written.
		t.w.Reset()
		t.written()
		qp.txDirectEnd(true)
		more, held, progressed = true, false, false
	}()
	switch {
	case all:
		qp.txFill() // txBatch's
	case t.job != jobNone:
		// One job: the one txDirectStartLocked started (the engine took
		// none before it), framed by txEmitOne when it is one small
		// FPDU (at the ULPDU txEMSSDue may just have changed), else
		// txPick's.
		qp.txEMSSDue()
		if !qp.txEmitOne() && qp.txEmitSmall() && t.job != jobNone {
			qp.txEmit()
		}
	default:
		if qp.txPick() && qp.txEmitSmall() && t.job != jobNone {
			qp.txEmit()
		}
	}
	debug.SetPanicOnFault(old)
	building = false

	if t.w.Empty() {
		// Nothing to write: what was queued without bytes (a Local
		// Invalidate, a PollTx waiter's) completes as txBatch completes
		// it, and a request txPick failed has completed already.
		t.written()
		done := qp.txWritten()
		return qp.txDirectMore(), true, done
	}
	fpdus := t.w.FPDUs()
	t.pend = t.w.Pending()
	t.dn, t.derr = 0, nil
	err := t.raw.Write(t.writeFn)
	t.pend = nil
	if err == nil {
		err = t.derr
	}
	if all {
		qp.stats.txPolled.Add(1)
	} else {
		qp.stats.txDirect.Add(1)
	}
	if t.dn > 0 {
		qp.stats.txBytes.Add(uint64(t.dn))
		qp.stats.txWritevs.Add(1)
	}
	if (err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)) || !t.w.Wrote(t.dn) {
		// The rest (or the error) is the send goroutine's write.
		t.rest, t.restFPDUs = true, fpdus
		if all {
			qp.stats.txPolledRest.Add(1)
		} else {
			qp.stats.txDirectRest.Add(1)
		}
		qp.txDirectEnd(true)
		return true, false, true
	}
	qp.stats.txFPDUs.Add(uint64(fpdus))
	t.written()
	// txWritten and then txDirectMore under one hold of sqMu: the
	// batch's work requests complete, and the engine has more to do
	// when the SQ or the IRQ has, or the QP changed meanwhile.
	if t.completedUpTo != t.queuedUpTo {
		qp.sqMu.Lock()
		ok := qp.txWrittenLocked()
		more = qp.sqNext != qp.sqTail.Load() || !qp.irq.empty()
		qp.sqMu.Unlock()
		if !ok {
			qp.scq.overflowed()
		}
		more = more || t.job != jobNone || qp.broken.Load() || !qp.rtsNow()
	} else {
		more = qp.txDirectMore()
	}
	return more, true, true
}

// txDirectEnd gives the engine back after a direct send: to a new send
// goroutine when there is more to do, else parked (see above).
func (qp *QP) txDirectEnd(more bool) {
	t := &qp.tx
	if more {
		t.state.Store(txRunning)
		go t.restart()
		return
	}
	if t.parkHook != nil {
		t.parkHook(parkDirect)
	}
	t.state.Store(txParked)
	if qp.txTakeRung() {
		go t.restart()
	}
}

// directOp reports whether a work request of op may be executed by a
// direct send: not a Local Invalidate, fast registration or window bind,
// whose execution may wait for a receive engine to leave a placement
// (MR.fence), which PostSend must not.
func directOp(op WROpcode) bool {
	return op != WRLocalInv && op != WRRegMR && op != WRBindMW
}

// txDirectFitsLocked reports whether e, the SQ entry at sqNext, is
// runnable and one FPDU (or a Write and its Immediate Data) whose iovecs
// one sys.Writev takes: a larger message is the send goroutine's, which
// writes it in batches (a direct send of its first piece would only add
// a writev).
//
// +checklocks:qp.sqMu
func (qp *QP) txDirectFitsLocked(e *sqEntry) bool {
	if !qp.sqEntryRunnableLocked(e) {
		return false
	}
	switch e.op {
	case WRRead, WRFetchAdd, WRCmpSwap, WRImmData:
		return true
	}
	return int(e.length)+ddp.TaggedHeaderLen <= qp.tx.ulpdu && int(e.nsge) <= sys.WritevMaxIOV-3
}

// txDirectMore reports whether the send engine has work after a direct
// job: the rest of the job, or more in the SQ or the IRQ, or a QP that
// left RTS meanwhile (the send goroutine handles the change).
func (qp *QP) txDirectMore() bool {
	if qp.tx.job != jobNone || qp.broken.Load() {
		return true
	}
	qp.sqMu.Lock()
	more := qp.sqNext != qp.sqTail.Load() || !qp.irq.empty()
	qp.sqMu.Unlock()
	return more || !qp.rtsNow()
}

// directWrite is the RawConn.Write callback of a direct send (bound
// once, as txEngine.writeFn, so the call allocates nothing): one writev
// of the batch's pending bytes. It never asks to wait.
func (t *txEngine) directWrite(fd uintptr) bool {
	t.dn, t.derr = sys.Writev(fd, t.pend)
	if t.dn < 0 {
		t.dn = 0
	}
	return true
}
