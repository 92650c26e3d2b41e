package rdmap_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// TestSmallRunsAcrossBatches: a long list of one-FPDU Sends, posted
// before the QP starts so that the send engine frames them in full runs
// (tx.go, txEmitSmall), fills batch after batch; a batch fills in the
// middle of a run (64-byte Sends fill the scratch arena without CRC,
// 1100-byte ones the iovecs without CRC and the bytes with it), and the
// run goes on in the next batch exactly where it stopped: every message
// arrives once, in order, with its own bytes, and the signaled Sends
// complete in order.
func TestSmallRunsAcrossBatches(t *testing.T) {
	for _, c := range runOptions {
		for _, size := range []int{64, 1100} {
			t.Run(fmt.Sprintf("%s/%d", c.name, size), func(t *testing.T) { testSmallRunsAcrossBatches(t, &c.o, size) })
		}
	}
}

func testSmallRunsAcrossBatches(t *testing.T, o *rdmaptest.Options, size int) {
	const n = 1000 // within the receive CQ's 1024
	a := newSide(t, newDevice(t), rdmap.QPConfig{MaxSendWR: n})
	b := newSide(t, newDevice(t), rdmap.QPConfig{MaxRecvWR: n})
	src := a.reg(t, make([]byte, n*size), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, n*size), rdmap.AccessLocalWrite)
	rwrs := make([]rdmap.RecvWR, n)
	wrs := make([]rdmap.SendWR, n)
	for i := range n {
		msg := src.Bytes()[i*size : (i+1)*size]
		for j := range msg {
			msg[j] = byte(i + j)
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(i*size, size)}, Signaled: i%100 == 99}
		rwrs[i] = rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{dst.SGE(i*size, size)}}
	}
	if k, err := b.qp.PostRecvs(rwrs); k != n || err != nil {
		t.Fatalf("PostRecvs = %d, %v", k, err)
	}
	if k, err := a.qp.PostSends(wrs); k != n || err != nil {
		t.Fatalf("PostSends = %d, %v", k, err)
	}
	rdmaptest.Connect(t, a.qp, b.qp, o)
	for i, wc := range pollN(t, b.cq, n) {
		expectWC(t, wc, uint64(i), rdmap.WCRecv, rdmap.WCSuccess)
		got := dst.Bytes()[i*size : (i+1)*size]
		if wc.ByteLen != uint32(size) || binary.BigEndian.Uint64(got) != uint64(i) || got[size-1] != byte(i+size-1) {
			t.Fatalf("receive %d: %d bytes, sequence %d, last byte %d; want %d, %d, %d",
				i, wc.ByteLen, binary.BigEndian.Uint64(got), got[size-1], size, i, byte(i+size-1))
		}
	}
	for k, wc := range pollN(t, a.cq, n/100) {
		expectWC(t, wc, uint64(100*k+99), rdmap.WCSend, rdmap.WCSuccess)
	}
	if st := a.qp.Stats(); st.TxWritevs < 2 {
		t.Logf("%d writevs for %d FPDUs: the batches did not fill", st.TxWritevs, st.TxFPDUs)
	}
}
