package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// ConnInfo tells ServerConfig.OnConn about a connection: when it is
// accepted or refused, and when it has ended.
type ConnInfo struct {
	// ID numbers the connections of one Server from 1 (gosiw and TCP
	// connections count apart); Service leaves it 0.
	ID int
	// Transport is "gosiw" or "tcp".
	Transport string
	// Event is "accepted", "refused" or "ended".
	Event  string
	Remote net.Addr
	Params Params
	// CRC: the connection uses MPA CRC32c.
	CRC bool
	// Reason is the refusal sent to the client ("refused").
	Reason string
	// Counts measured by the responder ("ended"): the bytes and messages
	// received (send, pingpong, write bytes; TCP), or, for read, what the
	// client reported; Seconds from accept to the client's "fin" (or to
	// the end of the connection).
	Ops, Bytes uint64
	Seconds    float64
	// Err is why the connection failed ("ended"); nil for a clean end.
	Err error
}

// Session is siwd's handle on the one Request it hands Service
// (internal/daemon's *Session implements it): the Request, and the only
// ways to answer it, Accept or Reject, at most once, from the goroutine
// that runs Service. MemoryLimit bounds the buffers of the connection;
// Reserve takes n bytes from siwd's memory budget for the life of the
// connection, or says why not.
type Session interface {
	Request() *cm.Request
	Accept(p cm.ConnParam) (*cm.Conn, error)
	Reject(kind, reason string)
	MemoryLimit() int64
	Reserve(n int64) error
}

// Metrics is where a responder counts what it serves (internal/daemon's
// *Metrics implements it). Each method returns a collector that may be
// used from any goroutine, for as long as the Metrics lives.
type Metrics interface {
	// OpCounters returns the counters of the operations and of the bytes
	// that go in direction dir ("rx" or "tx") with the RDMAP opcode
	// named opcode (wire.Opcode's String).
	OpCounters(dir, opcode string) (ops, bytes prometheus.Counter)
	// LatencyObserver returns the latency histogram of op
	// ("perf_pingpong": how long the responder takes to answer a ping,
	// from reaping its receive to posting the echo), in seconds.
	LatencyObserver(op string) prometheus.Observer
	// HandshakeCounter returns the counter of handshakes that ended with
	// result ("accepted", "failed") for reason ("" or "accept").
	HandshakeCounter(result, reason string) prometheus.Counter
}

// Service serves one perf Request that siwd has taken: it accepts it (or
// rejects it with a readable reason of at most MaxPrivateData bytes)
// through ss, which counts and logs the connection as siwd does every one,
// serves the test until the client disconnects or the connection ends,
// and returns. ctx being done disconnects the connection gracefully. m,
// when not nil, counts the operations and bytes served (dir/opcode) and
// the pingpong echo latency (op "perf_pingpong", from the ping's receive
// to the echo's post: the echo is unsignaled, so its completion is not
// seen); write and read are counted when the test ends.
func Service(ctx context.Context, ss Session, pd *rdmap.PD, m Metrics) error {
	ans := answer{accept: ss.Accept, reject: func(reason []byte) { ss.Reject("perf", string(reason)) },
		limit: ss.MemoryLimit(), reserve: ss.Reserve}
	_, err := serveConn(ctx, ss.Request(), ans, pd, m, 0, nil)
	return err
}

// answer is how serveConn answers its request: through siwd's Session
// (which counts and logs the connection) or, standalone, the request's
// own methods.
type answer struct {
	accept func(cm.ConnParam) (*cm.Conn, error)
	reject func(reason []byte)
	// limit bounds the buffers of the connection (MaxBuffer when 0);
	// reserve, when set, takes them from siwd's memory budget, or says
	// why not.
	limit   int64
	reserve func(n int64) error
}

// ServerConfig configures a standalone responder (Serve). The zero value
// is valid.
type ServerConfig struct {
	// CM configures the listener; nil means the zero cm.Config with
	// MPA.MaxPrivateData at mpa.SiwMaxPrivateData. The responder takes
	// CRC when the client asks for it (mpa.CRCOff) unless CM says more.
	CM *cm.Config
	// Metrics, when set, receive what Service counts.
	Metrics Metrics
	// OnConn, when set, is told about each connection. It is called from
	// the connections' goroutines, possibly concurrently.
	OnConn func(ConnInfo)
}

