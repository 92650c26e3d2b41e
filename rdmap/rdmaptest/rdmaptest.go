// Package rdmaptest connects queue pairs for tests without a connection
// manager: two rdmap QPs over loopback TCP (or net.Pipe) with hand-made
// mpa.Params, or one QP facing a raw peer that speaks the wire format
// through the mpa, ddp and rdmap wire packages (for hostile-peer tests).
// Tests of any package may use it.
package rdmaptest

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// Options describe the connection two QPs share. The zero value is a
// plain connection: no CRC, no markers, IRD and ORD 16 each way.
type Options struct {
	CRC bool
	// MarkersAB: the initiator inserts markers (the responder asked);
	// MarkersBA the other way round.
	MarkersAB, MarkersBA bool
	// IRD and ORD of the initiator; the responder gets the mirror image.
	// Zero means 16; a negative value means 0.
	IRD, ORD           int
	P2P                bool
	RTR                mpa.RTR
	FirstSendDelay     time.Duration
	TerminateLayoutSiw bool
	// Pipe connects over net.Pipe instead of loopback TCP.
	Pipe bool
}

func irdord(v int) int {
	switch {
	case v == 0:
		return 16
	case v < 0:
		return 0
	}
	return v
}

// Params returns the mpa.Params of one side.
func (o *Options) Params(initiator bool) *mpa.Params {
	ird, ord := irdord(o.IRD), irdord(o.ORD)
	p := &mpa.Params{
		Initiator:          initiator,
		Rev:                mpa.Rev2,
		Enhanced:           true,
		CRC:                o.CRC,
		P2P:                o.P2P,
		RTR:                o.RTR,
		TerminateLayoutSiw: o.TerminateLayoutSiw,
	}
	if initiator {
		p.MarkersTx, p.MarkersRx = o.MarkersAB, o.MarkersBA
		p.IRD, p.ORD = ird, ord
		p.FirstSendDelay = o.FirstSendDelay
	} else {
		p.MarkersTx, p.MarkersRx = o.MarkersBA, o.MarkersAB
		p.IRD, p.ORD = ord, ird
	}
	return p
}

// ConnPair returns the two ends of a connection: loopback TCP, or
// net.Pipe when pipe is set.
func ConnPair(tb testing.TB, pipe bool) (net.Conn, net.Conn) {
	tb.Helper()
	if pipe {
		return net.Pipe()
	}
	// An address of its own each time (testutil.ListenIP): fuzzing and
	// stress runs connect thousands of times a minute.
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: testutil.ListenIP()})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	a, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		a.Close()
		tb.Fatal(r.err)
	}
	return a, r.c
}

// Connect connects QP a (the MPA initiator) and QP b (the responder) and
// starts both. Both are closed when the test ends.
func Connect(tb testing.TB, a, b *rdmap.QP, o *Options) {
	tb.Helper()
	if o == nil {
		o = &Options{}
	}
	ca, cb := ConnPair(tb, o.Pipe)
	tb.Cleanup(func() {
		a.Close()
		b.Close()
	})
	Start(tb, a, b, ca, cb, o)
}

// Start starts QP b (the responder) on cb and then QP a (the MPA
// initiator) on ca, with o's parameters (o must not be nil); it closes
// the connections a QP did not take when a start fails.
func Start(tb testing.TB, a, b *rdmap.QP, ca, cb net.Conn, o *Options) {
	tb.Helper()
	if err := b.Start(cb, o.Params(false)); err != nil {
		ca.Close()
		cb.Close()
		tb.Fatal(err)
	}
	if err := a.Start(ca, o.Params(true)); err != nil {
		ca.Close()
		tb.Fatal(err)
	}
}

// WaitDone waits for a QP's Done with a timeout.
func WaitDone(tb testing.TB, qp *rdmap.QP, d time.Duration) {
	tb.Helper()
	select {
	case <-qp.Done():
	case <-time.After(d):
		tb.Fatalf("QP %d not done after %v (state %v)", qp.QPN(), d, qp.State())
	}
}

// ErrTimeout is returned by Poll when no completion arrived in time.
var ErrTimeout = errors.New("rdmaptest: timed out waiting for a completion")
