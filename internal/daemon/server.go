// Package daemon is siwd, the gosiw daemon, as a library: a software RNIC
// service on one TCP listener that serves Linux rping clients, gosiw perf
// clients, and clients of named exported memory regions, behind access
// rules, with Prometheus metrics. cmd/siwd is a thin main around it.
//
// Which service a connection wants is told by its MPA private data:
//
//	empty                  rping responder (rping sends no private data)
//	"gosiw-region/1 NAME"  exported region NAME (see proto.RegionReply)
//	"gosiw-perf/1 ..."     perf responder (see package perf)
//
// A refused client gets an MPA Reply with R set whose private data is a
// readable reason of at most 251 bytes (so Linux siw takes it).
//
// Admission comes before work: when TCP accepts a connection, its source
// address alone decides how its handshake runs (see cm.Admission). A
// source the access rules or the connection caps refuse gets
// Config.RefusedRequestTimeout to send its Request, in handshake slots
// apart from the allowed clients', so strangers never make an allowed
// client wait; each address has at most Config.MaxHandshakesPerClient
// handshakes in progress. Every service answers its request through a
// Session, the one code path that counts and logs connections and holds
// their share of the memory budget (Config.MemoryBudget, MemoryPerConn).
// Accepted connections have TCP keepalive on; Config.IdleTimeout
// disconnects those that carry nothing. A fault in a file-backed region
// (its file truncated by another process) fails the connections that
// touch it, not siwd (see rdmap.ErrMemoryFault).
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/internal/rping"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// PerfService serves one perf connection, answering ss's request through
// ss (Accept or Reject); package perf provides it (set by cmd/siwd to keep
// this package free of it; package perf takes ss and m as its Session and
// Metrics interfaces). ctx ends when siwd shuts down; m is never nil.
type PerfService func(ctx context.Context, ss *Session, pd *rdmap.PD, m *Metrics) error

// Server is a running siwd.
type Server struct {
	cfg  *Config
	lg   *zap.Logger
	dev  *rdmap.Device
	acl  *ACL
	m    *Metrics
	Perf PerfService

	regions map[string]*region
	nvme    *nvmeServer

	// stopping ends when shutdown starts: services that disconnect on
	// their own when their context ends (perf) get it.
	stopping context.Context
	stop     context.CancelFunc

	// memBudget and memPerConn are the memory budget (Config); memUsed
	// is what sessions hold of it (under mu).
	memBudget, memPerConn int64

	mu      sync.Mutex
	ln      *cm.Listener
	conns   map[*cm.Conn]struct{}
	memUsed int64
	wg      sync.WaitGroup
}

type region struct {
	Region
	mem   []byte
	close func() error
}

// New prepares a server: the device and the exported regions.
func New(cfg *Config, lg *zap.Logger, m *Metrics) (*Server, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics()
	}
	dev, err := rdmap.NewDevice(&rdmap.Config{Logger: quiet(lg), LockMemory: cfg.LockMemory})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, lg: lg, dev: dev, m: m, acl: NewACL(cfg.Allow, cfg.MaxConns, cfg.MaxConnsPerClient),
		regions: map[string]*region{}, conns: map[*cm.Conn]struct{}{}}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.memBudget, s.memPerConn = cfg.MemoryBudget, cfg.MemoryPerConn
	if s.memBudget == 0 {
		s.memBudget = DefaultMemoryBudget
	}
	if s.memPerConn == 0 {
		s.memPerConn = DefaultMemoryPerConn
	}
	s.memPerConn = min(s.memPerConn, s.memBudget)
	for _, r := range cfg.Regions {
		reg, err := s.mapRegion(r)
		if err != nil {
			s.closeRegions()
			dev.Close()
			return nil, err
		}
		s.regions[r.Name] = reg
	}
	return s, nil
}

