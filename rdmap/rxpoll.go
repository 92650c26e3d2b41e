package rdmap

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"sync/atomic"
	"time"
)

// The polling mode (QPConfig.PollRx): the receive engine of the QP runs
// on the goroutine that waits on the QP's receive CQ (CQ.Wait), run to
// completion, instead of on the receive goroutine, so that a message
// that arrives for a waiting application costs one wakeup (the poller's
// readiness of the socket wakes the waiter itself), as a plain TCP
// read does.
//
// The engine's state belongs to whoever holds it, as rxEngine.owner
// says: rxStopped (not started, or ended for good), rxGoroutine (the
// receive goroutine), rxFree (nobody) or rxDriver (a goroutine in
// CQ.Wait). Every move between holders is an atomic store or
// compare-and-swap of owner, so the next holder sees what the last one
// left.
//
//   - CQ.Wait on an empty CQ whose driven QP (CQ.poll) is rxFree takes it
//     (rxDrive) and runs the engine until the CQ gets a completion or the
//     wait's context is done: both set rxEngine.yield and poke the
//     connection's read deadline (kick), so the engine, blocked in a
//     read between FPDUs, returns errYield; an FPDU in progress is read
//     to its end first. A completion the engine itself pushes sets yield
//     without the poke (it is not reading then). The waiter then gives
//     the engine back (rxFree) and arms the QP's idle timer.
//   - While nobody holds it, the socket is not read; once it has been
//     free for QPConfig.PollRxIdle (the timer fires), the receive
//     goroutine takes it back, so inbound Read Requests, Terminates and
//     the peer's close are handled while the application does not wait.
//     A Wait that finds the receive goroutine holding the engine kicks
//     it: it returns it at the next FPDU boundary and wakes the CQ's
//     waiters, one of whom then takes it.
//   - The send engine's shutdown takes the engine for the receive
//     goroutine if it is free (rxTakeBack), so a closing QP always has a
//     reader. A driver whose engine stops for good (the stream ended, an
//     error, a shutdown deadline) hands the end (rxFinal) to a goroutine
//     of its own, and one whose QP broke (a Terminate: the rest is
//     drained) hands the engine to the receive goroutine.
const (
	rxStopped int32 = iota
	rxGoroutine
	rxFree
	rxDriver
)

// pollRxIdle is QPConfig.PollRxIdle's default (nanoseconds; a variable
// for tests, atomic because tests run QPs in parallel).
var pollRxIdle atomic.Int64

func init() { pollRxIdle.Store(int64(10 * time.Millisecond)) }

var (
	// errYield stops a receive engine that is to give its state to
	// another holder (see above).
	errYield = errors.New("rdmap: receive engine yields")
	// errHandoff stops a driver whose QP broke: the receive goroutine
	// drains the rest.
	errHandoff = errors.New("rdmap: receive engine handed to the receive goroutine")
)

// pastDeadline is the read deadline a kick sets: any time in the past.
var pastDeadline = time.Unix(1, 0)

// kick asks the engine's holder to yield: it sets yield and, unless it
// was set already, pokes the read deadline so that a read blocked in the
// poller returns.
func (rx *rxEngine) kick() {
	if rx.yield.CompareAndSwap(false, true) {
		_ = rx.conn.SetReadDeadline(pastDeadline)
	}
}

// yieldNow reports whether a read interrupted by the deadline is to
// return errYield: yield is set, and no FPDU is in progress (a partial
// one is read to its end first) and the engine is not draining.
func (rx *rxEngine) yieldNow() bool {
	return rx.yield.Load() && !rx.draining && !rx.partial()
}

// rxStartPoll starts the receive side of a started QP: its goroutine
// holds the engine.
func (qp *QP) rxStartPoll(conn net.Conn) {
	rx := &qp.rx
	rx.owner.Store(rxGoroutine)
	if qp.cfg.PollRx {
		rx.idle = time.AfterFunc(time.Hour, rx.idleFn)
		rx.idle.Stop()
	}
	go qp.rxLoop(conn)
}

