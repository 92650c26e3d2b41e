package cm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// The [MS-SMBD] section 6.1 IRD/ORD header (mpa.Policy.SMBD) end to end:
// every combination of the option and the revision on both sides between
// two IDs, the QP limits it carries with real QPs, and the hostile cases
// of the header:
//
//	responder side (a hand-made revision 1 initiator, listener with SMBD)
//	  no private data / 7 bytes             Reply R=1, no event (OnRefused "smbd_header")
//	  IRD 0 / ORD 0                         Reply R=1 with the listener's limits, no event
//	  IRD/ORD 0x20000000/0x01000000 (LE)    accepted: Reply IRD/ORD 128/ORD asked, event 0x20000000/0x01000000
//	initiator side (a gosiw revision 1 Connect with SMBD)
//	  Reply without a header / 7 bytes      Terminate LLP/MPA 0x04, ProtocolError
//	  Reply IRD 0 / ORD 0                   Terminate LLP/MPA 0x04, ProtocolError
//	  Reply ORD 129 over IRD limit 128      Terminate LLP/MPA 0x06, ProtocolError
//	  Reply ORD little-endian (0x01000000)  Terminate LLP/MPA 0x06, ProtocolError
//	  reject with header + "no"             Rejected, private data "no"

func smbdHdr(ird, ord uint32) []byte { return mpa.AppendSMBDHeader(nil, ird, ord) }

// mpaFrame builds a Request or Reply with the flags/revision word and the
// private data given.
func mpaFrame(key []byte, flags string, pd ...[]byte) []byte {
	b := cat(pd...)
	return cat(key, mustHex(flags), []byte{byte(len(b) >> 8), byte(len(b))}, b)
}

// smbdWant is the oracle for one pair: from [MS-SMBD] section 6.1 and the
// rules on mpa.Policy.SMBD, independently of the implementation.
type smbdWant struct {
	status   cm.Status
	request  bool   // the responder's handler sees the ConnectRequest
	reqPD    []byte // the private data it sees
	reqIRD   int    // the IRD and ORD it reports
	reqORD   int
	term     mpa.TermCode // the Terminate the responder's QP gets
	smbd     bool
	rev      uint8
	iIRD     int // settled by the initiator and given to its QP
	iORD     int
	rIRD     int // settled by the responder and given to its QP
	rORD     int
	enhanced bool
}

// The initiator connects with IRD 4, ORD 8, private data "i"; the
// responder accepts with IRD 16, ORD 16, private data "r".
func smbdExpect(iRev uint8, iOn bool, rRev uint8, rOn bool) smbdWant {
	switch {
	case iRev == 2 && rRev == 1:
		return smbdWant{status: cm.StatusRefused, request: true, reqPD: []byte("i"), reqIRD: 4, reqORD: 8}
	case iRev == 2:
		return smbdWant{status: cm.StatusOK, request: true, reqPD: []byte("i"), reqIRD: 4, reqORD: 8,
			rev: 2, enhanced: true, iIRD: 4, iORD: 16, rIRD: 16, rORD: 4}
	case iOn && rOn:
		return smbdWant{status: cm.StatusOK, request: true, reqPD: []byte("i"), reqIRD: 4, reqORD: 8,
			rev: 1, smbd: true, iIRD: 4, iORD: 16, rIRD: 16, rORD: 4}
	case iOn:
		// The responder's ULP gets the header as private data and
		// accepts; its Reply has none: the initiator terminates.
		return smbdWant{status: cm.StatusProtocolError, request: true, reqPD: cat(smbdHdr(4, 8), []byte("i")),
			term: mpa.TermInvalidReqRep}
	case rOn:
		// One byte of private data: no room for a header; the MPA layer
		// rejects.
		return smbdWant{status: cm.StatusRejected}
	}
	return smbdWant{status: cm.StatusOK, request: true, reqPD: []byte("i"), rev: 1, iIRD: 4, iORD: 8, rIRD: 16, rORD: 16}
}

