package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/gosiw/gosiw/rdmap"
)

// ClientResult is what a client run did.
type ClientResult struct {
	Pings int
	// Data is the last ping's text as the server wrote it back (without
	// the trailing NUL), as rping -v prints it.
	Data string
}

// ErrMismatch is rping -V's "data mismatch".
var ErrMismatch = errors.New("rping: data mismatch")

// Client runs count pings (0: until ctx ends) over an established
// connection. With validate it compares what the server wrote back with
// what it read (rping -V). onPing, when set, sees each ping's text.
func (e *Endpoint) Client(ctx context.Context, count int, validate bool, onPing func(i int, data []byte)) (ClientResult, error) {
	var res ClientResult
	size := len(e.rdmaBuf)
	start := byte(65)
	for ping := 0; count == 0 || ping < count; ping++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		start = Fill(e.startBuf, ping, start)
		clear(e.rdmaBuf)
		if err := e.send(ctx, Info{Buf: 0, RKey: uint32(e.startMR.STag()), Size: uint32(size)}); err != nil {
			return res, err
		}
		if _, err := e.recv(ctx); err != nil { // go ahead: the server has read start_buf
			return res, err
		}
		if err := e.send(ctx, Info{Buf: 0, RKey: uint32(e.rdmaMR.STag()), Size: uint32(size)}); err != nil {
			return res, err
		}
		if _, err := e.recv(ctx); err != nil { // the server has written rdma_buf
			return res, err
		}
		if validate && !bytes.Equal(e.startBuf, e.rdmaBuf) {
			return res, fmt.Errorf("%w in ping %d", ErrMismatch, ping)
		}
		data := e.rdmaBuf
		if i := bytes.IndexByte(data, 0); i >= 0 {
			data = data[:i]
		}
		if onPing != nil {
			onPing(ping, data)
		}
		res.Pings++
		res.Data = string(data)
	}
	return res, nil
}

// Server answers pings until the client disconnects (the QP ends) or ctx
// ends. It returns the number of pings served; a client that goes away
// between pings is a normal end (nil error).
func (e *Endpoint) Server(ctx context.Context, onPing func(i int, data []byte)) (int, error) {
	n := 0
	for {
		peer, err := e.recv(ctx)
		if err != nil {
			// A client that disconnects between pings flushes the posted
			// receive; the flush may come before the QP reports its end.
			if n > 0 && flushed(err) {
				select {
				case <-e.QP.Done():
				case <-ctx.Done():
				}
				if e.QP.Err() == nil {
					return n, nil
				}
			}
			return n, err
		}
		if peer.Size > uint32(len(e.rdmaBuf)) {
			return n, fmt.Errorf("rping: client asks for %d bytes, server buffer is %d", peer.Size, len(e.rdmaBuf))
		}
		if err := e.rdma(ctx, rdmap.WRRead, peer, int(peer.Size)); err != nil {
			return n, err
		}
		if err := e.send(ctx, Info{}); err != nil {
			return n, err
		}
		sink, err := e.recv(ctx)
		if err != nil {
			return n, err
		}
		// rping writes strlen(rdma_buf)+1 bytes.
		wlen := bytes.IndexByte(e.rdmaBuf[:peer.Size], 0) + 1
		if wlen == 0 {
			wlen = int(peer.Size)
		}
		if wlen > int(sink.Size) {
			wlen = int(sink.Size)
		}
		if err := e.rdma(ctx, rdmap.WRWrite, sink, wlen); err != nil {
			return n, err
		}
		if onPing != nil {
			onPing(n, e.rdmaBuf[:max(wlen-1, 0)])
		}
		if err := e.send(ctx, Info{}); err != nil {
			return n, err
		}
		n++
	}
}