// rxIdle runs when a PollRx QP's engine has been free for PollRxIdle:
// the receive goroutine (this timer goroutine) takes it back.
//
// The timer is armed only when none is pending (idleArmed), so a waiter
// that releases the engine many times per PollRxIdle costs no timer
// update each time: a timer that finds the engine free for less than
// PollRxIdle since its last release (freeSince) is armed again for the
// rest. Each fire and each arming can wake a thread (the runtime's
// poller), so the timer does no more than that per PollRxIdle.
func (qp *QP) rxIdle() {
	rx := &qp.rx
	rx.idleArmed.Store(false)
	if rx.owner.Load() != rxFree {
		return // its holder arms the timer when it releases the engine
	}
	if rest := time.Duration(int64(qp.cfg.PollRxIdle) - (monoNow() - rx.freeSince.Load())); rest > 0 {
		if !rx.idleArmed.Swap(true) {
			rx.idle.Reset(rest)
		}
		return
	}
	if rx.owner.CompareAndSwap(rxFree, rxGoroutine) {
		qp.rxLoop(rx.conn)
	}
}

// monoNow is a monotonic clock in nanoseconds (since monoBase), for the
// idle timer's and the stall timeout's bookkeeping: a step of the wall
// clock must not keep a free engine unread, nor end or spare a stalled
// FPDU.
func monoNow() int64 { return int64(time.Since(monoBase)) }

// monoOf is monoNow's clock at t, a time from time.Now.
func monoOf(t time.Time) int64 { return int64(t.Sub(monoBase)) }

var monoBase = time.Now()

// rxTakeBack starts the receive goroutine if the engine is free.
func (qp *QP) rxTakeBack() {
	if qp.rx.owner.CompareAndSwap(rxFree, rxGoroutine) {
		go qp.rxLoop(qp.rx.conn)
	}
}

// rxRelease gives the engine back (rxFree) and arms the idle timer. The
// request to yield is the last holder's: the next one starts without it.
// An engine given back with part of an FPDU buffered is stamped as a
// read would stamp it (rxEngine.stamp): the next holder may read only
// later.
func (qp *QP) rxRelease() {
	rx := &qp.rx
	if rx.yield.Load() {
		rx.yield.Store(false)
	}
	now := monoNow()
	if rx.moved {
		rx.moved = false
		if rx.stallTimeout > 0 && rx.partial() {
			rx.progressAt = now
		}
	}
	rx.freeSince.Store(now)
	rx.owner.Store(rxFree)
	// A pending timer (the common case) is seen with a load: a fire that
	// clears idleArmed after it then sees rxFree (stored first) and
	// arms itself again for the rest (rxIdle).
	if !rx.idleArmed.Load() && !rx.idleArmed.Swap(true) {
		rx.idle.Reset(qp.cfg.PollRxIdle)
	}
}

// rxDrive runs the QP's receive engine on the caller's goroutine, a
// waiter on cq with nothing to poll, until cq has a completion or ctx is
// done (see above). It reports false when it could not take the engine
// (then the caller waits as without PollRx; a receive goroutine holding
// it has been asked to give it back).
func (qp *QP) rxDrive(cq *CQ, ctx context.Context) bool {
	rx := &qp.rx
	for !rx.owner.CompareAndSwap(rxFree, rxDriver) {
		switch rx.owner.Load() {
		case rxFree:
			continue // taken and given back since the swap failed
		case rxGoroutine:
			// Ask for it however it got there, also when the idle
			// timer took it just before the swap: else this waiter
			// would sleep with nobody asking for the engine.
			if !qp.broken.Load() {
				rx.kick()
			}
		}
		return false
	}
	if rx.yield.Load() {
		// Asked while free (a kick that raced the last release): not
		// this driver's request. One that comes after this load is.
		rx.yield.Store(false)
	}
	w := cq.watch(ctx)
	if cq.drivingQP.Load() != qp {
		cq.drivingQP.Store(qp)
	}
	cq.driving.Store(true)
	// A completion pushed, or ctx done, before driving was stored woke
	// nobody this driver would see: look first. ctx done is seen as its
	// watch's AfterFunc sees it (fired, stored before it loads driving):
	// a context done before driving was stored has fired, or fires
	// later and then kicks this driver.
	var err error // nil: the engine yields
	if cq.queued.Load() == 0 && (w == nil || !w.fired.Load()) {
		rx.settled = true // the last holder's loop settled as it stopped
		err = qp.guardRx(rx.drivenFn)
		rx.settled = false
	}
	cq.driving.Store(false)
	switch {
	case err == nil || err == errYield:
		qp.rxRelease()
	case err == errHandoff:
		rx.owner.Store(rxGoroutine)
		go qp.rxLoop(rx.conn)
	default:
		rx.owner.Store(rxStopped)
		go qp.rxFinal(rx.conn, err)
	}
	return true
}

