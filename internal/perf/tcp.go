package perf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The raw TCP baseline runs the same test over plain TCP, so that gosiw's
// figures can be set against what the kernel's TCP does alone on the same
// path. It needs a TCP sink: `siw perf -s` runs one next to its gosiw
// listener (by default on the next port), and ServeTCP is that sink.
//
// A baseline connection starts with the same Request text as a gosiw one,
// on a line of its own, and the sink's answer on a line:
//
//	client -> sink   "gosiw-perf/1 op=write size=65536 depth=1\n"
//	sink -> client   "gosiw-perf/1 ready\n" (or "gosiw-perf/1 error: ...\n")
//
// then, by op:
//
//	write, send  the client writes Size-byte messages until the time is up,
//	             then half-closes; the sink reads to EOF and answers
//	             "ok bytes=N\n"
//	read         the sink writes Size-byte messages until the client
//	             closes; the client reads whole messages
//	pingpong     the client writes a message, the sink writes it back;
//	             at EOF the sink answers "ok ops=N bytes=B\n"
//
// Depth does not apply: TCP keeps its own window in flight.
//
// Each op runs the plain TCP a Go user would write for the same job, not
// a copy of gosiw's structure: the sending side writes every message into
// a bufio.Writer of tcpBufSize bytes (a message of that size or more goes
// straight to the socket, so bulk transfers are one goroutine writing
// large buffers, as iperf3 does; small messages are batched into one
// write each time the buffer fills, and flushed when the sender has no
// more to queue: at the end of the run), the receiving side reads through
// a bufio.Reader of the same size; pingpong is the bare echo loop, one
// goroutine on each side writing then reading.

// RunTCP runs the raw TCP baseline against the sink at addr with the same
// options as Run (Depth and CRC aside).
func RunTCP(ctx context.Context, addr string, o *Options) (*Result, error) {
	c, err := o.resolve()
	if err != nil {
		return nil, err
	}
	return run(ctx, "tcp", &c, func(ctx context.Context, id int) (stream, error) {
		return dialTCP(ctx, addr, &c, id)
	})
}

const tcpReady = Prefix + " ready"

// CheckTCP finds out whether a TCP sink (ServeTCP) accepts connections at
// addr, without starting a test: it connects and closes at once, which the
// sink takes silently. timeout bounds the connect (0: 10 s). It returns
// the dial error (syscall.ECONNREFUSED when nothing listens there).
func CheckTCP(ctx context.Context, addr string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	c, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// tcpBufSize is the size of the baseline's bufio.Writer and bufio.Reader
// on both sides.
const tcpBufSize = 64 << 10

type tcpStream struct {
	id  int
	p   Params
	c   *net.TCPConn
	br  *bufio.Reader
	buf []byte
}

func dialTCP(ctx context.Context, addr string, o *Options, id int) (stream, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &tcpStream{id: id, p: o.params(), c: nc.(*net.TCPConn), br: bufio.NewReaderSize(nc, tcpBufSize)}
	s.p.Depth = 1
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	line := append(AppendRequest(nil, &s.p), '\n')
	if _, err := nc.Write(line); err != nil {
		nc.Close()
		return nil, err
	}
	ans, err := s.readLine()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("perf: the TCP sink's answer: %w", err)
	}
	if ans != tcpReady {
		nc.Close()
		if reason, ok := strings.CutPrefix(ans, Prefix+" error: "); ok {
			return nil, &TCPRejectError{Reason: reason}
		}
		return nil, fmt.Errorf("perf: unexpected answer from the TCP sink: %.60q", ans)
	}
	nc.SetDeadline(time.Time{})
	s.buf = make([]byte, s.p.Size)
	fillPattern(s.buf)
	return s, nil
}

// TCPRejectError is a TCP sink's refusal.
type TCPRejectError struct{ Reason string }

func (e *TCPRejectError) Error() string { return "perf: the TCP sink refused the test: " + e.Reason }

func (s *tcpStream) readLine() (string, error) {
	line, err := s.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = errors.New("line too long")
		}
		return "", err
	}
	return strings.TrimSuffix(string(line), "\n"), nil
}

func (s *tcpStream) info() StreamInfo {
	return StreamInfo{ID: s.id, Local: s.c.LocalAddr().String(), Remote: s.c.RemoteAddr().String(), Depth: 1}
}

func (s *tcpStream) close() { s.c.Close() }

func (s *tcpStream) measure(ctx context.Context, st *streamStats, stop *atomic.Bool) error {
	unhook := context.AfterFunc(ctx, func() { s.c.SetDeadline(time.Unix(1, 0)) })
	defer unhook()
	size := uint64(s.p.Size)
	switch s.p.Op {
	case OpWrite, OpSend:
		// Counted once queued: the final Flush puts the rest on the wire
		// before finish compares the counts with the sink's.
		bw := bufio.NewWriterSize(s.c, tcpBufSize)
		for !stop.Load() {
			if _, err := bw.Write(s.buf); err != nil {
				return fmt.Errorf("perf: tcp write: %w", err)
			}
			st.ops.Add(1)
			st.bytes.Add(size)
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("perf: tcp write: %w", err)
		}
	case OpRead:
		for !stop.Load() {
			if _, err := io.ReadFull(s.br, s.buf); err != nil {
				return fmt.Errorf("perf: tcp read: %w", err)
			}
			st.ops.Add(1)
			st.bytes.Add(size)
		}
	case OpPingPong:
		echo := make([]byte, len(s.buf))
		for !stop.Load() {
			t := time.Now()
			if _, err := s.c.Write(s.buf); err != nil {
				return fmt.Errorf("perf: tcp write: %w", err)
			}
			if _, err := io.ReadFull(s.br, echo); err != nil {
				return fmt.Errorf("perf: tcp read: %w", err)
			}
			rtt := time.Since(t)
			st.hist.add(rtt)
			st.latNS.Add(uint64(rtt))
			st.ops.Add(1)
			st.bytes.Add(size)
		}
	}
	return nil
}

