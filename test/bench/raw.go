package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gosiw/gosiw/mpa"
)

// The mirrored baselines (a diagnostic: no target is judged against
// them; bare.go has the baselines that are) move the same messages over
// a plain TCP connection with the goroutine structure of a QP pair: on each side an
// application goroutine (the benchmark's), a sender goroutine that takes
// what the application posted and writes it, batched into one writev as
// the QP's send engine does, and a receiver goroutine that reads
// messages (through a bufio.Reader, as the QP's receive engine reads
// headers through its buffer; large messages bypass it) and reports
// them. Posting and completion go through buffered channels, where a QP
// has its rings, doorbell and CQ.
//
//	stream    (write, send)  app -> sender ==> receiver           (depth in flight)
//	reqresp   (read)         app -> sender ==> receiver -> sender ==> receiver -> app
//	pingpong                 app -> sender ==> receiver -> app -> sender ==> receiver -> app
//	echo      (bare, bare.go) app ==> app ==> app                 (no handoffs)

// readRequestLen is the size of the raw read request: an RDMAP Read
// Request header.
const readRequestLen = 28

type rawFixture struct {
	c, s     net.Conn // c: the client (dialer), s: the server (acceptor)
	cbr, sbr *bufio.Reader
	bw       *bufio.Writer // the batched baseline's, on c
	cbuf     []byte        // client receive buffer
	sbuf     []byte        // server receive buffer
	msg      []byte        // payload written (either side)
	req      []byte
	// Posting and completion queues.
	sq, cq, srq, ssq chan int
	errc             chan error
	oks              int // goroutines that reported success this run
	iovC, iovS       [][]byte
	nbC, nbS         net.Buffers
}

func newRawFixture(c, s net.Conn) *rawFixture {
	const q = 1024
	return &rawFixture{
		c: c, s: s,
		cbr:  bufio.NewReaderSize(c, bareBufSize),
		sbr:  bufio.NewReaderSize(s, bareBufSize),
		bw:   bufio.NewWriterSize(c, bareBufSize),
		cbuf: make([]byte, maxSize),
		sbuf: make([]byte, maxSize),
		msg:  make([]byte, maxSize),
		req:  make([]byte, readRequestLen),
		sq:   make(chan int, q), cq: make(chan int, q),
		srq: make(chan int, q), ssq: make(chan int, q),
		errc: make(chan error, 8),
		iovC: make([][]byte, 0, q),
		iovS: make([][]byte, 0, q),
	}
}

func (f *rawFixture) close() {
	f.c.Close()
	f.s.Close()
}

// deadline bounds a run, so a broken connection fails it instead of
// hanging; the zero time clears it.
func (f *rawFixture) deadline(t time.Time) {
	_ = f.c.SetDeadline(t)
	_ = f.s.SetDeadline(t)
}

// sender takes posted message counts from in and writes that many
// messages of size bytes, batching what is queued into one writev; it
// reports each batch on done (when done is not nil). It stops after n
// messages and reports on errc. A run waits for its senders (not only
// for the data they wrote): the next run's sender reuses the iovec
// array, which Writev still updates after the system call.
func sender(conn net.Conn, in, done chan int, n int, msg []byte, iov *[][]byte, nb *net.Buffers, errc chan<- error) {
	// As many messages as the QP's send engine puts in one writev: its
	// mpa.Writer takes no more ULPDUs once they add up to more than
	// mpa.WriterMaxBytes.
	per := max(1, mpa.WriterMaxBytes/len(msg))
	per = min(per, cap(*iov))
	for sent := 0; sent < n; {
		k := <-in
	drain:
		for k < per {
			select {
			case m := <-in:
				k += m
			default:
				break drain
			}
		}
		v := (*iov)[:k]
		for i := range v {
			v[i] = msg
		}
		*nb = v
		if _, err := nb.WriteTo(conn); err != nil {
			errc <- fmt.Errorf("raw write: %w", err)
			return
		}
		sent += k
		if done != nil {
			done <- k
		}
	}
	errc <- nil
}

// receiver reads n messages of len(buf) bytes, reporting each on out
// (when out is not nil), then reports on errc.
func receiver(r io.Reader, buf []byte, out chan int, n int, errc chan<- error) {
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			errc <- fmt.Errorf("raw read: %w", err)
			return
		}
		if out != nil {
			out <- 1
		}
	}
	errc <- nil
}

// begin starts a run: a deadline so a broken connection fails it instead
// of hanging.
func (f *rawFixture) begin() {
	f.oks = 0
	f.deadline(time.Now().Add(runLimit))
}

