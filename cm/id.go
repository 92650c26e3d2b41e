package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// ConnParam is what Connect and Accept take (iw_cm_conn_param).
type ConnParam struct {
	// QP takes the connection over once the handshake is done. Required.
	QP QP
	// IRD is how many incoming RDMA Read Requests this side serves at
	// once, ORD how many it may have outstanding; negotiated with the peer
	// (RFC 6581), each at most the Config's MPA.MaxIRD/MaxORD. Values
	// above the QP's own limits (IRDORDLimiter, as rdmap.QPConfig.MaxIRD
	// and MaxORD) are lowered to them before anything is advertised.
	IRD, ORD int
	// PrivateData goes to the peer in the Request or Reply; copied before
	// Connect or Accept returns.
	PrivateData []byte
}

// ErrNoQP is returned by Connect and Accept without ConnParam.QP.
var ErrNoQP = errors.New("cm: connection parameters without a QP")

var idSeq atomic.Uint64

// ID is a connection-manager identifier (struct iw_cm_id): a listener, an
// inbound request, or a connection. Its methods are safe for concurrent
// use, and may be called from inside its handler, except Destroy (there,
// DestroyFrom or a non-nil return); see the package documentation for the
// event model.
//
// Lock order: an ID never holds its mu while taking another ID's mu, and
// never calls a handler, a QP method other than Start, or blocking I/O
// while holding it.
type ID struct {
	dev *rdmap.Device
	seq uint64

	mu   sync.Mutex
	cond sync.Cond // on mu; broadcast when running returns to nil

	handler Handler     // +checklocks:mu
	context any         // +checklocks:mu
	cfg     *Config     // resolved; shared with children (read-only); +checklocks:mu
	lg      *zap.Logger // +checklocks:mu
	state   State       // +checklocks:mu
	used    bool        // has left StateIdle once; +checklocks:mu

	// Event delivery (see drain).
	queue    []*Event // +checklocks:mu
	draining bool     // a drain goroutine runs; +checklocks:mu
	held     bool     // ConnectRequest not yet delivered; +checklocks:mu
	drop     bool     // no more events (destroyed, rejected, failed accept); +checklocks:mu
	// running is the event whose handler runs with this ID, or nil: the
	// token that tells DestroyFrom called from inside that handler from
	// any other Destroy. A ConnectRequest runs with two IDs, the listener
	// and the child. +checklocks:mu
	running *Event

	laddr, raddr net.Addr    // +checklocks:mu
	params       *mpa.Params // +checklocks:mu

	// StateListen.
	ln       net.Listener       // +checklocks:mu
	lnCtx    context.Context    // cancelled by Destroy
	lnCancel context.CancelFunc // +checklocks:mu
	lnWG     sync.WaitGroup     // the accept loop and its handshakes
	backlog  int                // +checklocks:mu
	pending  atomic.Int32       // children in StateConnRecv

	// StateConnRecv (a child).
	parent      *ID            // the listener; immutable
	resp        *mpa.Responder // +checklocks:mu
	conn        net.Conn       // +checklocks:mu
	answering   bool           // Accept's I/O in progress; +checklocks:mu
	answerDone  chan struct{}  // closed when it ends; +checklocks:mu
	leftPending bool           // parent.pending decremented; +checklocks:mu

	// StateConnSent.
	connCancel context.CancelFunc // +checklocks:mu
	connDone   chan struct{}      // closed when the connect goroutine ends; +checklocks:mu

	// StateEstablished, StateClosing.
	qp        QP            // +checklocks:mu
	watchDone chan struct{} // closed when the QP watcher ends; +checklocks:mu
}

// NewID returns a new ID in StateIdle with the zero Config
// (iw_create_cm_id). dev is the device whose QPs the ID's connections use;
// handler receives its events.
func NewID(dev *rdmap.Device, handler Handler) *ID {
	id := &ID{dev: dev, seq: idSeq.Add(1), handler: handler}
	id.cond.L = &id.mu
	cfg, _ := (*Config)(nil).resolve()
	id.setConfigLocked(&cfg)
	return id
}

