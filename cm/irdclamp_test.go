package cm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/rdmap"
)

// irdSide is one end of TestIRDClampAdvertised: a device with a QP whose
// IRD is capped by QPConfig.MaxIRD, memory its peer reads, and a sink for
// its own Reads.
type irdSide struct {
	dev      *rdmap.Device
	cq       *rdmap.CQ
	qp       *rdmap.QP
	src, dst *rdmap.MR
}

func newIRDSide(t *testing.T, maxIRD int) *irdSide {
	t.Helper()
	s := &irdSide{dev: newDev(t)}
	t.Cleanup(func() { s.dev.Close() })
	pd := s.dev.AllocPD()
	var err error
	if s.cq, err = s.dev.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxIRD: maxIRD, MaxSendWR: 64}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.qp.Close() })
	if s.src, err = pd.RegisterMemory(make([]byte, 64<<10), rdmap.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if s.dst, err = pd.RegisterMemory(make([]byte, 64<<10), rdmap.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return s
}

// accepted is the responder's end of a connection dialAccepted set up.
type accepted struct {
	c   *cm.Conn
	req *cm.Request
	err error
}

// dialAccepted connects is (the initiator, dialing with ip) to rs (the
// responder, listening on loopback and accepting with rp) through the cm,
// with cfg on both sides; the params' QPs are the sides'. It fails t if
// either end fails. Both Conns are aborted and the listener closed with
// t's cleanup.
func dialAccepted(t *testing.T, ctx context.Context, cfg cm.Config, rs, is *irdSide, rp, ip cm.ConnParam) (*cm.Conn, accepted) {
	t.Helper()
	l, err := cm.Listen(ctx, "127.0.0.1:0", rs.dev, cfgT(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan accepted, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		rp.QP = rs.qp
		c, err := req.Accept(rp)
		ch <- accepted{c, req, err}
	}()
	ip.QP = is.qp
	ic, err := (&cm.Dialer{Config: cfgT(t, cfg)}).Dial(ctx, l.Addr().String(), is.dev, ip)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ic.Abort() })
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { a.c.Abort() })
	return ic, a
}

// readAll posts n Reads of peer's memory at once and waits for them: the
// engine keeps as many outstanding as the handshake settled as its ORD,
// i.e. the whole IRD the peer advertised. Every one must succeed.
func (s *irdSide) readAll(t *testing.T, ctx context.Context, peer *irdSide, n int) {
	t.Helper()
	for i := range n {
		off := (i % 16) * 4096
		err := s.qp.PostSend(rdmap.SendWR{ID: uint64(i), Op: rdmap.WRRead, Signaled: true,
			SGL: []rdmap.SGE{s.dst.SGE(off, 4096)}, Remote: rdmap.Remote{STag: peer.src.STag(), Offset: uint64(off)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	var wc [8]rdmap.WC
	for got := 0; got < n; {
		k := s.cq.Poll(wc[:])
		for _, c := range wc[:k] {
			if c.Status != rdmap.WCSuccess || c.Op != rdmap.WCRead {
				t.Fatalf("Read %d: %+v; QP err %v, peer err %v", c.ID, c, s.qp.Err(), peer.qp.Err())
			}
		}
		got += k
		if k == 0 {
			if err := s.cq.Wait(ctx); err != nil {
				t.Fatalf("%d of %d Reads: %v; QP err %v, peer err %v", got, n, err, s.qp.Err(), peer.qp.Err())
			}
		}
	}
	if s.qp.Err() != nil || peer.qp.Err() != nil {
		t.Fatalf("errors after the Reads: %v, %v", s.qp.Err(), peer.qp.Err())
	}
}

// TestIRDClampAdvertised: when QPConfig.MaxIRD is below the IRD the
// application passes (or the relaxed negotiation would raise it to), the
// MPA Reply (accept) and the MPA Request (connect) advertise the QP's
// limit, and a peer that keeps that many Reads outstanding is served
// instead of terminated.
func TestIRDClampAdvertised(t *testing.T) {
	const limit = 2
	for _, dir := range []string{"accept", "connect"} {
		for _, asked := range []int{limit, 16} {
			t.Run(fmt.Sprintf("%s/ird=%d", dir, asked), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				// The side whose IRD is capped: the responder for "accept",
				// the initiator for "connect".
				rLimit, iLimit := limit, 0
				if dir == "connect" {
					rLimit, iLimit = 0, limit
				}
				rs, is := newIRDSide(t, rLimit), newIRDSide(t, iLimit)
				ic, a := dialAccepted(t, ctx, cm.Config{}, rs, is, cm.ConnParam{IRD: asked, ORD: 16}, cm.ConnParam{IRD: asked, ORD: 16})
				if dir == "accept" {
					// The Reply's IRD is the initiator's ORD.
					if a.c.Params.IRD != limit || ic.Params.ORD != limit {
						t.Fatalf("responder settled IRD %d, Reply advertised %d (initiator ORD), want %d", a.c.Params.IRD, ic.Params.ORD, limit)
					}
					is.readAll(t, ctx, rs, 48)
				} else {
					if a.req.IRD != limit || ic.Params.IRD != limit || a.c.Params.ORD != limit {
						t.Fatalf("Request advertised IRD %d, initiator settled %d, responder ORD %d, want %d",
							a.req.IRD, ic.Params.IRD, a.c.Params.ORD, limit)
					}
					// The responder sends nothing before the initiator's
					// first FPDU (as siw): one Read from the initiator first.
					is.readAll(t, ctx, rs, 1)
					rs.readAll(t, ctx, is, 48)
				}
			})
		}
	}
}
