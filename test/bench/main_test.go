package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/rdmap"
)

func TestMain(m *testing.M) {
	siwdIdleClientMain() // TestSiwdIdleMemory's client process
	goleak.VerifyTestMain(m)
}

// TestWorkloads runs every workload a few times over loopback: the
// fixtures survive consecutive runs of any kind (no bytes, receives or
// completions left over).
func TestWorkloads(t *testing.T) {
	r := newRunner(&options{})
	t.Cleanup(r.closeFixtures)
	raws, err := r.rawFixtures("lo", multiQPs)
	if err != nil {
		t.Fatal(err)
	}
	raw := raws[0]
	for _, size := range sizes {
		for _, run := range []struct {
			name string
			fn   func(n int) error
		}{
			{"stream", func(n int) error { return rawStream(nopBench{}, n, raw, size, depth) }},
			{"reqresp", func(n int) error { return rawReqResp(nopBench{}, n, raw, size, readDepth) }},
			{"pingpong", func(n int) error { return rawPingPong(nopBench{}, n, raw, size) }},
			{"echo", func(n int) error { return rawEcho(nopBench{}, n, raw, size) }},
			{"bulk", func(n int) error { return bareBulk(nopBench{}, n, []*rawFixture{raw}, size) }},
			{"batched", func(n int) error { return bareBatched(nopBench{}, n, raw, size) }},
			{"bulk4", func(n int) error { return bareBulk(nopBench{}, n, raws, size) }},
		} {
			for _, n := range []int{1, 3 * depth} {
				if err := run.fn(n); err != nil {
					t.Fatalf("raw %s %d n=%d: %v", run.name, size, n, err)
				}
			}
		}
	}
	for _, k := range []struct {
		crc  bool
		mode rxMode
	}{{false, rxGoroutines}, {true, rxGoroutines}, {false, rxPollServer}, {true, rxPollServer}, {false, rxPollBoth}, {true, rxPollBoth}} {
		crc := k.crc
		fs, err := r.gosiwFixtures("lo", crc, multiQPs, k.mode, recvPosted)
		if err != nil {
			t.Fatal(err)
		}
		f := fs[0]
		for _, size := range sizes {
			for _, run := range []struct {
				name  string
				fn    func(n int) error
				depth int // the receives' or the SQ's depth the run has to go past
			}{
				{"write", func(n int) error { return gosiwStream(nopBench{}, n, f, rdmap.WRWrite, size, sqDepth) }, sqDepth},
				{"read", func(n int) error { return gosiwStream(nopBench{}, n, f, rdmap.WRRead, size, readDepth) }, sqDepth},
				{"send", func(n int) error { return gosiwSend(nopBench{}, n, f, size) }, recvPosted},
				{"pingpong", func(n int) error { return gosiwPingPong(nopBench{}, n, f, size) }, sqDepth},
				{"write-4qp", func(n int) error { return gosiwStreams(nopBench{}, n, fs, rdmap.WRWrite, size, sqDepth) }, sqDepth},
			} {
				// Runs of one request, of a list and a part, and (small
				// sizes) past the SQ's or the receives' depth, the send's
				// twice round the receive ring.
				ns := []int{1, signalEvery + 3, 3*signalEvery + 1}
				if size <= 4096 {
					ns = append(ns, 2*run.depth+5)
				}
				for _, n := range ns {
					if err := run.fn(n); err != nil {
						t.Fatalf("gosiw %s %d crc=%v %v n=%d: %v (QP errors: %v, %v)", run.name, size, crc, k.mode, n, err, f.a.qp.Err(), f.b.qp.Err())
					}
				}
			}
		}
		// Every receive is posted again.
		for _, f := range fs {
			if n := f.b.cq.Len() + f.a.cq.Len(); n != 0 {
				t.Errorf("%d completions left over", n)
			}
		}
	}
}

// placedBench is a bench whose StopTimer notes the payload bytes the
// servers of fs have placed, as the bare baselines' timers stop once
// their readers have every byte.
type placedBench struct {
	nopBench
	fs      []*gosiwFixture
	stopped bool
	placed  uint64
}

func (b *placedBench) StopTimer() {
	if !b.stopped {
		b.stopped, b.placed = true, serverPlaced(b.fs)
	}
}

// serverPlaced is the payload the servers of fs have placed so far.
func serverPlaced(fs []*gosiwFixture) uint64 {
	var n uint64
	for _, f := range fs {
		st := f.b.qp.Stats()
		n += st.RxPlacedDirect + st.RxPlacedCopied
	}
	return n
}

