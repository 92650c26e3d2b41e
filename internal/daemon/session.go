package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// Session is one request a service answers, as siwd tracks it. A service
// answers its request only through the Session (Accept or Reject, at most
// once), never through the cm.Request itself, so that every connection is
// counted and logged the same way whatever the service: one INFO line when
// it is refused, or one when it opens and one when it closes (with its
// outcome and byte counts); the handshake, connection, QP, CQ and
// Terminate metrics. A Session belongs to the goroutine that serves its
// request; it ends when the service returns.
type Session struct {
	s       *Server
	req     *cm.Request
	service string
	lg      *zap.Logger

	start    time.Time
	reserved int64 // bytes of the memory budget this session holds
	conn     *cm.Conn
	qp       *rdmap.QP
	answered bool
	release  func() // gives back what the session holds, when it ends
	idle     *time.Timer
	idled    atomic.Bool // the idle limit disconnected the connection
}

// Request returns the request the session answers. Answer it through
// Accept or Reject, not through its own methods.
func (ss *Session) Request() *cm.Request { return ss.req }

// MemoryLimit returns the most memory one connection may Reserve in all
// (Config.MemoryPerConn).
func (ss *Session) MemoryLimit() int64 { return ss.s.memPerConn }

// Reserve takes n bytes of siwd's memory budget for this connection, for
// buffers the service maps for it, until the session ends (when the
// service has returned and freed them). It takes nothing and fails, with
// an error whose text is a readable reject reason (use it in Reject), when
// n would take the connection past Config.MemoryPerConn or siwd's
// connections together past Config.MemoryBudget.
func (ss *Session) Reserve(n int64) error {
	s := ss.s
	if n < 0 || ss.reserved+n > s.memPerConn {
		return fmt.Errorf("gosiw siwd: %d bytes of buffers asked; the limit per connection is %d", ss.reserved+n, s.memPerConn)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.memUsed+n > s.memBudget {
		return fmt.Errorf("gosiw siwd: %d bytes of buffers asked; %d of the server's budget of %d are free now",
			n, s.memBudget-s.memUsed, s.memBudget)
	}
	s.memUsed += n
	ss.reserved += n
	s.m.Memory.Set(float64(s.memUsed))
	return nil
}

// Reject refuses the request with a readable reason (at most
// MaxReasonLen bytes; longer is cut) as MPA reject private data. kind is
// the reason label of siwd_handshakes_total{result="rejected"}.
func (ss *Session) Reject(kind, reason string) {
	if ss.answered {
		return
	}
	ss.answered = true
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	ss.s.m.Handshakes.WithLabelValues("rejected", kind).Inc()
	ss.lg.Info("refused", zap.String("why", kind), zap.String("reason", reason))
	_ = ss.req.Reject([]byte(reason))
}

// Accept accepts the request with p (cm.Request.Accept); p.QP must be an
// *rdmap.QP. A failed accept is counted (siwd_handshakes_total{result=
// "failed",reason="accept"}) and logged; on success the connection is
// tracked from now until the service returns: counted in the gauges,
// disconnected on shutdown, its QP's statistics and error read when it
// ends. A failed accept that sent nothing (parameters refused) is
// answered with a reject. The service closes the connection and the QP as before; the QP
// must stay readable (not garbage, Stats and Err callable) until the
// service returns.
func (ss *Session) Accept(p cm.ConnParam) (*cm.Conn, error) {
	if ss.answered {
		return nil, errors.New("siwd: session: the request is answered already")
	}
	qp, _ := p.QP.(*rdmap.QP)
	var conn *cm.Conn
	err := errors.New("siwd: session: accept without an rdmap QP")
	if qp != nil {
		conn, err = ss.req.Accept(p)
	}
	if err != nil {
		ss.s.m.Handshakes.WithLabelValues("failed", "accept").Inc()
		ss.lg.Info("accept failed", zap.Error(err))
		if ss.req.ID().State() == cm.StateConnRecv {
			// Refused before anything was sent: the client gets a
			// reject rather than a wait.
			_ = ss.req.Reject([]byte("gosiw siwd: cannot accept the request"))
		}
		ss.answered = true
		return nil, err
	}
	ss.answered = true
	ss.conn, ss.qp, ss.start = conn, qp, time.Now()
	s := ss.s
	s.m.Handshakes.WithLabelValues("accepted", "").Inc()
	s.m.Connections.Inc()
	s.m.QPs.Inc()
	s.m.CQs.Inc()
	s.mu.Lock()
	s.conns[conn] = struct{}{}
	s.mu.Unlock()
	ss.lg = ss.lg.With(zap.Uint32("qpn", qp.QPN()))
	if d := s.cfg.IdleTimeout; d > 0 {
		ss.watchIdle(d)
	}
	ss.lg.Info("established", zap.Bool("crc", conn.Params.CRC), zap.Int("ird", conn.Params.IRD), zap.Int("ord", conn.Params.ORD))
	return conn, nil
}

// watchIdle disconnects the connection once it has carried no FPDU either
// way for d.
func (ss *Session) watchIdle(d time.Duration) {
	activity := func() uint64 { st := ss.qp.Stats(); return st.RxFPDUs + st.TxFPDUs }
	ss.idle = watchIdle(d, activity, func() {
		ss.idled.Store(true)
		ss.lg.Debug("idle: disconnecting", zap.Duration("idle_timeout", d))
		_ = ss.conn.ID().Disconnect(false)
	})
}

// watchIdle calls idle, once, when activity has not changed over a whole
// period d: it checks every d, so idle comes between d and 2d after the
// last change. Stop the returned timer to stop watching.
func watchIdle(d time.Duration, activity func() uint64, idle func()) *time.Timer {
	last := activity()
	var t *time.Timer
	set := make(chan struct{}) // t is set
	t = time.AfterFunc(d, func() {
		<-set
		if now := activity(); now != last {
			last = now
			t.Reset(d)
			return
		}
		idle()
	})
	close(set)
	return t
}

// end closes the session once its service has returned err.
func (ss *Session) end(err error) {
	if ss.release != nil {
		ss.release()
	}
	if ss.reserved > 0 {
		ss.s.mu.Lock()
		ss.s.memUsed -= ss.reserved
		ss.s.m.Memory.Set(float64(ss.s.memUsed))
		ss.s.mu.Unlock()
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if ss.conn == nil {
		if !ss.answered {
			// A service that returned without an answer: the request
			// is refused rather than left waiting.
			ss.Reject("internal", "gosiw siwd: the service could not answer")
		}
		if err != nil {
			ss.lg.Debug("service ended before a connection", zap.Error(err))
		}
		return
	}
	if ss.idle != nil {
		ss.idle.Stop()
	}
	s, qp := ss.s, ss.qp
	s.mu.Lock()
	delete(s.conns, ss.conn)
	s.mu.Unlock()
	s.m.Connections.Dec()
	s.m.QPs.Dec()
	s.m.CQs.Dec()
	st := qp.Stats()
	s.m.Terminates.WithLabelValues("sent", "", "", "").Add(float64(st.TerminatesSent))
	s.m.Terminates.WithLabelValues("received", "", "", "").Add(float64(st.TerminatesRecvd))
	outcome := "ok"
	cause := qp.Err()
	var te *rdmap.TerminateError
	if errors.As(cause, &te) {
		dir := "sent"
		if te.Remote {
			dir = "received"
		}
		s.m.Terminates.WithLabelValues(dir, te.Layer.String(), wire.ETypeName(te.Layer, te.EType),
			wire.CodeName(te.Layer, te.EType, te.Code)).Inc()
		outcome = "terminate_" + dir
	}
	if err != nil {
		outcome = "error"
	}
	if ss.idled.Load() {
		outcome = "idle"
		s.m.IdleDisconnects.Inc()
	}
	ss.lg.Info("closed", zap.String("outcome", outcome), zap.Duration("duration", time.Since(ss.start)),
		zap.Uint64("tx_bytes", st.TxBytes), zap.Uint64("rx_bytes", st.RxBytes),
		zap.NamedError("cause", cause), zap.Error(err))
}

// debugCore logs Info entries at Debug: the libraries' lifecycle lines
// (cm's listen/established/rejected, rdmap's) would repeat siwd's own one
// line per connection.
type debugCore struct{ zapcore.Core }

func demote(l zapcore.Level) zapcore.Level {
	if l == zapcore.InfoLevel {
		return zapcore.DebugLevel
	}
	return l
}

func (c debugCore) Enabled(l zapcore.Level) bool { return c.Core.Enabled(demote(l)) }

func (c debugCore) With(f []zapcore.Field) zapcore.Core { return debugCore{c.Core.With(f)} }

func (c debugCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	e.Level = demote(e.Level)
	return c.Core.Check(e, ce)
}

// quiet returns lg with its Info lines at Debug.
func quiet(lg *zap.Logger) *zap.Logger {
	return lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return debugCore{c} }))
}
