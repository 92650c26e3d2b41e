package rdmap

import (
	"context"
	"sync"
	"sync/atomic"
)

// CQ is a completion queue. A CQ is safe for concurrent use.
//
// Overrun (the verbs CQ error, IBV_EVENT_CQ_ERR): when a completion
// finds the ring full, the CQ has overrun. That is an error of the CQ and
// of the QPs using it, but no completion is lost, so that every work
// request a Post call accepted still completes exactly once:
//   - Err reports ErrCQOverflow from then on (sticky), and every QP that
//     completes into the CQ goes to ERROR (QP.Err wraps ErrCQOverflow;
//     the peer gets an RDMAP local catastrophic Terminate) and flushes
//     its outstanding work requests;
//   - the completions that did not fit, and the flushes, wait in an
//     overflow list behind the ring, in the order they were generated;
//     Poll returns the ring first and then the list, so the order of the
//     CQ is the order of generation; Len counts both;
//   - PostSend, PostRecv (and the flush-on-post of a QP in ERROR) refuse
//     work requests whose completion would go to an overrun CQ with
//     ErrCQOverflow, and CreateQP refuses an overrun CQ: no completion is
//     generated after the overrun but those of work requests already
//     posted, so the list is bounded by the work queue depths of the QPs
//     attached at the overrun (MaxSendWR + MaxRecvWR each, or one receive
//     in progress for a QP on an SRQ, plus one post per queue that raced
//     the overrun). Dropped counts completions beyond that bound, which
//     is always 0 unless that accounting is wrong.
//
// Size CQs for the work requests that may complete at once; an overrun
// ends every QP that uses the CQ.
//
// Lock order: a QP's queue locks are taken before CQ.mu.
type CQ struct {
	dev *Device

	mu   sync.Mutex
	ring wcRing // limit: the CQ's size; +checklocks:mu
	// ovf holds the completions behind the ring, after an overrun, and
	// ovfHead is the next of them to poll; ovf is emptied (ovf[:0],
	// ovfHead 0) once all of it is polled, so that len(ovf) != 0 says
	// whether completions wait there.
	ovf      []WC        // +checklocks:mu
	ovfHead  int         // +checklocks:mu
	ovfCap   int         // the bound of ovf, set at the overrun; +checklocks:mu
	overflow atomic.Bool // the CQ has overrun: set under mu, read without (every post reads it)
	// queued is the number of completions waiting to be polled (the
	// ring's and the overflow list's): changed under mu with them, read
	// without it by Len, Wait and the test of an empty CQ in Poll.
	queued  atomic.Int64
	dropped uint64      // +checklocks:mu
	users   []*QP       // QPs that complete into this CQ; +checklocks:mu
	closed  atomic.Bool // set under mu (attach reads it there), read without by Wait
	notify  chan struct{}
	// notified: a wake-up is pending in notify, or about to be sent, or
	// taken by a waiter that has not looked at the CQ since (wakeWaiter).
	notified atomic.Bool
	// asleep counts the waiters blocked in Wait's select (for tests:
	// WaitCQAsleep).
	asleep atomic.Int32

	// The polling mode (rxpoll.go): poll is the PollRx QP whose receive
	// CQ this is; driving is set while a waiter runs the receive engine
	// of drivingQP (rxDrive), which a driver stores before driving only
	// when it is another QP's (a pointer store costs a call and its
	// write barrier, a flag's does not): whoever sees driving set and
	// then drivingQP sees the driver, or one that started later, which
	// looks at the CQ after it set driving; wreg is the context watch
	// registered for drivers (kept for the next Wait whose context has
	// the same Done channel; replaced under wmu).
	poll      atomic.Pointer[QP]
	pollTx    atomic.Pointer[QP] // the PollTx QP whose send CQ this is (txpoll.go)
	driving   atomic.Bool
	drivingQP atomic.Pointer[QP]
	wmu       sync.Mutex
	wreg      atomic.Pointer[ctxWatch]
}

// MaxCQE is the largest CQ size CreateCQ accepts.
const MaxCQE = 1 << 24

// CreateCQ returns a completion queue with room for n completions in its
// ring (1 <= n <= MaxCQE). A completion that finds the ring full overruns
// the CQ: see CQ for what follows (the CQ and its QPs fail, no completion
// is lost).
func (d *Device) CreateCQ(n int) (*CQ, error) {
	if n <= 0 || n > MaxCQE {
		return nil, errConfigf("CreateCQ: %d completions, want 1..%d", n, MaxCQE)
	}
	return &CQ{dev: d, ring: wcRing{limit: n}, notify: make(chan struct{}, 1)}, nil
}

// Cap returns the capacity of the CQ's ring.
func (cq *CQ) Cap() int { return cq.ring.limit }