// rxYielded ends a receive goroutine that gave the engine back: a waiter
// asked for it (and is woken to take it), or the QP is to be read by the
// idle timer's goroutine later.
func (qp *QP) rxYielded() {
	qp.rxRelease()
	qp.rcq.wake()
}

// rxFinal ends the receive direction for good: the engine stopped
// reading with err.
func (qp *QP) rxFinal(conn net.Conn, err error) {
	rx := &qp.rx
	rx.owner.Store(rxStopped)
	if rx.idle != nil {
		rx.idle.Stop()
	}
	rx.ended.Store(true)
	if rx.err == nil && err != io.EOF {
		rx.err = err
	}
	qp.rxEnd(conn, err)
	<-qp.txDone
	qp.finish()
}

// watch arranges for a driver on cq to be kicked when ctx is done, and
// returns the registration that does it (nil: ctx is never done). The
// registration (context.AfterFunc, which allocates) is kept for the next
// Wait whose context has the same Done channel (a context is done exactly
// when its Done channel is closed), so a loop of Waits with one context
// registers once and then costs one atomic load per Wait. Only a driver
// replaces it (the Wait holding the engine) and Close drops it (a CQ
// without QPs, driven by nobody), so the registration a driver got
// stays the one watching its context while it drives.
//
// The registration keeps its context too when the context is a pointer
// (every cancelable context of package context is): a Wait with that
// very context (==, which compares two pointers and cannot panic, unlike
// == on a comparable struct type whose interface fields may hold
// uncomparable values) finds it without calling Done (a context's Done
// returns the same channel each time).
func (cq *CQ) watch(ctx context.Context) *ctxWatch {
	if w := cq.wreg.Load(); w != nil && w.ctx == ctx {
		return w
	}
	return cq.watchDone(ctx)
}

// watchDone is watch for a context other than the registration's own.
func (cq *CQ) watchDone(ctx context.Context) *ctxWatch {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	if w := cq.wreg.Load(); w != nil && w.done == done {
		return w
	}
	cq.wmu.Lock()
	defer cq.wmu.Unlock()
	if w := cq.wreg.Load(); w != nil {
		if w.done == done {
			return w
		}
		w.stop()
	}
	w := &ctxWatch{cq: cq, done: done}
	if reflect.TypeOf(ctx).Kind() == reflect.Pointer {
		w.ctx = ctx
	}
	w.stop = context.AfterFunc(ctx, w.fire)
	cq.wreg.Store(w)
	return w
}

// ctxWatch is watch's registration: the context watched (nil unless it
// is a pointer) and its Done channel, the function that cancels
// the AfterFunc, and whether it ran (the context is done).
type ctxWatch struct {
	cq    *CQ
	ctx   context.Context
	done  <-chan struct{}
	stop  func() bool
	fired atomic.Bool
}

// fire is the AfterFunc of w's context: it records that the context is
// done, then kicks the driver of the CQ, if any. A driver stores
// driving before it loads fired, so one of the two sees the other.
func (w *ctxWatch) fire() {
	w.fired.Store(true)
	w.cq.ctxDone()
}

// ctxDone kicks the driver of cq, if any.
func (cq *CQ) ctxDone() {
	if cq.driving.Load() {
		if qp := cq.drivingQP.Load(); qp != nil {
			qp.rx.kick()
		}
	}
}

// unwatch drops watch's registration.
func (cq *CQ) unwatch() {
	cq.wmu.Lock()
	if w := cq.wreg.Swap(nil); w != nil {
		w.stop()
	}
	cq.wmu.Unlock()
}
