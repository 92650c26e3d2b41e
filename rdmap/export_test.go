package rdmap

import (
	"runtime"
	"time"
)

// WaitTxParked waits until qp's send goroutine has parked (exited) with
// no doorbell pending, so that the next PostSend finds the send engine
// idle. It spins on the engine's state, not on time.
func WaitTxParked(qp *QP) {
	for qp.tx.state.Load() != txParked || len(qp.bell) != 0 {
		runtime.Gosched()
	}
}

// WaitRxFree waits until qp's receive engine is held by nobody (PollRx:
// no waiter drives it and the receive goroutine has given it back).
func WaitRxFree(qp *QP) {
	for qp.rx.owner.Load() != rxFree {
		runtime.Gosched()
	}
}

// WaitCQAsleep waits until a goroutine is blocked in cq.Wait, for at most
// 20 s, and reports whether one is.
func WaitCQAsleep(cq *CQ) bool {
	deadline := time.Now().Add(20 * time.Second)
	for cq.asleep.Load() == 0 {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}

// WaitRxDriven waits until a waiter runs qp's receive engine (PollRx),
// for at most 20 s (a kick lost would leave the engine with the receive
// goroutine until its 60 s stall deadline), and reports whether it does.
func WaitRxDriven(qp *QP) bool {
	deadline := time.Now().Add(20 * time.Second)
	for qp.rx.owner.Load() != rxDriver {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}

// SetPollRxIdle sets how long a free PollRx engine waits for a waiter
// before its receive goroutine takes it back, and returns the old value.
func SetPollRxIdle(d time.Duration) time.Duration {
	return time.Duration(pollRxIdle.Swap(int64(d)))
}

// FireRxIdle makes qp's idle timer fire now (PollRx).
func FireRxIdle(qp *QP) {
	qp.rx.freeSince.Store(monoNow() - int64(qp.cfg.PollRxIdle)) // free for PollRxIdle already
	qp.rx.idleArmed.Store(true)
	qp.rx.idle.Reset(0)
}

// PokeRx sets qp's read deadline in the past, as a fence or a PollRx
// kick does.
func PokeRx(qp *QP) { _ = qp.rx.conn.SetReadDeadline(pastDeadline) }

// SetRxNoWhole makes qp's receive engine read every FPDU the header-first
// way (Next, Header, Place, Trailer), even one all buffered, which it
// otherwise takes with mpa.Reader.Whole. Call it before the QP starts.
func SetRxNoWhole(qp *QP) { qp.rx.noWhole = true }

// TruncatableMapping is truncatableMapping (fault_internal_test.go).
var TruncatableMapping = truncatableMapping

// Where SetTxParkHook's hook is called (see txEngine.parkHook).
const (
	ParkStored = parkStored
	ParkLooked = parkLooked
	ParkDirect = parkDirect
)

// SetTxParkHook has the send engine of qp (not started yet) call f
// where parking races with posters: after the send goroutine marked the
// engine parked (ParkStored) and after it then looked for a doorbell
// (ParkLooked), and before a direct send parks the engine (ParkDirect).
func SetTxParkHook(qp *QP, f func(at int)) { qp.tx.parkHook = f }