func (s *tcpStream) finish(ctx context.Context, st *streamStats) (*PeerCounts, error) {
	if s.p.Op == OpRead {
		return nil, nil // the client is the receiver; it just hangs up
	}
	unhook := context.AfterFunc(ctx, func() { s.c.SetDeadline(time.Unix(1, 0)) })
	defer unhook()
	if err := s.c.CloseWrite(); err != nil {
		return nil, fmt.Errorf("perf: tcp: %w", err)
	}
	ans, err := s.readLine()
	if err != nil {
		return nil, fmt.Errorf("perf: the TCP sink's counts: %w", err)
	}
	verb, rest := parseCtrl([]byte(ans))
	if verb != "ok" {
		return nil, fmt.Errorf("perf: unexpected answer from the TCP sink: %.60q", ans)
	}
	c, err := parseCounts(rest)
	if err != nil {
		return nil, fmt.Errorf("perf: the TCP sink's counts %.60q: %w", ans, err)
	}
	pc := &PeerCounts{Bytes: &c.Bytes}
	if c.HasOps {
		pc.Ops = &c.Ops
	}
	if b := st.bytes.Load(); c.Bytes != b {
		return pc, &DataError{Msg: fmt.Sprintf("the TCP sink received %d bytes, the client sent %d", c.Bytes, b)}
	}
	return pc, nil
}

// ServeTCP runs the raw TCP baseline sink on ln until ctx is done, then
// closes ln and the connections and returns nil. cfg's OnConn, when set,
// is told about each connection (Transport "tcp").
func ServeTCP(ctx context.Context, ln net.Listener, cfg *ServerConfig) error {
	var onConn func(ConnInfo)
	if cfg != nil {
		onConn = cfg.OnConn
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// Connections are numbered as they make a request, so that a
	// CheckTCP connection takes no number.
	var ids atomic.Int64
	nextID := func() int { return int(ids.Add(1)) }
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Go(func() {
			defer c.Close()
			unhook := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
			defer unhook()
			info := serveTCPConn(c, nextID, onConn)
			if onConn != nil && info.Event != "refused" && info.Event != "checked" {
				info.Event = "ended"
				onConn(info)
			}
		})
	}
}

func serveTCPConn(c net.Conn, nextID func() int, onConn func(ConnInfo)) ConnInfo {
	info := ConnInfo{Transport: "tcp", Remote: c.RemoteAddr()}
	br := bufio.NewReaderSize(c, tcpBufSize)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadSlice('\n')
	c.SetReadDeadline(time.Time{})
	if err == io.EOF && len(line) == 0 {
		info.Event = "checked" // CheckTCP: connected and closed, nothing to report
		return info
	}
	info.ID = nextID()
	if err != nil {
		info.Err = fmt.Errorf("perf: tcp request: %w", err)
		return info
	}
	p, err := ParseRequest([]byte(strings.TrimSuffix(string(line), "\n")))
	if err != nil {
		reason := RejectText(err)
		info.Event, info.Reason = "refused", string(reason)
		c.Write(append(reason, '\n'))
		if onConn != nil {
			onConn(info)
		}
		return info
	}
	info.Params = p
	if _, err := io.WriteString(c, tcpReady+"\n"); err != nil {
		info.Err = err
		return info
	}
	info.Event = "accepted"
	if onConn != nil {
		onConn(info)
	}
	start := time.Now()
	var bytes, ops uint64
	switch p.Op {
	case OpWrite, OpSend:
		buf := make([]byte, 1<<20)
		for {
			n, err := br.Read(buf)
			bytes += uint64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				info.Err = err
				break
			}
		}
		ops = bytes / uint64(p.Size)
		if info.Err == nil && bytes%uint64(p.Size) != 0 {
			info.Err = fmt.Errorf("perf: tcp: %d bytes are not whole %d-byte messages", bytes, p.Size)
		}
		if info.Err == nil {
			fmt.Fprintf(c, "ok bytes=%d\n", bytes)
		}
	case OpRead:
		buf := make([]byte, p.Size)
		fillPattern(buf)
		bw := bufio.NewWriterSize(c, tcpBufSize)
		for {
			if _, err := bw.Write(buf); err != nil {
				break // the client hangs up when it is done
			}
			ops++
			bytes += uint64(p.Size)
		}
	case OpPingPong:
		buf := make([]byte, p.Size)
		for {
			if _, err := io.ReadFull(br, buf); err != nil {
				if err != io.EOF {
					info.Err = err
				}
				break
			}
			if _, err := c.Write(buf); err != nil {
				info.Err = err
				break
			}
			ops++
			bytes += uint64(p.Size)
		}
		if info.Err == nil {
			fmt.Fprintf(c, "ok ops=%d bytes=%d\n", ops, bytes)
		}
	}
	info.Ops, info.Bytes, info.Seconds = ops, bytes, time.Since(start).Seconds()
	return info
}
