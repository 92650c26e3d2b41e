package rdmap

import (
	"context"
	"errors"
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
