package rdmap

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

// sinkConn is a connection that swallows what is written and has nothing
// to read until it is closed: the send engine alone, without a peer.
type sinkConn struct {
	once   sync.Once
	closed chan struct{}
}

func newSinkConn() *sinkConn { return &sinkConn{closed: make(chan struct{})} }

func (c *sinkConn) Read([]byte) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}
func (c *sinkConn) Write(b []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
		return len(b), nil
	}
}
func (c *sinkConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *sinkConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *sinkConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *sinkConn) SetDeadline(time.Time) error      { return nil }
func (c *sinkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *sinkConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkTxList measures the send side of a 64-byte message stream on
// its own: PostSends of lists of 32 (the last signaled), the send engine
// framing them, and the completions, into a connection that discards
// the bytes (no peer, no TCP). cpu-ns/op is the process CPU per work
// request.
func BenchmarkTxList(b *testing.B) {
	for _, op := range []WROpcode{WRWrite, WRSend} {
		for _, crc := range []bool{false, true} {
			b.Run(fmt.Sprintf("%v/crc=%v/64", op, crc), func(b *testing.B) { benchTxList(b, op, crc) })
		}
	}
}

func benchTxList(b *testing.B, op WROpcode, crc bool) {
	const depth, k = 256, 32
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(1024)
	qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth})
	if err != nil {
		b.Fatal(err)
	}
	defer qp.Close()
	mr, _ := pd.RegisterMemory(make([]byte, 4096), AccessLocalWrite)
	defer mr.Deregister()
	if err := qp.Start(newSinkConn(), &mpa.Params{Initiator: true, IRD: 8, ORD: 8, CRC: crc}); err != nil {
		b.Fatal(err)
	}
	wrs := make([]SendWR, k)
	for i := range wrs {
		wrs[i] = SendWR{Op: op, SGL: []SGE{mr.SGE(64*i, 64)}, Remote: Remote{STag: 0x100}}
	}
	wrs[k-1].Signaled = true
	streamLists(b, qp, cq, wrs, depth, nil)
}

// streamLists posts wrs (a list whose last request is signaled) on qp
// again and again, at most window requests outstanding, and retires them
// by their completions on cq, until b.N are retired; it reports the
// process CPU per request (cpu-ns/op). With run, which runs the send
// engine on this goroutine, it calls run after posting, and never waits
// on cq; without, the send goroutine sends, and it waits on cq when it
// has nothing to reap.
func streamLists(b *testing.B, qp *QP, cq *CQ, wrs []SendWR, window int, run func()) {
	k := len(wrs)
	wcs := make([]WC, max(16, window/k))
	ctx := context.Background()
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testutil.CPUTime()
	posted, retired := 0, 0
	for retired < b.N {
		for posted < b.N && posted+k-retired <= window {
			if _, err := qp.PostSends(wrs); err != nil {
				b.Fatal(err)
			}
			posted += k
		}
		if run != nil {
			run()
		}
		n := cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != WCSuccess {
				b.Fatalf("completion %+v", wc)
			}
			retired += k
		}
		if n == 0 && run == nil {
			if err := cq.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(testutil.CPUTime()-cpu)/float64(retired), "cpu-ns/op")
}

// BenchmarkTxEngine measures the code of the send path alone, on one
// goroutine and without a scheduler in between: PostSends of a list of
// 32 64-byte requests (the last signaled), the send engine's batches run
// on the benchmark's goroutine (it holds the engine as a direct send
// does) into a connection that discards the bytes, and the Poll of the
// completion. The 64x32 variants post 32 such lists (1024 requests,
// test/bench's 64-byte stream outstanding) before the engine runs, so
// that a batch holds many lists, as in that stream. ns/op is the CPU of
// one work request through post, engine and completion.
func BenchmarkTxEngine(b *testing.B) {
	for _, op := range []WROpcode{WRWrite, WRSend} {
		for _, crc := range []bool{false, true} {
			b.Run(fmt.Sprintf("%v/crc=%v/64", op, crc), func(b *testing.B) { benchTxEngine(b, op, crc, 1) })
			b.Run(fmt.Sprintf("%v/crc=%v/64x32", op, crc), func(b *testing.B) { benchTxEngine(b, op, crc, 32) })
		}
	}
}

// postListQP returns a QP of its own device (not started, MaxSendWR
// depth) with a list of k one-SGE 64-byte requests of op to post, the
// last signaled, and its CQ.
func postListQP(b *testing.B, op WROpcode, k, depth int) (*QP, *CQ, []SendWR) {
	qp, cq, mr := engineQP(b, 1024, QPConfig{MaxSendWR: depth}, make([]byte, 64*k))
	wrs := make([]SendWR, k)
	for i := range wrs {
		wrs[i] = SendWR{Op: op, SGL: []SGE{mr.SGE(64*i, 64)}, Remote: Remote{STag: 0x100}}
	}
	wrs[k-1].Signaled = true
	return qp, cq, wrs
}

// benchTxEngine is BenchmarkTxEngine for lists lists of 32 per round.
func benchTxEngine(b *testing.B, op WROpcode, crc bool, lists int) {
	const k = 32
	qp, cq, wrs := postListQP(b, op, k, max(256, k*lists))
	conn := newSinkConn()
	if err := qp.Start(conn, &mpa.Params{Initiator: true, IRD: 8, ORD: 8, CRC: crc}); err != nil {
		b.Fatal(err)
	}
	// Take the engine once the send goroutine has parked.
	for !qp.tx.state.CompareAndSwap(txParked, txDirect) {
		runtime.Gosched()
	}
	defer qp.txDirectEnd(false)
	wcs := make([]WC, max(16, lists))
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += k * lists {
		for range lists {
			if _, err := qp.PostSends(wrs); err != nil {
				b.Fatal(err)
			}
		}
		runTx(b, qp, conn)
		if n := cq.Poll(wcs); n != lists || wcs[0].Status != WCSuccess || wcs[n-1].Status != WCSuccess {
			b.Fatalf("%d completions, first %+v", n, wcs[0])
		}
	}
}

