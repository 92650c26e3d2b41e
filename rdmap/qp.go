package rdmap

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/mpa"
)

// Limits and defaults of a queue pair (Linux siw's, siw.h, where it has
// them).
const (
	// MaxSGE is the largest number of SGEs a work request may carry.
	MaxSGE = 16
	// MaxInlineData is the largest QPConfig.MaxInline.
	MaxInlineData = 1024
	// MaxIRDORD is the largest IRD or ORD a QP accepts (siw's 128).
	MaxIRDORD = 128

	defaultWR                = 128
	defaultSGE               = 6  // SIW_MAX_SGE
	defaultInline            = 80 // SIW_MAX_INLINE
	defaultDisconnectTimeout = 3 * time.Second
	// defaultEMSS is the EMSS assumed for a connection that has no
	// TCP_MAXSEG (net.Pipe, for instance).
	defaultEMSS = 1460
	// termLinger bounds how long a QP that sent or received a Terminate
	// waits for the peer to close before it closes the connection.
	termLinger = 2 * time.Second
	// termWriteTimeout bounds the write of a Terminate (best effort).
	termWriteTimeout = 2 * time.Second
	// minULPDU is the smallest MULPDU a QP works with.
	minULPDU = 128
)

// QPConfig configures a queue pair. Zero fields take the defaults noted.
type QPConfig struct {
	// SendCQ and RecvCQ receive the send and receive completions; they
	// may be the same CQ. Both are required.
	SendCQ, RecvCQ *CQ
	// SRQ, when set, supplies the receive buffers; PostRecv on the QP is
	// then refused.
	SRQ *SRQ
	// MaxSendWR and MaxRecvWR are the queue depths (default 128).
	MaxSendWR, MaxRecvWR int
	// MaxSendSGE and MaxRecvSGE bound the SGEs per work request (default
	// 6, siw's; at most MaxSGE).
	MaxSendSGE, MaxRecvSGE int
	// MaxInline bounds SendWR.InlineData (default 80, siw's; at most
	// MaxInlineData).
	MaxInline int
	// MaxULPDU, when set, is the ULPDU size the QP sends, in place of the
	// MULPDU derived from the connection's TCP_MAXSEG (RFC 5044 §4.5, as
	// siw does; hardware peers need FPDUs no larger than one segment).
	// That one is read at Start and again every MiB written, and
	// followed as the EMSS changes (a path MTU change; loopback's MSS
	// grows in the first MiBs), as siw follows the socket's MSS
	// (QPStats.TxULPDU has the one in use). Larger values (up to 65535)
	// are an opt-in for gosiw peers.
	MaxULPDU int
	// MaxIRD and MaxORD cap what the handshake settled (default and
	// maximum MaxIRDORD).
	MaxIRD, MaxORD int
	// RFC7306 enables Immediate Data and atomics. Linux siw has neither:
	// leave it off unless the peer is known to support RFC 7306 (both
	// gosiw, or negotiated by the application). Off, posting such a
	// request fails with ErrNotSupported and receiving one ends the
	// connection with a Terminate (unexpected opcode), as siw does.
	RFC7306 bool
	// PollRx is the polling mode: the QP's receive engine runs on the
	// goroutine that waits on RecvCQ (CQ.Wait), run to completion, while
	// one does, so that a message for a waiting application costs one
	// wakeup instead of two (the receive goroutine's and the waiter's).
	// While nobody waits the socket is not read; after PollRxIdle
	// without a waiter the receive goroutine reads again (Read Requests,
	// Terminates and the peer's close are handled then), until the next
	// Wait takes the engine back, at an FPDU boundary. CQ.Poll never
	// reads the socket. A CQ drives at most one PollRx QP: CreateQP
	// fails with ErrConfig for a second one on the same RecvCQ (until
	// the first is destroyed). Completions, their order and every rule
	// of the receive path are the same in both modes.
	PollRx bool
	// PollRxIdle is how long a PollRx QP's socket may go unread while no
	// goroutine waits on RecvCQ (the bound on how late an inbound Read
	// Request, Terminate or close is handled then). Zero means the
	// default, 10ms; negative is an error. A shorter one costs an
	// application that keeps waiting more: the timer that enforces it
	// fires about once per PollRxIdle while the application waits, and
	// each fire wakes a thread, which costs a round trip between two
	// processes far more than the fire's own work (at 1ms, siw perf's
	// 64-byte ping-pong took 1.3-1.7 times as long as at 10ms).
	PollRxIdle time.Duration
	// PollTx is the polling mode of the send engine: work requests that
	// PostSend and PostSends queue while the send engine is parked are
	// framed and written on the goroutine that waits on SendCQ
	// (CQ.Wait), run to completion, instead of on a send goroutine, so
	// that an application that posts and then waits keeps the whole
	// send path on one thread (siw perf's client: between two processes
	// on one host, the poster and a send goroutine of its own had
	// competed with the peer for the CPUs). A Wait that finds SendCQ
	// empty and posted work waiting writes batches while the socket
	// takes them without blocking; what the socket does not take, and
	// anything but sending in RTS (a state change, a Terminate, the
	// gate before the first FPDU), goes on in the send goroutine, as
	// without PollTx. A post wakes a goroutine already asleep in Wait on
	// SendCQ to send it; one that no Wait takes is sent by the send
	// goroutine after PollTxIdle. CQ.Poll never sends. A lone request
	// is written by PostSend itself when the engine is idle, in both
	// modes (the direct send). A CQ drives at most one PollTx QP:
	// CreateQP fails with ErrConfig for a second one on the same SendCQ
	// (until the first is destroyed). What goes on the wire, its order
	// and the completions are the same in both modes. PollTx needs a
	// connection with a syscall.RawConn (TCP); on another it is off.
	PollTx bool
	// PollTxIdle bounds how long work a PollTx QP queued waits for a
	// Wait on SendCQ before the send goroutine sends it. Zero means the
	// default, 1ms; negative is an error.
	PollTxIdle time.Duration
	// SignalAll makes every send work request signaled.
	SignalAll bool
	// BufferedRx makes the receive path read each whole FPDU into a
	// buffer and check its CRC before it copies the payload out (the
	// path markers always use), instead of placing payload straight from
	// the socket and checking the CRC after (see rx.go). Headers are
	// checked as soon as they arrive either way.
	BufferedRx bool
	// CRCInPlace, with CRC, reads large payloads straight from the
	// socket into their target memory, as without CRC, and computes the
	// CRC over the bytes there, right after each read (as Linux siw
	// does for kernel QPs), instead of reading every byte into a buffer,
	// computing the CRC there and copying the payload out. It saves that
	// copy (1 MiB Writes with CRC over loopback, make bench's gosiw side
	// alone: 542 -> 399 µs per MiB, 842 -> 649 µs of CPU, medians of 10
	// interleaved runs), at a price: the CRC then checks the target
	// memory, not the bytes that arrived, so memory that the application
	// or another connection writes while a payload lands in it can fail
	// the CRC of an FPDU that arrived intact, which ends the connection
	// with a Terminate (MPA CRC error) blaming the peer. Without it the
	// CRC checks exactly the bytes received, whatever happens to the
	// memory they land in. Set it only when nothing else writes the
	// memory this QP's Writes, Sends and Read Responses land in while
	// they may land there (buffers the application owns outright, as a
	// kernel ULP does; not a region that several connections write).
	// Ignored without CRC, with markers and with BufferedRx.
	CRCInPlace bool
	// DisconnectTimeout bounds a graceful disconnect: how long the QP
	// waits for the peer's FIN after its own (default 3s).
	DisconnectTimeout time.Duration
	// RxStallTimeout bounds how long the receive engine waits for the
	// rest of an FPDU of which part has arrived: when the peer sends
	// nothing more for that long, the QP ends with the LLP Terminate "TCP
	// connection closed, terminated or lost" whose cause is ErrRxStalled.
	// An idle connection between FPDUs never times out. Zero means the
	// default, 60s; a negative value turns the limit off.
	RxStallTimeout time.Duration
}

