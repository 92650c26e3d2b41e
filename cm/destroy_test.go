package cm_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
)

// The Destroy contract (iw_destroy_cm_id): from inside a handler,
// DestroyFrom(ev) and a handler returning ErrDestroy never wait for that
// handler; Destroy from anywhere else waits for the handler running with
// the ID; after either returns, no event reaches the ID.

// TestDestroyInsideHandler destroys an ID from inside its own handler, for
// each event that can carry the decision, both ways (DestroyFrom and the
// ErrDestroy return), and checks that the handler carries on (no
// deadlock), the ID is DESTROYING, its queued events are dropped, and the
// peer sees the end it should.
func TestDestroyInsideHandler(t *testing.T) {
	ways := []struct {
		name string
		do   func(id *cm.ID, ev *cm.Event) error
	}{
		{"DestroyFrom", func(id *cm.ID, ev *cm.Event) error { id.DestroyFrom(ev); return nil }},
		{"ErrDestroy", func(*cm.ID, *cm.Event) error { return cm.ErrDestroy }},
		{"wrapped ErrDestroy", func(*cm.ID, *cm.Event) error { return fmt.Errorf("done: %w", cm.ErrDestroy) }},
		{"other error", func(*cm.ID, *cm.Event) error { return errors.New("changed my mind") }},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			t.Run("child on ConnectRequest", func(t *testing.T) {
				p := newPair(t, cm.Config{}, cm.Config{})
				after := make(chan cm.State, 1)
				p.srv.onRequest = decide(cm.EventConnectRequest, w.do, after)
				p.connect(1, 1, nil)
				if rep := p.cli.wait(p.client, cm.EventConnectReply).ev; rep.Status != cm.StatusRejected || len(rep.PrivateData) != 0 {
					t.Errorf("reply %+v", rep)
				}
				checkAfterInside(t, after, w.name)
				child := p.srv.wait(nil, cm.EventConnectRequest).id
				if child.State() != cm.StateDestroying {
					t.Errorf("child state %v", child.State())
				}
				child.Destroy()
				if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest) {
					t.Errorf("child events %v", got)
				}
			})
			t.Run("initiator on ConnectReply", func(t *testing.T) {
				// Established is queued with the ConnectReply: destroying
				// in the ConnectReply handler must drop it.
				p := newPair(t, cm.Config{}, cm.Config{})
				after := make(chan cm.State, 1)
				p.cli.onEvent = decide(cm.EventConnectReply, w.do, after)
				p.acceptInHandler(1, 1, nil)
				p.connect(1, 1, nil)
				checkAfterInside(t, after, w.name)
				srvClose := p.srv.wait(nil, cm.EventClose)
				if !errors.Is(srvClose.ev.Err, syscall.ECONNRESET) {
					t.Errorf("server close error %v", srvClose.ev.Err)
				}
				p.client.Destroy()
				if got := p.cli.types(p.client); !eqTypes(got, cm.EventConnectReply) {
					t.Errorf("client events %v", got)
				}
			})
			t.Run("child on Established", func(t *testing.T) {
				p := newPair(t, cm.Config{}, cm.Config{})
				after := make(chan cm.State, 1)
				p.srv.onEvent = decide(cm.EventEstablished, w.do, after)
				p.acceptInHandler(1, 1, nil)
				p.connect(1, 1, nil)
				checkAfterInside(t, after, w.name)
				if cl := p.cli.wait(p.client, cm.EventClose).ev; !errors.Is(cl.Err, syscall.ECONNRESET) {
					t.Errorf("client close error %v", cl.Err)
				}
				child := p.srv.wait(nil, cm.EventEstablished).id
				child.Destroy()
				if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished) {
					t.Errorf("child events %v", got)
				}
				if got := p.cli.types(p.client); !eqTypes(got, cm.EventConnectReply, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
					t.Errorf("client events %v", got)
				}
			})
		})
	}
}

// decide returns a recorder hook that runs do on events of type typ and
// sends the ID's state right after it to after.
func decide(typ cm.EventType, do func(*cm.ID, *cm.Event) error, after chan<- cm.State) func(*cm.ID, *cm.Event) error {
	return func(id *cm.ID, ev *cm.Event) error {
		if ev.Type != typ {
			return nil
		}
		err := do(id, ev)
		after <- id.State()
		return err
	}
}

