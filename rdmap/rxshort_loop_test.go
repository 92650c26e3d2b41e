package rdmap_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// chopProxy forwards what it reads from src to dst in random short
// writes (1 byte .. a few KiB, yielding between them), so that the
// receiver's reads of a loopback TCP connection return short, randomly
// cut pieces of the stream; it stops when src ends or fails and then
// closes dst's write side.
func chopProxy(dst, src net.Conn, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	buf := make([]byte, 64<<10)
	defer dst.(*net.TCPConn).CloseWrite()
	for {
		n, err := src.Read(buf)
		for p := buf[:n]; len(p) > 0; {
			var k int
			switch rng.IntN(4) {
			case 0:
				k = 1 + rng.IntN(8)
			case 1:
				k = 1 + rng.IntN(300)
			default:
				k = 1 + rng.IntN(4096)
			}
			k = min(k, len(p))
			if _, werr := dst.Write(p[:k]); werr != nil {
				return
			}
			p = p[k:]
			runtime.Gosched()
		}
		if err != nil {
			return
		}
	}
}

// chopPair connects QP a (the initiator) and QP b through two loopback
// TCP connections and a proxy that chops what a sends b into random
// short writes (chopProxy); what b sends a passes unchanged.
func chopPair(tb testing.TB, a, b *rdmap.QP, o *rdmaptest.Options, seed uint64) {
	tb.Helper()
	ca, pa := rdmaptest.ConnPair(tb, false)
	pb, cb := rdmaptest.ConnPair(tb, false)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); chopProxy(pb, pa, seed) }()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(pa, pb)
		pa.(*net.TCPConn).CloseWrite()
	}()
	tb.Cleanup(func() {
		a.Close()
		b.Close()
		pa.Close()
		pb.Close()
		wg.Wait()
	})
	rdmaptest.Start(tb, a, b, ca, cb, o)
}

// TestWriteStreamsShortReads is the workload of siw perf write -l 16K -P 2
// --crc on two QPs at once: each keeps 64 RDMA Writes of 16 KiB
// outstanding, posted in lists of 16 of which the last is signaled, the
// receiver's reads cut short at random by a proxy (chopProxy) or, for
// comparison, straight over loopback TCP. Every signaled Write must
// complete (within a bound far past what the transfer takes: a stall
// fails the test with both QPs' counters and every goroutine's stack)
// and the Writes' bytes be in the target region once their sender has
// seen the Read that follows them complete.
func TestWriteStreamsShortReads(t *testing.T) {
	for _, chop := range []bool{true, false} {
		for _, crc := range []bool{true, false} {
			t.Run(fmt.Sprintf("chop=%v/crc=%v", chop, crc), func(t *testing.T) {
				writeStreams(t, chop, crc)
			})
		}
	}
}

func writeStreams(t *testing.T, chop, crc bool) {
	const (
		size    = 16 << 10
		depth   = 64
		signal  = 16
		streams = 2
	)
	writes := 1536
	if testing.Short() {
		writes = 256
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	cdev, rdev := newDevice(t), newDevice(t)
	type stream struct {
		c, r     *side
		src, dst []byte
		smr, dmr *rdmap.MR
		err      error
	}
	ss := make([]*stream, streams)
	for i := range ss {
		s := &stream{
			c: newSide(t, cdev, rdmap.QPConfig{MaxSendWR: depth + 2}),
			r: newSide(t, rdev, rdmap.QPConfig{}),
		}
		s.src, s.dst = make([]byte, size), make([]byte, size)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		for j := range s.src {
			s.src[j] = byte(rng.Uint32())
		}
		s.smr = s.c.reg(t, s.src, rdmap.AccessLocalWrite)
		s.dmr = s.r.reg(t, s.dst, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
		o := &rdmaptest.Options{CRC: crc}
		if chop {
			chopPair(t, s.c.qp, s.r.qp, o, seed+uint64(i))
		} else {
			rdmaptest.Connect(t, s.c.qp, s.r.qp, o)
		}
		ss[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.err = writeStream(ctx, s.c.qp, s.c.cq, s.smr, rdmap.Remote{STag: s.dmr.STag()}, size, depth, signal, writes)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		buf := make([]byte, 1<<22)
		n := runtime.Stack(buf, true)
		for i, s := range ss {
			t.Logf("stream %d: client %+v, responder %+v", i, s.c.qp.Stats(), s.r.qp.Stats())
		}
		t.Logf("goroutines:\n%s", buf[:n])
		cancel()
		<-done
	}
	// The responders' receive goroutines have stopped once their QPs
	// are done: what they placed is ours to read.
	for _, s := range ss {
		s.c.qp.Close()
		s.r.qp.Close()
		rdmaptest.WaitDone(t, s.r.qp, 10*time.Second)
	}
	for i, s := range ss {
		if s.err != nil {
			t.Errorf("stream %d: %v (client %+v, responder %+v)", i, s.err, s.c.qp.Stats(), s.r.qp.Stats())
		} else if !bytes.Equal(s.src, s.dst) {
			t.Errorf("stream %d: the target region does not hold the Writes' bytes", i)
		}
	}
}

// writeStream posts writes Writes of size bytes from mr to remote, at
// most depth outstanding, in lists of signal of which the last is
// signaled, waits for them to complete, then reads the remote region's
// first byte back (a Read completes after the Writes before it are
// placed: RDMAP orders them).
func writeStream(ctx context.Context, qp *rdmap.QP, cq *rdmap.CQ, mr *rdmap.MR, remote rdmap.Remote, size, depth, signal, writes int) error {
	wrs := make([]rdmap.SendWR, signal)
	wcs := make([]rdmap.WC, 32)
	var seq, retired int
	for retired < writes {
		for seq < writes && seq-retired+signal <= depth {
			m := min(signal, writes-seq)
			for j := range m {
				wrs[j] = rdmap.SendWR{ID: uint64(seq + j), Op: rdmap.WRWrite, Remote: remote, SGL: []rdmap.SGE{mr.SGE(0, size)}}
			}
			wrs[m-1].Signaled = true
			if _, err := qp.PostSends(wrs[:m]); err != nil {
				return fmt.Errorf("post: %w", err)
			}
			seq += m
		}
		n := cq.Poll(wcs)
		if n == 0 {
			if err := cq.Wait(ctx); err != nil {
				return fmt.Errorf("%d of %d Writes retired, %d posted: %w", retired, writes, seq, err)
			}
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdmap.WCSuccess || wc.Op != rdmap.WCWrite || int(wc.ID) < retired || int(wc.ID) >= seq {
				return fmt.Errorf("completion %+v with %d..%d outstanding", wc, retired, seq-1)
			}
			retired = int(wc.ID) + 1
		}
	}
	var b [1]byte
	lmr, err := mr.PD().RegisterMemory(b[:], rdmap.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer lmr.Deregister()
	if err := qp.PostSend(rdmap.SendWR{ID: 1 << 40, Op: rdmap.WRRead, Remote: remote, SGL: []rdmap.SGE{lmr.SGE(0, 1)}, Signaled: true}); err != nil {
		return fmt.Errorf("post the Read: %w", err)
	}
	for {
		n := cq.Poll(wcs[:1])
		if n == 1 {
			if wcs[0].Status != rdmap.WCSuccess || wcs[0].ID != 1<<40 {
				return fmt.Errorf("the Read: %+v", wcs[0])
			}
			return nil
		}
		if err := cq.Wait(ctx); err != nil {
			return fmt.Errorf("the Read: %w", err)
		}
	}
}
