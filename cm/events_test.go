package cm_test

import (
	"bytes"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

// pair is a listener with a recorder and an initiator ID with another.
type pair struct {
	t        *testing.T
	listener *cm.ID
	srv      *recorder
	cli      *recorder
	client   *cm.ID
	cliQP    *testutil.FakeQP
	srvQPs   chan *testutil.FakeQP
}

// newPair listens with the server recorder (whose onRequest the caller may
// set before connect) and makes an idle client ID.
func newPair(t *testing.T, srvCfg, cliCfg cm.Config) *pair {
	dev := newDev(t)
	p := &pair{t: t, srv: newRecorder(t), cli: newRecorder(t), srvQPs: make(chan *testutil.FakeQP, 16)}
	p.listener = listenID(t, dev, cfgT(t, srvCfg), 0, p.srv.handle)
	p.client = cm.NewID(dev, p.cli.handle)
	t.Cleanup(p.client.Destroy)
	if err := p.client.SetConfig(cfgT(t, cliCfg)); err != nil {
		t.Fatal(err)
	}
	p.cliQP = testutil.NewFakeQP()
	return p
}

// acceptInHandler makes the server accept every request inside the
// handler with a new FakeQP.
func (p *pair) acceptInHandler(ird, ord int, pd []byte) {
	p.srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		q := testutil.NewFakeQP()
		p.srvQPs <- q
		return id.Accept(cm.ConnParam{QP: q, IRD: ird, ORD: ord, PrivateData: pd})
	}
}

func (p *pair) connect(ird, ord int, pd []byte) {
	p.t.Helper()
	if err := p.client.Connect(p.listener.LocalAddr().String(), cm.ConnParam{QP: p.cliQP, IRD: ird, ORD: ord, PrivateData: pd}); err != nil {
		p.t.Fatal(err)
	}
}

// established connects, accepting in the handler, and returns the server
// child ID and its QP once both sides are established.
func (p *pair) established() (*cm.ID, *testutil.FakeQP) {
	p.t.Helper()
	p.acceptInHandler(4, 4, []byte("srv"))
	p.connect(4, 4, []byte("cli"))
	p.cli.wait(p.client, cm.EventEstablished)
	child := p.srv.wait(nil, cm.EventEstablished).id
	return child, <-p.srvQPs
}

func TestEventsAcceptThenClientDisconnects(t *testing.T) {
	for _, abrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "abrupt"}[abrupt], func(t *testing.T) {
			p := newPair(t, cm.Config{}, cm.Config{})
			child, srvQP := p.established()

			req := p.srv.wait(child, cm.EventConnectRequest).ev
			if req.Listener != p.listener || !bytes.Equal(req.PrivateData, []byte("cli")) || req.IRD != 4 || req.ORD != 4 ||
				req.Peer == nil || req.Peer.Rev != 2 || !req.Peer.Enhanced {
				t.Errorf("connect request %+v peer %+v", req, req.Peer)
			}
			if req.RemoteAddr.String() != p.client.LocalAddr().String() || req.LocalAddr.String() != p.listener.LocalAddr().String() {
				t.Errorf("addresses %v %v vs %v %v", req.LocalAddr, req.RemoteAddr, p.listener.LocalAddr(), p.client.LocalAddr())
			}
			rep := p.cli.wait(p.client, cm.EventConnectReply).ev
			if rep.Status != cm.StatusOK || !bytes.Equal(rep.PrivateData, []byte("srv")) || rep.Params == nil || rep.IRD != 4 || rep.ORD != 4 {
				t.Errorf("connect reply %+v", rep)
			}
			if child.State() != cm.StateEstablished || p.client.State() != cm.StateEstablished {
				t.Errorf("states %v %v", child.State(), p.client.State())
			}

			if err := p.client.Disconnect(abrupt); err != nil {
				t.Fatal(err)
			}
			cliClose := p.cli.wait(p.client, cm.EventClose).ev
			srvClose := p.srv.wait(child, cm.EventClose).ev
			waitDone(t, srvQP)

			// Destroy guarantees no event after it returns, so the lists
			// below are final.
			p.client.Destroy()
			child.Destroy()
			if got := p.cli.types(p.client); !eqTypes(got, cm.EventConnectReply, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
				t.Errorf("client events %v", got)
			}
			if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
				t.Errorf("server events %v", got)
			}
			if got := p.srv.types(p.listener); len(got) != 0 {
				t.Errorf("listener got events %v", got)
			}
			if abrupt {
				if !errors.Is(cliClose.Err, testutil.ErrAborted) || !errors.Is(srvClose.Err, syscall.ECONNRESET) {
					t.Errorf("abrupt close errors: client %v, server %v", cliClose.Err, srvClose.Err)
				}
			} else if cliClose.Err != nil || srvClose.Err != nil {
				t.Errorf("graceful close errors: client %v, server %v", cliClose.Err, srvClose.Err)
			}
		})
	}
}

