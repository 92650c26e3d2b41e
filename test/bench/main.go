// Command bench measures gosiw's data path beside the plain TCP a Go user
// would write instead, in one process and one run, and prints the ratios
// (make bench).
//
// Each case runs under testing.Benchmark (ReportAllocs, SetBytes): gosiw
// RDMA Write, RDMA Read and Send/Recv streams at 64 B, 4 KiB, 64 KiB and
// 1 MiB with the MPA CRC off and on (the QPs set QPConfig.CRCInPlace, as
// an application whose memory nothing else writes would: with CRC a large
// payload is placed straight and its CRC computed there; -crcinplace=false
// measures a QP's default, every byte through the receive buffer), 1 MiB
// Writes on four QPs at once,
// and a 64-byte Send/Recv ping-pong, whose QPs use QPConfig.PollRx (the
// waiting goroutine runs the receive engine, the mode a latency-bound
// application opts into; pingpong-rxg, a diagnostic without a target, is
// the same ping-pong with the receive goroutines). The Write and Send
// workloads post as a message-rate RDMA user does (perftest's
// ib_write_bw, ib_send_bw): up to 8192 Writes or Sends on the SQ
// in lists of 32 with only the last signaled, 8192 receives posted and
// reposted in lists (see sqDepth and recvPosted in gosiw.go); every
// message is still a whole RDMA operation, every receive completion
// reaped. A Send stream's client and server run on a goroutine each, the
// server's QP in the PollRx mode (its goroutine waits for receives and
// runs the receive engine meanwhile, as siw perf's responder does);
// send-rxg, a 64-byte diagnostic without a target, is the same with the
// server's receive goroutine. Every target is judged against a
// bare TCP baseline (bare.go) in the same run: bulk (one goroutine
// writing size-byte buffers, one reading, as iperf3 does) for Write,
// Send and Read of 64 KiB and more; batched (messages through a
// bufio.Writer that flushes when nothing more is queued, read through a
// bufio.Reader) below that, in messages per second; four bulk streams at
// once for the four QPs; the bare echo loop (one goroutine each side,
// write then read) for the ping-pong. When iperf3 is installed it runs
// too (iperf3 -s -1, iperf3 -c -J, 1 MiB writes) and its figure is
// printed as the ceiling of one TCP stream. The mirrored baselines of
// raw.go (the same messages through a copy of the QP's goroutine
// structure) are a diagnostic column only (-mirrored=false leaves them
// out). So is wire, for the 64-byte Writes and Sends: the batched
// baseline again, with messages as long as the FPDUs that carry gosiw's
// on the wire (84 and 88 bytes), which tells what the extra bytes alone
// cost the kernel's TCP; a "wire bound" line gives, per case, the wire
// baseline's rate over the target's baseline: the ratio a stack whose
// only cost were its FPDUs' bytes would score in this run. Both ends of
// every connection live in this process.
//
// Links: lo is loopback TCP (127.0.0.1), where every case runs; veth is
// two network namespaces this program creates (root and ip(8) needed)
// joined by a veth pair with a 1500-byte MTU, so TCP's MSS is 1448 and
// gosiw cuts messages into MSS-sized FPDUs as on a real network; there
// the 1 MiB Write and Read (CRC off and on) and the ping-pong run. The
// namespaces are deleted when the program ends, also on an error or a
// signal (and a later run removes those of a killed one). Without root or
// ip(8) the veth cases are reported as not run, with the reason.
//
// The cases run round-robin -count times (baselines next to the gosiw
// cases they serve) and each keeps its best run, which makes the ratios
// steadier on a busy machine. The output is a table (with the
// performance targets, see target; allocations per operation; the ratio
// of CPU time per operation, which depends less on other load than throughput does, and
// the diagnostic ratios against the mirrored and the wire-length
// baselines), then one line per measured case and baseline for comparing
// runs:
//
//	ratio op=write size=1048576 crc=off link=lo baseline=bare value=0.93
//	ratio op=write size=1048576 crc=off link=lo baseline=mirrored value=1.02
//	ratio op=send size=64 crc=off link=lo baseline=wire value=0.81
//
// value is gosiw / baseline throughput (messages per second for small
// sizes: the same ratio), or baseline / gosiw round-trip time for
// pingpong: higher is better, 1 is parity. A missed target prints as
// "miss" and does not change the exit status, which is 1 when a case
// failed to run (and with -strict also when a target is missed).
//
// Before the table, unless -idleqps is 0, it connects that many idle QP
// pairs over loopback and reports the heap and stacks each pair holds,
// and what each step of the setup added (idle.go); -idleprofile writes a
// heap profile of them, for the structures behind each step. Unless
// -siwdidle is 0 it also runs a siwd (package daemon) with a small region
// and connects that many idle region clients to it from another process
// (this program, run again), and reports the heap and stacks per
// connection of the siwd and of the client process (siwdidle.go).
//
// Usage:
//
//	go run ./test/bench [-time 200ms] [-count 5] [-links lo,veth] [-run regexp] [-json] [-strict]
//	                    [-mirrored=false] [-iperf3=false] [-idleqps 1000] [-siwdidle 1000] [-idleprofile file]
//	                    [-cpuprofile file | -profiledir dir] [-trace file] [-only gosiw|raw] [-maxulpdu n] [-q]
//
// -profiledir writes a CPU profile of every run of every gosiw case
// (dir/<op>-<size>-crc<on|off>-<link>-r<round>.pprof) for the engine
// work; -cpuprofile one of the whole program; -trace an execution trace
// of the whole program (go tool trace: which goroutine ran, waited for
// a CPU or slept, and when). -only and -maxulpdu are
// for profiling and experiments: one side alone (no ratios), or gosiw
// QPs with a MaxULPDU other than the default.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

const (
	maxSize = 1 << 20
	// runLimit bounds one timed run of a case; a case that exceeds it
	// failed (a broken connection), it does not hang the program.
	runLimit = 60 * time.Second
	// unitLimit bounds one testing.Benchmark call; past it the program
	// gives up, cleans up and exits.
	unitLimit = 3 * time.Minute
	// multiQPs is how many QPs (and TCP streams) the write-4qp case
	// runs at once.
	multiQPs = 4
)

var sizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

