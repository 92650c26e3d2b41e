package cm

import (
	"net"

	"github.com/gosiw/gosiw/mpa"
)

// QP is what the connection manager binds a negotiated connection to: the
// queue pair that takes the MPA stream over (rdmap.QP implements it).
//
// The connection manager calls Start once, after the handshake, with the
// TCP connection and what the handshake settled; from then on the QP owns
// the connection. Start moves the QP to RTS and returns at once (the QP
// runs its own goroutines). As the responder, the QP sends nothing until it
// has received the initiator's first FPDU; as the initiator in P2P mode,
// its first FPDU is the negotiated RTR.
//
// Start is called with the ID's lock held: it must return promptly and
// must not call into the connection manager. If it returns an error the
// connection manager closes conn.
//
// Disconnect starts a graceful (outstanding sends first, then FIN) or an
// abrupt (RST) close and does not wait. Done is closed once the connection
// has ended for any reason (local disconnect, peer close, Terminate, error)
// and every outstanding work request has completed or been flushed; Err
// then says why (nil for a graceful close by either side).
type QP interface {
	Start(conn net.Conn, p *mpa.Params) error
	Disconnect(abrupt bool)
	Done() <-chan struct{}
	Err() error
}

// DoneNotifier is implemented by a QP that runs a function once Done is
// closed without a goroutine waiting on Done meanwhile (rdmap.QP):
// AfterDone runs f, in its own goroutine, exactly once, after Done is
// closed. An ID then watches its established QP that way, so an idle
// connection keeps no watcher goroutine.
type DoneNotifier interface {
	AfterDone(f func())
}

// IRDORDLimiter is implemented by a QP that enforces IRD and ORD limits of
// its own (rdmap.QP: QPConfig.MaxIRD and MaxORD). Connect and Accept then
// lower ConnParam.IRD and ORD to those limits and negotiate within them,
// so the MPA Request and Reply advertise only what the QP serves: a peer
// that uses the whole advertised IRD is answered, not terminated. A limit
// of 0 or less means none of the QP's own.
type IRDORDLimiter interface {
	IRDORDLimits() (maxIRD, maxORD int)
}

// qpLimits returns the IRD and ORD limits of qp, 0 for none, and p's IRD
// and ORD lowered to them.
func qpLimits(qp QP, ird, ord int) (maxIRD, maxORD, clampedIRD, clampedORD int) {
	l, ok := qp.(IRDORDLimiter)
	if !ok {
		return 0, 0, ird, ord
	}
	maxIRD, maxORD = l.IRDORDLimits()
	if maxIRD > 0 {
		ird = min(ird, maxIRD)
	}
	if maxORD > 0 {
		ord = min(ord, maxORD)
	}
	return maxIRD, maxORD, ird, ord
}
