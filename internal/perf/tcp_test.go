package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startTCPSink runs ServeTCP on loopback until the test ends.
func startTCPSink(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeTCP(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// TestTCPBaselineCounts: with messages that do not divide the bufio
// buffer (100 bytes), the batched writer puts every counted byte on the
// wire, in whole messages: the sink counts exactly what the client did.
func TestTCPBaselineCounts(t *testing.T) {
	addr := startTCPSink(t)
	for _, op := range []Op{OpWrite, OpSend} {
		for _, size := range []int{100, tcpBufSize + 1} {
			t.Run(fmt.Sprintf("%v/%d", op, size), func(t *testing.T) {
				ctx, onInterval := untilAllWorked(t, nil)
				o := &Options{Op: op, Size: size, Parallel: 2, Duration: time.Hour, Interval: 20 * time.Millisecond, OnInterval: onInterval}
				res, err := RunTCP(ctx, addr, o)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range res.Streams {
					if s.Peer == nil || *s.Peer.Bytes != s.Bytes || s.Bytes != s.Ops*uint64(size) || s.Ops == 0 {
						t.Errorf("stream %d: client %d ops %d bytes, sink %+v", s.ID, s.Ops, s.Bytes, s.Peer)
					}
				}
			})
		}
	}
}

// dialSink makes a baseline request by hand.
func dialSink(t *testing.T, addr string, p Params) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write(append(AppendRequest(nil, &p), '\n')); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != tcpReady+"\n" {
		t.Fatalf("sink answered %q, %v", line, err)
	}
	return c, br
}

// TestTCPBaselineReadMessages: the sink's batched writer keeps message
// boundaries: every 100-byte message the client reads is its sequence
// number and the pattern, also across the sink's buffer flushes.
func TestTCPBaselineReadMessages(t *testing.T) {
	const size = 100
	_, br := dialSink(t, startTCPSink(t), Params{Op: OpRead, Size: size, Depth: 1})
	want := make([]byte, size)
	fillPattern(want)
	got := make([]byte, size)
	for i := range 3 * tcpBufSize / size {
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		binary.BigEndian.PutUint64(want, uint64(i))
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d is %x, want %x", i, got, want)
		}
	}
}

// TestTCPBaselineEcho: the bare echo returns each message as it was
// sent, one at a time, and counts them.
func TestTCPBaselineEcho(t *testing.T) {
	const size, n = 64, 100
	c, br := dialSink(t, startTCPSink(t), Params{Op: OpPingPong, Size: size, Depth: 1})
	msg, echo := make([]byte, size), make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint64(msg, uint64(i))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(br, echo); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(echo, msg) {
			t.Fatalf("echo %d is %x, want %x", i, echo, msg)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	line, err := br.ReadString('\n')
	if want := fmt.Sprintf("ok ops=%d bytes=%d\n", n, n*size); err != nil || line != want {
		t.Errorf("sink counts %q, %v; want %q", line, err, want)
	}
}

// callConn records the reads and writes made on a TCP connection, in
// order: what the baseline asks of the socket, one call each.
type callConn struct {
	*net.TCPConn
	// onWrite, when set, is called before each write with its number
	// (from 1), on the writing goroutine.
	onWrite func(i int)
	mu      sync.Mutex
	calls   []call
	writes  int
}

// call is one Read (n bytes read, err) or Write (n bytes asked).
type call struct {
	write bool
	n     int
	err   error
}

func (c call) String() string {
	if c.write {
		return fmt.Sprintf("write %d", c.n)
	}
	if c.err != nil {
		return fmt.Sprintf("read %d (%v)", c.n, c.err)
	}
	return fmt.Sprintf("read %d", c.n)
}

func (c *callConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	c.mu.Lock()
	c.calls = append(c.calls, call{n: n, err: err})
	c.mu.Unlock()
	return n, err
}

// Write records the call before making it, so that the peer cannot see
// the bytes before the record exists.
func (c *callConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.calls = append(c.calls, call{write: true, n: len(b)})
	c.writes++
	i := c.writes
	c.mu.Unlock()
	if c.onWrite != nil {
		c.onWrite(i)
	}
	return c.TCPConn.Write(b)
}

func (c *callConn) taken() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.calls...)
}