func (c *QPConfig) populate() error {
	if c.SendCQ == nil {
		return errConfigf("QPConfig.SendCQ is nil")
	}
	if c.RecvCQ == nil {
		return errConfigf("QPConfig.RecvCQ is nil")
	}
	for _, f := range []struct {
		name   string
		v      *int
		d, max int
	}{
		{"MaxSendWR", &c.MaxSendWR, defaultWR, 1 << 20}, {"MaxRecvWR", &c.MaxRecvWR, defaultWR, 1 << 20},
		{"MaxSendSGE", &c.MaxSendSGE, defaultSGE, MaxSGE}, {"MaxRecvSGE", &c.MaxRecvSGE, defaultSGE, MaxSGE},
		{"MaxInline", &c.MaxInline, defaultInline, MaxInlineData},
		{"MaxIRD", &c.MaxIRD, MaxIRDORD, MaxIRDORD}, {"MaxORD", &c.MaxORD, MaxIRDORD, MaxIRDORD},
	} {
		if *f.v == 0 {
			*f.v = f.d
		}
		if *f.v < 0 || *f.v > f.max {
			return errConfigf("QPConfig.%s %d outside 0..%d", f.name, *f.v, f.max)
		}
	}
	if c.MaxULPDU != 0 && (c.MaxULPDU < minULPDU || c.MaxULPDU > mpa.MaxULPDU) {
		return errConfigf("QPConfig.MaxULPDU %d outside %d..%d", c.MaxULPDU, minULPDU, mpa.MaxULPDU)
	}
	if c.DisconnectTimeout <= 0 {
		c.DisconnectTimeout = defaultDisconnectTimeout
	}
	switch {
	case c.PollRxIdle == 0:
		c.PollRxIdle = time.Duration(pollRxIdle.Load())
	case c.PollRxIdle < 0:
		return errConfigf("QPConfig.PollRxIdle %v is negative", c.PollRxIdle)
	}
	switch {
	case c.PollTxIdle == 0:
		c.PollTxIdle = time.Duration(pollTxIdle.Load())
	case c.PollTxIdle < 0:
		return errConfigf("QPConfig.PollTxIdle %v is negative", c.PollTxIdle)
	}
	switch {
	case c.RxStallTimeout == 0:
		c.RxStallTimeout = defaultRxStall
	case c.RxStallTimeout < 0:
		c.RxStallTimeout = 0
	}
	return nil
}

// cacheLinePad keeps the fields after it off the cache line of those
// before it (64 bytes, the line of the x86 and arm64 CPUs gosiw runs on).
type cacheLinePad [64]byte

// postMode says what a post does with a new work request.
type postMode uint8

const (
	postQueue  postMode = iota // queue it for the engines
	postRefuse                 // refuse it (graceful close under way)
	postFlush                  // complete it at once with WCWRFlushErr
)

// QP is a reliable connected queue pair. Post and poll calls are safe for
// concurrent use; they only touch short queues under a mutex and ring the
// send engine's doorbell.
//
// Once started, a QP runs two goroutines. The receive goroutine owns the
// connection's read side, the deframing and reassembly state and the
// placement of payload; the send goroutine owns the FPDU writer, the SQ cursor
// and the outgoing Read and Atomic Responses. Neither logs per FPDU or
// per work request; Stats has the counters.
//
// Lock order: mu -> postMu -> sqMu -> rqMu -> SRQ.mu -> CQ.mu -> Device.mu.
type QP struct {
	dev      *Device
	pd       *PD
	cfg      QPConfig
	qpn      uint32
	lg       *zap.Logger
	scq, rcq *CQ
	srq      *SRQ

	mu          sync.Mutex
	state       QPState  // +checklocks:mu
	conn        net.Conn // +checklocks:mu
	err         error    // first fatal error, sticky; +checklocks:mu
	term        termInfo // the Terminate to send; +checklocks:mu
	termPending bool     // +checklocks:mu
	localClose  bool     // Disconnect(graceful) called; +checklocks:mu
	started     bool     // +checklocks:mu
	closed      bool     // +checklocks:mu
	ended       bool     // done is closed; +checklocks:mu
	afterDone   []func() // AfterDone's functions, until done is closed; +checklocks:mu
	finishOnce  sync.Once
	p           mpa.Params // set by Start, read-only afterwards

	// broken is set with err: the engines stop processing FPDUs and work
	// requests.
	broken atomic.Bool
	// aborting is set before the state change of an abrupt end: the
	// connection is reset, and the send engine must not send a FIN first
	// (the peer would read a graceful close before the RST).
	aborting atomic.Bool
	// inRTS is state == StateRTS, stored under mu with state and read
	// without it (rtsNow: the direct send's check).
	inRTS atomic.Bool
	// bell is the send engine's doorbell (non-blocking, coalescing).
	bell chan struct{}
	// rxFirst is closed once the first FPDU has arrived; a responder sends
	// nothing before.
	rxFirst chan struct{}
	txDone  chan struct{}
	done    chan struct{}

	// The SQ's posters and its send engine each have a cache line of
	// their own: the fields a post writes (postMu, sqTail, sqHeadSeen)
	// apart from those the engine and the sweeps write (sqMu, sq.head,
	// sqHead, sqNext), so that a stream of posts and the engine taking
	// them do not steal each other's lines at every step.
	_ cacheLinePad
	// postMu orders the posts of send work requests: a post holds it
	// from its look at sqMode to the publication of what it pushed, and
	// whoever changes sqMode holds it too (qp.mu, then postMu, then
	// sqMu; a post holds postMu without taking qp.mu). A list of the
	// common requests (PostSends) is written and published under postMu
	// alone, without sqMu: the send engine and the sweeps, which hold
	// sqMu, are not held up by the copy, nor the poster by them.
	postMu sync.Mutex
	// sqTail is the SQ's tail, the next free index (the SQ keeps it here,
	// not in sq.tail, which stays 0): written by posts under postMu (a
	// post that pushes under sqMu too: pushSendLocked), each store once
	// the entries before it are written, so that a reader that loads it
	// may read every entry before it. The slots from sqTail to
	// sq.head+limit are the post's that holds postMu: no one else reads
	// or writes them.
	sqTail atomic.Uint64
	// sqHeadSeen is the SQ's head as a post last loaded it (sqHead),
	// under postMu: the room it counts by it is never more than there is
	// (the head only moves on); a post loads sqHead again only when that
	// room is short.
	sqHeadSeen uint64
	_          cacheLinePad
	sqMu       sync.Mutex
	// sq holds the posted send work requests: sq.head is the oldest not
	// yet completed, sqNext the next one the send engine takes, sqTail
	// the next free index. Its limit is MaxSendWR. sqHead is sq.head as
	// the sweeps (under sqMu) publish it for posts without sqMu.
	sq     ring[sqEntry] // +checklocks:sqMu (head, the entries before sqTail)
	sqHead atomic.Uint64
	sqNext uint64   // +checklocks:sqMu
	sqMode postMode // +checklocks:sqMu, postMu (written under both)
	_      cacheLinePad
	// inline holds MaxInline bytes per SQ slot (sq.slot), allocated at
	// the first inline post under sqMu, before the entry that uses it is
	// pushed: the send engine reads it for entries it took under sqMu.
	inline []byte
	// sqSGL holds the SGEs after the first, MaxSendSGE-1 per SQ slot,
	// and sqExt the operands sqEntry has no room for, one per slot;
	// each is allocated under sqMu by the first post that needs it, as
	// inline is, and read by the send engine for entries it took under
	// sqMu.
	sqSGL sgeSide
	sqExt []sqExt
	// orq holds the outstanding Reads and atomics (limit: the ORD), irq
	// the inbound Read and Atomic Requests to answer (limit: the IRD);
	// Start makes both.
	orq ring[orqEntry] // +checklocks:sqMu
	irq ring[irqEntry] // +checklocks:sqMu

	// rq holds the posted receives; rq.head moves only under rqMu, and
	// only by the receive engine (takeRecv, rqPop) and by flushAll once
	// the engines have stopped. The engine reads the entries below the
	// tail it last saw under rqMu (rx.rqAvail) without the lock: no post
	// writes a slot until head has passed it.
	rqMu   sync.Mutex
	rq     rqRing   // +checklocks:rqMu
	rqMode postMode // +checklocks:rqMu

	tx txEngine // owned by the send goroutine
	rx rxEngine // owned by the receive goroutine

	stats qpCounters
}

