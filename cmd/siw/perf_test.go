package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/perf"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// The perf tests check structure, not figures: which lines and fields
// appear, not how fast loopback is.

// perfLeakOpts ignores the os/signal goroutine signal.NotifyContext starts
// once per process.
var perfLeakOpts = []goleak.Option{goleak.IgnoreTopFunction("os/signal.signal_recv"), goleak.IgnoreTopFunction("os/signal.loop")}

// perfResponder runs a perf responder and a TCP sink in process until the
// test ends.
func perfResponder(t *testing.T) (addr, tcpAddr string) {
	t.Helper()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := perf.Listen(ctx, "127.0.0.1:0", dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ctx) })
	wg.Go(func() { perf.ServeTCP(ctx, ln, nil) })
	t.Cleanup(func() { cancel(); wg.Wait(); dev.Close() })
	return srv.Addr().String(), ln.Addr().String()
}

func runPerfCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newPerfCmd()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

var (
	perfIntervalRE = regexp.MustCompile(`^\[(  [12]|SUM)\] +\d+\.\d\d-\d+\.\d\d +sec +[\d.]+ [KMGT]?Bytes +[\d.]+ [KMGT]?bits/sec +\d+ ops$`)
	perfSummaryRE  = regexp.MustCompile(`^\[(  [12]|SUM)\] +0\.00-\d+\.\d\d +sec +[\d.]+ [KMGT]?Bytes +[\d.]+ [KMGT]?bits/sec +(\d+|-) ops  (sender|receiver)$`)
)

