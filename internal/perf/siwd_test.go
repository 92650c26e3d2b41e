package perf

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/daemon"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// startSiwd runs a daemon Server with Service as its perf service on a
// free loopback port; stop shuts it down and checks that Serve ended well.
func startSiwd(t *testing.T, cfg *daemon.Config) (*daemon.Server, *daemon.Metrics, func()) {
	t.Helper()
	cfg.Listen, cfg.ShutdownTimeout = "127.0.0.1:0", 5*time.Second
	m := daemon.NewMetrics()
	srv, err := daemon.New(cfg, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	srv.Perf = func(ctx context.Context, ss *daemon.Session, pd *rdmap.PD, m *daemon.Metrics) error {
		return Service(ctx, ss, pd, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Listen(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return srv, m, stop
}

func gauge(t *testing.T, m *daemon.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestServiceMemoryBudget: siwd's perf service maps no more than the
// memory budget allows. A request over the per-connection limit is
// refused with a readable reason; idle connections hold their buffers
// against the total, so one more is refused until one of them closes; a
// send test fits its receive buffers to the limit instead.
func TestServiceMemoryBudget(t *testing.T) {
	ctx := testCtx(t)
	srv, m, _ := startSiwd(t, &daemon.Config{MemoryBudget: 8 << 20, MemoryPerConn: 4 << 20})
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	defer cq.Close()
	dial := func(p Params) (*cm.Conn, error) {
		qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
		t.Cleanup(func() { qp.Close() })
		return cm.Dial(ctx, srv.Addr().String(), dev, cm.ConnParam{QP: qp, IRD: 1, ORD: 1, PrivateData: AppendRequest(nil, &p)})
	}
	refusal := func(err error) string {
		t.Helper()
		var rej *mpa.RejectedError
		if !errors.As(err, &rej) {
			t.Fatalf("%v, want a reject", err)
		}
		if len(rej.Reply.PrivateData) > MaxPrivateData {
			t.Errorf("reject reason of %d bytes", len(rej.Reply.PrivateData))
		}
		return string(rej.Reply.PrivateData)
	}

	if _, err := dial(Params{Op: OpRead, Size: 8 << 20, Depth: 1}); !strings.Contains(refusal(err), "over the limit of 4194304 per connection") {
		t.Errorf("8 MiB read with 4 MiB per connection: %q", refusal(err))
	}
	const size = 3 << 20
	c1, err := dial(Params{Op: OpWrite, Size: size, Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := dial(Params{Op: OpRead, Size: size, Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if g := gauge(t, m, "siwd_memory_reserved_bytes"); g < 2*size || g > 8<<20 {
		t.Errorf("memory reserved %v with two 3 MiB connections", g)
	}
	if _, err := dial(Params{Op: OpWrite, Size: size, Depth: 1}); !strings.Contains(refusal(err), "of the server's budget of 8388608 are free now") {
		t.Errorf("a third 3 MiB connection within an 8 MiB budget: %q", refusal(err))
	}
	// A closed connection's buffers come back once siwd has seen it end.
	waitReserved := func(most float64) {
		t.Helper()
		for gauge(t, m, "siwd_memory_reserved_bytes") > most {
			select {
			case <-ctx.Done():
				t.Fatal("the closed connection's memory never came back")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	c1.Close()
	waitReserved(4 << 20)
	c3, err := dial(Params{Op: OpWrite, Size: size, Depth: 1})
	if err != nil {
		t.Fatalf("after a close: %v (%s)", err, refusal(err))
	}
	c3.Close()
	waitReserved(4 << 20)
	// A send test with 1 MiB messages asks for depth 16: it gets the
	// receive buffers that fit (4 MiB: 4 of them).
	c4, err := dial(Params{Op: OpSend, Size: 1 << 20, Depth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if r, err := ParseReply(c4.PrivateData); err != nil || r.Recvs != 4 {
		t.Errorf("send test reply %+v, %v: want 4 receive buffers", r, err)
	}
}