// checkAfterInside checks the state the handler saw right after its
// decision: DESTROYING at once with DestroyFrom, still CONN_RECV or
// ESTABLISHED with a return value (the ID is destroyed when the handler
// has returned). A handler that never gets there is stuck in DestroyFrom.
func checkAfterInside(t *testing.T, after <-chan cm.State, way string) {
	t.Helper()
	select {
	case st := <-after:
		if (way == "DestroyFrom") != (st == cm.StateDestroying) {
			t.Errorf("%s: state inside the handler after it: %v", way, st)
		}
	case <-time.After(waitLimit):
		t.Fatalf("%s: the handler did not get past it within %v (waiting for itself?)", way, waitLimit)
	}
}

// TestDestroyListenerInsideConnectRequest destroys the listener from
// inside its ConnectRequest handler (the handler runs with both the
// listener and the child), then accepts the child: the listener stops,
// the child lives on.
func TestDestroyListenerInsideConnectRequest(t *testing.T) {
	p := newPair(t, cm.Config{}, cm.Config{})
	p.srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		ev.Listener.DestroyFrom(ev)
		if st := ev.Listener.State(); st != cm.StateDestroying {
			t.Errorf("listener state %v after DestroyFrom", st)
		}
		return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1})
	}
	addr := p.listener.LocalAddr().String()
	p.connect(1, 1, nil)
	p.cli.wait(p.client, cm.EventEstablished)
	child := p.srv.wait(nil, cm.EventEstablished).id

	// The listener no longer takes requests: a connect to its address
	// (refused, normally; on a busy machine another test may have the
	// port by now) never reaches its handler, which would have recorded
	// the request before any Reply went out.
	late := newRecorder(t)
	id := cm.NewID(newDev(t), late.handle)
	defer id.Destroy()
	if err := id.Connect(addr, cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1}); err != nil {
		t.Fatal(err)
	}
	rep := late.wait(id, cm.EventConnectReply).ev
	p.srv.mu.Lock()
	requests := 0
	for _, x := range p.srv.all {
		if x.ev.Type == cm.EventConnectRequest {
			requests++
		}
	}
	p.srv.mu.Unlock()
	if requests != 1 {
		t.Errorf("%d connect requests reached the destroyed listener's handler (late connect: %v)", requests, rep.Status)
	}

	if err := p.client.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	p.srv.wait(child, cm.EventClose)
	child.Destroy()
	if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
		t.Errorf("child events %v", got)
	}
	if got := p.srv.types(p.listener); len(got) != 0 {
		t.Errorf("listener events %v", got)
	}
}

// TestDestroyOutsideWaits blocks a handler and destroys its ID from
// another goroutine: Destroy (and DestroyFrom with an event that is not
// the running handler's) must not return before the handler has, for the
// child and for the listener whose ConnectRequest handler runs.
func TestDestroyOutsideWaits(t *testing.T) {
	for _, c := range []struct {
		name     string
		listener bool // destroy the listener rather than the child
		foreign  bool // DestroyFrom with another ID's event
	}{
		{"child Destroy", false, false},
		{"child DestroyFrom another event", false, true},
		{"listener Destroy", true, false},
		{"listener DestroyFrom another event", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, cm.Config{}, cm.Config{})
			var (
				mu    sync.Mutex
				order []string
			)
			note := func(s string) {
				mu.Lock()
				order = append(order, s)
				mu.Unlock()
			}
			inHandler := make(chan *cm.ID)
			release := make(chan struct{})
			p.srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
				inHandler <- id
				<-release
				note("handler returns")
				return nil
			}
			// A finished event of another ID: the client's, from a
			// connect that failed before this one.
			var foreign *cm.Event
			if c.foreign {
				r := newRecorder(t)
				other := cm.NewID(newDev(t), r.handle)
				if err := other.Connect(testutil.RefusedAddr(t), cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
					t.Fatal(err)
				}
				foreign = r.wait(other, cm.EventConnectReply).ev
				other.Destroy()
			}
			p.connect(1, 1, nil)
			child := <-inHandler
			target := child
			if c.listener {
				target = p.listener
			}
			destroyed := make(chan struct{})
			go func() {
				if c.foreign {
					target.DestroyFrom(foreign)
				} else {
					target.Destroy()
				}
				note("destroy returns")
				close(destroyed)
			}()
			waitFor(t, "the ID destroying", func() bool { return target.State() == cm.StateDestroying })
			select {
			case <-destroyed:
				t.Fatal("Destroy returned while a handler runs with the ID")
			default:
			}
			close(release)
			waitClosed(t, destroyed, "Destroy after the handler returned")
			mu.Lock()
			if len(order) != 2 || order[0] != "handler returns" {
				t.Errorf("order %v", order)
			}
			mu.Unlock()
			if !c.listener {
				if ev := p.cli.wait(p.client, cm.EventConnectReply).ev; ev.Status != cm.StatusRejected {
					t.Errorf("reply %+v", ev)
				}
			} else {
				// The child outlives its listener; it is rejected when
				// destroyed.
				child.Destroy()
			}
			if got := p.srv.types(child); !eqTypes(got, cm.EventConnectRequest) {
				t.Errorf("child events %v", got)
			}
		})
	}
}

