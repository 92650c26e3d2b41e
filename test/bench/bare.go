package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// The bare baselines are the plain TCP a Go user would write instead of
// gosiw for the same job; every target is judged against them.
//
//	bulk     (write, send, read >= 64 KiB)  one goroutine writing size-byte
//	         buffers, one reading into a large buffer, as iperf3 does
//	batched  (write, send, read <  64 KiB)  size-byte messages written
//	         through a bufio.Writer, read through a bufio.Reader: the
//	         writer flushes when nothing more is queued (the end of the
//	         run; before that the buffer flushes itself when full)
//	bulk4    (write-4qp)  four bulk streams at once, on four connections
//	echo     (pingpong)   the bare echo loop: one goroutine each side,
//	         write then read
//
// The mirrored baselines of raw.go (the QP's goroutine structure through
// channels) stay as a diagnostic column.

// bareSmall: messages below this size get the batched baseline, larger
// ones the bulk baseline.
const bareSmall = 64 << 10

// bareBufSize is the size of the batched baseline's bufio.Writer and
// bufio.Reader.
const bareBufSize = 64 << 10

// bareKind is the bare baseline of a Write, Send or Read of size bytes.
func bareKind(size int) string {
	if size < bareSmall {
		return "batched"
	}
	return "bulk"
}

// bareBulk moves n size-byte messages over each fixture at once (n split
// between them): per connection, one goroutine writes the messages from
// the client, one reads from the server's socket into a large buffer
// until every byte arrived. The timer runs from before the first write
// to the last byte read.
func bareBulk(b bench, n int, fs []*rawFixture, size int) error {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for _, f := range fs {
		f.begin()
	}
	b.ResetTimer()
	for i, f := range fs {
		k := share(n, len(fs), i)
		go bulkWriter(f, k, size)
		go bulkReader(f, int64(k)*int64(size))
	}
	var err error
	for _, f := range fs {
		if e := f.end(2); e != nil && err == nil {
			err = e
		}
	}
	b.StopTimer()
	return err
}

// share is part i of n split into parts pieces.
func share(n, parts, i int) int {
	k := n / parts
	if i < n%parts {
		k++
	}
	return k
}

func bulkWriter(f *rawFixture, n, size int) {
	for range n {
		if _, err := f.c.Write(f.msg[:size]); err != nil {
			f.errc <- fmt.Errorf("bare write: %w", err)
			return
		}
	}
	f.errc <- nil
}

// bulkReader reads exactly total bytes (never more: the connection is
// reused by the next run).
func bulkReader(f *rawFixture, total int64) {
	for total > 0 {
		k, err := f.s.Read(f.sbuf[:min(int64(len(f.sbuf)), total)])
		total -= int64(k)
		if err != nil && total > 0 {
			f.errc <- fmt.Errorf("bare read: %w", err)
			return
		}
	}
	f.errc <- nil
}

// bareBatched writes n size-byte messages through the client's
// bufio.Writer, each stamped with its sequence number, and flushes once
// all are queued; the server reads them through its bufio.Reader and
// checks that message i carries number i: the batching keeps every
// boundary. size must be at least 8.
func bareBatched(b bench, n int, f *rawFixture, size int) error {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	f.begin()
	b.ResetTimer()
	go func() {
		msg := f.msg[:size]
		for i := range n {
			binary.BigEndian.PutUint64(msg, uint64(i))
			if _, err := f.bw.Write(msg); err != nil {
				f.errc <- fmt.Errorf("bare write: %w", err)
				return
			}
		}
		if err := f.bw.Flush(); err != nil {
			f.errc <- fmt.Errorf("bare flush: %w", err)
			return
		}
		f.errc <- nil
	}()
	go func() { f.errc <- readSequence(f.sbr, f.sbuf[:size], n) }()
	err := f.end(2)
	b.StopTimer()
	return err
}

// readSequence reads n messages of len(buf) bytes and checks their
// sequence numbers.
func readSequence(r *bufio.Reader, buf []byte, n int) error {
	for i := range n {
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("bare read: %w", err)
		}
		if got := binary.BigEndian.Uint64(buf); got != uint64(i) {
			return fmt.Errorf("bare read: message %d carries number %d", i, got)
		}
	}
	return nil
}
