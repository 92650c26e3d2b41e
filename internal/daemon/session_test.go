package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/internal/rping"
	"github.com/gosiw/gosiw/rdmap"
)

// TestEveryConnectionCountedAndLogged: whatever the service, a connection
// is counted and logged by one code path. A perf connection whose accept
// fails is counted as a failed handshake (and its client gets a reject);
// a Terminate on a perf connection reaches siwd_terminates_total; every
// connection logs exactly one INFO line when it opens and one when it
// closes (outcome, byte counts), a refused one a single INFO line, and
// nothing else about connections is logged at INFO (cm's and rdmap's
// lines are at DEBUG).
func TestEveryConnectionCountedAndLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	m := NewMetrics()
	s, err := New(&Config{Listen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
		Regions: []Region{{Name: "r", Size: 4096, Access: proto.AccessRead}}}, zap.New(core), m)
	if err != nil {
		t.Fatal(err)
	}
	// A perf service stand-in: "fail" accepts without a QP; otherwise it
	// accepts with a QP and serves until the connection ends.
	s.Perf = func(ctx context.Context, ss *Session, pd *rdmap.PD, _ *Metrics) error {
		if strings.HasSuffix(string(ss.Request().PrivateData), "fail") {
			_, err := ss.Accept(cm.ConnParam{})
			return err
		}
		cq, _ := pd.Device().CreateCQ(4)
		defer cq.Close()
		qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
		defer qp.Close()
		conn, err := ss.Accept(cm.ConnParam{QP: qp, IRD: 1, ORD: 1})
		if err != nil {
			return err
		}
		defer conn.Close()
		<-conn.Done()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	if err := s.Listen(sctx); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(sctx) }()
	addr := s.Addr().String()

	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	defer cq.Close()
	dial := func(pdata string) (*cm.Conn, *rdmap.QP, error) {
		qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
		t.Cleanup(func() { qp.Close() })
		c, err := cm.Dial(ctx, addr, dev, cm.ConnParam{QP: qp, IRD: 1, ORD: 1, PrivateData: []byte(pdata)})
		return c, qp, err
	}

	// 1. A perf accept that fails: counted, and the client is refused.
	if _, _, err := dial(proto.PerfPrefix + " fail"); !strings.Contains(rejectText(err), "cannot accept") {
		t.Fatalf("perf accept failure: %v, want a reject", err)
	}
	// 2. A Terminate on a perf connection: a Write to an STag siwd never
	// gave.
	conn, qp, err := dial(proto.PerfPrefix + " op=write")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	mr, _ := pd.RegisterMemory(buf, rdmap.AccessLocalWrite)
	qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{mr.SGE(0, 64)}, Remote: rdmap.Remote{STag: 0x00dead00}})
	<-conn.Done()
	var te *rdmap.TerminateError
	if !errors.As(qp.Err(), &te) || !te.Remote {
		t.Fatalf("write to a bad STag: %v, want siwd's Terminate", qp.Err())
	}
	conn.Close()
	// 3. An rping connection and 4. a region one, 5. a refused one.
	e, _ := rping.NewEndpoint(dev.AllocPD(), 64, true)
	defer e.Close()
	e.Arm()
	rc, err := cm.Dial(ctx, addr, dev, cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client(ctx, 2, true, nil); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	gc, _, err := dial(proto.RegionPrefix + "r")
	if err != nil {
		t.Fatal(err)
	}
	gc.Close()
	if _, _, err := dial(proto.RegionPrefix + "none"); rejectText(err) == "" {
		t.Fatalf("unknown region: %v", err)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	for series, want := range map[string]string{
		`siwd_handshakes_total{reason="accept",result="failed"}`:                                   "1",
		`siwd_handshakes_total{reason="",result="accepted"}`:                                       "3",
		`siwd_handshakes_total{reason="no_region",result="rejected"}`:                              "1",
		`siwd_terminates_total{dir="sent",ecode="invalid STag",etype="tagged buffer",layer="DDP"}`: "1",
		`siwd_connections`: "0",
		`siwd_qps`:         "0",
	} {
		if got := testCounter(t, m, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}

	// The log: per connection (lines with a remote), INFO only for
	// established/closed/refused/accept failed, one of each per connection.
	perRemote := map[string][]string{}
	for _, en := range logs.All() {
		remote, ok := en.ContextMap()["remote"].(string)
		if !ok || en.Level < zapcore.InfoLevel {
			continue
		}
		perRemote[remote] = append(perRemote[remote], en.Message)
		if en.Message == "closed" {
			f := en.ContextMap()
			if _, ok := f["tx_bytes"]; !ok || f["outcome"] == nil || f["service"] == nil {
				t.Errorf("closed line without outcome, service or byte counts: %v", f)
			}
			// The rping connection carried pings both ways.
			rx, _ := f["rx_bytes"].(uint64)
			tx, _ := f["tx_bytes"].(uint64)
			if f["service"] == "rping" && (rx == 0 || tx == 0 || f["outcome"] != "ok") {
				t.Errorf("rping closed line %v: want bytes both ways and outcome ok", f)
			}
			if f["service"] == "perf" && f["outcome"] != "terminate_sent" {
				t.Errorf("perf closed line %v: want outcome terminate_sent", f)
			}
		}
	}
	var lines []string
	for _, msgs := range perRemote {
		lines = append(lines, strings.Join(msgs, ","))
	}
	want := map[string]int{"accept failed": 1, "established,closed": 3, "refused": 1}
	got := map[string]int{}
	for _, l := range lines {
		got[l]++
	}
	if len(got) != len(want) {
		t.Fatalf("INFO lines per connection %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("INFO lines per connection %v, want %v", got, want)
		}
	}
}
