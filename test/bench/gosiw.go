package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// The workloads do what a demanding RDMA user does for message rate (as
// perftest's ib_write_bw and ib_send_bw do): Writes keep up to sqDepth
// work requests on the SQ and Sends up to recvPosted, posted in lists
// (PostSends) of signalEvery of which only the last is signaled; a
// signaled completion retires its work request and every one before it
// (completions come in SQ order), and the poster counts a slot as busy
// until then, as verbs require. The server keeps recvPosted receives
// posted and reposts the ones it reaped as one list (PostRecvs); a Send
// never goes out without a receive for it. Every message is still a
// whole RDMA operation, every byte placed, every receive completion
// reaped and checked. Reads keep up to readDepth outstanding, the ORD
// the connection settles (rdmaptest's default IRD/ORD of 16), each
// signaled. depth is the mirrored baseline's window (raw.go).
//
// sqDepth, the Writes' window, and recvPosted, the Sends', are both
// 8192: 512 KiB of 64-byte messages, less than the bare stream's socket
// buffers let it have in flight (tcp_wmem and tcp_rmem grow to 4 and 32
// MiB on loopback), and several of the send engine's batches of small
// messages (mpa.WriterSmallMaxBytes, 1462 64-byte Writes), so that the
// application posts while the batch before is being written.
//
// Until 2026-12-06 the Writes' window was 1024, the 64 KiB of the
// batched baseline's bufio.Writer, and a batch took it all: the poster
// waited for the batch's writev before it could post again. Deeper
// windows had measured worse (4096: write/64 25.8 -> 21 Mmsg/s) because
// a batch then grew to the 128 KiB scratch arena, and writes just over
// two loopback segments ran at half speed under BBR, this VM's
// congestion control (see mpa.WriterSmallMaxBytes). With batches bounded
// under that, a window of 8192 took write/64 from 20-27 to 25-27.5
// Mmsg/s in three interleaved rounds (4096 gave 22-33, less steady);
// with CRC, whose batches that bound leaves at 512 KiB, 19-20 went to
// 17-26, as noisy as that.
//
// recvPosted is 8192 for a reason of its own: a Send's window is a loop
// that a Write's is not: a Write's slot comes back once the Write is
// written, a Send's credit only once the server has received it, reaped
// its completion and posted the receive again. With 1024 the loop held
// one batch: an execution trace of send/64 (-trace) had one goroutine
// running 80% of the time, the poster, the send engine, the receive
// engine and the poster again, each woken by the one before and run
// after it on the same CPU. 8192 keeps several batches in flight:
// send/64 in three interleaved rounds went from 13.5-14.0 to 18.6-19.3
// Mmsg/s (CRC on: 10.7-10.9 to 14.1-14.8; a window of 4096 gave 16.8,
// 16384 18.6). (Those Send figures were taken while one goroutine
// posted the client's Sends and reaped the server's receives; gosiwSend
// has how that changed.) Each case's QPs have an SQ as deep as its
// window (gosiwCase.sqDepth).
const (
	sqDepth     = 8192
	signalEvery = 32
	readDepth   = 16
	depth       = 32
	// recvPosted is how many receives the server side keeps posted for
	// Sends (perftest's ib_send_bw rx depth) and how many Sends the
	// client keeps outstanding at most; the client keeps clientRecvs for
	// the ping-pong's echoes.
	recvPosted  = 8192
	clientRecvs = 8
	// pollBatch is how many completions one Poll takes at most.
	pollBatch = 64
)

// qpSide is one end of a gosiw connection: a device of its own, a PD, one
// CQ for both queues, the QP, and 2 MiB mapped outside the Go heap
// registered as a source (first MiB) and a sink (second MiB).
type qpSide struct {
	dev      *rdmap.Device
	pd       *rdmap.PD
	cq       *rdmap.CQ
	qp       *rdmap.QP
	mem      *rdmap.Memory
	src, dst *rdmap.MR
	wcs      []rdmap.WC
	recv     rdmap.RecvWR
	recvs    []rdmap.RecvWR // pollBatch copies of recv, a list to repost
}