// TestDestroyContractStress races Destroy against a connection's events
// on many connections at once: the server's child is destroyed from
// outside while the client disconnects, from inside its Established
// handler with DestroyFrom, or by its handler returning ErrDestroy. No
// handler may start with an ID after its Destroy (or DestroyFrom)
// returned, and every client must see its connection end.
func TestDestroyContractStress(t *testing.T) {
	n := 120
	if testing.Short() {
		n = 30
	}
	dev := newDev(t)
	var clock eventClock // its end: Destroy or DestroyFrom returned
	var modes sync.Map   // child *cm.ID -> how it is destroyed
	const (
		modeOutside = iota
		modeDestroyFrom
		modeErrDestroy
		modeCount
	)
	var k atomic.Int64
	outside := make(chan *cm.ID, n)
	// insideDone has a value for each DestroyFrom that returned: a client
	// can see its Close while DestroyFrom still tears the child down, so
	// the checks below wait for every one of them.
	insideDone := make(chan struct{}, n)
	handler := func(id *cm.ID, ev *cm.Event) error {
		clock.arrive(id, ev)
		switch ev.Type {
		case cm.EventConnectRequest:
			return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1})
		case cm.EventEstablished:
			mode := k.Add(1) % modeCount
			modes.Store(id, mode)
			switch mode {
			case modeOutside:
				outside <- id
			case modeDestroyFrom:
				id.DestroyFrom(ev)
				clock.end(id)
				insideDone <- struct{}{}
			case modeErrDestroy:
				return cm.ErrDestroy
			}
		}
		return nil
	}
	l := listenID(t, dev, cfgT(t, cm.Config{}), n, handler)

	cli := newRecorder(t)
	clients := make(map[*cm.ID]bool)
	for range n {
		id := cm.NewID(dev, cli.handle)
		clients[id] = true
		if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Every client established; those whose child the server destroys
	// from outside disconnect at the moment it does.
	var wg sync.WaitGroup
	cli.waitN(cm.EventEstablished, n)
	for range n / modeCount {
		child := <-outside
		wg.Add(1)
		go func() {
			defer wg.Done()
			child.Destroy()
			clock.end(child)
		}()
	}
	for id := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = id.Disconnect(false)
		}()
	}
	wg.Wait()
	closes := cli.waitN(cm.EventClose, n)
	// Every child gets its Established handler, the k-th in mode
	// k%modeCount: k = 1, 4, 7, ... up to n destroy with DestroyFrom.
	for k := 1; k <= n; k++ {
		if k%modeCount == modeDestroyFrom {
			<-insideDone
		}
	}
	for id := range clients {
		id.Destroy()
	}
	l.Destroy()

	nChildren := 0
	clock.each(func(id *cm.ID, types []cm.EventType, ended bool) {
		if len(types) == 0 || types[0] != cm.EventConnectRequest {
			return
		}
		nChildren++
		v, _ := modes.Load(id)
		mode, _ := v.(int64)
		if mode != modeOutside && !eqTypes(types, cm.EventConnectRequest, cm.EventEstablished) {
			// Destroyed inside the Established handler: nothing after it.
			t.Errorf("%v (mode %d): events %v", id, mode, types)
		}
		if mode != modeErrDestroy && !ended {
			t.Errorf("%v (mode %d): Destroy never returned", id, mode)
		}
		if late := clock.late(id); len(late) != 0 {
			t.Errorf("%v: %v arrived after Destroy returned", id, late)
		}
	})
	if nChildren != n || len(closes) != n {
		t.Errorf("%d children, %d client closes; want %d", nChildren, len(closes), n)
	}
}

// waitFor polls cond until it holds (or fails the test after waitLimit);
// it asserts nothing about timing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitLimit)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
