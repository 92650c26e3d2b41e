package mpa

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// smbdRun is what one initiator/responder pair produced with the MS-SMBD
// option on either side.
type smbdRun struct {
	reqWire  []byte // the Request as sent
	repWire  []byte // the Reply as sent
	peerReq  Frame  // the Request as the responder's ULP sees it
	iRes     *Result
	iErr     error
	rParams  *Params
	rErr     error
	received []byte // what the responder read after its Reply (a Terminate)
}

// tap records what passes through a net.Conn's Write.
type tap struct {
	net.Conn
	buf *bytes.Buffer
}

func (t tap) Write(b []byte) (int, error) {
	t.buf.Write(b)
	return t.Conn.Write(b)
}

// runSMBD runs an initiator (IRD 4, ORD 8, private data "hi") with ip
// against a responder with rp that accepts with IRD/ORD 16/16 and private
// data "ok".
func runSMBD(t *testing.T, ip, rp Policy) smbdRun {
	t.Helper()
	ic, rc := net.Pipe()
	defer ic.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var o smbdRun
	var reqBuf, repBuf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rc.Close()
		r, err := ReadRequest(ctx, tap{rc, &repBuf}, &rp)
		if err != nil {
			o.rErr = err
			return
		}
		o.peerReq = r.Request()
		if o.rParams, o.rErr = r.Accept(ctx, 16, 16, []byte("ok")); o.rErr != nil {
			return
		}
		_ = rc.SetReadDeadline(time.Now().Add(5 * time.Second))
		o.received, _ = io.ReadAll(rc)
	}()
	h := &Initiator{Policy: &ip, IRD: 4, ORD: 8, PrivateData: []byte("hi"),
		Terminate: func(b []byte, c TermCode) []byte { return append(b, 't', byte(c)) }}
	o.iRes, o.iErr = h.Handshake(ctx, tap{ic, &reqBuf})
	ic.Close()
	<-done
	o.reqWire, o.repWire = reqBuf.Bytes(), repBuf.Bytes()
	return o
}

func hdr(ird, ord uint32) []byte { return AppendSMBDHeader(nil, ird, ord) }

// TestSMBDMatrix runs the MS-SMBD option on or off on each side with
// revision 1 or 2 on each side (16 pairs) and checks each against rules
// written from [MS-SMBD] section 6.1, RFC 5044 and RFC 6581: the bytes on
// the wire, what each ULP sees as private data, the IRD/ORD negotiated and
// the answer to a mismatch.
func TestSMBDMatrix(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, iRev := range []uint8{1, 2} {
		for _, iOn := range []bool{false, true} {
			for _, rRev := range []uint8{1, 2} {
				for _, rOn := range []bool{false, true} {
					name := fmt.Sprintf("init rev%d smbd=%t / resp rev%d smbd=%t", iRev, iOn, rRev, rOn)
					t.Run(name, func(t *testing.T) {
						o := runSMBD(t, Policy{Rev: iRev, SMBD: iOn}, Policy{Rev: rRev, SMBD: rOn})
						checkSMBD(t, iRev, iOn, rRev, rOn, o)
					})
				}
			}
		}
	}
}