// Server is a standalone perf responder (what `siw perf -s` runs). Each
// connection is served on a goroutine of its own.
type Server struct {
	ln  *cm.Listener
	dev *rdmap.Device
	cfg ServerConfig
}

// Listen starts a responder listening on addr with dev; Serve serves it.
func Listen(ctx context.Context, addr string, dev *rdmap.Device, cfg *ServerConfig) (*Server, error) {
	s := &Server{dev: dev}
	if cfg != nil {
		s.cfg = *cfg
	}
	var cc cm.Config
	if s.cfg.CM != nil {
		cc = *s.cfg.CM.Clone()
	}
	if cc.MPA.MaxPrivateData == 0 {
		cc.MPA.MaxPrivateData = mpa.SiwMaxPrivateData
	}
	ln, err := cm.Listen(ctx, addr, dev, &cc)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	return s, nil
}

// Addr returns the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops listening; for a Server that will not Serve (Serve closes
// the listener when it returns).
func (s *Server) Close() error { return s.ln.Close() }

// Serve serves requests until ctx is done, then stops listening,
// disconnects the connections gracefully, waits for them and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.ln.Close()
	for id := 1; ; id++ {
		req, err := s.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ans := answer{accept: req.Accept, reject: func(reason []byte) { req.Reject(reason) }}
		if m := s.cfg.Metrics; m != nil {
			ans.accept = func(p cm.ConnParam) (*cm.Conn, error) {
				c, err := req.Accept(p)
				if err != nil {
					m.HandshakeCounter("failed", "accept").Inc()
					return nil, err
				}
				m.HandshakeCounter("accepted", "").Inc()
				return c, nil
			}
		}
		wg.Go(func() {
			info, err := serveConn(ctx, req, ans, s.dev.AllocPD(), s.cfg.Metrics, id, s.cfg.OnConn)
			if s.cfg.OnConn != nil && info.Event != "refused" {
				info.Event, info.Err = "ended", err
				s.cfg.OnConn(info)
			}
		})
	}
}