func (s *Server) mapRegion(r Region) (*region, error) {
	if r.File == "" {
		mem, err := s.dev.AllocMemory(int(r.Size))
		if err != nil {
			return nil, fmt.Errorf("region %s: %w", r.Name, err)
		}
		return &region{Region: r, mem: mem.Bytes(), close: mem.Close}, nil
	}
	// A read-only region never changes its file: opened read-only,
	// mapped PROT_READ, and a file shorter than the region is refused
	// (mapping past its end would fault). A writable one is created or
	// grown to the region's size.
	writable := r.Access&proto.AccessWrite != 0
	var f *os.File
	var err error
	if writable {
		f, err = os.OpenFile(r.File, os.O_RDWR|os.O_CREATE, 0o600)
	} else {
		f, err = os.Open(r.File)
	}
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", r.Name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", r.Name, err)
	}
	if st.Size() < r.Size {
		if !writable {
			return nil, fmt.Errorf("region %s: file %s holds %d bytes, fewer than the region's %d (a read-only region never grows its file)",
				r.Name, r.File, st.Size(), r.Size)
		}
		if err := f.Truncate(r.Size); err != nil {
			return nil, fmt.Errorf("region %s: %w", r.Name, err)
		}
	}
	fm, err := mapFile(f, r.Size, writable)
	if err != nil {
		return nil, fmt.Errorf("region %s: map %s: %w", r.Name, r.File, err)
	}
	if s.cfg.LockMemory {
		if err := fm.Lock(); err != nil {
			_ = fm.Unmap()
			return nil, fmt.Errorf("region %s: lock_memory: %w (raise RLIMIT_MEMLOCK, LimitMEMLOCK in the unit)", r.Name, err)
		}
	}
	return &region{Region: r, mem: fm.Data, close: fm.Unmap}, nil
}

func (s *Server) closeRegions() {
	for _, r := range s.regions {
		r.close()
	}
}

// SetAllow replaces the access rules (SIGHUP).
func (s *Server) SetAllow(allow []netip.Prefix) { s.acl.SetAllow(allow) }

// Addr returns the listening address once Run has started listening.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Healthy reports whether the server is listening.
func (s *Server) Healthy() error {
	if s.Addr() == nil {
		return errors.New("not listening")
	}
	return nil
}

// Listen starts listening; Serve then serves.
func (s *Server) Listen(ctx context.Context) error {
	perClient := s.cfg.MaxHandshakesPerClient
	if perClient == 0 {
		perClient = DefaultMaxHandshakesPerClient
	}
	ln, err := cm.Listen(ctx, s.cfg.Listen, s.dev, &cm.Config{Logger: quiet(s.lg), MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData},
		Admit: s.admit, MaxHandshakesPerSource: perClient, MaxHandshakes: s.cfg.MaxHandshakes,
		KeepAlive: keepAlive(s.cfg.TCPKeepAlive), NoKeepAlive: s.cfg.TCPKeepAlive < 0,
		OnRefused: func(_ net.Addr, reason string) { s.m.Handshakes.WithLabelValues("failed", reason).Inc() }})
	if err != nil {
		return err
	}
	if err := s.listenNVMe(ctx); err != nil {
		ln.Close()
		return err
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.lg.Info("listening", zap.Stringer("addr", ln.Addr()))
	return nil
}

// keepAlive is the TCP keepalive of accepted connections for
// Config.TCPKeepAlive.
func keepAlive(d time.Duration) net.KeepAliveConfig {
	if d <= 0 {
		return net.KeepAliveConfig{}
	}
	return net.KeepAliveConfig{Enable: true, Idle: d, Interval: d, Count: 9}
}

