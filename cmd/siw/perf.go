package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/perf"
	"github.com/gosiw/gosiw/internal/size"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// siw perf: iperf3 for gosiw. `siw perf -s` is the responder (siwd serves
// the same protocol); `siw perf write|read|send HOST:PORT` the client.

const perfDefaultListen = "127.0.0.1:7174"

type perfServerFlags struct {
	server    bool
	listen    string
	tcpListen string
	crc       bool
}

type perfClientFlags struct {
	length          size.Value
	time, interval  perfSecondsValue
	parallel, depth int
	crc, json, tcp  bool
	pingpong        bool
	sendGoroutine   bool
	server          bool // -s given to a client: refused (iperf3's -s is the server)
	tcpAddr         string
	connectTimeout  time.Duration
}

func newPerfCmd() *cobra.Command {
	var f perfServerFlags
	cmd := &cobra.Command{
		Use:   "perf -s [--listen ADDR] | perf (write|read|send) [flags] HOST:PORT",
		Short: "Measure gosiw throughput and latency, iperf3-style",
		Long: `Measure gosiw between a client and a perf responder: siwd, or
"siw perf -s" here. Each stream is one gosiw connection (QP); the client keeps
--depth work requests in flight for --time, prints one line per --interval and
a summary, and checks at the end that the responder got what was sent.

  siw perf -s [--listen 127.0.0.1:7174] [--tcp-listen ADDR|off]
  siw perf write [-l SIZE] [-t SECS] [-P N] [-d DEPTH] [--crc] HOST:PORT
  siw perf read  ...                 (RDMA Reads from the responder)
  siw perf send  [--pingpong] ...    (Sends; --pingpong: round-trip latency)

As in iperf3, -s is the server and -l/--length the message size; every
flag is checked before anything is printed. Text output shows messages
(ops) and the message rate beside the bitrate; --json is shaped as
iperf3 -J (start.connected, end.streams[].sender and .receiver, end.sum_sent,
end.sum_received) with gosiw's extras.

--tcp runs the same test over plain TCP afterwards and prints the gosiw/TCP
ratio (also in messages per second below 64 KiB); the baseline is the plain
TCP a Go user would write: messages written through a bufio.Writer and read
through a bufio.Reader (large ones bypass the buffers: one writer, one
reader), and for --pingpong the bare echo loop. The TCP sink is checked
reachable before the measured run. Plain TCP cannot share the MPA port: "siw perf -s" runs a TCP sink
on the next port (--tcp-listen), which is where --tcp goes by default;
siwd has none, so against siwd use --tcp-addr self (an in-process sink on
loopback, for a responder on this host) or point --tcp-addr at a
"siw perf -s" elsewhere.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !f.server {
				return errors.New("perf: give an op (write, read or send) and HOST:PORT, or -s for the responder")
			}
			if err := perfCheckServerFlags(&f); err != nil {
				return err
			}
			ctx, stop := perfSignalContext(cmd.Context())
			defer stop()
			return perfServer(ctx, cmd.OutOrStdout(), &f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.server, "server", "s", false, "run the responder")
	fl.StringVar(&f.listen, "listen", perfDefaultListen, "responder: gosiw address to listen on")
	fl.StringVar(&f.tcpListen, "tcp-listen", "", `responder: TCP baseline sink address (default: the --listen host, port+1, skipped with a warning when busy; "off": none)`)
	fl.BoolVar(&f.crc, "crc", false, "responder: ask every client for MPA CRC32c (by default CRC is on when the client asks)")
	for _, op := range []string{"write", "read", "send"} {
		cmd.AddCommand(newPerfOpCmd(op))
	}
	return cmd
}

// perfSignalContext ends the test at the first SIGINT/SIGTERM (the test
// stops early and still reports); a second one kills the process.
func perfSignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

func newPerfOpCmd(op string) *cobra.Command {
	f := perfClientFlags{time: perfSecondsValue(perf.DefaultDuration), interval: perfSecondsValue(perf.DefaultInterval),
		length: size.Value{Min: perf.MinSize, Max: perf.MaxSize}}
	short := map[string]string{
		"write": "RDMA Write into the responder's buffer",
		"read":  "RDMA Read from the responder's buffer",
		"send":  "Send to the responder's receives (--pingpong: echoed, for latency)",
	}[op]
	cmd := &cobra.Command{
		Use:   op + " [flags] HOST:PORT",
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if f.server {
				return errPerfClientS
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := perfSignalContext(cmd.Context())
			defer stop()
			o, tcpAddr, err := perfClientOptions(cmd, op, args[0], &f)
			if err != nil {
				return err
			}
			return perfClient(ctx, cmd.OutOrStdout(), args[0], tcpAddr, &o, f.json)
		},
	}
	fl := cmd.Flags()
	sizeHelp := "message size in bytes, K/M suffixes allowed, at most 64M (default 64K)"
	if op == "send" {
		sizeHelp = "message size in bytes, K/M suffixes allowed, at most 64M (default 64K; 64 with --pingpong)"
	}
	fl.VarP(&f.length, "length", "l", sizeHelp)
	fl.BoolVarP(&f.server, "server", "s", false, "not for a client: -s runs the responder (siw perf -s)")
	_ = fl.MarkHidden("server")
	fl.VarP(&f.time, "time", "t", "seconds to measure (or a duration: 500ms)")
	fl.VarP(&f.interval, "interval", "i", "seconds between interval reports; 0 for none")
	fl.IntVarP(&f.parallel, "parallel", "P", 1, "parallel streams (connections, QPs)")
	fl.IntVarP(&f.depth, "depth", "d", 0, fmt.Sprintf("work requests each stream keeps outstanding, 1 to %d (read: at most %d and the granted ORD; default: enough for %s in flight, %d to %d, write at most %d)",
		perf.MaxDepth, perf.MaxReadDepth, size.Format(perf.DefaultInFlight), perf.DefaultDepth, perf.MaxDepth, perf.MaxWriteDefault))
	fl.BoolVar(&f.crc, "crc", false, "ask for MPA CRC32c")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of text")
	fl.BoolVar(&f.tcp, "tcp", false, "then run the same test over raw TCP and print the gosiw/TCP ratio")
	fl.StringVar(&f.tcpAddr, "tcp-addr", "", `TCP sink for --tcp, which it implies (default: HOST:PORT+1, where "siw perf -s" runs one; "self": an in-process sink on loopback)`)
	fl.DurationVar(&f.connectTimeout, "connect-timeout", 10*time.Second, "how long connecting may take")
	if op == "send" {
		fl.BoolVar(&f.pingpong, "pingpong", false, "one Send at a time, echoed by the responder: measure the round trip")
	}
	if op != "read" {
		fl.BoolVar(&f.sendGoroutine, "send-goroutine", false, "write on each QP's send goroutine instead of the goroutine that waits for the completions (rdmap.QPConfig.PollTx off), to compare")
	}
	return cmd
}

// perfSecondsValue is a duration given in seconds ("10", "0.5") or as a Go
// duration ("500ms").
type perfSecondsValue time.Duration

func (v *perfSecondsValue) String() string {
	return strconv.FormatFloat(time.Duration(*v).Seconds(), 'f', -1, 64)
}
func (v *perfSecondsValue) Type() string { return "seconds" }
func (v *perfSecondsValue) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 {
			return fmt.Errorf("negative: %q", s)
		}
		*v = perfSecondsValue(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("not a number of seconds or a duration: %q", s)
	}
	*v = perfSecondsValue(d)
	return nil
}

func perfParseOp(op string, pingpong bool) perf.Op {
	switch {
	case op == "write":
		return perf.OpWrite
	case op == "read":
		return perf.OpRead
	case pingpong:
		return perf.OpPingPong
	}
	return perf.OpSend
}

var errPerfClientS = errors.New("perf: -s runs the responder (siw perf -s), as in iperf3; a client's message size is -l/--length")

// perfClientOptions checks every client flag, and the address, before
// anything is printed: a bad value is a usage error naming the flag.
func perfClientOptions(cmd *cobra.Command, opName, addr string, f *perfClientFlags) (perf.Options, string, error) {
	fl := cmd.Flags()
	o := perf.Options{
		Op:             perfParseOp(opName, f.pingpong),
		Size:           int(f.length.N),
		Depth:          f.depth,
		Parallel:       f.parallel,
		Duration:       time.Duration(f.time),
		Interval:       time.Duration(f.interval),
		CRC:            f.crc,
		ConnectTimeout: f.connectTimeout,
		SendGoroutine:  f.sendGoroutine,
	}
	switch {
	case f.server:
		return o, "", errPerfClientS
	case o.Duration == 0:
		return o, "", errors.New("perf: -t/--time must be more than 0")
	case f.parallel < 1:
		return o, "", fmt.Errorf("perf: -P/--parallel %d: want 1 to 128 streams", f.parallel)
	case fl.Changed("depth") && (f.depth < 1 || f.depth > perf.MaxDepth):
		return o, "", fmt.Errorf("perf: -d/--depth %d: want 1 to %d work requests in flight", f.depth, perf.MaxDepth)
	case o.Op == perf.OpPingPong && fl.Changed("depth") && f.depth != 1:
		return o, "", fmt.Errorf("perf: -d/--depth %d: --pingpong keeps one message in flight", f.depth)
	case f.connectTimeout <= 0:
		return o, "", fmt.Errorf("perf: --connect-timeout %v: want a positive duration", f.connectTimeout)
	}
	if o.Interval == 0 {
		o.Interval = -1
	}
	if o.Size == 0 {
		o.Size = perf.DefaultSize
		if o.Op == perf.OpPingPong {
			o.Size = perf.DefaultPingPongSize
		}
	}
	if o.Depth == 0 || o.Op == perf.OpPingPong {
		o.Depth = perf.DefaultDepthFor(o.Op, o.Size)
	}
	if err := o.Validate(); err != nil {
		return o, "", err
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return o, "", fmt.Errorf("perf: %w", err)
	}
	tcpAddr := f.tcpAddr
	if f.tcp && tcpAddr == "" {
		if port == 65535 {
			return o, "", fmt.Errorf("perf: no default --tcp-addr for port %d (the sink is on the next port): give one", port)
		}
		tcpAddr = net.JoinHostPort(host, strconv.Itoa(port+1))
	}
	if tcpAddr != "" && tcpAddr != "self" {
		if _, _, err := splitHostPort(tcpAddr); err != nil {
			return o, "", fmt.Errorf("perf: --tcp-addr: %w", err)
		}
	}
	return o, tcpAddr, nil
}

// perfClient runs a validated client test (perfClientOptions) and prints
// it, or its JSON document.
func perfClient(ctx context.Context, out io.Writer, addr, tcpAddr string, o *perf.Options, asJSON bool) error {
	self := tcpAddr == "self"
	if self {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("perf: in-process TCP sink: %w", err)
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); perf.ServeTCP(sctx, ln, nil) }()
		defer func() { cancel(); <-done }()
		tcpAddr = ln.Addr().String()
	}
	p := &perfPrinter{w: out, op: o.Op, size: o.Size, json: asJSON}
	doc := perfJSON{Start: perfStart(o, addr, tcpAddr, time.Now())}
	if tcpAddr != "" {
		// The baseline runs after the measured test: find out now, not
		// in ten seconds, that it cannot.
		if err := perf.CheckTCP(ctx, tcpAddr, o.ConnectTimeout); err != nil {
			return p.fail(&doc, perfExplainTCP(tcpAddr, err))
		}
	}
	o.OnConnect = p.connected
	o.OnInterval = p.interval
	p.doc = &doc
	p.header(fmt.Sprintf("Connecting to %s: gosiw %s, %d-byte messages, depth %d, %s, %v, CRC %s",
		addr, perfOpTitle(o.Op), o.Size, o.Depth, perfStreams(o.Parallel), o.Duration, perfOnOff(o.CRC)))
	p.transport = "gosiw"
	res, err := perf.Run(ctx, addr, o)
	if err != nil {
		err = perfExplain(addr, err)
	}
	if res != nil {
		doc.Intervals, doc.End = perfIntervals(res.Intervals, o.Op != perf.OpRead), perfJSONEndOf(res, o.Op)
		p.summary(res)
	}
	if err != nil {
		return p.fail(&doc, err)
	}
	if tcpAddr == "" || ctx.Err() != nil {
		return p.done(&doc)
	}

	p.header(fmt.Sprintf("\nRaw TCP baseline to %s: the same size, streams and duration; %s", tcpAddr, perfTCPBaseline(o.Op)))
	if self && o.Op == perf.OpPingPong {
		p.header("note: --tcp-addr self echoes in this process, where a round trip costs less than between two processes (one runtime runs both ends, often without a wake-up); against a responder in another process the ratio is not like for like")
	}
	p.head, p.transport = false, "tcp"
	doc.TCP = &perfJSONRun{Connected: []perfJSONConnected{}}
	tres, terr := perf.RunTCP(ctx, tcpAddr, o)
	if terr != nil {
		terr = perfExplainTCP(tcpAddr, terr)
		doc.TCP.Error = terr.Error()
	}
	if tres != nil {
		doc.TCP.Intervals, doc.TCP.End = perfIntervals(tres.Intervals, o.Op != perf.OpRead), perfJSONEndOf(tres, o.Op)
		p.summary(tres)
		if terr == nil {
			if doc.Ratio = p.ratio(res, tres); doc.Ratio != nil {
				doc.RatioOf = "bits_per_second"
				if o.Op == perf.OpPingPong {
					doc.RatioOf = "mean_us"
					doc.RatioP50 = perfMedianRatio(res, tres)
				}
			}
		}
	}
	if terr != nil {
		return p.fail(&doc, terr)
	}
	return p.done(&doc)
}

func perfOpTitle(op perf.Op) string {
	switch op {
	case perf.OpWrite:
		return "RDMA Write"
	case perf.OpRead:
		return "RDMA Read"
	case perf.OpSend:
		return "Send"
	}
	return "Send ping-pong"
}

func perfStreams(n int) string {
	if n == 1 {
		return "1 stream"
	}
	return strconv.Itoa(n) + " streams"
}

func perfOnOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// perfPrinter prints a client run as iperf3 does, or collects it for
// --json.
type perfPrinter struct {
	w         io.Writer
	op        perf.Op
	size      int // message size (0 before options are resolved)
	json      bool
	transport string // of the run being printed
	head      bool   // the interval column header has been printed
	sep       bool   // the last line printed is a separator
	doc       *perfJSON
}

func (p *perfPrinter) header(s string) {
	if !p.json {
		fmt.Fprintln(p.w, s)
	}
}

func (p *perfPrinter) connected(si perf.StreamInfo) {
	if p.doc != nil {
		if p.transport == "gosiw" {
			p.doc.Start.Connected = append(p.doc.Start.Connected, perfConnected(si, true))
		} else if p.doc.TCP != nil {
			p.doc.TCP.Connected = append(p.doc.TCP.Connected, perfConnected(si, false))
		}
	}
	if p.json {
		return
	}
	lh, lp, _ := net.SplitHostPort(si.Local)
	rh, rp, _ := net.SplitHostPort(si.Remote)
	extra := ""
	if p.transport == "gosiw" {
		extra = fmt.Sprintf(" (gosiw, depth %d, CRC %s)", si.Depth, perfOnOff(si.CRC))
	}
	fmt.Fprintf(p.w, "[%3d] local %s port %s connected to %s port %s%s\n", si.ID, lh, lp, rh, rp, extra)
}

const perfColumns = "[ ID] Interval           Transfer     Bitrate          Messages"

func (p *perfPrinter) interval(iv *perf.Interval) {
	if p.json {
		return
	}
	if !p.head {
		fmt.Fprintln(p.w, perfColumns)
		p.head = true
	}
	for _, s := range iv.Streams {
		fmt.Fprintln(p.w, perfLine(fmt.Sprintf("%3d", s.ID), &s.Summary, ""))
	}
	if len(iv.Streams) > 1 {
		fmt.Fprintln(p.w, perfLine("SUM", &iv.Sum, ""))
		fmt.Fprintln(p.w, perfSeparator)
		p.sep = true
	}
}

const perfSeparator = "- - - - - - - - - - - - - - - - - - - - - - - - -"

// perfLine formats one report line: "[  1]   0.00-1.00   sec  1.10 GBytes
// 9.45 Gbits/sec  18012 ops  18.0 Kops/sec".
func perfLine(id string, s *perf.Summary, tag string) string {
	return perfLineOps(id, s, &s.Ops, tag)
}

// perfLineOps is perfLine with the message count given (nil: not counted
// on that side, and the column is left out).
func perfLineOps(id string, s *perf.Summary, ops *uint64, tag string) string {
	line := fmt.Sprintf("[%s] %6.2f-%-6.2f sec  %s  %s/sec", id, s.Start, s.End,
		perfUnits(float64(s.Bytes), 1024, "Bytes"), perfUnits(s.BitsPerSecond, 1000, "bits"))
	if ops != nil {
		rate := 0.0
		if s.Seconds > 0 {
			rate = float64(*ops) / s.Seconds
		}
		line += fmt.Sprintf("  %d ops  %s/sec", *ops, perfUnits(rate, 1000, "ops"))
	}
	if s.Latency != nil && s.Latency.Samples > 0 {
		line += fmt.Sprintf("  rtt %.1f us", s.Latency.MeanUS)
	}
	if tag != "" {
		line += "  " + tag
	}
	return line
}

// perfUnits formats v as iperf3's adaptive units do: three significant
// digits, K/M/G/T in powers of base.
func perfUnits(v, base float64, unit string) string {
	prefixes := []string{"", "K", "M", "G", "T"}
	i := 0
	for v >= base && i < len(prefixes)-1 {
		v /= base
		i++
	}
	switch {
	case v < 9.995:
		return fmt.Sprintf("%4.2f %s%s", v, prefixes[i], unit)
	case v < 99.95:
		return fmt.Sprintf("%4.1f %s%s", v, prefixes[i], unit)
	}
	return fmt.Sprintf("%4.0f %s%s", v, prefixes[i], unit)
}

func (p *perfPrinter) summary(r *perf.Result) {
	if p.json {
		return
	}
	if !p.sep {
		fmt.Fprintln(p.w, perfSeparator)
	}
	p.sep = false
	fmt.Fprintln(p.w, perfColumns)
	// The client's counts are the sender's, except for read, where the
	// client receives. The responder's, when it reports them, are the
	// receiver's (write, send, pingpong; the TCP sink's bytes).
	own := "sender"
	if p.op == perf.OpRead {
		own = "receiver"
	}
	var peerBytes, peerOps uint64
	havePeer, peerOpsKnown := false, true
	peerLine := func(id string, s perf.Summary, bytes uint64, ops *uint64) {
		s.Latency = nil
		s.Bytes, s.BitsPerSecond = bytes, 0
		if s.Seconds > 0 {
			s.BitsPerSecond = float64(bytes) * 8 / s.Seconds
		}
		fmt.Fprintln(p.w, perfLineOps(id, &s, ops, "receiver"))
	}
	for _, s := range r.Streams {
		id := fmt.Sprintf("%3d", s.ID)
		fmt.Fprintln(p.w, perfLine(id, &s.Summary, own))
		if s.Peer != nil && s.Peer.Bytes != nil {
			peerLine(id, s.Summary, *s.Peer.Bytes, s.Peer.Ops)
			peerBytes += *s.Peer.Bytes
			if s.Peer.Ops != nil {
				peerOps += *s.Peer.Ops
			} else {
				peerOpsKnown = false
			}
			havePeer = true
		}
		if s.Error != "" {
			fmt.Fprintf(p.w, "[%s] error: %s\n", id, s.Error)
		}
	}
	if len(r.Streams) > 1 {
		fmt.Fprintln(p.w, perfLine("SUM", &r.Sum, own))
		if havePeer {
			var ops *uint64
			if peerOpsKnown {
				ops = &peerOps
			}
			peerLine("SUM", r.Sum, peerBytes, ops)
		}
	}
	if p.op == perf.OpPingPong {
		for _, s := range r.Streams {
			if s.Latency != nil {
				fmt.Fprintln(p.w, perfLatencyLine(fmt.Sprintf("%3d", s.ID), s.Latency))
			}
		}
		if len(r.Streams) > 1 && r.Sum.Latency != nil {
			fmt.Fprintln(p.w, perfLatencyLine("SUM", r.Sum.Latency))
		}
	}
}

func perfLatencyLine(id string, l *perf.Latency) string {
	return fmt.Sprintf("[%s] round trip: mean %.2f us  p50 %.2f us  p99 %.2f us  min %.2f us  max %.2f us  (%d samples)",
		id, l.MeanUS, l.P50US, l.P99US, l.MinUS, l.MaxUS, l.Samples)
}

// ratio prints and returns gosiw's figure over TCP's.
func (p *perfPrinter) ratio(g, t *perf.Result) *float64 {
	var r float64
	if p.op == perf.OpPingPong {
		if g.Sum.Latency == nil || t.Sum.Latency == nil || t.Sum.Latency.MeanUS == 0 {
			return nil
		}
		r = g.Sum.Latency.MeanUS / t.Sum.Latency.MeanUS
		line := fmt.Sprintf("\ngosiw/TCP round trip: %.2f (mean %.2f us vs %.2f us)", r, g.Sum.Latency.MeanUS, t.Sum.Latency.MeanUS)
		if m := perfMedianRatio(g, t); m != nil {
			// The mean of a run follows its slowest round trips, which on
			// a shared machine are other processes' time slices (p99 in
			// milliseconds); the two runs come one after the other and
			// need not meet the same load. The medians are steadier.
			line += fmt.Sprintf("; p50 %.2f (%.2f us vs %.2f us)", *m, g.Sum.Latency.P50US, t.Sum.Latency.P50US)
		}
		p.header(line)
		return &r
	}
	if t.Sum.BitsPerSecond == 0 {
		return nil
	}
	r = g.Sum.BitsPerSecond / t.Sum.BitsPerSecond
	p.header(fmt.Sprintf("\ngosiw/TCP throughput: %.2f (%s/sec vs %s/sec)", r,
		perfUnits(g.Sum.BitsPerSecond, 1000, "bits"), perfUnits(t.Sum.BitsPerSecond, 1000, "bits")))
	if p.size > 0 && p.size < perfSmallMessage && g.Sum.Seconds > 0 && t.Sum.Seconds > 0 && t.Sum.Ops > 0 {
		gr, tr := float64(g.Sum.Ops)/g.Sum.Seconds, float64(t.Sum.Ops)/t.Sum.Seconds
		p.header(fmt.Sprintf("gosiw/TCP message rate: %.2f (%s/sec vs %s/sec)", gr/tr,
			perfUnits(gr, 1000, "ops"), perfUnits(tr, 1000, "ops")))
	}
	return &r
}

// perfMedianRatio is gosiw's median round trip over TCP's (nil when
// either is unknown).
func perfMedianRatio(g, t *perf.Result) *float64 {
	if g.Sum.Latency == nil || t.Sum.Latency == nil || t.Sum.Latency.P50US == 0 {
		return nil
	}
	r := g.Sum.Latency.P50US / t.Sum.Latency.P50US
	return &r
}

// perfSmallMessage: below this size the ratio is also given as a message
// rate, the figure that matters for small messages.
const perfSmallMessage = 64 << 10

// perfTCPBaseline says what the raw TCP baseline of op does (perf.RunTCP).
func perfTCPBaseline(op perf.Op) string {
	if op == perf.OpPingPong {
		return "the bare echo loop (write, then read the echo), as make bench's"
	}
	return "make bench's bare baseline: below 64 KiB messages batched through a bufio.Writer and read through a bufio.Reader, from 64 KiB one write per message and large reads"
}

func (p *perfPrinter) done(doc *perfJSON) error {
	if p.json {
		return p.writeJSON(doc)
	}
	fmt.Fprintln(p.w, "\nperf Done.")
	return nil
}

// fail prints the JSON object with the error (text mode prints what it has
// already) and returns err, for a non-zero exit.
func (p *perfPrinter) fail(doc *perfJSON, err error) error {
	if p.json {
		if doc.Error == "" && (doc.TCP == nil || doc.TCP.Error == "") {
			doc.Error = err.Error()
		}
		if jerr := p.writeJSON(doc); jerr != nil {
			return jerr
		}
	}
	return err
}

func (p *perfPrinter) writeJSON(doc *perfJSON) error {
	if doc.Intervals == nil {
		doc.Intervals = []perfJSONInterval{}
	}
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// perfExplain turns a client error into one a person can act on.
func perfExplain(addr string, err error) error {
	e := explain(addr, `siwd or "siw perf -s"`, err)
	if e == err {
		return err
	}
	return fmt.Errorf("perf: %w", e)
}

func perfExplainTCP(addr string, err error) error {
	var tr *perf.TCPRejectError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("perf: TCP baseline: %s refused the connection: run \"siw perf -s\" there (its TCP sink is on the port after the gosiw one), or use --tcp-addr self for a responder on this host", addr)
	case errors.As(err, &tr):
		return fmt.Errorf("perf: TCP baseline: %s refused the test: %s", addr, tr.Reason)
	}
	return fmt.Errorf("perf: TCP baseline: %w", err)
}

// perfCheckServerFlags checks the responder's flags before it starts.
func perfCheckServerFlags(f *perfServerFlags) error {
	if _, _, err := perfListenAddr(f.listen); err != nil {
		return fmt.Errorf("perf: --listen: %w", err)
	}
	if f.tcpListen != "" && f.tcpListen != "off" {
		if _, _, err := perfListenAddr(f.tcpListen); err != nil {
			return fmt.Errorf("perf: --tcp-listen: %w", err)
		}
	}
	return nil
}

// perfListenAddr checks a HOST:PORT to listen on (port 0: any).
func perfListenAddr(addr string) (string, int, error) { return parseHostPort(addr, 0) }

// perfServer runs the responder and its TCP sink until ctx is done.
func perfServer(ctx context.Context, out io.Writer, f *perfServerFlags) error {
	tcpListen, tcpDefault := f.tcpListen, f.tcpListen == ""
	if tcpDefault {
		host, p, _ := perfListenAddr(f.listen)
		switch {
		case p == 65535:
			tcpListen = "off"
		case p != 0:
			p++
		}
		if tcpListen == "" {
			tcpListen = net.JoinHostPort(host, strconv.Itoa(p))
		}
	}
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	var mu sync.Mutex
	printf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, args...)
	}
	cfg := &perf.ServerConfig{CM: &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}, OnConn: func(ci perf.ConnInfo) {
		id := fmt.Sprintf("%3d", ci.ID)
		if ci.Transport == "tcp" {
			id = fmt.Sprintf("tcp %d", ci.ID)
		}
		switch ci.Event {
		case "accepted":
			extra := ""
			if ci.Transport == "gosiw" {
				extra = fmt.Sprintf(", depth %d, CRC %s", ci.Params.Depth, perfOnOff(ci.CRC))
			}
			printf("[%s] accepted %v: %s, %d-byte messages%s\n", id, ci.Remote, ci.Params.Op, ci.Params.Size, extra)
		case "refused":
			printf("[%s] refused %v: %s\n", id, ci.Remote, ci.Reason)
		case "ended":
			s := perf.Summary{End: ci.Seconds, Seconds: ci.Seconds, Bytes: ci.Bytes, Ops: ci.Ops}
			if ci.Seconds > 0 {
				s.BitsPerSecond = float64(ci.Bytes) * 8 / ci.Seconds
			}
			line := perfLine(id, &s, "")
			if ci.Err != nil {
				line += "  error: " + ci.Err.Error()
			}
			printf("%s\n", line)
		}
	}}
	if f.crc {
		cfg.CM.MPA.CRC = mpa.CRCOn
	}
	srv, err := perf.Listen(ctx, f.listen, dev, cfg)
	if err != nil {
		return fmt.Errorf("perf: listen: %w", err)
	}
	var tln net.Listener
	if tcpListen != "off" {
		if tln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", tcpListen); err != nil {
			if !tcpDefault {
				srv.Close()
				return fmt.Errorf("perf: TCP sink (--tcp-listen): %w", err)
			}
			// The sink is an extra on a port nobody chose: the responder
			// runs without it.
			printf("warning: no TCP baseline sink: %v; clients' --tcp needs --tcp-addr (or run with --tcp-listen ADDR)\n", err)
			tln = nil
		}
	}
	if tln != nil {
		printf("Server listening on %v (gosiw), TCP baseline sink on %v\n", srv.Addr(), tln.Addr())
	} else {
		printf("Server listening on %v (gosiw)\n", srv.Addr())
	}
	var wg sync.WaitGroup
	if tln != nil {
		wg.Go(func() { perf.ServeTCP(ctx, tln, cfg) })
	}
	err = srv.Serve(ctx)
	wg.Wait()
	return err
}
