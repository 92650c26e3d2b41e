package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/daemon"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events collects what a server tells OnConn.
type events struct {
	mu   sync.Mutex
	list []ConnInfo
}

func (e *events) add(ci ConnInfo) {
	e.mu.Lock()
	e.list = append(e.list, ci)
	e.mu.Unlock()
}

func (e *events) ended() []ConnInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ConnInfo
	for _, ci := range e.list {
		if ci.Event == "ended" {
			out = append(out, ci)
		}
	}
	return out
}

// startServer runs a standalone responder on loopback until the test ends;
// the returned events are complete once the test's cleanups have run the
// server down (check them after stopping it with the returned func).
func startServer(t *testing.T, cfg *ServerConfig) (addr string, ev *events, stop func()) {
	t.Helper()
	ev = &events{}
	if cfg == nil {
		cfg = &ServerConfig{}
	}
	cfg.OnConn = ev.add
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := Listen(ctx, "127.0.0.1:0", dev, cfg)
	if err != nil {
		cancel()
		dev.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			dev.Close()
		})
	}
	t.Cleanup(stop)
	return srv.Addr().String(), ev, stop
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// untilAllWorked returns a context for Run and an OnInterval that ends it
// at the first interval by which every stream has done an operation: the
// test stops on that event rather than after a wall-clock duration in
// which a starved stream of a busy machine may do nothing. inner, when
// set, sees each interval too.
func untilAllWorked(t *testing.T, inner func(*Interval)) (context.Context, func(*Interval)) {
	ctx, cancel := context.WithCancel(testCtx(t))
	t.Cleanup(cancel)
	var ops []uint64
	return ctx, func(iv *Interval) {
		if inner != nil {
			inner(iv)
		}
		if ops == nil {
			ops = make([]uint64, len(iv.Streams))
		}
		all := true
		for i, s := range iv.Streams {
			ops[i] += s.Ops
			all = all && ops[i] > 0
		}
		if all {
			cancel()
		}
	}
}

// TestRun runs every op with and without CRC, two streams until each has
// done an operation, and checks that the responder counted what the client
// did.
func TestRun(t *testing.T) {
	for _, op := range []Op{OpWrite, OpRead, OpSend, OpPingPong} {
		for _, v := range []struct{ crc, sendGoroutine bool }{{false, false}, {true, false}, {false, true}} {
			crc := v.crc
			if v.sendGoroutine && op != OpWrite && op != OpSend {
				continue // the option is a Write's or a Send's
			}
			name := fmt.Sprintf("%v/crc=%v", op, crc)
			if v.sendGoroutine {
				name += "/send-goroutine"
			}
			t.Run(name, func(t *testing.T) {
				addr, ev, stop := startServer(t, nil)
				var mu sync.Mutex
				var infos []StreamInfo
				var ivs int
				ctx, onInterval := untilAllWorked(t, func(*Interval) { ivs++ })
				o := &Options{Op: op, Size: 16 << 10, Depth: 8, Parallel: 2, CRC: crc, SendGoroutine: v.sendGoroutine,
					Duration: time.Hour, Interval: 50 * time.Millisecond,
					OnConnect:  func(si StreamInfo) { mu.Lock(); infos = append(infos, si); mu.Unlock() },
					OnInterval: onInterval}
				if op == OpPingPong {
					o.Size, o.Depth = 0, 0 // the defaults
				}
				res, err := Run(ctx, addr, o)
				if err != nil {
					t.Fatal(err)
				}
				stop()
				checkResult(t, res, op, 2)
				if len(res.Intervals) != ivs || ivs == 0 {
					t.Errorf("%d intervals, %d reported", len(res.Intervals), ivs)
				}
				if len(infos) != 2 || infos[0].ID != 1 || infos[1].ID != 2 {
					t.Fatalf("OnConnect: %+v", infos)
				}
				for _, si := range infos {
					if si.CRC != crc || si.Local == "" || si.Remote != addr {
						t.Errorf("stream %+v, want crc %v to %s", si, crc, addr)
					}
				}
				// The responder's own counts, as siw perf -s prints them.
				ended := ev.ended()
				if len(ended) != 2 {
					t.Fatalf("server events %+v", ev.list)
				}
				var ops, bytes uint64
				for _, ci := range ended {
					if ci.Err != nil || ci.Params.Op != op || ci.CRC != crc {
						t.Errorf("server: %+v", ci)
					}
					ops, bytes = ops+ci.Ops, bytes+ci.Bytes
				}
				if bytes != res.Sum.Bytes || (op != OpWrite && ops != res.Sum.Ops) {
					t.Errorf("server counted %d ops %d bytes, client %d ops %d bytes", ops, bytes, res.Sum.Ops, res.Sum.Bytes)
				}
			})
		}
	}
}