// Len returns the number of completions waiting to be polled, those in
// the overflow list after an overrun included.
func (cq *CQ) Len() int { return int(cq.queued.Load()) }

// Err returns ErrCQOverflow once the CQ has overrun.
func (cq *CQ) Err() error {
	if cq.overflow.Load() {
		return ErrCQOverflow
	}
	return nil
}

// Dropped returns how many completions were lost: those beyond the bound
// of the overflow list (see CQ), which the posting rules keep at 0.
func (cq *CQ) Dropped() uint64 {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.dropped
}

// Poll moves up to len(wcs) completions into wcs, oldest first, and
// returns how many. It never blocks. An empty CQ is seen without the
// lock (queued): a completion pushed after that load is one a Poll that
// returned 0 had not found yet.
func (cq *CQ) Poll(wcs []WC) int {
	if cq.queued.Load() == 0 {
		return 0
	}
	cq.mu.Lock()
	// The oldest completions out of the ring, here rather than in a
	// method of wcRing: too long to be inlined, and a call costs as much
	// as a completion's copy.
	r := &cq.ring
	h := r.head
	dst := wcs[:min(uint64(len(wcs)), r.tail-h)]
	switch {
	case len(dst) == 1:
		dst[0] = r.buf[h&r.mask]
	case len(dst) <= wcCopyMin:
		buf, mask := r.buf, r.mask
		for i := range dst {
			dst[i] = buf[(h+uint64(i))&mask]
		}
	default:
		if k := copy(dst, r.buf[h&r.mask:]); k < len(dst) {
			copy(dst[k:], r.buf) // the run wraps to slot 0
		}
	}
	r.head = h + uint64(len(dst))
	k := len(dst)
	if len(cq.ovf) != 0 { // the list is emptied (ovf[:0]) once all of it is polled
		k = cq.pollOverflowLocked(wcs, k)
	}
	cq.queued.Add(int64(-k))
	cq.mu.Unlock()
	return k
}

// pollOverflowLocked moves completions of the overflow list into wcs[k:]
// (the ring is empty or wcs full) and returns how many wcs then holds.
//
// +checklocks:cq.mu
func (cq *CQ) pollOverflowLocked(wcs []WC, k int) int {
	for k < len(wcs) && cq.ovfHead < len(cq.ovf) {
		wcs[k] = cq.ovf[cq.ovfHead]
		cq.ovf[cq.ovfHead] = WC{}
		cq.ovfHead++
		k++
	}
	if cq.ovfHead == len(cq.ovf) {
		cq.ovf, cq.ovfHead = cq.ovf[:0], 0
	}
	return k
}

// Wait blocks until a completion is waiting or ctx is done. It returns
// ErrCQOverflow if the CQ overran and is empty, ErrClosed if it is closed
// and empty. On the receive CQ of a QP with QPConfig.PollRx, a Wait that
// finds nothing to poll runs that QP's receive engine on its own
// goroutine until a completion is waiting or ctx is done (one waiter at a
// time; the others wait as usual). On the send CQ of a QP with
// QPConfig.PollTx, such a Wait first sends the work that QP has queued
// (see PollTx). The first registration of a context
// that can be canceled allocates; later Waits with the same context (or
// one with the same Done channel) do not.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		// The CQ's state without its lock: queued, then the sticky
		// flags, then queued again for a flag that is set, so that
		// either error is returned only for a CQ that was empty with the
		// flag set (no completion follows Close: it has no QP).
		if cq.queued.Load() > 0 {
			// Pass the wake-up on, in case another waiter slept.
			cq.wakeWaiter()
			return nil
		}
		if cq.overflow.Load() || cq.closed.Load() {
			if cq.queued.Load() > 0 {
				continue
			}
			if cq.overflow.Load() {
				return ErrCQOverflow
			}
			return ErrClosed
		}
		if qp := cq.pollTx.Load(); qp != nil && ctx.Err() == nil && qp.txDrive(ctx) {
			continue // the QP's send engine ran here (PollTx): look again
		}
		if qp := cq.poll.Load(); qp != nil && ctx.Err() == nil && qp.rxDrive(cq, ctx) {
			continue // the QP's receive ran here (PollRx): look again
		}
		cq.asleep.Add(1)
		select {
		case <-cq.notify:
			cq.asleep.Add(-1)
			cq.notified.Store(false) // before the next look at the CQ (wakeWaiter)
		case <-ctx.Done():
			cq.asleep.Add(-1)
			return ctx.Err()
		}
	}
}