// Serve runs a standalone responder on addr until ctx is done.
func Serve(ctx context.Context, addr string, dev *rdmap.Device, cfg *ServerConfig) error {
	s, err := Listen(ctx, addr, dev, cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Receive IDs of the responder are slot numbers; Send IDs of echoes carry
// echoTag with the slot number, the others are control messages.
const (
	echoTag = 1 << 62
	ctrlID  = 1 << 63
)

// pollBatch is how many completions the responder takes per poll.
const pollBatch = 32

// responder is the state of one served connection, owned by the goroutine
// that runs serveConn.
type responder struct {
	p       Params
	qp      *rdmap.QP
	cq      *rdmap.CQ
	buf     []byte // write target, read source
	bufSTag rdmap.STag
	slots   []byte // receive buffers, recvs of slotLen
	slotMR  *rdmap.MR

	recvs, slotLen int
	batch          int // credits are returned in batches of batch
	credits        int // buffers reposted but not yet announced
	pat            []byte

	seq        uint64 // next data message expected
	ops, bytes uint64 // data messages received
	meteredOps uint64 // ops the meters have been given
	meteredB   uint64 // bytes the meters have been given
	ctrlBytes  uint64 // bytes of control messages received
	dataErr    error  // first bad data message
	fin        *counts
	finAt      time.Time
	echoing    int // the receive slot of the echo in flight, or -1
	wcs        [pollBatch]rdmap.WC
	reposts    []rdmap.RecvWR       // data receives to post again, as one list after a poll
	repostSGE  [pollBatch]rdmap.SGE // the SGLs of reposts
	ctrl       []byte
	m          meters
}

// meters are the daemon's counters for one connection (all nil without
// metrics).
type meters struct {
	rxOps, rxBytes, txOps, txBytes prometheus.Counter
	lat                            prometheus.Observer
}

func newMeters(m Metrics, op Op) meters {
	if m == nil {
		return meters{}
	}
	var rx, tx string
	switch op {
	case OpWrite:
		rx = wire.OpWrite.String()
	case OpRead:
		rx, tx = wire.OpReadRequest.String(), wire.OpReadResponse.String()
	case OpSend:
		rx = wire.OpSend.String()
	case OpPingPong:
		rx, tx = wire.OpSend.String(), wire.OpSend.String()
	}
	var ms meters
	ms.rxOps, ms.rxBytes = m.OpCounters("rx", rx)
	if tx != "" {
		ms.txOps, ms.txBytes = m.OpCounters("tx", tx)
	}
	if op == OpPingPong {
		ms.lat = m.LatencyObserver("perf_pingpong")
	}
	return ms
}

func add(c prometheus.Counter, v uint64) {
	if c != nil && v > 0 {
		c.Add(float64(v))
	}
}

// serveConn answers req and serves the connection. It returns what
// OnConn is told at the end.
func serveConn(ctx context.Context, req *cm.Request, ans answer, pd *rdmap.PD, m Metrics, id int, onConn func(ConnInfo)) (ConnInfo, error) {
	info := ConnInfo{ID: id, Transport: "gosiw", Remote: req.RemoteAddr}
	refuse := func(err error) (ConnInfo, error) {
		reason := RejectText(err)
		info.Event, info.Reason = "refused", string(reason)
		ans.reject(reason)
		if onConn != nil {
			onConn(info)
		}
		return info, fmt.Errorf("perf: refused %v: %w", req.RemoteAddr, err)
	}
	p, err := ParseRequest(req.PrivateData)
	if err != nil {
		return refuse(err)
	}
	info.Params = p
	r, release, err := newResponder(pd, p, ans)
	if err != nil {
		return refuse(fmt.Errorf("responder out of resources: %v", err))
	}
	defer release()
	reply := AppendReply(nil, &Reply{STag: r.stag(), Len: len(r.buf), Recvs: r.recvs})
	conn, err := ans.accept(cm.ConnParam{QP: r.qp, IRD: clampIRDORD(req.ORD), ORD: clampIRDORD(req.IRD), PrivateData: reply})
	if err != nil {
		return info, fmt.Errorf("perf: accept %v: %w", req.RemoteAddr, err)
	}
	defer conn.Close()
	start := time.Now()
	info.Event, info.CRC = "accepted", conn.Params.CRC
	if onConn != nil {
		onConn(info)
	}
	r.m = newMeters(m, p.Op)
	stop := context.AfterFunc(ctx, func() { conn.ID().Disconnect(false) })
	defer stop()
	// wctx ends the waits for completions once the connection is over
	// (the flushed receives end them first in practice).
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-conn.Done():
		case <-wctx.Done():
		}
		cancel()
	}()
	err = r.run(wctx)
	conn.Close()
	if err == nil {
		err = conn.Err()
	}
	r.account()
	info.Ops, info.Bytes = r.result()
	end := r.finAt
	if end.IsZero() {
		end = time.Now()
	}
	info.Seconds = end.Sub(start).Seconds()
	if err == nil && r.dataErr != nil {
		err = r.dataErr
	}
	return info, err
}

func clampIRDORD(n int) int { return min(max(n, 1), rdmap.MaxIRDORD) }

// A send test's responder keeps receives posted for at least recvWindow
// bytes of messages (and for twice the client's depth), at most maxRecvs
// of them (perftest's ib_send_bw keeps 512; a client may keep up to
// MaxDepth Sends outstanding). The client may run only
// as far ahead as the receives the responder has reposted and announced
// (credits), and the credits take a round trip to come back: a window of
// 2×16 small messages was the limit of a 64-byte test, not the QPs.
// maxRecvBytes bounds the receive buffers whatever the depth.
const (
	recvWindow   = 1 << 20
	maxRecvs     = 2 * MaxDepth
	maxRecvBytes = 16 << 20
)