// sample is one testing.Benchmark result.
type sample struct {
	NsPerOp float64 `json:"ns_per_op"`
	Allocs  int64   `json:"allocs_per_op"`
	N       int     `json:"n"`
	// CPUNsPerOp is the process's CPU time (user and system, every
	// thread) per operation over the timed part of the run: both ends of
	// the connection, and the kernel's TCP work done in their system
	// calls. Unlike NsPerOp it hardly depends on what else the machine
	// runs.
	CPUNsPerOp float64 `json:"cpu_ns_per_op"`
}

// cpuB is a *testing.B that also measures the process's CPU time between
// ResetTimer and StopTimer (outside the allocation count).
type cpuB struct {
	*testing.B
	start, cpu time.Duration
}

func (b *cpuB) ResetTimer() {
	b.start = testutil.CPUTime()
	b.B.ResetTimer()
}

func (b *cpuB) StopTimer() {
	b.B.StopTimer()
	b.cpu = testutil.CPUTime() - b.start
}

// rawCase is a TCP baseline: bare (bulk, batched, bulk4, echo; bare.go)
// or mirrored (stream, reqresp, pingpong; raw.go).
type rawCase struct {
	Kind string `json:"kind"`
	Size int    `json:"size"`
	Link string `json:"link"`
	best *sample
	all  []sample
	err  error
	// minCPU is the lowest CPU time per operation of any run.
	minCPU float64
}

func (c *rawCase) name() string { return fmt.Sprintf("tcp-%s/%d/%s", c.Kind, c.Size, c.Link) }

// streams is how many connections the baseline uses.
func (c *rawCase) streams() int {
	if c.Kind == "bulk4" {
		return multiQPs
	}
	return 1
}

// bare tells a bare baseline from a mirrored one.
func (c *rawCase) bare() bool {
	switch c.Kind {
	case "bulk", "batched", "bulk4", "echo":
		return true
	}
	return false
}

// gosiwCase is a measured gosiw case and its baselines.
type gosiwCase struct {
	Op   string `json:"op"` // write, read, send, write-4qp, pingpong
	Size int    `json:"size"`
	CRC  bool   `json:"crc"`
	Link string `json:"link"`
	// bare is the baseline the target is judged against; mirror and
	// wire, when not nil, diagnostic ones (wire: the batched baseline
	// with messages of the length the case's FPDUs have on the wire).
	bare, mirror, wire *rawCase
	// target is the minimum ratio (0 for none); milestone a first,
	// looser one (0 for none).
	target, milestone float64
	best              *sample
	all               []sample
	minCPU            float64 // the lowest CPU time per operation of any run
	// maxAllocs is the highest allocs/op any run saw.
	maxAllocs int64
	err       error
}

func (c *gosiwCase) name() string {
	return fmt.Sprintf("%s/%d/crc=%s/%s", c.Op, c.Size, onOff(c.CRC), c.Link)
}

// sqDepth is the SQ depth of the case's QPs: its window (recvPosted for
// Sends, see gosiw.go), not deeper: a ring deeper than the window it
// cycles through only spreads the work requests over more cache.
func (c *gosiwCase) sqDepth() int {
	if c.Op == "send" || c.Op == "send-rxg" {
		return recvPosted
	}
	return sqDepth
}

// rxMode is where the case's QPs run their receive engines: the
// ping-pong's both sides, and the server of a Send stream, wait in
// CQ.Wait for their receives and take QPConfig.PollRx, the polling mode
// an application that waits for its receives opts into; the -rxg
// diagnostics are the same workloads with the receive goroutines, as
// is every other case (nobody waits for a Write's or Read's bytes to
// land on the passive side).
func (c *gosiwCase) rxMode() rxMode {
	switch c.Op {
	case "pingpong":
		return rxPollBoth
	case "send":
		return rxPollServer
	}
	return rxGoroutines
}

