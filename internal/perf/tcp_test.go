package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
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
// boundaries: every 100-byte message the client reads is the whole
// pattern, also across the sink's buffer flushes.
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
