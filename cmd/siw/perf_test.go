package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"runtime"
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

// stallAfter is how long a perf command of these tests runs before
// runPerfCmd takes a picture of every goroutine: far longer than any of
// them takes (a stalled connection ends only after perf's wrap-up bound,
// 10 s past the test's duration).
const stallAfter = 8 * time.Second

// runPerfCmd runs a perf command in process. When it runs longer than
// stallAfter, the stacks of every goroutine (the in-process responder's
// too) are logged if the test then fails: what a stall was waiting for.
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
	var stacks []byte
	taken := make(chan struct{})
	watch := time.AfterFunc(stallAfter, func() {
		buf := make([]byte, 1<<22)
		stacks = buf[:runtime.Stack(buf, true)]
		close(taken)
	})
	t.Cleanup(func() {
		if !watch.Stop() {
			<-taken // it fired: the picture is being taken
		}
		if t.Failed() && stacks != nil {
			t.Logf("perf %s still ran after %v; its goroutines then:\n%s", strings.Join(args, " "), stallAfter, stacks)
		}
	})
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

var (
	perfIntervalRE = regexp.MustCompile(`^\[(  [12]|SUM)\] +\d+\.\d\d-\d+\.\d\d +sec +[\d.]+ [KMGT]?Bytes +[\d.]+ [KMGT]?bits/sec +\d+ ops +[\d.]+ [KMGT]?ops/sec$`)
	// A receiver that counts no messages (RDMA Writes, the TCP sink) has
	// no ops columns, never a placeholder.
	perfSummaryRE = regexp.MustCompile(`^\[(  [12]|SUM)\] +0\.00-\d+\.\d\d +sec +[\d.]+ [KMGT]?Bytes +[\d.]+ [KMGT]?bits/sec( +\d+ ops +[\d.]+ [KMGT]?ops/sec)?  (sender|receiver)$`)
)

