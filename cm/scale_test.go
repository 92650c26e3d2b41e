package cm_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/rdmap"
)

// scaleRun makes n connections at once between IDs on loopback, the
// listener accepting inside its handler, and returns the established
// pairs with how long it took and the Go memory per idle connection
// (both ends: two IDs, two TCP sockets' Go side, two fake QPs with their
// goroutines, and the cm watcher goroutines), after a GC.
func scaleRun(tb testing.TB, dev *rdmap.Device, n int) (elapsed time.Duration, perConn float64, goroutinesPer float64, closeAll func()) {
	tb.Helper()
	var mu sync.Mutex
	var children []*cm.ID
	estab := make(chan struct{}, n)
	l := listenID(tb, dev, &cm.Config{}, n, func(id *cm.ID, ev *cm.Event) error {
		switch ev.Type {
		case cm.EventConnectRequest:
			mu.Lock()
			children = append(children, id)
			mu.Unlock()
			return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 4, ORD: 4})
		case cm.EventEstablished:
			estab <- struct{}{}
		}
		return nil
	})
	replies := make(chan cm.Status, n)
	handler := func(id *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventConnectReply {
			replies <- ev.Status
		}
		return nil
	}
	ids := make([]*cm.ID, n)
	for i := range ids {
		ids[i] = cm.NewID(dev, handler)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	start := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 4, ORD: 4}); err != nil {
				tb.Error(err)
			}
		}()
	}
	wg.Wait()
	for range n {
		if st := <-replies; st != cm.StatusOK {
			tb.Fatalf("connect: %v", st)
		}
	}
	for range n {
		<-estab
	}
	elapsed = time.Since(start)

	runtime.GC()
	runtime.ReadMemStats(&after)
	g1 := runtime.NumGoroutine()
	used := float64(after.HeapInuse+after.StackInuse) - float64(before.HeapInuse+before.StackInuse)
	perConn = used / float64(n)
	goroutinesPer = float64(g1-g0) / float64(n)
	closeAll = func() {
		for _, id := range ids {
			id.Destroy()
		}
		mu.Lock()
		for _, c := range children {
			c.Destroy()
		}
		mu.Unlock()
		l.Destroy()
	}
	return elapsed, perConn, goroutinesPer, closeAll
}

// TestThousandHandshakes runs 1000 concurrent handshakes on loopback (100
// with -short) and reports the time and the memory per idle connection.
//
//	go test -run TestThousandHandshakes -v ./cm
func TestThousandHandshakes(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	elapsed, per, gper, closeAll := scaleRun(t, newDev(t), n)
	defer closeAll()
	t.Logf("%d concurrent handshakes in %v (%.0f/s); idle connection (both ends): %.1f KiB Go memory, %.1f goroutines",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), per/1024, gper)
}

// BenchmarkHandshake measures one handshake at a time, end to end (dial,
// Request, Reply, both QPs started, both Established).
func BenchmarkHandshake(b *testing.B) {
	dev := newDev(b)
	estab := make(chan *cm.ID, 1)
	l := listenID(b, dev, &cm.Config{}, 0, func(id *cm.ID, ev *cm.Event) error {
		switch ev.Type {
		case cm.EventConnectRequest:
			return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 4, ORD: 4})
		case cm.EventEstablished:
			estab <- id
		}
		return nil
	})
	reply := make(chan cm.Status, 1)
	b.ReportAllocs()
	for b.Loop() {
		id := cm.NewID(dev, func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventConnectReply {
				reply <- ev.Status
			}
			return nil
		})
		if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 4, ORD: 4}); err != nil {
			b.Fatal(err)
		}
		if st := <-reply; st != cm.StatusOK {
			b.Fatal(st)
		}
		child := <-estab
		id.Destroy()
		child.Destroy()
	}
}

// BenchmarkThousandHandshakes reports the 1000-connection figures as
// metrics.
//
//	go test -run '^$' -bench ThousandHandshakes -benchtime 3x ./cm
func BenchmarkThousandHandshakes(b *testing.B) {
	dev := newDev(b)
	var per, gper float64
	for b.Loop() {
		_, p, g, closeAll := scaleRun(b, dev, 1000)
		per, gper = p, g
		b.StopTimer()
		closeAll()
		b.StartTimer()
	}
	b.ReportMetric(per/1024, "KiB/idle-conn")
	b.ReportMetric(gper, "goroutines/idle-conn")
}
