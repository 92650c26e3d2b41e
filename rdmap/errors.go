package rdmap

import (
	"errors"
	"fmt"
	"net"

	"github.com/gosiw/gosiw/rdmap/wire"
)

// Errors returned by the verbs. Connection-fatal errors (what Err reports
// once a QP has failed) are *TerminateError or wrap an I/O error; the
// outcome of a single work request is its completion's WCStatus.
var (
	ErrClosed       = errors.New("rdmap: object closed")
	ErrQPState      = errors.New("rdmap: operation not allowed in the QP's state")
	ErrQueueFull    = errors.New("rdmap: work queue full")
	ErrTooManySGE   = errors.New("rdmap: too many scatter/gather elements")
	ErrInvalidWR    = errors.New("rdmap: invalid work request")
	ErrNotSupported = errors.New("rdmap: RFC 7306 operations are not enabled on this QP")
	ErrInvalidSGE   = errors.New("rdmap: invalid scatter/gather element")
	ErrAccess       = errors.New("rdmap: invalid access flags")
	ErrMRValid      = errors.New("rdmap: memory region is still valid")
	ErrMRInvalid    = errors.New("rdmap: memory region is not valid")
	ErrBusy         = errors.New("rdmap: resource in use")
	ErrCQOverflow   = errors.New("rdmap: completion queue overflow")
	ErrAborted      = errors.New("rdmap: connection aborted locally")
	ErrConfig       = errors.New("rdmap: invalid configuration")
	ErrWrongPD      = errors.New("rdmap: object belongs to another protection domain")
)

// errConfigf returns an error that matches ErrConfig with errors.Is and
// names what is wrong: the field or parameter and its value, as in
// "rdmap: invalid configuration: QPConfig.MaxSendWR -1 outside 0..1048576".
func errConfigf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

// TerminateError is a QP-fatal error that travelled (or would travel) in
// an RDMAP Terminate message (RFC 5040 §4.8): Remote says whether the peer
// sent it or this side detected the error and sent it. Layer, EType and
// Code are the Terminate's fields; Layout is the control word layout of a
// received Terminate.
type TerminateError struct {
	Remote bool
	Layer  wire.Layer
	EType  uint8
	Code   uint8
	Layout wire.Layout
	// Bogus reports a received Terminate that was itself malformed (bad
	// QN, MSN or MO); the QP failed all the same.
	Bogus bool
	err   error // local cause, optional
}

// Error describes the Terminate: "rdmap: terminate (remote): DDP/tagged
// buffer: invalid STag".
func (e *TerminateError) Error() string {
	side := "local"
	if e.Remote {
		side = "remote"
	}
	s := fmt.Sprintf("rdmap: terminate (%s): %s/%s: %s", side, e.Layer, wire.ETypeName(e.Layer, e.EType), wire.CodeName(e.Layer, e.EType, e.Code))
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

// Unwrap lets errors.Is(err, net.ErrClosed) hold for every connection-
// fatal error, and exposes the local cause.
func (e *TerminateError) Unwrap() []error {
	if e.err == nil {
		return []error{net.ErrClosed}
	}
	return []error{net.ErrClosed, e.err}
}

// Is matches another *TerminateError with the same side, layer, type and
// code.
func (e *TerminateError) Is(target error) bool {
	t, ok := target.(*TerminateError)
	return ok && t.Remote == e.Remote && t.Layer == e.Layer && t.EType == e.EType && t.Code == e.Code
}