// callSink runs ServeTCP on loopback, with every accepted connection a
// callConn, sent on the returned channel as it is accepted.
func callSink(t *testing.T) (string, <-chan *callConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *callConn, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeTCP(ctx, &callListener{Listener: ln, conns: conns}, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), conns
}

type callListener struct {
	net.Listener
	conns chan *callConn
}

func (l *callListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &callConn{TCPConn: c.(*net.TCPConn)}
	l.conns <- cc
	return cc, nil
}

// dialCalls connects a baseline stream of op and size-byte messages to
// the sink at addr and records its calls from then on.
func dialCalls(t *testing.T, ctx context.Context, addr string, op Op, size int) (*tcpStream, *callConn) {
	t.Helper()
	o, err := (&Options{Op: op, Size: size}).resolve()
	if err != nil {
		t.Fatal(err)
	}
	st, err := dialTCP(ctx, addr, &o, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*tcpStream)
	t.Cleanup(s.close)
	cc := &callConn{TCPConn: s.c.(*net.TCPConn)}
	s.c = cc
	return s, cc
}

// measureCalls runs s until its client has written n messages, then
// finishes it: the client's socket calls, the sink's counts and the
// client's statistics.
func measureCalls(t *testing.T, ctx context.Context, s *tcpStream, cc *callConn, n int) ([]call, *PeerCounts, *streamStats) {
	t.Helper()
	var stop atomic.Bool
	cc.onWrite = func(i int) {
		if i == n {
			stop.Store(true)
		}
	}
	st := &streamStats{}
	if err := s.measure(ctx, st, &stop); err != nil {
		t.Fatal(err)
	}
	client := cc.taken()
	pc, err := s.finish(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return client, pc, st
}

// afterAnswer is what the sink did once it had answered the request: its
// calls after its first write.
func afterAnswer(t *testing.T, calls []call) []call {
	t.Helper()
	for i, c := range calls {
		if c.write {
			return calls[i+1:]
		}
	}
	t.Fatalf("the sink never answered: %v", calls)
	return nil
}

func checkNoDelay(t *testing.T, who string, c *net.TCPConn) {
	t.Helper()
	if on, ok := noDelay(t, c); ok && !on {
		t.Errorf("%s: TCP_NODELAY is off: Nagle holds back each small message", who)
	}
}

// TestTCPBaselineEchoCalls: the ping-pong baseline is the bare echo loop
// of make bench, call for call: per message the client makes one write
// and one read of exactly the message, the sink one read and one write
// of it, with nothing buffered in between, and both sockets have Nagle
// off. A buffered writer left unflushed, a read that waits for more than
// one message, a second write per message or Nagle would each show here
// (and not as a slower figure a busy machine could explain away).
func TestTCPBaselineEchoCalls(t *testing.T) {
	const size, n = 64, 50
	ctx := testCtx(t)
	addr, conns := callSink(t)
	s, cc := dialCalls(t, ctx, addr, OpPingPong, size)
	sc := <-conns
	checkNoDelay(t, "client", cc.TCPConn)
	checkNoDelay(t, "sink", sc.TCPConn) // set before it answered
	client, pc, st := measureCalls(t, ctx, s, cc, n)
	if st.ops.Load() != n || pc.Ops == nil || *pc.Ops != n || st.hist.n != n {
		t.Errorf("client %d round trips (%d timed), sink %v; want %d", st.ops.Load(), st.hist.n, pc.Ops, n)
	}
	var want []call
	for range n {
		want = append(want, call{write: true, n: size}, call{n: size})
	}
	if got := fmt.Sprint(client); got != fmt.Sprint(want) {
		t.Errorf("client calls:\n%s\nwant\n%s", got, want)
	}
	sink := afterAnswer(t, sc.taken())
	want = want[:0]
	for range n {
		want = append(want, call{n: size}, call{write: true, n: size})
	}
	want = append(want, call{err: io.EOF}, call{write: true, n: len(fmt.Sprintf("ok ops=%d bytes=%d\n", n, n*size))})
	if got := fmt.Sprint(sink); got != fmt.Sprint(want) {
		t.Errorf("sink calls after its answer:\n%s\nwant\n%s", got, want)
	}
}

// TestTCPBaselineBatchedCalls: small messages go out as make bench's
// batched baseline sends them, a full bufio.Writer per write and one
// final flush, never a write per message, and what the client counts is
// what it wrote; the sink reads them through its bufio.Reader (no read
// of more than its size). From tcpBufSize up, every message is one write
// of its own, and the sink reads them into its bulk buffer.
func TestTCPBaselineBatchedCalls(t *testing.T) {
	for _, size := range []int{100, tcpBufSize} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			ctx := testCtx(t)
			addr, conns := callSink(t)
			s, cc := dialCalls(t, ctx, addr, OpWrite, size)
			client, pc, st := measureCalls(t, ctx, s, cc, 5)
			var sum uint64
			for i, c := range client {
				switch {
				case !c.write:
					t.Fatalf("client call %d is a %v", i, c)
				case size < tcpBufSize && i < len(client)-1 && c.n != tcpBufSize:
					t.Errorf("client write %d of %d is %d bytes, not a full %d-byte buffer", i, len(client), c.n, tcpBufSize)
				case size >= tcpBufSize && c.n != size:
					t.Errorf("client write %d is %d bytes, not one %d-byte message", i, c.n, size)
				}
				sum += uint64(c.n)
			}
			if len(client) < 5 || sum != st.bytes.Load() || st.bytes.Load() != st.ops.Load()*uint64(size) || *pc.Bytes != sum {
				t.Errorf("client: %d writes of %d bytes in all; counted %d messages, %d bytes; sink %d bytes",
					len(client), sum, st.ops.Load(), st.bytes.Load(), *pc.Bytes)
			}
			limit := tcpBufSize
			if size >= tcpBufSize {
				limit = tcpBulkRead
			}
			for i, c := range afterAnswer(t, (<-conns).taken()) {
				if c.n > limit {
					t.Errorf("sink read %d took %d bytes, more than its %d-byte buffer", i, c.n, limit)
				}
			}
		})
	}
}