// sqEntry is a posted send work request: what every request carries,
// in one cache line (64 bytes), so that posting, starting, framing and
// completing a small request each touch one line of the SQ. What only
// some requests carry lives beside the ring, per slot (QP.sqSGL, the
// SGEs after the first; QP.sqExt, the operands of Immediate Data,
// atomics, fast registrations and window binds), allocated the first
// time a request needs it.
type sqEntry struct {
	id      uint64
	length  uint32 // total payload (or Read size)
	invSTag STag
	remote  Remote
	sge0    SGE // the first SGE (nsge > 0); the rest in QP.sqSGL
	op      WROpcode
	nsge    uint8
	// +checklocks:sqMu
	state                              sqState
	status                             WCStatus
	signaled, solicited, fence, inline bool
}

// sqExt holds the operands of a work request that sqEntry has no room
// for, per SQ slot (QP.sqExt).
type sqExt struct {
	mem                                      MemOp // WRRegMR, WRBindMW
	imm                                      uint64
	cmpAdd, swap, addMask, cmpMask, swapMask uint64
}

// needsExt reports whether a work request of op has operands in sqExt.
func needsExt(op WROpcode) bool {
	switch op {
	case WRWriteImm, WRImmData, WRFetchAdd, WRCmpSwap, WRRegMR, WRBindMW:
		return true
	}
	return false
}

type sqState uint8

const (
	sqPosted   sqState = iota // waiting for the send engine
	sqActive                  // being transmitted
	sqAwaiting                // Read/atomic sent, response outstanding
	sqDone                    // completion ready (in SQ order)
)

// CreateQP creates a reliable connected QP in IDLE. Receives may be
// posted at once; sends queue until Start.
func (pd *PD) CreateQP(cfg *QPConfig) (*QP, error) {
	if cfg == nil {
		return nil, errConfigf("CreateQP: nil QPConfig")
	}
	c := *cfg
	if err := c.populate(); err != nil {
		return nil, err
	}
	if c.SRQ != nil && c.SRQ.pd != pd {
		return nil, ErrWrongPD
	}
	d := pd.dev
	qp := &QP{
		dev:     d,
		pd:      pd,
		cfg:     c,
		qpn:     d.qpnSeq.Add(1),
		scq:     c.SendCQ,
		rcq:     c.RecvCQ,
		srq:     c.SRQ,
		bell:    make(chan struct{}, 1),
		rxFirst: make(chan struct{}),
		txDone:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	qp.lg = d.lg.With(zap.Uint32("qpn", qp.qpn))
	qp.sq = newRing[sqEntry](c.MaxSendWR)
	qp.sqSGL = newSGESide(c.MaxSendSGE)
	if c.SRQ == nil {
		qp.rq = newRQRing(c.MaxRecvWR, c.MaxRecvSGE)
	}
	if err := qp.scq.attach(qp); err != nil {
		return nil, err
	}
	if err := qp.rcq.attach(qp); err != nil {
		qp.scq.detach(qp)
		return nil, err
	}
	if c.PollRx && !qp.rcq.poll.CompareAndSwap(nil, qp) {
		qp.scq.detach(qp)
		qp.rcq.detach(qp)
		return nil, errConfigf("QPConfig.PollRx: RecvCQ already drives another PollRx QP")
	}
	if c.PollTx && !qp.scq.pollTx.CompareAndSwap(nil, qp) {
		qp.scq.detach(qp)
		qp.rcq.detach(qp)
		return nil, errConfigf("QPConfig.PollTx: SendCQ already drives another PollTx QP")
	}
	if qp.srq != nil {
		if err := qp.srq.attach(); err != nil {
			qp.scq.detach(qp)
			qp.rcq.detach(qp)
			return nil, err
		}
	}
	if err := d.addQP(qp); err != nil {
		qp.detachAll()
		return nil, err
	}
	d.stats.qps.Add(1)
	return qp, nil
}

func (qp *QP) detachAll() {
	qp.scq.detach(qp)
	qp.rcq.detach(qp)
	if qp.srq != nil {
		qp.srq.detach()
	}
}

// QPN returns the QP number (unique on its device).
func (qp *QP) QPN() uint32 { return qp.qpn }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// State returns the QP's current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Params returns what Start was given (IRD/ORD as clamped).
func (qp *QP) Params() mpa.Params {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.p
}

// Done is closed once the connection has ended for any reason and every
// outstanding work request has completed or been flushed.
func (qp *QP) Done() <-chan struct{} { return qp.done }

// Err returns why the connection ended: nil for a graceful close by either
// side; a *TerminateError for a Terminate sent or received (its cause, such
// as ErrCQOverflow or a failed work request, is reachable with errors.Is
// and errors.As); ErrAborted after Disconnect(true); or the I/O error that
// broke the connection. Every such error satisfies
// errors.Is(err, net.ErrClosed) when it is a *TerminateError. It returns
// nil while the QP is up.
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.err
}

// setStateLocked moves the QP to s if the diagram allows it.
func (qp *QP) setStateLocked(s QPState) error {
	if qp.state == s {
		return nil
	}
	if !legalTransition(qp.state, s) {
		err := &errIllegalTransition{qp.state, s}
		if debugChecks {
			panic(err)
		}
		return err
	}
	qp.state = s
	qp.inRTS.Store(s == StateRTS)
	return nil
}

// ring rings the send engine's doorbell, and starts the send goroutine
// if it parked (see txParked).
func (qp *QP) ring() {
	select {
	case qp.bell <- struct{}{}:
	default:
	}
	if qp.tx.state.Load() == txParked && qp.tx.state.CompareAndSwap(txParked, txRunning) {
		go qp.tx.restart() // a func value without arguments: no allocation
	}
}