func checkSMBD(t *testing.T, iRev uint8, iOn bool, rRev uint8, rOn bool, o smbdRun) {
	t.Helper()
	key := func(k [KeyLen]byte) []byte { return k[:] }
	switch {
	case iRev == 2 && rRev == 1:
		// RFC 6581: an enhanced Request answered in revision 1 is
		// refused; the option changes nothing.
		if !errors.Is(o.iErr, ErrRevisionRefused) || o.rErr != nil {
			t.Fatalf("initiator %v responder %v, want ErrRevisionRefused", o.iErr, o.rErr)
		}
		if want := cat(key(KeyReply), hexs("00010002"), []byte("ok")); !bytes.Equal(o.repWire, want) {
			t.Errorf("Reply % x, want % x", o.repWire, want)
		}
	case iRev == 2:
		// Revision 2: the RFC 6581 block, never the header.
		if o.iErr != nil || o.rErr != nil {
			t.Fatalf("initiator %v responder %v", o.iErr, o.rErr)
		}
		if want := cat(key(KeyRequest), hexs("10020006 00040008"), []byte("hi")); !bytes.Equal(o.reqWire, want) {
			t.Errorf("Request % x, want % x", o.reqWire, want)
		}
		if want := cat(key(KeyReply), hexs("10020006 00100004"), []byte("ok")); !bytes.Equal(o.repWire, want) {
			t.Errorf("Reply % x, want % x", o.repWire, want)
		}
		checkSettled(t, o, false, 4, 16, 16, 4)
	case !iOn && !rOn:
		// Plain revision 1: no IRD/ORD exchange at all.
		if o.iErr != nil || o.rErr != nil {
			t.Fatalf("initiator %v responder %v", o.iErr, o.rErr)
		}
		if want := cat(key(KeyRequest), hexs("00010002"), []byte("hi")); !bytes.Equal(o.reqWire, want) {
			t.Errorf("Request % x, want % x", o.reqWire, want)
		}
		checkSettled(t, o, false, 4, 8, 16, 16)
	case iOn && rOn:
		// [MS-SMBD] section 6.1 both ways: the initiator's 4/8, the
		// responder's 16/16 negotiated down (ORD to the peer's IRD 4) and
		// up (IRD to the peer's ORD 8: 16 stays).
		if o.iErr != nil || o.rErr != nil {
			t.Fatalf("initiator %v responder %v", o.iErr, o.rErr)
		}
		if want := cat(key(KeyRequest), hexs("0001000a"), hdr(4, 8), []byte("hi")); !bytes.Equal(o.reqWire, want) {
			t.Errorf("Request % x, want % x", o.reqWire, want)
		}
		if want := cat(key(KeyReply), hexs("0001000a"), hdr(16, 4), []byte("ok")); !bytes.Equal(o.repWire, want) {
			t.Errorf("Reply % x, want % x", o.repWire, want)
		}
		if !o.peerReq.SMBD || o.peerReq.SMBDIRD != 4 || o.peerReq.SMBDORD != 8 {
			t.Errorf("responder's view of the Request %+v", o.peerReq)
		}
		if r := o.iRes.Reply; !r.SMBD || r.SMBDIRD != 16 || r.SMBDORD != 4 {
			t.Errorf("initiator's view of the Reply %+v", r)
		}
		checkSettled(t, o, true, 4, 16, 16, 4)
	case iOn:
		// The responder does not know the header: its ULP gets it as
		// private data and accepts; the Reply has no header, so the
		// initiator terminates (invalid Reply).
		if want := cat(hdr(4, 8), []byte("hi")); !bytes.Equal(o.peerReq.PrivateData, want) {
			t.Errorf("responder ULP private data % x, want % x", o.peerReq.PrivateData, want)
		}
		var hs *HandshakeError
		if !errors.As(o.iErr, &hs) || !errors.Is(hs, ErrSMBDShort) || hs.Answer != AnswerTerminate || hs.Code != TermInvalidReqRep {
			t.Fatalf("initiator %v, want a Terminate for ErrSMBDShort", o.iErr)
		}
		if want := AppendFPDU(nil, []byte{'t', byte(TermInvalidReqRep)}, nil, false); !bytes.Equal(o.received, want) {
			t.Errorf("responder read % x after its Reply, want % x", o.received, want)
		}
	default:
		// The initiator sends no header: the responder's MPA layer
		// rejects the Request (2 bytes, no room for one) and its ULP
		// never sees it.
		var hs *HandshakeError
		if !errors.As(o.rErr, &hs) || !errors.Is(hs, ErrSMBDShort) || hs.Answer != AnswerReject {
			t.Fatalf("responder %v, want a reject for ErrSMBDShort", o.rErr)
		}
		var rej *RejectedError
		if !errors.As(o.iErr, &rej) || len(rej.Reply.PrivateData) != 0 {
			t.Fatalf("initiator %v, want *RejectedError without private data", o.iErr)
		}
		if want := cat(key(KeyReply), hexs("20010000")); !bytes.Equal(o.repWire, want) {
			t.Errorf("Reply % x, want % x", o.repWire, want)
		}
	}
}

