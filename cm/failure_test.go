package cm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// TestClassify pins the one classification of a failed handshake: the
// initiator's Status and the listener's OnRefused reason for every cause
// the mpa handshake returns, wrapped as mpa returns it.
func TestClassify(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		cause  error
		status Status
		reason string
	}{
		{timeout, StatusTimeout, "timeout"},
		{context.DeadlineExceeded, StatusTimeout, "timeout"},
		{mpa.ErrBadKey, StatusProtocolError, "bad_key"},
		{&mpa.RevisionError{Rev: 3}, StatusProtocolError, "revision"},
		{mpa.ErrPDTooLong, StatusProtocolError, "pd_length"},
		{fmt.Errorf("%w: 600 bytes", mpa.ErrPrivateDataLimit), StatusProtocolError, "pd_length"},
		{mpa.ErrEnhancedShort, StatusProtocolError, "enhanced_short"},
		{fmt.Errorf("%w: 4 bytes", mpa.ErrExtraData), StatusProtocolError, "extra_data"},
		{mpa.ErrMarkersRefused, StatusRefused, "markers"},
		{fmt.Errorf("%w: request C=1", mpa.ErrCRCRefused), StatusRefused, "crc"},
		{mpa.ErrRevisionRefused, StatusRefused, "revision"},
		{mpa.ErrTruncated, StatusProtocolError, "truncated"},
		{io.ErrUnexpectedEOF, StatusReset, "truncated"},
		{io.EOF, StatusReset, "closed"},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, StatusReset, "closed"},
		{syscall.EPIPE, StatusReset, "closed"},
		{net.ErrClosed, StatusReset, "closed"},
		{context.Canceled, StatusReset, "closed"},
		{mpa.ErrInsufficientIRD, StatusProtocolError, "protocol"},
		{mpa.ErrNoMatchingRTR, StatusProtocolError, "protocol"},
		{errors.New("something else"), StatusProtocolError, "protocol"},
	} {
		for _, initiator := range []bool{true, false} {
			err := &mpa.HandshakeError{Initiator: initiator, Err: c.cause}
			st, reason := classify(err)
			if st != c.status || reason != c.reason {
				t.Errorf("%v: %v %q, want %v %q", err, st, reason, c.status, c.reason)
			}
			// StatusRefused is exactly mpa's "refused by local policy".
			if (st == StatusRefused) != err.Refused() {
				t.Errorf("%v: status %v but Refused() %v", err, st, err.Refused())
			}
		}
	}
	rej := &mpa.RejectedError{Reply: mpa.Frame{Reply: true, Reject: true}}
	if st, reason := classify(rej); st != StatusRejected || reason != "rejected" {
		t.Errorf("reject: %v %q", st, reason)
	}
}
