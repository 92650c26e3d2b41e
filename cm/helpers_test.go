package cm_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait in these tests; reaching it is a failure,
// never an expected outcome.
const waitLimit = 20 * time.Second

func newDev(t testing.TB) *rdmap.Device {
	t.Helper()
	d, err := rdmap.NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// cfgT returns a Config logging to the test.
func cfgT(t testing.TB, c cm.Config) *cm.Config {
	if _, ok := t.(*testing.T); ok && testing.Verbose() {
		c.Logger = zaptest.NewLogger(t)
	}
	return &c
}

// rec is one delivered event.
type rec struct {
	id *cm.ID
	ev *cm.Event
	g  int // index in the recorder's global order
}

// recorder is a Handler that records every event, per ID and in global
// order, and lets tests wait for one. Hooks run inside the handler.
type recorder struct {
	t         testing.TB
	mu        sync.Mutex
	all       []rec
	changed   chan struct{}
	onRequest func(id *cm.ID, ev *cm.Event) error
	onEvent   func(id *cm.ID, ev *cm.Event) error
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, changed: make(chan struct{})}
}

func (r *recorder) handle(id *cm.ID, ev *cm.Event) error {
	r.mu.Lock()
	r.all = append(r.all, rec{id: id, ev: ev, g: len(r.all)})
	close(r.changed)
	r.changed = make(chan struct{})
	hookReq, hook := r.onRequest, r.onEvent
	r.mu.Unlock()
	if ev.Type == cm.EventConnectRequest && hookReq != nil {
		return hookReq(id, ev)
	}
	if hook != nil {
		return hook(id, ev)
	}
	return nil
}

// types returns the event types delivered to id so far.
func (r *recorder) types(id *cm.ID) []cm.EventType {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []cm.EventType
	for _, x := range r.all {
		if x.id == id {
			out = append(out, x.ev.Type)
		}
	}
	return out
}

// wait returns the first event of type typ on id (any id if nil) that
// matches, waiting for it.
func (r *recorder) wait(id *cm.ID, typ cm.EventType) rec {
	r.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, x := range r.all {
			if x.ev.Type == typ && (id == nil || x.id == id) {
				r.mu.Unlock()
				return x
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			r.t.Fatalf("no %v event on %v within %v", typ, id, waitLimit)
		}
	}
}

// waitN waits until n events of type typ have arrived (on any ID).
func (r *recorder) waitN(typ cm.EventType, n int) []rec {
	r.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var got []rec
		for _, x := range r.all {
			if x.ev.Type == typ {
				got = append(got, x)
			}
		}
		ch := r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline.C:
			r.t.Fatalf("%d of %d %v events within %v", len(got), n, typ, waitLimit)
		}
	}
}

// listenID makes a listening ID on 127.0.0.1 with handler h.
func listenID(t testing.TB, dev *rdmap.Device, cfg *cm.Config, backlog int, h cm.Handler) *cm.ID {
	t.Helper()
	id := cm.NewID(dev, h)
	if err := id.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := id.Listen("127.0.0.1:0", backlog); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(id.Destroy)
	return id
}

// rawDial opens a plain TCP connection for hand-made MPA bytes.
func rawDial(t testing.TB, addr net.Addr) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// readToEOF reads from c until the peer closes (or waitLimit passes) and
// reports whether it was a clean EOF.
func readToEOF(c net.Conn) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	b, err := io.ReadAll(c)
	return b, err
}

// readFrame reads one MPA frame from c.
func readFrame(t testing.TB, c net.Conn) (mpa.Frame, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	hdr := make([]byte, mpa.HeaderLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		t.Fatalf("reading frame header: %v", err)
	}
	n, _ := mpa.FrameLen(hdr)
	b := make([]byte, n)
	copy(b, hdr)
	if _, err := io.ReadFull(c, b[mpa.HeaderLen:]); err != nil {
		t.Fatalf("reading private data: %v", err)
	}
	var f mpa.Frame
	if _, err := mpa.ParseFrame(b, &f); err != nil && !errors.Is(err, mpa.ErrReservedBits) {
		t.Fatalf("parsing % x: %v", b, err)
	}
	f.PrivateData = bytes.Clone(f.PrivateData)
	return f, b
}

