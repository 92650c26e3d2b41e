package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/mpa"
)

// Listen makes the ID listen for connections on the TCP address addr
// ("127.0.0.1:7174"; port 0 picks one, see LocalAddr) (iw_cm_listen).
// Each inbound connection runs the responder's half of the MPA handshake
// within the Config's RequestTimeout; a valid Request makes a child ID in
// StateConnRecv and a ConnectRequest event for the handler. At most
// backlog requests wait for Accept or Reject (0 means DefaultBacklog);
// past that a request is rejected with an MPA Reply with R set. Listen is
// allowed only on a fresh ID in StateIdle.
func (id *ID) Listen(addr string, backlog int) error {
	return id.listen(context.Background(), addr, backlog)
}

func (id *ID) listen(ctx context.Context, addr string, backlog int) error {
	if backlog < 0 {
		return fmt.Errorf("cm: listen: negative backlog %d", backlog)
	}
	if backlog == 0 {
		backlog = DefaultBacklog
	}
	id.mu.Lock()
	if err := id.checkFreshLocked("listen"); err != nil {
		id.mu.Unlock()
		return err
	}
	id.used = true // claims the ID while the socket is set up
	id.mu.Unlock()

	lc := net.ListenConfig{KeepAliveConfig: id.cfg.KeepAlive}
	if id.cfg.NoKeepAlive {
		lc.KeepAlive = -1
	}
	ln, err := lc.Listen(ctx, "tcp", addr)

	id.mu.Lock()
	defer id.mu.Unlock()
	if err == nil && id.state != StateIdle {
		_ = ln.Close() // destroyed meanwhile
		err = &StateError{Op: "listen", State: id.state}
	}
	if err != nil {
		if id.state == StateIdle {
			id.used = false
		}
		return fmt.Errorf("cm: listen: %w", err)
	}
	if err := id.setStateLocked(StateListen); err != nil {
		_ = ln.Close()
		return err
	}
	id.ln = ln
	id.laddr = ln.Addr()
	id.backlog = backlog
	id.lnCtx, id.lnCancel = context.WithCancel(context.Background())
	id.lg = id.lg.With(zap.Stringer(keyLocal, id.laddr))
	id.lg.Info("listening", zap.Int(keyBacklog, backlog))
	id.lnWG.Add(1)
	go id.acceptLoop(id.lnCtx, ln, id.cfg, id.lg)
	return nil
}

// acceptLoop accepts TCP connections and runs a responder handshake for
// each: at most cfg.MaxHandshakes at once of the connections Admit lets in
// as any other, at most cfg.MaxUntrustedHandshakes of the untrusted ones
// and of those over the per-source bound (which never hold one of the
// former); see admit.
func (id *ID) acceptLoop(ctx context.Context, ln net.Listener, cfg *Config, lg *zap.Logger) {
	defer id.lnWG.Done()
	sem := make(chan struct{}, cfg.MaxHandshakes)
	untrusted := make(chan struct{}, cfg.MaxUntrustedHandshakes)
	sources := &sourceCount{max: cfg.MaxHandshakesPerSource, n: map[netip.Addr]int{}}
	var backoff time.Duration
	for {
		// A slot is taken before the accept, so that connections past
		// MaxHandshakes wait in the kernel's accept queue.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c, err := ln.Accept()
		if err != nil {
			<-sem
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off as
			// net/http's Server does, and carry on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			lg.Warn("accept failed; retrying", zap.Error(err), zap.Duration(keyBackoff, backoff))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		slot, src, counted, timeout, reason := admit(c, cfg, sem, untrusted, sources)
		if reason != "" {
			lg.Debug("inbound connection closed at accept", zap.Stringer(keyRemote, c.RemoteAddr()), zap.String(keyReason, reason))
			_ = c.Close()
			if cfg.OnRefused != nil {
				cfg.OnRefused(c.RemoteAddr(), reason)
			}
			continue
		}
		id.lnWG.Add(1)
		go func() {
			defer id.lnWG.Done()
			id.serveConn(ctx, c, cfg, lg, timeout, func() {
				if counted {
					sources.leave(src)
				}
				<-slot
			})
		}()
	}
}

// admit applies cfg.Admit and the per-source bound to a connection just
// accepted while holding a slot of sem. It returns the slot the handshake
// holds (sem, or untrusted, which gives back the slot of sem), the source
// and whether the handshake counts against it, and the Request timeout;
// or, with every slot given back, why the connection is closed at once.
//
//	Admit says     source under its bound      source at its bound
//	Close          closed ("admission")        closed ("admission")
//	(trusted)      a slot of sem               an untrusted slot, or
//	                                           closed ("source_limit")
//	Untrusted      an untrusted slot, or       closed ("source_limit")
//	               closed ("busy")
func admit(c net.Conn, cfg *Config, sem, untrusted chan struct{}, sources *sourceCount) (
	slot chan struct{}, src netip.Addr, counted bool, timeout time.Duration, reason string) {
	var remote netip.AddrPort
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		remote = ta.AddrPort()
		remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	}
	var adm Admission
	if cfg.Admit != nil {
		adm = cfg.Admit(remote)
	}
	timeout = cfg.RequestTimeout
	if adm.RequestTimeout > 0 {
		timeout = adm.RequestTimeout
	}
	src = remote.Addr()
	if adm.Close {
		<-sem
		return nil, src, false, 0, "admission"
	}
	counted = sources.enter(src)
	if counted && !adm.Untrusted {
		return sem, src, true, timeout, ""
	}
	// Untrusted, or a trusted source over its bound: never in sem.
	<-sem
	if !counted && adm.Untrusted {
		return nil, src, false, 0, "source_limit"
	}
	select {
	case untrusted <- struct{}{}:
		return untrusted, src, counted, timeout, ""
	default:
		if counted {
			sources.leave(src)
			return nil, src, false, 0, "busy"
		}
		return nil, src, false, 0, "source_limit"
	}
}