// admit decides at TCP accept, by source address alone, how a connection's
// handshake is run: a source the rules refuse now gets a short deadline for
// its Request and a handshake slot apart from the allowed clients' (see
// cm.Admission); the rules are checked again, and counted, on the Request.
func (s *Server) admit(remote netip.AddrPort) cm.Admission {
	if s.acl.Check(remote.Addr()) == nil {
		s.m.Admissions.WithLabelValues("allowed").Inc()
		return cm.Admission{}
	}
	s.m.Admissions.WithLabelValues("refused").Inc()
	d := s.cfg.RefusedRequestTimeout
	if d == 0 {
		d = DefaultRefusedRequestTimeout
	}
	return cm.Admission{Untrusted: true, RequestTimeout: d}
}

// Serve accepts requests until ctx ends, then stops accepting, disconnects
// every connection gracefully (in-flight operations complete or are
// flushed) within the shutdown timeout, and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return errors.New("siwd: Serve before Listen")
	}
	// Services outlive ctx: on shutdown they end when their connection is
	// disconnected gracefully, so in-flight operations complete or flush.
	sctx := context.WithoutCancel(ctx)
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			break
		}
		// Answering a request writes to the peer: never on the accept
		// loop, so a client that does not read cannot stall the others.
		s.wg.Add(1)
		go func() {
			if !s.handle(sctx, req) {
				s.wg.Done()
			}
		}()
	}
	return s.shutdown()
}

func (s *Server) shutdown() error {
	s.lg.Info("shutting down: no new connections")
	s.ln.Close()
	s.stop()
	s.closeNVMe()
	s.mu.Lock()
	conns := make([]*cm.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.ID().Disconnect(false)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.lg.Warn("shutdown timeout: aborting the remaining connections", zap.Int("conns", len(conns)))
		for _, c := range conns {
			c.ID().Disconnect(true)
		}
		// Closing the device destroys every QP (perf's too), flushing
		// their work requests, so every service ends.
		s.dev.Close()
		<-done
	}
	s.dev.Close()
	s.closeRegions()
	s.lg.Info("stopped")
	return nil
}

// errDetached is what a service returns when it has handed its
// connection to a callback (serveRegion): the session ends, and the
// server's wait group is done, when that callback has run.
var errDetached = errors.New("siwd: service detached")

// handle serves one request. It reports true when the service detached
// (errDetached): then its callback calls ss.end and s.wg.Done.
func (s *Server) handle(ctx context.Context, req *cm.Request) bool {
	ss := &Session{s: s, req: req, lg: s.lg.With(zap.Stringer("remote", req.RemoteAddr))}
	ap, _ := netip.ParseAddrPort(req.RemoteAddr.String())
	release, refused := s.acl.Admit(ap.Addr())
	if refused != nil {
		ss.Reject(refused.Kind, refused.Reason)
		return false
	}
	ss.release = release
	pd := req.PrivateData
	var serve func() error
	switch {
	case len(pd) == 0:
		ss.service = "rping"
		serve = func() error { return s.serveRping(ctx, ss) }
	case bytes.HasPrefix(pd, []byte(proto.RegionPrefix)):
		ss.service = "region"
		serve = func() error { return s.serveRegion(ctx, ss, string(pd[len(proto.RegionPrefix):])) }
	case bytes.HasPrefix(pd, []byte(proto.PerfPrefix)) && s.Perf != nil:
		ss.service = "perf"
		serve = func() error { return s.Perf(s.stopping, ss, s.dev.AllocPD(), s.m) }
	default:
		ss.service = "unknown"
		serve = func() error {
			ss.Reject("unknown_service", "gosiw siwd: unknown service in private data")
			return nil
		}
	}
	ss.lg = ss.lg.With(zap.String("service", ss.service))
	err := serve()
	if err == errDetached {
		return true
	}
	ss.end(err)
	return false
}

