package rdmap

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/gosiw/gosiw/rdmap/internal/sys"
)

// The receive engine owns the connection's read deadline. Three parties
// want it:
//
//   - the receive engine itself, for QPConfig.RxStallTimeout: a partial
//     FPDU that makes no progress for that long ends the QP;
//   - the send engine, which bounds the wait for the peer's FIN once it
//     has shut its side down (txShutdown stores shutdownAt first, then
//     sets the deadline);
//   - fences (MR.fence), which set the deadline to now to interrupt a
//     placement read parked in the poller.
//
// A read that fails with a deadline error goes through expired: past
// shutdownAt it is the send engine's (the read's error stands); a stalled
// partial FPDU gives ErrRxStalled; anything else (a poke, or the stall
// timer running out while the stream makes progress or is idle) re-arms
// the engine's deadline and the read is retried. The engine arms its
// deadline once and re-arms it only when it fires, so a read costs no
// deadline call.
//
// Nor does a read cost a clock read, unless it waits for the rest of a
// partial FPDU: the time of the last progress (progressAt) matters only
// while an FPDU is partial, so a read that returns data only notes that
// it did (moved), and the next read (or the release of a PollRx engine:
// rxRelease) stamps progressAt if the engine then holds part of an FPDU
// (stamp). That is the moment the engine starts waiting for the rest,
// right after it took what the data brought; the stall timeout runs from
// there. A read that completes whole FPDUs, the latency-bound stream's,
// reads no clock at all.

// ErrRxStalled is the cause of the LLP Terminate (TCP connection lost) a
// QP sends when the peer sent part of an FPDU and then nothing more for
// QPConfig.RxStallTimeout.
var ErrRxStalled = errors.New("rdmap: the peer sent part of an FPDU and then nothing for longer than the receive stall timeout")

// errCut is the placement error of a segment whose target memory was
// invalidated or deregistered while it was being placed.
var errCut = errors.New("rdmap: target memory invalidated during placement")

// defaultRxStall is QPConfig.RxStallTimeout's default.
const defaultRxStall = 60 * time.Second

// partial reports whether part of an FPDU has arrived and its rest is
// awaited.
func (rx *rxEngine) partial() bool {
	if rx.draining {
		return false
	}
	return rx.rd != nil && rx.rd.Partial()
}

// arm sets the engine's first stall deadline (the reads test its
// condition before the call).
func (rx *rxEngine) arm() {
	if rx.stallTimeout > 0 && !rx.stallArmed {
		rx.stallArmed = true
		now := time.Now()
		rx.progressAt = monoOf(now)
		rx.setDeadline(now.Add(rx.stallTimeout))
	}
}

// stamp runs before a read: if a read returned data since the last
// stamp (moved) and the engine now holds part of an FPDU, the stall
// timeout runs from now (see above). The reads test moved before the
// call.
func (rx *rxEngine) stamp() {
	if rx.moved {
		rx.moved = false
		if rx.stallTimeout > 0 && rx.partial() {
			rx.progressAt = monoNow()
		}
	}
}

// expired handles a read that failed with a deadline error: nil means
// retry (the deadline is re-armed); otherwise the error ends reading.
// The read returned no data since its stamp, so progressAt is current.
func (rx *rxEngine) expired() error {
	now := time.Now()
	if s := rx.shutdownAt.Load(); s != 0 && now.UnixNano() >= s {
		return os.ErrDeadlineExceeded
	}
	var dl time.Time
	if rx.stallTimeout > 0 {
		base := now
		if rx.partial() {
			since := time.Duration(monoOf(now) - rx.progressAt)
			if since >= rx.stallTimeout {
				return ErrRxStalled
			}
			base = now.Add(-since)
		}
		dl = base.Add(rx.stallTimeout)
	}
	rx.setDeadline(dl)
	return nil
}