func TestPerfText(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	addr, tcpAddr := perfResponder(t)
	out, err := runPerfCmd(t, "write", "-s", "16K", "-t", "0.2", "-i", "0.05", "-P", "2", "--crc", "--tcp", "--tcp-addr", tcpAddr, addr)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(out, "\n")
	var intervals, summaries int
	for _, l := range lines {
		switch {
		case perfIntervalRE.MatchString(l):
			intervals++
		case perfSummaryRE.MatchString(l):
			summaries++
		}
	}
	// Two runs (gosiw, TCP), each with several intervals of two streams
	// and a sum, and a summary with sender and receiver lines per
	// stream and for the sum.
	if intervals < 2*3 || summaries != 2*6 {
		t.Errorf("%d interval lines, %d summary lines:\n%s", intervals, summaries, out)
	}
	for _, want := range []string{
		"Connecting to " + addr + ": gosiw RDMA Write, 16384-byte messages, depth 16, 2 streams, 200ms, CRC on",
		"connected to 127.0.0.1 port", "(gosiw, depth 16, CRC on)",
		"[ ID] Interval           Transfer     Bitrate          Ops",
		"Raw TCP baseline to " + tcpAddr,
		"gosiw/TCP throughput: ",
		"perf Done.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestPerfJSON(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	addr, _ := perfResponder(t)
	out, err := runPerfCmd(t, "send", "--pingpong", "--json", "-t", "200ms", "-i", "0.05", "--tcp", "--tcp-addr", "self", addr)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var doc struct {
		Start     map[string]any `json:"start"`
		Intervals []struct {
			Streams []map[string]any `json:"streams"`
			Sum     map[string]any   `json:"sum"`
		} `json:"intervals"`
		End struct {
			Streams []map[string]any `json:"streams"`
			Sum     struct {
				Seconds       float64            `json:"seconds"`
				BitsPerSecond float64            `json:"bits_per_second"`
				Bytes         uint64             `json:"bytes"`
				Ops           uint64             `json:"ops"`
				Latency       map[string]float64 `json:"latency"`
			} `json:"sum"`
		} `json:"end"`
		TCP struct {
			Intervals []any          `json:"intervals"`
			End       map[string]any `json:"end"`
		} `json:"tcp"`
		Ratio   *float64 `json:"ratio"`
		RatioOf string   `json:"ratio_of"`
		Error   string   `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Start["op"] != "pingpong" || doc.Start["size"] != 64.0 || doc.Start["depth"] != 1.0 || doc.Start["version"] != "gosiw-perf/1" {
		t.Errorf("start %v", doc.Start)
	}
	if len(doc.Intervals) == 0 || len(doc.Intervals[0].Streams) != 1 {
		t.Fatalf("intervals %+v", doc.Intervals)
	}
	// An interval without a completed op (a busy machine can stall one
	// of 50 ms) has no latency samples: check the first that has ops.
	busy := -1
	for i, iv := range doc.Intervals {
		if ops, _ := iv.Sum["ops"].(float64); ops > 0 {
			busy = i
			break
		}
	}
	if busy < 0 {
		t.Fatalf("no interval with ops: %+v", doc.Intervals)
	}
	for _, k := range []string{"start", "end", "seconds", "bytes", "bits_per_second", "ops", "latency"} {
		if _, ok := doc.Intervals[busy].Sum[k]; !ok {
			t.Errorf("interval sum has no %q: %v", k, doc.Intervals[busy].Sum)
		}
	}
	s := doc.End.Sum
	if s.Ops == 0 || s.Bytes != 64*s.Ops || s.Seconds <= 0 || s.BitsPerSecond <= 0 {
		t.Errorf("sum %+v", s)
	}
	for _, k := range []string{"samples", "mean_us", "p50_us", "p99_us"} {
		if s.Latency[k] <= 0 {
			t.Errorf("latency %s = %v", k, s.Latency[k])
		}
	}
	if len(doc.End.Streams) != 1 || doc.End.Streams[0]["peer"] == nil || doc.End.Streams[0]["crc"] != false {
		t.Errorf("streams %v", doc.End.Streams)
	}
	if len(doc.TCP.Intervals) == 0 || doc.TCP.End == nil || doc.Ratio == nil || *doc.Ratio <= 0 || doc.RatioOf != "mean_us" || doc.Error != "" {
		t.Errorf("tcp %+v ratio %v of %q error %q", doc.TCP, doc.Ratio, doc.RatioOf, doc.Error)
	}
}

func TestPerfFlags(t *testing.T) {
	for in, want := range map[string]int{"65536": 65536, "64K": 65536, "64k": 65536, "1M": 1 << 20, "2MiB": 2 << 20, "1g": 1 << 30} {
		var v perfSizeValue
		if err := v.Set(in); err != nil || int(v) != want {
			t.Errorf("size %q: %d %v", in, v, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "x", "3T", "4G"} {
		var v perfSizeValue
		if err := v.Set(bad); err == nil {
			t.Errorf("size %q accepted: %d", bad, v)
		}
	}
	for in, want := range map[string]time.Duration{"10": 10 * time.Second, "0.5": 500 * time.Millisecond, "250ms": 250 * time.Millisecond, "0": 0} {
		var v perfSecondsValue
		if err := v.Set(in); err != nil || time.Duration(v) != want {
			t.Errorf("seconds %q: %v %v", in, time.Duration(v), err)
		}
	}
	var v perfSecondsValue
	if err := v.Set("-1"); err == nil {
		t.Error("negative seconds accepted")
	}
	for _, args := range [][]string{
		{},                                  // neither -s nor an op
		{"write"},                           // no address
		{"write", "-t", "0", "127.0.0.1:1"}, // no time
		{"write", "nohostport"},
		{"fly", "127.0.0.1:1"},
		{"write", "-d", "500", "127.0.0.1:1"},
		{"read", "--pingpong", "127.0.0.1:1"}, // --pingpong is send's
	} {
		if out, err := runPerfCmd(t, args...); err == nil {
			t.Errorf("%q: no error\n%s", args, out)
		}
	}
}

// perfErrListener answers every request with answer.
func perfErrListener(t *testing.T, answer func(req *cm.Request, qp *rdmap.QP) *cm.Conn) string {
	t.Helper()
	dev, _ := rdmap.NewDevice(nil)
	ln, err := cm.Listen(context.Background(), "127.0.0.1:0", dev, &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := dev.CreateCQ(16)
	qp, _ := dev.AllocPD().CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []*cm.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			req, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			if c := answer(req, qp); c != nil {
				conns = append(conns, c)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; qp.Close(); cq.Close(); dev.Close() })
	return ln.Addr().String()
}

func TestPerfErrors(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	// Unreachable: a port nobody listens on.
	closed := testutil.RefusedAddr(t)
	out, err := runPerfCmd(t, "write", "-t", "1", closed)
	if err == nil || !strings.Contains(err.Error(), "unreachable: "+closed+" refused the TCP connection") {
		t.Errorf("unreachable: %v\n%s", err, out)
	}

	// Rejected: the reason is printed as text.
	rejecting := perfErrListener(t, func(req *cm.Request, _ *rdmap.QP) *cm.Conn {
		req.Reject([]byte("gosiw siwd: 127.0.0.1 is not allowed"))
		return nil
	})
	out, err = runPerfCmd(t, "read", "-t", "1", "--json", rejecting)
	want := `rejected by ` + rejecting + ` (refused by remote application): "gosiw siwd: 127.0.0.1 is not allowed"`
	if err == nil || err.Error() != "perf: "+want {
		t.Errorf("rejected: %v", err)
	}
	var doc perfJSON
	if jerr := json.Unmarshal([]byte(out), &doc); jerr != nil || !strings.Contains(doc.Error, want) || doc.End != nil {
		t.Errorf("rejected, --json: %v %+v\n%s", jerr, doc, out)
	}

	// Terminated: a responder naming a buffer that does not exist.
	bogus := perfErrListener(t, func(req *cm.Request, qp *rdmap.QP) *cm.Conn {
		c, _ := req.Accept(cm.ConnParam{QP: qp, IRD: 1, ORD: 1,
			PrivateData: perf.AppendReply(nil, &perf.Reply{STag: 0x00abcd00, Len: 1 << 20, Recvs: 4})})
		return c
	})
	out, err = runPerfCmd(t, "write", "-t", "5", "-i", "0", bogus)
	if err == nil || !strings.Contains(err.Error(), "connection terminated: the peer sent a Terminate: layer DDP, type tagged buffer, code invalid STag (0x00)") {
		t.Errorf("terminated: %v\n%s", err, out)
	}
	if !strings.Contains(out, "[  1] error: stream 1: ") {
		t.Errorf("no stream error line in\n%s", out)
	}

	// --tcp without a sink.
	addr, _ := perfResponder(t)
	out, err = runPerfCmd(t, "send", "-t", "0.1", "--tcp", "--tcp-addr", closed, addr)
	if err == nil || !strings.Contains(err.Error(), "TCP baseline: "+closed+" refused the connection") || !strings.Contains(out, "[  1]") {
		t.Errorf("tcp unreachable: %v\n%s", err, out)
	}
}

// lineWriter hands the lines written to it to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		select {
		case w.lines <- string(w.buf[:i]):
		default: // the test is not listening any more
		}
		w.buf = w.buf[i+1:]
	}
}

func TestPerfServer(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	w := &lineWriter{lines: make(chan string, 100)}
	cmd := newPerfCmd()
	cmd.SetOut(w)
	cmd.SetArgs([]string{"-s", "--listen", "127.0.0.1:0", "--tcp-listen", "127.0.0.1:0"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(sctx) }()
	next := func() string {
		select {
		case l := <-w.lines:
			return l
		case err := <-done:
			t.Fatalf("server ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no output")
		}
		return ""
	}
	m := regexp.MustCompile(`^Server listening on (\S+) \(gosiw\), TCP baseline sink on (\S+)$`).FindStringSubmatch(next())
	if m == nil {
		t.Fatal("no listening line")
	}
	res, err := perf.Run(ctx, m[1], &perf.Options{Op: perf.OpSend, Size: 1000, Duration: 100 * time.Millisecond, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if l := next(); !regexp.MustCompile(`^\[  1\] accepted 127\.0\.0\.1:\d+: send, 1000-byte messages, depth 16, CRC off$`).MatchString(l) {
		t.Errorf("accepted line %q", l)
	}
	// The responder's count of the messages it received.
	l := next()
	if e := regexp.MustCompile(`^\[  1\] +0\.00-\d+\.\d\d +sec .* (\d+) ops$`).FindStringSubmatch(l); e == nil {
		t.Errorf("ended line %q", l)
	} else if e[1] != strconv.FormatUint(res.Sum.Ops, 10) {
		t.Errorf("server counted %s ops, client %d", e[1], res.Sum.Ops)
	}
	if _, err := perf.RunTCP(ctx, m[2], &perf.Options{Op: perf.OpWrite, Size: 1000, Duration: 50 * time.Millisecond, Interval: -1}); err != nil {
		t.Fatal(err)
	}
	if l := next(); !strings.HasPrefix(l, "[tcp 1] accepted") {
		t.Errorf("tcp accepted line %q", l)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
