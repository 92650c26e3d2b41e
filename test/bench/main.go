// Command bench measures gosiw's data path beside raw TCP, in one process
// and one run, and prints the ratios (make bench).
//
// Each case runs under testing.Benchmark (ReportAllocs, SetBytes): gosiw
// RDMA Write, RDMA Read and Send/Recv streams at 64 B, 4 KiB, 64 KiB and
// 1 MiB with the MPA CRC off and on, and a 64-byte Send/Recv ping-pong,
// each beside a raw TCP baseline with the same message sizes, the same
// depth and the same goroutine structure (raw.go): a plain stream for
// Write and Send, requests answered by size-byte responses for Read, a
// 64-byte echo through sender and receiver goroutines for the ping-pong.
// Both ends of every connection live in this process.
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
// The cases run round-robin -count times (raw baseline next to the gosiw
// cases it serves) and each keeps its best run, which makes the ratios
// steadier on a busy machine. The output is a table (with the targets of
// the issue, allocations per operation, and the ratio of CPU time per
// operation, which depends less on other load than throughput does),
// then one line per measured case for comparing runs:
//
//	ratio op=write size=1048576 crc=off link=lo value=0.93
//
// value is gosiw / raw TCP throughput, or raw TCP / gosiw round-trip time
// for pingpong: higher is better, 1 is parity. The exit status is 1 when
// a case failed to run, and with -strict also when a target is missed.
//
// Usage:
//
//	go run ./test/bench [-time 200ms] [-count 5] [-links lo,veth] [-run regexp] [-json] [-strict]
//	                    [-cpuprofile file] [-only gosiw|raw] [-maxulpdu n] [-q]
//
// -only and -maxulpdu are for profiling and experiments: one side alone
// (no ratios), or gosiw QPs with a MaxULPDU other than the default.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

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
	b.start = cpuTime()
	b.B.ResetTimer()
}

func (b *cpuB) StopTimer() {
	b.B.StopTimer()
	b.cpu = cpuTime() - b.start
}

// rawCase is a raw TCP baseline.
type rawCase struct {
	Kind string `json:"kind"` // stream, reqresp, pingpong, echo
	Size int    `json:"size"`
	Link string `json:"link"`
	best *sample
	all  []sample
	err  error
	// minCPU is the lowest CPU time per operation of any run.
	minCPU float64
}

// gosiwCase is a measured gosiw case and its baseline.
type gosiwCase struct {
	Op     string `json:"op"` // write, read, send, pingpong
	Size   int    `json:"size"`
	CRC    bool   `json:"crc"`
	Link   string `json:"link"`
	raw    *rawCase
	target float64 // minimum ratio, 0 for none
	best   *sample
	all    []sample
	minCPU float64 // the lowest CPU time per operation of any run
	// maxAllocs is the highest allocs/op any run saw.
	maxAllocs int64
	err       error
}