// Start binds the negotiated connection to the QP and moves it to RTS
// (cm.QP). The QP owns conn from then on. It returns at once; the
// engines run in their own goroutines. As the responder the QP sends
// nothing until the initiator's first FPDU has arrived; as the initiator
// it waits p.FirstSendDelay, then sends the P2P RTR if p.P2P, then the
// posted work. p.Leftover is consumed before conn is read.
func (qp *QP) Start(conn net.Conn, p *mpa.Params) error {
	if conn == nil || p == nil {
		return errConfigf("Start: nil connection (%t) or parameters (%t)", conn == nil, p == nil)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed {
		return ErrClosed
	}
	if qp.started || (qp.state != StateIdle && qp.state != StateRTR) {
		return ErrQPState
	}
	pc := *p
	pc.Leftover = append([]byte(nil), p.Leftover...)
	pc.IRD = min(max(pc.IRD, 0), qp.cfg.MaxIRD)
	pc.ORD = min(max(pc.ORD, 0), qp.cfg.MaxORD)
	ulpdu := qp.cfg.MaxULPDU
	if ulpdu == 0 {
		ulpdu = ulpduFor(emssOf(conn), pc.MarkersTx)
	}
	// A P2P Read RTR takes an ORQ (initiator) or IRQ (responder) slot
	// even when the handshake settled 0.
	orqCap, irqCap := pc.ORD, pc.IRD
	if pc.P2P && pc.RTR == mpa.RTRRead {
		if pc.Initiator {
			orqCap = max(orqCap, 1)
		} else {
			irqCap = max(irqCap, 1)
		}
	}
	qp.sqMu.Lock()
	qp.orq = newRing[orqEntry](orqCap)
	qp.irq = newRing[irqEntry](irqCap)
	qp.sqMu.Unlock()
	qp.p = pc
	qp.conn = conn
	qp.tx.init(qp, ulpdu)
	qp.rx.init(qp, conn)
	if err := qp.setStateLocked(StateRTS); err != nil {
		return err
	}
	qp.started = true
	qp.tx.state.Store(txRunning)
	qp.rxStartPoll(conn)
	go qp.txLoop(conn)
	qp.lg.Info("qp connected",
		zap.Bool("initiator", pc.Initiator), zap.Bool("crc", pc.CRC),
		zap.Bool("markers_tx", pc.MarkersTx), zap.Bool("markers_rx", pc.MarkersRx),
		zap.Int("ird", pc.IRD), zap.Int("ord", pc.ORD), zap.Bool("p2p", pc.P2P),
		zap.Stringer("rtr", pc.RTR), zap.Int("ulpdu", ulpdu))
	return nil
}

// IRDORDLimits returns QPConfig.MaxIRD and MaxORD, the most Read (and
// atomic) Requests the QP serves at once and issues at once
// (cm.IRDORDLimiter): the connection manager negotiates within them, so
// that the MPA Request and Reply never advertise more than Start keeps.
func (qp *QP) IRDORDLimits() (maxIRD, maxORD int) { return qp.cfg.MaxIRD, qp.cfg.MaxORD }

// Disconnect starts closing the connection and returns at once (cm.QP).
// Graceful: work requests posted so far are sent first (new ones are
// refused), then a FIN; the QP ends when the peer closes too (or after
// DisconnectTimeout). Abrupt: the connection is reset (RST) now and every
// outstanding work request is flushed.
func (qp *QP) Disconnect(abrupt bool) {
	qp.mu.Lock()
	if !qp.started {
		qp.mu.Unlock()
		return
	}
	if abrupt {
		if qp.state == StateError && qp.err == nil {
			// Already over (gracefully): nothing to abort.
			qp.mu.Unlock()
			return
		}
		first := qp.err == nil
		if first {
			qp.err = ErrAborted
		}
		qp.aborting.Store(true)
		_ = qp.setStateLocked(StateError)
		conn := qp.conn
		qp.mu.Unlock()
		qp.broken.Store(true)
		abortConn(conn)
		qp.ring()
		if first {
			qp.lg.Info("qp disconnect", zap.Bool("abrupt", true))
		}
		return
	}
	if qp.state == StateRTS {
		_ = qp.setStateLocked(StateClosing)
		qp.localClose = true
		_ = qp.conn.SetWriteDeadline(time.Now().Add(qp.cfg.DisconnectTimeout))
		qp.postMu.Lock()
		qp.sqMu.Lock()
		qp.sqMode = postRefuse
		qp.sqMu.Unlock()
		qp.postMu.Unlock()
		qp.lg.Info("qp disconnect", zap.Bool("abrupt", false))
	}
	qp.mu.Unlock()
	qp.ring()
}

// fail records the QP's first fatal error and takes it out of RTS. With
// ti set and the connection up, the send engine sends that Terminate
// before closing. fail never blocks.
func (qp *QP) fail(err error, ti *termInfo) {
	qp.mu.Lock()
	if qp.err != nil || qp.state == StateError {
		qp.mu.Unlock()
		return
	}
	qp.err = err
	qp.broken.Store(true)
	if !qp.started {
		_ = qp.setStateLocked(StateError)
		qp.mu.Unlock()
		qp.lg.Info("qp error", zap.Error(err))
		qp.finish()
		return
	}
	if ti != nil {
		qp.term = *ti
		qp.termPending = true
		_ = qp.setStateLocked(StateTerminate)
	} else {
		_ = qp.setStateLocked(StateError)
	}
	qp.mu.Unlock()
	qp.ring()
	qp.lg.Info("qp error", zap.Error(err))
}

// Close destroys the QP: a connected QP is disconnected abruptly (every
// outstanding work request is flushed) and Close waits for its goroutines.
// Close is idempotent.
func (qp *QP) Close() error {
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		<-qp.done
		return nil
	}
	qp.closed = true
	started := qp.started
	if !started {
		_ = qp.setStateLocked(StateError)
	}
	qp.mu.Unlock()
	if started {
		qp.Disconnect(true)
	} else {
		qp.finish()
	}
	<-qp.done
	qp.detachAll()
	qp.dev.removeQP(qp)
	qp.dev.stats.qps.Add(-1)
	return nil
}

// finish runs once the engines have stopped (or were never started):
// close the connection, flush everything, release buffers, close Done.
func (qp *QP) finish() {
	qp.finishOnce.Do(func() {
		qp.mu.Lock()
		conn := qp.conn
		_ = qp.setStateLocked(StateError)
		err := qp.err
		qp.mu.Unlock()
		if conn != nil {
			_ = conn.Close()
		}
		qp.flushAll()
		qp.tx.release()
		qp.rx.release()
		if conn != nil {
			qp.lg.Info("qp closed", zap.Error(err), zap.NamedError("rx_error", qp.rx.err), zap.NamedError("tx_error", qp.tx.err))
		}
		close(qp.done)
		qp.mu.Lock()
		qp.ended = true
		fns := qp.afterDone
		qp.afterDone = nil
		qp.mu.Unlock()
		for _, f := range fns {
			go f()
		}
	})
}

// AfterDone arranges for f to run in its own goroutine once Done is
// closed, or at once (in its own goroutine too) if it already is: as
// context.AfterFunc does for a context, without a goroutine parked on
// Done meanwhile (an idle connection then costs no watcher stack).
// Each call runs its f exactly once.
func (qp *QP) AfterDone(f func()) {
	qp.mu.Lock()
	if qp.ended {
		qp.mu.Unlock()
		go f()
		return
	}
	qp.afterDone = append(qp.afterDone, f)
	qp.mu.Unlock()
}

