package cm_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// rawServer is a hand-driven MPA responder: for each connection it reads
// the Request, writes answer(request) (nothing if nil), and then holds the
// connection open until the test ends.
func rawServer(t testing.TB, answer func(req mpa.Frame) []byte) net.Addr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := readFrameQuiet(c)
				if answer != nil {
					if b := answer(req); b != nil {
						_, _ = c.Write(b)
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr()
}

// readFrameQuiet reads one MPA frame without failing the test.
func readFrameQuiet(c net.Conn) (mpa.Frame, error) {
	var f mpa.Frame
	buf := make([]byte, mpa.HeaderLen+mpa.MaxPrivateData)
	n := 0
	for {
		m, err := c.Read(buf[n:])
		n += m
		if n >= mpa.HeaderLen {
			if total, _ := mpa.FrameLen(buf[:n]); n >= total {
				_, perr := mpa.ParseFrame(buf[:n], &f)
				return f, perr
			}
		}
		if err != nil {
			return f, err
		}
	}
}

// acceptingReply answers a Request as a default responder with IRD/ORD
// mirrored.
func acceptingReply(req mpa.Frame) []byte {
	return frameBytes(mpa.Frame{Reply: true, Rev: req.Rev, Enhanced: req.Enhanced, CRC: req.CRC, IRD: req.ORD, ORD: req.IRD})
}

// stateMaker builds an ID in one state. It returns the ID and, for
// CONN_RECV, nothing else is needed: the IDs are cleaned up by the test.
type stateMaker struct {
	name  string
	state cm.State
	make  func(t *testing.T, dev *rdmap.Device) *cm.ID
}

func stateMakers() []stateMaker {
	noop := func(*cm.ID, *cm.Event) error { return nil }
	return []stateMaker{
		{"IDLE fresh", cm.StateIdle, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			id := cm.NewID(dev, noop)
			t.Cleanup(id.Destroy)
			return id
		}},
		{"IDLE used (rejected request)", cm.StateIdle, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			id := connRecv(t, dev)
			if err := id.Reject(nil); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{"IDLE used (closed)", cm.StateIdle, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			r := newRecorder(t)
			l := listenID(t, dev, nil, 0, func(id *cm.ID, ev *cm.Event) error {
				if ev.Type == cm.EventConnectRequest {
					return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP()})
				}
				return nil
			})
			id := cm.NewID(dev, r.handle)
			t.Cleanup(id.Destroy)
			if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
				t.Fatal(err)
			}
			r.wait(id, cm.EventEstablished)
			_ = id.Disconnect(false)
			r.wait(id, cm.EventClose)
			return id
		}},
		{"LISTEN", cm.StateListen, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			return listenID(t, dev, nil, 0, noop)
		}},
		{"CONN_RECV", cm.StateConnRecv, connRecv},
		{"CONN_SENT", cm.StateConnSent, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			addr := rawServer(t, nil) // never answers
			id := cm.NewID(dev, noop)
			t.Cleanup(id.Destroy)
			if err := id.Connect(addr.String(), cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{"ESTABLISHED", cm.StateEstablished, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			id, _ := establishedToRaw(t, dev)
			return id
		}},
		{"CLOSING", cm.StateClosing, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			// The raw peer never closes its side, so a graceful close
			// stays in CLOSING.
			id, r := establishedToRaw(t, dev)
			if err := id.Disconnect(false); err != nil {
				t.Fatal(err)
			}
			r.wait(id, cm.EventDisconnect)
			return id
		}},
		{"DESTROYING", cm.StateDestroying, func(t *testing.T, dev *rdmap.Device) *cm.ID {
			id := cm.NewID(dev, noop)
			id.Destroy()
			return id
		}},
	}
}

// connRecv returns a request's ID in CONN_RECV, handed out of the handler.
func connRecv(t *testing.T, dev *rdmap.Device) *cm.ID {
	t.Helper()
	reqs := make(chan *cm.ID, 1)
	l := listenID(t, dev, nil, 0, func(id *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventConnectRequest {
			reqs <- id
		}
		return nil
	})
	ini := cm.NewID(dev, func(*cm.ID, *cm.Event) error { return nil })
	t.Cleanup(ini.Destroy)
	if err := ini.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
		t.Fatal(err)
	}
	id := <-reqs
	t.Cleanup(id.Destroy)
	return id
}

// establishedToRaw connects an ID to a raw responder that accepts and then
// holds the connection open without ever closing it.
func establishedToRaw(t *testing.T, dev *rdmap.Device) (*cm.ID, *recorder) {
	t.Helper()
	addr := rawServer(t, acceptingReply)
	r := newRecorder(t)
	id := cm.NewID(dev, r.handle)
	t.Cleanup(id.Destroy)
	if err := id.Connect(addr.String(), cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1}); err != nil {
		t.Fatal(err)
	}
	r.wait(id, cm.EventEstablished)
	return id, r
}

