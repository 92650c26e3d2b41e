package rdmap

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"syscall"
)

// ErrMemoryFault is the cause of a QP's failure when registered memory
// could not be touched: a file-backed region whose file another process
// truncated while it was mapped (SIGBUS in the engine, or EFAULT from the
// kernel when readv or writev reach the missing pages). The QP fails with
// a local catastrophic Terminate and its connection is closed; the process
// and the other QPs carry on. Test with errors.Is.
var ErrMemoryFault = errors.New("rdmap: registered memory cannot be accessed (a mapped file truncated?)")

// MemoryFaultError is a memory fault an engine turned into the QP's error:
// Addr is the faulting address (0 when the kernel reported EFAULT), Op
// which engine touched it ("receive" or "send").
type MemoryFaultError struct {
	Op   string
	Addr uintptr
	Err  error // the runtime's fault or the EFAULT
}

func (e *MemoryFaultError) Error() string {
	if e.Addr != 0 {
		return fmt.Sprintf("rdmap: %s: memory fault at %#x: %v", e.Op, e.Addr, e.Err)
	}
	return fmt.Sprintf("rdmap: %s: memory fault: %v", e.Op, e.Err)
}

// Is makes errors.Is(err, ErrMemoryFault) true.
func (e *MemoryFaultError) Is(t error) bool { return t == ErrMemoryFault }

func (e *MemoryFaultError) Unwrap() error { return e.Err }

// faultAddr reports whether a recovered panic value is a fault in memory
// registered with d (a runtime.Error with an Addr method, as
// SetPanicOnFault makes them, at an address inside an MR). Any other
// panic, a nil dereference among them, is a bug and not recovered.
func (d *Device) faultAddr(v any) (uintptr, runtime.Error, bool) {
	re, ok := v.(runtime.Error)
	if !ok {
		return 0, nil, false
	}
	a, ok := re.(interface{ Addr() uintptr })
	if !ok || !d.registered(a.Addr()) {
		return 0, nil, false
	}
	return a.Addr(), re, true
}

// registered reports whether addr lies in the buffer of a registered MR.
func (d *Device) registered(addr uintptr) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, mr := range d.mrs {
		if lo, hi := sliceRange(mr.Bytes()); lo <= addr && addr < hi {
			return true
		}
	}
	return false
}

// memoryFault fails the QP for a memory fault with the local catastrophic
// Terminate (sent before the close when the stream allows) and returns the
// error.
func (qp *QP) memoryFault(op string, addr uintptr, cause error, terminate bool) error {
	err := &MemoryFaultError{Op: op, Addr: addr, Err: cause}
	var ti *termInfo
	if terminate {
		ti = localCatastrophic(err)
	}
	qp.fail(err, ti)
	return err
}

// guardRx runs the receive engine with faults on the calling goroutine
// turned into panics (debug.SetPanicOnFault): a fault touching registered
// memory, or EFAULT from the kernel, fails this QP only, with a local
// catastrophic Terminate, and guardRx returns the error. Other panics go
// on. It is meant as the body of the receive goroutine.
func (qp *QP) guardRx(run func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	returned := false
	defer func() {
		// One deferred call restores the setting and recovers (run once
		// per drive of a PollRx waiter); only a run that did not return
		// (a panic) has anything to recover.
		if returned {
			debug.SetPanicOnFault(old)
			return
		}
		v := recover()
		debug.SetPanicOnFault(old)
		if v != nil {
			addr, re := qp.dev.mustFaultAddr(v)
			// The fault cut a placement short: leave it, or a fence
			// waiting for this engine would wait forever.
			if mr := qp.rx.placing.Load(); mr != nil {
				if qp.rx.inPlace {
					qp.rx.leavePlace(mr)
				}
				qp.rx.placing.Store(nil)
			}
			err = qp.memoryFault("receive", addr, re, true)
		}
	}()
	err = run()
	returned = true
	if err != nil && err != errYield && errors.Is(err, syscall.EFAULT) {
		// The stream is intact (readv read up to the fault): the
		// Terminate can still go.
		err = qp.memoryFault("receive", 0, err, true)
	}
	return err
}

// mustFaultAddr is faultAddr for a recovered panic value v that must be a
// fault in registered memory: any other panic goes on (panic(v)).
func (d *Device) mustFaultAddr(v any) (uintptr, runtime.Error) {
	addr, re, ok := d.faultAddr(v)
	if !ok {
		panic(v)
	}
	return addr, re
}

// guardTx runs one batch of the send engine as guardRx runs the receive
// engine. After a fault in user space nothing of the FPDU being built was
// written, so the QP fails with the Terminate and guardTx reports progress
// (the engine goes on to send it and shut down); after EFAULT from writev
// the stream may stop mid-FPDU, so the QP fails without a Terminate and
// the error is returned (the engine aborts the connection). A direct
// send builds its batch under the same guard, in line
// (txDirectRun).
func (qp *QP) guardTx(run func() (bool, error)) (progressed bool, err error) {
	old := debug.SetPanicOnFault(true)
	returned := false
	defer func() {
		if returned {
			debug.SetPanicOnFault(old)
			return
		}
		v := recover()
		debug.SetPanicOnFault(old)
		if v != nil {
			qp.sendFault(v)
			progressed, err = true, nil
		}
	}()
	progressed, err = run()
	returned = true
	if err != nil && errors.Is(err, syscall.EFAULT) {
		err = qp.memoryFault("send", 0, err, false)
	}
	return progressed, err
}

// sendFault fails the QP for v, a panic recovered while the send engine
// built a batch, which must be a fault in registered memory (any other
// panic goes on): nothing of the FPDU being built was written, so the
// Terminate can go.
func (qp *QP) sendFault(v any) {
	addr, re := qp.dev.mustFaultAddr(v)
	qp.memoryFault("send", addr, re, true)
}