func frameBytes(f mpa.Frame) []byte {
	b, err := mpa.AppendFrame(nil, &f)
	if err != nil {
		panic(err)
	}
	return b
}

// siwBytes reads a frame Linux siw sent in the lab (cm/testdata).
func siwBytes(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitDone waits for a QP to be done.
func waitDone(t testing.TB, q *testutil.FakeQP) {
	t.Helper()
	select {
	case <-q.Done():
	case <-time.After(waitLimit):
		t.Fatal("QP not done")
	}
}

func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("%s: not within %v", what, waitLimit)
	}
}

func eqTypes(a []cm.EventType, b ...cm.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// eventClock is one clock for handler entries and for the returns of the
// calls after which no event may reach an ID (Reject, Destroy,
// DestroyFrom), so that a test can check that no handler started with an
// ID after such a call returned. It is safe for concurrent use.
type eventClock struct {
	seq  atomic.Int64
	logs sync.Map // *cm.ID -> *idTimes
}

// idTimes is what an eventClock knows of one ID.
type idTimes struct {
	mu       sync.Mutex
	arrivals []int64 // the clock at each handler entry
	types    []cm.EventType
	ended    int64 // the clock when the last-event call returned; 0 if none did
}

func (c *eventClock) of(id *cm.ID) *idTimes {
	v, _ := c.logs.LoadOrStore(id, &idTimes{})
	return v.(*idTimes)
}

// arrive records a handler entry with id for ev.
func (c *eventClock) arrive(id *cm.ID, ev *cm.Event) {
	s := c.seq.Add(1)
	l := c.of(id)
	l.mu.Lock()
	l.arrivals = append(l.arrivals, s)
	l.types = append(l.types, ev.Type)
	l.mu.Unlock()
}

// end records that a call after which no event may reach id has returned.
func (c *eventClock) end(id *cm.ID) {
	s := c.seq.Add(1)
	l := c.of(id)
	l.mu.Lock()
	l.ended = s
	l.mu.Unlock()
}

// each calls f with every ID the clock has seen, what it delivered, and
// whether the last-event call returned (ended).
func (c *eventClock) each(f func(id *cm.ID, types []cm.EventType, ended bool)) {
	c.logs.Range(func(k, v any) bool {
		l := v.(*idTimes)
		l.mu.Lock()
		types, ended := slices.Clone(l.types), l.ended != 0
		l.mu.Unlock()
		f(k.(*cm.ID), types, ended)
		return true
	})
}

// late returns the events that reached id after its last-event call
// returned.
func (c *eventClock) late(id *cm.ID) []cm.EventType {
	l := c.of(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []cm.EventType
	for i, s := range l.arrivals {
		if l.ended != 0 && s > l.ended {
			out = append(out, l.types[i])
		}
	}
	return out
}

// replyingPeer plays the responder for one Connect: it listens on
// loopback, accepts one connection, reads its MPA Request, hands the
// connection to answer, and then sends on after all the initiator sends
// until it closes or waitLimit passes (nil when accepting or reading the
// Request failed). It closes the connection then; the listener closes
// with t's cleanup. addr is the listener's address.
func replyingPeer(t *testing.T, answer func(*net.TCPConn)) (addr string, after <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan []byte, 1)
	go func() {
		cn, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		tc := cn.(*net.TCPConn)
		defer tc.Close()
		if _, err := readFrameQuiet(tc); err != nil {
			ch <- nil
			return
		}
		answer(tc)
		_ = tc.SetReadDeadline(time.Now().Add(waitLimit))
		b, _ := io.ReadAll(tc)
		ch <- b
	}()
	return ln.Addr().String(), ch
}