func newQPSide(maxULPDU, sq int, pollRx, crcInPlace bool) (*qpSide, error) {
	dev, err := rdmap.NewDevice(&rdmap.Config{})
	if err != nil {
		return nil, err
	}
	s := &qpSide{dev: dev, pd: dev.AllocPD(), wcs: make([]rdmap.WC, pollBatch)}
	// Room for every receive posted and every signaled send at once.
	if s.cq, err = dev.CreateCQ(2 * recvPosted); err != nil {
		return s, err
	}
	if s.qp, err = s.pd.CreateQP(&rdmap.QPConfig{
		SendCQ: s.cq, RecvCQ: s.cq,
		MaxSendWR: sq, MaxRecvWR: recvPosted,
		MaxULPDU: maxULPDU, PollRx: pollRx, CRCInPlace: crcInPlace,
	}); err != nil {
		return s, err
	}
	if s.mem, err = dev.AllocMemory(2 * maxSize); err != nil {
		return s, err
	}
	const acc = rdmap.AccessLocalWrite | rdmap.AccessRemoteWrite | rdmap.AccessRemoteRead
	if s.src, err = s.pd.RegisterMemory(s.mem.Bytes()[:maxSize], acc); err != nil {
		return s, err
	}
	if s.dst, err = s.pd.RegisterMemory(s.mem.Bytes()[maxSize:2*maxSize], acc); err != nil {
		return s, err
	}
	s.recv = rdmap.RecvWR{SGL: []rdmap.SGE{s.dst.SGE(0, maxSize)}}
	s.recvs = make([]rdmap.RecvWR, pollBatch)
	for i := range s.recvs {
		s.recvs[i] = s.recv
	}
	return s, nil
}

func (s *qpSide) close() {
	if s.qp != nil {
		s.qp.Close()
	}
	for _, mr := range []*rdmap.MR{s.src, s.dst} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if s.mem != nil {
		s.mem.Close()
	}
	if s.cq != nil {
		s.cq.Close()
	}
	s.dev.Close()
}

// gosiwFixture is two QPs connected over one TCP connection: a (the
// client, MPA initiator) and b (the server, responder).
type gosiwFixture struct {
	a, b *qpSide
}

// rxMode says which of a fixture's QPs run their receive engine in
// QPConfig.PollRx's polling mode (on the goroutine that waits in
// CQ.Wait) instead of on a receive goroutine of their own.
type rxMode uint8

const (
	rxGoroutines rxMode = iota // neither: the receive goroutines
	rxPollServer               // the server's (b), the side that receives Sends
	rxPollBoth                 // both (the ping-pong: each side waits for a receive)
)

func (m rxMode) String() string {
	switch m {
	case rxPollServer:
		return "pollrx=server"
	case rxPollBoth:
		return "pollrx=both"
	}
	return "pollrx=none"
}

func newGosiwFixture(ca, cb net.Conn, crc bool, maxULPDU, sq int, mode rxMode, crcInPlace bool) (_ *gosiwFixture, err error) {
	f := &gosiwFixture{}
	defer func() {
		if err != nil {
			ca.Close()
			cb.Close()
			f.close()
		}
	}()
	if f.a, err = newQPSide(maxULPDU, sq, mode == rxPollBoth, crcInPlace); err != nil {
		return nil, err
	}
	if f.b, err = newQPSide(maxULPDU, sq, mode != rxGoroutines, crcInPlace); err != nil {
		return nil, err
	}
	for n := 0; n < recvPosted; n += pollBatch {
		if _, err := f.b.qp.PostRecvs(f.b.recvs[:min(pollBatch, recvPosted-n)]); err != nil {
			return nil, err
		}
	}
	for range clientRecvs {
		if err := f.a.qp.PostRecv(f.a.recv); err != nil {
			return nil, err
		}
	}
	o := &rdmaptest.Options{CRC: crc}
	if err := f.b.qp.Start(cb, o.Params(false)); err != nil {
		ca.Close()
		return nil, err
	}
	if err := f.a.qp.Start(ca, o.Params(true)); err != nil {
		return nil, err
	}
	// The responder sends nothing before the initiator's first FPDU: one
	// ping-pong settles the connection.
	if err := gosiwPingPong(nopBench{}, 1, f, 64); err != nil {
		return nil, fmt.Errorf("first ping-pong: %w", err)
	}
	return f, nil
}

func (f *gosiwFixture) close() {
	for _, s := range []*qpSide{f.a, f.b} {
		if s != nil {
			s.close()
		}
	}
}

// waitWC waits for one completion on cq and checks it.
func waitWC(ctx context.Context, cq *rdmap.CQ, wcs []rdmap.WC, want rdmap.WCOpcode) error {
	if err := nextWC(ctx, cq, wcs, want); err != nil {
		return err
	}
	return checkWC(&wcs[0], want)
}

// nextWC waits for the next completion on cq and leaves it in wcs[0]
// (want names it in the error).
func nextWC(ctx context.Context, cq *rdmap.CQ, wcs []rdmap.WC, want rdmap.WCOpcode) error {
	for cq.Poll(wcs[:1]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return fmt.Errorf("waiting for a %v completion: %w", want, err)
		}
	}
	return nil
}