// TestTCPBaselineSequence: the sink checks the sequence number of every
// batched message and says what was wrong once the client has sent all
// (it reads on to EOF), and the client takes that answer as bad data.
func TestTCPBaselineSequence(t *testing.T) {
	const size = 100
	addr := startTCPSink(t)
	c, br := dialSink(t, addr, Params{Op: OpSend, Size: size, Depth: 1})
	msg := make([]byte, size)
	for _, seq := range []uint64{0, 1, 3, 4} {
		binary.BigEndian.PutUint64(msg, seq)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	line, err := br.ReadString('\n')
	if want := "error message 2 carries sequence number 3\n"; err != nil || line != want {
		t.Errorf("sink answered %q, %v; want %q", line, err, want)
	}

	// A client whose sink answers so fails with a *DataError from the peer.
	ctx := testCtx(t)
	s, _ := dialCalls(t, ctx, addr, OpSend, size)
	s.buf = s.buf[:size-1] // one byte short: the sink sees a partial message at EOF
	var stop atomic.Bool
	stop.Store(true)
	var st streamStats
	if err := s.measure(ctx, &st, &stop); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Write(make([]byte, size-1)); err != nil {
		t.Fatal(err)
	}
	var de *DataError
	if _, err := s.finish(ctx, &st); !errors.As(err, &de) || !de.Peer || !strings.Contains(de.Msg, "not whole 100-byte messages") {
		t.Errorf("finish: %v, want the sink's report of a partial message", err)
	}
}
