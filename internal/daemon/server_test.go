package daemon

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/internal/rping"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startServer(t *testing.T, cfg *Config) (*Server, *Metrics, func()) {
	t.Helper()
	m := NewMetrics()
	s, err := New(cfg, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Listen(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	return s, m, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

func TestRpingThroughDaemon(t *testing.T) {
	s, m, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	e, err := rping.NewEndpoint(dev.AllocPD(), 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Arm()
	conn, err := cm.Dial(ctx, s.Addr().String(), dev, cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Client(ctx, 5, true, nil)
	if err != nil || res.Pings != 5 {
		t.Fatalf("pings %d: %v", res.Pings, err)
	}
	conn.Close()

	// The metrics endpoint reports the traffic.
	srv := httptest.NewServer(m.Handler(s.Healthy))
	defer srv.Close()
	body := testutil.Scrape(t, srv.URL+"/metrics")
	for _, want := range []string{
		`siwd_handshakes_total{reason="",result="accepted"} 1`,
		`siwd_operations_total{dir="tx",opcode="read_request"} 5`,
		`siwd_operations_total{dir="tx",opcode="rdma_write"} 5`,
		`siwd_bytes_total{dir="tx",opcode="rdma_write"} 20480`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if h := testutil.Scrape(t, srv.URL+"/healthz"); h != "ok\n" {
		t.Errorf("healthz = %q", h)
	}
}

func TestACLRefusalCarriesReason(t *testing.T) {
	s, m, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	e, _ := rping.NewEndpoint(dev.AllocPD(), 64, true)
	defer e.Close()
	_, err := cm.Dial(ctx, s.Addr().String(), dev, cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
	var rej *mpa.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("dial from a refused network: %v, want a reject", err)
	}
	if got := string(rej.Reply.PrivateData); !strings.Contains(got, "127.0.0.1 is not allowed") || len(got) > MaxReasonLen {
		t.Fatalf("reject reason %q", got)
	}
	if v := testCounter(t, m, `siwd_handshakes_total{reason="acl",result="rejected"}`); v != "1" {
		t.Fatalf("rejected counter %q", v)
	}
	// SIGHUP-style reload lets the client in.
	s.SetAllow(nil)
	e2, _ := rping.NewEndpoint(dev.AllocPD(), 64, true)
	defer e2.Close()
	e2.Arm()
	conn, err := cm.Dial(ctx, s.Addr().String(), dev, cm.ConnParam{QP: e2.QP, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatalf("after reload: %v", err)
	}
	conn.Close()
}

func testCounter(t *testing.T, m *Metrics, series string) string {
	srv := httptest.NewServer(m.Handler(func() error { return nil }))
	defer srv.Close()
	for _, line := range strings.Split(testutil.Scrape(t, srv.URL+"/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

func TestRegionReadWrite(t *testing.T) {
	ro := filepath.Join(t.TempDir(), "ro.img")
	if err := os.WriteFile(ro, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second,
		Regions: []Region{{Name: "scratch", Size: 1 << 20, Access: proto.AccessRead | proto.AccessWrite},
			{Name: "ro", Size: 4096, File: ro, Access: proto.AccessRead}}})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	buf := make([]byte, 65536)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	mr, _ := pd.RegisterMemory(buf, rdmap.AccessLocalWrite)
	cq, _ := dev.CreateCQ(16)
	defer cq.Close()

	dialRegion := func(name string) (*cm.Conn, *rdmap.QP, error) {
		qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
		conn, err := cm.Dial(ctx, s.Addr().String(), dev, cm.ConnParam{QP: qp, IRD: 4, ORD: 4, PrivateData: []byte(proto.RegionPrefix + name)})
		if err != nil {
			qp.Close()
		}
		return conn, qp, err
	}
	// Unknown region: a readable reject.
	if _, _, err := dialRegion("nope"); err == nil || !strings.Contains(rejectText(err), `no region named "nope"`) {
		t.Fatalf("unknown region: %v", err)
	}
	conn, qp, err := dialRegion("scratch")
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	stag, size, acc, err := proto.ParseRegionReply(conn.PrivateData)
	if err != nil || size != 1<<20 || acc != proto.AccessRead|proto.AccessWrite {
		t.Fatalf("reply %q: %v", conn.PrivateData, err)
	}
	wait := func() rdmap.WC {
		var wc [1]rdmap.WC
		for cq.Poll(wc[:]) == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return wc[0]
	}
	qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{mr.SGE(0, 65536)}, Remote: rdmap.Remote{STag: stag, Offset: 1000}, Signaled: true})
	if wc := wait(); wc.Status != rdmap.WCSuccess {
		t.Fatalf("write: %v", wc.Status)
	}
	back := make([]byte, 65536)
	mr2, _ := pd.RegisterMemory(back, rdmap.AccessLocalWrite)
	qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRRead, SGL: []rdmap.SGE{mr2.SGE(0, 65536)}, Remote: rdmap.Remote{STag: stag, Offset: 1000}, Signaled: true})
	if wc := wait(); wc.Status != rdmap.WCSuccess {
		t.Fatalf("read: %v", wc.Status)
	}
	if !bytes.Equal(back, buf) {
		t.Fatal("read back differs from what was written")
	}
	conn.Close()

	// A read-only region refuses a write with a Terminate.
	conn, qp2, err := dialRegion("ro")
	if err != nil {
		t.Fatal(err)
	}
	defer qp2.Close()
	stag, _, _, _ = proto.ParseRegionReply(conn.PrivateData)
	qp2.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRWrite, SGL: []rdmap.SGE{mr.SGE(0, 16)}, Remote: rdmap.Remote{STag: stag}, Signaled: true})
	<-conn.Done()
	var te *rdmap.TerminateError
	if err := qp2.Err(); !errors.As(err, &te) || !te.Remote {
		t.Fatalf("write to read-only region: %v, want a Terminate from siwd", err)
	}
	conn.Close()
}

func rejectText(err error) string {
	var rej *mpa.RejectedError
	if errors.As(err, &rej) {
		return string(rej.Reply.PrivateData)
	}
	return ""
}

func TestFailedHandshakesCounted(t *testing.T) {
	s, m, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second})
	defer stop()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("this is not an MPA request frame"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("siwd answered garbage")
	}
	c.Close()
	series := `siwd_handshakes_total{reason="bad_key",result="failed"}`
	for end := time.Now().Add(5 * time.Second); testCounter(t, m, series) != "1"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s = %q", series, testCounter(t, m, series))
		}
	}
}