// newChild makes the ID of an inbound request. It inherits the listener's
// handler, context and Config, as iw_cm's cm_conn_req_handler does.
// Called with l.mu held.
func (l *ID) newChildLocked(conn net.Conn, resp *mpa.Responder) *ID {
	c := &ID{
		dev:     l.dev,
		seq:     idSeq.Add(1),
		handler: l.handler,
		context: l.context,
		cfg:     l.cfg,
		state:   StateConnRecv,
		used:    true,
		held:    true,
		parent:  l,
		resp:    resp,
		conn:    conn,
		laddr:   conn.LocalAddr(),
		raddr:   conn.RemoteAddr(),
	}
	c.cond.L = &c.mu
	c.lg = l.cfg.Logger.Named("cm").With(zap.Uint64(keyCMID, c.seq), zap.Uint64(keyListener, l.seq),
		zap.Stringer(keyRemote, c.raddr))
	return c
}

func (id *ID) setConfigLocked(cfg *Config) {
	id.cfg = cfg
	id.lg = cfg.Logger.Named("cm").With(zap.Uint64(keyCMID, id.seq))
}

// SetConfig replaces the ID's Config (nil means the zero Config). It is
// allowed only in StateIdle before the ID is used; a listener's requests
// inherit its Config.
func (id *ID) SetConfig(cfg *Config) error {
	c, err := cfg.resolve()
	if err != nil {
		return err
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if err := id.checkFreshLocked("set config"); err != nil {
		return err
	}
	id.setConfigLocked(&c)
	return nil
}

// Config returns a copy of the ID's resolved Config.
func (id *ID) Config() *Config {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.cfg.Clone()
}

// SetContext stores a value for the ID's user (iw_cm_id.context);
// a listener's requests inherit it.
func (id *ID) SetContext(v any) {
	id.mu.Lock()
	id.context = v
	id.mu.Unlock()
}

// Context returns the value stored with SetContext.
func (id *ID) Context() any {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.context
}

// Device returns the device the ID was created with.
func (id *ID) Device() *rdmap.Device { return id.dev }

// State returns the ID's current state.
func (id *ID) State() State {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state
}

// LocalAddr returns the listening address (StateListen) or the
// connection's local address, once known; nil before.
func (id *ID) LocalAddr() net.Addr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.laddr
}

// RemoteAddr returns the connection's remote address, once known.
func (id *ID) RemoteAddr() net.Addr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.raddr
}

// Params returns a copy of what the handshake settled, once established;
// nil before.
func (id *ID) Params() *mpa.Params {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.params == nil {
		return nil
	}
	p := *id.params
	return &p
}

// String identifies the ID in logs ("cm_id 7 ESTABLISHED").
func (id *ID) String() string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return fmt.Sprintf("cm_id %d %v", id.seq, id.state)
}

// setStateLocked moves the ID to state to, checking that the transition
// is one iwcm.c makes. An illegal transition is a bug in this package: it
// panics under the race detector and returns an error otherwise.
func (id *ID) setStateLocked(to State) error {
	if !id.state.canGo(to) {
		err := fmt.Errorf("cm: illegal state transition %v -> %v", id.state, to)
		if raceEnabled {
			panic(err)
		}
		id.lg.Error("illegal state transition", zap.Stringer(keyState, id.state), zap.Stringer(keyTo, to))
		return err
	}
	id.state = to
	if to != StateIdle {
		id.used = true
	}
	return nil
}

// checkStateLocked returns a *StateError unless the ID is in want.
func (id *ID) checkStateLocked(op string, want State) error {
	if id.state != want {
		return &StateError{Op: op, State: id.state}
	}
	return nil
}