// push appends a completion and wakes the CQ's waiters. It reports
// false when the CQ has overrun (the completion is kept behind the ring;
// the caller must fail the CQ's QPs with overflowed).
//
// The wake-up contract: a completion can be polled as soon as it is
// pushed; a waiter asleep in Wait is woken by a wake-up that follows the
// push (wake, or wakeBy from a receive engine), before the pusher itself
// blocks on anything but a lock. The receive engine gathers its receive
// completions and pushes them with pushLocked and one wake-up per batch,
// the last batch before its next read of the socket (QP.pushRecv,
// rxEngine.flushRecvs), not one per completion.
func (cq *CQ) push(wc *WC) bool {
	cq.mu.Lock()
	ok := cq.pushLocked(wc)
	cq.mu.Unlock()
	cq.wake()
	return ok
}

// pushLocked is push with cq.mu held and without the wake-up: a caller
// that pushes several completions under one lock wakes the waiters once
// after unlocking.
//
// +checklocks:cq.mu
func (cq *CQ) pushLocked(wc *WC) bool {
	r := &cq.ring
	if r.tail-r.head >= r.room || len(cq.ovf) != 0 { // the list is emptied once all of it is polled
		return cq.pushSlowLocked(wc)
	}
	r.buf[r.tail&r.mask] = *wc
	r.tail++
	cq.queued.Add(1)
	return !cq.overflow.Load()
}

// pushSlowLocked is pushLocked when the ring's array has no room for wc
// (it grows, if the ring is not full) or completions wait in the
// overflow list.
//
// +checklocks:cq.mu
func (cq *CQ) pushSlowLocked(wc *WC) bool {
	if cq.ring.full() || cq.ovfHead < len(cq.ovf) {
		if !cq.overflow.Load() {
			cq.ovfCap = cq.overflowBoundLocked()
			cq.overflow.Store(true)
		}
		if len(cq.ovf)-cq.ovfHead < cq.ovfCap {
			cq.ovf = append(cq.ovf, *wc)
			cq.queued.Add(1)
		} else {
			cq.dropped++
		}
		return false
	}
	r := &cq.ring // its array is full, below limit
	r.grow(r.len() + 1)
	r.buf[r.tail&r.mask] = *wc
	r.tail++
	cq.queued.Add(1)
	return !cq.overflow.Load()
}

// pushAllLocked is pushLocked for each of wcs, in order: when all fit
// in the ring's array, they are copied there at once (at most two
// copies; an assignment for one), without a call per completion, and
// queued is added to once. It reports false when the CQ has overrun.
//
// +checklocks:cq.mu
func (cq *CQ) pushAllLocked(wcs []WC) bool {
	r := &cq.ring
	if r.tail-r.head+uint64(len(wcs)) > r.room || len(cq.ovf) != 0 || cq.overflow.Load() {
		return cq.pushAllSlowLocked(wcs)
	}
	t := r.tail
	switch {
	case len(wcs) == 1:
		r.buf[t&r.mask] = wcs[0]
	case len(wcs) <= wcCopyMin:
		buf, mask := r.buf, r.mask
		for i := range wcs {
			buf[(t+uint64(i))&mask] = wcs[i]
		}
	default:
		if k := copy(r.buf[t&r.mask:], wcs); k < len(wcs) {
			copy(r.buf, wcs[k:]) // the run wraps to slot 0
		}
	}
	r.tail = t + uint64(len(wcs))
	cq.queued.Add(int64(len(wcs)))
	return true
}

// pushAllSlowLocked is pushAllLocked when the ring's array has no room
// for wcs (it grows, if the ring has room for them) or the CQ has
// overrun or is about to (then pushLocked for each).
//
// +checklocks:cq.mu
func (cq *CQ) pushAllSlowLocked(wcs []WC) bool {
	if cq.ring.len()+len(wcs) > cq.ring.limit || len(cq.ovf) != 0 || cq.overflow.Load() {
		ok := true
		for i := range wcs {
			ok = cq.pushLocked(&wcs[i]) && ok
		}
		return ok
	}
	cq.ring.pushAll(wcs)
	cq.queued.Add(int64(len(wcs)))
	return true
}

// overflowBoundLocked is the most completions the QPs attached now can
// still generate once posting is refused: every work request they hold,
// plus one per queue for a post that raced the overrun.
func (cq *CQ) overflowBoundLocked() int {
	b := 0
	for _, qp := range cq.users {
		b += qp.cfg.MaxSendWR + 1
		if qp.srq != nil {
			b += 2 // the receive in progress, and one completing
		} else {
			b += qp.cfg.MaxRecvWR + 1
		}
	}
	return b + 1 // the completion that overran
}

// overran reports whether the CQ has overrun (posting to it is refused).
// It takes no lock: the flag is set under mu by the push that overruns,
// and a post that reads it just before is one of the posts that raced
// the overrun, which overflowBoundLocked counts.
func (cq *CQ) overran() bool { return cq.overflow.Load() }

