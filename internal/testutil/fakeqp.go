// Package testutil holds test helpers shared by gosiw's packages: a fake QP
// that stands in for rdmap.QP behind the connection manager, and builders
// for the first FPDUs of a connection (RTRs, Sends).
//
// It imports the wire packages (mpa, ddp, rdmap) but never cm, so that cm's
// internal tests may use it.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// ErrAborted is a FakeQP's Err after an abrupt local Disconnect.
var ErrAborted = errors.New("testutil: QP aborted locally")

// TerminateError is a FakeQP's Err after it received a Terminate.
type TerminateError struct {
	// Terminate is the message as decoded.
	Terminate wire.Terminate
}

// Error describes the Terminate.
func (e *TerminateError) Error() string {
	return "testutil: terminate received: " + e.Terminate.String()
}

// FakeQP implements cm.QP (Start, Disconnect, Done, Err) well enough for
// connection-manager tests and interop checks: it deframes the peer's
// FPDUs with the negotiated CRC and markers and records them; as initiator
// it sends the negotiated RTR (P2P) or FirstSend first, after the
// FirstSendDelay; as responder it sends nothing before the initiator's
// first FPDU. Set the option fields before Start. It is safe for
// concurrent use.
type FakeQP struct {
	// FirstSend, for an initiator outside P2P mode, is sent as an RDMAP
	// Send right after start (nil: nothing is sent).
	FirstSend []byte
	// StartErr, if set, is what Start returns.
	StartErr error
	// Keep is how many received ULPDUs are recorded; 0 means 16.
	Keep int

	mu       sync.Mutex
	conn     net.Conn
	params   *mpa.Params
	started  bool
	closing  bool
	abrupt   bool
	received [][]byte
	nrecv    int
	err      error
	stop     chan struct{}
	first    chan struct{}
	done     chan struct{}

	wmu    sync.Mutex // serializes writes
	framer mpa.Framer // +checklocks:wmu
	msn    uint32     // +checklocks:wmu
}

// NewFakeQP returns a FakeQP.
func NewFakeQP() *FakeQP {
	return &FakeQP{stop: make(chan struct{}), first: make(chan struct{}), done: make(chan struct{})}
}

// Start takes the connection over (cm.QP).
func (q *FakeQP) Start(conn net.Conn, p *mpa.Params) error {
	if q.StartErr != nil {
		return q.StartErr
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started {
		return errors.New("testutil: QP started twice")
	}
	q.started = true
	q.conn = conn
	pc := *p
	q.params = &pc
	q.framer = mpa.Framer{CRC: p.CRC, Markers: p.MarkersTx}
	go q.run(conn, &pc)
	return nil
}

// Params returns what Start was given, or nil before.
func (q *FakeQP) Params() *mpa.Params {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.params
}

// Done is closed when the connection has ended (cm.QP).
func (q *FakeQP) Done() <-chan struct{} { return q.done }

// Err says why the connection ended: nil for a FIN from the peer after a
// clean stream, ErrAborted after Disconnect(true), a *TerminateError, or
// the read error (cm.QP).
func (q *FakeQP) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// First is closed when the first FPDU from the peer has arrived.
func (q *FakeQP) First() <-chan struct{} { return q.first }

// Received returns copies of the first Keep ULPDUs received, and how many
// arrived in all.
func (q *FakeQP) Received() ([][]byte, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([][]byte, len(q.received))
	copy(out, q.received)
	return out, q.nrecv
}

// Disconnect closes gracefully (FIN after any write in progress) or
// abruptly (RST) (cm.QP).
func (q *FakeQP) Disconnect(abrupt bool) {
	q.mu.Lock()
	if !q.started || (q.closing && (q.abrupt || !abrupt)) {
		q.mu.Unlock()
		return
	}
	first := !q.closing
	q.closing, q.abrupt = true, abrupt
	conn := q.conn
	q.mu.Unlock()
	if first {
		close(q.stop)
	}
	if abrupt {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
		return
	}
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = conn.Close()
	}
}

// Send sends payload as one RDMAP Send message (one FPDU). A responder
// waits for the initiator's first FPDU first.
func (q *FakeQP) Send(payload []byte) error {
	q.mu.Lock()
	p, conn := q.params, q.conn
	q.mu.Unlock()
	if p == nil {
		return errors.New("testutil: QP not started")
	}
	if !p.Initiator {
		select {
		case <-q.first:
		case <-q.done:
			return net.ErrClosed
		}
	}
	return q.write(conn, func(f *mpa.Framer, b []byte) []byte {
		q.msn++
		return AppendSend(b, f, q.msn, payload)
	})
}

func (q *FakeQP) write(conn net.Conn, build func(f *mpa.Framer, b []byte) []byte) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	_, err := conn.Write(build(&q.framer, nil))
	return err
}

func (q *FakeQP) run(conn net.Conn, p *mpa.Params) {
	defer close(q.done)
	defer conn.Close()
	if p.Initiator && (p.P2P || q.FirstSend != nil) {
		if p.FirstSendDelay > 0 {
			t := time.NewTimer(p.FirstSendDelay)
			select {
			case <-t.C:
			case <-q.stop:
				t.Stop()
			}
		}
		err := q.write(conn, func(f *mpa.Framer, b []byte) []byte {
			if p.P2P {
				return AppendRTR(b, f, p.RTR)
			}
			q.msn++
			return AppendSend(b, f, q.msn, q.FirstSend)
		})
		_ = err // a failed write shows up as a read error below
	}
	// The deframer's buffer (128 KiB) is made only once bytes arrive, so
	// idle connections stay small.
	var one [1]byte
	n, err := io.ReadFull(conn, one[:])
	if err == nil {
		d := mpa.NewDeframer(io.MultiReader(bytes.NewReader(one[:n]), conn),
			mpa.DeframerConfig{CRC: p.CRC, Markers: p.MarkersRx})
		err = q.readLoop(d)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.abrupt:
		q.err = ErrAborted
	case errors.Is(err, io.EOF):
		q.err = nil
	default:
		q.err = err
	}
}

func (q *FakeQP) readLoop(d *mpa.Deframer) error {
	for {
		f, err := d.Next()
		if err != nil {
			if errors.Is(err, mpa.ErrBadCRC) {
				return fmt.Errorf("testutil: %w", err)
			}
			return err
		}
		q.mu.Lock()
		q.nrecv++
		keep := q.Keep
		if keep == 0 {
			keep = 16
		}
		if len(q.received) < keep {
			q.received = append(q.received, bytes.Clone(f.ULPDU))
		}
		if q.nrecv == 1 {
			close(q.first)
		}
		q.mu.Unlock()
		if t, ok := ParseTerminate(f.ULPDU); ok {
			return &TerminateError{Terminate: t}
		}
	}
}

// ParseTerminate reports whether ulpdu is an RDMAP Terminate (untagged, QN
// 2, opcode 7) and decodes it.
func ParseTerminate(ulpdu []byte) (wire.Terminate, bool) {
	var t wire.Terminate
	h, err := ddp.Parse(ulpdu)
	if err != nil || h.Tagged() || h.QN() != wire.QNTerminate {
		return t, false
	}
	if _, _, op := wire.Control(h.RsvdULP()); op != wire.OpTerminate {
		return t, false
	}
	if wire.ParseTerminate(ulpdu[h.Len():], &t) != nil {
		return t, false
	}
	return t, true
}