func TestEventsServerDisconnects(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	child, _ := p.established()
	if err := child.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	p.srv.wait(child, cm.EventClose)
	p.cli.wait(p.client, cm.EventClose)
	p.client.Destroy()
	child.Destroy()
	if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
		t.Errorf("server events %v", got)
	}
	if got := p.cli.types(p.client); !eqTypes(got, cm.EventConnectReply, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
		t.Errorf("client events %v", got)
	}
}

func TestEventsRejectInsideHandler(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	stateAfter := make(chan cm.State, 1)
	p.srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		if err := id.Reject([]byte("go away")); err != nil {
			t.Error(err)
		}
		stateAfter <- id.State()
		return nil
	}
	p.connect(1, 1, nil)
	if st := <-stateAfter; st != cm.StateIdle {
		t.Errorf("state after reject %v", st)
	}
	rep := p.cli.wait(p.client, cm.EventConnectReply).ev
	var rej *mpa.RejectedError
	if rep.Status != cm.StatusRejected || !errors.As(rep.Err, &rej) || !bytes.Equal(rej.Reply.PrivateData, []byte("go away")) ||
		!bytes.Equal(rep.PrivateData, []byte("go away")) || rep.Peer == nil || !rep.Peer.Reject {
		t.Errorf("reply %+v", rep)
	}
	if p.client.State() != cm.StateIdle {
		t.Errorf("client state %v", p.client.State())
	}
	if cm.RejectMsg(-int(rep.Status.Errno())) != "reset by remote host" {
		t.Errorf("reject msg %q", cm.RejectMsg(-int(rep.Status.Errno())))
	}
	child := p.srv.wait(nil, cm.EventConnectRequest).id
	child.Destroy()
	p.client.Destroy()
	if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest) {
		t.Errorf("server events %v", got)
	}
	if got := p.cli.types(p.client); !eqTypes(got, cm.EventConnectReply) {
		t.Errorf("client events %v", got)
	}
}

func TestEventsDestroyChildInsideHandlerRejects(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	p.srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		id.DestroyFrom(ev) // must not wait for the handler it runs in
		return nil
	}
	p.connect(1, 1, nil)
	if rep := p.cli.wait(p.client, cm.EventConnectReply).ev; rep.Status != cm.StatusRejected {
		t.Errorf("reply %+v", rep)
	}
}

