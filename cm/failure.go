package cm

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/gosiw/gosiw/mpa"
)

// handshakeFailures classifies a failed MPA handshake, for both sides at
// once: the Status of the initiator's ConnectReply (iw_cm's status, which
// siw's errno decides) and the reason a listener's Config.OnRefused gets
// for an inbound handshake it answered itself. The first row whose causes
// match err (errors.Is anywhere in its chain) wins; no row: StatusProtocolError,
// "protocol".
//
// The two columns answer different questions, so they group causes
// differently on purpose: the Status is what iw_cm's ULPs act on (a reset
// is worth retrying, a protocol error is not), the reason is for the
// operator and names the exact cause. Where one Status covers several
// reasons, each has its own row: a connection cut in the middle of a frame
// is a reset to the initiator (siw: -ECONNRESET) but "truncated" to
// OnRefused, which tells it from a close before any byte ("closed"). Some
// rows can only match on one side: a Reply with R set, a refused Reply
// revision, an ORD above this side's IRD and a missing RTR are the
// initiator's; the responder never sees them.
var handshakeFailures = []struct {
	causes []error // sentinels; nil: the row's own test
	test   func(error) bool
	status Status
	reason string
}{
	{test: isRejected, status: StatusRejected, reason: "rejected"},
	{test: isTimeout, status: StatusTimeout, reason: "timeout"},
	{causes: []error{mpa.ErrBadKey}, status: StatusProtocolError, reason: "bad_key"},
	{causes: []error{mpa.ErrUnknownRevision}, status: StatusProtocolError, reason: "revision"},
	{causes: []error{mpa.ErrPDTooLong, mpa.ErrPrivateDataLimit}, status: StatusProtocolError, reason: "pd_length"},
	{causes: []error{mpa.ErrEnhancedShort}, status: StatusProtocolError, reason: "enhanced_short"},
	{causes: []error{mpa.ErrSMBDShort, mpa.ErrSMBDZero}, status: StatusProtocolError, reason: "smbd_header"},
	{causes: []error{mpa.ErrExtraData}, status: StatusProtocolError, reason: "extra_data"},
	// Policy refusals (mpa.HandshakeError.Refused).
	{causes: []error{mpa.ErrMarkersRefused}, status: StatusRefused, reason: "markers"},
	{causes: []error{mpa.ErrCRCRefused}, status: StatusRefused, reason: "crc"},
	{causes: []error{mpa.ErrRevisionRefused}, status: StatusRefused, reason: "revision"},
	{causes: []error{mpa.ErrTruncated}, status: StatusProtocolError, reason: "truncated"},
	{causes: []error{io.ErrUnexpectedEOF}, status: StatusReset, reason: "truncated"},
	{causes: []error{io.EOF, syscall.ECONNRESET, syscall.EPIPE, net.ErrClosed, context.Canceled},
		status: StatusReset, reason: "closed"},
}

// classify returns the Status and the OnRefused reason of a failed
// handshake (see handshakeFailures).
func classify(err error) (Status, string) {
	for _, row := range handshakeFailures {
		if row.test != nil && row.test(err) {
			return row.status, row.reason
		}
		for _, c := range row.causes {
			if errors.Is(err, c) {
				return row.status, row.reason
			}
		}
	}
	return StatusProtocolError, "protocol"
}

func isRejected(err error) bool {
	var rej *mpa.RejectedError
	return errors.As(err, &rej)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}