func checkResult(t *testing.T, res *Result, op Op, streams int) {
	t.Helper()
	if len(res.Streams) != streams {
		t.Fatalf("%d streams", len(res.Streams))
	}
	var sb, so uint64
	for _, s := range res.Streams {
		if s.Error != "" || s.Ops == 0 || s.Seconds <= 0 || s.BitsPerSecond <= 0 {
			t.Errorf("stream %+v", s)
		}
		want := uint64(16 << 10)
		if op == OpPingPong {
			want = DefaultPingPongSize
		}
		if s.Bytes != s.Ops*want {
			t.Errorf("stream %d: %d bytes in %d ops", s.ID, s.Bytes, s.Ops)
		}
		// The responder confirmed the counts (Run fails otherwise);
		// reads have nothing to confirm with, and check the pattern.
		switch {
		case op == OpRead && s.Peer != nil:
			t.Errorf("read: peer counts %+v", s.Peer)
		case op == OpWrite && (s.Peer == nil || s.Peer.Bytes == nil || *s.Peer.Bytes != s.Bytes):
			t.Errorf("write: peer counts %+v", s.Peer)
		case (op == OpSend || op == OpPingPong) && (s.Peer == nil || s.Peer.Ops == nil || *s.Peer.Ops != s.Ops):
			t.Errorf("%v: peer counts %+v", op, s.Peer)
		}
		if (op == OpPingPong) != (s.Latency != nil) {
			t.Errorf("latency %+v", s.Latency)
		}
		if l := s.Latency; l != nil && (l.Samples != s.Ops || l.MeanUS <= 0 || l.P50US <= 0 || l.P99US < l.P50US) {
			t.Errorf("latency %+v", l)
		}
		sb, so = sb+s.Bytes, so+s.Ops
	}
	if res.Sum.Bytes != sb || res.Sum.Ops != so {
		t.Errorf("sum %+v, streams %d bytes %d ops", res.Sum, sb, so)
	}
	// The intervals add up to the totals.
	var ib uint64
	for _, iv := range res.Intervals {
		if len(iv.Streams) != streams || iv.Sum.End < iv.Sum.Start {
			t.Fatalf("interval %+v", iv)
		}
		ib += iv.Sum.Bytes
	}
	if ib > res.Sum.Bytes || ib == 0 {
		t.Errorf("intervals hold %d bytes of %d", ib, res.Sum.Bytes)
	}
}

// TestRunTCP runs the raw TCP baseline against its sink.
func TestRunTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeTCP(ctx, ln, &ServerConfig{OnConn: ev.add}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for _, op := range []Op{OpWrite, OpRead, OpSend, OpPingPong} {
		t.Run(op.String(), func(t *testing.T) {
			ctx, onInterval := untilAllWorked(t, nil)
			o := &Options{Op: op, Size: 16 << 10, Parallel: 2, Duration: time.Hour, Interval: 40 * time.Millisecond, OnInterval: onInterval}
			if op == OpPingPong {
				o.Size = 0
			}
			res, err := RunTCP(ctx, ln.Addr().String(), o)
			if err != nil {
				t.Fatal(err)
			}
			if res.Transport != "tcp" {
				t.Errorf("transport %q", res.Transport)
			}
			for _, s := range res.Streams {
				if op != OpRead && (s.Peer == nil || *s.Peer.Bytes != s.Bytes) {
					t.Errorf("peer counts %+v, client %d bytes", s.Peer, s.Bytes)
				}
			}
			checkResultTCP(t, res, op)
		})
	}
	// A request the sink refuses.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "gosiw-perf/1 op=fly size=1\n")
	buf := make([]byte, 300)
	n, _ := c.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), `gosiw-perf/1 error: unknown op "fly"`) {
		t.Errorf("sink answered %q", buf[:n])
	}
}

func checkResultTCP(t *testing.T, res *Result, op Op) {
	t.Helper()
	for _, s := range res.Streams {
		if s.Error != "" || s.Ops == 0 || s.BitsPerSecond <= 0 {
			t.Errorf("stream %+v", s)
		}
		if (op == OpPingPong) != (s.Latency != nil) {
			t.Errorf("latency %+v", s.Latency)
		}
	}
	if len(res.Intervals) == 0 {
		t.Error("no intervals")
	}
}