// checkFreshLocked returns a *StateError unless the ID is in StateIdle and
// has never left it: IDs are single-use, so that Close really is the last
// event an ID sees.
func (id *ID) checkFreshLocked(op string) error {
	if id.state != StateIdle {
		return &StateError{Op: op, State: id.state}
	}
	if id.used {
		return &StateError{Op: op, State: id.state, Reason: "ID already used; create a new one"}
	}
	return nil
}

// enqueueLocked queues ev for delivery unless the ID drops its events.
func (id *ID) enqueueLocked(ev *Event) {
	if id.drop {
		return
	}
	id.queue = append(id.queue, ev)
	id.kickLocked()
}

// kickLocked starts the drain goroutine when there is something to
// deliver and nothing holds delivery back.
func (id *ID) kickLocked() {
	if id.draining || id.held || id.drop || len(id.queue) == 0 {
		return
	}
	id.draining = true
	go id.drain()
}

// drain is the ID's event goroutine: it delivers queued events one at a
// time, in order, and exits when the queue is empty (the next event starts
// a new one). ConnectRequest events are queued on the listener and
// delivered here with the child ID.
func (id *ID) drain() {
	for {
		id.mu.Lock()
		if id.drop || id.held || len(id.queue) == 0 {
			id.draining = false
			id.mu.Unlock()
			return
		}
		ev := id.queue[0]
		id.queue[0] = nil
		id.queue = id.queue[1:]
		h := id.handler
		id.running = ev
		id.mu.Unlock()

		if ev.Type == EventConnectRequest {
			id.deliverRequest(h, ev)
			id.endDelivery()
			continue
		}
		err := h(id, ev)
		lg := id.endDelivery()
		if err != nil {
			handlerDestroys(lg, ev.Type, err)
			id.destroy(nil)
		}
	}
}

// endDelivery marks the end of the handler call that runs with id, wakes
// the Destroy calls waiting for it, and returns id's logger.
func (id *ID) endDelivery() *zap.Logger {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.running = nil
	id.cond.Broadcast()
	return id.lg
}

// handlerDestroys logs that a handler's return value destroys its ID:
// quietly for ErrDestroy, as a failure for any other error.
func handlerDestroys(lg *zap.Logger, t EventType, err error) {
	if errors.Is(err, ErrDestroy) {
		lg.Debug("handler returned ErrDestroy; destroying the ID", zap.Stringer(keyEvent, t))
		return
	}
	lg.Info("handler failed; destroying the ID", zap.Stringer(keyEvent, t), zap.Error(err))
}

// deliverRequest runs the handler for a ConnectRequest with the child ID
// (the listener's running is ev already), then lets the child's own events
// flow. A handler error destroys the child, which rejects it.
func (id *ID) deliverRequest(h Handler, ev *Event) {
	c := ev.child
	c.mu.Lock()
	if c.drop {
		c.mu.Unlock()
		return
	}
	c.running = ev
	c.mu.Unlock()

	err := h(c, ev)

	lg := c.endDelivery()
	if err != nil {
		handlerDestroys(lg, ev.Type, err)
		c.destroy(nil)
	}
	c.mu.Lock()
	c.held = false
	c.kickLocked()
	c.mu.Unlock()
}

// waitHandlerLocked waits until no handler runs with this ID, unless the
// one running is the one delivering in (the caller, inside it).
func (id *ID) waitHandlerLocked(in *Event) {
	for id.running != nil && id.running != in {
		id.cond.Wait()
	}
}

// Destroy ends the ID (iw_destroy_cm_id): a listener stops listening and
// rejects the requests it has not delivered; a request in StateConnRecv
// is rejected (without private data); a connect in progress is cancelled;
// a connection is closed abruptly (its QP's Disconnect(true)) and waited
// for. After Destroy returns no event reaches the ID, and no handler runs
// with it: Destroy waits for a handler running with the ID to return.
// Destroy is idempotent.
//
// Destroy must not be called from inside a handler running with the ID
// (the handler's own ID, or a ConnectRequest's listener): it would wait
// for itself. From there, call DestroyFrom with the handler's event, or,
// for the handler's own ID, return ErrDestroy (the iw_cm way: the ID is
// destroyed once the handler returns, before any other event of it).
func (id *ID) Destroy() { id.destroy(nil) }

