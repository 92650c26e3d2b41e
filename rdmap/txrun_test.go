package rdmap_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// The send engine starts the work requests it finds in the SQ in runs,
// many under one lock (tx.go, txPick). These tests post whole lists
// before the QP starts, so that the engine finds them all at once and
// builds its longest runs, and check that the SQ order means what it
// meant one request at a time: fences, memory operations, failed checks.

// runOptions are the connections the run tests use: zero copy (payloads
// above mpa.WriterCopyLen are iovecs of registered memory until the
// writev), CRC (copied into the batch buffer), and markers both ways
// with CRC (no mpa.Run takes an FPDU: every small message is framed by
// AddFPDU).
var runOptions = []struct {
	name string
	o    rdmaptest.Options
}{
	{"crc=off", rdmaptest.Options{}},
	{"crc=on", rdmaptest.Options{CRC: true}},
	{"markers", rdmaptest.Options{CRC: true, MarkersAB: true, MarkersBA: true}},
}

func fill(b []byte, v byte) []byte {
	for i := range b {
		b[i] = v
	}
	return b
}

// TestRunFenceInList: in one posted list, a fenced Write whose source is
// the sink of a Read before it carries the Read's data (it waits for the
// response, as the Write after the Read without a fence need not), and
// the Send after it too.
func TestRunFenceInList(t *testing.T) {
	for _, c := range runOptions {
		t.Run(c.name, func(t *testing.T) { testRunFenceInList(t, &c.o) })
	}
}

func testRunFenceInList(t *testing.T, o *rdmaptest.Options) {
	const n = 1024
	a := newSide(t, newDevice(t), rdmap.QPConfig{})
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	src := a.reg(t, fill(make([]byte, 4*n), 'x'), rdmap.AccessLocalWrite)
	sink := a.reg(t, make([]byte, n), rdmap.AccessLocalWrite)
	remote := make([]byte, 8*n)
	copy(remote, fill(make([]byte, n), 'p')) // what the Read fetches
	rmr := b.reg(t, remote, accAll)
	rbuf := b.reg(t, make([]byte, n), rdmap.AccessLocalWrite)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 100, SGL: []rdmap.SGE{rbuf.SGE(0, n)}}))
	at := func(k int) rdmap.Remote { return rdmap.Remote{STag: rmr.STag(), Offset: uint64(k * n)} }
	wrs := []rdmap.SendWR{
		{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, n)}, Remote: at(1)},
		{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(n, n)}, Remote: at(2)},
		{Op: rdmap.WRRead, SGL: []rdmap.SGE{sink.SGE(0, n)}, Remote: at(0)},
		{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(2*n, n)}, Remote: at(3)},
		{Op: rdmap.WRWrite, SGL: []rdmap.SGE{sink.SGE(0, n)}, Remote: at(4), Fence: true},
		{Op: rdmap.WRSend, SGL: []rdmap.SGE{sink.SGE(0, n)}},
		{Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(3*n, n)}, Remote: at(5)},
	}
	for i := range wrs {
		wrs[i].ID, wrs[i].Signaled = uint64(i), true
	}
	if k, err := a.qp.PostSends(wrs); k != len(wrs) || err != nil {
		t.Fatalf("PostSends = %d, %v", k, err)
	}
	rdmaptest.Connect(t, a.qp, b.qp, o)
	ops := []rdmap.WCOpcode{rdmap.WCWrite, rdmap.WCWrite, rdmap.WCRead, rdmap.WCWrite, rdmap.WCWrite, rdmap.WCSend, rdmap.WCWrite}
	for i, wc := range pollN(t, a.cq, len(wrs)) {
		expectWC(t, wc, uint64(i), ops[i], rdmap.WCSuccess)
	}
	expectWC(t, poll(t, b.cq), 100, rdmap.WCRecv, rdmap.WCSuccess)
	p := fill(make([]byte, n), 'p')
	if !bytes.Equal(sink.Bytes(), p) {
		t.Fatal("the Read did not fetch the remote bytes")
	}
	if !bytes.Equal(remote[4*n:5*n], p) {
		t.Fatalf("the fenced Write carried %q..., not the Read's data", remote[4*n:4*n+8])
	}
	if !bytes.Equal(rbuf.Bytes(), p) {
		t.Fatalf("the Send after the fence carried %q..., not the Read's data", rbuf.Bytes()[:8])
	}
	// The Writes before the Send have landed (the receive completion
	// says so); the last one need not have yet.
	for _, k := range []int{1, 2, 3} {
		if !bytes.Equal(remote[k*n:(k+1)*n], src.Bytes()[:n]) {
			t.Fatalf("Write to block %d did not land", k)
		}
	}
}

// TestRunMemoryOps: a list that writes from a fast-register region,
// invalidates it, maps it over other memory and writes from it again:
// each Write sends the bytes of the mapping it was posted behind, and the
// Write after the last Local Invalidate fails (local protection error)
// after every request before it has completed, and takes the QP down;
// the one after it is flushed.
func TestRunMemoryOps(t *testing.T) {
	for _, c := range runOptions {
		t.Run(c.name, func(t *testing.T) { testRunMemoryOps(t, &c.o) })
	}
}