// dialRaw connects with hand-made Request private data and returns the
// connection's QP resources; the caller closes them.
func dialRaw(t *testing.T, addr string, pd []byte) (*cm.Conn, error) {
	t.Helper()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	cq, _ := dev.CreateCQ(16)
	qp, err := dev.AllocPD().CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); cq.Close() })
	d := cm.Dialer{Config: &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}}
	return d.Dial(testCtx(t), addr, dev, cm.ConnParam{QP: qp, IRD: 1, ORD: 1, PrivateData: pd})
}

// TestReject checks that a refused request's reason reaches the client.
func TestReject(t *testing.T) {
	addr, ev, stop := startServer(t, nil)
	for pd, want := range map[string]string{
		"gosiw-perf/1 op=teleport size=64":      `gosiw-perf/1 error: unknown op "teleport" (want write, read, send or pingpong)`,
		"gosiw-perf/1 op=write size=1000000000": "gosiw-perf/1 error: size 1000000000 out of range [1, 67108864]",
	} {
		_, err := dialRaw(t, addr, []byte(pd))
		var rej *mpa.RejectedError
		if !errors.As(err, &rej) {
			t.Fatalf("%q: %v, want a reject", pd, err)
		}
		if string(rej.Reply.PrivateData) != want {
			t.Errorf("%q: reason %q, want %q", pd, rej.Reply.PrivateData, want)
		}
	}
	stop()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.list) != 2 || ev.list[0].Event != "refused" || !strings.Contains(ev.list[0].Reason, "error:") {
		t.Errorf("server events %+v", ev.list)
	}
}

