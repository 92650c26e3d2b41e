package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// Connect starts a connection to the TCP address raddr (iw_cm_connect): it
// dials, sends the MPA Request (revision 2 enhanced by default; revision
// 1, CRC, markers and P2P/RTR offers per Config) with p's IRD, ORD and
// private data, and waits for the Reply within the Config's ReplyTimeout.
// The outcome comes as a ConnectReply event: StatusOK (the QP then owns
// the connection, and Established follows), or a failure status with the
// ID back in StateIdle. Connect returns at once; it is allowed only on a
// fresh ID in StateIdle, and checks p (QP present, IRD/ORD and private
// data within the limits) before anything is sent. IRD and ORD above the
// QP's own limits (IRDORDLimiter) are lowered to them, and the Reply's
// relaxed negotiation stays within them.
//
// In P2P mode the initiator's first FPDU is the negotiated RTR, which the
// QP sends (mpa.Params.P2P, RTR, FirstSendDelay): a zero-length RDMA Write
// or Read with STag 1, as Linux siw, or a zero-length Send.
func (id *ID) Connect(raddr string, p ConnParam) error {
	return id.connect(context.Background(), raddr, p)
}

func (id *ID) connect(ctx context.Context, raddr string, p ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if err := id.checkFreshLocked("connect"); err != nil {
		return err
	}
	if p.QP == nil {
		return ErrNoQP
	}
	cfg := id.cfg
	layout := wire.LayoutRFC
	if cfg.MPA.TerminateLayoutSiw {
		layout = wire.LayoutSiw
	}
	maxIRD, maxORD, ird, ord := qpLimits(p.QP, p.IRD, p.ORD)
	ini := &mpa.Initiator{
		Policy:      &cfg.MPA,
		IRD:         ird,
		ORD:         ord,
		MaxIRD:      maxIRD,
		MaxORD:      maxORD,
		PrivateData: bytes.Clone(p.PrivateData),
		Terminate: func(b []byte, code mpa.TermCode) []byte {
			return AppendLLPTerminate(b, code, layout)
		},
	}
	if _, err := ini.Request(); err != nil {
		return fmt.Errorf("cm: connect: %w", err)
	}
	if err := id.setStateLocked(StateConnSent); err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	id.connCancel, id.connDone = cancel, done
	id.lg = id.lg.With(zap.String(keyRemote, raddr))
	go id.runConnect(cctx, cancel, done, raddr, ini, p.QP, cfg, id.lg)
	return nil
}

// runConnect is the connect goroutine: dial, handshake, then bind the QP
// and queue the events (unless Destroy came first).
func (id *ID) runConnect(ctx context.Context, cancel context.CancelFunc, done chan struct{}, raddr string,
	ini *mpa.Initiator, qp QP, cfg *Config, lg *zap.Logger) {
	defer close(done)
	defer cancel()
	hctx, hcancel := context.WithTimeout(ctx, cfg.ReplyTimeout)
	defer hcancel()

	var d net.Dialer
	conn, err := d.DialContext(hctx, "tcp", raddr)
	if err != nil {
		status := StatusUnreachable
		if errors.Is(err, context.DeadlineExceeded) {
			status = StatusTimeout
		}
		id.connectFailed(&Event{Type: EventConnectReply, Status: status, Err: err}, nil, lg)
		return
	}
	lg.Debug("connected; MPA request sent", zap.Stringer(keyLocal, conn.LocalAddr()))
	res, err := ini.Handshake(hctx, conn)
	if err != nil {
		status, _ := classify(err)
		ev := &Event{Type: EventConnectReply, Status: status, Err: err,
			LocalAddr: conn.LocalAddr(), RemoteAddr: conn.RemoteAddr()}
		var rej *mpa.RejectedError
		var hs *mpa.HandshakeError
		switch {
		case errors.As(err, &rej):
			peer := rej.Reply
			ev.Peer = &peer
			ev.PrivateData = peer.PrivateData
		case errors.As(err, &hs) && hs.Frame != nil:
			peer := *hs.Frame
			ev.Peer = &peer
		}
		id.connectFailed(ev, conn, lg)
		return
	}

	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateConnSent {
		_ = conn.Close() // destroyed meanwhile
		return
	}
	laddr, raddrA := conn.LocalAddr(), conn.RemoteAddr()
	params := res.Params
	if err := qp.Start(conn, copyParams(&params)); err != nil {
		_ = conn.Close()
		_ = id.setStateLocked(StateIdle)
		id.enqueueLocked(&Event{Type: EventConnectReply, Status: StatusLocalError, Err: fmt.Errorf("cm: QP start: %w", err),
			LocalAddr: laddr, RemoteAddr: raddrA})
		lg.Info("connect failed: QP start", zap.Error(err))
		return
	}
	id.laddr, id.raddr = laddr, raddrA
	id.establishLocked(qp, copyParams(&params))
	peer := res.Reply
	id.enqueueLocked(&Event{Type: EventConnectReply, Status: StatusOK, LocalAddr: laddr, RemoteAddr: raddrA,
		PrivateData: peer.PrivateData, IRD: params.IRD, ORD: params.ORD, Peer: &peer, Params: copyParams(&params)})
	id.enqueueLocked(&Event{Type: EventEstablished, LocalAddr: laddr, RemoteAddr: raddrA,
		IRD: params.IRD, ORD: params.ORD, Params: copyParams(&params)})
	lg.Info("established", zap.Int(keyIRD, params.IRD), zap.Int(keyORD, params.ORD), zap.Bool(keyCRC, params.CRC),
		zap.Bool(keyP2P, params.P2P), zap.Stringer(keyRTR, params.RTR), zap.Uint8(keyRev, params.Rev))
}

// connectFailed closes conn and, unless Destroy came first, moves the ID
// back to StateIdle and queues the failed ConnectReply.
func (id *ID) connectFailed(ev *Event, conn net.Conn, lg *zap.Logger) {
	if conn != nil {
		_ = conn.Close()
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateConnSent {
		return
	}
	_ = id.setStateLocked(StateIdle)
	id.enqueueLocked(ev)
	lg.Info("connect failed", zap.Stringer(keyStatus, ev.Status), zap.Error(ev.Err))
}