// setDeadline sets the read deadline to dl (zero: none), or to the send
// engine's shutdownAt if that comes first. A shutdownAt stored while this
// runs is applied too: the send engine stores it before it sets the
// deadline itself, so one of the two calls sees the other.
func (rx *rxEngine) setDeadline(dl time.Time) {
	for {
		s := rx.shutdownAt.Load()
		t := dl
		if s != 0 {
			if st := time.Unix(0, s); t.IsZero() || st.Before(t) {
				t = st
			}
		}
		_ = rx.conn.SetReadDeadline(t)
		if rx.shutdownAt.Load() == s {
			return
		}
	}
}

// read reads from the connection into the engine's own buffers (never
// into registered memory), retrying reads the deadline interrupted for
// nothing.
func (rx *rxEngine) read(p []byte) (int, error) {
	if rx.settled {
		rx.settled = false // the first read of a drive: nothing to settle
	} else {
		rx.settle()
	}
	if !rx.stallArmed && rx.stallTimeout > 0 {
		rx.arm()
	}
	if rx.moved {
		rx.stamp()
	}
	// A kick that came before arm set the first deadline had its poke
	// replaced: look at the request before blocking (PollRx).
	if rx.yieldNow() {
		return 0, errYield
	}
	for {
		n, err := rx.conn.Read(p)
		if n > 0 {
			rx.moved = true
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			if n > 0 {
				return n, nil
			}
			if rx.yieldNow() {
				return 0, errYield // PollRx: another holder takes the engine
			}
			if err = rx.expired(); err == nil {
				if rx.yieldNow() {
					// A kick between the check and the re-armed
					// deadline (which replaced its poke).
					return 0, errYield
				}
				continue
			}
		}
		return n, err
	}
}

// rxConn is the connection as the FPDU reader reads it
// (mpa.VectorReader): Read fills the reader's buffer (rx.read); ReadVec
// reads a payload straight into registered memory, inside a placement
// (rx.place.mr, validated with the STag word rx.place.want), and checks before
// every system call that the word is unchanged (errCut when it is not).
type rxConn struct{ rx *rxEngine }

func (c rxConn) Read(p []byte) (int, error) { return c.rx.read(p) }

// ReadVec reads into dst and then ahead with one readv (or, for a
// connection without a raw file descriptor such as net.Pipe, reads into
// dst alone), retrying reads the deadline interrupted for nothing.
func (c rxConn) ReadVec(dst, ahead []byte) (int, error) {
	rx := c.rx
	rx.settled = false
	rx.settle()
	if !rx.stallArmed && rx.stallTimeout > 0 {
		rx.arm()
	}
	if rx.moved {
		rx.stamp()
	}
	for {
		var n int
		var err error
		if rx.rawConn != nil {
			// RawConn.Read returns a deadline error without calling
			// readvFD when the deadline fires first (a fence's poke, a
			// PollRx kick, the stall timer): the last call's count must
			// not be returned again.
			rx.iov[0], rx.iov[1] = dst, ahead
			rx.iovN, rx.iovErr = 0, nil
			err = rx.rawConn.Read(rx.readvFn)
			rx.iov = [2][]byte{}
			n = rx.iovN
			if err == nil {
				err = rx.iovErr
			}
			if err == nil && n == 0 {
				err = io.EOF
			}
		} else {
			if !placeValid(rx.place.mr, rx.place.want) {
				return 0, errCut
			}
			n, err = rx.conn.Read(dst)
		}
		if n > 0 {
			rx.moved = true
			return n, nil
		}
		if err == nil {
			continue
		}
		if err == errCut || !errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, err
		}
		if !placeValid(rx.place.mr, rx.place.want) {
			return 0, errCut
		}
		if err = rx.expired(); err != nil {
			return 0, err
		}
	}
}

// readvFD is ReadVec's raw read: false asks the poller to wait for the
// socket to become readable.
func (rx *rxEngine) readvFD(fd uintptr) bool {
	for {
		if !placeValid(rx.place.mr, rx.place.want) {
			rx.iovN, rx.iovErr = 0, errCut
			return true
		}
		n, err := sys.Readv(fd, rx.iov[:])
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		rx.iovN, rx.iovErr = n, err
		if err != nil {
			rx.iovN, rx.iovErr = 0, os.NewSyscallError("readv", err)
		}
		return true
	}
}
