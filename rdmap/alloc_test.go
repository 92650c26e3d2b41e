package rdmap_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// waitOne spins on a CQ until a completion arrives, without allocating.
func waitOne(tb testing.TB, cq *rdmap.CQ, wc []rdmap.WC) {
	for cq.Poll(wc[:1]) == 0 {
		if err := cq.Wait(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	if wc[0].Status != rdmap.WCSuccess {
		tb.Fatalf("completion %+v", wc[0])
	}
}

// TestZeroAllocsPerWR: in steady state, posting a work request and
// reaping its completion allocates nothing, on either side (the engines
// included: AllocsPerRun counts every goroutine's allocations).
func TestZeroAllocsPerWR(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, o := range []rdmaptest.Options{{}, {CRC: true}, {CRC: true, MarkersAB: true, MarkersBA: true}} {
		t.Run(fmt.Sprintf("crc=%v,markers=%v", o.CRC, o.MarkersAB), func(t *testing.T) {
			a, b := pair(t, rdmap.QPConfig{}, &o)
			src := a.reg(t, make([]byte, 64<<10), rdmap.AccessLocalWrite)
			dst := b.reg(t, make([]byte, 64<<10), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
			wc := make([]rdmap.WC, 1)
			write := rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 8192)}, Remote: rdmap.Remote{STag: dst.STag()}, Signaled: true}
			read := rdmap.SendWR{ID: 2, Op: rdmap.WRRead, SGL: []rdmap.SGE{src.SGE(0, 8192)}, Remote: rdmap.Remote{STag: dst.STag()}, Signaled: true}
			send := rdmap.SendWR{ID: 3, Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(0, 100), src.SGE(200, 900)}, Signaled: true}
			recv := rdmap.RecvWR{ID: 4, SGL: []rdmap.SGE{dst.SGE(0, 4096)}}
			for name, f := range map[string]func(){
				"write": func() {
					mustPost(t, a.qp.PostSend(write))
					waitOne(t, a.cq, wc)
				},
				"read": func() {
					mustPost(t, a.qp.PostSend(read))
					waitOne(t, a.cq, wc)
				},
				"send": func() {
					mustPost(t, b.qp.PostRecv(recv))
					mustPost(t, a.qp.PostSend(send))
					waitOne(t, a.cq, wc)
					waitOne(t, b.cq, wc)
				},
			} {
				for range 50 {
					f()
				}
				if n := testing.AllocsPerRun(500, f); n != 0 {
					t.Errorf("%s: %v allocations per work request", name, n)
				}
			}
		})
	}
}