// newResponder allocates the buffers, CQ and QP for p and posts the
// receives: at most ans.limit bytes of buffers (MaxBuffer when 0), taken
// from ans.reserve when set. release frees them (after the QP is closed).
func newResponder(pd *rdmap.PD, p Params, ans answer) (*responder, func(), error) {
	r := &responder{p: p, ctrl: make([]byte, 0, ctrlLen), echoing: -1, reposts: make([]rdmap.RecvWR, 0, pollBatch)}
	limit := MaxBuffer
	if ans.limit > 0 {
		limit = int(min(ans.limit, MaxBuffer))
	}
	bufLen := 0
	switch p.Op {
	case OpWrite, OpRead:
		bufLen = p.Size
		r.recvs, r.slotLen = 2, ctrlLen
	case OpSend:
		r.slotLen = max(p.Size, ctrlLen)
		r.recvs = min(max(2*p.Depth, recvWindow/r.slotLen, 4), maxRecvs, max(maxRecvBytes/r.slotLen, 4), limit/r.slotLen)
	case OpPingPong:
		r.slotLen = max(p.Size, ctrlLen)
		r.recvs = 4
	}
	need := bufLen + max(r.recvs, 2)*r.slotLen
	if r.recvs < 2 || need > limit {
		return nil, nil, fmt.Errorf("%d bytes of buffers over the limit of %d per connection", need, limit)
	}
	if ans.reserve != nil {
		if err := ans.reserve(int64(need)); err != nil {
			return nil, nil, err
		}
	}
	// Credits go back in batches of half the receives: every credit
	// message costs the responder a write (a direct send on its
	// goroutine) and the client a wake-up. A quarter
	// measured 8.9-12.4 Mops/s for siw perf send -l 64 against siw perf
	// -s, half 10.0-16.3 in five interleaved pairs (each pair faster).
	// recvs-1 >= ceil(recvs/2) for recvs >= 2: a client that has spent
	// its credits always leaves the responder a batch to announce.
	r.batch = (r.recvs + 1) / 2
	var cleanup []func() error
	release := func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	fail := func(err error) (*responder, func(), error) { release(); return nil, nil, err }
	mem, closeMem, err := allocMemory(pd.Device(), bufLen+r.recvs*r.slotLen)
	if err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, closeMem)
	r.buf, r.slots = mem[:bufLen:bufLen], mem[bufLen:]
	if bufLen > 0 {
		acc := rdmap.AccessLocalWrite | rdmap.AccessRemoteWrite
		if p.Op == OpRead {
			acc = rdmap.AccessRemoteRead
			fillPattern(r.buf)
		}
		mr, err := pd.RegisterMemory(r.buf, acc)
		if err != nil {
			return fail(err)
		}
		cleanup = append(cleanup, mr.Deregister)
		r.bufSTag = mr.STag()
	}
	if r.slotMR, err = pd.RegisterMemory(r.slots, rdmap.AccessLocalWrite); err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, r.slotMR.Deregister)
	if r.cq, err = pd.Device().CreateCQ(2*r.recvs + 16); err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, r.cq.Close)
	r.qp, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: r.cq, RecvCQ: r.cq, MaxSendWR: r.recvs + 8, MaxRecvWR: r.recvs,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: ctrlLen,
		// The goroutine that reaps the receives (and echoes) drives the
		// receive itself: no hand-off from a receive goroutine per batch
		// (a 64-byte send test between two processes went from 0.72 to
		// 0.83 M msgs/s in interleaved runs).
		PollRx: p.Op == OpPingPong || p.Op == OpSend,
		// The connection's buffers are its own, and the responder
		// writes none that a Write or Send may be landing in: with CRC
		// payloads go straight in, their CRC computed there.
		CRCInPlace: true})
	if err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, r.qp.Close)
	if p.Op == OpSend || p.Op == OpPingPong {
		r.pat = make([]byte, p.Size)
		fillPattern(r.pat)
	}
	for i := range r.recvs {
		if err := r.repost(i); err != nil {
			return fail(err)
		}
	}
	return r, release, nil
}

func (r *responder) stag() rdmap.STag { return r.bufSTag }

func (r *responder) repost(slot int) error {
	return r.qp.PostRecv(rdmap.RecvWR{ID: uint64(slot), SGL: []rdmap.SGE{r.slotMR.SGE(slot*r.slotLen, r.slotLen)}})
}

