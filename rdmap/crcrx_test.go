package rdmap_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// TestCRCChecksReceivedBytes is TestCRCCoversSentBytes for the receive
// side: writers scribble over the memory that incoming CRC-protected
// Sends, Writes and Read Responses land in (as another connection placing
// into a shared region would). The data there is undefined, but the CRC
// check must see the bytes that arrived, never the ones changed after
// placement: no CRC error, no Terminate. GOSIW_CRC_RACE sets the length.
func TestCRCChecksReceivedBytes(t *testing.T) {
	d := crcRaceFor(t)
	for _, markers := range []bool{false, true} {
		t.Run(fmt.Sprintf("markers=%v", markers), func(t *testing.T) {
			crcRaceSinks(t, d, &rdmaptest.Options{CRC: true, MarkersAB: markers, MarkersBA: markers})
		})
	}
}

func crcRaceSinks(t *testing.T, d time.Duration, o *rdmaptest.Options) {
	const (
		size  = 256 << 10
		depth = 6
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
	src := a.reg(t, make([]byte, size), rdmap.AccessLocalWrite)
	rsrc := b.reg(t, make([]byte, size), rdmap.AccessRemoteRead)
	sink, sinkBuf := alloc(a, rdmap.AccessLocalWrite)                           // Read Responses land here
	wsink, wsinkBuf := alloc(b, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite) // Writes
	rbuf, rbufBuf := alloc(b, rdmap.AccessLocalWrite)                           // Sends

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go scribble(stop, &wg, sinkBuf, wsinkBuf, rbufBuf)
	defer func() {
		close(stop)
		wg.Wait()
	}()

	rounds := 0
	for end := time.Now().Add(d); time.Now().Before(end); rounds++ {
		crcRound(t, a, b, depth, size, rounds, crcMRs{src: src, rsrc: rsrc, sink: sink, wsink: wsink, rbuf: rbuf})
	}
	if a.qp.Err() != nil || b.qp.Err() != nil || a.qp.State() != rdmap.StateRTS || b.qp.State() != rdmap.StateRTS {
		t.Fatalf("after %d rounds: a %v %v, b %v %v", rounds, a.qp.State(), a.qp.Err(), b.qp.State(), b.qp.Err())
	}
	t.Logf("%d rounds of %d work requests of %d KiB in %v", rounds, depth, size>>10, d)
}
