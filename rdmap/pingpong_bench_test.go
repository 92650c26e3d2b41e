package rdmap_test

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// BenchmarkPingPong measures a 64-byte round trip over loopback TCP, one
// at a time, as a latency-bound application sees it: the client posts a
// Send and waits for the echo's receive completion; the server's
// application goroutine waits for the receive, reposts it and answers
// with a Send (unsignaled Sends, one CQ per side). mode=pollrx runs the
// receive engines in CQ.Wait (QPConfig.PollRx), mode=rxg on the receive
// goroutines. bare is the baseline a user would write instead: the same
// 64 bytes through a plain TCP echo, conn.Write then io.ReadFull, one
// goroutine each side. cpu-ns/op is the CPU time of the process (user
// and system) per round trip.
//
// For instruction counts per round trip, run it under callgrind at two
// -test.benchtime counts (e.g. 2000x and 12000x) and divide the
// difference by the difference of the counts: the setup cancels out.
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range []string{"pollrx", "rxg"} {
		b.Run("mode="+mode, func(b *testing.B) {
			benchPingPong(b, rdmap.QPConfig{PollRx: mode == "pollrx"})
		})
	}
	b.Run("bare", benchBareEcho)
}

const pingPongSize = 64

func benchPingPong(b *testing.B, cfg rdmap.QPConfig) {
	cfg.MaxSendWR, cfg.MaxRecvWR = 16, 16
	// Devices without a test logger: a benchmark prints its logs.
	quiet := func() *rdmap.Device {
		dev, err := rdmap.NewDevice(&rdmap.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Close() })
		return dev
	}
	a, p := newSide(b, quiet(), cfg), newSide(b, quiet(), cfg)
	rdmaptest.Connect(b, a.qp, p.qp, nil)
	abuf := a.reg(b, make([]byte, pingPongSize), rdmap.AccessLocalWrite)
	pbuf := p.reg(b, make([]byte, pingPongSize), rdmap.AccessLocalWrite)
	arecv := rdmap.RecvWR{SGL: []rdmap.SGE{abuf.SGE(0, pingPongSize)}}
	precv := rdmap.RecvWR{SGL: []rdmap.SGE{pbuf.SGE(0, pingPongSize)}}
	ping := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{abuf.SGE(0, pingPongSize)}}
	pong := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{pbuf.SGE(0, pingPongSize)}}
	for range 4 {
		mustPost(b, a.qp.PostRecv(arecv))
		mustPost(b, p.qp.PostRecv(precv))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// One round trip first: the responder sends nothing before the
	// initiator's first FPDU.
	n := b.N + 1
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			wcs := make([]rdmap.WC, 1)
			for range n {
				if err := waitRecv(ctx, p.cq, wcs); err != nil {
					return err
				}
				if err := p.qp.PostRecv(precv); err != nil {
					return err
				}
				if err := p.qp.PostSend(pong); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	wcs := make([]rdmap.WC, 1)
	var cpu cpuTimes
	for i := range n {
		if i == 1 {
			cpu = startTimer(b) // after the first round trip
		}
		mustPost(b, a.qp.PostSend(ping))
		if err := waitRecv(ctx, a.cq, wcs); err != nil {
			cancel()
			<-errc
			b.Fatal(err)
		}
		mustPost(b, a.qp.PostRecv(arecv))
	}
	b.StopTimer()
	cpu.report(b)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// cpuTimes is the process's user and system CPU time.
type cpuTimes struct{ user, sys time.Duration }

func cpuNow() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

// startTimer starts b's measurement and returns the CPU times at its
// start.
func startTimer(b *testing.B) cpuTimes {
	b.ReportAllocs()
	b.ResetTimer()
	return cpuNow()
}

// report reports the CPU time since c per operation: cpu-ns/op (user and
// system, as the other benchmarks), user-ns/op and sys-ns/op.
func (c cpuTimes) report(b *testing.B) {
	now := cpuNow()
	n := float64(b.N)
	b.ReportMetric(float64(now.user-c.user+now.sys-c.sys)/n, "cpu-ns/op")
	b.ReportMetric(float64(now.user-c.user)/n, "user-ns/op")
	b.ReportMetric(float64(now.sys-c.sys)/n, "sys-ns/op")
}

// waitRecv waits for one successful receive completion on cq.
func waitRecv(ctx context.Context, cq *rdmap.CQ, wcs []rdmap.WC) error {
	for cq.Poll(wcs[:1]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return err
		}
	}
	if wcs[0].Status != rdmap.WCSuccess || wcs[0].Op != rdmap.WCRecv {
		return &wcError{wcs[0]}
	}
	return nil
}

type wcError struct{ wc rdmap.WC }

func (e *wcError) Error() string {
	return "unexpected completion " + e.wc.Op.String() + " " + e.wc.Status.String()
}

// benchBareEcho is BenchmarkPingPong's baseline: a plain TCP echo.
func benchBareEcho(b *testing.B) {
	ca, cb := rdmaptest.ConnPair(b, false)
	defer ca.Close()
	defer cb.Close()
	n := b.N + 1
	errc := make(chan error, 1)
	go func() {
		errc <- func(c net.Conn) error {
			buf := make([]byte, pingPongSize)
			for range n {
				if _, err := io.ReadFull(c, buf); err != nil {
					return err
				}
				if _, err := c.Write(buf); err != nil {
					return err
				}
			}
			return nil
		}(cb)
	}()
	msg, buf := make([]byte, pingPongSize), make([]byte, pingPongSize)
	var cpu cpuTimes
	for i := range n {
		if i == 1 {
			cpu = startTimer(b) // after the first round trip
		}
		if _, err := ca.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(ca, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu.report(b)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