func (r *responder) slot(i int) []byte { return r.slots[i*r.slotLen : (i+1)*r.slotLen] }

// run handles completions until the connection is over.
func (r *responder) run(ctx context.Context) error {
	defer r.meter()
	for {
		n, err := pollWait(ctx, r.cq, r.wcs[:])
		if err != nil {
			if ctx.Err() != nil {
				return nil // the connection is over
			}
			return err
		}
		for _, wc := range r.wcs[:n] {
			done, err := r.handle(wc)
			if done || err != nil {
				return err
			}
		}
		r.meter()
		if err := r.flushReposts(); err != nil {
			return err
		}
	}
}

// meter gives the daemon's counters the data messages received since it
// last did: once per poll, not per message (two atomic additions per
// message, in a loop that takes some tens of nanoseconds per message).
func (r *responder) meter() {
	if r.m.rxOps == nil || r.ops == r.meteredOps {
		return
	}
	add(r.m.rxOps, r.ops-r.meteredOps)
	add(r.m.rxBytes, r.bytes-r.meteredB)
	r.meteredOps, r.meteredB = r.ops, r.bytes
}

// flushReposts posts the data receives handled since the last poll
// again, as one list, and then, when a batch of them is due, returns
// the credits: a credit is never announced before its receive is posted.
func (r *responder) flushReposts() error {
	if len(r.reposts) == 0 {
		return nil
	}
	n, err := r.qp.PostRecvs(r.reposts)
	r.reposts = r.reposts[:0]
	if err == nil && r.credits+n >= r.batch {
		r.ctrl = strconv.AppendInt(append(r.ctrl[:0], "credit "...), int64(r.credits+n), 10)
		r.credits = -n
		err = r.sendCtrl()
	}
	r.credits += n
	if errors.Is(err, rdmap.ErrQPState) {
		// The client is disconnecting (its FIN came during this poll):
		// the flushed completions that follow end the loop.
		return nil
	}
	return err
}

// handle handles one completion; done says the connection is over.
func (r *responder) handle(wc rdmap.WC) (done bool, err error) {
	if wc.Status != rdmap.WCSuccess {
		if wc.Status == rdmap.WCWRFlushErr {
			return true, nil
		}
		return true, fmt.Errorf("perf: %v completion: %v", wc.Op, wc.Status)
	}
	switch wc.Op {
	case rdmap.WCSend:
		return false, nil
	case rdmap.WCRecv:
	default:
		return true, fmt.Errorf("perf: unexpected %v completion", wc.Op)
	}
	slot := int(wc.ID)
	msg := r.slot(slot)[:wc.ByteLen]
	if wc.Flags&rdmap.WCSolicited != 0 {
		r.ctrlBytes += uint64(wc.ByteLen)
		if err := r.control(msg); err != nil {
			return true, err
		}
		return false, r.repost(slot)
	}
	if r.p.Op != OpSend && r.p.Op != OpPingPong {
		return true, fmt.Errorf("perf: a data Send in a %v test", r.p.Op)
	}
	if r.dataErr == nil {
		if len(msg) != r.p.Size {
			r.dataErr = fmt.Errorf("message %d is %d bytes, want %d", r.seq, len(msg), r.p.Size)
		} else {
			r.dataErr = checkMsg(msg, r.seq, r.pat)
		}
	}
	r.seq++
	r.ops++
	r.bytes += uint64(len(msg))
	if r.p.Op == OpPingPong {
		return false, r.echo(slot, msg)
	}
	i := len(r.reposts) // at most one per completion of the poll
	r.repostSGE[i] = r.slotMR.SGE(slot*r.slotLen, r.slotLen)
	r.reposts = append(r.reposts, rdmap.RecvWR{ID: uint64(slot), SGL: r.repostSGE[i : i+1]})
	return false, nil
}

