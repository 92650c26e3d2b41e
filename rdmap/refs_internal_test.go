package rdmap

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/mpa"
)

// TestRefsBalance drives traffic over AllocMemory regions, aborts the
// connection with work in flight, and checks that every memory reference
// the engines took was given back exactly once: the regions end with
// only their registration reference, and the mapping is released after
// the last deregistration.
func TestRefsBalance(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	mk := func() (*PD, *QP, *CQ) {
		pd := dev.AllocPD()
		cq, _ := dev.CreateCQ(4096)
		qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 1024, MaxRecvWR: 1024})
		if err != nil {
			t.Fatal(err)
		}
		return pd, qp, cq
	}
	pda, qa, cqa := mk()
	pdb, qb, cqb := mk()
	mem, err := dev.AllocMemory(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := mem.Bytes()
	src, _ := pda.RegisterMemory(b[:1<<20], AccessLocalWrite)
	sink, _ := pda.RegisterMemory(b[1<<20:2<<20], AccessLocalWrite)
	remote, _ := pdb.RegisterMemory(b[2<<20:3<<20], AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	rbuf, _ := pdb.RegisterMemory(b[3<<20:], AccessLocalWrite)
	mrs := []*MR{src, sink, remote, rbuf}

	ca, cb := net.Pipe()
	if err := qb.Start(cb, &mpa.Params{IRD: 8, ORD: 8, CRC: true}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Start(ca, &mpa.Params{Initiator: true, IRD: 8, ORD: 8, CRC: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		_ = qb.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rbuf.SGE(0, 64<<10)}})
	}
	for i := range 600 {
		var wr SendWR
		switch i % 3 {
		case 0:
			wr = SendWR{Op: WRSend, SGL: []SGE{src.SGE(0, 64<<10)}}
		case 1:
			wr = SendWR{Op: WRWrite, SGL: []SGE{src.SGE(0, 256<<10), src.SGE(512<<10, 1000)}, Remote: Remote{STag: remote.STag()}}
		case 2:
			wr = SendWR{Op: WRRead, SGL: []SGE{sink.SGE(0, 256<<10)}, Remote: Remote{STag: remote.STag(), Offset: 4096}}
		}
		wr.ID, wr.Signaled = uint64(i), true
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	// Let some of it move, then reset.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for cqa.Len() < 50 {
		if err := cqa.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if cqa.Len() < 50 {
			select {
			case <-qa.Done():
				t.Fatalf("QP ended early: %v", qa.Err())
			default:
			}
		}
	}
	qb.Disconnect(true)
	<-qa.Done()
	<-qb.Done()
	qa.Close()
	qb.Close()
	_ = cqb
	for i, mr := range mrs {
		if r := mr.refs.Load(); r != 1 {
			t.Errorf("MR %d holds %d references, want 1", i, r)
		}
	}
	if r := mem.refs.Load(); r != 1+int64(len(mrs)) {
		t.Errorf("memory holds %d references, want %d", r, 1+len(mrs))
	}
	if err := mem.Close(); err != ErrBusy {
		t.Errorf("Close with registered regions: %v", err)
	}
	for _, mr := range mrs {
		mr.Deregister()
	}
	if err := mem.Close(); err != nil {
		t.Error(err)
	}
	if r := mem.refs.Load(); r != 0 {
		t.Errorf("memory holds %d references after everything is released", r)
	}
}