func (c *gosiwCase) qps() int {
	if c.Op == "write-4qp" {
		return multiQPs
	}
	return 1
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// ratioTo is gosiw / base throughput, or base / gosiw time for pingpong:
// for both, base ns/op over gosiw ns/op.
func (c *gosiwCase) ratioTo(base *rawCase) (float64, bool) {
	if c.err != nil || c.best == nil || base == nil || base.err != nil || base.best == nil {
		return 0, false
	}
	return base.best.NsPerOp / c.best.NsPerOp, true
}

// ratio is the ratio to the bare baseline, the one targets judge.
func (c *gosiwCase) ratio() (float64, bool) { return c.ratioTo(c.bare) }

// wireBound is the ratio to the bare baseline that a stack whose only
// cost is the bytes of its FPDUs would score in this run: the wire
// baseline's rate over the bare one's (messages per second). The case's
// own ratio is this bound times its wire ratio.
func (c *gosiwCase) wireBound() (float64, bool) {
	if c.bare == nil || c.bare.err != nil || c.bare.best == nil || c.wire == nil || c.wire.err != nil || c.wire.best == nil {
		return 0, false
	}
	return c.bare.best.NsPerOp / c.wire.best.NsPerOp, true
}

// cpuRatio is bare / gosiw CPU time per operation (higher is better).
func (c *gosiwCase) cpuRatio() (float64, bool) {
	if c.minCPU <= 0 || c.bare == nil || c.bare.minCPU <= 0 {
		return 0, false
	}
	return c.bare.minCPU / c.minCPU, true
}

// target returns the performance target for a case (the minimum ratio to the
// bare baseline, 0 for none) and its first milestone (0 for none).
func target(op string, size int, crc bool, link string) (tgt, milestone float64) {
	switch {
	case link == "lo" && (op == "write" || op == "send") && size == 1<<20:
		if crc {
			return 0.85, 0
		}
		return 0.95, 0
	case link == "lo" && op == "read" && size == 1<<20 && !crc:
		return 0.9, 0
	case link == "lo" && (op == "write" || op == "send") && size == 64 && !crc:
		return 0.7, 0 // messages per second against the batched baseline
	case link == "lo" && op == "write-4qp" && !crc:
		return 0.9, 0
	case link == "lo" && op == "pingpong" && !crc:
		return 1 / 1.25, 1 / 1.5 // round trip <= 1.25x the bare echo; first 1.5x
	case link == "veth" && op == "write" && size == 1<<20 && !crc:
		return 0.85, 0
	}
	return 0, 0
}

// cleanup runs registered cleanups once, on every way out.
var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

func atCleanup(f func()) {
	cleanupMu.Lock()
	cleanups = append(cleanups, f)
	cleanupMu.Unlock()
}

func cleanup() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func exit(code int) {
	cleanup()
	os.Exit(code)
}

type options struct {
	time       time.Duration
	count      int
	links      []string
	run        *regexp.Regexp
	json       bool
	strict     bool
	cpuprofile string
	trace      string
	profileDir string
	quiet      bool
	only       string // "", "gosiw" or "raw": run one side (for profiling)
	maxULPDU   int
	crcInPlace bool
	mirrored   bool // also run the mirrored baselines (a diagnostic)
	iperf3     bool // also run iperf3, when installed, as the ceiling
	idleQPs    int  // idle QP pairs to measure (0: none)
	siwdIdle   int  // idle clients of a siwd to measure (0: none)
	// idleProfile, when set, is where a heap profile of the idle QP
	// pairs goes, taken once they are connected.
	idleProfile string
}

func main() {
	siwdIdleClientMain()
	var o options
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./test/bench [flags]\n\nMeasures gosiw RDMA Write, Read, Send/Recv and a Send/Recv ping-pong beside bare TCP (and iperf3) and prints the ratios.\n\nFlags:")
		fs.PrintDefaults()
	}
	var links, run string
	fs.DurationVar(&o.time, "time", 200*time.Millisecond, "`duration` of one timed run of a case (testing's -benchtime)")
	fs.IntVar(&o.count, "count", 5, "rounds over all cases; each case keeps its best run")
	fs.StringVar(&links, "links", "lo,veth", "comma-separated `links` to measure: lo, veth")
	fs.StringVar(&run, "run", "", "only the gosiw cases whose name (op/size/crc=on|off/link) matches `regexp`")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of the table and ratio lines")
	fs.BoolVar(&o.strict, "strict", false, "exit with status 1 when a target is missed")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to `file`")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of the whole run to `file` (go tool trace: which goroutine ran, waited or slept when)")
	fs.StringVar(&o.profileDir, "profiledir", "", "write a CPU profile of every run of every gosiw case into `dir`")
	fs.BoolVar(&o.quiet, "q", false, "no progress on stderr")
	fs.IntVar(&o.maxULPDU, "maxulpdu", 0, "QPConfig.MaxULPDU of the gosiw QPs (experiments; 0: the MULPDU from the MSS, as siw)")
	fs.BoolVar(&o.crcInPlace, "crcinplace", true, "QPConfig.CRCInPlace for the gosiw QPs (with CRC, large payloads placed straight and the CRC computed over them there; the bench's memory is its own); false: through the receive buffer, the default a QP gets")
	fs.StringVar(&o.only, "only", "", "run only the `side` gosiw or raw (for profiling; no ratios)")
	fs.BoolVar(&o.mirrored, "mirrored", true, "also run the mirrored baselines (the QP's goroutine structure over TCP; a diagnostic column)")
	fs.BoolVar(&o.iperf3, "iperf3", true, "also run iperf3, when installed, and print its figure as the ceiling")
	fs.IntVar(&o.idleQPs, "idleqps", 1000, "connect this many idle QP pairs over loopback and report the memory per pair (0: skip)")
	fs.IntVar(&o.siwdIdle, "siwdidle", 1000, "connect this many idle region clients (another process) to a siwd and report its memory per connection, and the client's (0: skip)")
	fs.StringVar(&o.idleProfile, "idleprofile", "", "write a heap profile of the idle QP pairs, once connected, to `file` (go tool pprof -sample_index=inuse_space)")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	if o.count < 1 || o.time <= 0 || o.idleQPs < 0 || o.siwdIdle < 0 {
		fmt.Fprintln(os.Stderr, "bench: -count and -time must be positive, -idleqps and -siwdidle not negative")
		os.Exit(2)
	}
	if o.cpuprofile != "" && o.profileDir != "" {
		fmt.Fprintln(os.Stderr, "bench: -cpuprofile and -profiledir exclude each other (one CPU profile at a time)")
		os.Exit(2)
	}
	for _, l := range strings.Split(links, ",") {
		switch l = strings.TrimSpace(l); l {
		case "lo", "veth":
			if !slices.Contains(o.links, l) {
				o.links = append(o.links, l)
			}
		case "":
		default:
			fmt.Fprintf(os.Stderr, "bench: unknown link %q (want lo, veth)\n", l)
			os.Exit(2)
		}
	}
	if o.only != "" && o.only != "gosiw" && o.only != "raw" {
		fmt.Fprintf(os.Stderr, "bench: -only %q: want gosiw or raw\n", o.only)
		os.Exit(2)
	}
	var err error
	if o.run, err = regexp.Compile(run); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -run: %v\n", err)
		os.Exit(2)
	}
	// testing.Benchmark takes its duration from testing's own flags.
	testing.Init()
	if err := flag.CommandLine.Parse([]string{"-test.benchtime=" + o.time.String()}); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %v: cleaning up\n", s)
		exit(1)
	}()
	defer cleanup() // on a panic
	code := benchMain(&o)
	cleanup()
	os.Exit(code)
}

// recordTo creates file and starts a whole-run recording (a CPU profile,
// an execution trace) into it; the cleanup stops it and closes the file.
func recordTo(file string, start func(io.Writer) error, stop func()) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := start(f); err != nil {
		f.Close()
		return err
	}
	atCleanup(func() {
		stop()
		f.Close()
	})
	return nil
}

func benchMain(o *options) int {
	for _, w := range []struct {
		file  string
		start func(io.Writer) error
		stop  func()
	}{
		{o.cpuprofile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{o.trace, trace.Start, trace.Stop},
	} {
		if w.file == "" {
			continue
		}
		if err := recordTo(w.file, w.start, w.stop); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 2
		}
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 2
		}
	}
	if o.idleProfile != "" {
		// Every allocation of the idle pairs, not a sample.
		runtime.MemProfileRate = 1
	}
	r := newRunner(o)
	r.plan()
	if len(r.cases) == 0 {
		fmt.Fprintln(os.Stderr, "bench: no case matches -run")
		return 2
	}
	r.loadStart = loadAvg()
	r.congestion = tcpCongestion()
	start := time.Now()
	if o.idleQPs > 0 && o.only != "raw" {
		if !o.quiet {
			fmt.Fprintf(os.Stderr, "idle QPs: connecting %d pairs\n", o.idleQPs)
		}
		if o.idleProfile != "" {
			idleProfile = func() error { return writeHeapProfile(o.idleProfile) }
		}
		res, err := idleQPMemory(o.idleQPs)
		r.idle, r.idleErr = &res, err
	}
	if o.siwdIdle > 0 && o.only != "raw" {
		if !o.quiet {
			fmt.Fprintf(os.Stderr, "idle siwd clients: connecting %d\n", o.siwdIdle)
		}
		prof := ""
		if o.idleProfile != "" {
			prof = o.idleProfile + ".siwd"
		}
		res, err := siwdIdleMemory(o.siwdIdle, prof)
		r.siwdIdle, r.siwdIdleErr = &res, err
	}
	for round := 1; round <= o.count; round++ {
		for _, u := range r.units {
			u.run(round)
		}
	}
	r.elapsed = time.Since(start)
	r.loadEnd = loadAvg()
	r.closeFixtures()
	if o.json {
		return r.printJSON(os.Stdout)
	}
	return r.print(os.Stdout)
}