// TestSMBDEndToEnd runs the MS-SMBD option on or off on each side with
// revision 1 or 2 on each side, each pair over a real TCP connection
// between two IDs whose fake QPs then exchange an FPDU each way: the
// ConnectRequest's private data and IRD/ORD, the ConnectReply's, and the
// Params each QP was started with.
func TestSMBDEndToEnd(t *testing.T) {
	dev := newDev(t)
	for _, rRev := range []uint8{1, 2} {
		for _, rOn := range []bool{false, true} {
			srv := newRecorder(t)
			var qps sync.Map
			srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
				q := testutil.NewFakeQP()
				qps.Store(ev.RemoteAddr.String(), q)
				return id.Accept(cm.ConnParam{QP: q, IRD: 16, ORD: 16, PrivateData: []byte("r")})
			}
			l := listenID(t, dev, cfgT(t, cm.Config{MPA: mpa.Policy{Rev: rRev, SMBD: rOn}}), 0, srv.handle)
			for _, iRev := range []uint8{1, 2} {
				for _, iOn := range []bool{false, true} {
					name := fmt.Sprintf("init rev%d smbd=%t / resp rev%d smbd=%t", iRev, iOn, rRev, rOn)
					t.Run(name, func(t *testing.T) {
						runSMBDCase(t, l, srv, &qps, mpa.Policy{Rev: iRev, SMBD: iOn}, smbdExpect(iRev, iOn, rRev, rOn))
					})
				}
			}
		}
	}
}

func runSMBDCase(t *testing.T, l *cm.ID, srv *recorder, qps *sync.Map, ip mpa.Policy, want smbdWant) {
	r := newRecorder(t)
	id := cm.NewID(l.Device(), r.handle)
	defer id.Destroy()
	if err := id.SetConfig(cfgT(t, cm.Config{MPA: ip})); err != nil {
		t.Fatal(err)
	}
	q := testutil.NewFakeQP()
	q.FirstSend = []byte("ping")
	if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: q, IRD: 4, ORD: 8, PrivateData: []byte("i")}); err != nil {
		t.Fatal(err)
	}
	rep := r.wait(id, cm.EventConnectReply).ev
	if rep.Status != want.status {
		t.Fatalf("status %v (%v), want %v", rep.Status, rep.Err, want.status)
	}
	me := rep.LocalAddr.String()
	var req *cm.Event
	srv.mu.Lock()
	for _, x := range srv.all {
		if x.ev.Type == cm.EventConnectRequest && x.ev.RemoteAddr.String() == me {
			req = x.ev
		}
	}
	srv.mu.Unlock()
	if (req != nil) != want.request {
		t.Fatalf("ConnectRequest delivered: %t, want %t", req != nil, want.request)
	}
	if req != nil && (!bytes.Equal(req.PrivateData, want.reqPD) || req.IRD != want.reqIRD || req.ORD != want.reqORD || req.Peer.SMBD != want.smbd) {
		t.Errorf("ConnectRequest private data % x IRD/ORD %d/%d SMBD %t, want % x %d/%d %t",
			req.PrivateData, req.IRD, req.ORD, req.Peer.SMBD, want.reqPD, want.reqIRD, want.reqORD, want.smbd)
	}
	var srvQP *testutil.FakeQP
	if want.request {
		v, ok := qps.Load(me)
		if !ok {
			t.Fatal("responder QP not found")
		}
		srvQP = v.(*testutil.FakeQP)
	}
	switch rep.Status {
	case cm.StatusRejected:
		var rej *mpa.RejectedError
		if !errors.As(rep.Err, &rej) || len(rej.Reply.PrivateData) != 0 {
			t.Errorf("reject %v, want one without private data", rep.Err)
		}
		return
	case cm.StatusRefused:
		waitDone(t, srvQP)
		return
	case cm.StatusProtocolError:
		waitDone(t, srvQP)
		var te *testutil.TerminateError
		if !errors.As(srvQP.Err(), &te) || te.Terminate.Layer != wire.LayerLLP || te.Terminate.Code != uint8(want.term) {
			t.Errorf("responder QP ended with %v, want an LLP Terminate %v", srvQP.Err(), want.term)
		}
		return
	}
	if !bytes.Equal(rep.PrivateData, []byte("r")) || rep.IRD != want.iIRD || rep.ORD != want.iORD {
		t.Errorf("ConnectReply private data %q IRD/ORD %d/%d, want \"r\" %d/%d", rep.PrivateData, rep.IRD, rep.ORD, want.iIRD, want.iORD)
	}
	select {
	case <-srvQP.First():
	case <-srvQP.Done():
		t.Fatalf("responder QP ended before the first FPDU: %v", srvQP.Err())
	}
	ipar, rpar := q.Params(), srvQP.Params()
	if ipar.SMBD != want.smbd || rpar.SMBD != want.smbd || ipar.Rev != want.rev || rpar.Rev != want.rev ||
		ipar.Enhanced != want.enhanced || rpar.Enhanced != want.enhanced ||
		ipar.IRD != want.iIRD || ipar.ORD != want.iORD || rpar.IRD != want.rIRD || rpar.ORD != want.rORD {
		t.Errorf("QP params initiator %+v responder %+v, want %+v", ipar, rpar, want)
	}
	got, _ := srvQP.Received()
	if h, err := ddp.Parse(got[0]); err != nil || !bytes.Equal(got[0][h.Len():], []byte("ping")) {
		t.Errorf("first FPDU % x, want the ping", got[0])
	}
	if err := srvQP.Send([]byte("pong")); err != nil {
		t.Fatalf("responder send: %v", err)
	}
	select {
	case <-q.First():
	case <-q.Done():
		t.Fatalf("initiator QP ended before the pong: %v", q.Err())
	}
	if err := id.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	if cl := r.wait(id, cm.EventClose).ev; cl.Err != nil {
		t.Errorf("close: %v", cl.Err)
	}
	waitDone(t, srvQP)
}

