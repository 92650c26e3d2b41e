package rdmap

import (
	"context"
	"sync/atomic"
	"time"
)

// The send engine's polling mode (QPConfig.PollTx): the work a poster
// queues while the send engine is parked waits for the next CQ.Wait on
// the QP's send CQ, which takes the engine (txParked to txDirect, the
// direct send's hold: txdirect.go) and writes batches there, each built
// as txBatch builds one and written with one non-blocking writev
// (txDirectBatch), until the engine has nothing more to send. So a
// poster that waits for its completions frames and writes its own work
// on its own goroutine, and no send goroutine runs beside it.
//
// The engine goes to a send goroutine (txDirectEnd(true)), exactly as
// after a direct send, whenever the driver would otherwise wait or leave
// the common path: the socket did not take a whole batch (the goroutine
// writes the rest, blocking, then goes on), the QP broke or left RTS,
// the engine has not passed its gate, work is queued but nothing is
// runnable (a fence waiting for Read Responses), the wait's context is
// done, or the driver has written txPollMaxBatches batches in this Wait
// (a poster on another goroutine may keep queuing). Otherwise it parks
// the engine again (txDirectEnd(false), which serves a doorbell rung
// meanwhile).
//
// A send goroutine that has written the rest a driver left it parks
// again at once when all that waits is SQ work (txPollPark): that is
// the next Wait's to send, so the goroutine spends its time blocked in
// the write, not framing beside the poster.
//
// PostSend and PostSends of a PollTx QP ring the doorbell without
// starting a send goroutine (ringPost) and, while the engine is parked,
// wake a waiter asleep on the send CQ (it looks again and drives) and
// arm the idle timer, once per PollTxIdle at most: when it fires and the
// doorbell is still pending with the engine parked, it rings as without
// PollTx (ring starts the goroutine). So no queued work waits longer
// than PollTxIdle for a Wait that may never come. Every other doorbell
// (a state change, an inbound Read Request, the first FPDU, a drained
// ORQ) starts the goroutine at once, as without PollTx.
//
// The order of the FPDUs and of the completions is the one engine's
// whoever holds it, as with the direct send; a batch is written whole
// before the next is built, by the holder or by the goroutine it hands
// the rest to.

// pollTxIdle is QPConfig.PollTxIdle's default (nanoseconds; a variable
// for tests, atomic because tests run QPs in parallel).
var pollTxIdle atomic.Int64

func init() { pollTxIdle.Store(int64(time.Millisecond)) }

// txPollMaxBatches bounds the batches one Wait writes (about 60 MiB of
// large messages, 1.4 M of 64 bytes; see mpa.WriterMaxBytes).
const txPollMaxBatches = 128

// ringPost is PostSend's and PostSends' doorbell: ring, or for a PollTx
// QP the doorbell alone and, while the engine is parked, the idle timer.
func (qp *QP) ringPost() {
	t := &qp.tx
	if !t.poll.Load() {
		qp.ring()
		return
	}
	select {
	case qp.bell <- struct{}{}:
	default:
	}
	// The doorbell before the look at the state, as in ring: an engine
	// that parks after this look serves it (txPark, txDirectEnd) or
	// leaves it as this does (txPollPark).
	if t.state.Load() == txParked {
		qp.txPollLeave()
	}
}

// txPollLeave leaves the rung doorbell of a parked PollTx engine to the
// next Wait: it wakes a waiter asleep on the send CQ (which drives the
// engine when it looks again; one that is not asleep looks before it
// sleeps) and arms the idle timer, for when nobody waits.
func (qp *QP) txPollLeave() {
	t := &qp.tx
	if !t.idleArmed.Load() && !t.idleArmed.Swap(true) {
		t.idle.Reset(qp.cfg.PollTxIdle)
	}
	qp.scq.wakeWaiter()
}

// txPollIdle is the idle timer's function: work still waiting for a
// Wait in a parked engine gets the send goroutine.
func (qp *QP) txPollIdle() {
	t := &qp.tx
	t.idleArmed.Store(false)
	if len(qp.bell) != 0 && t.state.Load() == txParked {
		qp.ring()
	}
}

// txDrive is CQ.Wait's step for the PollTx QP of its send CQ: when work
// waits in a parked engine (its doorbell rung), it takes the engine and
// sends it (see above). It reports whether it took the engine.
func (qp *QP) txDrive(ctx context.Context) bool {
	t := &qp.tx
	if len(qp.bell) == 0 || !t.poll.Load() || t.state.Load() != txParked || !t.state.CompareAndSwap(txParked, txDirect) {
		return false
	}
	// The doorbell this serves: whatever was queued before it was rung
	// is in the SQ (or the IRQ) for txPick. One rung from now on is
	// served by txDirectEnd's look, or by the goroutine it starts.
	select {
	case <-qp.bell:
	default:
	}
	if !t.gated || t.rest || qp.broken.Load() || !qp.rtsNow() {
		qp.txDirectEnd(true)
		return true
	}
	for range txPollMaxBatches {
		more, held, progressed := qp.txDirectBatch(true)
		if !held {
			return true
		}
		if !more {
			qp.txDirectEnd(false)
			return true
		}
		if !progressed || qp.broken.Load() || !qp.rtsNow() || ctx.Err() != nil {
			break
		}
	}
	qp.txDirectEnd(true)
	return true
}

// txPollPark is the send goroutine's step after it wrote the rest a
// PollTx driver left it (see above): it parks the engine when nothing
// but SQ work waits (no job in progress, no response queued, the QP in
// RTS and whole), leaving a doorbell rung meanwhile to the next Wait
// and arming the idle timer for it. It reports whether the goroutine is
// to exit; false: it carries on.
func (qp *QP) txPollPark() bool {
	t := &qp.tx
	if t.job != jobNone || qp.broken.Load() || !qp.rtsNow() {
		return false
	}
	if irq, _ := qp.txQueued(); irq {
		return false
	}
	t.state.Store(txParked)
	// What came since the look above rang, and ring starts a goroutine
	// once the engine is parked; a change before the store found it
	// running: look again, and take the engine back for it unless
	// another holder has taken it since.
	irq, sq := qp.txQueued()
	if irq || qp.broken.Load() || !qp.rtsNow() {
		return !t.state.CompareAndSwap(txParked, txRunning)
	}
	// Work posted while the goroutine ran rang a doorbell that woke
	// nobody (the engine was not parked): it is the next Wait's, and a
	// waiter may be asleep already. The doorbell stays (or is rung) for
	// txDrive's look.
	if sq || len(qp.bell) != 0 {
		select {
		case qp.bell <- struct{}{}:
		default:
		}
		qp.txPollLeave()
	}
	return true
}

// txQueued reports whether a response is queued (irq) and whether the SQ
// holds work the engine has not taken (sq).
func (qp *QP) txQueued() (irq, sq bool) {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return !qp.irq.empty(), qp.sqNext != qp.sqTail.Load()
}