// sourceCount counts a listener's inbound handshakes in progress by source
// address, up to max each (0: no bound, nothing counted).
type sourceCount struct {
	max int
	mu  sync.Mutex
	n   map[netip.Addr]int
}

// enter counts a handshake from a, unless a already has max of them.
func (s *sourceCount) enter(a netip.Addr) bool {
	if s.max == 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[a] >= s.max {
		return false
	}
	s.n[a]++
	return true
}

// leave ends a handshake that enter counted.
func (s *sourceCount) leave(a netip.Addr) {
	if s.max == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[a]--; s.n[a] <= 0 {
		delete(s.n, a)
	}
}

// serveConn runs the responder's half up to a valid Request (within
// timeout), then makes the child ID and queues its ConnectRequest. It
// calls done, once, when the handshake stops counting against the
// listener's bounds: before the ConnectRequest is queued (so a ULP that
// has seen it finds the slot and the source's count given back), or
// when serveConn returns without one.
func (id *ID) serveConn(lctx context.Context, c net.Conn, cfg *Config, lg *zap.Logger, timeout time.Duration, done func()) {
	finished := false
	defer func() {
		if !finished {
			done()
		}
	}()
	ctx, cancel := context.WithTimeout(lctx, timeout)
	resp, err := mpa.ReadRequest(ctx, c, &cfg.MPA)
	cancel()
	if err != nil {
		// The peer got siw's answer (a reject, or nothing); nothing
		// reaches the ULP.
		var hs *mpa.HandshakeError
		answer := mpa.AnswerClose
		if errors.As(err, &hs) {
			answer = hs.Answer
		}
		lg.Debug("inbound handshake failed", zap.Stringer(keyRemote, c.RemoteAddr()),
			zap.Stringer(keyAnswer, answer), zap.Error(err))
		_ = c.Close()
		if cfg.OnRefused != nil {
			_, reason := classify(err)
			cfg.OnRefused(c.RemoteAddr(), reason)
		}
		return
	}
	req := resp.Request()

	id.mu.Lock()
	if id.state != StateListen {
		id.mu.Unlock()
		rejectAndClose(resp, c, cfg)
		return
	}
	if int(id.pending.Load()) >= id.backlog {
		backlog := id.backlog
		id.mu.Unlock()
		lg.Info("backlog full; request rejected", zap.Stringer(keyRemote, c.RemoteAddr()), zap.Int(keyBacklog, backlog))
		rejectAndClose(resp, c, cfg)
		if cfg.OnRefused != nil {
			cfg.OnRefused(c.RemoteAddr(), "backlog")
		}
		return
	}
	id.pending.Add(1)
	child := id.newChildLocked(c, resp)
	peer := req
	askedIRD, askedORD := req.AdvertisedIRDORD()
	ev := &Event{
		Type:        EventConnectRequest,
		Listener:    id,
		LocalAddr:   child.laddr,
		RemoteAddr:  child.raddr,
		PrivateData: req.PrivateData,
		IRD:         askedIRD,
		ORD:         askedORD,
		Peer:        &peer,
		child:       child,
	}
	finished = true
	done()
	id.enqueueLocked(ev)
	id.mu.Unlock()
	child.lg.Debug("connect request", zap.Uint8(keyRev, req.Rev), zap.Bool(keyEnhanced, req.Enhanced),
		zap.Int(keyIRD, ev.IRD), zap.Int(keyORD, ev.ORD), zap.Bool(keyCRC, req.CRC), zap.Bool(keyP2P, req.P2P),
		zap.Stringer(keyRTR, req.RTRs()), zap.Int(keyPDLen, len(req.PrivateData)))
}

func rejectAndClose(resp *mpa.Responder, c net.Conn, cfg *Config) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	_ = resp.Reject(ctx, nil)
	cancel()
	_ = c.Close()
}

