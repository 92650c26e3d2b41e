package rdmap_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// crcRaceFor is how long TestCRCCoversSentBytes races each case:
// GOSIW_CRC_RACE (a time.ParseDuration string, e.g. 3m) or 1.5 s.
func crcRaceFor(t *testing.T) time.Duration {
	d := 1500 * time.Millisecond
	if s := os.Getenv("GOSIW_CRC_RACE"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			t.Fatalf("GOSIW_CRC_RACE=%q: want a positive duration", s)
		}
		d = v
	}
	if testing.Short() {
		d = min(d, 300*time.Millisecond)
	}
	return d
}

// scribble rewrites each of bufs in turn until stop is closed: every byte
// changes on each pass, so a byte an engine reads twice (once for the
// CRC, once for the wire or the memory) differs between the two reads as
// often as the scheduling allows. One goroutine does all, so that the
// engines still get the CPU on a small machine. The buffers are
// AllocMemory memory, outside the Go heap: the race detector does not
// track it, which is right here, since racing with the engines is the
// point (verbs allow it: the data is undefined, the protocol must stay
// intact).
func scribble(stop <-chan struct{}, wg *sync.WaitGroup, bufs ...[]byte) {
	defer wg.Done()
	for v := byte(1); ; v++ {
		for _, b := range bufs {
			select {
			case <-stop:
				return
			default:
			}
			for i := range b {
				b[i] = v + byte(i)
			}
		}
	}
}

// TestCRCCoversSentBytes races a writer against every send path that
// carries registered memory under CRC32c (Send and RDMA Write from a,
// Read Responses from b), with and without markers: the memory changes
// while the engines send it, and the peers must never see a CRC error
// (which would end the QPs with a Terminate and fail the work requests).
// GOSIW_CRC_RACE=3m runs each case for minutes.
func TestCRCCoversSentBytes(t *testing.T) {
	d := crcRaceFor(t)
	for _, markers := range []bool{false, true} {
		t.Run(fmt.Sprintf("markers=%v", markers), func(t *testing.T) {
			crcRace(t, d, &rdmaptest.Options{CRC: true, MarkersAB: markers, MarkersBA: markers})
		})
	}
}

func crcRace(t *testing.T, d time.Duration, o *rdmaptest.Options) {
	const (
		size  = 256 << 10 // per message: several FPDUs, more than one batch per round
		depth = 6         // work requests per round: two of each kind
	)
	a, b := pair(t, rdmap.QPConfig{}, o)
	alloc := func(s *side, acc rdmap.Access) (*rdmap.MR, []byte) {
		mem, err := s.dev.AllocMemory(size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		return s.reg(t, mem.Bytes(), acc), mem.Bytes()
	}
	src, srcBuf := alloc(a, rdmap.AccessLocalWrite)              // Sends and Writes of a
	rsrc, rsrcBuf := alloc(b, rdmap.AccessRemoteRead)            // Read Responses of b
	sink := a.reg(t, make([]byte, size), rdmap.AccessLocalWrite) // a's Reads land here
	wsink := b.reg(t, make([]byte, size), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	rbuf := b.reg(t, make([]byte, size), rdmap.AccessLocalWrite)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go scribble(stop, &wg, srcBuf, rsrcBuf)
	defer func() {
		close(stop)
		wg.Wait()
	}()

	var rounds, moved int
	for end := time.Now().Add(d); time.Now().Before(end); rounds++ {
		crcRound(t, a, b, depth, size, rounds, crcMRs{src: src, rsrc: rsrc, sink: sink, wsink: wsink, rbuf: rbuf})
		moved += depth * size
	}
	if a.qp.Err() != nil || b.qp.Err() != nil || a.qp.State() != rdmap.StateRTS || b.qp.State() != rdmap.StateRTS {
		t.Fatalf("after %d rounds: a %v %v, b %v %v", rounds, a.qp.State(), a.qp.Err(), b.qp.State(), b.qp.Err())
	}
	t.Logf("%d rounds, %d MiB through the CRC paths in %v", rounds, moved>>20, d)
}

// crcMRs are the regions of one CRC race round: a's Send/Write source
// and Read sink, b's Read source, Write sink and receive buffer.
type crcMRs struct{ src, rsrc, sink, wsink, rbuf *rdmap.MR }

// crcRound posts depth/3 receives on b and depth work requests on a
// (Send, Write, Read in turn, each of size bytes), and checks that every
// one completes successfully on both sides.
func crcRound(t *testing.T, a, b *side, depth, size, round int, m crcMRs) {
	t.Helper()
	for i := range depth / 3 {
		mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{m.rbuf.SGE(0, size)}}))
	}
	for i := range depth {
		var wr rdmap.SendWR
		switch i % 3 {
		case 0:
			wr = rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{m.src.SGE(0, size)}}
		case 1:
			wr = rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{m.src.SGE(0, size)}, Remote: rdmap.Remote{STag: m.wsink.STag()}}
		case 2:
			wr = rdmap.SendWR{Op: rdmap.WRRead, SGL: []rdmap.SGE{m.sink.SGE(0, size)}, Remote: rdmap.Remote{STag: m.rsrc.STag()}}
		}
		wr.ID, wr.Signaled = uint64(i), true
		mustPost(t, a.qp.PostSend(wr))
	}
	for _, wc := range pollN(t, a.cq, depth) {
		if wc.Status != rdmap.WCSuccess {
			t.Fatalf("round %d: a's completion %+v; a: %v; b: %v", round, wc, a.qp.Err(), b.qp.Err())
		}
	}
	for _, wc := range pollN(t, b.cq, depth/3) {
		if wc.Status != rdmap.WCSuccess || wc.ByteLen != uint32(size) {
			t.Fatalf("round %d: b's completion %+v; a: %v; b: %v", round, wc, a.qp.Err(), b.qp.Err())
		}
	}
}
