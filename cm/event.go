package cm

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/gosiw/gosiw/mpa"
)

// EventType is the type of an Event, as iw_cm's enum iw_cm_event_type.
type EventType uint8

// Event types.
const (
	// EventConnectRequest: a valid MPA Request arrived at a listening ID.
	// The handler gets the new child ID (in StateConnRecv), which it
	// answers with Accept or Reject (IW_CM_EVENT_CONNECT_REQUEST).
	EventConnectRequest EventType = iota + 1
	// EventConnectReply: Connect's outcome, in Status
	// (IW_CM_EVENT_CONNECT_REPLY). StatusOK is followed by Established.
	EventConnectReply
	// EventEstablished: the connection is bound to its QP
	// (IW_CM_EVENT_ESTABLISHED).
	EventEstablished
	// EventDisconnect: the connection is closing, by a local Disconnect,
	// the peer, or an error (IW_CM_EVENT_DISCONNECT). Close follows.
	EventDisconnect
	// EventClose: the connection has ended and its QP is done; the last
	// event an ID ever sees (IW_CM_EVENT_CLOSE).
	EventClose
)

// String returns iw_cm's name for the event type ("CONNECT_REQUEST").
func (t EventType) String() string {
	switch t {
	case EventConnectRequest:
		return "CONNECT_REQUEST"
	case EventConnectReply:
		return "CONNECT_REPLY"
	case EventEstablished:
		return "ESTABLISHED"
	case EventDisconnect:
		return "DISCONNECT"
	case EventClose:
		return "CLOSE"
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// Status is the outcome carried by ConnectReply (iw_cm_event.status).
type Status uint8

// Statuses.
const (
	StatusOK Status = iota
	// StatusRejected: the peer answered with an MPA Reply with R set; the
	// event carries its private data (siw: -ECONNRESET, rdma_cm REJECTED).
	StatusRejected
	// StatusReset: the TCP connection closed or was reset before a whole
	// Reply (siw: -ECONNRESET).
	StatusReset
	// StatusTimeout: no Reply within the timeout (siw: -ETIMEDOUT, rdma_cm
	// UNREACHABLE).
	StatusTimeout
	// StatusRefused: the Reply's terms were refused by the local policy
	// (markers, CRC, revision) (siw: -ECONNREFUSED).
	StatusRefused
	// StatusProtocolError: the Reply was malformed or impossible (bad key,
	// unknown revision, PD_Length over the limit, bytes after it, an ORD
	// this side cannot grant, no matching RTR); an LLP Terminate was sent
	// where siw sends one (siw: -EPROTO, -EINVAL).
	StatusProtocolError
	// StatusUnreachable: the TCP connection could not be set up.
	StatusUnreachable
	// StatusLocalError: the QP refused to start.
	StatusLocalError
)

// String names the status ("rejected").
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusRejected:
		return "rejected"
	case StatusReset:
		return "reset"
	case StatusTimeout:
		return "timeout"
	case StatusRefused:
		return "refused"
	case StatusProtocolError:
		return "protocol error"
	case StatusUnreachable:
		return "unreachable"
	case StatusLocalError:
		return "local error"
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// Errno returns the errno Linux siw and iw_cm report for s (0 for
// StatusOK). Pass its negation to RejectMsg as iw_cm does.
func (s Status) Errno() syscall.Errno {
	switch s {
	case StatusOK:
		return 0
	case StatusRejected, StatusReset:
		return syscall.ECONNRESET
	case StatusTimeout:
		return syscall.ETIMEDOUT
	case StatusRefused:
		return syscall.ECONNREFUSED
	case StatusUnreachable:
		return syscall.EHOSTUNREACH
	case StatusLocalError:
		return syscall.ENOMEM
	}
	return syscall.EINVAL
}

// RejectMsg describes the reason of a rejected or failed connect as
// iw_cm's iwcm_reject_msg does: reason is a negative errno (a positive one
// is taken as its negation).
func RejectMsg(reason int) string {
	if reason < 0 {
		reason = -reason
	}
	switch syscall.Errno(reason) {
	case syscall.ECONNRESET:
		return "reset by remote host"
	case syscall.ECONNREFUSED:
		return "refused by remote application"
	case syscall.ETIMEDOUT:
		return "setup timeout"
	}
	return "unrecognized reason"
}

// Event is one connection event. Each event is a fresh value: the handler
// may keep it and everything it points to (PrivateData and Peer are
// copies made for this event).
type Event struct {
	// Type says which event this is.
	Type EventType
	// Status is ConnectReply's outcome (StatusOK for the other types).
	Status Status
	// Err says why: for a failed ConnectReply the cause (for
	// StatusRejected the *mpa.RejectedError, whose Reply is the rejecting
	// frame and Reply.PrivateData the ULP's reason); for Disconnect and Close why the connection
	// ended (nil for a graceful close by either side, else the QP's Err).
	Err error
	// Listener is the listening ID of a ConnectRequest (the handler's id
	// is the new child).
	Listener *ID
	// LocalAddr and RemoteAddr are the connection's TCP addresses.
	LocalAddr, RemoteAddr net.Addr
	// PrivateData is the peer's ULP private data, without the RFC 6581
	// block or the [MS-SMBD] header (Config.MPA.SMBD): the Request's for ConnectRequest, the Reply's (accepting or
	// rejecting) for ConnectReply.
	PrivateData []byte
	// IRD and ORD: for ConnectRequest, what the initiator asked for (its
	// own IRD and ORD, from its RFC 6581 block or [MS-SMBD] header; 0
	// when it has neither); for
	// ConnectReply and Established, what this side settled on.
	IRD, ORD int
	// Peer is the peer's frame as received: the Request for
	// ConnectRequest (revision, enhanced mode, C and M requests, P2P and
	// the RTR types offered), the Reply for ConnectReply when one arrived.
	Peer *mpa.Frame
	// Params is what the handshake settled (ConnectReply with StatusOK,
	// Established).
	Params *mpa.Params

	child *ID // ConnectRequest: the ID the handler gets
}

// Handler receives an ID's events. It runs on that ID's event goroutine
// (ConnectRequest: on the listener's), for one event at a time, in order.
// It may call Accept, Reject and Disconnect on its id, and DestroyFrom
// with ev (not Destroy, which waits for the handler to return). Returning
// a non-nil error destroys id once the handler has returned, before any
// other event of id is delivered, as a non-zero return of an iw_cm
// handler does: return ErrDestroy for that, any other error to have it
// logged as a failure. A ConnectRequest child in StateConnRecv is then
// rejected. It should not block for long: the ID's later events, and for
// a listener the next requests, wait for it.
type Handler func(id *ID, ev *Event) error

// ErrDestroy, returned by a Handler (or wrapped in the error it returns),
// destroys the handler's ID once the handler has returned, without the
// log line of a failed handler.
var ErrDestroy = errors.New("cm: destroy the ID")

// ConnectError is a failed connect other than a reject (Dial's error).
type ConnectError struct {
	// Status classifies the failure (never StatusOK or StatusRejected).
	Status Status
	// Err is the cause.
	Err error
}

// Error describes the failure.
func (e *ConnectError) Error() string { return fmt.Sprintf("cm: connect: %v: %v", e.Status, e.Err) }

// Unwrap returns the cause.
func (e *ConnectError) Unwrap() error { return e.Err }

// Timeout reports whether the connect timed out.
func (e *ConnectError) Timeout() bool { return e.Status == StatusTimeout }
