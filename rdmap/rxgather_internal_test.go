package rdmap

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestRxGatherInline: the receive completions of the Sends that one read
// brings are gathered in the engine's own slots while they fit
// (rxInlineWCs: the latency-bound exchange's one completion a read takes
// nothing from wcsPool) and in wcsPool's array beyond that, the ones
// gathered inline moved over; either way they reach the CQ in the order
// of the Sends, each with its receive's ID and length and its payload in
// place, and once the engine settles it holds no array of the pool (an
// idle QP carries none). The counts straddle the inline slots and the
// batch (rxBatch: a flush in the middle of the read).
func TestRxGatherInline(t *testing.T) {
	const size = 8
	counts := []int{1, rxInlineWCs, rxInlineWCs + 1, rxInlineWCs + 2, rxBatch, rxBatch + 3}
	slices.Sort(counts)
	for _, n := range slices.Compact(counts) {
		t.Run(fmt.Sprintf("sends=%d", n), func(t *testing.T) {
			mem := make([]byte, n*size)
			qp, cq, mr := engineQP(t, 2*n, QPConfig{MaxRecvWR: n}, mem)
			for i := range n {
				if err := qp.PostRecv(RecvWR{ID: uint64(1000 + i), SGL: []SGE{mr.SGE(i*size, size)}}); err != nil {
					t.Fatal(err)
				}
			}
			var stream []byte
			for i := range n {
				h := ddp.AppendUntagged(nil, &ddp.UntaggedFields{
					Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpSend), QN: wire.QNSend, MSN: uint32(i + 1),
				})
				stream = mpa.AppendFPDU(stream, h, binary.BigEndian.AppendUint64(nil, uint64(i)), false)
			}
			qp.p = mpa.Params{}
			rx := &qp.rx
			rx.init(qp, &cycleConn{data: stream, max: len(stream)})
			defer rx.release()
			for got := 0; got < n; {
				k, ti, err := rx.fpdus(n - got)
				rx.dropRefs()
				if err != nil || ti != nil {
					t.Fatalf("after %d Sends: %v, Terminate %+v", got, err, ti)
				}
				got += k
			}
			if pooled := rx.pooledWCs(); pooled != (n > rxInlineWCs) {
				t.Errorf("%d Sends in one read: the engine holds wcsPool's array: %v, want %v", n, pooled, n > rxInlineWCs)
			}
			rx.settle()
			if rx.pooledWCs() || rx.nwcs != 0 {
				t.Errorf("settled: the engine holds wcsPool's array (%v) or %d unpushed completions", rx.pooledWCs(), rx.nwcs)
			}
			wcs := make([]WC, n+1)
			if k := cq.Poll(wcs); k != n {
				t.Fatalf("polled %d completions, want %d", k, n)
			}
			for i, wc := range wcs[:n] {
				if wc.ID != uint64(1000+i) || wc.Status != WCSuccess || wc.Op != WCRecv || wc.ByteLen != size {
					t.Fatalf("completion %d: %+v, want the receive %d, successful, of %d bytes", i, wc, 1000+i, size)
				}
				if v := binary.BigEndian.Uint64(mem[i*size:]); v != uint64(i) {
					t.Fatalf("receive %d holds Send %d's payload", i, v)
				}
			}
		})
	}
}
