package perf

import (
	"bufio"
	"context"
	"encoding/binary"
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
//	             "ok bytes=N\n", or "error TEXT\n" when the messages were
//	             not what was sent (sequence, a partial message)
//	read         the sink writes Size-byte messages until the client
//	             closes; the client reads whole messages
//	pingpong     the client writes a message, the sink writes it back;
//	             at EOF the sink answers "ok ops=N bytes=B\n"
//
// Depth does not apply: TCP keeps its own window in flight.
//
// Each op runs the plain TCP a Go user would write for the same job, not
// a copy of gosiw's structure, and byte for byte the bare baselines that
// make bench judges gosiw against (test/bench/bare.go), so that the two
// tools' ratios mean the same thing:
//
//	batched  (write, send, read below tcpBufSize)  the sender stamps each
//	         message with its sequence number (8 bytes, big-endian, in
//	         messages of 8 bytes or more) and writes it into a
//	         bufio.Writer of tcpBufSize bytes, which goes to the socket
//	         each time it fills and is flushed when nothing more is
//	         queued (the end of the run); the receiver reads the messages
//	         one by one through a bufio.Reader of the same size and
//	         checks each sequence number
//	bulk     (tcpBufSize and more)  the sender writes each message
//	         straight to the socket, one write per message, as iperf3
//	         does; the receiver reads into a tcpBulkRead-byte buffer,
//	         counting bytes
//	echo     (pingpong)  the bare echo loop: the client writes a message
//	         and reads the echo, the sink reads a message and writes it
//	         back, straight on the socket, one write and one read per
//	         message each
//
// Both ends set TCP_NODELAY (Go's default, made explicit). The sender
// counts what it queued in batches of a buffer's worth of messages, not
// per message, so that the counting costs the loop next to nothing.

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

// tcpBufSize is the size of the batched baseline's bufio.Writer and
// bufio.Reader on both sides, and the message size from which the bulk
// baseline takes over (make bench's bareBufSize and bareSmall).
const tcpBufSize = 64 << 10

// tcpBulkRead is the size of the bulk receiver's buffer.
const tcpBulkRead = 1 << 20

// tcpBatched says whether size-byte messages get the batched baseline.
func tcpBatched(size int) bool { return size < tcpBufSize }

// tcpConn is what the baseline needs of a connection: a net.Conn whose
// write half can be closed (a *net.TCPConn; tests wrap one).
type tcpConn interface {
	net.Conn
	CloseWrite() error
}

type tcpStream struct {
	id  int
	p   Params
	c   tcpConn
	br  *bufio.Reader // on c: the sink's answers, and batched reads
	buf []byte
}

func dialTCP(ctx context.Context, addr string, o *Options, id int) (stream, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := nc.(*net.TCPConn)
	if err := tc.SetNoDelay(true); err != nil {
		nc.Close()
		return nil, err
	}
	s := &tcpStream{id: id, p: o.params(), c: tc, br: bufio.NewReaderSize(nc, tcpBufSize)}
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
	if s.p.Op != OpRead && s.br.Buffered() != 0 {
		// The sink sends nothing more before the client has: a byte here
		// would be read out of turn (the echo is read from the socket).
		nc.Close()
		return nil, errors.New("perf: the TCP sink sent data after its answer, before the test")
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
		if _, err := tcpSend(s.c, s.buf, stop, st); err != nil {
			return fmt.Errorf("perf: tcp write: %w", err)
		}
	case OpRead:
		if _, err := tcpReceive(s.br, s.buf, stop, st); err != nil {
			if de := (*DataError)(nil); errors.As(err, &de) {
				return err
			}
			return fmt.Errorf("perf: tcp read: %w", err)
		}
	case OpPingPong:
		echo := make([]byte, len(s.buf))
		for !stop.Load() {
			t := time.Now()
			if _, err := s.c.Write(s.buf); err != nil {
				return fmt.Errorf("perf: tcp write: %w", err)
			}
			if _, err := io.ReadFull(s.c, echo); err != nil {
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

// tcpPublishEvery is how many size-byte messages a baseline sender or
// receiver handles between two updates of its stream's counters: a
// buffer's worth (one for bulk messages).
func tcpPublishEvery(size int) int { return max(1, tcpBufSize/size) }

// tcpSend writes len(msg)-byte messages to c, the bare way for their size
// (batched or bulk; see the baseline's description), until stop is set or
// a write fails; stop nil: until a write fails. Batched messages are
// stamped with their sequence numbers in msg itself. The counts go to st,
// when not nil, as the messages are queued, a tcpPublishEvery batch at a
// time and the rest at the end; the batched writer is flushed when stop
// has been seen, before tcpSend returns. It returns how many messages it
// queued (all of them written unless err is not nil).
func tcpSend(c net.Conn, msg []byte, stop *atomic.Bool, st *streamStats) (n uint64, err error) {
	size := len(msg)
	every := uint64(tcpPublishEvery(size))
	var published uint64
	publish := func() {
		if st != nil && n > published {
			st.ops.Add(n - published)
			st.bytes.Add((n - published) * uint64(size))
			published = n
		}
	}
	defer publish()
	stopped := func() bool { return stop != nil && stop.Load() }
	if !tcpBatched(size) {
		for !stopped() {
			if _, err := c.Write(msg); err != nil {
				return n, err
			}
			n++
			publish()
		}
		return n, nil
	}
	bw := bufio.NewWriterSize(c, tcpBufSize)
	for !stopped() {
		if size >= seqLen {
			binary.BigEndian.PutUint64(msg, n)
		}
		if _, err := bw.Write(msg); err != nil {
			return n, err
		}
		n++
		if n-published >= every {
			publish()
		}
	}
	return n, bw.Flush()
}

// tcpReceive reads len(buf)-byte messages sent by tcpSend through br, a
// bufio.Reader of tcpBufSize bytes on the connection, until stop is set
// (nil: until EOF, which then ends it without an error) or a read fails.
// Batched messages are read one by one into buf and their sequence
// numbers checked (a wrong one is a *DataError; so is a partial message
// at EOF); bulk ones are read into a tcpBulkRead-byte buffer, which
// bufio.Reader fills straight from the socket once what it had buffered
// has gone, and only counted. The counts go to st, when not nil, a
// tcpPublishEvery batch at a time (whole messages: bulk bytes beyond the
// last whole message wait for it). It returns how many bytes it read.
func tcpReceive(br *bufio.Reader, buf []byte, stop *atomic.Bool, st *streamStats) (bytes uint64, err error) {
	size := uint64(len(buf))
	every := uint64(tcpPublishEvery(len(buf)))
	var published uint64 // messages
	publish := func(msgs uint64) {
		if st != nil && msgs > published {
			st.ops.Add(msgs - published)
			st.bytes.Add((msgs - published) * size)
			published = msgs
		}
	}
	stopped := func() bool { return stop != nil && stop.Load() }
	if !tcpBatched(len(buf)) {
		rbuf := make([]byte, tcpBulkRead)
		defer func() { publish(bytes / size) }()
		for !stopped() {
			k, err := br.Read(rbuf)
			bytes += uint64(k)
			publish(bytes / size)
			if err == io.EOF && stop == nil {
				if bytes%size != 0 {
					return bytes, &DataError{Msg: fmt.Sprintf("%d bytes are not whole %d-byte messages", bytes, size)}
				}
				return bytes, nil
			}
			if err != nil {
				return bytes, err
			}
		}
		return bytes, nil
	}
	var seq uint64
	defer func() { publish(seq) }()
	for !stopped() {
		k, err := io.ReadFull(br, buf)
		bytes += uint64(k)
		if err == io.EOF && stop == nil {
			return bytes, nil
		}
		if err == io.ErrUnexpectedEOF && stop == nil {
			return bytes, &DataError{Msg: fmt.Sprintf("%d bytes are not whole %d-byte messages", bytes, size)}
		}
		if err != nil {
			return bytes, err
		}
		if size >= seqLen {
			if got := binary.BigEndian.Uint64(buf); got != seq {
				return bytes, &DataError{Msg: fmt.Sprintf("message %d carries sequence number %d", seq, got)}
			}
		}
		seq++
		if seq-published >= every {
			publish(seq)
		}
	}
	return bytes, nil
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
	if verb == "error" {
		return nil, &DataError{Peer: true, Msg: "the TCP sink: " + rest}
	}
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
	if err == nil && br.Buffered() != 0 {
		err = errors.New("data after the request, before the answer")
	}
	if err == nil {
		if tc, ok := c.(interface{ SetNoDelay(bool) error }); ok {
			err = tc.SetNoDelay(true)
		}
	}
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
		buf := make([]byte, p.Size)
		bytes, err = tcpReceive(br, buf, nil, nil)
		if de := (*DataError)(nil); errors.As(err, &de) {
			// Say what was wrong once the client has finished sending
			// (it does not read before), and what was read meanwhile.
			if n, derr := io.Copy(io.Discard, br); derr == nil {
				bytes += uint64(n)
				fmt.Fprintf(c, "error %s\n", de.Msg)
			}
		} else if err == nil {
			fmt.Fprintf(c, "ok bytes=%d\n", bytes)
		}
		info.Err = err
		ops = bytes / uint64(p.Size)
	case OpRead:
		buf := make([]byte, p.Size)
		fillPattern(buf)
		// Ends when the client hangs up, its way of saying it is done.
		ops, _ = tcpSend(c, buf, nil, nil)
		bytes = ops * uint64(p.Size)
	case OpPingPong:
		buf := make([]byte, p.Size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
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