// flushAll completes every outstanding work request with WCWRFlushErr
// (or the error status already assigned) and switches both queues to
// flush-on-post. The engines must have stopped.
func (qp *QP) flushAll() {
	ovf := false
	qp.postMu.Lock() // no post is under way
	qp.sqMu.Lock()
	qp.sqMode = postFlush
	tail := qp.sqTail.Load()
	for i := qp.sq.head; i != tail; i++ {
		e := qp.sq.at(i)
		if e.state != sqDone {
			e.state = sqDone
			if e.status == WCSuccess {
				e.status = WCWRFlushErr
			}
		}
	}
	qp.sqNext = tail
	for o := qp.orq.pop(); o != nil; o = qp.orq.pop() {
		if o.mr != nil {
			o.mr.release()
			o.mr = nil
		}
	}
	for r := qp.irq.pop(); r != nil; r = qp.irq.pop() {
		if r.mr != nil {
			r.mr.release()
			r.mr = nil
		}
	}
	if !qp.sweepLocked() {
		ovf = true
	}
	qp.sqMu.Unlock()
	qp.postMu.Unlock()

	qp.rx.flushRecvs() // the receives completed before the one in progress (and rqPop)
	if qp.rx.untagged.Active() {
		qp.rx.untagged.Abandon()
		st := qp.rx.recvStatus
		if st == WCSuccess {
			st = WCWRFlushErr
		}
		wc := WC{ID: qp.rx.recv.id, Status: st, Op: WCRecv, ByteLen: qp.rx.untagged.MO(), QPN: qp.qpn}
		if !qp.rcq.push(&wc) {
			ovf = true
		}
	}
	qp.rqMu.Lock()
	qp.rqMode = postFlush
	for e := qp.rq.pop(); e != nil; e = qp.rq.pop() {
		wc := WC{ID: e.id, Status: WCWRFlushErr, Op: WCRecv, QPN: qp.qpn}
		if !qp.rcq.push(&wc) {
			ovf = true
		}
	}
	qp.rqMu.Unlock()
	if ovf {
		qp.scq.overflowed()
		qp.rcq.overflowed()
	}
}

// sweepLocked generates the completions of finished send work requests,
// in SQ order, under one lock of the send CQ and with one wake-up of its
// waiters. It reports false if the send CQ overflowed.
//
// +checklocks:qp.sqMu
func (qp *QP) sweepLocked() bool { return qp.sweepWrittenLocked(0, nil) }

// sweepWrittenLocked is sweepLocked after a write of every work request
// before SQ index written: those of them still sqActive (Sends, Writes
// and the requests that write nothing) count as done, and the ones the
// sweep reaches complete without being marked first (txWritten marks
// the rest). With sp, the send engine's span of simple work requests
// (the engine's caller only), the sweep crosses the span in one step
// when it reaches it wholly written and started: it pushes the
// completions of sp.wcs from the head on and moves the head past the
// span, what its per-request steps would do there.
//
// +checklocks:qp.sqMu
func (qp *QP) sweepWrittenLocked(written uint64, sp *simpleSpan) bool {
	ok, pushed := true, false
	// The SQ's head moves once, after the loop (pop's step for each
	// entry swept).
	head, next := qp.sq.head, qp.sqNext
	// The span to cross, [from, from+n) (n 0: none).
	var from, n uint64
	if sp != nil && sp.to <= written && sp.to <= next {
		from, n = sp.from, sp.to-sp.from
	}
	for head != next {
		if head-from < n {
			// Inside the span: its completions from the head on.
			for _, i := range sp.wcs {
				if i < head {
					continue // swept before (another sweep moved the head into the span)
				}
				if !pushed {
					qp.scq.mu.Lock()
					pushed = true
				}
				if !qp.pushSQWCLocked(qp.sq.at(i)) {
					ok = false
				}
			}
			head = from + n
			continue
		}
		e := qp.sq.at(head)
		if e.state != sqDone && (e.state != sqActive || head >= written) {
			break
		}
		if e.signaled || e.status != WCSuccess {
			if !pushed {
				qp.scq.mu.Lock()
				pushed = true
			}
			if !qp.pushSQWCLocked(e) {
				ok = false
			}
		}
		e.sge0.MR = nil
		if e.nsge > 1 || e.op == WRRegMR || e.op == WRBindMW {
			qp.sqClearSlot(e, qp.sq.slot(head))
		}
		head++
	}
	qp.sq.head = head
	qp.sqHead.Store(head)
	if pushed {
		qp.scq.mu.Unlock()
		qp.scq.wake()
	}
	return ok
}

// pushSQWCLocked pushes the completion of the finished send work request
// e to the send CQ, whose lock the caller holds, and reports false if
// the CQ overflowed.
//
// +checklocks:qp.sqMu
// +checklocks:qp.scq.mu
func (qp *QP) pushSQWCLocked(e *sqEntry) bool {
	wc := WC{ID: e.id, Status: e.status, Op: wcOpOf(e.op), QPN: qp.qpn}
	if e.status == WCSuccess {
		wc.ByteLen = e.length
	}
	return qp.scq.pushLocked(&wc)
}

// sqClearSlot drops the references the side arrays of SQ slot slot hold
// for its completed work request e (its SGEs after the first, a fast
// registration's or bind's operands), so that they keep nothing alive.
//
// +checklocks:qp.sqMu
func (qp *QP) sqClearSlot(e *sqEntry, slot int) {
	for i := 1; i < int(e.nsge); i++ {
		qp.sqSGE(e, slot, i).MR = nil
	}
	if e.op == WRRegMR || e.op == WRBindMW {
		qp.sqExt[slot].mem = MemOp{}
	}
}

// orqFront returns the oldest outstanding Read or atomic, the one the
// next response must answer, or nil when none is outstanding. Only the
// receive engine removes ORQ entries (completeORQ), so the entry stays
// valid for it.
func (qp *QP) orqFront() *orqEntry {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.orq.peek()
}

// irqFull reports whether the IRQ holds as many requests as the IRD
// allows.
func (qp *QP) irqFull() bool {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.irq.full()
}

// irqPush queues an inbound Read or Atomic Request for the send engine.
// Only the receive engine pushes, after irqFull reported false.
func (qp *QP) irqPush(r irqEntry) {
	qp.sqMu.Lock()
	*qp.irq.push() = r
	qp.sqMu.Unlock()
}