func checkWC(wc *rdmap.WC, want rdmap.WCOpcode) error {
	if wc.Status != rdmap.WCSuccess || wc.Op != want {
		return fmt.Errorf("completion %v %v, want %v success", wc.Op, wc.Status, want)
	}
	return nil
}

// bench is what the workloads need of a *testing.B.
type bench interface {
	SetBytes(n int64)
	ReportAllocs()
	ResetTimer()
	StopTimer()
}

// nopBench runs a workload outside testing.Benchmark.
type nopBench struct{}

func (nopBench) SetBytes(int64) {}
func (nopBench) ReportAllocs()  {}
func (nopBench) ResetTimer()    {}
func (nopBench) StopTimer()     {}

func runCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), runLimit)
}

// gosiwStream streams RDMA Writes (op WRWrite) or Reads (WRRead) of size
// bytes from the client to the server's memory, at most d outstanding
// (Writes in lists of signalEvery, see sqDepth; Reads each signaled).
// A Read run ends when the last completion is reaped. A Write completes
// once written to the socket, so a Write run ends when a 1-byte Read
// posted after the last completion has come back: every Write has then
// been placed at the server, which is where the bare baselines stop
// their timer too (the reader has every byte), and the next run starts
// with nothing in flight. Until 2026-12-07 the timer stopped before that
// Read, which left out the bytes still in the sockets: 0.0-3.1% of a
// 1 MiB run, 0.1-0.2% of a 64-byte one (measured then).
func gosiwStream(b bench, n int, f *gosiwFixture, op rdmap.WROpcode, size, d int) error {
	return gosiwStreams(b, n, []*gosiwFixture{f}, op, size, d)
}