func TestEventsAcceptOutsideHandler(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	reqs := make(chan *cm.ID, 1)
	p.srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		reqs <- id
		return nil
	}
	p.connect(2, 3, nil)
	child := <-reqs
	q := testutil.NewFakeQP()
	if err := child.Accept(cm.ConnParam{QP: q, IRD: 8, ORD: 8}); err != nil {
		t.Fatal(err)
	}
	est := p.srv.wait(child, cm.EventEstablished).ev
	// Relaxed negotiation: ORD 8 falls to the initiator's IRD 2; IRD 8
	// stays (>= the initiator's ORD 3).
	if est.IRD != 8 || est.ORD != 2 {
		t.Errorf("established IRD/ORD %d/%d", est.IRD, est.ORD)
	}
	cli := p.cli.wait(p.client, cm.EventEstablished).ev
	if cli.IRD != 2 || cli.ORD != 8 {
		t.Errorf("client IRD/ORD %d/%d", cli.IRD, cli.ORD)
	}
	if qp := q.Params(); qp == nil || qp.IRD != 8 || qp.ORD != 2 || qp.Initiator {
		t.Errorf("QP params %+v", qp)
	}
	if qp := p.cliQP.Params(); qp == nil || qp.IRD != 2 || qp.ORD != 8 || !qp.Initiator {
		t.Errorf("client QP params %+v", qp)
	}
}

func TestEventsDestroyEstablishedNoEvents(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	child, _ := p.established()
	child.Destroy()
	p.cli.wait(p.client, cm.EventClose)
	if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished) {
		t.Errorf("server events after destroy %v", got)
	}
	if child.State() != cm.StateDestroying {
		t.Errorf("state %v", child.State())
	}
}

func TestEventsConnectFailures(t *testing.T) {
	dev := newDev(t)
	t.Run("unreachable", func(t *testing.T) {
		addr := testutil.RefusedAddr(t)
		r := newRecorder(t)
		id := cm.NewID(dev, r.handle)
		defer id.Destroy()
		if err := id.Connect(addr, cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
			t.Fatal(err)
		}
		if ev := r.wait(id, cm.EventConnectReply).ev; ev.Status != cm.StatusUnreachable || ev.Err == nil {
			t.Errorf("reply %+v", ev)
		}
		if id.State() != cm.StateIdle {
			t.Errorf("state %v", id.State())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		held := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			held <- c
		}()
		r := newRecorder(t)
		id := cm.NewID(dev, r.handle)
		defer id.Destroy()
		_ = id.SetConfig(&cm.Config{ReplyTimeout: 200 * time.Millisecond})
		if err := id.Connect(ln.Addr().String(), cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
			t.Fatal(err)
		}
		ev := r.wait(id, cm.EventConnectReply).ev
		if ev.Status != cm.StatusTimeout || cm.RejectMsg(-int(ev.Status.Errno())) != "setup timeout" {
			t.Errorf("reply %+v", ev)
		}
		if c := <-held; c != nil {
			c.Close()
		}
	})
	t.Run("qp start fails", func(t *testing.T) {
		p := newPair(t, cm.Config{}, cm.Config{})
		p.acceptInHandler(1, 1, nil)
		p.cliQP.StartErr = errors.New("no resources")
		p.connect(1, 1, nil)
		if ev := p.cli.wait(p.client, cm.EventConnectReply).ev; ev.Status != cm.StatusLocalError {
			t.Errorf("reply %+v", ev)
		}
		p.srv.wait(nil, cm.EventClose)
	})
}

// Params as the QP sees them after a default handshake with Linux siw's
// defaults on both sides.
func TestDefaultParams(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	_, srvQP := p.established()
	// The initiator's first-send delay is the default stretched to twice
	// the Request-to-Reply time (a loaded machine stretches it), capped.
	if got := p.cliQP.Params(); got == nil || !got.Initiator || got.Rev != 2 || !got.Enhanced || got.CRC ||
		got.MarkersTx || got.MarkersRx || got.P2P || got.IRD != 4 || got.ORD != 4 ||
		got.FirstSendDelay < mpa.DefaultFirstSendDelay || got.FirstSendDelay > mpa.MaxFirstSendDelay {
		t.Errorf("client params %+v", got)
	}
	if got := srvQP.Params(); got == nil || got.Initiator || got.FirstSendDelay != 0 || got.IRD != 4 || got.ORD != 4 {
		t.Errorf("server params %+v", got)
	}
}
