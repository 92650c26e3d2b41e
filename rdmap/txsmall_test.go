package rdmap_test

import (
	"bytes"
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
// complete in order. Size 0 mixes the two (every third 1100 bytes), so
// that without CRC a run of small FPDUs (mpa.Run) is cut by messages
// the Writer frames otherwise and resumes after them.
func TestSmallRunsAcrossBatches(t *testing.T) {
	for _, c := range runOptions {
		for _, size := range []int{64, 1100, 0} {
			t.Run(fmt.Sprintf("%s/%d", c.name, size), func(t *testing.T) { testSmallRunsAcrossBatches(t, &c.o, size) })
		}
	}
}

func testSmallRunsAcrossBatches(t *testing.T, o *rdmaptest.Options, size int) {
	const n = 1000 // within the receive CQ's 1024
	stride, sizeOf := size, func(int) int { return size }
	if size == 0 {
		stride = 1100
		sizeOf = func(i int) int {
			if i%3 == 0 {
				return 1100
			}
			return 64
		}
	}
	a := newSide(t, newDevice(t), rdmap.QPConfig{MaxSendWR: n})
	b := newSide(t, newDevice(t), rdmap.QPConfig{MaxRecvWR: n})
	src := a.reg(t, make([]byte, n*stride), rdmap.AccessLocalWrite)
	dst := b.reg(t, make([]byte, n*stride), rdmap.AccessLocalWrite)
	rwrs := make([]rdmap.RecvWR, n)
	wrs := make([]rdmap.SendWR, n)
	for i := range n {
		size := sizeOf(i)
		msg := src.Bytes()[i*stride : i*stride+size]
		for j := range msg {
			msg[j] = byte(i + j)
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRSend, SGL: []rdmap.SGE{src.SGE(i*stride, size)}, Signaled: i%100 == 99}
		rwrs[i] = rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{dst.SGE(i*stride, stride)}}
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
		size := sizeOf(i)
		got := dst.Bytes()[i*stride : i*stride+size]
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

// TestWritesBehindReadComplete: Writes written in the same batch as a
// Read Request, behind it in the SQ, complete once the Read's response
// has been placed, after the Read, even when nothing is posted after
// them (the sweep after their write stops at the Read; they must be
// done for the sweep that the response runs).
func TestWritesBehindReadComplete(t *testing.T) {
	for _, c := range runOptions {
		t.Run(c.name, func(t *testing.T) {
			a := newSide(t, newDevice(t), rdmap.QPConfig{})
			b := newSide(t, newDevice(t), rdmap.QPConfig{})
			src := a.reg(t, fill(make([]byte, 128), 'w'), rdmap.AccessLocalWrite)
			sink := a.reg(t, make([]byte, 64), rdmap.AccessLocalWrite)
			remote := b.reg(t, fill(make([]byte, 256), 'r'), accAll)
			at := func(off int) rdmap.Remote { return rdmap.Remote{STag: remote.STag(), Offset: uint64(off)} }
			wrs := []rdmap.SendWR{
				{ID: 0, Op: rdmap.WRRead, SGL: []rdmap.SGE{sink.SGE(0, 64)}, Remote: at(0), Signaled: true},
				{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, 64)}, Remote: at(128)},
				{ID: 2, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(64, 64)}, Remote: at(192), Signaled: true},
			}
			if k, err := a.qp.PostSends(wrs); k != len(wrs) || err != nil {
				t.Fatalf("PostSends = %d, %v", k, err)
			}
			rdmaptest.Connect(t, a.qp, b.qp, &c.o)
			wcs := pollN(t, a.cq, 2)
			expectWC(t, wcs[0], 0, rdmap.WCRead, rdmap.WCSuccess)
			expectWC(t, wcs[1], 2, rdmap.WCWrite, rdmap.WCSuccess)
			if !bytes.Equal(sink.Bytes(), fill(make([]byte, 64), 'r')) {
				t.Fatal("the Read did not fetch the remote bytes")
			}
		})
	}
}
