package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// Queue depths: Writes and Sends keep up to depth work requests
// outstanding (as rdmap's own benchmarks do); Reads up to readDepth, the
// ORD the connection settles (rdmaptest's default IRD/ORD of 16).
const (
	depth     = 32
	readDepth = 16
	// recvPosted is how many receives the server side keeps posted for
	// Sends (the sender never runs further ahead); the client keeps
	// clientRecvs for the ping-pong's echoes.
	recvPosted  = 2 * depth
	clientRecvs = 8
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
}

func newQPSide(maxULPDU int, pollRx bool) (*qpSide, error) {
	dev, err := rdmap.NewDevice(&rdmap.Config{})
	if err != nil {
		return nil, err
	}
	s := &qpSide{dev: dev, pd: dev.AllocPD(), wcs: make([]rdmap.WC, 2*depth)}
	if s.cq, err = dev.CreateCQ(1024); err != nil {
		return s, err
	}
	if s.qp, err = s.pd.CreateQP(&rdmap.QPConfig{
		SendCQ: s.cq, RecvCQ: s.cq,
		MaxSendWR: 2 * depth, MaxRecvWR: 2 * recvPosted,
		MaxULPDU: maxULPDU, PollRx: pollRx,
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

func newGosiwFixture(ca, cb net.Conn, crc bool, maxULPDU int, pollRx bool) (_ *gosiwFixture, err error) {
	f := &gosiwFixture{}
	defer func() {
		if err != nil {
			ca.Close()
			cb.Close()
			f.close()
		}
	}()
	if f.a, err = newQPSide(maxULPDU, pollRx); err != nil {
		return nil, err
	}
	if f.b, err = newQPSide(maxULPDU, pollRx); err != nil {
		return nil, err
	}
	for range recvPosted {
		if err := f.b.qp.PostRecv(f.b.recv); err != nil {
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
	for cq.Poll(wcs[:1]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return fmt.Errorf("waiting for a %v completion: %w", want, err)
		}
	}
	return checkWC(&wcs[0], want)
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
// bytes from the client to the server's memory, at most d outstanding.
// A run ends when the last completion is reaped. A Write completes once
// written to the socket, so after the timer stops a 1-byte Read fences
// the run: the next one starts with nothing in flight.
func gosiwStream(b bench, n int, f *gosiwFixture, op rdmap.WROpcode, size, d int) error {
	return gosiwStreams(b, n, []*gosiwFixture{f}, op, size, d)
}

// gosiwStreams runs gosiwStream on every fixture at once, n operations
// split between them, each QP reaped by a goroutine of its own (the
// benchmark's for the first).
func gosiwStreams(b bench, n int, fs []*gosiwFixture, op rdmap.WROpcode, size, d int) error {
	ctx, cancel := runCtx()
	defer cancel()
	wrs := make([]rdmap.SendWR, len(fs))
	for i, f := range fs {
		wrs[i] = f.streamWR(op, size)
	}
	errs := make([]error, len(fs))
	done := make(chan struct{}, len(fs))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; i < len(fs); i++ {
		go func() {
			errs[i] = fs[i].stream(ctx, wrs[i], share(n, len(fs), i), d)
			if errs[i] != nil {
				cancel()
			}
			done <- struct{}{}
		}()
	}
	errs[0] = fs[0].stream(ctx, wrs[0], share(n, len(fs), 0), d)
	if errs[0] != nil {
		cancel()
	}
	for range len(fs) - 1 {
		<-done
	}
	b.StopTimer()
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

// streamWR is the work request of a stream of op (WRWrite or WRRead).
func (f *gosiwFixture) streamWR(op rdmap.WROpcode, size int) rdmap.SendWR {
	a := f.a
	wr := rdmap.SendWR{Op: op, Signaled: true}
	if op == rdmap.WRRead {
		wr.SGL = []rdmap.SGE{a.dst.SGE(0, size)}
		wr.Remote = rdmap.Remote{STag: f.b.src.STag()}
	} else {
		wr.SGL = []rdmap.SGE{a.src.SGE(0, size)}
		wr.Remote = rdmap.Remote{STag: f.b.dst.STag()}
	}
	return wr
}

// stream posts wr n times on the client's QP, at most d outstanding, and
// reaps the n completions.
func (f *gosiwFixture) stream(ctx context.Context, wr rdmap.SendWR, n, d int) error {
	a := f.a
	want := rdmap.WCWrite
	if wr.Op == rdmap.WRRead {
		want = rdmap.WCRead
	}
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < d {
			if err := a.qp.PostSend(wr); err != nil {
				return err
			}
			posted++
		}
		k := a.cq.Poll(a.wcs)
		for i := range k {
			if err := checkWC(&a.wcs[i], want); err != nil {
				return err
			}
		}
		done += k
		if k == 0 {
			if err := waitWC(ctx, a.cq, a.wcs, want); err != nil {
				return err
			}
			done++
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
// posted, at most depth outstanding and never more than recvPosted ahead
// of the receives the server has reaped (iWARP has no receiver-not-ready
// retry: a Send without a posted receive ends the connection). One
// goroutine reaps both sides, as rdmap's BenchmarkSend does.
func gosiwSend(b bench, n int, f *gosiwFixture, size int) error {
	ctx, cancel := runCtx()
	defer cancel()
	a, p := f.a, f.b
	wr := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{a.src.SGE(0, size)}, Signaled: true}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done, received := 0, 0, 0
	reap := func() error {
		k := p.cq.Poll(p.wcs)
		for i := range k {
			if err := checkWC(&p.wcs[i], rdmap.WCRecv); err != nil {
				return err
			}
			if err := p.qp.PostRecv(p.recv); err != nil {
				return err
			}
		}
		received += k
		return nil
	}
	for done < n {
		for posted < n && posted-done < depth && posted-received < recvPosted {
			if err := a.qp.PostSend(wr); err != nil {
				return err
			}
			posted++
		}
		if err := reap(); err != nil {
			return err
		}
		k := a.cq.Poll(a.wcs)
		for i := range k {
			if err := checkWC(&a.wcs[i], rdmap.WCSend); err != nil {
				return err
			}
		}
		done += k
		switch {
		case k > 0:
		case posted > done:
			if err := waitWC(ctx, a.cq, a.wcs, rdmap.WCSend); err != nil {
				return err
			}
			done++
		case posted-received >= recvPosted:
			if err := waitWC(ctx, p.cq, p.wcs, rdmap.WCRecv); err != nil {
				return err
			}
			if err := p.qp.PostRecv(p.recv); err != nil {
				return err
			}
			received++
		}
	}
	b.StopTimer()
	// Reap the rest, so the server has recvPosted receives again.
	for received < n {
		if err := waitWC(ctx, p.cq, p.wcs, rdmap.WCRecv); err != nil {
			return err
		}
		if err := p.qp.PostRecv(p.recv); err != nil {
			return err
		}
		received++
	}
	return nil
}

// gosiwPingPong sends size bytes to the server, whose application
// goroutine echoes them back with a Send, one round trip at a time. The
// Sends are unsignaled: each side waits for its receive completion only.
func gosiwPingPong(b bench, n int, f *gosiwFixture, size int) error {
	ctx, cancel := runCtx()
	defer cancel()
	a, p := f.a, f.b
	ping := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{a.src.SGE(0, size)}}
	pong := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{p.src.SGE(0, size)}}
	errc := make(chan error, 1)
	go func() {
		err := func() error {
			for range n {
				if err := waitWC(ctx, p.cq, p.wcs, rdmap.WCRecv); err != nil {
					return err
				}
				if err := p.qp.PostRecv(p.recv); err != nil {
					return err
				}
				if err := p.qp.PostSend(pong); err != nil {
					return err
				}
			}
			return nil
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
	for range n {
		if err := a.qp.PostSend(ping); err != nil {
			return fail(err)
		}
		if err := waitWC(ctx, a.cq, a.wcs, rdmap.WCRecv); err != nil {
			return fail(err)
		}
		if err := a.qp.PostRecv(a.recv); err != nil {
			return fail(err)
		}
	}
	b.StopTimer()
	return <-errc
}