// TestAPIEveryState calls every API function in every state and checks
// which are allowed (iwcm.c) and the state after.
func TestAPIEveryState(t *testing.T) {
	dev := newDev(t)
	type call struct {
		name string
		do   func(t *testing.T, dev *rdmap.Device, id *cm.ID) error
	}
	// Connect's target never answers: the ID stays in CONN_SENT for the
	// look at its state (one that answers may have moved it on to
	// ESTABLISHED by then).
	target := rawServer(t, nil)
	calls := []call{
		{"Listen", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error { return id.Listen("127.0.0.1:0", 0) }},
		{"Connect", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error {
			return id.Connect(target.String(), cm.ConnParam{QP: testutil.NewFakeQP()})
		}},
		{"Accept", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error {
			return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1})
		}},
		{"Reject", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error { return id.Reject([]byte("no")) }},
		{"Disconnect", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error { return id.Disconnect(false) }},
		{"DisconnectAbrupt", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error { return id.Disconnect(true) }},
		{"InitQPAttr", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error {
			a, err := id.InitQPAttr(rdmap.StateRTR)
			if err == nil && (a.Mask != cm.QPAttrState|cm.QPAttrAccessFlags || !a.RemoteRead || !a.RemoteWrite || a.State != rdmap.StateRTR) {
				t.Errorf("RTR attributes %+v", a)
			}
			if err == nil {
				if a, err := id.InitQPAttr(rdmap.StateIdle); err != nil || a.Mask != cm.QPAttrState|cm.QPAttrAccessFlags || a.State != rdmap.StateIdle {
					t.Errorf("INIT (IDLE) attributes %+v %v", a, err)
				}
				if a, _ := id.InitQPAttr(rdmap.StateRTS); a.Mask != 0 {
					t.Errorf("RTS attributes %+v", a)
				}
				if _, err := id.InitQPAttr(rdmap.StateError); err == nil {
					t.Error("ERROR attributes without an error")
				}
			}
			return err
		}},
		{"SetConfig", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error { return id.SetConfig(&cm.Config{}) }},
		{"Destroy", func(t *testing.T, _ *rdmap.Device, id *cm.ID) error { id.Destroy(); return nil }},
	}
	// allowed[call][state name] = state after, or "" when refused with a
	// *StateError. "*" means allowed with a state that may move on.
	const (
		I, L, R, S, E, C, D = "IDLE", "LISTEN", "CONN_RECV", "CONN_SENT", "ESTABLISHED", "CLOSING", "DESTROYING"
	)
	allowed := map[string]map[string]string{
		"Listen":           {"IDLE fresh": L},
		"Connect":          {"IDLE fresh": S},
		"Accept":           {"CONN_RECV": E},
		"Reject":           {"CONN_RECV": I},
		"Disconnect":       {"IDLE fresh": I, "IDLE used (rejected request)": I, "IDLE used (closed)": I, "CONN_RECV": R, "ESTABLISHED": C, "CLOSING": C},
		"DisconnectAbrupt": {"IDLE fresh": I, "IDLE used (rejected request)": I, "IDLE used (closed)": I, "CONN_RECV": R, "ESTABLISHED": "*", "CLOSING": "*"},
		"InitQPAttr":       {"IDLE fresh": I, "IDLE used (rejected request)": I, "IDLE used (closed)": I, "CONN_RECV": R, "CONN_SENT": S, "ESTABLISHED": E},
		"SetConfig":        {"IDLE fresh": I},
		"Destroy":          {"IDLE fresh": D, "IDLE used (rejected request)": D, "IDLE used (closed)": D, "LISTEN": D, "CONN_RECV": D, "CONN_SENT": D, "ESTABLISHED": D, "CLOSING": D, "DESTROYING": D},
	}
	for _, c := range calls {
		for _, m := range stateMakers() {
			t.Run(c.name+"/"+m.name, func(t *testing.T) {
				id := m.make(t, dev)
				if got := id.State(); got != m.state {
					t.Fatalf("made state %v, want %v", got, m.state)
				}
				err := c.do(t, dev, id)
				want, ok := allowed[c.name][m.name]
				if !ok {
					if !errors.Is(err, cm.ErrInvalidState) {
						t.Fatalf("%s in %s: %v, want ErrInvalidState", c.name, m.name, err)
					}
					if got := id.State(); got != m.state {
						t.Errorf("refused call changed the state to %v", got)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s in %s: %v", c.name, m.name, err)
				}
				if want != "*" && id.State().String() != want {
					t.Errorf("%s in %s: state %v, want %s", c.name, m.name, id.State(), want)
				}
			})
		}
	}
}

