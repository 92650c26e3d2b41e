package cm_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// The negotiation matrix, end to end: every initiator policy (revision x
// CRC x markers x P2P/RTR offer) against a spread of responder policies,
// and every responder policy against a spread of initiators, each over a
// real TCP connection between two IDs whose fake QPs then exchange FPDUs
// both ways with what was negotiated (RTR first in P2P mode, CRC, markers).
// The full cross product of both halves runs in the mpa package.

type verdict struct {
	status   cm.Status // the initiator's ConnectReply
	request  bool      // the responder's handler saw the request
	term     mpa.TermCode
	crc      bool
	rev      uint8
	iMTx     bool
	iMRx     bool
	p2p      bool
	rtr      mpa.RTR
	enhanced bool
}

// expect is the oracle, from RFC 5044 §7.1, RFC 6581 and siw_cm.c.
func expect(ip, rp mpa.Policy) verdict {
	ip, _ = ip.Resolve()
	rp, _ = rp.Resolve()
	reqC := ip.CRC == mpa.CRCOn || ip.CRC == mpa.CRCRequired
	reqM := ip.Markers == mpa.MarkersRequest
	if (reqM && rp.Markers == mpa.MarkersRefuse) || (reqC && rp.CRC == mpa.CRCStrict) {
		return verdict{status: cm.StatusRejected}
	}
	v := verdict{request: true}
	rev := min(ip.Rev, rp.Rev)
	repC := reqC || rp.CRC == mpa.CRCOn || rp.CRC == mpa.CRCRequired
	repM := rp.Markers == mpa.MarkersRequest
	if (repM && ip.Markers == mpa.MarkersRefuse) || (ip.CRC == mpa.CRCRequired && !repC) ||
		(ip.CRC == mpa.CRCStrict && repC) || (ip.Rev == 2 && rev != 2) {
		v.status = cm.StatusRefused
		return v
	}
	v.crc, v.rev, v.enhanced, v.iMTx, v.iMRx = reqC || repC, rev, rev == 2, repM, reqM
	if v.enhanced && ip.P2P {
		v.p2p = true
		for _, r := range []mpa.RTR{mpa.RTRWrite, mpa.RTRRead, mpa.RTRSend} {
			if ip.RTRs.Has(r) && rp.RTRs.Has(r) {
				v.rtr = r
				break
			}
		}
		if v.rtr == mpa.RTRNone {
			v.status, v.term = cm.StatusProtocolError, mpa.TermNoMatchingRTR
		}
	}
	return v
}

func matrixPolicies(initiator bool) []mpa.Policy {
	var out []mpa.Policy
	for _, rev := range []uint8{1, 2} {
		for _, crc := range []mpa.CRCPolicy{mpa.CRCOff, mpa.CRCOn, mpa.CRCRequired, mpa.CRCStrict} {
			for _, m := range []mpa.MarkerPolicy{mpa.MarkersRefuse, mpa.MarkersAccept, mpa.MarkersRequest} {
				if initiator {
					for _, p2p := range []mpa.RTRSet{0, mpa.DefaultRTRs, mpa.RTRSetRead, mpa.RTRSetSend} {
						out = append(out, mpa.Policy{Rev: rev, CRC: crc, Markers: m, P2P: p2p != 0, RTRs: p2p})
					}
				} else {
					for _, rtrs := range []mpa.RTRSet{0, mpa.RTRSetRead | mpa.RTRSetSend, mpa.RTRSetAll} {
						out = append(out, mpa.Policy{Rev: rev, CRC: crc, Markers: m, RTRs: rtrs})
					}
				}
			}
		}
	}
	return out
}

