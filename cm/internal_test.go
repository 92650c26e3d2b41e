package cm

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/rdmap"
)

func TestTransitions(t *testing.T) {
	// The table must allow exactly iwcm.c's moves; every state may be
	// destroyed, and nothing leaves DESTROYING.
	for s := StateIdle; s <= StateDestroying; s++ {
		if s != StateDestroying && !s.canGo(StateDestroying) {
			t.Errorf("%v cannot be destroyed", s)
		}
		if s.String() == "" || s.canGo(s) {
			t.Errorf("%v: name %q or self transition", s, s.String())
		}
	}
	if StateDestroying.canGo(StateIdle) || StateListen.canGo(StateIdle) || StateIdle.canGo(StateEstablished) {
		t.Error("illegal transition allowed")
	}
	if State(42).String() != "unknown(42)" || State(42).canGo(StateIdle) {
		t.Error("unknown state")
	}
	id := NewID(nil, func(*ID, *Event) error { return nil })
	id.mu.Lock()
	defer id.mu.Unlock()
	if raceEnabled {
		defer func() {
			if recover() == nil {
				t.Error("illegal transition did not panic under -race")
			}
		}()
	}
	if err := id.setStateLocked(StateClosing); err == nil {
		t.Error("IDLE -> CLOSING allowed")
	}
}

// waitFor polls cond until it holds (or fails the test after a long
// deadline); it asserts nothing about timing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// TestListenerDestroyRejectsQueued checks that requests a listener has not
// delivered are rejected when it is destroyed, and that its handler sees
// nothing after Destroy returns.
func TestListenerDestroyRejectsQueued(t *testing.T) {
	dev, _ := rdmap.NewDevice(nil)
	var mu sync.Mutex
	delivered := 0
	inHandler := make(chan struct{})
	block := make(chan struct{})
	l := NewID(dev, func(id *ID, ev *Event) error {
		mu.Lock()
		delivered++
		n := delivered
		mu.Unlock()
		if n == 1 {
			close(inHandler)
			<-block
		}
		return id.Reject(nil)
	})
	if err := l.Listen("127.0.0.1:0", 8); err != nil {
		t.Fatal(err)
	}
	replies := make(chan Status, 3)
	var clients []*ID
	for range 3 {
		c := NewID(dev, func(id *ID, ev *Event) error {
			if ev.Type == EventConnectReply {
				replies <- ev.Status
			}
			return nil
		})
		clients = append(clients, c)
		if err := c.Connect(l.LocalAddr().String(), ConnParam{QP: testutil.NewFakeQP()}); err != nil {
			t.Fatal(err)
		}
	}
	<-inHandler
	waitFor(t, "two requests queued", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) == 2
	})
	destroyed := make(chan struct{})
	go func() { l.Destroy(); close(destroyed) }()
	waitFor(t, "listener destroying", func() bool { return l.State() == StateDestroying })
	close(block)
	<-destroyed
	for range 3 {
		if st := <-replies; st != StatusRejected {
			t.Errorf("reply %v, want rejected", st)
		}
	}
	mu.Lock()
	if delivered != 1 {
		t.Errorf("handler ran %d times; the queued requests must not be delivered", delivered)
	}
	mu.Unlock()
	for _, c := range clients {
		c.Destroy()
	}
}