// DestroyFrom is Destroy for a caller inside a handler: ev is the event
// that handler received. It does all that Destroy does, and it waits for
// any handler running with the ID except the one delivering ev, which is
// the caller. So a handler can destroy its own ID, and a ConnectRequest
// handler the child it got or the listener (ev.Listener), without a
// deadlock; once DestroyFrom returns no further event reaches that ID, and
// the handler's return value no longer matters for it.
//
// ev is a token for one handler call only: passed anywhere else (a stored
// event, after its handler has returned, or from another goroutine) it
// identifies no running handler and DestroyFrom is Destroy, which from
// inside another handler of the same ID waits for itself. Called from
// another goroutine while the handler that received ev is still running,
// DestroyFrom does not wait for that handler. A nil ev is Destroy.
func (id *ID) DestroyFrom(ev *Event) { id.destroy(ev) }

func (id *ID) destroy(in *Event) {
	id.mu.Lock()
	if id.state == StateDestroying {
		id.waitHandlerLocked(in)
		id.mu.Unlock()
		return
	}
	prev := id.state
	_ = id.setStateLocked(StateDestroying)
	id.drop = true
	queued := id.queue
	id.queue = nil
	ln, lnCancel := id.ln, id.lnCancel
	conn, resp, answering, answerDone := id.conn, id.resp, id.answering, id.answerDone
	connCancel, connDone := id.connCancel, id.connDone
	qp, watchDone := id.qp, id.watchDone
	timeout := id.cfg.RequestTimeout
	lg := id.lg
	if prev == StateConnRecv && !answering {
		id.leavePendingLocked()
	}
	id.mu.Unlock()
	lg.Debug("destroy", zap.Stringer(keyState, prev))

	switch prev {
	case StateListen:
		lnCancel()
		_ = ln.Close()
		id.lnWG.Wait()
	case StateConnRecv:
		if answering {
			// Accept's I/O is under way: cut it short and let Accept
			// clean up.
			_ = conn.Close()
			<-answerDone
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			_ = resp.Reject(ctx, nil)
			cancel()
			_ = conn.Close()
		}
	case StateConnSent:
		connCancel()
		<-connDone
	case StateEstablished, StateClosing:
		qp.Disconnect(true)
		<-watchDone
	}
	// Requests the listener never delivered are rejected; no handler has
	// run with them.
	for _, ev := range queued {
		if ev.child != nil {
			ev.child.destroy(nil)
		}
	}
	id.mu.Lock()
	id.waitHandlerLocked(in)
	id.mu.Unlock()
}

// leavePendingLocked takes a child out of its listener's backlog count,
// once.
func (id *ID) leavePendingLocked() {
	if id.parent != nil && !id.leftPending {
		id.leftPending = true
		id.parent.pending.Add(-1)
	}
}

// Disconnect closes an established connection (iw_cm_disconnect):
// gracefully (the QP sends what is outstanding, then FIN) or abruptly
// (RST). The ID gets Disconnect, then Close once the QP is done. In
// StateClosing an abrupt Disconnect turns a graceful close abrupt; in
// StateIdle and StateConnRecv it does nothing, as in iw_cm. It is refused
// in StateListen and StateConnSent (use Destroy) and after Destroy.
func (id *ID) Disconnect(abrupt bool) error {
	id.mu.Lock()
	switch id.state {
	case StateEstablished:
		if err := id.setStateLocked(StateClosing); err != nil {
			id.mu.Unlock()
			return err
		}
		id.enqueueLocked(&Event{Type: EventDisconnect, LocalAddr: id.laddr, RemoteAddr: id.raddr})
		qp, lg := id.qp, id.lg
		id.mu.Unlock()
		lg.Info("disconnect", zap.Bool(keyAbrupt, abrupt))
		qp.Disconnect(abrupt)
		return nil
	case StateClosing:
		qp := id.qp
		id.mu.Unlock()
		if abrupt {
			qp.Disconnect(true)
		}
		return nil
	case StateIdle, StateConnRecv:
		id.mu.Unlock()
		return nil
	}
	err := &StateError{Op: "disconnect", State: id.state}
	id.mu.Unlock()
	return err
}