// unit is one measurement a round makes: a baseline, iperf3 or a gosiw
// case.
type unit struct {
	name string
	run  func(round int)
}

type runner struct {
	o        *options
	cases    []*gosiwCase
	raws     []*rawCase
	ceilings []*ceiling
	units    []unit
	vethErr  error // why the veth cases did not run
	veth     *vethLink
	vethMSS  int
	// Fixtures by link and index ("lo#0"; gosiw: "lo/off#0"); a failed
	// run retires every fixture of its link (and CRC), by errors keyed
	// "lo" (gosiw: "lo/off").
	rawFix   map[string]*rawFixture
	rawErr   map[string]error
	gosiwFix map[string]*gosiwFixture
	gosiwErr map[string]error

	idle    *idleResult
	idleErr error

	siwdIdle    *siwdIdleResult
	siwdIdleErr error

	loadStart, loadEnd string
	congestion         string // tcpCongestion at the start
	elapsed            time.Duration
}

func newRunner(o *options) *runner {
	return &runner{o: o, rawFix: map[string]*rawFixture{}, rawErr: map[string]error{},
		gosiwFix: map[string]*gosiwFixture{}, gosiwErr: map[string]error{}}
}

// plan lists the cases and orders the units of a round: each baseline
// right before the first gosiw case compared with it, iperf3 first on
// its link.
func (r *runner) plan() {
	for _, link := range r.o.links {
		bases := map[string]*rawCase{}
		base := func(kind string, size int) *rawCase {
			key := fmt.Sprint(kind, size)
			if bases[key] == nil {
				bases[key] = &rawCase{Kind: kind, Size: size, Link: link}
			}
			return bases[key]
		}
		var cases []*gosiwCase
		add := func(op string, size int, bare, mirror *rawCase) {
			if !r.o.mirrored {
				mirror = nil
			}
			var wire *rawCase
			if size == 64 && link == "lo" && (op == "write" || op == "send") {
				wire = base("batched", wireLen(op, size))
			}
			for _, crc := range []bool{false, true} {
				c := &gosiwCase{Op: op, Size: size, CRC: crc, Link: link, bare: bare, mirror: mirror}
				if !crc {
					c.wire = wire // what the wire costs, next to the case the target judges
				}
				c.target, c.milestone = target(op, size, crc, link)
				if r.o.run.MatchString(c.name()) {
					cases = append(cases, c)
				}
			}
		}
		if link == "lo" {
			for _, size := range sizes {
				bare := base(bareKind(size), size)
				add("write", size, bare, base("stream", size))
				add("send", size, bare, base("stream", size))
				if size == 64 {
					add("send-rxg", size, bare, nil)
				}
				add("read", size, bare, base("reqresp", size))
			}
			add("write-4qp", 1<<20, base("bulk4", 1<<20), nil)
		} else {
			add("write", 1<<20, base("bulk", 1<<20), base("stream", 1<<20))
			add("read", 1<<20, base("bulk", 1<<20), base("reqresp", 1<<20))
		}
		add("pingpong", 64, base("echo", 64), base("pingpong", 64))
		add("pingpong-rxg", 64, base("echo", 64), nil)
		if len(cases) == 0 {
			continue
		}
		if link == "veth" {
			v, err := setupVeth()
			if err != nil {
				r.vethErr = err
				for _, c := range cases {
					c.err = errVethSkipped
					r.cases = append(r.cases, c)
				}
				continue
			}
			r.veth = v
			atCleanup(v.close)
		}
		if r.o.iperf3 && r.o.only != "gosiw" {
			cl := &ceiling{Link: link}
			r.ceilings = append(r.ceilings, cl)
			r.units = append(r.units, r.iperfUnit(cl))
		}
		emitted := map[*rawCase]bool{}
		for _, c := range cases {
			for _, b := range []*rawCase{c.bare, c.mirror, c.wire} {
				if b == nil || emitted[b] {
					continue
				}
				emitted[b] = true
				r.raws = append(r.raws, b)
				if r.o.only != "gosiw" {
					r.units = append(r.units, r.rawUnit(b))
				}
			}
			r.cases = append(r.cases, c)
			if r.o.only != "raw" {
				r.units = append(r.units, r.gosiwUnit(c))
			}
		}
	}
}

var errVethSkipped = fmt.Errorf("veth not set up")

// connPair returns a TCP connection over link: the dialing end and the
// accepted end.
func (r *runner) connPair(link string) (net.Conn, net.Conn, error) {
	if link == "veth" {
		return r.veth.pair()
	}
	return loopbackPair()
}

func loopbackPair() (net.Conn, net.Conn, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	return dialAccept(ln)
}