// checkSettled checks both sides' Params and the private data each ULP
// got.
func checkSettled(t *testing.T, o smbdRun, smbd bool, iIRD, iORD, rIRD, rORD int) {
	t.Helper()
	ip, rp := o.iRes.Params, *o.rParams
	if ip.SMBD != smbd || rp.SMBD != smbd {
		t.Errorf("Params.SMBD %t/%t, want %t", ip.SMBD, rp.SMBD, smbd)
	}
	if ip.IRD != iIRD || ip.ORD != iORD || rp.IRD != rIRD || rp.ORD != rORD {
		t.Errorf("IRD/ORD initiator %d/%d responder %d/%d, want %d/%d %d/%d", ip.IRD, ip.ORD, rp.IRD, rp.ORD, iIRD, iORD, rIRD, rORD)
	}
	if !bytes.Equal(o.peerReq.PrivateData, []byte("hi")) || !bytes.Equal(o.iRes.Reply.PrivateData, []byte("ok")) {
		t.Errorf("ULP private data %q / %q, want \"hi\" / \"ok\"", o.peerReq.PrivateData, o.iRes.Reply.PrivateData)
	}
	if len(o.received) != 0 {
		t.Errorf("initiator sent % x after the Reply", o.received)
	}
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// hexs is mustHex with spaces allowed.
func hexs(s string) []byte { return mustHex(strings.ReplaceAll(s, " ", "")) }

// TestSMBDResponderAnswers is the responder's hostile table for the
// header: each Request with Policy{SMBD: true}, answered by Accept(16, 16)
// or Reject("no") when the MPA layer takes it.
func TestSMBDResponderAnswers(t *testing.T) {
	defer goleak.VerifyNone(t)
	req := func(flags string, pd ...[]byte) []byte {
		b := cat(pd...)
		return cat(KeyRequest[:], hexs(flags), []byte{byte(len(b) >> 8), byte(len(b))}, b)
	}
	rep := func(flags string, pd ...[]byte) []byte {
		b := cat(pd...)
		return cat(KeyReply[:], hexs(flags), []byte{byte(len(b) >> 8), byte(len(b))}, b)
	}
	cases := []struct {
		name     string
		pol      Policy
		req      []byte
		reject   bool // the ULP rejects
		cause    error
		reply    []byte
		ird, ord int // settled (accepts)
	}{
		{name: "no private data", req: req("0001"), cause: ErrSMBDShort, reply: rep("2001")},
		{name: "7 bytes", req: req("0001", []byte("1234567")), cause: ErrSMBDShort, reply: rep("2001")},
		// A revision 1 reject of a Request that carried the header
		// carries one: this side's limits.
		{name: "IRD 0", req: req("0001", hdr(0, 4)), cause: ErrSMBDZero, reply: rep("2001", hdr(128, 128))},
		{name: "ORD 0", req: req("0001", hdr(4, 0), []byte("x")), cause: ErrSMBDZero, reply: rep("2001", hdr(128, 128))},
		{name: "markers", req: req("8001", hdr(4, 4)), cause: ErrMarkersRefused, reply: rep("2001", hdr(128, 128))},
		{name: "limits lowered", pol: Policy{MaxIRD: 32, MaxORD: 8}, req: req("8001", hdr(4, 4)), cause: ErrMarkersRefused, reply: rep("2001", hdr(32, 8))},
		// Over the limits (a little-endian sender's 32/1): clamped to
		// 128, never masked. The responder's ORD falls to 16 (its own),
		// its IRD rises to the peer's ORD, clamped to 128.
		{name: "over the limit", req: req("0001", hexs("20000000 01000000")), reply: rep("0001", hdr(128, 16), []byte("ok")), ird: 128, ord: 16},
		{name: "14-bit limit", pol: Policy{MaxIRD: MaxIRDORD, MaxORD: MaxIRDORD}, req: req("0001", hdr(0xffffffff, 0xffffffff)),
			reply: rep("0001", hdr(MaxIRDORD, 16), []byte("ok")), ird: MaxIRDORD, ord: 16},
		{name: "within", req: req("0001", hdr(2, 1), []byte("hello")), reply: rep("0001", hdr(16, 2), []byte("ok")), ird: 16, ord: 2},
		{name: "ULP reject", req: req("0001", hdr(2, 1)), reject: true, reply: rep("2001", hdr(128, 128), []byte("no"))},
		// Revision 2 ignores the option: the RFC 6581 block, no header.
		{name: "revision 2", req: req("1002", hexs("0002 0001"), hdr(0, 0)), reply: rep("1002", hexs("0010 0002"), []byte("ok")), ird: 16, ord: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pipePair(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			go func() { _, _ = a.Write(c.req) }()
			pol := c.pol
			pol.SMBD = true
			r, err := ReadRequest(ctx, b, &pol)
			switch {
			case c.cause != nil:
				var hs *HandshakeError
				if !errors.As(err, &hs) || hs.Answer != AnswerReject || !errors.Is(err, c.cause) {
					t.Fatalf("got %v, want a reject for %v", err, c.cause)
				}
			case err != nil:
				t.Fatal(err)
			case c.reject:
				if err := r.Reject(ctx, []byte("no")); err != nil {
					t.Fatal(err)
				}
			default:
				p, err := r.Accept(ctx, 16, 16, []byte("ok"))
				if err != nil {
					t.Fatal(err)
				}
				rev2 := c.name == "revision 2"
				if p.SMBD == rev2 || p.IRD != c.ird || p.ORD != c.ord {
					t.Errorf("params SMBD %t IRD %d ORD %d, want %t %d %d", p.SMBD, p.IRD, p.ORD, !rev2, c.ird, c.ord)
				}
				if c.name == "within" && !bytes.Equal(r.Request().PrivateData, []byte("hello")) {
					t.Errorf("ULP private data %q, want the header hidden", r.Request().PrivateData)
				}
				if rev2 && !bytes.Equal(r.Request().PrivateData, hdr(0, 0)) {
					t.Errorf("revision 2 private data % x, want the 8 bytes untouched", r.Request().PrivateData)
				}
			}
			expectPeerGot(t, a, b, c.reply)
		})
	}
}

// TestSMBDInitiatorAnswers is the initiator's hostile table for the
// header: a revision 1 Request with Policy{Rev: 1, SMBD: true}, IRD 1,
// ORD 1, answered with each Reply.
func TestSMBDInitiatorAnswers(t *testing.T) {
	defer goleak.VerifyNone(t)
	term := func(b []byte, c TermCode) []byte { return append(b, 'T', byte(c)) }
	rep := func(flags string, pd ...[]byte) []byte {
		b := cat(pd...)
		return cat(KeyReply[:], hexs(flags), []byte{byte(len(b) >> 8), byte(len(b))}, b)
	}
	cases := []struct {
		name     string
		pol      Policy
		reply    []byte
		answer   Answer
		code     TermCode
		cause    error
		reject   []byte // the ULP's reason in a Reply with R set
		ird, ord int    // settled
		crc      bool   // the Terminate is framed with CRC
	}{
		{name: "no header", reply: rep("0001"), answer: AnswerTerminate, code: TermInvalidReqRep, cause: ErrSMBDShort},
		{name: "short header", reply: rep("0001", []byte("1234567")), answer: AnswerTerminate, code: TermInvalidReqRep, cause: ErrSMBDShort},
		{name: "short header, CRC settled", reply: rep("4001", []byte("12")), answer: AnswerTerminate, code: TermInvalidReqRep, cause: ErrSMBDShort, crc: true},
		{name: "IRD 0", reply: rep("0001", hdr(0, 1)), answer: AnswerTerminate, code: TermInvalidReqRep, cause: ErrSMBDZero},
		{name: "ORD 0", reply: rep("0001", hdr(1, 0)), answer: AnswerTerminate, code: TermInvalidReqRep, cause: ErrSMBDZero},
		{name: "ORD over the limit", reply: rep("0001", hdr(1, 129)), answer: AnswerTerminate, code: TermInsufficientIRD, cause: ErrInsufficientIRD},
		{name: "ORD little-endian", reply: rep("0001", hexs("01000000 01000000")), answer: AnswerTerminate, code: TermInsufficientIRD, cause: ErrInsufficientIRD},
		{name: "ORD within the limit", reply: rep("0001", hdr(1, 128)), ird: 128, ord: 1},
		{name: "IRD over the limit", reply: rep("0001", hdr(0x20000000, 1), []byte("ok")), ird: 1, ord: 128},
		{name: "reject with header", reply: rep("2001", hdr(0, 0), []byte("no")), reject: []byte("no")},
		{name: "reject without header", reply: rep("2001", []byte("no")), reject: []byte("no")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pipePair(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			peer := replyingPeer(b, c.reply)
			pol := c.pol
			pol.Rev, pol.SMBD = Rev1, true
			res, err := (&Initiator{Policy: &pol, IRD: 1, ORD: 1, Terminate: term}).Handshake(ctx, a)
			var want []byte
			switch {
			case c.reject != nil:
				var rej *RejectedError
				if !errors.As(err, &rej) || !bytes.Equal(rej.Reply.PrivateData, c.reject) {
					t.Fatalf("got %v, want *RejectedError with %q", err, c.reject)
				}
			case c.cause != nil:
				var hs *HandshakeError
				if !errors.As(err, &hs) || hs.Answer != c.answer || hs.Code != c.code || !errors.Is(err, c.cause) {
					t.Fatalf("got %v, want answer %v code %v cause %v", err, c.answer, c.code, c.cause)
				}
				want = AppendFPDU(nil, []byte{'T', byte(c.code)}, nil, c.crc)
			case err != nil:
				t.Fatal(err)
			default:
				if p := res.Params; !p.SMBD || p.IRD != c.ird || p.ORD != c.ord {
					t.Errorf("params SMBD %t IRD %d ORD %d, want %d/%d", p.SMBD, p.IRD, p.ORD, c.ird, c.ord)
				}
			}
			a.Close()
			if back := <-peer; !bytes.Equal(back, want) {
				t.Errorf("peer got % x after the Reply, want % x", back, want)
			}
		})
	}
}

// TestSMBDRequestRules: what the initiator sends and refuses locally.
func TestSMBDRequestRules(t *testing.T) {
	// IRD and ORD 0 go out as 1 ([MS-SMBD]: greater than zero).
	f, err := (&Initiator{Policy: &Policy{Rev: 1, SMBD: true}}).Request()
	if err != nil || !f.SMBD || f.SMBDIRD != 1 || f.SMBDORD != 1 || f.Enhanced {
		t.Fatalf("Request %+v, %v", f, err)
	}
	b, _ := AppendFrame(nil, &f)
	if want := cat(KeyRequest[:], hexs("00010008"), hdr(1, 1)); !bytes.Equal(b, want) {
		t.Errorf("Request % x, want % x", b, want)
	}
	// Revision 2 ignores the option.
	if f, _ := (&Initiator{Policy: &Policy{SMBD: true}, IRD: 3}).Request(); f.SMBD || !f.Enhanced || f.IRD != 3 {
		t.Errorf("revision 2 Request %+v", f)
	}
	// The header counts against the private data limit.
	pol := &Policy{Rev: 1, SMBD: true, MaxPrivateData: 16}
	if _, err := (&Initiator{Policy: pol, PrivateData: make([]byte, 9)}).Request(); !errors.Is(err, ErrPrivateDataLimit) {
		t.Errorf("9 bytes into 16-8: %v", err)
	}
	if _, err := (&Initiator{Policy: pol, PrivateData: make([]byte, 8)}).Request(); err != nil {
		t.Errorf("8 bytes into 16-8: %v", err)
	}
	if _, err := (&Policy{SMBD: true, MaxPrivateData: 7}).Resolve(); err == nil {
		t.Error("a private data limit of 7 resolved with the header on")
	}
	if n := pol.MaxULPPrivateDataIn(&Frame{SMBD: true}); n != 8 {
		t.Errorf("MaxULPPrivateDataIn = %d, want 8", n)
	}
}

// TestSMBDResponderLimits: the responder's private data limit and its QP
// limits (SetLimits) with the header.
func TestSMBDResponderLimits(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, b := pipePair(t, true)
	go func() { _, _ = a.Write(cat(KeyRequest[:], hexs("00010008"), hdr(64, 64))) }()
	ctx := context.Background()
	r, err := ReadRequest(ctx, b, &Policy{SMBD: true, MaxPrivateData: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Negotiate(1, 1, make([]byte, 9)); !errors.Is(err, ErrPrivateDataLimit) {
		t.Errorf("9 bytes into 16-8: %v", err)
	}
	if rej := r.RejectFrame(nil); !rej.SMBD {
		t.Errorf("reject frame without the header: %+v", rej)
	}
	if err := r.Reject(ctx, make([]byte, 9)); !errors.Is(err, ErrPrivateDataLimit) {
		t.Errorf("reject 9 bytes: %v", err)
	}
	// The peer's ORD 64 raises this side's IRD, but not past the QP's 2;
	// its IRD 64 leaves this side's ORD 0, which goes out (and is settled)
	// as 1.
	r.SetLimits(2, 4)
	rep, p, err := r.Negotiate(1, 0, nil)
	if err != nil || !rep.SMBD || rep.SMBDIRD != 2 || rep.SMBDORD != 1 || p.IRD != 2 || p.ORD != 1 || !p.SMBD {
		t.Fatalf("Reply %+v, params %+v, %v", rep, p, err)
	}
}

// FuzzSMBDHandshake feeds the input as the peer's Request to a responder,
// or as the peer's Reply to an initiator, both with Policy.SMBD. Whatever
// comes, the handshake ends with an answer; a taken frame has its header
// hidden from the ULP and IRD/ORD settled within the limits.
func FuzzSMBDHandshake(f *testing.F) {
	for _, pd := range [][]byte{nil, []byte("1234567"), hdr(4, 8), cat(hdr(4, 8), []byte("hi")), hdr(0, 1),
		hdr(1, 0), hexs("20000000 01000000"), cat(hdr(0xffffffff, 129), []byte("x"))} {
		for _, flags := range []string{"0001", "8001", "4001", "2001", "1002"} {
			f.Add(cat(KeyRequest[:], hexs(flags), []byte{0, byte(len(pd))}, pd), false)
			f.Add(cat(KeyReply[:], hexs(flags), []byte{0, byte(len(pd))}, pd), true)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, asReply bool) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		peerDone := make(chan struct{})
		go func() {
			defer close(peerDone)
			if asReply {
				buf := make([]byte, 1024)
				if _, err := b.Read(buf); err != nil {
					return
				}
			}
			_, _ = b.Write(data)
			b.Close()
		}()
		total, _ := FrameLen(data)
		if !asReply {
			r, err := ReadRequest(ctx, a, &Policy{SMBD: true})
			if err != nil {
				var hs *HandshakeError
				if !errors.As(err, &hs) {
					t.Fatalf("error %v is not a *HandshakeError", err)
				}
				a.Close()
				<-peerDone
				return
			}
			req := r.Request()
			if req.SMBD != (req.Rev == Rev1) {
				t.Fatalf("Request %+v: SMBD in revision %d", req, req.Rev)
			}
			if req.SMBD {
				if req.SMBDIRD == 0 || req.SMBDORD == 0 || !bytes.Equal(req.PrivateData, data[HeaderLen+SMBDHeaderLen:total]) {
					t.Fatalf("Request %+v from % x", req, data)
				}
			}
			rep, p, err := r.Negotiate(16, 16, nil)
			if err != nil {
				t.Fatal(err)
			}
			if req.SMBD && (!rep.SMBD || int(rep.SMBDIRD) != p.IRD || int(rep.SMBDORD) != p.ORD ||
				p.IRD < 1 || p.IRD > DefaultMaxIRDORD || p.ORD < 1 || p.ORD > 16) {
				t.Fatalf("Reply %+v params %+v", rep, p)
			}
			a.Close()
			<-peerDone
			return
		}
		res, err := (&Initiator{Policy: &Policy{Rev: 1, SMBD: true}, IRD: 4, ORD: 4}).Handshake(ctx, a)
		a.Close()
		<-peerDone
		var hs *HandshakeError
		var rej *RejectedError
		switch {
		case errors.As(err, &rej):
			return
		case errors.As(err, &hs):
			return
		case err != nil:
			t.Fatalf("error %v is neither *HandshakeError nor *RejectedError", err)
		}
		p, r := res.Params, res.Reply
		if !p.SMBD || !r.SMBD || r.SMBDIRD == 0 || r.SMBDORD == 0 || p.IRD < 1 || p.IRD > DefaultMaxIRDORD || p.ORD < 1 ||
			p.ORD > DefaultMaxIRDORD || !bytes.Equal(r.PrivateData, data[total-len(r.PrivateData):total]) || r.Length() != total {
			t.Fatalf("settled %+v from Reply %+v (% x)", p, r, data)
		}
	})
}

// TestSMBDCodec pins the header's layout ([MS-SMBD] section 6.1: IRD, then
// ORD, 4 bytes each, big-endian) and the splitting rules.
func TestSMBDCodec(t *testing.T) {
	if got, want := AppendSMBDHeader([]byte{0xaa}, 0x01020304, 0x10), hexs("aa 01020304 00000010"); !bytes.Equal(got, want) {
		t.Errorf("header % x, want % x", got, want)
	}
	if ird, ord, err := ParseSMBDHeader(hexs("00000020 00000001 ff")); ird != 32 || ord != 1 || err != nil {
		t.Errorf("parse: %d %d %v", ird, ord, err)
	}
	if _, _, err := ParseSMBDHeader(hexs("00000020 000000")); !errors.Is(err, ErrSMBDShort) {
		t.Errorf("7 bytes: %v", err)
	}
	if ird, ord, err := ParseSMBDHeader(hexs("00000000 00000005")); ird != 0 || ord != 5 || !errors.Is(err, ErrSMBDZero) {
		t.Errorf("IRD 0: %d %d %v", ird, ord, err)
	}
	// Short: the frame is left alone.
	f := Frame{Rev: 1, PrivateData: []byte("short")}
	if err := f.SplitSMBD(); !errors.Is(err, ErrSMBDShort) || f.SMBD || string(f.PrivateData) != "short" {
		t.Errorf("short split: %v %+v", err, f)
	}
	// Zero: split all the same, the error says why it is bad.
	f = Frame{Rev: 1, PrivateData: cat(hdr(7, 0), []byte("ulp"))}
	if err := f.SplitSMBD(); !errors.Is(err, ErrSMBDZero) || !f.SMBD || f.SMBDIRD != 7 || string(f.PrivateData) != "ulp" {
		t.Errorf("zero split: %v %+v", err, f)
	}
	// A good header; splitting again changes nothing; the frame encodes
	// back to the same bytes.
	wire := cat(KeyReply[:], hexs("0001 000b"), hdr(0x20000000, 3), []byte("ulp"))
	var g Frame
	if _, err := ParseFrame(wire, &g); err != nil || g.SMBD {
		t.Fatalf("ParseFrame: %v %+v", err, g)
	}
	if err := g.SplitSMBD(); err != nil || g.SplitSMBD() != nil || string(g.PrivateData) != "ulp" {
		t.Fatalf("split: %v %+v", err, g)
	}
	if ird, ord := g.AdvertisedIRDORD(); ird != 0x20000000 || ord != 3 {
		t.Errorf("AdvertisedIRDORD %d %d", ird, ord)
	}
	if out, err := AppendFrame(nil, &g); err != nil || !bytes.Equal(out, wire) || g.Length() != len(wire) {
		t.Errorf("re-encoded % x (%v), length %d, want % x", out, err, g.Length(), wire)
	}
	if ird, ord := (&Frame{Enhanced: true, IRD: 5, ORD: 6}).AdvertisedIRDORD(); ird != 5 || ord != 6 {
		t.Errorf("RFC 6581 AdvertisedIRDORD %d %d", ird, ord)
	}
	if ird, ord := (&Frame{Rev: 1}).AdvertisedIRDORD(); ird != 0 || ord != 0 {
		t.Errorf("plain revision 1 AdvertisedIRDORD %d %d", ird, ord)
	}
}