func TestPerfText(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	addr, tcpAddr := perfResponder(t)
	out, err := runPerfCmd(t, "write", "-l", "16K", "-t", "0.2", "-i", "0.05", "-P", "2", "--crc", "--tcp", "--tcp-addr", tcpAddr, addr)
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
		"Connecting to " + addr + ": gosiw RDMA Write, 16384-byte messages, depth 64, 2 streams, 200ms, CRC on",
		"connected to 127.0.0.1 port", "(gosiw, depth 64, CRC on)",
		"[ ID] Interval           Transfer     Bitrate          Messages",
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
	type span struct {
		Socket        int                `json:"socket"`
		Seconds       float64            `json:"seconds"`
		BitsPerSecond float64            `json:"bits_per_second"`
		Bytes         uint64             `json:"bytes"`
		Sender        bool               `json:"sender"`
		Ops           *uint64            `json:"ops"`
		OpsPerSecond  *float64           `json:"ops_per_second"`
		Latency       map[string]float64 `json:"latency"`
		CountedBy     string             `json:"counted_by"`
	}
	var doc struct {
		Start struct {
			Connected []struct {
				Socket     int    `json:"socket"`
				LocalHost  string `json:"local_host"`
				RemotePort int    `json:"remote_port"`
			} `json:"connected"`
			TestStart map[string]any `json:"test_start"`
			Op        string         `json:"op"`
			Size      int            `json:"size"`
			Depth     int            `json:"depth"`
			Version   string         `json:"version"`
		} `json:"start"`
		Intervals []struct {
			Streams []map[string]any `json:"streams"`
			Sum     map[string]any   `json:"sum"`
		} `json:"intervals"`
		End struct {
			Streams []struct {
				Sender, Receiver span
			} `json:"streams"`
			SumSent     span `json:"sum_sent"`
			SumReceived span `json:"sum_received"`
		} `json:"end"`
		TCP struct {
			Connected []any          `json:"connected"`
			Intervals []any          `json:"intervals"`
			End       map[string]any `json:"end"`
		} `json:"tcp"`
		Ratio    *float64 `json:"ratio"`
		RatioOf  string   `json:"ratio_of"`
		RatioP50 *float64 `json:"ratio_p50"`
		Error    string   `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	st := doc.Start
	if st.Op != "pingpong" || st.Size != 64 || st.Depth != 1 || st.Version != "gosiw-perf/1" ||
		st.TestStart["protocol"] != "gosiw" || st.TestStart["blksize"] != 64.0 || st.TestStart["num_streams"] != 1.0 {
		t.Errorf("start %+v", st)
	}
	_, port := perfSplit(addr)
	if len(st.Connected) != 1 || st.Connected[0].Socket != 1 || st.Connected[0].LocalHost != "127.0.0.1" || st.Connected[0].RemotePort != port {
		t.Errorf("start.connected %+v", st.Connected)
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
	for _, k := range []string{"start", "end", "seconds", "bytes", "bits_per_second", "omitted", "sender", "ops", "ops_per_second", "latency"} {
		if _, ok := doc.Intervals[busy].Sum[k]; !ok {
			t.Errorf("interval sum has no %q: %v", k, doc.Intervals[busy].Sum)
		}
	}
	s := doc.End.SumSent
	if s.Ops == nil || *s.Ops == 0 || s.Bytes != 64**s.Ops || s.Seconds <= 0 || s.BitsPerSecond <= 0 || !s.Sender ||
		s.CountedBy != "client" || s.OpsPerSecond == nil || *s.OpsPerSecond <= 0 {
		t.Errorf("sum_sent %+v", s)
	}
	for _, k := range []string{"samples", "mean_us", "p50_us", "p99_us"} {
		if s.Latency[k] <= 0 {
			t.Errorf("latency %s = %v", k, s.Latency[k])
		}
	}
	// The responder counted the messages it echoed: the receiver side is
	// its report, which the client checked against its own.
	r := doc.End.SumReceived
	if r.CountedBy != "responder" || r.Ops == nil || *r.Ops != *s.Ops || r.Bytes != s.Bytes || !r.Sender {
		t.Errorf("sum_received %+v (sum_sent %+v)", r, s)
	}
	if len(doc.End.Streams) != 1 || doc.End.Streams[0].Sender.Socket != 1 || doc.End.Streams[0].Receiver.CountedBy != "responder" {
		t.Errorf("streams %+v", doc.End.Streams)
	}
	if len(doc.TCP.Connected) != 1 || len(doc.TCP.Intervals) == 0 || doc.TCP.End == nil || doc.Ratio == nil || *doc.Ratio <= 0 || doc.RatioOf != "mean_us" || doc.Error != "" {
		t.Errorf("tcp %+v ratio %v of %q error %q", doc.TCP, doc.Ratio, doc.RatioOf, doc.Error)
	}
	if doc.RatioP50 == nil || *doc.RatioP50 <= 0 {
		t.Errorf("ratio_p50 %v", doc.RatioP50)
	}
}

func TestPerfFlags(t *testing.T) {
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
	// Every bad flag is refused before anything is printed, with a reason
	// naming the flag or the value.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "give an op"},
		{[]string{"write"}, "accepts 1 arg"},
		{[]string{"write", "-t", "0", "127.0.0.1:1"}, "-t/--time must be more than 0"},
		{[]string{"write", "nohostport"}, `"nohostport" is not HOST:PORT`},
		{[]string{"write", "127.0.0.1:70000"}, `port "70000": want a number from 1 to 65535`},
		{[]string{"write", "127.0.0.1:http"}, `port "http": want a number from 1 to 65535`},
		{[]string{"fly", "127.0.0.1:1"}, `unknown command "fly"`},
		{[]string{"write", "-d", strconv.Itoa(perf.MaxDepth + 1), "127.0.0.1:1"}, "-d/--depth " + strconv.Itoa(perf.MaxDepth+1) + ": want 1 to"},
		{[]string{"read", "-d", "200", "127.0.0.1:1"}, "read depth 200 over the ORD limit of 128"},
		{[]string{"write", "-d", "0", "127.0.0.1:1"}, "-d/--depth 0: want 1 to"},
		{[]string{"write", "-P", "0", "127.0.0.1:1"}, "-P/--parallel 0: want 1 to 128"},
		{[]string{"write", "-P", "129", "127.0.0.1:1"}, "129 parallel streams out of range"},
		{[]string{"write", "-l", "2G", "127.0.0.1:1"}, `size "2G": want at most 64M`},
		{[]string{"write", "-l", "0", "127.0.0.1:1"}, `size "0": want at least 1`},
		{[]string{"write", "-l", "-5", "127.0.0.1:1"}, "must not be negative"},
		{[]string{"write", "--connect-timeout", "0s", "127.0.0.1:1"}, "--connect-timeout 0s"},
		{[]string{"send", "--pingpong", "-d", "4", "127.0.0.1:1"}, "--pingpong keeps one message in flight"},
		{[]string{"read", "--pingpong", "127.0.0.1:1"}, "unknown flag: --pingpong"},
		{[]string{"read", "--send-goroutine", "127.0.0.1:1"}, "unknown flag: --send-goroutine"},
		{[]string{"-s", "write", "127.0.0.1:1"}, "-s runs the responder"},
		{[]string{"write", "-s", "16K", "127.0.0.1:1"}, "-s runs the responder"},
		{[]string{"write", "--tcp-addr", "x", "127.0.0.1:1"}, `--tcp-addr: "x" is not HOST:PORT`},
		{[]string{"write", "--tcp", "127.0.0.1:65535"}, "no default --tcp-addr for port 65535"},
		{[]string{"-s", "--listen", "127.0.0.1:99999"}, `--listen: "127.0.0.1:99999": port "99999"`},
	} {
		out, err := runPerfCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.args, err, c.want)
		}
		if out != "" {
			t.Errorf("%q printed before refusing:\n%s", c.args, out)
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
	if strings.Contains(out, "- ops") {
		t.Errorf("a placeholder ops column in\n%s", out)
	}
	if !strings.Contains(out, "[  1] error: stream 1: ") {
		t.Errorf("no stream error line in\n%s", out)
	}

	// --tcp without a sink: found out before the measured run, which
	// does not start.
	addr, _ := perfResponder(t)
	out, err = runPerfCmd(t, "send", "-t", "30", "--tcp", "--tcp-addr", closed, addr)
	if err == nil || !strings.Contains(err.Error(), "TCP baseline: "+closed+" refused the connection") || out != "" {
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
	// The depth the client asked for by default (about 1 MiB of messages).
	accepted := fmt.Sprintf(`^\[  1\] accepted 127\.0\.0\.1:\d+: send, 1000-byte messages, depth %d, CRC off$`, perf.DefaultDepthFor(perf.OpSend, 1000))
	if l := next(); !regexp.MustCompile(accepted).MatchString(l) {
		t.Errorf("accepted line %q", l)
	}
	// The responder's count of the messages it received.
	l := next()
	if e := regexp.MustCompile(`^\[  1\] +0\.00-\d+\.\d\d +sec .* (\d+) ops +[\d.]+ [KMG]?ops/sec$`).FindStringSubmatch(l); e == nil {
		t.Errorf("ended line %q", l)
	} else if e[1] != strconv.FormatUint(res.Sum.Ops, 10) {
		t.Errorf("server counted %s ops, client %d", e[1], res.Sum.Ops)
	}
	// The client's reachability check of the sink prints nothing and
	// takes no connection number.
	if err := perf.CheckTCP(ctx, m[2], time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := perf.RunTCP(ctx, m[2], &perf.Options{Op: perf.OpWrite, Size: 1000, Duration: 50 * time.Millisecond, Interval: -1}); err != nil {
		t.Fatal(err)
	}
	if l := next(); !strings.HasPrefix(l, "[tcp 1] accepted 127.0.0.1:") {
		t.Errorf("tcp accepted line %q", l)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A busy port+1 costs the responder its TCP sink, with a warning; a busy
// --tcp-listen given by hand is an error.
func TestPerfServerBusySinkPort(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	// Two adjacent free ports: listen on a free one and take the next
	// for the sink's place, retrying when that one is taken by others.
	var busy net.Listener
	var listen string
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p == 65535 {
			continue
		}
		if b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1))); err == nil {
			busy, listen = b, net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
			break
		}
	}
	if busy == nil {
		t.Skip("found no two adjacent free ports")
	}
	defer busy.Close()
	w := &lineWriter{lines: make(chan string, 100)}
	cmd := newPerfCmd()
	cmd.SetOut(w)
	cmd.SetArgs([]string{"-s", "--listen", listen})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(sctx) }()
	var lines []string
	for len(lines) < 2 {
		select {
		case l := <-w.lines:
			lines = append(lines, l)
		case err := <-done:
			t.Fatalf("server ended: %v (said %q)", err, lines)
		case <-ctx.Done():
			t.Fatalf("said only %q", lines)
		}
	}
	if !strings.HasPrefix(lines[0], "warning: no TCP baseline sink: ") || !strings.Contains(lines[0], "address already in use") {
		t.Errorf("warning line %q", lines[0])
	}
	if lines[1] != "Server listening on "+listen+" (gosiw)" {
		t.Errorf("listening line %q", lines[1])
	}
	// It serves.
	if _, err := perf.Run(ctx, listen, &perf.Options{Op: perf.OpSend, Size: 100, Duration: 50 * time.Millisecond, Interval: -1}); err != nil {
		t.Errorf("run against the responder: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Given by hand, the same busy port is an error.
	out, err := runPerfCmd(t, "-s", "--listen", "127.0.0.1:0", "--tcp-listen", busy.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "TCP sink (--tcp-listen)") {
		t.Errorf("busy --tcp-listen: %v\n%s", err, out)
	}
}

// TestPerfRatioLines: the ratio lines say what was compared: the
// ping-pong's by the mean and by the median round trip, a small
// message's by bitrate and by message rate.
func TestPerfRatioLines(t *testing.T) {
	lat := func(mean, p50 float64) *perf.Latency { return &perf.Latency{Samples: 10, MeanUS: mean, P50US: p50} }
	var b strings.Builder
	p := &perfPrinter{w: &b, op: perf.OpPingPong, size: 64}
	g := &perf.Result{Sum: perf.Summary{Latency: lat(90, 80)}}
	tcp := &perf.Result{Sum: perf.Summary{Latency: lat(45, 20)}}
	if r := p.ratio(g, tcp); r == nil || *r != 2 {
		t.Errorf("ratio %v, want 2", r)
	}
	if m := perfMedianRatio(g, tcp); m == nil || *m != 4 {
		t.Errorf("median ratio %v, want 4", m)
	}
	if want := "\ngosiw/TCP round trip: 2.00 (mean 90.00 us vs 45.00 us); p50 4.00 (80.00 us vs 20.00 us)\n"; b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}

	b.Reset()
	p = &perfPrinter{w: &b, op: perf.OpWrite, size: 64}
	g = &perf.Result{Sum: perf.Summary{Seconds: 1, Ops: 1e6, BitsPerSecond: 512e6}}
	tcp = &perf.Result{Sum: perf.Summary{Seconds: 2, Ops: 8e6, BitsPerSecond: 2048e6}}
	if r := p.ratio(g, tcp); r == nil || *r != 0.25 {
		t.Errorf("ratio %v, want 0.25", r)
	}
	for _, want := range []string{"gosiw/TCP throughput: 0.25 ( 512 Mbits/sec vs 2.05 Gbits/sec)", "gosiw/TCP message rate: 0.25 (1.00 Mops/sec vs 4.00 Mops/sec)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in %q", want, b.String())
		}
	}
}

// TestPerfJSONSendGoroutine: --send-goroutine is recorded in start, and
// left out without it.
func TestPerfJSONSendGoroutine(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	addr, _ := perfResponder(t)
	for _, sg := range []bool{false, true} {
		args := []string{"write", "--json", "-l", "64", "-t", "100ms", "-i", "0"}
		if sg {
			args = append(args, "--send-goroutine")
		}
		out, err := runPerfCmd(t, append(args, addr)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var doc struct {
			Start map[string]any `json:"start"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got, present := doc.Start["send_goroutine"]
		if present != sg || (sg && got != true) {
			t.Errorf("--send-goroutine %v: start.send_goroutine %v (present %v)", sg, got, present)
		}
	}
}
