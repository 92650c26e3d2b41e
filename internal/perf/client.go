package perf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosiw/gosiw/rdmap"
)

// Options configure a client run. Zero fields take the defaults noted.
type Options struct {
	// Op is what to measure. Required.
	Op Op
	// Size is the message size (DefaultSize, DefaultPingPongSize for
	// OpPingPong).
	Size int
	// Depth is the work requests each stream keeps outstanding
	// (DefaultDepthFor(Op, Size); 1 for OpPingPong; a read's is also
	// capped by the ORD the handshake grants, a send's so that
	// Size×Depth ≤ MaxBuffer). The TCP baseline ignores it.
	Depth int
	// Parallel is the number of streams, each its own connection and QP
	// (default 1).
	Parallel int
	// Duration is how long to measure (default 10 s).
	Duration time.Duration
	// Interval is the reporting interval (default 1 s; negative: none).
	Interval time.Duration
	// ConnectTimeout bounds connecting all the streams (default: the
	// cm's ReplyTimeout, 10 s, per stream).
	ConnectTimeout time.Duration
	// CRC asks for MPA CRC32c (mpa.CRCOn); the result says whether the
	// responder took it.
	CRC bool
	// SendGoroutine keeps a Write or Send stream's send engine on the
	// QP's send goroutine. By default the stream's QP has
	// rdmap.QPConfig.PollTx: the goroutine that posts and waits for the
	// completions also frames and writes, so that one thread carries the
	// stream, as iperf3's does. Between a client and a responder on one
	// host the send goroutine beside the poster took CPU the responder
	// needed: with PollTx the client of 64-byte Writes on two CPUs used
	// 34.6-40.7 ns of CPU per message instead of 40.6-50.9, at 21.1-27.6
	// Mops/s instead of 19.0-25.5, and of 64-byte Sends 57.0-77.7 ns
	// instead of 65.6-96.3 (four interleaved runs each, 2026-12-06; see
	// the README).
	SendGoroutine bool
	// Device, when set, is the device the streams' QPs live on; nil
	// makes one for the run.
	Device *rdmap.Device
	// OnConnect, when set, is told about each stream once all are
	// connected, in stream order, before the test starts.
	OnConnect func(StreamInfo)
	// OnInterval, when set, gets each interval report as it is made,
	// from one goroutine.
	OnInterval func(*Interval)
}

// Defaults.
const (
	DefaultDuration = 10 * time.Second
	DefaultInterval = time.Second
	// wrapTimeout bounds the end of a test once measuring has stopped:
	// draining the work requests, the "fin" exchange, the disconnect.
	wrapTimeout = 10 * time.Second
)

// DefaultInFlight is how many bytes of messages a stream keeps
// outstanding when no depth is given, within DefaultDepth to MaxDepth
// work requests.
const DefaultInFlight = 1 << 20

// DefaultDepthFor returns the depth of a stream of op with size-byte
// messages when none is given: enough work requests for DefaultInFlight
// bytes, at least DefaultDepth and at most MaxDepth (16 from 64 KiB up,
// 8192 for 128 bytes and less; a Write's at most MaxWriteDefault, a
// Read's at most MaxReadDepth); 1 for OpPingPong. A window of 16 small
// messages measured the round trip of the completions, not the QPs:
// 64-byte Reads went 7x faster at 128. A Send's window is a loop through
// the responder's receives and credits: 64-byte Sends went from 10.6 to
// 12.0-12.7 Mops/s at 8192 instead of 1024.
func DefaultDepthFor(op Op, size int) int {
	if op == OpPingPong {
		return 1
	}
	limit := MaxDepth
	switch op {
	case OpRead:
		limit = MaxReadDepth
	case OpWrite:
		limit = MaxWriteDefault
	}
	if size <= 0 {
		return DefaultDepth
	}
	return min(max(DefaultInFlight/size, DefaultDepth), limit)
}

