package rdmap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// TestCQRing pushes (push, pushAllLocked) and polls completions of
// random counts through CQs of several sizes, small ones whose array is
// smaller than wcRingMin among them, against a slice as the model, so
// that runs wrap the array at every offset and the array grows while
// entries wrap it: every completion comes out once and in order, Len
// counts them, the array is a power of two and never larger than the
// most completions held at once asks (or wcRingMin), and no push
// overruns a CQ that has room.
func TestCQRing(t *testing.T) {
	dev, err := NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 2, 3, 5, 8, 9, 33, 100} {
		cq, err := dev.CreateCQ(size)
		if err != nil {
			t.Fatal(err)
		}
		var model []uint64
		next, peak := uint64(0), 0
		got := make([]WC, size+2)
		for step := range 3000 {
			if rng.IntN(2) == 0 { // push a batch that fits
				n := rng.IntN(size - len(model) + 1)
				wcs := make([]WC, n)
				for i := range wcs {
					wcs[i] = WC{ID: next, ByteLen: uint32(next), QPN: uint32(size)}
					model = append(model, next)
					next++
				}
				ok := true
				if n == 1 && rng.IntN(2) == 0 {
					ok = cq.push(&wcs[0])
				} else {
					cq.mu.Lock()
					ok = cq.pushAllLocked(wcs)
					cq.mu.Unlock()
				}
				if !ok {
					t.Fatalf("size %d step %d: a push of %d with %d queued overran", size, step, n, len(model)-n)
				}
				peak = max(peak, len(model))
			} else { // poll some
				k := cq.Poll(got[:rng.IntN(len(got)+1)])
				for i := range k {
					if len(model) == 0 || got[i].ID != model[0] || got[i].ByteLen != uint32(model[0]) || got[i].QPN != uint32(size) {
						t.Fatalf("size %d step %d: polled %+v, model %v", size, step, got[i], model)
					}
					model = model[1:]
				}
			}
			if cq.Len() != len(model) {
				t.Fatalf("size %d step %d: Len %d, model %d", size, step, cq.Len(), len(model))
			}
			cq.mu.Lock()
			n := len(cq.ring.buf)
			cq.mu.Unlock()
			if want := ringSize(max(peak, min(wcRingMin, size))); n&(n-1) != 0 || peak > 0 && n > want {
				t.Fatalf("size %d step %d: an array of %d slots for at most %d completions (want %d)", size, step, n, peak, want)
			}
		}
		if cq.Err() != nil || next < uint64(10*size) {
			t.Fatalf("size %d: Err %v after %d completions", size, cq.Err(), next)
		}
		cq.Close()
	}
}

// BenchmarkCQPushAllPoll: completions pushed as the receive engine
// pushes them, up to a batch under one lock (pushAllLocked) with one
// wake-up, and polled as a busy-polling consumer sees them, into a
// slice of poll: 25 per round, so that batches and polls begin anywhere
// in the ring and wrap it. The cases: batches of rxBatch (the last of a
// round of 1) reaped into a slice of 64, as a consumer that falls behind
// sees them, and batches of 2 and of 1 reaped as they come, as a
// latency-bound stream sees them. One op is one completion.
func BenchmarkCQPushAllPoll(b *testing.B) {
	for _, c := range []struct{ batch, poll int }{{rxBatch, 64}, {2, 2}, {1, 1}} {
		b.Run(fmt.Sprintf("%dx%d", c.batch, c.poll), func(b *testing.B) {
			benchCQPushAllPoll(b, c.batch, c.poll)
		})
	}
}

func benchCQPushAllPoll(b *testing.B, batch, poll int) {
	const k = 25
	dev, err := NewDevice(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	cq, err := dev.CreateCQ(100)
	if err != nil {
		b.Fatal(err)
	}
	defer cq.Close()
	wcs := make([]WC, k)
	for i := range wcs {
		wcs[i] = WC{ID: uint64(i), Op: WCRecv, ByteLen: 64, QPN: 1}
	}
	got := make([]WC, poll)
	b.ReportAllocs()
	for done := 0; done < b.N; done += k {
		polled := 0
		for i := 0; i < k; i += batch {
			cq.mu.Lock()
			ok := cq.pushAllLocked(wcs[i:min(i+batch, k)])
			cq.mu.Unlock()
			cq.wakeBy(nil)
			if !ok {
				b.Fatal("CQ overran")
			}
			if poll < k {
				for cq.Len() >= poll {
					polled += cq.Poll(got)
				}
			}
		}
		for polled < k {
			n := cq.Poll(got)
			if n == 0 || got[n-1].ID != uint64(polled+n-1) {
				b.Fatalf("polled %d after %d", n, polled)
			}
			polled += n
		}
	}
}