// TestService runs the test through Service as siwd calls it (a daemon
// Server with Perf set), and checks the metrics it keeps.
func TestService(t *testing.T) {
	ctx := testCtx(t)
	ln, m, stop := startSiwd(t, &daemon.Config{})
	var sent, wrote, read uint64
	for _, op := range []Op{OpSend, OpWrite, OpPingPong} {
		res, err := Run(ctx, ln.Addr().String(), &Options{Op: op, Size: 4096, Duration: 100 * time.Millisecond, Interval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Intervals) != 0 {
			t.Errorf("intervals with Interval < 0: %+v", res.Intervals)
		}
		switch op {
		case OpSend:
			sent = res.Sum.Bytes
			// The responder meters once per poll (not per message):
			// the counters are whole once the test is over, not only
			// once siwd has stopped.
			if got := counter(t, m, "siwd_bytes_total", "rx", "send"); got != float64(sent) {
				t.Errorf("rx send bytes %v when the send test ended, want %d", got, sent)
			}
		case OpWrite:
			wrote = res.Sum.Bytes
		case OpPingPong:
			read = res.Sum.Ops
		}
	}
	stop()
	if got := counter(t, m, "siwd_handshakes_total", "", ""); got != 3 {
		t.Errorf("%v handshakes counted, want 3", got)
	}
	if got := counter(t, m, "siwd_bytes_total", "rx", "send"); got != float64(sent+read*4096) {
		t.Errorf("rx send bytes %v, want %d", got, sent+read*4096)
	}
	if got := counter(t, m, "siwd_bytes_total", "rx", "rdma_write"); got != float64(wrote) {
		t.Errorf("rx rdma_write bytes %v, want %d", got, wrote)
	}
	if got := counter(t, m, "siwd_operations_total", "tx", "send"); got != float64(read) {
		t.Errorf("tx send ops %v, want %d", got, read)
	}
	mfs, _ := m.Registry.Gather()
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "siwd_operation_latency_seconds" {
			for _, mm := range mf.Metric {
				found = found || (label(mm, "op") == "perf_pingpong" && mm.GetHistogram().GetSampleCount() == read)
			}
		}
	}
	if !found {
		t.Errorf("no perf_pingpong latency with %d samples", read)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func counter(t *testing.T, m *daemon.Metrics, name, dir, opcode string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.Metric {
			if label(mm, "dir") == dir && label(mm, "opcode") == opcode {
				return mm.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestRunStopsWithContext ends a long test early through ctx: the streams
// still finish and the result is complete.
func TestRunStopsWithContext(t *testing.T) {
	addr, _, _ := startServer(t, nil)
	ctx, onInterval := untilAllWorked(t, nil)
	res, err := Run(ctx, addr, &Options{Op: OpWrite, Duration: time.Hour, Interval: 20 * time.Millisecond,
		OnInterval: onInterval})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Streams[0]; s.Ops == 0 || s.Peer == nil || s.Seconds > 60 {
		t.Errorf("stream %+v", s)
	}
}

// TestServerShutdown stops the responder in the middle of a test: the
// connection is disconnected and the client is told so.
func TestServerShutdown(t *testing.T) {
	addr, _, stop := startServer(t, nil)
	res, err := Run(testCtx(t), addr, &Options{Op: OpSend, Duration: time.Hour, Interval: 20 * time.Millisecond,
		OnInterval: func(*Interval) { go stop() }})
	if err == nil || !strings.Contains(err.Error(), "stream 1") {
		t.Fatalf("err %v", err)
	}
	t.Log(err)
	if res == nil || res.Streams[0].Error == "" {
		t.Fatalf("result %+v", res)
	}
}

// TestBadData sends Sends that are not what the protocol says (a wrong
// sequence number): the responder answers "fin" with an error.
func TestBadData(t *testing.T) {
	addr, _, _ := startServer(t, nil)
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	o := &Options{Op: OpSend, Size: 64, Depth: 2}
	c, _ := o.resolve()
	st, err := dialRDMA(testCtx(t), addr, &c, dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*rdmaStream)
	defer s.close()
	for seq := range uint64(2) {
		if err := s.post(seq+7, 1); err != nil { // the responder expects 0, 1
			t.Fatal(err)
		}
	}
	var stats streamStats
	stats.ops.Store(2)
	stats.bytes.Store(128)
	// Wait for the two Send completions before the fin.
	for got := 0; got < 2; {
		n, err := pollWait(testCtx(t), s.cq, s.wcs[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range s.wcs[:n] {
			if wc.Op == rdmap.WCSend {
				got++
			}
		}
	}
	_, err = s.finish(testCtx(t), &stats)
	var de *DataError
	if !errors.As(err, &de) || !de.Peer || !strings.Contains(de.Msg, "message 0 carries sequence number 7") {
		t.Fatalf("finish: %v", err)
	}
}

// TestTerminate: a responder that names a bad buffer makes the client's
// Writes fail with a Terminate, which Run reports with its codes.
func TestTerminate(t *testing.T) {
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	ctx := testCtx(t)
	ln, err := cm.Listen(ctx, "127.0.0.1:0", dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cq, _ := dev.CreateCQ(16)
	qp, _ := dev.AllocPD().CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	defer cq.Close()
	defer qp.Close()
	served := make(chan *cm.Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			served <- nil
			return
		}
		// An STag that was never registered.
		c, _ := req.Accept(cm.ConnParam{QP: qp, IRD: 1, ORD: 1,
			PrivateData: AppendReply(nil, &Reply{STag: 0x00abcd00, Len: 1 << 20, Recvs: 4})})
		served <- c
	}()
	_, err = Run(ctx, ln.Addr().String(), &Options{Op: OpWrite, Size: 4096, Duration: 5 * time.Second, Interval: -1})
	if c := <-served; c != nil {
		defer c.Close()
	}
	var te *rdmap.TerminateError
	if !errors.As(err, &te) || !te.Remote || te.Layer != wire.LayerDDP {
		t.Fatalf("err %v, want a remote DDP Terminate", err)
	}
	t.Log(err)
}

// TestDefaultDepth checks the depth a stream takes when none is given:
// about DefaultInFlight bytes of messages, within DefaultDepth and
// MaxDepth (a Write within MaxWriteDefault), and one for a pingpong.
func TestDefaultDepth(t *testing.T) {
	for _, c := range []struct {
		op         Op
		size, want int
	}{
		{OpSend, 64, MaxDepth}, {OpSend, 1 << 10, 1024}, {OpWrite, 64, MaxWriteDefault}, {OpWrite, 1 << 10, 1024}, {OpWrite, 8 << 10, 128}, {OpRead, 64, MaxReadDepth}, {OpRead, 16 << 10, 64},
		{OpWrite, 64 << 10, DefaultDepth}, {OpSend, 1 << 20, DefaultDepth}, {OpWrite, MaxSize, DefaultDepth},
		{OpPingPong, 64, 1}, {OpPingPong, 1 << 20, 1},
	} {
		if got := DefaultDepthFor(c.op, c.size); got != c.want {
			t.Errorf("DefaultDepthFor(%v, %d) = %d, want %d", c.op, c.size, got, c.want)
		}
		o := Options{Op: c.op, Size: c.size}
		r, err := o.resolve()
		if err != nil || r.Depth != c.want {
			t.Errorf("%v size %d resolves to depth %d (%v), want %d", c.op, c.size, r.Depth, err, c.want)
		}
	}
}

// TestSendReceiveWindow checks the receives a send test's responder keeps
// posted (its Reply's recvs): a window of small messages much deeper than
// twice the client's depth, up to maxRecvs.
func TestSendReceiveWindow(t *testing.T) {
	addr, _, _ := startServer(t, nil)
	for _, c := range []struct {
		size, depth, want int
	}{
		{64, 16, 4096},            // 1 MiB of 256-byte slots
		{64, MaxDepth, maxRecvs},  // twice the depth
		{4 << 10, 16, 256},        // 1 MiB of messages
		{64 << 10, 16, 32},        // twice the depth
		{64 << 10, 128, 256},      // twice the depth
		{64 << 10, MaxDepth, 256}, // maxRecvBytes of receives
	} {
		conn, err := dialRaw(t, addr, AppendRequest(nil, &Params{Op: OpSend, Size: c.size, Depth: c.depth}))
		if err != nil {
			t.Fatalf("size %d depth %d: %v", c.size, c.depth, err)
		}
		r, err := ParseReply(conn.PrivateData)
		conn.Close()
		if err != nil || r.Recvs != c.want {
			t.Errorf("size %d depth %d: reply %+v (%v), want %d receives", c.size, c.depth, r, err, c.want)
		}
	}
}

// TestPingPongSlots runs a pingpong for many more round trips than the
// responder has receives: with unsignaled echoes it must post each
// receive slot again once the next ping shows its echo has left, or the
// fifth ping finds no receive and the connection ends in a Terminate.
func TestPingPongSlots(t *testing.T) {
	addr, ev, stop := startServer(t, nil)
	const want = 100
	res := runUntil(t, addr, &Options{Op: OpPingPong}, want)
	stop()
	if res.Sum.Ops < want {
		t.Fatalf("%d round trips, want at least %d", res.Sum.Ops, want)
	}
	ended := ev.ended()
	if len(ended) != 1 || ended[0].Err != nil || ended[0].Ops != res.Sum.Ops {
		t.Errorf("server events %+v, client %d round trips", ended, res.Sum.Ops)
	}
}

// TestSendCreditsSmallWindow runs a send test over the responder's
// smallest receive window (4 MiB messages: 4 receives, credits returned
// by 2) for many times as many Sends as it has receives: the credits
// must keep coming back (a batch the responder holds back for good would
// stop the client after 3 Sends), and both ends must count every one.
func TestSendCreditsSmallWindow(t *testing.T) {
	const size = 4 << 20
	addr, ev, stop := startServer(t, nil)
	conn, err := dialRaw(t, addr, AppendRequest(nil, &Params{Op: OpSend, Size: size, Depth: 1}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseReply(conn.PrivateData)
	conn.Close()
	if err != nil || r.Recvs != 4 {
		t.Fatalf("reply %+v (%v): want the smallest window, 4 receives", r, err)
	}
	const want = 12 * 4
	res := runUntil(t, addr, &Options{Op: OpSend, Size: size, Depth: 1}, want)
	stop()
	if res.Sum.Ops < want {
		t.Fatalf("%d Sends, want at least %d", res.Sum.Ops, want)
	}
	// Connection 1 was the probe of the window; 2 is the test's.
	var got *ConnInfo
	for _, ci := range ev.ended() {
		if ci.ID == 2 {
			got = &ci
		}
	}
	if got == nil || got.Err != nil || got.Ops != res.Sum.Ops {
		t.Errorf("server events %+v, client %d Sends", ev.ended(), res.Sum.Ops)
	}
}

// runUntil runs o against addr until the intervals have counted at least
// want operations (o.Duration an hour, o.Interval 5ms, o.OnInterval
// cancelling the run then) and returns the result; an error fails t.
func runUntil(t *testing.T, addr string, o *Options, want uint64) *Result {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var ops uint64
	o.Duration, o.Interval = time.Hour, 5*time.Millisecond
	o.OnInterval = func(iv *Interval) {
		if ops += iv.Sum.Ops; ops >= want {
			cancel()
		}
	}
	res, err := Run(ctx, addr, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
