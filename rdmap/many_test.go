package rdmap_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// TestManyQPs runs 512 QPs (256 connected pairs) on one device at once,
// each pair moving random data with Sends, Writes and Reads in both
// directions, all verified.
func TestManyQPs(t *testing.T) {
	const pairs = 256
	dev := newDevice(t)
	pd := dev.AllocPD()
	type end struct {
		qp *rdmap.QP
		cq *rdmap.CQ
	}
	mk := func() end {
		cq, err := dev.CreateCQ(32)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16})
		if err != nil {
			t.Fatal(err)
		}
		return end{qp, cq}
	}
	ends := make([][2]end, pairs)
	for i := range ends {
		ends[i] = [2]end{mk(), mk()}
		rdmaptest.Connect(t, ends[i][0].qp, ends[i][1].qp, &rdmaptest.Options{CRC: i%2 == 0})
	}
	if s := dev.Stats(); s.QPs != 2*pairs {
		t.Fatalf("device has %d QPs", s.QPs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wait := func(cq *rdmap.CQ) (rdmap.WC, error) {
		var wc [1]rdmap.WC
		for cq.Poll(wc[:]) == 0 {
			if err := cq.Wait(ctx); err != nil {
				return wc[0], err
			}
		}
		if wc[0].Status != rdmap.WCSuccess {
			return wc[0], fmt.Errorf("completion %+v", wc[0])
		}
		return wc[0], nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*pairs)
	for i := range ends {
		for dir := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				me, peer := ends[i][dir], ends[i][1-dir]
				r := rand.New(rand.NewPCG(uint64(i), uint64(dir)))
				n := 1 + r.IntN(20000)
				reg := func(b []byte, acc rdmap.Access) *rdmap.MR {
					mr, err := pd.RegisterMemory(b, acc)
					if err != nil {
						panic(err)
					}
					return mr
				}
				data := randBytes(r, n)
				src := reg(data, 0)
				// Memory the peer's traffic lands in belongs to "peer";
				// this goroutine only checks it after the peer's receive
				// completion tells it the data is there (it owns that
				// completion queue: dir's peer CQ is polled here for the
				// receive only).
				target := reg(make([]byte, n), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
				back := reg(make([]byte, n), rdmap.AccessLocalWrite)
				defer src.Deregister()
				defer target.Deregister()
				defer back.Deregister()
				// Write to the peer's memory, then Read it back.
				if err := me.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, n)}, Remote: rdmap.Remote{STag: target.STag()}}); err != nil {
					errs <- err
					return
				}
				if err := me.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRRead, SGL: []rdmap.SGE{back.SGE(0, n)}, Remote: rdmap.Remote{STag: target.STag()}, Signaled: true}); err != nil {
					errs <- err
					return
				}
				if _, err := wait(me.cq); err != nil {
					errs <- fmt.Errorf("pair %d dir %d: %w", i, dir, err)
					return
				}
				if !bytes.Equal(back.Bytes(), data) {
					errs <- fmt.Errorf("pair %d dir %d: read back differs", i, dir)
				}
				_ = peer
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Sends in both directions on every pair, checked by the receiver.
	for i := range ends {
		for dir := range 2 {
			me, peer := ends[i][dir], ends[i][1-dir]
			rbuf, _ := pd.RegisterMemory(make([]byte, 64), rdmap.AccessLocalWrite)
			msg := fmt.Appendf(nil, "pair %d dir %d", i, dir)
			sbuf, _ := pd.RegisterMemory(msg, 0)
			mustPost(t, peer.qp.PostRecv(rdmap.RecvWR{ID: 9, SGL: []rdmap.SGE{rbuf.SGE(0, 64)}}))
			mustPost(t, me.qp.PostSend(rdmap.SendWR{ID: 10, Op: rdmap.WRSend, SGL: []rdmap.SGE{sbuf.SGE(0, len(msg))}}))
			wc, err := wait(peer.cq)
			if err != nil || !bytes.Equal(rbuf.Bytes()[:wc.ByteLen], msg) {
				t.Fatalf("pair %d dir %d: %v %q", i, dir, err, rbuf.Bytes()[:wc.ByteLen])
			}
			rbuf.Deregister()
			sbuf.Deregister()
		}
	}
}
