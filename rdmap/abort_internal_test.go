package rdmap

import (
	"net"
	"testing"
)

// fwConn records whether the send engine half-closed it.
type fwConn struct {
	net.Conn
	closeWrites int
}

func (c *fwConn) CloseWrite() error { c.closeWrites++; return nil }

// TestAbortSendsNoFIN: once an abrupt end is under way the send engine's
// shutdown sends no FIN: a FIN just before the RST is what made the peer
// of an aborting QP take it for a graceful close (the
// TestAbortAccountsForEveryWR flake).
func TestAbortSendsNoFIN(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	for _, aborting := range []bool{false, true} {
		qp := &QP{cfg: QPConfig{DisconnectTimeout: defaultDisconnectTimeout}}
		qp.aborting.Store(aborting)
		c := &fwConn{Conn: a}
		qp.txShutdown(c, true)
		if want := map[bool]int{false: 1, true: 0}[aborting]; c.closeWrites != want {
			t.Errorf("aborting %v: %d FINs, want %d", aborting, c.closeWrites, want)
		}
	}
}