// PostSend posts a send work request. It fails at once for a malformed
// request, a full SQ, an RFC 7306 operation on a QP without RFC7306, or
// during a graceful disconnect, or with ErrCQOverflow once the send CQ
// has overrun (see CQ); on a QP in ERROR it succeeds otherwise and the
// request completes at once with WCWRFlushErr. Local memory is checked
// when the request is executed: a bad SGE completes it with
// WCLocProtErr and puts the QP in error, as verbs do. A WRRegMR or
// WRBindMW is checked at once as far as the SQ ahead of it cannot change
// the outcome (ErrInvalidWR, ErrWrongPD, ErrAccess, ErrInvalidSGE; see
// MemOp, MW) and otherwise when executed.
//
// PostSend never blocks. A request posted to an idle QP (the only one
// the send engine has not yet taken, no Read or Atomic Response waiting,
// the send goroutine parked, the QP in RTS) that is no Local Invalidate,
// fast registration or window bind and whose message is one FPDU (at
// most the MULPDU less the DDP header) is written on the caller's
// goroutine, a direct send: no send goroutine is woken, and the message
// costs one non-blocking writev. When the socket takes it whole, it has
// also completed: a signaled request's completion is in the send CQ when
// PostSend returns. What the socket does not take at once, and every
// other request, the send goroutine writes, in the same order.
// QPStats.TxDirect and TxDirectRest count direct sends.
func (qp *QP) PostSend(wr SendWR) error {
	fast := validFast(&wr) // the common request: valid, pushOneSGELocked's
	if !fast {
		if err := qp.validateSend(&wr); err != nil {
			return err
		}
	}
	qp.postMu.Lock()
	qp.sqMu.Lock()
	switch qp.sqMode {
	case postRefuse:
		qp.unlockPost()
		return ErrQPState
	}
	if qp.scq.overran() {
		qp.unlockPost()
		return ErrCQOverflow
	}
	if qp.sqFullLocked() {
		qp.unlockPost()
		return ErrQueueFull
	}
	var e *sqEntry
	if fast {
		e = qp.pushOneSGELocked(&wr)
	} else {
		e = qp.pushSendLocked(&wr)
	}
	if qp.sqMode == postFlush {
		e.state, e.status = sqDone, WCWRFlushErr
		qp.sqNext = qp.sqTail.Load()
		ok := qp.sweepLocked()
		qp.unlockPost()
		if !ok {
			qp.scq.overflowed()
		}
		return nil
	}
	// Alone in the SQ, nothing else to send: written here if the send
	// engine is parked (txdirect.go).
	took, run := qp.txDirectTakeLocked(e, fast)
	qp.unlockPost()
	switch {
	case run:
		qp.txDirectRun() // gives the engine back
	case took:
		qp.txDirectEnd(true) // to a send goroutine
	default:
		qp.ringPost()
	}
	return nil
}

// pushSendLocked copies the validated work request wr into the next SQ
// slot as sqPosted and returns the entry; the caller has checked that
// the SQ has room.
//
// +checklocks:qp.sqMu
func (qp *QP) pushSendLocked(wr *SendWR) *sqEntry {
	if validFast(wr) {
		return qp.pushOneSGELocked(wr)
	}
	e, slot := qp.sqPushLocked()
	e.id, e.op = wr.ID, wr.Op
	e.signaled = wr.Signaled || qp.cfg.SignalAll
	e.solicited, e.fence = wr.Solicited, wr.Fence
	e.remote, e.invSTag = wr.Remote, wr.InvalidateSTag
	if needsExt(wr.Op) {
		x := qp.extSlot(slot)
		x.imm = wr.Imm
		x.cmpAdd, x.swap = wr.CompareAdd, wr.Swap
		x.addMask, x.cmpMask, x.swapMask = wr.AddMask, wr.CompareMask, wr.SwapMask
		if wr.Op == WRCmpSwap {
			if x.cmpMask == 0 {
				x.cmpMask = ^uint64(0)
			}
			if x.swapMask == 0 {
				x.swapMask = ^uint64(0)
			}
		}
		if wr.Op == WRRegMR || wr.Op == WRBindMW {
			x.mem = wr.Mem // the only ops that read it; sweepLocked zeroes it
		}
	}
	e.inline = false
	e.nsge = 0
	var total uint64
	if wr.InlineData != nil {
		e.inline = true
		if qp.inline == nil {
			// At the first inline post: MaxInline bytes per SQ slot.
			qp.inline = make([]byte, qp.sq.slots()*qp.cfg.MaxInline)
		}
		n := copy(qp.inline[slot*qp.cfg.MaxInline:], wr.InlineData)
		total = uint64(n)
	} else if n := len(wr.SGL); n > 0 {
		e.sge0 = wr.SGL[0]
		total = uint64(wr.SGL[0].Length)
		if n > 1 {
			rest := qp.sglSlot(slot)
			for i := 1; i < n; i++ {
				rest[i-1] = wr.SGL[i]
				total += uint64(wr.SGL[i].Length)
			}
		}
		e.nsge = uint8(n)
	}
	e.length = uint32(total)
	e.state, e.status = sqPosted, WCSuccess
	return e
}

// pushOneSGELocked is pushSendLocked for the common request, a Send or
// Write of one SGE (validFast): no side arrays to fill.
//
// +checklocks:qp.sqMu
func (qp *QP) pushOneSGELocked(wr *SendWR) *sqEntry {
	e, _ := qp.sqPushLocked()
	qp.setOneSGELocked(e, wr, qp.cfg.SignalAll)
	return e
}

// pushOneSGEs pushes the longest prefix of wrs whose requests are all
// common ones (validFast) as pushOneSGELocked pushes each, and returns
// how many it pushed: the same entries in the same slots, the SQ's tail
// moved once for them and published (sqTail) once they are written. The
// caller holds postMu, not necessarily sqMu (see QP.postMu: the slots
// past the tail are the poster's), and has checked that the SQ has room
// for len(wrs) more.
//
// +checklocks:qp.postMu
func (qp *QP) pushOneSGEs(wrs []SendWR) int {
	r := &qp.sq
	tail, all := qp.sqTail.Load(), qp.cfg.SignalAll
	// The slots a chunk holds (a ring of fewer slots than a chunk uses
	// only the first mask+1 of its one chunk).
	lim := min(r.mask+1, ringChunk)
	n := 0
	for n < len(wrs) && validFast(&wrs[n]) {
		// The chunk of the next slot, allocated as ring.push allocates
		// (an entry goes there now), then filled from that slot on in a
		// loop without calls.
		s := (tail + uint64(n)) & r.mask
		c := r.chunks[s/ringChunk]
		if c == nil {
			c = new([ringChunk]sqEntry)
			r.chunks[s/ringChunk] = c
		}
		qp.setOneSGELocked(&c[s%ringChunk], &wrs[n], all)
		n++
		for j := s%ringChunk + 1; j < lim && n < len(wrs) && validFast(&wrs[n]); j++ {
			qp.setOneSGELocked(&c[j%ringChunk], &wrs[n], all)
			n++
		}
	}
	qp.sqTail.Store(tail + uint64(n))
	return n
}

// sqPushLocked appends an entry to the SQ and returns it and its slot,
// which still holds whatever an earlier entry left there: the caller
// sets every field (as ring.push; the SQ's tail is sqTail). It holds
// postMu and sqMu: the entry is published at once, and its fields are
// set before anyone that reads it (taking it under sqMu) can.
//
// +checklocks:qp.sqMu
func (qp *QP) sqPushLocked() (*sqEntry, int) {
	t := qp.sqTail.Load()
	e := qp.sq.alloc(t)
	qp.sqTail.Store(t + 1)
	return e, qp.sq.slot(t)
}

// sqFullLocked reports whether the SQ holds MaxSendWR requests (ring.full
// with the SQ's tail, sqTail).
//
// +checklocks:qp.sqMu
func (qp *QP) sqFullLocked() bool {
	return qp.sqTail.Load()-qp.sq.head >= uint64(qp.sq.limit)
}

// sqRoom returns how many more requests the SQ has room for, as a post
// without sqMu counts it (see sqHeadSeen): at least want when there is
// that much room.
//
// +checklocks:qp.postMu
func (qp *QP) sqRoom(want int) int {
	tail := qp.sqTail.Load()
	room := qp.sq.limit - int(tail-qp.sqHeadSeen)
	if room < want {
		qp.sqHeadSeen = qp.sqHead.Load()
		room = qp.sq.limit - int(tail-qp.sqHeadSeen)
	}
	return max(room, 0)
}