func TestNegotiationMatrixEndToEnd(t *testing.T) {
	dev := newDev(t)
	ips, rps := matrixPolicies(true), matrixPolicies(false)
	// A spread of the other side for each axis.
	spreadI := []mpa.Policy{{}, {Rev: 1}, {CRC: mpa.CRCRequired, Markers: mpa.MarkersRequest}, {P2P: true, RTRs: mpa.RTRSetAll},
		{P2P: true, RTRs: mpa.RTRSetSend, CRC: mpa.CRCOn}, {CRC: mpa.CRCStrict, Markers: mpa.MarkersAccept}}
	spreadR := []mpa.Policy{{}, {Rev: 1}, {CRC: mpa.CRCStrict}, {CRC: mpa.CRCRequired, Markers: mpa.MarkersRequest},
		{Markers: mpa.MarkersAccept, RTRs: mpa.RTRSetRead}, {RTRs: mpa.RTRSetSend}}
	type job struct{ ip, rp mpa.Policy }
	var jobs []job
	for _, ip := range ips {
		for _, rp := range spreadR {
			jobs = append(jobs, job{ip, rp})
		}
	}
	for _, rp := range rps {
		for _, ip := range spreadI {
			jobs = append(jobs, job{ip, rp})
		}
	}
	if testing.Short() {
		jobs = jobs[:len(jobs)/8]
	}
	// One listener per responder policy.
	type lis struct {
		id  *cm.ID
		rec *recorder
		qps sync.Map // remote addr -> *testutil.FakeQP
	}
	listeners := map[mpa.Policy]*lis{}
	for _, j := range jobs {
		if listeners[j.rp] != nil {
			continue
		}
		L := &lis{rec: newRecorder(t)}
		L.rec.onRequest = func(id *cm.ID, ev *cm.Event) error {
			q := testutil.NewFakeQP()
			L.qps.Store(ev.RemoteAddr.String(), q)
			return id.Accept(cm.ConnParam{QP: q, IRD: 16, ORD: 16, PrivateData: []byte("r")})
		}
		L.id = listenID(t, dev, &cm.Config{MPA: j.rp}, 0, L.rec.handle)
		listeners[j.rp] = L
	}
	work := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				if err := runMatrixCase(t, dev, j.ip, j.rp, listeners[j.rp].id, listeners[j.rp].rec, &listeners[j.rp].qps); err != nil {
					mu.Lock()
					failures++
					if failures <= 20 {
						t.Errorf("%v vs %v: %v", polString(j.ip), polString(j.rp), err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	t.Logf("%d connections, %d failures", len(jobs), failures)
}

func polString(p mpa.Policy) string {
	return fmt.Sprintf("{rev%d crc=%v m=%v p2p=%t rtrs=%v}", p.Rev, p.CRC, p.Markers, p.P2P, p.RTRs)
}

func runMatrixCase(t *testing.T, dev *rdmap.Device, ip, rp mpa.Policy, l *cm.ID, srv *recorder, qps *sync.Map) error {
	want := expect(ip, rp)
	r := newRecorder(t)
	id := cm.NewID(dev, r.handle)
	defer id.Destroy()
	if err := id.SetConfig(&cm.Config{MPA: ip}); err != nil {
		return err
	}
	q := testutil.NewFakeQP()
	q.FirstSend = []byte("ping")
	if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: q, IRD: 4, ORD: 8}); err != nil {
		return err
	}
	rep := r.wait(id, cm.EventConnectReply).ev
	if rep.Status != want.status {
		return fmt.Errorf("status %v (%v), want %v", rep.Status, rep.Err, want.status)
	}
	var srvQP *testutil.FakeQP
	if want.request {
		// The responder accepted; find its QP by our address.
		v, ok := qps.Load(rep.LocalAddr.String())
		if !ok {
			srv.wait(nil, cm.EventConnectRequest) // never the case: Accept ran before the Reply
			return errors.New("responder QP not found")
		}
		srvQP = v.(*testutil.FakeQP)
	}
	switch rep.Status {
	case cm.StatusRejected:
		return nil
	case cm.StatusRefused:
		waitDone(t, srvQP) // the initiator closed; the responder's connection ends
		return nil
	case cm.StatusProtocolError:
		waitDone(t, srvQP)
		var te *testutil.TerminateError
		if !errors.As(srvQP.Err(), &te) || te.Terminate.Layer != wire.LayerLLP || te.Terminate.Code != uint8(want.term) {
			return fmt.Errorf("responder QP ended with %v, want an LLP Terminate %v", srvQP.Err(), want.term)
		}
		return nil
	}
	// The first FPDU the responder gets: the RTR, or the ping. (The
	// responder starts its QP after writing the Reply, so wait for it.)
	select {
	case <-srvQP.First():
	case <-srvQP.Done():
		return fmt.Errorf("responder QP ended before the first FPDU: %v", srvQP.Err())
	}
	ip2, rp2 := q.Params(), srvQP.Params()
	if ip2.CRC != want.crc || rp2.CRC != want.crc || ip2.Rev != want.rev || rp2.Rev != want.rev ||
		ip2.Enhanced != want.enhanced || ip2.MarkersTx != want.iMTx || ip2.MarkersRx != want.iMRx ||
		rp2.MarkersTx != want.iMRx || rp2.MarkersRx != want.iMTx || ip2.P2P != want.p2p || rp2.P2P != want.p2p ||
		ip2.RTR != want.rtr || rp2.RTR != want.rtr {
		return fmt.Errorf("params initiator %+v responder %+v, want %+v", ip2, rp2, want)
	}
	got, _ := srvQP.Received()
	if want.p2p {
		if rtr := testutil.RTROf(got[0]); rtr != want.rtr {
			return fmt.Errorf("first FPDU % x is RTR %v, want %v", got[0], rtr, want.rtr)
		}
	} else if h, err := ddp.Parse(got[0]); err != nil || !bytes.Equal(got[0][h.Len():], []byte("ping")) {
		return fmt.Errorf("first FPDU % x, want the ping", got[0])
	}
	// And back: the responder may send now.
	if err := srvQP.Send([]byte("pong")); err != nil {
		return fmt.Errorf("responder send: %v", err)
	}
	select {
	case <-q.First():
	case <-q.Done():
		return fmt.Errorf("initiator QP ended before the pong: %v", q.Err())
	}
	if err := id.Disconnect(false); err != nil {
		return err
	}
	cl := r.wait(id, cm.EventClose).ev
	waitDone(t, srvQP)
	if cl.Err != nil || srvQP.Err() != nil {
		return fmt.Errorf("close errors %v / %v", cl.Err, srvQP.Err())
	}
	return nil
}