// Accept accepts a request (iw_cm_accept): it sends the MPA Reply (the
// revision RFC 6581 requires, IRD/ORD negotiated with siw's relaxed rules
// within the Config's limits and the QP's own (IRDORDLimiter: p.IRD and
// p.ORD above them are lowered, and the IRD the Reply advertises never
// exceeds what the QP serves),
// P2P echoed, the RTR type chosen from the offer), starts p.QP on the
// connection, and queues Established (delivered after the handler
// returns, if Accept is called from inside it, else possibly before Accept
// returns). It is allowed only in StateConnRecv. If p is refused (no QP,
// IRD/ORD or private data over the limits) nothing is sent and the request
// may still be answered. If the Reply cannot be sent or the QP does not
// start, the connection is closed, the ID moves to StateIdle and gets no
// events (as iw_cm: "an error on accept precludes provider events").
func (id *ID) Accept(p ConnParam) error {
	id.mu.Lock()
	if err := id.checkStateLocked("accept", StateConnRecv); err != nil {
		id.mu.Unlock()
		return err
	}
	if id.answering {
		id.mu.Unlock()
		return &StateError{Op: "accept", State: StateConnRecv, Reason: "an answer is in progress"}
	}
	if p.QP == nil {
		id.mu.Unlock()
		return ErrNoQP
	}
	maxIRD, maxORD, ird, ord := qpLimits(p.QP, p.IRD, p.ORD)
	p.IRD, p.ORD = ird, ord
	id.resp.SetLimits(maxIRD, maxORD)
	if _, _, err := id.resp.Negotiate(p.IRD, p.ORD, p.PrivateData); err != nil {
		id.mu.Unlock()
		return fmt.Errorf("cm: accept: %w", err)
	}
	id.answering = true
	done := make(chan struct{})
	id.answerDone = done
	resp, conn, timeout := id.resp, id.conn, id.cfg.RequestTimeout
	id.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	params, err := resp.Accept(ctx, p.IRD, p.ORD, p.PrivateData)
	cancel()

	id.mu.Lock()
	defer id.mu.Unlock()
	defer close(done)
	id.answering = false
	id.leavePendingLocked()
	if id.state != StateConnRecv {
		_ = conn.Close()
		return &StateError{Op: "accept", State: id.state, Reason: "destroyed during accept"}
	}
	if err == nil {
		if err = p.QP.Start(conn, params); err != nil {
			err = fmt.Errorf("QP start: %w", err)
		}
	}
	if err != nil {
		_ = id.setStateLocked(StateIdle)
		id.drop = true
		_ = conn.Close()
		id.lg.Info("accept failed", zap.Error(err))
		return fmt.Errorf("cm: accept: %w", err)
	}
	id.conn, id.resp = nil, nil
	id.establishLocked(p.QP, params)
	ev := &Event{Type: EventEstablished, LocalAddr: id.laddr, RemoteAddr: id.raddr,
		IRD: params.IRD, ORD: params.ORD, Params: copyParams(params)}
	id.enqueueLocked(ev)
	id.lg.Info("established", zap.Int(keyIRD, params.IRD), zap.Int(keyORD, params.ORD), zap.Bool(keyCRC, params.CRC),
		zap.Bool(keyP2P, params.P2P), zap.Stringer(keyRTR, params.RTR), zap.Uint8(keyRev, params.Rev))
	return nil
}

// Reject refuses a request (iw_cm_reject): it sends an MPA Reply with R
// set carrying privateData (plus the RFC 6581 block when the Request was
// enhanced), then closes the connection. It is allowed only in
// StateConnRecv. Once Reject returns no event is delivered to the ID, and
// privateData may be reused. Private data over the limit is refused with
// nothing sent. The ID stays in StateIdle; Destroy it when done.
func (id *ID) Reject(privateData []byte) error {
	id.mu.Lock()
	if err := id.checkStateLocked("reject", StateConnRecv); err != nil {
		id.mu.Unlock()
		return err
	}
	if id.answering {
		id.mu.Unlock()
		return &StateError{Op: "reject", State: StateConnRecv, Reason: "an answer is in progress"}
	}
	if err := id.resp.CheckReject(privateData); err != nil {
		id.mu.Unlock()
		return fmt.Errorf("cm: reject: %w", err)
	}
	// As iw_cm_reject: the state is IDLE before the provider is told, so
	// nothing that happens next reaches the ULP.
	_ = id.setStateLocked(StateIdle)
	id.drop = true
	id.queue = nil
	id.leavePendingLocked()
	resp, conn, timeout, lg := id.resp, id.conn, id.cfg.RequestTimeout, id.lg
	id.conn, id.resp = nil, nil
	id.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := resp.Reject(ctx, privateData)
	cancel()
	_ = conn.Close()
	lg.Info("rejected", zap.Int(keyPDLen, len(privateData)), zap.Error(err))
	if err != nil {
		return fmt.Errorf("cm: reject: %w", err)
	}
	return nil
}

func copyParams(p *mpa.Params) *mpa.Params {
	q := *p
	return &q
}