// end waits until the run's want goroutines have reported success and
// returns the first error one reports instead.
func (f *rawFixture) end(want int) error {
	defer f.deadline(time.Time{})
	for f.oks < want {
		if err := <-f.errc; err != nil {
			f.deadline(time.Unix(1, 0)) // unblock the others
			return err
		}
		f.oks++
	}
	return nil
}

// take receives from ch, or fails when a goroutine reports an error.
func (f *rawFixture) take(ch chan int) (int, error) {
	for {
		select {
		case k := <-ch:
			return k, nil
		case err := <-f.errc:
			if err == nil {
				f.oks++
				continue
			}
			f.deadline(time.Unix(1, 0))
			return 0, err
		}
	}
}

// rawStream is the baseline of RDMA Write and Send: size-byte messages
// from client to server, at most depth posted and not yet written.
func rawStream(b bench, n int, f *rawFixture, size, depth int) error {
	f.begin()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	go sender(f.c, f.sq, f.cq, n, f.msg[:size], &f.iovC, &f.nbC, f.errc)
	go receiver(f.sbr, f.sbuf[:size], nil, n, f.errc)
	if err := f.pipeline(b, n, depth); err != nil {
		return err
	}
	return f.end(2)
}

// pipeline posts n operations to the client's sender, at most depth
// outstanding, and waits for their completions: the timed part of the
// stream and request/response baselines.
func (f *rawFixture) pipeline(b bench, n, depth int) error {
	b.ResetTimer()
	defer b.StopTimer()
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < depth {
			f.sq <- 1
			posted++
		}
		k, err := f.take(f.cq)
		if err != nil {
			return err
		}
		done += k
	}
	return nil
}

// rawReqResp is the baseline of RDMA Read: the client posts requests of
// readRequestLen bytes, at most depth outstanding; the server's receiver
// hands each to the server's sender, which answers with size bytes; the
// client's receiver completes them.
func rawReqResp(b bench, n int, f *rawFixture, size, depth int) error {
	f.begin()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	go sender(f.c, f.sq, nil, n, f.req, &f.iovC, &f.nbC, f.errc)
	go receiver(f.sbr, f.sbuf[:readRequestLen], f.ssq, n, f.errc)
	go sender(f.s, f.ssq, nil, n, f.msg[:size], &f.iovS, &f.nbS, f.errc)
	go receiver(f.cbr, f.cbuf[:size], f.cq, n, f.errc)
	if err := f.pipeline(b, n, depth); err != nil {
		return err
	}
	return f.end(4)
}

// rawPingPong is the baseline of the Send/Recv ping-pong: size bytes to
// the server and back, one at a time, through both sides' sender and
// receiver goroutines and the server's application goroutine.
func rawPingPong(b bench, n int, f *rawFixture, size int) error {
	f.begin()
	b.ReportAllocs()
	go sender(f.c, f.sq, nil, n, f.msg[:size], &f.iovC, &f.nbC, f.errc)
	go receiver(f.sbr, f.sbuf[:size], f.srq, n, f.errc)
	go func() { // the server application
		for range n {
			f.ssq <- <-f.srq
		}
		f.errc <- nil
	}()
	go sender(f.s, f.ssq, nil, n, f.msg[:size], &f.iovS, &f.nbS, f.errc)
	go receiver(f.cbr, f.cbuf[:size], f.cq, n, f.errc)
	b.ResetTimer()
	for range n {
		f.sq <- 1
		if _, err := f.take(f.cq); err != nil {
			return err
		}
	}
	b.StopTimer()
	return f.end(5)
}

// rawEcho is the bare baseline of the ping-pong, the plainest TCP echo:
// the client writes and reads, the server reads and writes, with no
// goroutine in between.
func rawEcho(b bench, n int, f *rawFixture, size int) error {
	f.begin()
	b.ReportAllocs()
	go func() {
		for range n {
			if _, err := io.ReadFull(f.s, f.sbuf[:size]); err != nil {
				f.errc <- err
				return
			}
			if _, err := f.s.Write(f.msg[:size]); err != nil {
				f.errc <- err
				return
			}
		}
		f.errc <- nil
	}()
	b.ResetTimer()
	for range n {
		if _, err := f.c.Write(f.msg[:size]); err != nil {
			return err
		}
		if _, err := io.ReadFull(f.c, f.cbuf[:size]); err != nil {
			return err
		}
	}
	b.StopTimer()
	return f.end(1)
}