func testRunMemoryOps(t *testing.T, o *rdmaptest.Options) {
	const n = 1024
	a := newSide(t, newDevice(t), rdmap.QPConfig{})
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	m1, m2 := fill(make([]byte, n), 'A'), fill(make([]byte, n), 'B')
	x, err := a.pd.AllocMR(1)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Deregister()
	remote := make([]byte, 5*n)
	rmr := b.reg(t, remote, accAll)
	at := func(k int) rdmap.Remote { return rdmap.Remote{STag: rmr.STag(), Offset: uint64(k * n)} }
	key := uint8(x.STag())
	write := func(k int) rdmap.SendWR {
		return rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{x.SGE(0, n)}, Remote: at(k)}
	}
	wrs := []rdmap.SendWR{
		{Op: rdmap.WRRegMR, Mem: rdmap.MemOp{MR: x, Mem: m1, Access: rdmap.AccessLocalWrite, Key: key + 1}},
		write(0),
		write(1),
		{Op: rdmap.WRLocalInv, InvalidateSTag: x.STag()&^0xff | rdmap.STag(key+1)},
		{Op: rdmap.WRRegMR, Mem: rdmap.MemOp{MR: x, Mem: m2, Access: rdmap.AccessLocalWrite, Key: key + 2}},
		write(2),
		{Op: rdmap.WRLocalInv, InvalidateSTag: x.STag()&^0xff | rdmap.STag(key+2)},
		write(3),
		write(4),
	}
	for i := range wrs {
		wrs[i].ID, wrs[i].Signaled = uint64(i), true
	}
	if k, err := a.qp.PostSends(wrs); k != len(wrs) || err != nil {
		t.Fatalf("PostSends = %d, %v", k, err)
	}
	rdmaptest.Connect(t, a.qp, b.qp, o)
	ops := []rdmap.WCOpcode{rdmap.WCRegMR, rdmap.WCWrite, rdmap.WCWrite, rdmap.WCLocalInv, rdmap.WCRegMR, rdmap.WCWrite, rdmap.WCLocalInv, rdmap.WCWrite, rdmap.WCWrite}
	for i, wc := range pollN(t, a.cq, len(wrs)) {
		st := rdmap.WCSuccess
		switch i {
		case 7:
			st = rdmap.WCLocProtErr
		case 8:
			st = rdmap.WCWRFlushErr
		}
		expectWC(t, wc, uint64(i), ops[i], st)
	}
	rdmaptest.WaitDone(t, b.qp, 20*time.Second)
	for k, want := range []byte{'A', 'A', 'B', 0, 0} {
		if got := remote[k*n : (k+1)*n]; !bytes.Equal(got, fill(make([]byte, n), want)) {
			t.Errorf("block %d holds %q..., want %q", k, got[:8], want)
		}
	}
}

// TestRunDeregistered: a list that spans a region deregistered after it
// was posted (before the engine took it): the requests before it
// complete and land, the one from the deregistered region fails with a
// local protection error and sends nothing, the ones after it are
// flushed and send nothing either.
func TestRunDeregistered(t *testing.T) {
	for _, c := range runOptions {
		for _, pos := range []int{0, 3} {
			t.Run(fmt.Sprintf("%s/at=%d", c.name, pos), func(t *testing.T) { testRunDeregistered(t, &c.o, pos) })
		}
	}
}

func testRunDeregistered(t *testing.T, o *rdmaptest.Options, pos int) {
	const n, k = 1024, 6
	a := newSide(t, newDevice(t), rdmap.QPConfig{})
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	src := a.reg(t, fill(make([]byte, n), 's'), rdmap.AccessLocalWrite)
	gone, err := a.pd.RegisterMemory(fill(make([]byte, n), 'g'), rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	remote := make([]byte, k*n)
	rmr := b.reg(t, remote, accAll)
	wrs := make([]rdmap.SendWR, k)
	for i := range wrs {
		from := src
		if i == pos {
			from = gone
		}
		wrs[i] = rdmap.SendWR{ID: uint64(i), Op: rdmap.WRWrite, Signaled: true, SGL: []rdmap.SGE{from.SGE(0, n)},
			Remote: rdmap.Remote{STag: rmr.STag(), Offset: uint64(i * n)}}
	}
	if m, err := a.qp.PostSends(wrs); m != k || err != nil {
		t.Fatalf("PostSends = %d, %v", m, err)
	}
	if err := gone.Deregister(); err != nil {
		t.Fatal(err)
	}
	rdmaptest.Connect(t, a.qp, b.qp, o)
	for i, wc := range pollN(t, a.cq, k) {
		st := rdmap.WCSuccess
		switch {
		case i == pos:
			st = rdmap.WCLocProtErr
		case i > pos:
			st = rdmap.WCWRFlushErr
		}
		expectWC(t, wc, uint64(i), rdmap.WCWrite, st)
	}
	rdmaptest.WaitDone(t, b.qp, 20*time.Second)
	for i := range k {
		want := byte(0)
		if i < pos {
			want = 's'
		}
		if got := remote[i*n : (i+1)*n]; !bytes.Equal(got, fill(make([]byte, n), want)) {
			t.Errorf("block %d holds %q..., want %q", i, got[:8], want)
		}
	}
}