// TestWriteTimerStopsPlaced: a Write run's timer stops only once every
// Write has been placed at the server (a Write completes at the client
// when it is written to the socket, with its bytes possibly still on
// their way), on one QP and on four, small messages and large.
func TestWriteTimerStopsPlaced(t *testing.T) {
	r := newRunner(&options{})
	t.Cleanup(r.closeFixtures)
	fs, err := r.gosiwFixtures("lo", false, multiQPs, rxGoroutines, sqDepth)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fs      []*gosiwFixture
		size, n int
	}{{fs[:1], 64, 3*signalEvery + 1}, {fs[:1], 1 << 20, 40}, {fs, 1 << 20, 40}, {fs, 4096, 2*sqDepth + 5}} {
		before := serverPlaced(c.fs)
		b := &placedBench{fs: c.fs}
		if err := gosiwStreams(b, c.n, c.fs, rdmap.WRWrite, c.size, sqDepth); err != nil {
			t.Fatal(err)
		}
		if got, want := b.placed-before, uint64(c.n*c.size); !b.stopped || got != want {
			t.Errorf("%d QPs, %d Writes of %d bytes: the timer stopped (%v) with %d bytes placed, want %d", len(c.fs), c.n, c.size, b.stopped, got, want)
		}
	}
}

// TestIdleLine: the per-step figures print heap and stacks with the
// stacks' sign, which a step that frees stacks makes negative.
func TestIdleLine(t *testing.T) {
	r := &runner{idle: &idleResult{Pairs: 2, Connected: 2048, AfterSend: 3072, Goroutines: 2, TCP: 512, Stages: []idleStage{
		{Name: "tcp", Heap: 512}, {Name: "cq", Heap: 700, Stack: -30}, {Name: "send", Heap: 820, Stack: -600},
	}}}
	got := strings.Split(r.idleLine(), "\n")[1]
	if want := "idle QPs, by step of the setup (per pair, heap + stacks): tcp 0.5+0.0 KiB; cq 0.7+0.0 KiB; send 0.8-0.6 KiB"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestBareBulkCounts: the bulk baseline splits n messages between its
// connections and each reader stops at exactly its share: the next run on
// the same connections finds no byte left over (its first read would see
// the wrong sequence number).
func TestBareBulkCounts(t *testing.T) {
	r := newRunner(&options{})
	t.Cleanup(r.closeFixtures)
	fs, err := r.rawFixtures("lo", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 7} {
		if err := bareBulk(nopBench{}, n, fs, 1000); err != nil {
			t.Fatal(err)
		}
		if err := bareBatched(nopBench{}, 5, fs[0], 64); err != nil {
			t.Fatalf("after bulk n=%d: %v", n, err)
		}
	}
	for parts, want := range map[int][]int{1: {7}, 3: {3, 2, 2}, 4: {2, 2, 2, 1}} {
		sum := 0
		for i := range parts {
			if got := share(7, parts, i); got != want[i] {
				t.Errorf("share(7, %d, %d) = %d, want %d", parts, i, got, want[i])
			}
			sum += share(7, parts, i)
		}
		if sum != 7 {
			t.Errorf("shares of 7 in %d sum to %d", parts, sum)
		}
	}
}

// TestReadSequence: the batched baseline's reader notices a lost,
// repeated or torn message.
func TestReadSequence(t *testing.T) {
	msg := func(seq uint64) []byte {
		b := make([]byte, 16)
		binary.BigEndian.PutUint64(b, seq)
		return b
	}
	good := slices.Concat(msg(0), msg(1), msg(2))
	if err := readSequence(bufio.NewReader(bytes.NewReader(good)), make([]byte, 16), 3); err != nil {
		t.Errorf("good stream: %v", err)
	}
	for name, in := range map[string][]byte{
		"lost":     slices.Concat(msg(0), msg(2), msg(3)),
		"repeated": slices.Concat(msg(0), msg(0), msg(1)),
		"torn":     slices.Concat(msg(0), msg(1)[:8], msg(2)),
		"short":    slices.Concat(msg(0), msg(1)),
	} {
		if err := readSequence(bufio.NewReader(bytes.NewReader(in)), make([]byte, 16), 3); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// idleBound is what TestIdleQPMemory and TestSiwdIdleMemory allow an
// idle connected QP pair (both ends, heap and stacks) to cost. Issue
// 11's target is 32 KiB, met with 1000 pairs by `go run ./test/bench
// -idleqps 1000 -siwdidle 1000` (about 27 KiB in both; 200 pairs
// measure about the same, and up to 38 KiB under -race, whose stacks are
// larger). The tests measure 200 on a machine that may be busy and allow
// 48 KiB, so that noise and -race never fail them, while any engine
// buffer held again while idle fails them (each end holds one, so the
// smallest, the send engine's 16 KiB release list, adds 32 KiB a pair;
// the Reader's 96 KiB, the Writer's scratch and iovecs, a fully
// allocated SQ or RQ ring far more). A goroutine more per end (about
// 8 KiB a pair) is not caught.
const idleBound = 48 << 10

// idleN is how many pairs the tests measure: enough for a per-pair
// heap figure that other allocations of the process do not move.
const idleN = 200

// TestIdleQPMemory connects idle QP pairs: the helper behind -idleqps
// works and cleans up (goleak checks the goroutines), and a pair costs
// at most idleBound connected and after one Send.
func TestIdleQPMemory(t *testing.T) {
	res, err := idleQPMemory(idleN)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pairs != idleN || res.Goroutines <= 0 {
		t.Errorf("result %+v", res)
	}
	if res.Connected > idleBound || res.AfterSend > idleBound {
		t.Errorf("an idle pair costs %.1f KiB connected, %.1f KiB after a Send; want <= %d KiB", res.Connected/1024, res.AfterSend/1024, idleBound>>10)
	}
	// The steps add up to the totals: connected is every step to
	// "start", after-send all of them.
	var sum, connected float64
	var names []string
	for _, st := range res.Stages {
		sum += st.Heap + st.Stack
		if st.Name == "start" {
			connected = sum
		}
		names = append(names, st.Name)
	}
	if got := strings.Join(names, " "); got != "tcp cq qp start send" {
		t.Errorf("stages %q", got)
	}
	if math.Abs(connected-res.Connected) > 1 || math.Abs(sum-res.AfterSend) > 1 || res.TCP != res.Stages[0].Heap+res.Stages[0].Stack {
		t.Errorf("stages %+v do not add up to %+v", res.Stages, res)
	}
	t.Logf("%+v", res)
}

// TestSiwdIdleMemory connects idle clients to a siwd from a child
// process: the helper behind -siwdidle works, both sides report their
// cost, everything is closed again (goleak), and a connection costs at
// most idleBound, both ends together.
func TestSiwdIdleMemory(t *testing.T) {
	res, err := siwdIdleMemory(idleN, "")
	if err != nil {
		t.Fatal(err)
	}
	if both := res.Server + res.Client; both > idleBound {
		t.Errorf("an idle siwd connection costs %.1f KiB (siwd %.1f, client %.1f); want <= %d KiB both ends", both/1024, res.Server/1024, res.Client/1024, idleBound>>10)
	}
	if res.Conns != idleN || res.Server <= 0 || res.Client <= 0 || res.ServerStack > res.Server || res.ClientStack > res.Client || res.Goroutines < 1 {
		t.Errorf("result %+v", res)
	}
	t.Logf("%+v", res)
}

var ratioLine = regexp.MustCompile(`^ratio op=(write|read|send|write-4qp|pingpong) size=[0-9]+ crc=(on|off) link=(lo|veth) baseline=(bare|mirrored|wire) value=[0-9]+\.[0-9]{2,5}$`)

// TestOutput: the table, then one ratio line per measured case and
// baseline and nothing after them; cases that did not run get no ratio
// line; a missed target is "miss".
// TestFmtRatio: two decimals, more only when two would show a miss as
// met.
func TestFmtRatio(t *testing.T) {
	for _, c := range []struct {
		ratio, target float64
		want          string
	}{
		{0.698, 0.70, "0.698"},
		{0.6999, 0.70, "0.6999"},
		{0.69999999, 0.70, "0.70000"}, // five decimals at most
		{0.7, 0.70, "0.70"},
		{0.704, 0.70, "0.70"}, // a pass may round down to the target
		{0.694, 0.70, "0.69"},
		{0.698, 0, "0.70"}, // no target (a mirrored ratio)
		{1.2345, 0.95, "1.23"},
	} {
		if got := fmtRatio(c.ratio, c.target); got != c.want {
			t.Errorf("fmtRatio(%v, %v) = %q, want %q", c.ratio, c.target, got, c.want)
		}
	}
}

func TestOutput(t *testing.T) {
	r := newRunner(&options{time: time.Second, count: 1, links: []string{"lo", "veth"}, run: regexp.MustCompile("")})
	r.congestion = "cubic" // as the run's start records it
	bulk := &rawCase{Kind: "bulk", Size: 1 << 20, Link: "lo", best: &sample{NsPerOp: 500_000}}
	stream := &rawCase{Kind: "stream", Size: 1 << 20, Link: "lo", best: &sample{NsPerOp: 600_000}}
	batched := &rawCase{Kind: "batched", Size: 64, Link: "lo", best: &sample{NsPerOp: 100}}
	echo := &rawCase{Kind: "echo", Size: 64, Link: "lo", best: &sample{NsPerOp: 20_000}}
	wire := &rawCase{Kind: "batched", Size: wireLen("send", 64), Link: "lo", best: &sample{NsPerOp: 110}}
	r.raws = []*rawCase{bulk, stream, batched, echo, wire}
	r.ceilings = []*ceiling{{Link: "lo", best: 40e9}}
	mk := func(op string, size int, crc bool, bare, mirror *rawCase, ns float64, allocs int64) *gosiwCase {
		c := &gosiwCase{Op: op, Size: size, CRC: crc, Link: "lo", bare: bare, mirror: mirror, best: &sample{NsPerOp: ns}, maxAllocs: allocs}
		c.target, c.milestone = target(op, size, crc, "lo")
		return c
	}
	r.cases = []*gosiwCase{
		mk("write", 1<<20, false, bulk, stream, 520_000, 0),
		mk("write", 1<<20, true, bulk, stream, 800_000, 1),
		mk("send", 64, false, batched, nil, 125, 0),
		mk("send", 64, true, batched, nil, 200, 0),
		mk("write", 64, false, batched, nil, 143.3, 0), // 0.698: a miss that two decimals would show as 0.70
		mk("pingpong", 64, false, echo, nil, 28_000, 0),
		{Op: "write", Size: 1 << 20, Link: "veth", bare: &rawCase{Kind: "bulk", Size: 1 << 20, Link: "veth"}, err: errVethSkipped},
	}
	r.cases[2].wire = wire // the wire diagnostic, CRC off only (as plan sets it)
	r.vethErr = fmt.Errorf("needs root")
	var out bytes.Buffer
	if code := r.print(&out); code != 0 {
		t.Errorf("exit code %d", code)
	}
	s := out.String()
	// The header names the congestion control the streams ran under.
	cc := regexp.MustCompile(`(?m)^gosiw vs bare TCP: .*; TCP congestion control ([^;]+); load average `).FindStringSubmatch(s)
	if cc == nil || cc[1] != "cubic" {
		t.Errorf("no congestion control cubic in the header:\n%s", s)
	}
	for _, row := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^write +1048576 +off +lo +2016\.5 MB/s +2097\.2 MB/s +bulk +0\.96 +>=0\.95 +pass +0 +- +1\.15 +- *$`),
		regexp.MustCompile(`(?m)^write +1048576 +on +lo +1310\.7 MB/s +2097\.2 MB/s +bulk +0\.62 +>=0\.85 +miss +1 miss +- +0\.75 +- *$`),
		regexp.MustCompile(`(?m)^send +64 +off +lo +512\.0 MB/s 8\.000 Mmsg/s +640\.0 MB/s 10\.000 Mmsg/s +batched +0\.80 +>=0\.70 msg/s +pass +0 +- +- +0\.88 *$`),
		regexp.MustCompile(`(?m)^send +64 +on +lo +320\.0 MB/s 5\.000 Mmsg/s +640\.0 MB/s 10\.000 Mmsg/s +batched +0\.50 +- +- +0 +- +- +- *$`),
		regexp.MustCompile(`(?m)^write +64 +off +lo +446\.6 MB/s 6\.978 Mmsg/s +640\.0 MB/s 10\.000 Mmsg/s +batched +0\.698 +>=0\.70 msg/s +miss +0 +- +- +- *$`),
		regexp.MustCompile(`(?m)^pingpong +64 +off +lo +28\.0 µs +20\.0 µs +echo +0\.71 +time<=1\.25x \(first 1\.5x\) +miss \(milestone pass\) +0 +- +- +- *$`),
		regexp.MustCompile(`(?m)^batched +88 +lo +800\.0 MB/s 9\.091 Mmsg/s +0 *$`),
	} {
		if !row.MatchString(s) {
			t.Errorf("no row matching %v:\n%s", row, s)
		}
	}
	for _, want := range []string{
		"ratio targets: 2 pass, 3 miss (write/1048576/crc=on/lo 0.62 < 0.85; write/64/crc=off/lo 0.698 < 0.70; pingpong/64/crc=off/lo 0.71 < 0.80)",
		"0 allocs/op: miss (write/1048576/crc=on/lo 1 allocs/op)",
		"ceiling, lo: iperf3 (one stream, 1 MiB writes) 5000.0 MB/s (40.0 Gbit/s); bare bulk 1 MiB is 0.42 of it; gosiw write 1 MiB crc=off 0.40; gosiw write 1 MiB crc=on 0.26",
		"veth cases NOT RUN: needs root",
		"wire bound, send/64/crc=off/lo: 0.91, the bare stream of 88-byte messages (the FPDU's length) against the 64-byte one: what the wire's bytes alone leave of the target's baseline (the ratio is this times the wire ratio)",
		"not run (veth)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "FAIL") {
		t.Errorf("a missed target printed as FAIL:\n%s", s)
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	want := []string{
		"ratio op=write size=1048576 crc=off link=lo baseline=bare value=0.96",
		"ratio op=write size=1048576 crc=on link=lo baseline=bare value=0.62",
		"ratio op=send size=64 crc=off link=lo baseline=bare value=0.80",
		"ratio op=send size=64 crc=on link=lo baseline=bare value=0.50",
		"ratio op=write size=64 crc=off link=lo baseline=bare value=0.698",
		"ratio op=pingpong size=64 crc=off link=lo baseline=bare value=0.71",
		"ratio op=write size=1048576 crc=off link=lo baseline=mirrored value=1.15",
		"ratio op=write size=1048576 crc=on link=lo baseline=mirrored value=0.75",
		"ratio op=send size=64 crc=off link=lo baseline=wire value=0.88",
	}
	tail := lines[len(lines)-len(want):]
	for i, l := range tail {
		if l != want[i] || !ratioLine.MatchString(l) {
			t.Errorf("line %q, want %q", l, want[i])
		}
	}
	if n := len(regexp.MustCompile(`(?m)^ratio op=`).FindAllString(s, -1)); n != len(want) {
		t.Errorf("want %d ratio lines:\n%s", len(want), s)
	}
	if n := strings.Count(s, "wire bound, "); n != 1 {
		t.Errorf("%d wire bound lines, want 1 (the case with a wire baseline):\n%s", n, s)
	}

	// The JSON has the same bound: 100 ns a 64-byte message, 110 an
	// 88-byte one.
	out.Reset()
	if code := r.printJSON(&out); code != 0 {
		t.Errorf("JSON exit code %d", code)
	}
	var j struct {
		Congestion string           `json:"tcp_congestion_control"`
		Cases      []map[string]any `json:"cases"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out.String())
	}
	if cc != nil && j.Congestion != cc[1] {
		t.Errorf("JSON tcp_congestion_control %q, the table's header %q", j.Congestion, cc[1])
	}
	bounds := 0
	for _, c := range j.Cases {
		wb, ok := c["wire_bound"].(float64)
		if !ok {
			continue
		}
		bounds++
		name := fmt.Sprintf("%v/%v crc=%v wire_size=%v", c["op"], c["size"], c["crc"], c["wire_size"])
		if name != "send/64 crc=false wire_size=88" || math.Abs(wb-100.0/110) > 1e-9 {
			t.Errorf("wire_bound %v in case %s, want 100/110 in send/64 crc=false wire_size=88 only", wb, name)
		}
		if wr, _ := c["wire_ratio"].(float64); math.Abs(wr*wb-0.8) > 1e-9 {
			t.Errorf("wire_ratio %v times wire_bound %v is not the ratio 0.80 in case %s", wr, wb, name)
		}
	}
	if bounds != 1 {
		t.Errorf("%d cases with wire_bound, want 1:\n%s", bounds, out.String())
	}
}

// BenchmarkBatchedWireSize runs the batched small-message baseline
// (bareBatched) with 64-byte messages and with messages as long as the
// FPDU that carries a 64-byte Send on the wire (MPA's length field, the
// untagged DDP/RDMAP header, the payload and the CRC field: 88 bytes). It
// bounds what 64-byte Sends can reach against the baseline on a machine
// whose cores both move bytes through the kernel's TCP: the ratio of the
// two rates is what the extra wire bytes alone cost, before any RDMA work.
//
//	go test -run '^$' -bench BatchedWireSize -count 6 ./test/bench
func BenchmarkBatchedWireSize(b *testing.B) {
	wire := wireLen("send", 64)
	for _, size := range []int{64, wire} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			r := newRunner(&options{})
			defer r.closeFixtures()
			raws, err := r.rawFixtures("lo", 1)
			if err != nil {
				b.Fatal(err)
			}
			if err := bareBatched(b, b.N, raws[0], size); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
		})
	}
}