// TestSMBDQPLimits: the IRD/ORD the header negotiates is what the real
// QPs enforce. The side whose QP caps IRD at 2 advertises 2 in its
// header (the Reply for "accept", the Request for "connect"), and the peer
// keeps that many Reads outstanding (48 in all) without a Terminate.
func TestSMBDQPLimits(t *testing.T) {
	const limit = 2
	pol := mpa.Policy{Rev: mpa.Rev1, SMBD: true}
	for _, dir := range []string{"accept", "connect"} {
		t.Run(dir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			rLimit, iLimit := limit, 0
			if dir == "connect" {
				rLimit, iLimit = 0, limit
			}
			rs, is := newIRDSide(t, rLimit), newIRDSide(t, iLimit)
			ic, a := dialAccepted(t, ctx, cm.Config{MPA: pol}, rs, is,
				cm.ConnParam{IRD: 16, ORD: 16, PrivateData: []byte("srv")}, cm.ConnParam{IRD: 16, ORD: 16, PrivateData: []byte("cli")})
			if !ic.Params.SMBD || !a.c.Params.SMBD || ic.Params.Rev != 1 ||
				!bytes.Equal(a.req.PrivateData, []byte("cli")) || !bytes.Equal(ic.PrivateData, []byte("srv")) {
				t.Fatalf("params %+v / %+v, private data %q / %q", ic.Params, a.c.Params, a.req.PrivateData, ic.PrivateData)
			}
			if dir == "accept" {
				if a.c.Params.IRD != limit || ic.Params.ORD != limit {
					t.Fatalf("responder IRD %d, initiator ORD %d, want %d", a.c.Params.IRD, ic.Params.ORD, limit)
				}
				is.readAll(t, ctx, rs, 48)
			} else {
				if a.req.IRD != limit || ic.Params.IRD != limit || a.c.Params.ORD != limit {
					t.Fatalf("Request IRD %d, initiator IRD %d, responder ORD %d, want %d", a.req.IRD, ic.Params.IRD, a.c.Params.ORD, limit)
				}
				is.readAll(t, ctx, rs, 1) // the initiator sends first
				rs.readAll(t, ctx, is, 48)
			}
		})
	}
}