func (o *Options) resolve() (Options, error) {
	c := *o
	if c.Size == 0 {
		c.Size = DefaultSize
		if c.Op == OpPingPong {
			c.Size = DefaultPingPongSize
		}
	}
	if c.Depth == 0 {
		c.Depth = DefaultDepthFor(c.Op, c.Size)
	}
	if c.Op == OpPingPong {
		c.Depth = 1
	}
	if c.Parallel == 0 {
		c.Parallel = 1
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	p := c.params()
	if err := p.Validate(); err != nil {
		return c, fmt.Errorf("perf: %w", err)
	}
	if c.Parallel < 1 || c.Parallel > 128 {
		return c, fmt.Errorf("perf: %d parallel streams out of range [1, 128]", c.Parallel)
	}
	if c.Duration < 0 {
		return c, fmt.Errorf("perf: negative duration %v", c.Duration)
	}
	return c, nil
}

// Validate checks o as Run and RunTCP do before they connect (zero fields
// taking their defaults), so that a command can refuse bad options before
// it prints anything.
func (o *Options) Validate() error {
	_, err := o.resolve()
	return err
}

func (o *Options) params() Params { return Params{Op: o.Op, Size: o.Size, Depth: o.Depth} }

// StreamInfo describes a connected stream.
type StreamInfo struct {
	ID     int    `json:"id"`
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// CRC: the connection uses MPA CRC32c (gosiw only).
	CRC bool `json:"crc"`
	// Depth is the depth in use (a read's may be less than asked).
	Depth int `json:"depth"`
}

// Summary is what one stream, or all (a sum), did in a span of time.
type Summary struct {
	// Start and End are seconds since the test started.
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Seconds       float64 `json:"seconds"`
	Bytes         uint64  `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Ops           uint64  `json:"ops"`
	// Latency of pingpong round trips (an interval's has the mean only).
	Latency *Latency `json:"latency,omitempty"`
}

func summary(start, end float64, bytes, ops uint64) Summary {
	s := Summary{Start: start, End: end, Seconds: end - start, Bytes: bytes, Ops: ops}
	if s.Seconds > 0 {
		s.BitsPerSecond = float64(bytes) * 8 / s.Seconds
	}
	return s
}

// StreamSummary is a stream's part of an interval.
type StreamSummary struct {
	ID int `json:"id"`
	Summary
}

// Interval is one interval report.
type Interval struct {
	Streams []StreamSummary `json:"streams"`
	Sum     Summary         `json:"sum"`
}

// PeerCounts are what the responder counted and reported in its "ok"
// (nil fields: not measured there).
type PeerCounts struct {
	Ops   *uint64 `json:"ops,omitempty"`
	Bytes *uint64 `json:"bytes,omitempty"`
}

// StreamResult is one stream's outcome.
type StreamResult struct {
	StreamInfo
	Summary
	// Peer holds the responder's counts, which the client has checked
	// against its own.
	Peer *PeerCounts `json:"peer,omitempty"`
	// Error is why the stream failed.
	Error string `json:"error,omitempty"`
}

// Result is the outcome of a run.
type Result struct {
	// Transport is "gosiw" or "tcp".
	Transport string         `json:"transport"`
	Streams   []StreamResult `json:"streams"`
	Intervals []Interval     `json:"intervals"`
	Sum       Summary        `json:"sum"`
}

// stream is one connection of a run, as the driver sees it.
type stream interface {
	info() StreamInfo
	// measure runs the test until stop is set, then waits for the work
	// in flight; ctx bounds every wait.
	measure(ctx context.Context, st *streamStats, stop *atomic.Bool) error
	// finish exchanges the final counts and checks them.
	finish(ctx context.Context, st *streamStats) (*PeerCounts, error)
	close()
}

// streamStats are a stream's counters: bytes and ops (and the pingpong
// latency sum, ns) are published by the stream's goroutine and read by the
// reporter; hist is the stream's own until measure has returned.
type streamStats struct {
	bytes, ops, latNS atomic.Uint64
	hist              histogram
	end               time.Time
}

// dialFunc connects stream id (from 1).
type dialFunc func(ctx context.Context, id int) (stream, error)

// run is the driver shared by gosiw and the TCP baseline: connect all the
// streams, start them together, report intervals, stop them after the
// duration (or when ctx is done), then let each finish.
//
//	dial ×P (parallel) --> t0 --> measure ×P -------> finish ×P --> Result
//	                              reporter: one Interval per tick, and the
//	                              last partial one when all have stopped
func run(ctx context.Context, transport string, o *Options, dial dialFunc) (*Result, error) {
	n := o.Parallel
	streams := make([]stream, n)
	errs := make([]error, n)
	dctx, dcancel := ctx, context.CancelFunc(func() {})
	if o.ConnectTimeout > 0 {
		dctx, dcancel = context.WithTimeout(ctx, o.ConnectTimeout)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { streams[i], errs[i] = dial(dctx, i+1) })
	}
	wg.Wait()
	dcancel()
	closeAll := func() {
		for _, s := range streams {
			if s != nil {
				wg.Go(s.close)
			}
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, firstErr(errs)
	}
	defer closeAll()
	if o.OnConnect != nil {
		for _, s := range streams {
			o.OnConnect(s.info())
		}
	}

	var stop atomic.Bool
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	hard := time.AfterFunc(o.Duration+wrapTimeout, hcancel)
	defer hard.Stop()
	t0 := time.Now()
	timer := time.AfterFunc(o.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	unhook := context.AfterFunc(ctx, func() { stop.Store(true); hard.Reset(wrapTimeout) })
	defer unhook()

	stats := make([]streamStats, n)
	peers := make([]*PeerCounts, n)
	measured := make(chan struct{})
	var mwg sync.WaitGroup
	for i, s := range streams {
		mwg.Add(1)
		wg.Go(func() {
			err := s.measure(hctx, &stats[i], &stop)
			stats[i].end = time.Now()
			mwg.Done()
			if err != nil {
				stop.Store(true)
				errs[i] = fmt.Errorf("stream %d: %w", i+1, err)
				return
			}
			<-measured // finish after the last interval is taken
			if peers[i], err = s.finish(hctx, &stats[i]); err != nil {
				errs[i] = fmt.Errorf("stream %d: %w", i+1, err)
			}
		})
	}
	intervals := make(chan []Interval)
	go func() {
		var tick <-chan time.Time
		if o.Interval > 0 {
			t := time.NewTicker(o.Interval)
			defer t.Stop()
			tick = t.C
		}
		intervals <- report(o, t0, time.Now, tick, stats, measured)
	}()
	mwg.Wait()
	close(measured)
	res := &Result{Transport: transport, Intervals: <-intervals}
	wg.Wait()

	var sumBytes, sumOps uint64
	var end float64
	var all histogram
	for i, s := range streams {
		st := &stats[i]
		e := st.end.Sub(t0).Seconds()
		sr := StreamResult{StreamInfo: s.info(), Summary: summary(0, e, st.bytes.Load(), st.ops.Load()), Peer: peers[i]}
		sr.Latency = st.hist.latency()
		if errs[i] != nil {
			sr.Error = errs[i].Error()
		}
		res.Streams = append(res.Streams, sr)
		sumBytes += sr.Bytes
		sumOps += sr.Ops
		end = max(end, e)
		all.merge(&st.hist)
	}
	res.Sum = summary(0, end, sumBytes, sumOps)
	res.Sum.Latency = all.latency()
	return res, firstErr(errs)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// report makes an interval report for each tick until measured is closed,
// then the last (partial) one. An interval's bounds come from now (a
// monotonic clock, time.Now in a run), read when the report is made: the
// time a tick carries is when the runtime meant to fire it, and on a busy
// machine one tick's time can lie before the time at which the previous one
// was taken. Each interval starts where the previous one ended and ends no
// earlier than it starts.
func report(o *Options, t0 time.Time, now func() time.Time, tick <-chan time.Time, stats []streamStats, measured <-chan struct{}) []Interval {
	type snap struct{ bytes, ops, latNS uint64 }
	prev := make([]snap, len(stats))
	last := t0
	var out []Interval
	take := func(at time.Time) {
		at = maxTime(at, last)
		iv := Interval{Streams: make([]StreamSummary, len(stats))}
		a, b := last.Sub(t0).Seconds(), at.Sub(t0).Seconds()
		var sb, so, sl uint64
		for i := range stats {
			cur := snap{stats[i].bytes.Load(), stats[i].ops.Load(), stats[i].latNS.Load()}
			d := snap{cur.bytes - prev[i].bytes, cur.ops - prev[i].ops, cur.latNS - prev[i].latNS}
			prev[i] = cur
			s := summary(a, b, d.bytes, d.ops)
			if o.Op == OpPingPong && d.ops > 0 {
				s.Latency = &Latency{Samples: d.ops, MeanUS: float64(d.latNS) / float64(d.ops) / 1e3}
			}
			iv.Streams[i] = StreamSummary{ID: i + 1, Summary: s}
			sb, so, sl = sb+d.bytes, so+d.ops, sl+d.latNS
		}
		iv.Sum = summary(a, b, sb, so)
		if o.Op == OpPingPong && so > 0 {
			iv.Sum.Latency = &Latency{Samples: so, MeanUS: float64(sl) / float64(so) / 1e3}
		}
		last = at
		out = append(out, iv)
		if o.OnInterval != nil {
			o.OnInterval(&out[len(out)-1])
		}
	}
	for {
		select {
		case <-tick:
			take(now())
		case <-measured:
			end := last
			for i := range stats {
				end = maxTime(end, stats[i].end)
			}
			// iperf3 leaves out a last interval that is a sliver.
			if o.Interval > 0 && (end.Sub(last) >= max(o.Interval/10, time.Millisecond) || len(out) == 0) {
				take(end)
			}
			return out
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// pollWait moves completions into wcs, blocking until there is at least
// one. (Polling busily before blocking would save a goroutine wake-up per
// round trip, but on a machine with few CPUs the spinning waiters take the
// CPU from the QP engines they wait for, and pingpong got 2-4x slower on
// two CPUs; so every waiter blocks.)
func pollWait(ctx context.Context, cq *rdmap.CQ, wcs []rdmap.WC) (int, error) {
	for {
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}