func (s *Server) serveRping(ctx context.Context, ss *Session) error {
	req := ss.Request()
	// The endpoint's buffers: the ping it reads and the one it writes.
	if err := ss.Reserve(2 * rping.MaxSize); err != nil {
		ss.Reject("memory", err.Error())
		return err
	}
	e, err := rping.NewEndpoint(s.dev.AllocPD(), rping.MaxSize, false)
	if err != nil {
		ss.Reject("resources", "gosiw siwd: out of resources")
		return err
	}
	defer e.Close()
	if err := e.Arm(); err != nil {
		ss.Reject("resources", "gosiw siwd: out of resources")
		return err
	}
	conn, err := ss.Accept(cm.ConnParam{QP: e.QP, IRD: max(req.ORD, 1), ORD: max(req.IRD, 1)})
	if err != nil {
		return err
	}
	defer conn.Close()
	var last time.Time
	n, err := e.Server(ctx, func(i int, data []byte) {
		now := time.Now()
		if !last.IsZero() {
			s.m.OpLatency.WithLabelValues("rping").Observe(now.Sub(last).Seconds())
		}
		last = now
		s.m.Ops.WithLabelValues("rx", "send").Add(2)
		s.m.Ops.WithLabelValues("tx", "read_request").Inc()
		s.m.Ops.WithLabelValues("tx", "rdma_write").Inc()
		s.m.Ops.WithLabelValues("tx", "send").Add(2)
		s.m.Bytes.WithLabelValues("rx", "read_response").Add(float64(len(data) + 1))
		s.m.Bytes.WithLabelValues("tx", "rdma_write").Add(float64(len(data) + 1))
		s.m.Bytes.WithLabelValues("rx", "send").Add(2 * rping.MsgLen)
		s.m.Bytes.WithLabelValues("tx", "send").Add(2 * rping.MsgLen)
	})
	ss.lg.Debug("rping served", zap.Int("pings", n))
	return err
}

func (s *Server) serveRegion(ctx context.Context, ss *Session, name string) error {
	req := ss.Request()
	r := s.regions[name]
	if r == nil {
		ss.Reject("no_region", fmt.Sprintf("gosiw siwd: no region named %.64q", name))
		return nil
	}
	pd := s.dev.AllocPD()
	acc := rdmap.Access(0)
	if r.Access&proto.AccessRead != 0 {
		acc |= rdmap.AccessRemoteRead
	}
	if r.Access&proto.AccessWrite != 0 {
		acc |= rdmap.AccessRemoteWrite | rdmap.AccessLocalWrite
	}
	// What the service holds, released in reverse order when it ends.
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	mr, err := pd.RegisterMemory(r.mem, acc)
	if err != nil {
		ss.Reject("resources", "gosiw siwd: cannot register the region")
		return err
	}
	undo = append(undo, func() { mr.Deregister() })
	cq, err := s.dev.CreateCQ(16)
	if err != nil {
		ss.Reject("resources", "gosiw siwd: out of resources")
		cleanup()
		return err
	}
	undo = append(undo, func() { cq.Close() })
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
	if err != nil {
		ss.Reject("resources", "gosiw siwd: out of resources")
		cleanup()
		return err
	}
	undo = append(undo, func() { qp.Close() })
	conn, err := ss.Accept(cm.ConnParam{QP: qp, IRD: max(req.ORD, 1), ORD: max(req.IRD, 1),
		PrivateData: []byte(proto.RegionReply(mr.STag(), r.Size, r.Access))})
	if err != nil {
		cleanup()
		return err
	}
	// The peer moves the data; nothing here waits for the end (issue
	// 11: an idle connection costs no service goroutine). The session
	// ends once the connection has (ctx, a WithoutCancel context in
	// Serve, is honoured the same way if it can end).
	var once sync.Once
	finish := func() {
		once.Do(func() {
			_ = conn.Close()
			st := qp.Stats()
			s.m.Bytes.WithLabelValues("rx", "region").Add(float64(st.RxBytes))
			s.m.Bytes.WithLabelValues("tx", "region").Add(float64(st.TxBytes))
			cleanup()
			ss.end(nil)
			s.wg.Done()
		})
	}
	stop := context.AfterFunc(ctx, finish)
	conn.AfterDone(func() {
		stop()
		finish()
	})
	return errDetached
}
