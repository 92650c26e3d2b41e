package rdmap

import (
	"context"
	"sync"
)

// CQ is a completion queue. A full CQ that has to take one more
// completion overflows: the completion is lost, the CQ reports
// ErrCQOverflow, and every QP using it goes to ERROR (as a verbs CQ error
// does). Size CQs for the work requests that may complete at once. A CQ
// is safe for concurrent use.
//
// Lock order: a QP's queue locks are taken before CQ.mu.
type CQ struct {
	dev *Device

	mu       sync.Mutex
	ring     []WC   // +checklocks:mu
	head, n  int    // +checklocks:mu
	overflow bool   // +checklocks:mu
	dropped  uint64 // +checklocks:mu
	users    []*QP  // QPs that complete into this CQ; +checklocks:mu
	closed   bool   // +checklocks:mu
	notify   chan struct{}
}

// CreateCQ returns a completion queue with room for n completions.
func (d *Device) CreateCQ(n int) (*CQ, error) {
	if n <= 0 {
		return nil, ErrConfig
	}
	return &CQ{dev: d, ring: make([]WC, n), notify: make(chan struct{}, 1)}, nil
}

// Cap returns the CQ's capacity; Len the completions waiting.
func (cq *CQ) Cap() int { return len(cq.ring) }

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Err returns ErrCQOverflow once the CQ has overflowed.
func (cq *CQ) Err() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.overflow {
		return ErrCQOverflow
	}
	return nil
}

// Dropped returns how many completions an overflow lost.
func (cq *CQ) Dropped() uint64 {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.dropped
}

// Poll moves up to len(wcs) completions into wcs and returns how many. It
// never blocks.
func (cq *CQ) Poll(wcs []WC) int {
	cq.mu.Lock()
	k := 0
	for k < len(wcs) && cq.n > 0 {
		wcs[k] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		k++
	}
	cq.mu.Unlock()
	return k
}

// Wait blocks until a completion is waiting or ctx is done. It returns
// ErrCQOverflow if the CQ overflowed and is empty, ErrClosed if it is
// closed and empty.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n, ovf, closed := cq.n, cq.overflow, cq.closed
		cq.mu.Unlock()
		if n > 0 {
			// Pass the wake-up on, in case another waiter slept.
			select {
			case cq.notify <- struct{}{}:
			default:
			}
			return nil
		}
		if ovf {
			return ErrCQOverflow
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-cq.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// push appends a completion. It reports false when the CQ is full (the
// completion is lost and the CQ has overflowed).
func (cq *CQ) push(wc *WC) bool {
	cq.mu.Lock()
	if cq.n == len(cq.ring) || cq.overflow {
		first := !cq.overflow
		cq.overflow = true
		cq.dropped++
		cq.mu.Unlock()
		if first {
			cq.wake()
		}
		return false
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	cq.n++
	cq.mu.Unlock()
	cq.wake()
	return true
}

func (cq *CQ) wake() {
	select {
	case cq.notify <- struct{}{}:
	default:
	}
}

// overflowed puts every QP of the CQ in error. Call it without holding
// any QP lock.
func (cq *CQ) overflowed() {
	cq.mu.Lock()
	users := append([]*QP(nil), cq.users...)
	cq.mu.Unlock()
	for _, qp := range users {
		ti := localCatastrophic(ErrCQOverflow)
		qp.fail(ti.err(), ti)
	}
}

func (cq *CQ) attach(qp *QP) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return ErrClosed
	}
	for _, u := range cq.users {
		if u == qp {
			return nil
		}
	}
	cq.users = append(cq.users, qp)
	return nil
}

func (cq *CQ) detach(qp *QP) {
	cq.mu.Lock()
	for i, u := range cq.users {
		if u == qp {
			cq.users = append(cq.users[:i], cq.users[i+1:]...)
			break
		}
	}
	cq.mu.Unlock()
}

// Close destroys the CQ. It fails with ErrBusy while a QP still uses it.
// Waiters return ErrClosed once it is empty. Close is idempotent.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	if len(cq.users) > 0 {
		cq.mu.Unlock()
		return ErrBusy
	}
	cq.closed = true
	cq.mu.Unlock()
	cq.wake()
	return nil
}