// dialAccept dials ln and accepts that connection: the dialing end and
// the accepted end. ln stays open.
func dialAccept(ln *net.TCPListener) (net.Conn, net.Conn, error) {
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		return nil, nil, err
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

// rawFixtures returns n raw fixtures over link.
func (r *runner) rawFixtures(link string, n int) ([]*rawFixture, error) {
	if err := r.rawErr[link]; err != nil {
		return nil, err
	}
	fs := make([]*rawFixture, n)
	for i := range fs {
		key := fmt.Sprintf("%s#%d", link, i)
		if fs[i] = r.rawFix[key]; fs[i] != nil {
			continue
		}
		c, s, err := r.connPair(link)
		if err != nil {
			r.rawErr[link] = err
			return nil, err
		}
		if link == "veth" {
			r.vethMSS = mss(c)
		}
		fs[i] = newRawFixture(c, s)
		r.rawFix[key] = fs[i]
	}
	return fs, nil
}

// gosiwFixtures returns n gosiw fixtures over link, their QPs' receive
// engines where mode says.
func (r *runner) gosiwFixtures(link string, crc bool, n int, mode rxMode, sq int) ([]*gosiwFixture, error) {
	ekey := link + "/" + onOff(crc)
	if err := r.gosiwErr[ekey]; err != nil {
		return nil, err
	}
	fs := make([]*gosiwFixture, n)
	for i := range fs {
		key := fmt.Sprintf("%s#%d/%v/sq=%d", ekey, i, mode, sq)
		if fs[i] = r.gosiwFix[key]; fs[i] != nil {
			continue
		}
		c, s, err := r.connPair(link)
		if err == nil {
			fs[i], err = newGosiwFixture(c, s, crc, r.o.maxULPDU, sq, mode, r.o.crcInPlace)
		}
		if err != nil {
			r.gosiwErr[ekey] = err
			return nil, err
		}
		r.gosiwFix[key] = fs[i]
	}
	return fs, nil
}

// brokenRaw retires every raw fixture of link after a failed run: a
// connection is in an unknown state.
func (r *runner) brokenRaw(link string, err error) {
	for key, f := range r.rawFix {
		if strings.HasPrefix(key, link+"#") {
			f.close()
			delete(r.rawFix, key)
		}
	}
	r.rawErr[link] = fmt.Errorf("an earlier TCP case failed: %w", err)
}

func (r *runner) brokenGosiw(link string, crc bool, err error) {
	ekey := link + "/" + onOff(crc)
	for key, f := range r.gosiwFix {
		if strings.HasPrefix(key, ekey+"#") {
			f.close()
			delete(r.gosiwFix, key)
		}
	}
	r.gosiwErr[ekey] = fmt.Errorf("an earlier gosiw case failed: %w", err)
}

func (r *runner) closeFixtures() {
	for _, f := range r.rawFix {
		f.close()
	}
	for _, f := range r.gosiwFix {
		f.close()
	}
}

// measure runs fn under testing.Benchmark.
func measure(name string, fn func(b bench, n int) error) (sample, error) {
	wd := time.AfterFunc(unitLimit, func() {
		fmt.Fprintf(os.Stderr, "bench: %s did not finish in %v; giving up\n", name, unitLimit)
		exit(1)
	})
	defer wd.Stop()
	var err error
	var cpu time.Duration // of the last run, the one reported
	res := testing.Benchmark(func(b *testing.B) {
		if err != nil {
			b.Fail()
			return
		}
		cb := &cpuB{B: b}
		if e := fn(cb, b.N); e != nil {
			err = e
			b.Fail()
		}
		cpu = cb.cpu
	})
	if err == nil && res.N == 0 {
		err = fmt.Errorf("no result")
	}
	if err != nil {
		return sample{}, err
	}
	return sample{NsPerOp: float64(res.T.Nanoseconds()) / float64(res.N), Allocs: res.AllocsPerOp(), N: res.N,
		CPUNsPerOp: float64(cpu.Nanoseconds()) / float64(res.N)}, nil
}

func (r *runner) progress(round int, name string, s sample, err error, bytes int) {
	if r.o.quiet {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%d/%d] %-32s error: %v\n", round, r.o.count, name, err)
		return
	}
	fmt.Fprintf(os.Stderr, "[%d/%d] %-32s %s\n", round, r.o.count, name, fmtSample(s.NsPerOp, bytes))
}

// keep records a run in a case's best and lowest CPU figures.
func keep(best **sample, all *[]sample, minCPU *float64, s sample) {
	*all = append(*all, s)
	if *best == nil || s.NsPerOp < (*best).NsPerOp {
		*best = &s
	}
	if *minCPU == 0 || s.CPUNsPerOp < *minCPU {
		*minCPU = s.CPUNsPerOp
	}
}

func (r *runner) rawUnit(c *rawCase) unit {
	name := c.name()
	return unit{name: name, run: func(round int) {
		if c.err != nil {
			return
		}
		fs, err := r.rawFixtures(c.Link, c.streams())
		if err != nil {
			c.err = err
			return
		}
		f := fs[0]
		var fn func(b bench, n int) error
		switch c.Kind {
		case "bulk", "bulk4":
			fn = func(b bench, n int) error { return bareBulk(b, n, fs, c.Size) }
		case "batched":
			fn = func(b bench, n int) error { return bareBatched(b, n, f, c.Size) }
		case "echo":
			fn = func(b bench, n int) error { return rawEcho(b, n, f, c.Size) }
		case "stream":
			fn = func(b bench, n int) error { return rawStream(b, n, f, c.Size, depth) }
		case "reqresp":
			fn = func(b bench, n int) error { return rawReqResp(b, n, f, c.Size, readDepth) }
		case "pingpong":
			fn = func(b bench, n int) error { return rawPingPong(b, n, f, c.Size) }
		}
		s, err := measure(name, fn)
		r.progress(round, name, s, err, c.bytes())
		if err != nil {
			c.err = err
			r.brokenRaw(c.Link, err)
			return
		}
		keep(&c.best, &c.all, &c.minCPU, s)
	}}
}

func (c *rawCase) bytes() int {
	if c.Kind == "pingpong" || c.Kind == "echo" {
		return 0
	}
	return c.Size
}

func (c *gosiwCase) bytes() int {
	if c.pingPong() {
		return 0
	}
	return c.Size
}

func (r *runner) gosiwUnit(c *gosiwCase) unit {
	name := c.name()
	return unit{name: name, run: func(round int) {
		if c.err != nil {
			return
		}
		fs, err := r.gosiwFixtures(c.Link, c.CRC, c.qps(), c.rxMode(), c.sqDepth())
		if err != nil {
			c.err = err
			return
		}
		f := fs[0]
		var fn func(b bench, n int) error
		switch c.Op {
		case "write":
			fn = func(b bench, n int) error { return gosiwStream(b, n, f, rdmap.WRWrite, c.Size, sqDepth) }
		case "write-4qp":
			fn = func(b bench, n int) error { return gosiwStreams(b, n, fs, rdmap.WRWrite, c.Size, sqDepth) }
		case "read":
			fn = func(b bench, n int) error { return gosiwStream(b, n, f, rdmap.WRRead, c.Size, readDepth) }
		case "send", "send-rxg":
			fn = func(b bench, n int) error { return gosiwSend(b, n, f, c.Size) }
		case "pingpong", "pingpong-rxg":
			fn = func(b bench, n int) error { return gosiwPingPong(b, n, f, c.Size) }
		}
		stop, err := r.profile(c, round)
		if err != nil {
			c.err = err
			return
		}
		s, err := measure(name, fn)
		stop()
		r.progress(round, name, s, err, c.bytes())
		if err != nil {
			c.err = err
			r.brokenGosiw(c.Link, c.CRC, err)
			return
		}
		c.maxAllocs = max(c.maxAllocs, s.Allocs)
		keep(&c.best, &c.all, &c.minCPU, s)
	}}
}