// gosiwStreams runs gosiwStream on every fixture at once, n operations
// split between them, each QP reaped by a goroutine of its own (the
// benchmark's for the first).
func gosiwStreams(b bench, n int, fs []*gosiwFixture, op rdmap.WROpcode, size, d int) error {
	ctx, cancel := runCtx()
	defer cancel()
	lists := make([]*postList, len(fs))
	for i, f := range fs {
		lists[i] = f.streamList(op, size, d)
	}
	errs := make([]error, len(fs))
	done := make(chan struct{}, len(fs))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	defer b.StopTimer() // after a Write run's fence, too
	for i := 1; i < len(fs); i++ {
		go func() {
			errs[i] = fs[i].stream(ctx, lists[i], share(n, len(fs), i), nil)
			if errs[i] != nil {
				cancel()
			}
			done <- struct{}{}
		}()
	}
	errs[0] = fs[0].stream(ctx, lists[0], share(n, len(fs), 0), nil)
	if errs[0] != nil {
		cancel()
	}
	for range len(fs) - 1 {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if op == rdmap.WRWrite {
		for _, f := range fs {
			if err := f.fence(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// postList posts copies of one work request in lists of at most k (the
// last of each signaled), at most d posted and not retired: a signaled
// completion retires its request and every one before it, as in verbs.
// Request i of a run has ID i.
type postList struct {
	qp            *rdmap.QP
	wrs           []rdmap.SendWR
	d             int
	posted, retir int
}

func newPostList(qp *rdmap.QP, wr rdmap.SendWR, d, k int) *postList {
	l := &postList{qp: qp, wrs: make([]rdmap.SendWR, k), d: d}
	for i := range l.wrs {
		l.wrs[i] = wr
	}
	return l
}

// post posts as many lists as the window allows, up to n requests in
// the run and, with limit >= 0, no more than limit more.
func (l *postList) post(n, limit int) error {
	for l.posted < n && l.posted-l.retir < l.d && limit != 0 {
		m := min(len(l.wrs), n-l.posted, l.d-(l.posted-l.retir))
		if limit > 0 {
			m = min(m, limit)
			limit -= m
		}
		for j := range m {
			l.wrs[j].ID, l.wrs[j].Signaled = uint64(l.posted+j), j == m-1
		}
		if _, err := l.qp.PostSends(l.wrs[:m]); err != nil {
			return err
		}
		l.posted += m
	}
	return nil
}

// retire takes a completion of the list's op: it retires every request
// up to its own.
func (l *postList) retire(wc *rdmap.WC, want rdmap.WCOpcode) error {
	if err := checkWC(wc, want); err != nil {
		return err
	}
	if id := int(wc.ID); id < l.retir || id >= l.posted {
		return fmt.Errorf("completion of request %d, want one of %d..%d", id, l.retir, l.posted-1)
	}
	l.retir = int(wc.ID) + 1
	return nil
}

// start begins a run.
func (l *postList) start() { l.posted, l.retir = 0, 0 }

// streamList is the client's postList of a stream of op (WRWrite or
// WRRead) with at most d outstanding.
func (f *gosiwFixture) streamList(op rdmap.WROpcode, size, d int) *postList {
	a := f.a
	wr := rdmap.SendWR{Op: op}
	k := signalEvery
	if op == rdmap.WRRead {
		wr.SGL = []rdmap.SGE{a.dst.SGE(0, size)}
		wr.Remote = rdmap.Remote{STag: f.b.src.STag()}
		k = 1
	} else {
		wr.SGL = []rdmap.SGE{a.src.SGE(0, size)}
		wr.Remote = rdmap.Remote{STag: f.b.dst.STag()}
	}
	return newPostList(a.qp, wr, d, min(k, d))
}

// stream posts n requests of l on the client's QP and reaps their
// completions. With cr (a Send stream) it keeps the Sends outstanding
// within the receives the server has posted (see credit) and, when the
// window is full and every Send retired, waits for more.
func (f *gosiwFixture) stream(ctx context.Context, l *postList, n int, cr *credit) error {
	a := f.a
	want := rdmap.WCWrite
	switch l.wrs[0].Op {
	case rdmap.WRRead:
		want = rdmap.WCRead
	case rdmap.WRSend:
		want = rdmap.WCSend
	}
	l.start()
	for l.retir < n {
		limit := -1
		if cr != nil {
			limit = recvPosted - (l.posted - int(cr.reposted.Load()))
		}
		if err := l.post(n, limit); err != nil {
			return err
		}
		k := a.cq.Poll(a.wcs)
		for i := range k {
			if err := l.retire(&a.wcs[i], want); err != nil {
				return err
			}
		}
		switch {
		case k > 0:
		case l.retir < l.posted:
			// Requests on their way: wait for the completion that
			// retires them.
			if err := waitWC(ctx, a.cq, a.wcs, want); err != nil {
				return err
			}
			if err := l.retire(&a.wcs[0], want); err != nil {
				return err
			}
		case cr == nil:
			return fmt.Errorf("nothing outstanding and %d of %d requests posted", l.posted, n)
		default:
			// All retired, the window full: wait for credit.
			select {
			case <-cr.more:
			case <-ctx.Done():
				return fmt.Errorf("waiting for the server's receives: %w", ctx.Err())
			}
		}
	}
	return nil
}

// fence reads one byte back and waits for it: every earlier Write has
// been placed.
func (f *gosiwFixture) fence(ctx context.Context) error {
	wr := rdmap.SendWR{Op: rdmap.WRRead, Signaled: true,
		SGL: []rdmap.SGE{f.a.dst.SGE(0, 1)}, Remote: rdmap.Remote{STag: f.b.src.STag()}}
	if err := f.a.qp.PostSend(wr); err != nil {
		return err
	}
	return waitWC(ctx, f.a.cq, f.a.wcs, rdmap.WCRead)
}

// gosiwSend streams Sends of size bytes into receives the server keeps
// posted, each side on a goroutine of its own as two applications would
// (the benchmark's goroutine is the client's). The client posts lists of
// signalEvery Sends, at most recvPosted outstanding (see recvPosted), and
// never more than recvPosted ahead of the receives the server has reaped
// and posted again (iWARP has no receiver-not-ready retry: a Send without
// a posted receive ends the connection); it reaps its own Send
// completions. The server reaps its receive completions, checks them,
// reposts the receives as one list and publishes how many it has
// reposted: the client's credit. A run ends when every Send has been
// retired and every receive reaped.
//
// Until 2026-12-06 one goroutine posted the client's Sends and reaped
// and reposted the server's receives (as rdmap's BenchmarkSend does):
// posting waited for reaping and reaping for posting, a structure no
// two applications have. With a goroutine each, and the server's QP in
// the polling mode (rxPollServer: the server's goroutine runs the
// receive engine while it waits, as siw perf's responder does for
// Sends), send/64 went from 12.9-14.6 to 16.8-17.3 Mmsg/s in three
// interleaved rounds of old and new binaries (CRC on: 9.9-10.8 to
// 13.9-14.6); send-rxg, the same with the server's receive goroutine,
// measured 14.0-15.3 beside it. 4 KiB and 1 MiB Sends moved within the
// noise.
func gosiwSend(b bench, n int, f *gosiwFixture, size int) error {
	ctx, cancel := runCtx()
	defer cancel()
	a := f.a
	l := newPostList(a.qp, rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{a.src.SGE(0, size)}}, recvPosted, signalEvery)
	var cr credit
	cr.more = make(chan struct{}, 1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	srv := make(chan error, 1)
	go func() {
		err := f.b.receive(ctx, n, &cr)
		if err != nil {
			cancel()
		}
		srv <- err
	}()
	err := f.stream(ctx, l, n, &cr)
	if err != nil {
		cancel()
	}
	if e := <-srv; err == nil {
		err = e
	}
	b.StopTimer()
	return err
}

// credit is how many receives the server has reaped and posted again;
// more holds a wake-up for a client that waits for credit, sent after
// every update (dropped when one is pending already, which the client
// has yet to take and look again after).
type credit struct {
	reposted atomic.Int64
	more     chan struct{}
}

// receive reaps n receive completions on s, reposting the receives as
// it goes and publishing their count in cr.
func (s *qpSide) receive(ctx context.Context, n int, cr *credit) error {
	for got := 0; got < n; {
		k := s.cq.Poll(s.wcs)
		if k == 0 {
			if err := s.cq.Wait(ctx); err != nil {
				return fmt.Errorf("waiting for a receive: %w", err)
			}
			continue
		}
		for i := range k {
			if err := checkWC(&s.wcs[i], rdmap.WCRecv); err != nil {
				return err
			}
		}
		if _, err := s.qp.PostRecvs(s.recvs[:k]); err != nil {
			return err
		}
		got += k
		cr.reposted.Store(int64(got))
		select {
		case cr.more <- struct{}{}:
		default:
		}
	}
	return nil
}

// gosiwPingPong sends size bytes to the server, whose application
// goroutine echoes them back with a Send, one round trip at a time. The
// Sends are unsignaled but for the last on each side: each side waits
// for its receive completion only, and, once the timer has stopped, for
// the completion of its last Send, which retires every Send before it
// (the verbs rule), so that the run that comes next on the fixture
// starts with an SQ that is provably empty. A side's send and receive
// completions share its CQ: the last Send's may come before or after
// the last receive's.
func gosiwPingPong(b bench, n int, f *gosiwFixture, size int) error {
	ctx, cancel := runCtx()
	defer cancel()
	a, p := f.a, f.b
	ping := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{a.src.SGE(0, size)}}
	pong := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{p.src.SGE(0, size)}}
	errc := make(chan error, 1)
	go func() {
		err := func() error {
			sent := false // the last pong's completion was reaped
			for i := range n {
				if err := waitRecv(ctx, p.cq, p.wcs, &sent); err != nil {
					return err
				}
				if err := p.qp.PostRecv(p.recv); err != nil {
					return err
				}
				pong.Signaled = i == n-1
				if err := p.qp.PostSend(pong); err != nil {
					return err
				}
			}
			return waitSent(ctx, p.cq, p.wcs, sent)
		}()
		if err != nil {
			cancel()
		}
		errc <- err
	}()
	b.ReportAllocs()
	b.ResetTimer()
	fail := func(err error) error {
		cancel()
		return errors.Join(err, <-errc)
	}
	sent := false // the last ping's completion was reaped
	for i := range n {
		ping.Signaled = i == n-1
		if err := a.qp.PostSend(ping); err != nil {
			return fail(err)
		}
		if err := waitRecv(ctx, a.cq, a.wcs, &sent); err != nil {
			return fail(err)
		}
		if err := a.qp.PostRecv(a.recv); err != nil {
			return fail(err)
		}
	}
	b.StopTimer()
	if err := waitSent(ctx, a.cq, a.wcs, sent); err != nil {
		return fail(err)
	}
	return <-errc
}

// waitRecv waits for a receive completion on cq and checks it; a
// successful send completion that comes first (a ping-pong's last Send,
// the only signaled one) is taken and noted in *sent.
func waitRecv(ctx context.Context, cq *rdmap.CQ, wcs []rdmap.WC, sent *bool) error {
	for {
		if err := nextWC(ctx, cq, wcs, rdmap.WCRecv); err != nil {
			return err
		}
		if wc := &wcs[0]; !*sent && wc.Op == rdmap.WCSend && wc.Status == rdmap.WCSuccess {
			*sent = true
			continue
		}
		return checkWC(&wcs[0], rdmap.WCRecv)
	}
}

// waitSent waits for the completion of a ping-pong side's last Send,
// unless waitRecv took it already.
func waitSent(ctx context.Context, cq *rdmap.CQ, wcs []rdmap.WC, sent bool) error {
	if sent {
		return nil
	}
	return waitWC(ctx, cq, wcs, rdmap.WCSend)
}