// watch waits for the QP to be done and delivers Disconnect (unless a
// local Disconnect already did) and Close.
func (id *ID) watch(qp QP, done chan struct{}) {
	defer close(done)
	<-qp.Done()
	err := qp.Err()
	id.mu.Lock()
	defer id.mu.Unlock()
	switch id.state {
	case StateEstablished:
		_ = id.setStateLocked(StateClosing)
		id.enqueueLocked(&Event{Type: EventDisconnect, Err: err, LocalAddr: id.laddr, RemoteAddr: id.raddr})
		fallthrough
	case StateClosing:
		_ = id.setStateLocked(StateIdle)
		id.enqueueLocked(&Event{Type: EventClose, Err: err, LocalAddr: id.laddr, RemoteAddr: id.raddr})
		id.qp = nil
		id.lg.Info("closed", zap.Error(err))
	}
}

// establishLocked binds a started QP to the ID and starts its watcher.
func (id *ID) establishLocked(qp QP, p *mpa.Params) {
	_ = id.setStateLocked(StateEstablished)
	id.qp = qp
	id.params = p
	done := make(chan struct{})
	id.watchDone = done
	if n, ok := qp.(DoneNotifier); ok {
		n.AfterDone(func() { id.watch(qp, done) }) // Done is closed: watch does not wait
		return
	}
	go id.watch(qp, done)
}

// QPAttrMask says which QPAttr fields are set.
type QPAttrMask uint8

// QPAttr mask bits (IB_QP_STATE, IB_QP_ACCESS_FLAGS).
const (
	QPAttrState QPAttrMask = 1 << iota
	QPAttrAccessFlags
)

// QPAttr is what InitQPAttr says to apply to a QP before use.
type QPAttr struct {
	// Mask says which of the fields below apply.
	Mask QPAttrMask
	// State is the QP state to move to (QPAttrState).
	State rdmap.QPState
	// RemoteWrite and RemoteRead are the access flags.
	RemoteWrite, RemoteRead bool
}

// InitQPAttr returns the attributes to apply to a QP moving to state s
// (iw_cm_init_qp_attr): for verbs' INIT (rdmap.StateIdle, the state Linux
// siw maps IB_QPS_INIT to) and RTR (rdmap.StateRTR) the state and remote
// write and read access; for RTS (rdmap.StateRTS) nothing, since the
// connection manager moves the QP to RTS itself (QP.Start); any other
// state is an error. It is allowed in StateIdle, StateConnSent,
// StateConnRecv and StateEstablished.
func (id *ID) InitQPAttr(s rdmap.QPState) (QPAttr, error) {
	id.mu.Lock()
	st := id.state
	id.mu.Unlock()
	switch st {
	case StateIdle, StateConnSent, StateConnRecv, StateEstablished:
	default:
		return QPAttr{}, &StateError{Op: "init QP attributes", State: st}
	}
	switch s {
	case rdmap.StateIdle, rdmap.StateRTR:
		return QPAttr{Mask: QPAttrState | QPAttrAccessFlags, State: s, RemoteWrite: true, RemoteRead: true}, nil
	case rdmap.StateRTS:
		return QPAttr{}, nil
	}
	return QPAttr{}, fmt.Errorf("cm: init QP attributes: QP state %v", s)
}