// TestHostileSMBDInitiators: hand-made revision 1 Requests against a
// listener with the header on; each refused one is answered, never
// reaches the handler, and the listener serves the next connection.
func TestHostileSMBDInitiators(t *testing.T) {
	dev := newDev(t)
	srv := newRecorder(t)
	srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 16, ORD: 16})
	}
	type refusal struct{ remote, reason string }
	refused := make(chan refusal, 16)
	cfg := cfgT(t, cm.Config{MPA: mpa.Policy{SMBD: true}, OnRefused: func(remote net.Addr, reason string) {
		refused <- refusal{remote.String(), reason}
	}})
	l := listenID(t, dev, cfg, 0, srv.handle)
	cases := []struct {
		name     string
		req      []byte
		back     []byte
		request  bool
		ird, ord int
	}{
		{name: "no private data", req: mpaFrame(reqKey, "0001"), back: mpaFrame(repKey, "2001")},
		{name: "7 bytes", req: mpaFrame(reqKey, "0001", []byte("1234567")), back: mpaFrame(repKey, "2001")},
		{name: "IRD 0", req: mpaFrame(reqKey, "0001", smbdHdr(0, 1)), back: mpaFrame(repKey, "2001", smbdHdr(128, 128))},
		{name: "ORD 0", req: mpaFrame(reqKey, "0001", smbdHdr(1, 0)), back: mpaFrame(repKey, "2001", smbdHdr(128, 128))},
		{name: "over the limit", req: mpaFrame(reqKey, "0001", mustHex("20000000 01000000")),
			back: mpaFrame(repKey, "0001", smbdHdr(128, 16)), request: true, ird: 0x20000000, ord: 0x01000000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := rawDial(t, l.LocalAddr())
			me := raw.LocalAddr().String()
			_, _ = raw.Write(c.req)
			var back []byte
			if c.request {
				_, back = readFrame(t, raw)
				raw.Close()
			} else {
				back, _ = readToEOF(raw)
			}
			if !bytes.Equal(back, c.back) {
				t.Errorf("peer got % x, want % x", back, c.back)
			}
			// A good SMBD connection through the same listener.
			conn, err := (&cm.Dialer{Config: &cm.Config{MPA: mpa.Policy{Rev: 1, SMBD: true}}}).Dial(context.Background(),
				l.LocalAddr().String(), dev, cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1})
			if err != nil {
				t.Fatalf("good connection after %s: %v", c.name, err)
			}
			if !conn.Params.SMBD || conn.Params.IRD != 1 || conn.Params.ORD != 16 {
				t.Errorf("good connection params %+v", conn.Params)
			}
			conn.Close()
			var child *cm.ID
			srv.mu.Lock()
			for _, x := range srv.all {
				if x.ev.Type == cm.EventConnectRequest && x.ev.RemoteAddr.String() == me {
					child = x.id
					if x.ev.IRD != c.ird || x.ev.ORD != c.ord {
						t.Errorf("request IRD/ORD %d/%d, want %d/%d", x.ev.IRD, x.ev.ORD, c.ird, c.ord)
					}
				}
			}
			srv.mu.Unlock()
			if (child != nil) != c.request {
				t.Fatalf("ConnectRequest reached the handler: %t, want %t", child != nil, c.request)
			}
			if child != nil {
				srv.wait(child, cm.EventClose)
				child.Destroy()
				return
			}
			// OnRefused runs on the refused connection's own handshake
			// goroutine, after its close: wait for it.
			select {
			case r := <-refused:
				if r.remote != me || r.reason != "smbd_header" {
					t.Errorf("OnRefused %+v, want %s smbd_header", r, me)
				}
			case <-time.After(waitLimit):
				t.Fatal("no OnRefused call")
			}
		})
	}
}

