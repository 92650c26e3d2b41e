package rdmap

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestCQWakeRace: a Wait that begins as a push ends must still see that
// completion (no lost wake-up between Wait's look at the ring and its
// sleep). A producer pushes completions one at a time, each only after a consumer
// (Poll, else Wait) acknowledged the one before, so that every push is
// the last one a sleeping consumer could get and meets the consumer's
// Poll and Wait in every order; each arrives once and in order. A lost
// wake-up leaves the consumer in Wait with a completion in the ring: the
// generous deadline turns that hang into a failure.
func TestCQWakeRace(t *testing.T) {
	const n = 20000
	dev, err := NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cq, err := dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ack := make(chan uint64)
	consumer := make(chan error, 1)
	go func() {
		var wc [1]WC
		for got := 0; got < n; {
			if cq.Poll(wc[:]) == 1 {
				got++
				ack <- wc[0].ID
				continue
			}
			if err := cq.Wait(ctx); err != nil {
				consumer <- err
				return
			}
		}
		consumer <- nil
	}()
	for i := range uint64(n) {
		wc := WC{ID: i}
		if !cq.push(&wc) {
			t.Fatal("CQ overran")
		}
		select {
		case id := <-ack:
			if id != i {
				t.Fatalf("completion %d polled as the %dth", id, i)
			}
		case err := <-consumer:
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("consumer stuck in Wait with completion %d in the CQ (%d waiting): a lost wake-up", i, cq.Len())
			}
			t.Fatalf("consumer: %v", err)
		}
	}
	if err := <-consumer; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCQPushPoll: one completion pushed and polled per op, as a
// busy-polling consumer that never Waits sees it (push's poke of the
// full notify channel is then the lock-free fast path of a select).
func BenchmarkCQPushPoll(b *testing.B) {
	dev, err := NewDevice(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	cq, err := dev.CreateCQ(64)
	if err != nil {
		b.Fatal(err)
	}
	defer cq.Close()
	var wc [1]WC
	b.ReportAllocs()
	for b.Loop() {
		if !cq.push(&WC{ID: 1}) || cq.Poll(wc[:]) != 1 {
			b.Fatal("push or poll failed")
		}
	}
}

// TestCQPushAll: pushAllLocked does what pushLocked one completion at a
// time does, for batches that fit, one that overruns the ring and
// batches after the overrun: the same reports, the same completions in
// the same order (ring, then the overflow list), the same Err, Len and
// Dropped.
func TestCQPushAll(t *testing.T) {
	dev, err := NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	newCQ := func() *CQ {
		cq, err := dev.CreateCQ(5)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cq.Close() })
		return cq
	}
	all, each := newCQ(), newCQ()
	id := uint64(0)
	for step, n := range []int{3, 0, 2, -1, 3, 1, 2} {
		if n < 0 { // poll one from each
			var a, b [1]WC
			if all.Poll(a[:]) != 1 || each.Poll(b[:]) != 1 || a != b {
				t.Fatalf("step %d: Poll %+v and %+v", step, a, b)
			}
			continue
		}
		wcs := make([]WC, n)
		for i := range wcs {
			id++
			wcs[i] = WC{ID: id, ByteLen: uint32(id)}
		}
		all.mu.Lock()
		okAll := all.pushAllLocked(wcs)
		all.mu.Unlock()
		okEach := true
		each.mu.Lock()
		for i := range wcs {
			okEach = each.pushLocked(&wcs[i]) && okEach
		}
		each.mu.Unlock()
		if okAll != okEach || all.Len() != each.Len() || all.Err() != each.Err() || all.Dropped() != each.Dropped() {
			t.Fatalf("step %d (%d completions): ok %v/%v, Len %d/%d, Err %v/%v, Dropped %d/%d", step, n,
				okAll, okEach, all.Len(), each.Len(), all.Err(), each.Err(), all.Dropped(), each.Dropped())
		}
	}
	if all.Err() != ErrCQOverflow {
		t.Fatal("the batches never overran the CQ: the test tests too little")
	}
	a, b := make([]WC, 16), make([]WC, 16)
	na, nb := all.Poll(a), each.Poll(b)
	if na != nb || fmt.Sprint(a[:na]) != fmt.Sprint(b[:nb]) {
		t.Fatalf("polled\n%+v\n%+v", a[:na], b[:nb])
	}
}