// profile starts the CPU profile of a run of c when -profiledir is set;
// the returned function stops it.
func (r *runner) profile(c *gosiwCase, round int) (func(), error) {
	if r.o.profileDir == "" {
		return func() {}, nil
	}
	name := fmt.Sprintf("%s-%d-crc%s-%s-r%d.pprof", c.Op, c.Size, onOff(c.CRC), c.Link, round)
	f, err := os.Create(filepath.Join(r.o.profileDir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// fmtSample formats a throughput (bytes > 0; with the message rate for
// small messages) or a round-trip time.
func fmtSample(nsPerOp float64, bytes int) string {
	switch {
	case bytes >= bareSmall:
		return fmt.Sprintf("%.1f MB/s", float64(bytes)*1e3/nsPerOp)
	case bytes > 0:
		return fmt.Sprintf("%.1f MB/s %.3f Mmsg/s", float64(bytes)*1e3/nsPerOp, 1e3/nsPerOp)
	}
	return fmt.Sprintf("%.1f µs", nsPerOp/1e3)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// tcpCongestion is the congestion control new TCP connections get
// (Linux; "unknown" elsewhere): every stream of the bench, gosiw's and the
// baselines', runs under it, and it moves the loopback baselines (under
// BBR their runs spread far wider than under cubic: test/bench/RESULTS.md).
func tcpCongestion() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return "unknown"
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "unknown"
}

// judge compares a ratio with a case's target: "pass", "miss" or, for a
// case with a milestone, "miss (milestone pass)".
func (c *gosiwCase) judge(ratio float64) (string, bool) {
	switch {
	case ratio >= c.target:
		return "pass", true
	case c.milestone > 0 && ratio >= c.milestone:
		return "miss (milestone pass)", false
	}
	return "miss", false
}

// pingPong reports whether the case measures a round trip.
func (c *gosiwCase) pingPong() bool { return c.Op == "pingpong" || c.Op == "pingpong-rxg" }

// fmtRatio formats a ratio with two decimals, or with as many more (up
// to five) as it takes to tell it from target when two would show a
// missed target as met: 0.698 against 0.70 prints 0.698, not 0.70. A
// target of 0 (none) never asks for more.
func fmtRatio(ratio, target float64) string {
	s := fmt.Sprintf("%.2f", ratio)
	for d := 3; d <= 5 && ratio < target; d++ {
		if v, _ := strconv.ParseFloat(s, 64); v < target {
			break
		}
		s = fmt.Sprintf("%.*f", d, ratio)
	}
	return s
}

func (c *gosiwCase) targetText() string {
	if c.pingPong() {
		s := fmt.Sprintf("time<=%.2fx", 1/c.target)
		if c.milestone > 0 {
			s += fmt.Sprintf(" (first %.2gx)", 1/c.milestone)
		}
		return s
	}
	s := fmt.Sprintf(">=%.2f", c.target)
	if c.Size < bareSmall {
		s += " msg/s"
	}
	return s
}

func (r *runner) print(w io.Writer) int {
	fmt.Fprintf(w, "gosiw vs bare TCP: best of %d runs of %v per case; %s, GOMAXPROCS=%d, %d CPUs; TCP congestion control %s; load average %s at start, %s at end; took %v\n",
		r.o.count, r.o.time, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), r.congestion, r.loadStart, r.loadEnd, r.elapsed.Round(time.Second))
	if r.o.crcInPlace {
		fmt.Fprintf(w, "gosiw QPs with CRCInPlace: with CRC large payloads placed straight, their CRC computed there (-crcinplace=false: through the receive buffer, a QP's default)\n")
	} else {
		fmt.Fprintf(w, "gosiw QPs without CRCInPlace: with CRC every payload byte through the receive buffer (a QP's default)\n")
	}
	if r.o.maxULPDU != 0 {
		fmt.Fprintf(w, "gosiw QPs with MaxULPDU %d (not the default)\n", r.o.maxULPDU)
	}
	fmt.Fprintln(w, "(MB/s: message bytes per second, Mmsg/s: millions of messages per second; µs: round trip of a 64-byte ping-pong;")
	fmt.Fprintln(w, " ratio: gosiw/bare throughput or bare/gosiw time; cpu: bare/gosiw process CPU time per operation, both ends included,")
	fmt.Fprintln(w, " less sensitive to other load; mirrored: the ratio to the mirrored baseline, a diagnostic; wire: the ratio to the batched")
	fmt.Fprintln(w, " baseline with messages as long as gosiw's FPDUs, a diagnostic of what the wire's bytes cost; higher is better for all)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "op\tsize\tcrc\tlink\tgosiw\tbare TCP\tbaseline\tratio\ttarget\tresult\tallocs/op\tcpu\tmirrored\twire\t")
	var missed, errs, allocMiss []string
	passed := 0
	for _, c := range r.cases {
		row := fmt.Sprintf("%s\t%d\t%s\t%s\t", c.Op, c.Size, onOff(c.CRC), c.Link)
		if c.err != nil {
			if c.err != errVethSkipped {
				errs = append(errs, fmt.Sprintf("%s: %v", c.name(), c.err))
			}
			fmt.Fprintf(tw, "%s%s\t\t\t\t\t\t\t\t\t\t\n", row, shortErr(c.err))
			continue
		}
		if c.best == nil {
			fmt.Fprintf(tw, "%snot run\t\t\t\t\t\t\t\t\t\t\n", row)
			continue
		}
		bare := "-"
		if c.bare.err != nil {
			bare = "error"
			errs = append(errs, fmt.Sprintf("bare baseline of %s: %v", c.name(), c.bare.err))
		} else if c.bare.best != nil {
			bare = fmtSample(c.bare.best.NsPerOp, c.bytes())
		}
		ratio, ok := c.ratio()
		rs, tgt, res := "-", "-", "-"
		if ok {
			rs = fmtRatio(ratio, c.target)
		}
		if c.target > 0 {
			tgt = c.targetText()
			if !ok {
				res = "n/a"
			} else {
				var pass bool
				res, pass = c.judge(ratio)
				if pass {
					passed++
				} else {
					missed = append(missed, fmt.Sprintf("%s %s < %.2f", c.name(), rs, c.target))
				}
			}
		}
		allocs := fmt.Sprint(c.maxAllocs)
		if c.maxAllocs > 0 {
			allocs += " miss"
			allocMiss = append(allocMiss, fmt.Sprintf("%s %d allocs/op", c.name(), c.maxAllocs))
		}
		cpu := "-"
		if cr, ok := c.cpuRatio(); ok {
			cpu = fmt.Sprintf("%.2f", cr)
		}
		mir, wire := "-", "-"
		if mr, ok := c.ratioTo(c.mirror); ok {
			mir = fmt.Sprintf("%.2f", mr)
		}
		if wr, ok := c.ratioTo(c.wire); ok {
			wire = fmt.Sprintf("%.2f", wr)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", row, fmtSample(c.best.NsPerOp, c.bytes()), bare, c.bare.Kind, rs, tgt, res, allocs, cpu, mir, wire)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "TCP baselines (bare: bulk = one writer, one reader; batched = bufio.Writer/bufio.Reader; bulk4 = four bulk streams, aggregate;")
	fmt.Fprintln(w, "echo = write then read, one goroutine each side. mirrored, a diagnostic: stream, reqresp, pingpong through the QP's goroutine structure;")
	fmt.Fprintln(w, "batched at 84 and 88 bytes, a diagnostic: the length of a 64-byte Write's and Send's FPDU):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kind\tsize\tlink\tbest\truns\tallocs/op\t")
	for _, rc := range r.raws {
		switch {
		case rc.err != nil:
			fmt.Fprintf(tw, "%s\t%d\t%s\terror: %v\t\t\t\n", rc.Kind, rc.Size, rc.Link, rc.err)
		case rc.best != nil:
			var runs []string
			for _, s := range rc.all {
				runs = append(runs, fmtSample(s.NsPerOp, rc.bytes()))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t\n", rc.Kind, rc.Size, rc.Link, fmtSample(rc.best.NsPerOp, rc.bytes()), strings.Join(runs, ", "), rc.best.Allocs)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)

	measured := 0
	for _, c := range r.cases {
		if _, ok := c.ratio(); ok {
			measured++
		}
	}
	fmt.Fprintf(w, "ratio targets: %d pass, %d miss", passed, len(missed))
	if len(missed) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(missed, "; "))
	}
	fmt.Fprintln(w)
	if len(allocMiss) == 0 {
		fmt.Fprintf(w, "0 allocs/op: pass (every run of %d gosiw cases)\n", measured)
	} else {
		fmt.Fprintf(w, "0 allocs/op: miss (%s)\n", strings.Join(allocMiss, "; "))
	}
	for _, c := range r.cases {
		if b, ok := c.wireBound(); ok {
			fmt.Fprintf(w, "wire bound, %s/%d/crc=%s/%s: %.2f, the bare stream of %d-byte messages (the FPDU's length) against the %d-byte one: what the wire's bytes alone leave of the target's baseline (the ratio is this times the wire ratio)\n",
				c.Op, c.Size, onOff(c.CRC), c.Link, b, c.wire.Size, c.Size)
		}
	}
	for _, cl := range r.ceilings {
		fmt.Fprintln(w, r.ceilingLine(cl))
	}
	if r.siwdIdle != nil || r.siwdIdleErr != nil {
		fmt.Fprintln(w, r.siwdIdleLine())
	}
	if r.idle != nil || r.idleErr != nil {
		fmt.Fprintln(w, r.idleLine())
	}
	if r.veth != nil {
		fmt.Fprintf(w, "veth: %s, TCP MSS %d\n", r.veth, r.vethMSS)
	}
	if r.vethErr != nil {
		fmt.Fprintf(w, "veth cases NOT RUN: %v\n", r.vethErr)
	}
	for _, e := range errs {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	fmt.Fprintln(w)
	for _, kind := range []string{"bare", "mirrored", "wire"} {
		for _, c := range r.cases {
			base, target := c.bare, c.target
			switch kind {
			case "mirrored":
				base, target = c.mirror, 0
			case "wire":
				base, target = c.wire, 0
			}
			if ratio, ok := c.ratioTo(base); ok {
				fmt.Fprintf(w, "ratio op=%s size=%d crc=%s link=%s baseline=%s value=%s\n", c.Op, c.Size, onOff(c.CRC), c.Link, kind, fmtRatio(ratio, target))
			}
		}
	}
	switch {
	case len(errs) > 0:
		return 1
	case r.o.strict && (len(missed) > 0 || len(allocMiss) > 0):
		return 1
	}
	return 0
}

// ceilingLine reports iperf3's figure on a link beside the bare bulk
// baseline and gosiw's 1 MiB Write.
func (r *runner) ceilingLine(cl *ceiling) string {
	if cl.err != nil {
		return fmt.Sprintf("ceiling, %s: iperf3 not measured: %v", cl.Link, cl.err)
	}
	if cl.best == 0 {
		return fmt.Sprintf("ceiling, %s: iperf3 not measured", cl.Link)
	}
	line := fmt.Sprintf("ceiling, %s: iperf3 (one stream, 1 MiB writes) %.1f MB/s (%.1f Gbit/s)", cl.Link, cl.best/8/1e6, cl.best/1e9)
	for _, rc := range r.raws {
		if rc.Kind == "bulk" && rc.Size == 1<<20 && rc.Link == cl.Link && rc.best != nil {
			line += fmt.Sprintf("; bare bulk 1 MiB is %.2f of it", float64(rc.Size)*8e9/rc.best.NsPerOp/cl.best)
		}
	}
	for _, c := range r.cases {
		if c.Op == "write" && c.Size == 1<<20 && c.Link == cl.Link && c.best != nil {
			line += fmt.Sprintf("; gosiw write 1 MiB crc=%s %.2f", onOff(c.CRC), float64(c.Size)*8e9/c.best.NsPerOp/cl.best)
		}
	}
	return line
}

func shortErr(err error) string {
	if err == errVethSkipped {
		return "not run (veth)"
	}
	return "error (below)"
}

type jsonCase struct {
	*gosiwCase
	GosiwNsPerOp  float64  `json:"gosiw_ns_per_op,omitempty"`
	GosiwMBps     float64  `json:"gosiw_mb_per_s,omitempty"`
	Baseline      string   `json:"baseline"`
	RawNsPerOp    float64  `json:"raw_ns_per_op,omitempty"`
	RawMBps       float64  `json:"raw_mb_per_s,omitempty"`
	Ratio         *float64 `json:"ratio,omitempty"`
	CPURatio      *float64 `json:"cpu_ratio,omitempty"`
	MirrorNsPerOp float64  `json:"mirrored_ns_per_op,omitempty"`
	MirrorRatio   *float64 `json:"mirrored_ratio,omitempty"`
	WireSize      int      `json:"wire_size,omitempty"`
	WireNsPerOp   float64  `json:"wire_ns_per_op,omitempty"`
	WireRatio     *float64 `json:"wire_ratio,omitempty"`
	WireBound     *float64 `json:"wire_bound,omitempty"`
	Target        float64  `json:"target,omitempty"`
	Milestone     float64  `json:"milestone,omitempty"`
	Pass          *bool    `json:"pass,omitempty"`
	AllocsPerOp   int64    `json:"allocs_per_op"`
	Runs          []sample `json:"runs,omitempty"`
	RawRuns       []sample `json:"raw_runs,omitempty"`
	Error         string   `json:"error,omitempty"`
}

func (r *runner) printJSON(w io.Writer) int {
	out := struct {
		GoVersion  string          `json:"go_version"`
		GOMAXPROCS int             `json:"gomaxprocs"`
		Time       string          `json:"time_per_run"`
		Count      int             `json:"count"`
		LoadStart  string          `json:"load_start"`
		LoadEnd    string          `json:"load_end"`
		Congestion string          `json:"tcp_congestion_control"`
		MaxULPDU   int             `json:"max_ulpdu,omitempty"`
		CRCInPlace bool            `json:"crc_in_place"`
		VethMSS    int             `json:"veth_mss,omitempty"`
		VethError  string          `json:"veth_error,omitempty"`
		Cases      []jsonCase      `json:"cases"`
		Raw        []jsonRaw       `json:"raw"`
		Ceilings   []jsonCeil      `json:"iperf3,omitempty"`
		IdleQPs    *idleResult     `json:"idle_qps,omitempty"`
		IdleError  string          `json:"idle_qps_error,omitempty"`
		SiwdIdle   *siwdIdleResult `json:"idle_siwd,omitempty"`
		SiwdError  string          `json:"idle_siwd_error,omitempty"`
	}{GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), Time: r.o.time.String(), Count: r.o.count,
		LoadStart: r.loadStart, LoadEnd: r.loadEnd, Congestion: r.congestion, VethMSS: r.vethMSS, MaxULPDU: r.o.maxULPDU, CRCInPlace: r.o.crcInPlace, IdleQPs: r.idle, SiwdIdle: r.siwdIdle}
	if r.vethErr != nil {
		out.VethError = r.vethErr.Error()
	}
	if r.idleErr != nil {
		out.IdleQPs, out.IdleError = nil, r.idleErr.Error()
	}
	if r.siwdIdleErr != nil {
		out.SiwdIdle, out.SiwdError = nil, r.siwdIdleErr.Error()
	}
	code := 0
	for _, c := range r.cases {
		j := jsonCase{gosiwCase: c, Baseline: c.bare.Kind, Target: c.target, Milestone: c.milestone, AllocsPerOp: c.maxAllocs, Runs: c.all, RawRuns: c.bare.all}
		if c.err != nil {
			j.Error = c.err.Error()
			if c.err != errVethSkipped {
				code = 1
			}
		}
		if c.best != nil {
			j.GosiwNsPerOp = c.best.NsPerOp
			if c.bytes() > 0 {
				j.GosiwMBps = float64(c.bytes()) * 1e3 / c.best.NsPerOp
			}
		}
		if c.bare.best != nil {
			j.RawNsPerOp = c.bare.best.NsPerOp
			if c.bytes() > 0 {
				j.RawMBps = float64(c.bytes()) * 1e3 / c.bare.best.NsPerOp
			}
		}
		if c.mirror != nil && c.mirror.best != nil {
			j.MirrorNsPerOp = c.mirror.best.NsPerOp
		}
		if mr, ok := c.ratioTo(c.mirror); ok {
			j.MirrorRatio = &mr
		}
		if c.wire != nil {
			j.WireSize = c.wire.Size
			if c.wire.best != nil {
				j.WireNsPerOp = c.wire.best.NsPerOp
			}
		}
		if wr, ok := c.ratioTo(c.wire); ok {
			j.WireRatio = &wr
		}
		if wb, ok := c.wireBound(); ok {
			j.WireBound = &wb
		}
		if cr, ok := c.cpuRatio(); ok {
			j.CPURatio = &cr
		}
		if ratio, ok := c.ratio(); ok {
			j.Ratio = &ratio
			if c.target > 0 {
				_, p := c.judge(ratio)
				j.Pass = &p
			}
		}
		out.Cases = append(out.Cases, j)
	}
	for _, rc := range r.raws {
		j := jsonRaw{rawCase: rc, Bare: rc.bare(), Runs: rc.all}
		if rc.best != nil {
			j.NsPerOp = rc.best.NsPerOp
		}
		if rc.err != nil {
			j.Error = rc.err.Error()
			code = 1
		}
		out.Raw = append(out.Raw, j)
	}
	for _, cl := range r.ceilings {
		j := jsonCeil{Link: cl.Link, BitsPerSecond: cl.best}
		if cl.err != nil {
			j.Error = cl.err.Error()
		}
		out.Ceilings = append(out.Ceilings, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	return code
}

type jsonRaw struct {
	*rawCase
	Bare    bool     `json:"bare"`
	NsPerOp float64  `json:"ns_per_op,omitempty"`
	Runs    []sample `json:"runs,omitempty"`
	Error   string   `json:"error,omitempty"`
}

type jsonCeil struct {
	Link          string  `json:"link"`
	BitsPerSecond float64 `json:"bits_per_second,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// writeHeapProfile writes the heap profile (after a GC) to name.
func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// wireLen is the length on the wire of the FPDU that carries a message of
// size bytes of op (write or send) in one segment, without markers: what
// the wire baseline writes per message.
func wireLen(op string, size int) int {
	if op == "write" {
		return mpa.FPDULen(ddp.TaggedHeaderLen + size)
	}
	return mpa.FPDULen(ddp.UntaggedHeaderLen + size)
}