// setOneSGELocked sets every field of e, the SQ entry being pushed (a
// slot past the published tail, the poster's), for the common request
// wr (validFast): sqPosted, signaled also when signalAll (the caller's
// QPConfig.SignalAll, loaded once for a list).
//
// +checklocks:qp.postMu
func (qp *QP) setOneSGELocked(e *sqEntry, wr *SendWR, signalAll bool) {
	s := &wr.SGL[0]
	e.id, e.length, e.invSTag, e.remote, e.sge0 = wr.ID, s.Length, wr.InvalidateSTag, wr.Remote, *s
	e.op, e.nsge, e.state, e.status = wr.Op, 1, sqPosted, WCSuccess
	e.signaled, e.solicited, e.fence, e.inline = wr.Signaled || signalAll, wr.Solicited, wr.Fence, false
}

// extSlot returns the sqExt of SQ slot slot, allocating QP.sqExt at its
// first use.
//
// +checklocks:qp.sqMu
func (qp *QP) extSlot(slot int) *sqExt {
	if qp.sqExt == nil {
		qp.sqExt = make([]sqExt, qp.sq.slots())
	}
	return &qp.sqExt[slot]
}

// sglSlot returns the SGEs after the first of SQ slot slot
// (MaxSendSGE-1 of them), allocating QP.sqSGL at its first use.
//
// +checklocks:qp.sqMu
func (qp *QP) sglSlot(slot int) []SGE { return qp.sqSGL.of(slot, qp.sq.slots()) }

// sqSGE returns SGE i of the work request e in SQ slot slot.
func (qp *QP) sqSGE(e *sqEntry, slot, i int) *SGE {
	if i == 0 {
		return &e.sge0
	}
	return qp.sqSGL.at(slot, i)
}

// PostSends posts the send work requests wrs in order, as the verbs'
// linked list of work requests: wrs[:n] are posted exactly as n calls of
// PostSend would post them (same checks, same completions, same order),
// in one hold of the SQ's post lock and with one doorbell of the send engine for
// the whole list, so that the engine finds the list whole and frames it
// into its batches together. It returns n, the number posted; when n < len(wrs) the
// error is why wrs[n] was refused (what PostSend would return for it: a
// malformed request, ErrQueueFull when the SQ has no room for it,
// ErrQPState during a graceful disconnect, ErrCQOverflow) and none of
// wrs[n:] was posted: a request is posted whole or not at all, and the
// caller may post wrs[n:] again once the cause is gone. The requests
// before a malformed one are posted. An empty list posts nothing and
// returns 0, nil. On a QP in ERROR every request posted completes at once
// with WCWRFlushErr, as with PostSend. PostSends does not allocate;
// wrs and their slices may be reused as soon as it returns (see SendWR).
func (qp *QP) PostSends(wrs []SendWR) (int, error) {
	// The first request is checked before the lock (its error comes
	// first, as PostSend's), the others as they are copied, in one pass.
	if len(wrs) == 0 {
		return 0, nil
	}
	if err := qp.validateSend(&wrs[0]); err != nil {
		return 0, err
	}
	qp.postMu.Lock()
	if qp.sqMode == postRefuse {
		qp.postMu.Unlock()
		return 0, ErrQPState
	}
	if qp.scq.overran() {
		qp.postMu.Unlock()
		return 0, ErrCQOverflow
	}
	flush := qp.sqMode == postFlush
	n := 0
	if !flush {
		// The common requests first, in one tight pass while the SQ has
		// room, without sqMu (see postMu): published at once, they are
		// the send engine's. A list of them all is posted there; the
		// loop below takes over at the first other request (and tells a
		// full SQ), and decides a direct send for a list of one.
		n = qp.pushOneSGEs(wrs[:min(len(wrs), qp.sqRoom(len(wrs)))])
		if n == len(wrs) && n > 1 {
			qp.postMu.Unlock()
			qp.ringPost()
			return n, nil
		}
	}
	var verr error
	ok := true
	qp.sqMu.Lock()
	var first *sqEntry
	if n > 0 {
		first = qp.sq.at(qp.sqTail.Load() - uint64(n))
	}
	for ; n < len(wrs); n++ {
		if w := &wrs[n]; n > 0 && !validFast(w) {
			if verr = qp.validateSend(w); verr != nil {
				break
			}
		}
		if flush && qp.sqFullLocked() {
			// Each flushed request completes at once, as with PostSend.
			ok = qp.sweepLocked() && ok
		}
		if qp.sqFullLocked() {
			verr = ErrQueueFull
			break
		}
		e := qp.pushSendLocked(&wrs[n])
		if n == 0 {
			first = e
		}
		if flush {
			e.state, e.status = sqDone, WCWRFlushErr
			qp.sqNext = qp.sqTail.Load()
		}
	}
	if flush {
		ok = qp.sweepLocked() && ok
		qp.unlockPost()
		if !ok {
			qp.scq.overflowed()
		}
		return n, verr
	}
	// A list of one alone in the SQ, nothing else to send: written here
	// if the send engine is parked (txdirect.go), as by PostSend.
	took, run := false, false
	if n == 1 {
		took, run = qp.txDirectTakeLocked(first, false)
	}
	qp.unlockPost()
	switch {
	case run:
		qp.txDirectRun() // gives the engine back
	case took:
		qp.txDirectEnd(true) // to a send goroutine
	case n > 0:
		qp.ringPost()
	}
	return n, verr
}

// unlockPost releases sqMu and postMu, which a post holds together.
func (qp *QP) unlockPost() {
	qp.sqMu.Unlock()
	qp.postMu.Unlock()
}

// validFast reports whether wr is the common request, a Send or Write of
// one SGE, that validateSend accepts (MaxSendSGE is at least 1, and one
// SGE's length fits the total): PostSends's check in line. false means
// validateSend decides.
func validFast(wr *SendWR) bool {
	return (wr.Op == WRSend || wr.Op == WRWrite) && wr.InlineData == nil && len(wr.SGL) == 1 && wr.SGL[0].MR != nil
}

func (qp *QP) validateSend(wr *SendWR) error {
	if validFast(wr) {
		return nil
	}
	if wr.Op > WRBindMW {
		return ErrInvalidWR
	}
	if wr.Op.rfc7306() && !qp.cfg.RFC7306 {
		return ErrNotSupported
	}
	if len(wr.SGL) > qp.cfg.MaxSendSGE {
		return ErrTooManySGE
	}
	if wr.InlineData != nil {
		switch wr.Op {
		case WRSend, WRSendInv, WRWrite, WRWriteImm:
		default:
			return ErrInvalidWR
		}
		if len(wr.InlineData) > qp.cfg.MaxInline {
			return ErrInvalidWR
		}
		return nil
	}
	var total uint64
	for _, s := range wr.SGL {
		if s.MR == nil {
			return ErrInvalidSGE
		}
		total += uint64(s.Length)
	}
	if total > 1<<32-1 {
		return ErrInvalidWR
	}
	switch wr.Op {
	case WRRead:
		if len(wr.SGL) != 1 {
			return ErrTooManySGE
		}
	case WRFetchAdd, WRCmpSwap:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return ErrInvalidSGE
		}
	case WRLocalInv, WRImmData, WRRegMR, WRBindMW:
		if len(wr.SGL) != 0 {
			return ErrInvalidWR
		}
	}
	switch wr.Op {
	case WRRegMR:
		return qp.validateRegMR(&wr.Mem)
	case WRBindMW:
		return qp.validateBindMW(&wr.Mem)
	}
	return nil
}