// BenchmarkTxLoopback is the 64-byte Write stream of test/bench over a
// real loopback connection, to a peer QP whose receive goroutine places
// the Writes, with the sender's engine run two ways: on its send
// goroutine, as always (goroutine: the benchmark's goroutine posts lists
// of 32 within a window of 8192 and waits for completions), and on the
// benchmark's goroutine (inline: it holds the engine as a direct send
// does and, after posting the window, runs the batches itself, as a
// poster-driven send engine would). It measures what such a design
// could buy: inline spares the handoff of every SQ entry from the
// poster's CPU to the engine's, and their contention for sqMu.
// cpu-ns/op is the process CPU per work request, both ends included.
//
// On 2026-12-06 (2 vCPUs, -count 3 or 4 -benchtime 2s), with BBR (the
// machine's congestion control): goroutine 35.2-37.2 ns/op at 61.2-65.0
// cpu-ns/op, inline 32.9-37.4 ns/op at 52.7-57.1, about 12% less CPU at
// the same rate. With cubic: goroutine 31.8-35.0 ns/op at 60.4-62.2,
// inline 37.3-40.1 at 60.2-61.8. An execution trace of inline (BBR)
// shows why the rate does not follow the CPU: neither goroutine is
// busy all the time (the sender 86%, the receive goroutine 67%); the
// receiver finds the socket empty about 6700 times a second and the
// sender's writev waits for room about 100 times, some 1.3 ms each.
// Six later interleaved runs of -benchtime 1s (the two modes one after
// the other each time, same machine) put inline behind: 38.7-50.5 ns/op
// at 57.6-83.9 cpu-ns/op against 37.3-40.6 at 67.8-75.2; the rate is
// not better inline, and the CPU saving did not hold up.
//
// polltx is the same stream from a QP with QPConfig.PollTx (txpoll.go):
// the benchmark's Waits run the engine, with non-blocking writes and the
// send goroutine for what the socket does not take. Four interleaved
// runs of -benchtime 1s (2026-12-06): polltx 48.2-51.3 ns/op at
// 86.2-90.1 cpu-ns/op, goroutine 42.4-56.7 at 76.1-95.8, inline
// 47.3-56.5 at 78.8-94.8: in one process the three are the same within
// the noise (PollTx pays off between processes: see siw perf).
func BenchmarkTxLoopback(b *testing.B) {
	for _, mode := range []string{"goroutine", "inline", "polltx"} {
		b.Run(mode, func(b *testing.B) { benchTxLoopback(b, mode) })
	}
}

func benchTxLoopback(b *testing.B, mode string) {
	const window, k = 8192, 32
	ca, cb := tcpPair(b)
	qp, cq, src := engineQP(b, window/k+64, QPConfig{MaxSendWR: window, PollTx: mode == "polltx"}, make([]byte, 64))
	peer, _, dst := engineQP(b, 64, QPConfig{}, make([]byte, 64))
	if err := peer.Start(cb, &mpa.Params{IRD: 8, ORD: 8}); err != nil {
		ca.Close()
		b.Fatal(err)
	}
	if err := qp.Start(ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8}); err != nil {
		b.Fatal(err)
	}
	wrs := make([]SendWR, k)
	for i := range wrs {
		wrs[i] = SendWR{Op: WRWrite, SGL: []SGE{src.SGE(0, 64)}, Remote: Remote{STag: dst.STag()}}
	}
	wrs[k-1].Signaled = true
	var run func()
	if mode == "inline" {
		// Take the engine once the send goroutine has parked (it has
		// sent nothing yet: the peer's engine sends nothing before the
		// first FPDU, the first batch run writes).
		for !qp.tx.state.CompareAndSwap(txParked, txDirect) {
			runtime.Gosched()
		}
		defer qp.txDirectEnd(false)
		run = func() { runTx(b, qp, ca) }
	}
	streamLists(b, qp, cq, wrs, window, run)
}

// runTx runs the send engine of qp, which the caller holds (txDirect),
// on this goroutine: batches into conn until one does nothing.
func runTx(b *testing.B, qp *QP, conn net.Conn) {
	for {
		progressed, err := qp.txBatch(conn)
		if err != nil {
			b.Fatal(err)
		}
		if !progressed {
			return
		}
	}
}

// BenchmarkPostSends measures the poster's side alone: PostSends of a
// list of 32 64-byte Writes (the last signaled) to a QP that is not
// started, whose SQ the benchmark empties after each list (no engine
// takes them). ns/op is the CPU of posting one work request: the
// validation, the copy into the SQ, the lock and the doorbell shared by
// the list.
func BenchmarkPostSends(b *testing.B) {
	const k = 32
	qp, _, wrs := postListQP(b, WRWrite, k, 256)
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += k {
		if n, err := qp.PostSends(wrs); n != k || err != nil {
			b.Fatalf("PostSends posted %d: %v", n, err)
		}
		qp.sqMu.Lock()
		sqDropLocked(qp)
		qp.sqMu.Unlock()
	}
}