func (c *gosiwCase) name() string {
	return fmt.Sprintf("%s/%d/crc=%s/%s", c.Op, c.Size, onOff(c.CRC), c.Link)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// ratio is gosiw / raw throughput, or raw / gosiw time for pingpong: for
// both, raw ns/op over gosiw ns/op.
func (c *gosiwCase) ratio() (float64, bool) {
	if c.err != nil || c.best == nil || c.raw.err != nil || c.raw.best == nil {
		return 0, false
	}
	return c.raw.best.NsPerOp / c.best.NsPerOp, true
}

// cpuRatio is raw / gosiw CPU time per operation (higher is better).
func (c *gosiwCase) cpuRatio() (float64, bool) {
	if c.minCPU <= 0 || c.raw.minCPU <= 0 {
		return 0, false
	}
	return c.raw.minCPU / c.minCPU, true
}

// targets from the issue.
func target(op string, size int, crc bool, link string) float64 {
	switch {
	case link == "lo" && op == "write" && size == 1<<20 && !crc:
		return 0.9
	case link == "lo" && op == "write" && size == 1<<20 && crc:
		return 0.75
	case link == "lo" && op == "read" && size == 1<<20 && !crc:
		return 0.85
	case link == "lo" && op == "pingpong" && !crc:
		return 1 / 1.3 // latency <= 1.3x raw TCP
	case link == "veth" && op == "write" && size == 1<<20:
		return 0.7
	}
	return 0
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
	quiet      bool
	only       string // "", "gosiw" or "raw": run one side (for profiling)
	maxULPDU   int
}

func main() {
	var o options
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./test/bench [flags]\n\nMeasures gosiw RDMA Write, Read, Send/Recv and a Send/Recv ping-pong beside raw TCP and prints the ratios.\n\nFlags:")
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
	fs.BoolVar(&o.quiet, "q", false, "no progress on stderr")
	fs.IntVar(&o.maxULPDU, "maxulpdu", 0, "QPConfig.MaxULPDU of the gosiw QPs (experiments; 0: the MULPDU from the MSS, as siw)")
	fs.StringVar(&o.only, "only", "", "run only the `side` gosiw or raw (for profiling; no ratios)")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	if o.count < 1 || o.time <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -count and -time must be positive")
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

func benchMain(o *options) int {
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 2
		}
		atCleanup(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
	r := newRunner(o)
	r.plan()
	if len(r.cases) == 0 {
		fmt.Fprintln(os.Stderr, "bench: no case matches -run")
		return 2
	}
	r.loadStart = loadAvg()
	start := time.Now()
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

// unit is one measurement a round makes: a raw baseline or a gosiw case.
type unit struct {
	name string
	run  func(round int)
}

type runner struct {
	o        *options
	cases    []*gosiwCase
	raws     []*rawCase
	units    []unit
	vethErr  error // why the veth cases did not run
	veth     *vethLink
	vethMSS  int
	rawFix   map[string]*rawFixture
	rawErr   map[string]error
	gosiwFix map[string]*gosiwFixture
	gosiwErr map[string]error

	loadStart, loadEnd string
	elapsed            time.Duration
}

func newRunner(o *options) *runner {
	return &runner{o: o, rawFix: map[string]*rawFixture{}, rawErr: map[string]error{},
		gosiwFix: map[string]*gosiwFixture{}, gosiwErr: map[string]error{}}
}

// plan lists the cases and orders the units of a round: each raw
// baseline right before the gosiw cases compared with it.
func (r *runner) plan() {
	for _, link := range r.o.links {
		type group struct {
			raw *rawCase
			ops []*gosiwCase
		}
		var groups []group
		add := func(kind string, size int, ops ...string) {
			g := group{raw: &rawCase{Kind: kind, Size: size, Link: link}}
			for _, op := range ops {
				for _, crc := range []bool{false, true} {
					c := &gosiwCase{Op: op, Size: size, CRC: crc, Link: link, raw: g.raw, target: target(op, size, crc, link)}
					if r.o.run.MatchString(c.name()) {
						g.ops = append(g.ops, c)
					}
				}
			}
			if len(g.ops) > 0 {
				groups = append(groups, g)
			}
		}
		if link == "lo" {
			for _, size := range sizes {
				add("stream", size, "write", "send")
				add("reqresp", size, "read")
			}
		} else {
			add("stream", 1<<20, "write")
			add("reqresp", 1<<20, "read")
		}
		add("pingpong", 64, "pingpong")
		if len(groups) == 0 {
			continue
		}
		if link == "veth" {
			v, err := setupVeth()
			if err != nil {
				r.vethErr = err
				for _, g := range groups {
					for _, c := range g.ops {
						c.err = errVethSkipped
						r.cases = append(r.cases, c)
					}
				}
				continue
			}
			r.veth = v
			atCleanup(v.close)
		}
		for _, g := range groups {
			r.raws = append(r.raws, g.raw)
			if r.o.only != "gosiw" {
				r.units = append(r.units, r.rawUnit(g.raw))
			}
			for _, c := range g.ops {
				r.cases = append(r.cases, c)
				if r.o.only != "raw" {
					r.units = append(r.units, r.gosiwUnit(c))
				}
			}
			if g.raw.Kind == "pingpong" && r.o.only != "gosiw" {
				echo := &rawCase{Kind: "echo", Size: 64, Link: link}
				r.raws = append(r.raws, echo)
				r.units = append(r.units, r.rawUnit(echo))
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
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
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

func (r *runner) rawFixture(link string) (*rawFixture, error) {
	if f := r.rawFix[link]; f != nil {
		return f, nil
	}
	if err := r.rawErr[link]; err != nil {
		return nil, err
	}
	c, s, err := r.connPair(link)
	if err != nil {
		r.rawErr[link] = err
		return nil, err
	}
	if link == "veth" {
		r.vethMSS = mss(c)
	}
	f := newRawFixture(c, s)
	r.rawFix[link] = f
	return f, nil
}

func (r *runner) gosiwFixture(link string, crc bool) (*gosiwFixture, error) {
	key := link + "/" + onOff(crc)
	if f := r.gosiwFix[key]; f != nil {
		return f, nil
	}
	if err := r.gosiwErr[key]; err != nil {
		return nil, err
	}
	c, s, err := r.connPair(link)
	if err == nil {
		var f *gosiwFixture
		if f, err = newGosiwFixture(c, s, crc, r.o.maxULPDU); err == nil {
			r.gosiwFix[key] = f
			return f, nil
		}
	}
	r.gosiwErr[key] = err
	return nil, err
}

// broken retires a fixture after a failed run: its connection is in an
// unknown state.
func (r *runner) brokenRaw(link string, err error) {
	if f := r.rawFix[link]; f != nil {
		f.close()
		delete(r.rawFix, link)
	}
	r.rawErr[link] = fmt.Errorf("an earlier raw case failed: %w", err)
}

func (r *runner) brokenGosiw(link string, crc bool, err error) {
	key := link + "/" + onOff(crc)
	if f := r.gosiwFix[key]; f != nil {
		f.close()
		delete(r.gosiwFix, key)
	}
	r.gosiwErr[key] = fmt.Errorf("an earlier gosiw case failed: %w", err)
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

func (r *runner) rawUnit(c *rawCase) unit {
	name := fmt.Sprintf("raw-%s/%d/%s", c.Kind, c.Size, c.Link)
	return unit{name: name, run: func(round int) {
		if c.err != nil {
			return
		}
		f, err := r.rawFixture(c.Link)
		if err != nil {
			c.err = err
			return
		}
		var fn func(b bench, n int) error
		switch c.Kind {
		case "stream":
			fn = func(b bench, n int) error { return rawStream(b, n, f, c.Size, depth) }
		case "reqresp":
			fn = func(b bench, n int) error { return rawReqResp(b, n, f, c.Size, readDepth) }
		case "pingpong":
			fn = func(b bench, n int) error { return rawPingPong(b, n, f, c.Size) }
		case "echo":
			fn = func(b bench, n int) error { return rawEcho(b, n, f, c.Size) }
		}
		s, err := measure(name, fn)
		r.progress(round, name, s, err, c.bytes())
		if err != nil {
			c.err = err
			r.brokenRaw(c.Link, err)
			return
		}
		c.all = append(c.all, s)
		if c.best == nil || s.NsPerOp < c.best.NsPerOp {
			c.best = &s
		}
		if c.minCPU == 0 || s.CPUNsPerOp < c.minCPU {
			c.minCPU = s.CPUNsPerOp
		}
	}}
}

func (c *rawCase) bytes() int {
	if c.Kind == "pingpong" || c.Kind == "echo" {
		return 0
	}
	return c.Size
}

func (c *gosiwCase) bytes() int {
	if c.Op == "pingpong" {
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
		f, err := r.gosiwFixture(c.Link, c.CRC)
		if err != nil {
			c.err = err
			return
		}
		var fn func(b bench, n int) error
		switch c.Op {
		case "write":
			fn = func(b bench, n int) error { return gosiwStream(b, n, f, rdmap.WRWrite, c.Size, depth) }
		case "read":
			fn = func(b bench, n int) error { return gosiwStream(b, n, f, rdmap.WRRead, c.Size, readDepth) }
		case "send":
			fn = func(b bench, n int) error { return gosiwSend(b, n, f, c.Size) }
		case "pingpong":
			fn = func(b bench, n int) error { return gosiwPingPong(b, n, f, c.Size) }
		}
		s, err := measure(name, fn)
		r.progress(round, name, s, err, c.bytes())
		if err != nil {
			c.err = err
			r.brokenGosiw(c.Link, c.CRC, err)
			return
		}
		c.all = append(c.all, s)
		c.maxAllocs = max(c.maxAllocs, s.Allocs)
		if c.best == nil || s.NsPerOp < c.best.NsPerOp {
			c.best = &s
		}
		if c.minCPU == 0 || s.CPUNsPerOp < c.minCPU {
			c.minCPU = s.CPUNsPerOp
		}
	}}
}

// fmtSample formats a throughput (bytes > 0) or a round-trip time.
func fmtSample(nsPerOp float64, bytes int) string {
	if bytes > 0 {
		return fmt.Sprintf("%.1f MB/s", float64(bytes)*1e3/nsPerOp)
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

func (r *runner) print(w io.Writer) int {
	fmt.Fprintf(w, "gosiw vs raw TCP: best of %d runs of %v per case; %s, GOMAXPROCS=%d, %d CPUs; load average %s at start, %s at end; took %v\n",
		r.o.count, r.o.time, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), r.loadStart, r.loadEnd, r.elapsed.Round(time.Second))
	if r.o.maxULPDU != 0 {
		fmt.Fprintf(w, "gosiw QPs with MaxULPDU %d (not the default)\n", r.o.maxULPDU)
	}
	fmt.Fprintln(w, "(MB/s: message bytes per second; µs: round trip of a 64-byte ping-pong; ratio: gosiw/raw throughput or raw/gosiw time;")
	fmt.Fprintln(w, " cpu: raw/gosiw process CPU time per operation, both ends included, less sensitive to other load; higher is better for both)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "op\tsize\tcrc\tlink\tgosiw\traw TCP\tratio\ttarget\tresult\tallocs/op\tcpu\t")
	var missed, errs, allocFails []string
	passed := 0
	for _, c := range r.cases {
		row := fmt.Sprintf("%s\t%d\t%s\t%s\t", c.Op, c.Size, onOff(c.CRC), c.Link)
		if c.err != nil {
			if c.err != errVethSkipped {
				errs = append(errs, fmt.Sprintf("%s: %v", c.name(), c.err))
			}
			fmt.Fprintf(tw, "%s%s\t\t\t\t\t\t\n", row, shortErr(c.err))
			continue
		}
		if c.best == nil {
			fmt.Fprintf(tw, "%snot run\t\t\t\t\t\t\n", row)
			continue
		}
		raw := "-"
		if c.raw.err != nil {
			raw = "error"
			errs = append(errs, fmt.Sprintf("raw baseline of %s: %v", c.name(), c.raw.err))
		} else if c.raw.best != nil {
			raw = fmtSample(c.raw.best.NsPerOp, c.bytes())
		}
		ratio, ok := c.ratio()
		rs, tgt, res := "-", "-", "-"
		if ok {
			rs = fmt.Sprintf("%.2f", ratio)
		}
		if c.target > 0 {
			tgt = fmt.Sprintf(">=%.2f", c.target)
			if c.Op == "pingpong" {
				tgt += " (time<=1.3x)"
			}
			switch {
			case !ok:
				res = "n/a"
			case ratio >= c.target:
				res = "pass"
				passed++
			default:
				res = "FAIL"
				missed = append(missed, fmt.Sprintf("%s %.2f < %.2f", c.name(), ratio, c.target))
			}
		}
		allocs := fmt.Sprint(c.maxAllocs)
		if c.maxAllocs > 0 {
			allocs += " FAIL"
			allocFails = append(allocFails, fmt.Sprintf("%s %d allocs/op", c.name(), c.maxAllocs))
		}
		cpu := "-"
		if cr, ok := c.cpuRatio(); ok {
			cpu = fmt.Sprintf("%.2f", cr)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", row, fmtSample(c.best.NsPerOp, c.bytes()), raw, rs, tgt, res, allocs, cpu)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "raw TCP baselines (stream: Write and Send; reqresp: Read; pingpong: through sender/receiver goroutines; echo: reference):")
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
	fmt.Fprintf(w, "ratio targets: %d pass, %d FAIL", passed, len(missed))
	if len(missed) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(missed, "; "))
	}
	fmt.Fprintln(w)
	if len(allocFails) == 0 {
		fmt.Fprintf(w, "0 allocs/op: pass (every run of %d gosiw cases)\n", measured)
	} else {
		fmt.Fprintf(w, "0 allocs/op: FAIL (%s)\n", strings.Join(allocFails, "; "))
	}
	for _, link := range r.o.links {
		var echo *rawCase
		for _, rc := range r.raws {
			if rc.Kind == "echo" && rc.Link == link {
				echo = rc
			}
		}
		if echo == nil || echo.best == nil {
			continue
		}
		line := fmt.Sprintf("reference, %s: raw TCP echo with no goroutine handoffs %s", link, fmtSample(echo.best.NsPerOp, 0))
		for _, c := range r.cases {
			if c.Op == "pingpong" && c.Link == link && c.best != nil {
				line += fmt.Sprintf("; gosiw pingpong crc=%s is %.2fx that", onOff(c.CRC), c.best.NsPerOp/echo.best.NsPerOp)
			}
		}
		fmt.Fprintln(w, line)
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
	for _, c := range r.cases {
		if ratio, ok := c.ratio(); ok {
			fmt.Fprintf(w, "ratio op=%s size=%d crc=%s link=%s value=%.2f\n", c.Op, c.Size, onOff(c.CRC), c.Link, ratio)
		}
	}
	switch {
	case len(errs) > 0:
		return 1
	case r.o.strict && (len(missed) > 0 || len(allocFails) > 0):
		return 1
	}
	return 0
}

func shortErr(err error) string {
	if err == errVethSkipped {
		return "not run (veth)"
	}
	return "error (below)"
}

type jsonCase struct {
	*gosiwCase
	GosiwNsPerOp float64  `json:"gosiw_ns_per_op,omitempty"`
	GosiwMBps    float64  `json:"gosiw_mb_per_s,omitempty"`
	RawNsPerOp   float64  `json:"raw_ns_per_op,omitempty"`
	RawMBps      float64  `json:"raw_mb_per_s,omitempty"`
	Ratio        *float64 `json:"ratio,omitempty"`
	CPURatio     *float64 `json:"cpu_ratio,omitempty"`
	Target       float64  `json:"target,omitempty"`
	Pass         *bool    `json:"pass,omitempty"`
	AllocsPerOp  int64    `json:"allocs_per_op"`
	Runs         []sample `json:"runs,omitempty"`
	RawRuns      []sample `json:"raw_runs,omitempty"`
	Error        string   `json:"error,omitempty"`
}

func (r *runner) printJSON(w io.Writer) int {
	out := struct {
		GoVersion  string     `json:"go_version"`
		GOMAXPROCS int        `json:"gomaxprocs"`
		Time       string     `json:"time_per_run"`
		Count      int        `json:"count"`
		LoadStart  string     `json:"load_start"`
		LoadEnd    string     `json:"load_end"`
		MaxULPDU   int        `json:"max_ulpdu,omitempty"`
		VethMSS    int        `json:"veth_mss,omitempty"`
		VethError  string     `json:"veth_error,omitempty"`
		Cases      []jsonCase `json:"cases"`
		Raw        []jsonRaw  `json:"raw"`
	}{GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), Time: r.o.time.String(), Count: r.o.count,
		LoadStart: r.loadStart, LoadEnd: r.loadEnd, VethMSS: r.vethMSS, MaxULPDU: r.o.maxULPDU}
	if r.vethErr != nil {
		out.VethError = r.vethErr.Error()
	}
	code := 0
	for _, c := range r.cases {
		j := jsonCase{gosiwCase: c, Target: c.target, AllocsPerOp: c.maxAllocs, Runs: c.all, RawRuns: c.raw.all}
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
		if c.raw.best != nil {
			j.RawNsPerOp = c.raw.best.NsPerOp
			if c.bytes() > 0 {
				j.RawMBps = float64(c.bytes()) * 1e3 / c.raw.best.NsPerOp
			}
		}
		if cr, ok := c.cpuRatio(); ok {
			j.CPURatio = &cr
		}
		if ratio, ok := c.ratio(); ok {
			j.Ratio = &ratio
			if c.target > 0 {
				p := ratio >= c.target
				j.Pass = &p
			}
		}
		out.Cases = append(out.Cases, j)
	}
	for _, rc := range r.raws {
		j := jsonRaw{rawCase: rc, Runs: rc.all}
		if rc.best != nil {
			j.NsPerOp = rc.best.NsPerOp
		}
		if rc.err != nil {
			j.Error = rc.err.Error()
			code = 1
		}
		out.Raw = append(out.Raw, j)
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
	NsPerOp float64  `json:"ns_per_op,omitempty"`
	Runs    []sample `json:"runs,omitempty"`
	Error   string   `json:"error,omitempty"`
}