// TestHostileSMBDResponders: a gosiw revision 1 Connect with the header
// on against hand-made Replies.
func TestHostileSMBDResponders(t *testing.T) {
	dev := newDev(t)
	term := func(code mpa.TermCode) []byte {
		return mpa.AppendFPDU(nil, cm.AppendLLPTerminate(nil, code, wire.LayoutRFC), nil, false)
	}
	cases := []struct {
		name   string
		reply  []byte
		status cm.Status
		after  []byte
		pd     []byte // the reject's private data
	}{
		{name: "no header", reply: mpaFrame(repKey, "0001"), status: cm.StatusProtocolError, after: term(mpa.TermInvalidReqRep)},
		{name: "7 bytes", reply: mpaFrame(repKey, "0001", []byte("1234567")), status: cm.StatusProtocolError, after: term(mpa.TermInvalidReqRep)},
		{name: "IRD 0", reply: mpaFrame(repKey, "0001", smbdHdr(0, 1)), status: cm.StatusProtocolError, after: term(mpa.TermInvalidReqRep)},
		{name: "ORD 0", reply: mpaFrame(repKey, "0001", smbdHdr(1, 0)), status: cm.StatusProtocolError, after: term(mpa.TermInvalidReqRep)},
		{name: "ORD over the IRD limit", reply: mpaFrame(repKey, "0001", smbdHdr(1, 129)), status: cm.StatusProtocolError, after: term(mpa.TermInsufficientIRD)},
		{name: "ORD little-endian", reply: mpaFrame(repKey, "0001", mustHex("01000000 01000000")), status: cm.StatusProtocolError, after: term(mpa.TermInsufficientIRD)},
		{name: "reject with header", reply: mpaFrame(repKey, "2001", smbdHdr(128, 128), []byte("no")), status: cm.StatusRejected, pd: []byte("no")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr, after := replyingPeer(t, func(tc *net.TCPConn) { _, _ = tc.Write(c.reply) })
			r := newRecorder(t)
			id := cm.NewID(dev, r.handle)
			defer id.Destroy()
			if err := id.SetConfig(cfgT(t, cm.Config{MPA: mpa.Policy{Rev: 1, SMBD: true}})); err != nil {
				t.Fatal(err)
			}
			if err := id.Connect(addr, cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1}); err != nil {
				t.Fatal(err)
			}
			ev := r.wait(id, cm.EventConnectReply).ev
			if ev.Status != c.status || ev.Err == nil {
				t.Errorf("status %v (%v), want %v", ev.Status, ev.Err, c.status)
			}
			if c.status == cm.StatusRejected && !bytes.Equal(ev.PrivateData, c.pd) {
				t.Errorf("reject private data %q, want %q", ev.PrivateData, c.pd)
			}
			if got := <-after; !bytes.Equal(got, c.after) {
				t.Errorf("peer got % x after its reply, want % x", got, c.after)
			}
		})
	}
}

// TestSMBDRejectLimit: ID.Reject counts the [MS-SMBD] header its reject
// carries against MPA.MaxPrivateData, and refuses over it with nothing
// sent, the request still answerable.
func TestSMBDRejectLimit(t *testing.T) {
	dev := newDev(t)
	errs := make(chan error, 2)
	l := listenID(t, dev, cfgT(t, cm.Config{MPA: mpa.Policy{SMBD: true, MaxPrivateData: 16}}), 0, func(id *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventConnectRequest {
			errs <- id.Reject(make([]byte, 9)) // 8 + 9 > 16
			errs <- id.Reject([]byte("12345678"))
		}
		return nil
	})
	raw := rawDial(t, l.LocalAddr())
	_, _ = raw.Write(mpaFrame(reqKey, "0001", smbdHdr(1, 1)))
	if err := <-errs; !errors.Is(err, mpa.ErrPrivateDataLimit) {
		t.Errorf("reject with 9 bytes: %v", err)
	}
	if err := <-errs; err != nil {
		t.Errorf("reject with 8 bytes: %v", err)
	}
	back, _ := readToEOF(raw)
	if want := mpaFrame(repKey, "2001", smbdHdr(128, 128), []byte("12345678")); !bytes.Equal(back, want) {
		t.Errorf("peer got % x, want % x", back, want)
	}
}
