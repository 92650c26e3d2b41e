//go:build linux

package rdmap_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// The close tests that read the kernel's TCP state (TCP_INFO, whose
// layout and states are Linux's).

// gatedConn holds the QP's reads until open is closed, so a test can let
// the peer's FIN and RST both arrive before the QP reads either.
type gatedConn struct {
	*net.TCPConn
	open chan struct{}
}

func (c *gatedConn) Read(b []byte) (int, error) {
	<-c.open
	return c.TCPConn.Read(b)
}

// tcpState returns the kernel's TCP state of c (TCP_INFO).
func tcpState(t *testing.T, c *net.TCPConn) uint8 {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st uint8
	if err := rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			st = info.State
		}
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPeerFINThenReset forces the ordering behind the flake of
// TestAbortAccountsForEveryWR: the peer's FIN and then its RST have both
// arrived before the QP reads, so recv reports the end of the stream
// (the FIN) although the connection was reset. The QP must end with an
// error, not a graceful close.
func TestPeerFINThenReset(t *testing.T) {
	dev := newDevice(t)
	v := newVictim(t, dev, rdmap.QPConfig{})
	mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{v.recv.SGE(0, 64)}}))
	cq, cr := rdmaptest.ConnPair(t, false)
	tq, tr := cq.(*net.TCPConn), cr.(*net.TCPConn)
	gc := &gatedConn{TCPConn: tq, open: make(chan struct{})}
	t.Cleanup(func() { v.qp.Close(); tr.Close() })
	if err := v.qp.Start(gc, (&rdmaptest.Options{}).Params(false)); err != nil {
		t.Fatal(err)
	}
	_ = tr.CloseWrite()
	_ = tr.SetLinger(0)
	_ = tr.Close()
	const tcpClose = 7 // TCP_CLOSE: the RST has been processed
	waitFor(t, "the RST to arrive", func() bool { return tcpState(t, tq) == tcpClose })
	close(gc.open)
	rdmaptest.WaitDone(t, v.qp, 20*time.Second)
	err := v.qp.Err()
	if err == nil {
		t.Fatal("Err() nil after a reset by the peer")
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Err() = %v, want the reset", err)
	}
	wc := poll(t, v.cq)
	expectWC(t, wc, 1, rdmap.WCRecv, rdmap.WCWRFlushErr)
}