// wake wakes a goroutine in Wait: one waiting on notify, or one running
// a PollRx QP's receive engine (kicked: rxpoll.go).
func (cq *CQ) wake() { cq.wakeBy(nil) }

// wakeBy is wake from the goroutine that runs by's receive engine (nil:
// another one). A driver woken by its own engine (which is not in a read:
// it wakes before reading) only needs the request to yield, which it
// looks at after the FPDU and before it blocks in a read (rxpoll.go); any
// other driver is kicked.
func (cq *CQ) wakeBy(by *QP) {
	if cq.driving.Load() {
		if qp := cq.drivingQP.Load(); qp == nil {
			// Detached (its QP is going away): nobody to ask.
		} else if qp == by {
			qp.rx.yield.Store(true)
		} else {
			qp.rx.kick()
		}
	}
	cq.wakeWaiter()
}

// wakeWaiter wakes a goroutine waiting on notify. A wake-up already
// pending stands for this one: the waiter that takes it looks at the CQ
// (and the engine) after. notified says one is: it is set before each
// send of the token and cleared by the waiter that takes the token,
// before that waiter looks at the CQ; so when it is seen set, a token is
// in notify or about to be sent, or its taker has yet to clear it and
// then look at the CQ, after this wake-up's push. The test saves the
// send on the common path (a driver's own completion, with nobody
// asleep on notify and its token still there), with one atomic load.
func (cq *CQ) wakeWaiter() {
	if cq.notified.Load() {
		return
	}
	cq.notified.Store(true)
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
	if cq.closed.Load() {
		return ErrClosed
	}
	if cq.overflow.Load() {
		return ErrCQOverflow
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
	cq.poll.CompareAndSwap(qp, nil)
	cq.pollTx.CompareAndSwap(qp, nil)
	cq.drivingQP.CompareAndSwap(qp, nil) // the CQ keeps no QP it no longer serves
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
	cq.closed.Store(true)
	cq.mu.Unlock()
	cq.unwatch()
	cq.wake()
	return nil
}

// wcRing is the ring of a CQ's completions: a FIFO of WCs in one array,
// buf, whose length is a power of two (mask is that length less one);
// head and tail count the entries ever taken and added (uint64: they do
// not wrap), and entry i lives in buf[i&mask], so that a run of entries
// is at most two runs of the array, each moved with one copy. limit is
// the CQ's size (full reports it). The array is allocated by the first
// push and replaced by a larger one (at least double, the entries moved:
// grow) by a push that finds it without room, up to the power of two at
// least limit: a CQ holds memory for the most completions it has held at
// once, not for its size. room is how many entries buf holds before it
// must grow, or limit if less: a push that finds fewer than room entries
// has its slot without more tests. Nothing keeps a pointer into buf:
// completions are copied in and out. The CQ's mu guards its wcRing.
type wcRing struct {
	buf        []WC
	mask       uint64
	head, tail uint64
	room       uint64
	limit      int
}

// wcRingMin is the fewest slots a wcRing allocates (fewer only for a
// smaller limit): enough for a latency-bound stream's few completions at
// a time; a ring that has to hold more (a batch of the receive engine
// is up to rxBatch) grows to it by doubling.
const wcRingMin = 8

// wcCopyMin is the most WCs moved one by one between a wcRing and a
// slice: a run of more is moved with copy (a call of memmove, which
// costs more than a few assignments).
const wcCopyMin = 3

// len returns the number of entries in the ring.
func (r *wcRing) len() int { return int(r.tail - r.head) }

// full reports whether the ring holds limit entries.
func (r *wcRing) full() bool { return r.tail-r.head >= uint64(r.limit) }

// pushAll appends wcs in order, growing the array if it has no room for
// them; the caller checks that the ring has room for len(wcs) more (at
// most limit in all).
func (r *wcRing) pushAll(wcs []WC) {
	if n := r.len() + len(wcs); n > len(r.buf) {
		r.grow(n)
	}
	if k := copy(r.buf[r.tail&r.mask:], wcs); k < len(wcs) {
		copy(r.buf, wcs[k:]) // the run wraps to slot 0
	}
	r.tail += uint64(len(wcs))
}

// grow replaces buf by an array of at least want slots (want is at most
// limit), at least double the old one's and at least wcRingMin (or
// limit if less), a power of two, with the entries moved to their slots
// there.
func (r *wcRing) grow(want int) {
	size := ringSize(max(want, min(wcRingMin, r.limit), 2*len(r.buf)))
	buf := make([]WC, size)
	nm := uint64(size - 1)
	for i := r.head; i != r.tail; i++ {
		buf[i&nm] = r.buf[i&r.mask]
	}
	r.buf, r.mask, r.room = buf, nm, uint64(min(size, r.limit))
}
