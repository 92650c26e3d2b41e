// Package rping speaks the data exchange of rdma-core's rping
// (librdmacm/examples/rping.c) over a gosiw QP, so that gosiw interoperates
// with Linux `rping -c` and `rping -s`.
//
// One iteration, the client being the MPA initiator:
//
//	client                                   server
//	fill start_buf ("rdma-ping-N: " + text)
//	Send {start_buf, rkey, size}  ------->   Recv: the client's buffer
//	                                         RDMA Read size bytes into rdma_buf
//	Recv  <-------------------------------   Send "go ahead" (16 bytes)
//	Send {rdma_buf, rkey, size}   ------->   Recv: where to write
//	                                         RDMA Write strlen(rdma_buf)+1 bytes
//	Recv  <-------------------------------   Send "go ahead"
//	(-V) compare start_buf and rdma_buf
//
// The message is rping's struct rping_rdma_info: a big-endian 64-bit buffer
// address, 32-bit rkey and 32-bit size, exactly 16 bytes; rping refuses any
// other length ("Received bogus data"). Linux siw addresses memory by
// virtual address, gosiw's regions by zero-based offset: each side simply
// advertises the address its peer must use, so they interoperate.
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/gosiw/gosiw/rdmap"
)

// MsgLen is the size of rping's message.
const MsgLen = 16

// Size limits of rping (RPING_MIN_BUFSIZE is sizeof(itoa(INT_MAX)) + the
// format, 16 in practice; the maximum is 65535 as rping's -S allows).
const (
	MinSize     = 16
	MaxSize     = 65535
	DefaultSize = 64
	msgFmt      = "rdma-ping-"
)

// Info is rping's struct rping_rdma_info.
type Info struct {
	Buf  uint64
	RKey uint32
	Size uint32
}

// Put encodes i into b[:MsgLen].
func (i Info) Put(b []byte) {
	binary.BigEndian.PutUint64(b[0:], i.Buf)
	binary.BigEndian.PutUint32(b[8:], i.RKey)
	binary.BigEndian.PutUint32(b[12:], i.Size)
}

// ErrBogus is rping's "Received bogus data": a message that is not 16 bytes.
var ErrBogus = errors.New("rping: received bogus data (message is not 16 bytes)")

// ParseInfo decodes a received message of n bytes in b.
func ParseInfo(b []byte, n int) (Info, error) {
	if n != MsgLen {
		return Info{}, ErrBogus
	}
	return Info{
		Buf:  binary.BigEndian.Uint64(b[0:]),
		RKey: binary.BigEndian.Uint32(b[8:]),
		Size: binary.BigEndian.Uint32(b[12:]),
	}, nil
}

// Fill writes rping's ping text for iteration ping into buf ("rdma-ping-N: "
// then the letters from start up to 'z' and around from 'A', NUL last) and
// returns the start letter of the next iteration.
func Fill(buf []byte, ping int, start byte) byte {
	s := msgFmt + strconv.Itoa(ping) + ": "
	cc := copy(buf, s)
	c := start
	for i := cc; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	if len(buf) > 0 {
		buf[len(buf)-1] = 0
	}
	start++
	if start > 122 {
		start = 65
	}
	return start
}

// WCError is a work request that completed with an error status.
type WCError struct{ WC rdmap.WC }

func (e *WCError) Error() string {
	return fmt.Sprintf("rping: %v completion with status %v", e.WC.Op, e.WC.Status)
}

// flushed reports whether err is a work request flushed because the
// connection ended.
func flushed(err error) bool {
	var we *WCError
	return errors.As(err, &we) && we.WC.Status == rdmap.WCWRFlushErr
}

// cqWaiter waits for the completions of one QP on one CQ. Completions of
// different kinds may come in any order (a Send's completion may follow the
// Receive of the peer's answer), so those not asked for yet wait in pending.
type cqWaiter struct {
	cq      *rdmap.CQ
	wcs     [8]rdmap.WC
	pending []rdmap.WC
}

// expect returns the next completion of kind op, blocking until one comes.
// A completion with an error status ends the wait with an error.
func (w *cqWaiter) expect(ctx context.Context, op rdmap.WCOpcode) (rdmap.WC, error) {
	for {
		for i, wc := range w.pending {
			if wc.Status != rdmap.WCSuccess {
				return wc, &WCError{WC: wc}
			}
			if wc.Op == op {
				w.pending = append(w.pending[:i], w.pending[i+1:]...)
				return wc, nil
			}
		}
		n := w.cq.Poll(w.wcs[:])
		if n == 0 {
			if err := w.cq.Wait(ctx); err != nil {
				return rdmap.WC{}, err
			}
			continue
		}
		w.pending = append(w.pending, w.wcs[:n]...)
	}
}