// PostRecv posts a receive work request. It fails with ErrCQOverflow
// once the receive CQ has overrun (see CQ). On a QP in ERROR it succeeds
// otherwise and the request completes at once with WCWRFlushErr. An SGL
// longer in total than MaxRecvLen is refused with ErrInvalidWR.
func (qp *QP) PostRecv(wr RecvWR) error {
	if qp.srq != nil {
		return ErrInvalidWR
	}
	fast := qp.recvFast(&wr) // the common receive: valid, postOne's
	if !fast {
		if err := qp.checkRecv(&wr); err != nil {
			return err
		}
	}
	qp.rqMu.Lock()
	if qp.rcq.overran() {
		qp.rqMu.Unlock()
		return ErrCQOverflow
	}
	if qp.rq.full() {
		qp.rqMu.Unlock()
		return ErrQueueFull
	}
	if qp.rqMode == postFlush {
		qp.rqMu.Unlock()
		wc := WC{ID: wr.ID, Status: WCWRFlushErr, Op: WCRecv, QPN: qp.qpn}
		if !qp.rcq.push(&wc) {
			qp.rcq.overflowed()
		}
		return nil
	}
	if fast {
		qp.rq.postOne(wr.ID, &wr.SGL[0])
	} else {
		qp.rq.post(wr)
	}
	qp.rqMu.Unlock()
	return nil
}

// PostRecvs posts the receive work requests wrs in order under one lock
// of the RQ: wrs[:n] are posted exactly as n calls of PostRecv would
// post them (same checks, same completions, same order). It returns n,
// the number posted; when n < len(wrs) the error is why wrs[n] was
// refused (what PostRecv would return for it: ErrInvalidWR, ErrTooManySGE
// or ErrInvalidSGE for a malformed request, ErrQueueFull when the RQ has
// no room for it, ErrCQOverflow) and none of wrs[n:] was posted: a
// request is posted whole or not at all. The requests before a malformed
// one are posted. An empty list posts nothing and returns 0, nil. On a QP
// in ERROR every request posted completes at once with WCWRFlushErr, as
// with PostRecv. PostRecvs does not allocate; wrs and their SGLs may be
// reused as soon as it returns.
func (qp *QP) PostRecvs(wrs []RecvWR) (int, error) {
	if qp.srq != nil && len(wrs) > 0 {
		return 0, ErrInvalidWR
	}
	if len(wrs) == 0 {
		return 0, nil
	}
	// The first request is checked before the lock (its error comes
	// before the CQ's, as PostRecv's).
	if !qp.recvFast(&wrs[0]) {
		if err := qp.checkRecv(&wrs[0]); err != nil {
			return 0, err
		}
	}
	qp.rqMu.Lock()
	if qp.rcq.overran() {
		qp.rqMu.Unlock()
		return 0, ErrCQOverflow
	}
	if qp.rqMode != postFlush {
		// The common receive, one SGE with its region (valid: one SGE's
		// length is at most MaxRecvLen), is checked and queued in one
		// tight pass while the RQ has room (postOnes: the tail moved once
		// for the run); the loop below takes over at the first other one
		// (and tells a full RQ, or the request's error, as validPrefix
		// and the room check would).
		n := 0
		if room := qp.rq.limit - qp.rq.len(); room > 0 && qp.cfg.MaxRecvSGE >= 1 {
			n = qp.rq.postOnes(wrs[:min(len(wrs), room)])
		}
		var verr error
		for ; n < len(wrs); n++ {
			if err := qp.checkRecv(&wrs[n]); err != nil {
				verr = err
				break
			}
			if qp.rq.full() {
				verr = ErrQueueFull
				break
			}
			qp.rq.post(wrs[n])
		}
		qp.rqMu.Unlock()
		return n, verr
	}
	// In ERROR: every valid request completes at once, flushed.
	qp.rqMu.Unlock()
	n, verr := validPrefix(wrs, qp.checkRecv)
	ok := true
	qp.rcq.mu.Lock()
	for i := range n {
		wc := WC{ID: wrs[i].ID, Status: WCWRFlushErr, Op: WCRecv, QPN: qp.qpn}
		ok = qp.rcq.pushLocked(&wc) && ok
	}
	qp.rcq.mu.Unlock()
	if n > 0 {
		qp.rcq.wake()
	}
	if !ok {
		qp.rcq.overflowed()
	}
	return n, verr
}

// validPrefix returns how many work requests at the start of wrs check
// passes, and the error of the first one it refuses (nil if none).
func validPrefix[T any](wrs []T, check func(*T) error) (int, error) {
	for i := range wrs {
		if err := check(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// recvFast reports whether wr is the common receive, of one SGE, that
// checkRecv accepts (one SGE's length is at most MaxRecvLen): PostRecvs's
// check in line. false means checkRecv decides.
func (qp *QP) recvFast(wr *RecvWR) bool {
	return commonRecv(wr) && qp.cfg.MaxRecvSGE >= 1
}

// checkRecv validates a receive work request of a QP without an SRQ.
func (qp *QP) checkRecv(wr *RecvWR) error {
	if len(wr.SGL) > qp.cfg.MaxRecvSGE {
		return ErrTooManySGE
	}
	return checkRecvSGL(wr.SGL)
}

// takeRecv moves the next receive work request (from the SRQ, if any)
// into e (receive engine only). It reports false when none is posted.
//
// From the QP's own RQ it takes without the lock while the entries it
// saw under the lock last time last (rx.rqTaken < rx.rqAvail); the entries
// it took stay in the ring, counted against MaxRecvWR, until rqPop
// removes them, which it does before their completions are pushed
// (flushRecvs) and whenever it looks for more under the lock. So a
// receive leaves the RQ before its completion can be polled, as with a
// pop per take, and the RQ lock is taken once per batch of completions,
// not once per receive.
//
// +checklocksignore: entries below rx.rqAvail are the engine's (see rq).
func (qp *QP) takeRecv(e *rxRecv) bool {
	if qp.srq != nil {
		return qp.srq.take(e)
	}
	rx := &qp.rx
	if rx.rqTaken == rx.rqAvail {
		qp.rqPop()
		if rx.rqTaken == rx.rqAvail {
			return false
		}
	}
	if i := rx.rqTaken; !qp.rq.at(i).takeOne(e) {
		qp.rq.takeAt(e, i)
	}
	rx.rqTaken++
	return true
}

// rqPop removes from the RQ the receives the engine has taken, and looks
// at what has been posted since (rx.rqAvail). The receive engine calls
// it, or anyone once the engines have stopped.
func (qp *QP) rqPop() {
	rx := &qp.rx
	qp.rqMu.Lock()
	qp.rq.head = rx.rqTaken
	rx.rqAvail = qp.rq.tail
	qp.rqMu.Unlock()
	rx.rqPopped = rx.rqTaken
}

// pdForRecv is the PD receive buffers are checked against (the SRQ's, if
// any, as siw does).
func (qp *QP) pdForRecv() *PD {
	if qp.srq != nil {
		return qp.srq.pd
	}
	return qp.pd
}