// TestAPIParamChecks checks that bad parameters are refused before
// anything is sent and leave the ID as it was.
func TestAPIParamChecks(t *testing.T) {
	dev := newDev(t)
	t.Run("accept", func(t *testing.T) {
		id := connRecv(t, dev)
		for _, p := range []cm.ConnParam{
			{},
			{QP: testutil.NewFakeQP(), IRD: 129},
			{QP: testutil.NewFakeQP(), ORD: -1},
			{QP: testutil.NewFakeQP(), PrivateData: make([]byte, 509)},
		} {
			if err := id.Accept(p); err == nil {
				t.Errorf("accept %+v: no error", p)
			}
			if id.State() != cm.StateConnRecv {
				t.Fatalf("state %v", id.State())
			}
		}
		if err := id.Reject(make([]byte, 509)); !errors.Is(err, mpa.ErrPrivateDataLimit) {
			t.Errorf("reject 509 bytes: %v", err)
		}
		if err := id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), PrivateData: make([]byte, 508)}); err != nil {
			t.Errorf("accept 508 bytes: %v", err)
		}
	})
	t.Run("connect", func(t *testing.T) {
		id := cm.NewID(dev, func(*cm.ID, *cm.Event) error { return nil })
		defer id.Destroy()
		for _, p := range []cm.ConnParam{
			{},
			{QP: testutil.NewFakeQP(), ORD: 129},
			{QP: testutil.NewFakeQP(), PrivateData: make([]byte, 509)},
		} {
			if err := id.Connect("127.0.0.1:1", p); err == nil {
				t.Errorf("connect %+v: no error", p)
			}
		}
		if err := id.Connect("127.0.0.1:1", cm.ConnParam{}); !errors.Is(err, cm.ErrNoQP) {
			t.Errorf("no QP: %v", err)
		}
		if id.State() != cm.StateIdle {
			t.Errorf("state %v", id.State())
		}
		// A Config that cannot be resolved is refused.
		if err := id.SetConfig(&cm.Config{MPA: mpa.Policy{Rev: 3}}); err == nil {
			t.Error("rev 3 config accepted")
		}
		// Each refused field is named.
		for field, c := range map[string]cm.Config{
			"RequestTimeout": {RequestTimeout: -1}, "ReplyTimeout": {ReplyTimeout: -1}, "Backlog": {Backlog: -1},
			"MaxHandshakes": {MaxHandshakes: -1}, "MaxUntrustedHandshakes": {MaxUntrustedHandshakes: -1},
			"MaxHandshakesPerSource": {MaxHandshakesPerSource: -1},
		} {
			if err := id.SetConfig(&c); err == nil || !strings.Contains(err.Error(), "negative "+field+" ") {
				t.Errorf("%s -1: %v", field, err)
			}
		}
		// siw's private-data limit, as a documented option.
		if err := id.SetConfig(&cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}); err != nil {
			t.Fatal(err)
		}
		if err := id.Connect("127.0.0.1:1", cm.ConnParam{QP: testutil.NewFakeQP(), PrivateData: make([]byte, 252)}); err == nil ||
			!strings.Contains(err.Error(), "at most 251") {
			t.Errorf("252 bytes toward siw: %v", err)
		}
	})
	t.Run("listen", func(t *testing.T) {
		id := cm.NewID(dev, func(*cm.ID, *cm.Event) error { return nil })
		defer id.Destroy()
		if err := id.Listen("127.0.0.1:notaport", 0); err == nil {
			t.Error("bad address accepted")
		}
		if err := id.Listen("127.0.0.1:0", -1); err == nil {
			t.Error("negative backlog accepted")
		}
		if id.State() != cm.StateIdle {
			t.Errorf("state %v", id.State())
		}
		if err := id.Listen("127.0.0.1:0", 0); err != nil {
			t.Errorf("listen after a failed listen: %v", err)
		}
	})
}

func TestRejectMsg(t *testing.T) {
	for reason, want := range map[int]string{
		-104: "reset by remote host", -111: "refused by remote application", -110: "setup timeout",
		104: "reset by remote host", 0: "unrecognized reason", -22: "unrecognized reason",
	} {
		if got := cm.RejectMsg(reason); got != want {
			t.Errorf("RejectMsg(%d) = %q, want %q", reason, got, want)
		}
	}
	for s, want := range map[cm.Status]string{
		cm.StatusRejected: "reset by remote host", cm.StatusReset: "reset by remote host",
		cm.StatusRefused: "refused by remote application", cm.StatusTimeout: "setup timeout",
	} {
		if got := cm.RejectMsg(-int(s.Errno())); got != want {
			t.Errorf("%v: %q, want %q", s, got, want)
		}
	}
}