// echo sends a ping back from its own receive slot. The echo is
// unsignaled: a completion would wake the responder a second time per
// round trip. The client sends its next ping only once it has the whole
// echo, so the next ping's arrival says the echo has left the slot, which
// is when the slot is posted again.
func (r *responder) echo(slot int, msg []byte) error {
	start := time.Now()
	if r.echoing >= 0 {
		if err := r.repost(r.echoing); err != nil {
			return err
		}
	}
	r.echoing = slot
	err := r.qp.PostSend(rdmap.SendWR{ID: echoTag | uint64(slot), Op: rdmap.WRSend,
		SGL: []rdmap.SGE{r.slotMR.SGE(slot*r.slotLen, len(msg))}})
	if r.m.txOps != nil {
		r.m.txOps.Inc()
		r.m.txBytes.Add(float64(len(msg)))
	}
	if r.m.lat != nil {
		r.m.lat.Observe(time.Since(start).Seconds())
	}
	return err
}

func (r *responder) sendCtrl() error {
	return r.qp.PostSend(rdmap.SendWR{ID: ctrlID, Op: rdmap.WRSend, InlineData: r.ctrl, Solicited: true, Signaled: true})
}

// control answers the client's "fin" with the responder's counts.
func (r *responder) control(msg []byte) error {
	verb, rest := parseCtrl(msg)
	if verb != "fin" || r.fin != nil {
		return fmt.Errorf("perf: unexpected control message %.40q", msg)
	}
	c, err := parseCounts(rest)
	if err != nil {
		return fmt.Errorf("perf: bad fin %.40q: %v", msg, err)
	}
	r.fin, r.finAt = &c, time.Now()
	r.meter() // the counters are whole once the client has the answer
	var mine counts
	switch r.p.Op {
	case OpWrite:
		mine.Bytes, mine.HasBytes = r.placed(), true
		if c.Ops > 0 && r.dataErr == nil {
			want := make([]byte, len(r.buf))
			fillPattern(want)
			for i := range r.buf {
				if r.buf[i] != want[i] {
					r.dataErr = fmt.Errorf("written data differs from the pattern at byte %d", i)
					break
				}
			}
		}
	case OpRead:
		// Reads are served by the QP alone: nothing to count here.
	case OpSend, OpPingPong:
		mine = counts{Ops: r.ops, Bytes: r.bytes, HasOps: true, HasBytes: true}
	}
	if r.dataErr != nil {
		r.ctrl = append(append(r.ctrl[:0], "error "...), r.dataErr.Error()...)
		r.ctrl = r.ctrl[:min(len(r.ctrl), ctrlLen)]
	} else {
		r.ctrl = appendCounts(r.ctrl[:0], "ok", mine)
	}
	return r.sendCtrl()
}

// placed returns the bytes RDMA Writes placed: everything placed less the
// control messages.
func (r *responder) placed() uint64 {
	st := r.qp.Stats()
	return st.RxPlacedDirect + st.RxPlacedCopied - r.ctrlBytes
}

// account adds what write and read tests did to the metrics at the end.
func (r *responder) account() {
	switch r.p.Op {
	case OpWrite:
		add(r.m.rxBytes, r.placed())
		if r.fin != nil {
			add(r.m.rxOps, r.fin.Ops)
		}
	case OpRead:
		if r.fin != nil {
			add(r.m.rxOps, r.fin.Ops)
			add(r.m.txOps, r.fin.Ops)
			add(r.m.txBytes, r.fin.Bytes)
		}
	}
}

// result returns the counts reported to OnConn.
func (r *responder) result() (ops, bytes uint64) {
	switch r.p.Op {
	case OpWrite:
		if r.fin != nil {
			ops = r.fin.Ops
		}
		return ops, r.placed()
	case OpRead:
		if r.fin != nil {
			return r.fin.Ops, r.fin.Bytes
		}
		return 0, 0
	}
	return r.ops, r.bytes
}

// allocMemory maps n bytes outside the Go heap, or allocates them in it
// where mapping is not supported.
func allocMemory(dev *rdmap.Device, n int) ([]byte, func() error, error) {
	if n == 0 {
		return nil, func() error { return nil }, nil
	}
	mem, err := dev.AllocMemory(n)
	if err == nil {
		return mem.Bytes()[:n:n], mem.Close, nil
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return make([]byte, n), func() error { return nil }, nil
	}
	return nil, nil, err
}
