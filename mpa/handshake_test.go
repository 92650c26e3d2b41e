package mpa

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// pipeTimers lets goleak ignore the goroutine the runtime starts when a
// net.Pipe deadline fires (time.AfterFunc running pipeDeadline's close of
// its channel): it belongs to the standard library, holds nothing of the
// test's, and on a loaded GOMAXPROCS=1 run can still be waiting for its
// turn when the check runs.
var pipeTimers = goleak.IgnoreTopFunction("net.(*pipeDeadline).set.func1")

// The mpa package's test binary is shared with the wire-code tests, so the
// handshake tests check for leaked goroutines one by one instead of with a
// TestMain of their own.

// expectPeerGot closes local and checks that peer, the other end, read
// exactly want before the end of the stream.
func expectPeerGot(t *testing.T, peer, local net.Conn, want []byte) {
	t.Helper()
	local.Close()
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	back, _ := io.ReadAll(peer)
	if !bytes.Equal(back, want) {
		t.Errorf("peer got % x, want % x", back, want)
	}
}

// replyingPeer plays the responder on b (a loopback TCP end): it reads
// the Request (one read), writes reply, half-closes, and sends on the
// channel all the initiator sent after it.
func replyingPeer(b net.Conn, reply []byte) <-chan []byte {
	peer := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 600)
		_, _ = b.Read(buf)
		_, _ = b.Write(reply)
		_ = b.(*net.TCPConn).CloseWrite()
		_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
		back, _ := io.ReadAll(b)
		peer <- back
	}()
	return peer
}

// pipePair returns the two ends of a connection: a net.Pipe or loopback TCP.
func pipePair(t *testing.T, tcp bool) (a, b net.Conn) {
	t.Helper()
	if !tcp {
		a, b = net.Pipe()
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			acc <- c
		}()
		a, err = net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b = <-acc
		if b == nil {
			t.Fatal("accept failed")
		}
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// outcome is what one run of both halves produced.
type outcome struct {
	iParams, rParams *Params
	iErr, rErr       error
	terminate        []byte // bytes the responder saw after its Reply
}

// runPair runs an initiator with ip and a responder with rp that accepts
// with ird/ord 16/16 and private data "ok".
func runPair(t *testing.T, tcp bool, ip, rp *Policy, ird, ord int) outcome {
	t.Helper()
	ic, rc := pipePair(t, tcp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var o outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err := ReadRequest(ctx, rc, rp)
		if err != nil {
			o.rErr = err
			rc.Close()
			return
		}
		o.rParams, o.rErr = r.Accept(ctx, 16, 16, []byte("ok"))
		if o.rErr != nil {
			rc.Close()
			return
		}
		// Drain what the initiator sends next (a Terminate, or nothing).
		_ = rc.SetReadDeadline(time.Now().Add(5 * time.Second))
		o.terminate, _ = io.ReadAll(rc)
	}()
	h := &Initiator{Policy: ip, IRD: ird, ORD: ord, PrivateData: []byte("hi"),
		Terminate: func(b []byte, c TermCode) []byte { return append(b, 't', byte(c)) }}
	res, err := h.Handshake(ctx, ic)
	o.iErr = err
	if res != nil {
		o.iParams = &res.Params
	}
	ic.Close()
	<-done
	return o
}

// expectation is the oracle's verdict, written from RFC 5044 §7.1,
// RFC 6581 and siw_cm.c independently of the implementation.
type expectation struct {
	rejected bool  // responder sends R
	rCause   error // responder's cause when rejected
	iCause   error // initiator fails with this cause (after an accepting Reply)
	term     TermCode
	crc      bool
	rev      uint8
	enhanced bool
	iMTx     bool // initiator inserts markers
	iMRx     bool // initiator receives markers
	p2p      bool
	rtr      RTR
}

func pref(s RTRSet) RTR {
	for _, r := range []RTR{RTRWrite, RTRRead, RTRSend} {
		if s.Has(r) {
			return r
		}
	}
	return RTRNone
}

func oracle(ip, rp Policy) expectation {
	var e expectation
	if ip.Rev == 0 {
		ip.Rev = 2
	}
	if rp.Rev == 0 {
		rp.Rev = 2
	}
	if ip.RTRs == 0 {
		ip.RTRs = RTRSetWrite | RTRSetRead
	}
	if rp.RTRs == 0 {
		rp.RTRs = RTRSetWrite | RTRSetRead
	}
	reqC := ip.CRC == CRCOn || ip.CRC == CRCRequired
	reqM := ip.Markers == MarkersRequest
	if reqM && rp.Markers == MarkersRefuse {
		e.rejected, e.rCause = true, ErrMarkersRefused
		return e
	}
	if reqC && rp.CRC == CRCStrict {
		e.rejected, e.rCause = true, ErrCRCRefused
		return e
	}
	rev := min(ip.Rev, rp.Rev)
	enh := ip.Rev == 2 && rev == 2
	repC := reqC || rp.CRC == CRCOn || rp.CRC == CRCRequired
	repM := rp.Markers == MarkersRequest
	switch {
	case repM && ip.Markers == MarkersRefuse:
		e.iCause = ErrMarkersRefused
	case ip.CRC == CRCRequired && !repC, ip.CRC == CRCStrict && repC:
		e.iCause = ErrCRCRefused
	case ip.Rev == 2 && rev != 2:
		e.iCause = ErrRevisionRefused
	}
	if e.iCause != nil {
		return e
	}
	e.crc, e.rev, e.enhanced = reqC || repC, rev, enh
	e.iMTx, e.iMRx = repM, reqM
	if enh && ip.P2P {
		e.p2p = true
		chosen := pref(ip.RTRs & rp.RTRs)
		if chosen == RTRNone {
			e.iCause, e.term = ErrNoMatchingRTR, TermNoMatchingRTR
			return e
		}
		e.rtr = chosen
	}
	return e
}

func policies(initiator bool) []Policy {
	var out []Policy
	rtrOpts := []RTRSet{0, RTRSetWrite, RTRSetRead, RTRSetSend, RTRSetAll}
	for _, rev := range []uint8{1, 2} {
		for _, crc := range []CRCPolicy{CRCOff, CRCOn, CRCRequired, CRCStrict} {
			for _, m := range []MarkerPolicy{MarkersRefuse, MarkersAccept, MarkersRequest} {
				if initiator {
					out = append(out, Policy{Rev: rev, CRC: crc, Markers: m})
				}
				for _, rtrs := range rtrOpts {
					out = append(out, Policy{Rev: rev, CRC: crc, Markers: m, P2P: initiator, RTRs: rtrs})
				}
			}
		}
	}
	return out
}

func polName(p Policy) string {
	return fmt.Sprintf("rev%d/crc=%v/m=%v/p2p=%t/rtr=%v", p.Rev, p.CRC, p.Markers, p.P2P, p.RTRs)
}

// TestNegotiationMatrix runs every initiator policy against every
// responder policy (revision x CRC x markers x P2P/RTR on both sides) and
// checks both halves against the oracle and against each other.
func TestNegotiationMatrix(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	ips, rps := policies(true), policies(false)
	n := 0
	for _, ip := range ips {
		for _, rp := range rps {
			n++
			ip, rp := ip, rp
			name := polName(ip) + " vs " + polName(rp)
			o := runPair(t, false, &ip, &rp, 4, 8)
			e := oracle(ip, rp)
			checkOutcome(t, name, o, e)
			if t.Failed() {
				return
			}
		}
	}
	t.Logf("%d policy pairs", n)
}

func checkOutcome(t *testing.T, name string, o outcome, e expectation) {
	t.Helper()
	if e.rejected {
		var hs *HandshakeError
		if !errors.As(o.rErr, &hs) || hs.Answer != AnswerReject || !errors.Is(hs, e.rCause) {
			t.Errorf("%s: responder error %v, want reject with %v", name, o.rErr, e.rCause)
		}
		var rej *RejectedError
		if !errors.As(o.iErr, &rej) || rej.Reply.Markers || !rej.Reply.Reject {
			t.Errorf("%s: initiator error %v, want *RejectedError", name, o.iErr)
		}
		return
	}
	if o.rErr != nil {
		t.Errorf("%s: responder: %v", name, o.rErr)
		return
	}
	if e.iCause != nil {
		var hs *HandshakeError
		if !errors.As(o.iErr, &hs) || !errors.Is(hs, e.iCause) {
			t.Errorf("%s: initiator error %v, want %v", name, o.iErr, e.iCause)
			return
		}
		if e.term != 0 {
			// Framed with the CRC and markers the Reply settled.
			fr := Framer{CRC: e.crc, Markers: e.iMTx}
			want := fr.AppendFPDU(nil, []byte{'t', byte(e.term)}, nil)
			if hs.Answer != AnswerTerminate || hs.Code != e.term || !bytes.Equal(o.terminate, want) {
				t.Errorf("%s: answer %v code %v, peer saw %q; want terminate %v", name, hs.Answer, hs.Code, o.terminate, e.term)
			}
		} else if hs.Answer != AnswerClose || len(o.terminate) != 0 {
			t.Errorf("%s: answer %v, peer saw %q; want close", name, hs.Answer, o.terminate)
		}
		return
	}
	if o.iErr != nil {
		t.Errorf("%s: initiator: %v", name, o.iErr)
		return
	}
	ipar, rpar := o.iParams, o.rParams
	if !ipar.Initiator || rpar.Initiator {
		t.Errorf("%s: Initiator flags %t/%t", name, ipar.Initiator, rpar.Initiator)
	}
	if ipar.CRC != e.crc || rpar.CRC != e.crc {
		t.Errorf("%s: CRC %t/%t want %t", name, ipar.CRC, rpar.CRC, e.crc)
	}
	if ipar.Rev != e.rev || rpar.Rev != e.rev || ipar.Enhanced != e.enhanced || rpar.Enhanced != e.enhanced {
		t.Errorf("%s: rev %d/%d enhanced %t/%t want %d %t", name, ipar.Rev, rpar.Rev, ipar.Enhanced, rpar.Enhanced, e.rev, e.enhanced)
	}
	if ipar.MarkersTx != e.iMTx || ipar.MarkersRx != e.iMRx || rpar.MarkersTx != e.iMRx || rpar.MarkersRx != e.iMTx {
		t.Errorf("%s: markers init tx/rx %t/%t resp %t/%t, want init %t/%t", name,
			ipar.MarkersTx, ipar.MarkersRx, rpar.MarkersTx, rpar.MarkersRx, e.iMTx, e.iMRx)
	}
	if ipar.P2P != e.p2p || rpar.P2P != e.p2p || ipar.RTR != e.rtr || rpar.RTR != e.rtr {
		t.Errorf("%s: p2p %t/%t rtr %v/%v want %t %v", name, ipar.P2P, rpar.P2P, ipar.RTR, rpar.RTR, e.p2p, e.rtr)
	}
	if e.enhanced {
		// The initiator asked IRD 4 ORD 8 (ORD 8 >= 1 in P2P); the responder
		// asked 16/16: its ORD falls to 4, its IRD stays 16 (>= 8).
		if rpar.IRD != 16 || rpar.ORD != 4 || ipar.IRD != rpar.ORD || ipar.ORD != rpar.IRD {
			t.Errorf("%s: IRD/ORD init %d/%d resp %d/%d", name, ipar.IRD, ipar.ORD, rpar.IRD, rpar.ORD)
		}
	} else if ipar.IRD != 4 || ipar.ORD != 8 || rpar.IRD != 16 || rpar.ORD != 16 {
		t.Errorf("%s: IRD/ORD without negotiation init %d/%d resp %d/%d", name, ipar.IRD, ipar.ORD, rpar.IRD, rpar.ORD)
	}
	if ipar.FirstSendDelay < DefaultFirstSendDelay || ipar.FirstSendDelay > MaxFirstSendDelay || rpar.FirstSendDelay != 0 {
		t.Errorf("%s: FirstSendDelay %v/%v", name, ipar.FirstSendDelay, rpar.FirstSendDelay)
	}
	if len(o.terminate) != 0 {
		t.Errorf("%s: initiator sent %q after the Reply", name, o.terminate)
	}
}

// TestPairOverTCP runs a few pairs over loopback TCP as well as net.Pipe.
func TestPairOverTCP(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	cases := [][2]Policy{
		{{}, {}},
		{{CRC: CRCRequired, P2P: true}, {RTRs: RTRSetRead}},
		{{Rev: 1, Markers: MarkersRequest}, {Markers: MarkersAccept}},
		{{Markers: MarkersRequest}, {}},
		{{P2P: true, RTRs: RTRSetSend}, {}},
	}
	for _, c := range cases {
		ip, rp := c[0], c[1]
		o := runPair(t, true, &ip, &rp, 4, 8)
		checkOutcome(t, polName(ip)+" vs "+polName(rp)+" over TCP", o, oracle(ip, rp))
	}
}

// Linux siw's bytes, as captured in the interop lab (the frames of
// cm/testdata, see its README; reproduced here so the package tests stand
// alone).
var (
	siwRequest       = mustHex("4d504120494420526571204672616d65" + "10020004" + "00010001")
	siwReplyV2       = mustHex("4d504120494420526570204672616d65" + "10020004" + "00010001")
	siwReplyV1       = mustHex("4d504120494420526570204672616d65" + "00010000")
	siwReplyV2CRC    = mustHex("4d504120494420526570204672616d65" + "50020004" + "00010001")
	siwReplyMarkers2 = mustHex("4d504120494420526570204672616d65" + "30020004" + "00000000")
	siwReplyMarkers1 = mustHex("4d504120494420526570204672616d65" + "20010000")
	siwReplyNoH      = mustHex("4d504120494420526570204672616d65" + "00020000")
	siwReplyP2P      = mustHex("4d504120494420526570204672616d65" + "10020004" + "80108010")
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// TestSiwRequestAnswered feeds Linux siw's Request (rping -c) to the
// responder and checks that the Reply is byte for byte what siw itself
// answers with rping's 1/1.
func TestSiwRequestAnswered(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	for _, tcp := range []bool{false, true} {
		a, b := pipePair(t, tcp)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		go func() { _, _ = a.Write(siwRequest) }()
		r, err := ReadRequest(ctx, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		req := r.Request()
		if req.Rev != 2 || !req.Enhanced || req.IRD != 1 || req.ORD != 1 || req.CRC || req.Markers || req.P2P || len(req.PrivateData) != 0 {
			t.Fatalf("request decoded as %+v", req)
		}
		got := make(chan []byte, 1)
		go func() {
			buf := make([]byte, 64)
			n, _ := io.ReadAtLeast(a, buf, len(siwReplyV2))
			got <- buf[:n]
		}()
		p, err := r.Accept(ctx, 1, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if g := <-got; !bytes.Equal(g, siwReplyV2) {
			t.Errorf("reply % x, siw answers % x", g, siwReplyV2)
		}
		if p.IRD != 1 || p.ORD != 1 || p.CRC || p.P2P || p.Initiator {
			t.Errorf("params %+v", p)
		}
		cancel()
	}
}

// TestSiwRepliesTaken feeds each Reply Linux siw gave in the lab to the
// initiator that sent the matching Request.
func TestSiwRepliesTaken(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	type result struct {
		rejected bool
		params   Params
	}
	cases := []struct {
		name  string
		pol   Policy
		ird   int
		ord   int
		reply []byte
		want  result
	}{
		{"v2", Policy{}, 1, 1, siwReplyV2, result{params: Params{Rev: 2, Enhanced: true, IRD: 1, ORD: 1}}},
		{"v1", Policy{Rev: 1}, 1, 1, siwReplyV1, result{params: Params{Rev: 1, IRD: 1, ORD: 1}}},
		{"v2-crc", Policy{CRC: CRCOn}, 1, 1, siwReplyV2CRC, result{params: Params{Rev: 2, Enhanced: true, CRC: true, IRD: 1, ORD: 1}}},
		{"v2-crc-required", Policy{CRC: CRCRequired}, 1, 1, siwReplyV2CRC, result{params: Params{Rev: 2, Enhanced: true, CRC: true, IRD: 1, ORD: 1}}},
		// RFC 5044: CRC is used when either side asks, even if the Reply
		// does not echo C (CRCOn takes such a Reply; CRCRequired refuses it).
		{"v2-crc-on-reply-without-C", Policy{CRC: CRCOn}, 1, 1, siwReplyV2, result{params: Params{Rev: 2, Enhanced: true, CRC: true, IRD: 1, ORD: 1}}},
		// A Reply that sets C unasked turns CRC on.
		{"v2-crc-unasked", Policy{}, 1, 1, siwReplyV2CRC, result{params: Params{Rev: 2, Enhanced: true, CRC: true, IRD: 1, ORD: 1}}},
		{"v2-markers", Policy{Markers: MarkersRequest}, 1, 1, siwReplyMarkers2, result{rejected: true}},
		{"v1-markers", Policy{Rev: 1, Markers: MarkersRequest}, 1, 1, siwReplyMarkers1, result{rejected: true}},
		{"v2-p2p", Policy{P2P: true, RTRs: RTRSetAll}, 16, 16, siwReplyP2P, result{params: Params{Rev: 2, Enhanced: true, IRD: 16, ORD: 16, P2P: true, RTR: RTRWrite}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pipePair(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			go func() {
				buf := make([]byte, 600)
				if _, err := b.Read(buf); err == nil {
					_, _ = b.Write(c.reply)
				}
			}()
			h := &Initiator{Policy: &c.pol, IRD: c.ird, ORD: c.ord}
			res, err := h.Handshake(ctx, a)
			if c.want.rejected {
				var rej *RejectedError
				if !errors.As(err, &rej) {
					t.Fatalf("got %v, want *RejectedError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := c.want.params
			want.Initiator = true
			if d := res.Params.FirstSendDelay; d < DefaultFirstSendDelay || d > MaxFirstSendDelay {
				t.Errorf("FirstSendDelay %v, want within [%v, %v]", d, DefaultFirstSendDelay, MaxFirstSendDelay)
			}
			want.FirstSendDelay = res.Params.FirstSendDelay
			if !reflect.DeepEqual(res.Params, want) {
				t.Errorf("params %+v, want %+v", res.Params, want)
			}
		})
	}
	// A revision 2 enhanced Request answered without H is refused, as siw
	// does ("the responder MUST reply with MPA version 2").
	a, b := pipePair(t, true)
	go func() {
		buf := make([]byte, 600)
		if _, err := b.Read(buf); err == nil {
			_, _ = b.Write(siwReplyNoH)
		}
	}()
	_, err := (&Initiator{IRD: 1, ORD: 1}).Handshake(context.Background(), a)
	if !errors.Is(err, ErrRevisionRefused) {
		t.Errorf("rev 2 without H: %v, want ErrRevisionRefused", err)
	}
}

func reqBytes(f Frame) []byte {
	b, err := AppendFrame(nil, &f)
	if err != nil {
		panic(err)
	}
	return b
}

// TestResponderAnswers checks each malformed or refused Request's answer.
func TestResponderAnswers(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	big := make([]byte, 300)
	cases := []struct {
		name   string
		pol    Policy
		req    []byte
		answer Answer
		cause  error
		reply  []byte // expected answer bytes (nil: nothing)
	}{
		{"garbage", Policy{}, []byte(strings.Repeat("GET / HTTP/1.1\r\n", 2)), AnswerClose, ErrBadKey, nil},
		{"reply key", Policy{}, siwReplyV2, AnswerClose, ErrBadKey, nil},
		{"rev 3", Policy{}, reqBytes(Frame{Rev: 3}), AnswerClose, ErrUnknownRevision, nil},
		{"rev 0", Policy{}, reqBytes(Frame{Rev: 0}), AnswerClose, ErrUnknownRevision, nil},
		{"PD_Length 513", Policy{}, append(mustHex("4d504120494420526571204672616d65"+"00010201"), make([]byte, 513)...), AnswerClose, ErrPDTooLong, nil},
		{"PD_Length over policy", Policy{MaxPrivateData: SiwMaxPrivateData}, reqBytes(Frame{Rev: 2, Enhanced: true, PrivateData: big[:252]}), AnswerClose, ErrPDTooLong, nil},
		{"extra bytes", Policy{}, append(bytes.Clone(siwRequest), 0, 0x22, 0x41), AnswerClose, ErrExtraData, nil},
		{"H without block", Policy{}, mustHex("4d504120494420526571204672616d65" + "10020002" + "0001"), AnswerReject, ErrEnhancedShort,
			mustHex("4d504120494420526570204672616d65" + "20020000")},
		{"markers v2", Policy{}, reqBytes(Frame{Rev: 2, Enhanced: true, Markers: true, IRD: 1, ORD: 1}), AnswerReject, ErrMarkersRefused, siwReplyMarkers2},
		{"markers v1", Policy{}, reqBytes(Frame{Rev: 1, Markers: true}), AnswerReject, ErrMarkersRefused, siwReplyMarkers1},
		{"crc strict", Policy{CRC: CRCStrict}, reqBytes(Frame{Rev: 2, Enhanced: true, CRC: true, IRD: 1, ORD: 1}), AnswerReject, ErrCRCRefused,
			mustHex("4d504120494420526570204672616d65" + "30020004" + "00000000")},
		{"truncated", Policy{}, siwRequest[:22], AnswerClose, io.ErrUnexpectedEOF, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pipePair(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			go func() {
				_, _ = a.Write(c.req)
				if c.name == "truncated" {
					_ = a.(*net.TCPConn).CloseWrite()
				}
			}()
			r, err := ReadRequest(ctx, b, &c.pol)
			if r != nil {
				t.Fatalf("accepted %+v", r.Request())
			}
			var hs *HandshakeError
			if !errors.As(err, &hs) || hs.Answer != c.answer || !errors.Is(err, c.cause) {
				t.Fatalf("got %v, want answer %v cause %v", err, c.answer, c.cause)
			}
			expectPeerGot(t, a, b, c.reply)
		})
	}
}

// TestInitiatorAnswers checks each malformed or refused Reply's answer.
func TestInitiatorAnswers(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	term := func(b []byte, c TermCode) []byte { return append(b, 'T', byte(c)) }
	cases := []struct {
		name   string
		pol    Policy
		ird    int
		reply  []byte
		answer Answer
		code   TermCode
		cause  error
	}{
		{"garbage", Policy{}, 1, []byte(strings.Repeat("HTTP/1.1 200 OK\r\n", 2)), AnswerTerminate, TermInvalidReqRep, ErrBadKey},
		{"request key", Policy{}, 1, siwRequest, AnswerTerminate, TermInvalidReqRep, ErrBadKey},
		{"rev 3", Policy{}, 1, mustHex("4d504120494420526570204672616d65" + "00030000"), AnswerClose, 0, ErrUnknownRevision},
		{"PD_Length over policy", Policy{MaxPrivateData: 8}, 1, mustHex("4d504120494420526570204672616d65" + "10020009" + "000100010102030405"), AnswerClose, 0, ErrPDTooLong},
		{"markers unasked", Policy{}, 1, mustHex("4d504120494420526570204672616d65" + "90020004" + "00010001"), AnswerClose, 0, ErrMarkersRefused},
		{"no C under required", Policy{CRC: CRCRequired}, 1, siwReplyV2, AnswerClose, 0, ErrCRCRefused},
		{"C under strict", Policy{CRC: CRCStrict}, 1, siwReplyV2CRC, AnswerClose, 0, ErrCRCRefused},
		{"rev 1 to enhanced", Policy{}, 1, siwReplyV1, AnswerClose, 0, ErrRevisionRefused},
		{"extra bytes", Policy{}, 1, append(bytes.Clone(siwReplyV2), 0, 0x0e), AnswerClose, 0, ErrExtraData},
		{"ORD above limit", Policy{}, 1, mustHex("4d504120494420526570204672616d65" + "10020004" + "00010081"), AnswerTerminate, TermInsufficientIRD, ErrInsufficientIRD},
		{"no matching RTR", Policy{P2P: true, RTRs: RTRSetSend}, 1, siwReplyP2P, AnswerTerminate, TermNoMatchingRTR, ErrNoMatchingRTR},
		{"truncated", Policy{}, 1, siwReplyV2[:21], AnswerClose, 0, io.ErrUnexpectedEOF},
		{"closed", Policy{}, 1, nil, AnswerClose, 0, io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pipePair(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			peer := replyingPeer(b, c.reply)
			_, err := (&Initiator{Policy: &c.pol, IRD: c.ird, ORD: 1, Terminate: term}).Handshake(ctx, a)
			var hs *HandshakeError
			if !errors.As(err, &hs) || hs.Answer != c.answer || hs.Code != c.code || !errors.Is(err, c.cause) {
				t.Fatalf("got %v, want answer %v code %v cause %v", err, c.answer, c.code, c.cause)
			}
			// What a peer that is not MPA sent comes with the error (a
			// prefix at least as long as the key); nothing else does.
			if c.name == "garbage" {
				if len(hs.Raw) < KeyLen || !bytes.HasPrefix(c.reply, hs.Raw) {
					t.Errorf("Raw %q, want a prefix of %q", hs.Raw, c.reply)
				}
			} else if hs.Raw != nil {
				t.Errorf("Raw %q for a peer that sent a frame", hs.Raw)
			}
			a.Close()
			back := <-peer
			var want []byte
			if c.answer == AnswerTerminate {
				want = AppendFPDU(nil, []byte{'T', byte(c.code)}, nil, false)
			}
			if !bytes.Equal(back, want) {
				t.Errorf("peer got %q after the reply, want %q", back, want)
			}
		})
	}
}

// TestHandshakeTimeouts checks slow-loris and silent peers against the
// deadlines, in a synctest bubble (net.Pipe deadlines run on the bubble's
// clock).
func TestHandshakeTimeouts(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	synctest.Test(t, func(t *testing.T) {
		// A responder facing a peer that trickles one byte a second gives
		// up at its deadline, not later: the deadline covers the whole
		// Request, not each read.
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() {
			for _, c := range siwRequest {
				if _, err := a.Write([]byte{c}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ReadRequest(ctx, b, nil)
		cancel()
		var hs *HandshakeError
		if !errors.As(err, &hs) || !hs.Timeout() || hs.Answer != AnswerClose {
			t.Fatalf("slow loris: %v", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("gave up after %v, want 5s", d)
		}
		b.Close()
		synctest.Wait()

		// An initiator without a Reply gives up at its deadline.
		c, d := net.Pipe()
		defer c.Close()
		defer d.Close()
		go func() { _, _ = io.Copy(io.Discard, d) }()
		start = time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		_, err = (&Initiator{}).Handshake(ctx, c)
		cancel()
		if !errors.As(err, &hs) || !hs.Timeout() {
			t.Fatalf("no reply: %v", err)
		}
		if d := time.Since(start); d != 10*time.Second {
			t.Errorf("gave up after %v, want 10s", d)
		}

		// Cancelling the context ends the handshake with context.Canceled.
		e, f := net.Pipe()
		defer e.Close()
		defer f.Close()
		go func() { _, _ = io.Copy(io.Discard, f) }()
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		_, err = (&Initiator{}).Handshake(ctx, e)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: %v", err)
		}
	})
}

// TestAnswerOnce checks that a Request is answered at most once and that
// refused parameters leave it unanswered.
func TestAnswerOnce(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	a, b := pipePair(t, true)
	go func() { _, _ = a.Write(siwRequest) }()
	ctx := context.Background()
	r, err := ReadRequest(ctx, b, &Policy{MaxPrivateData: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Accept(ctx, 129, 1, nil); !errors.Is(err, ErrIRDORDLimit) {
		t.Errorf("IRD 129: %v", err)
	}
	if _, err := r.Accept(ctx, 1, 1, make([]byte, 13)); !errors.Is(err, ErrPrivateDataLimit) {
		t.Errorf("13 bytes into 16-4: %v", err)
	}
	if err := r.CheckReject(make([]byte, 13)); !errors.Is(err, ErrPrivateDataLimit) {
		t.Errorf("check reject 13 bytes: %v", err)
	}
	if err := r.CheckReject(make([]byte, 12)); err != nil {
		t.Errorf("check reject 12 bytes: %v", err)
	}
	if err := r.Reject(ctx, make([]byte, 13)); !errors.Is(err, ErrPrivateDataLimit) {
		t.Errorf("reject 13 bytes: %v", err)
	}
	if err := r.Reject(ctx, []byte("no")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Accept(ctx, 1, 1, nil); !errors.Is(err, ErrAnswered) {
		t.Errorf("accept after reject: %v", err)
	}
	if err := r.Reject(ctx, nil); !errors.Is(err, ErrAnswered) {
		t.Errorf("second reject: %v", err)
	}
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(a, buf, 26)
	want := mustHex("4d504120494420526570204672616d65" + "30020006" + "00000000" + "6e6f")
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("reject % x, want % x", buf[:n], want)
	}
}

func TestPolicyResolve(t *testing.T) {
	p, err := (*Policy)(nil).Resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{Rev: 2, RTRs: DefaultRTRs, MaxIRD: 128, MaxORD: 128, MaxPrivateData: 512}
	if p != want {
		t.Errorf("defaults %+v", p)
	}
	if q, _ := p.Resolve(); q != p {
		t.Errorf("resolve not idempotent: %+v", q)
	}
	for _, bad := range []Policy{{Rev: 3}, {CRC: 9}, {Markers: 9}, {RTRs: 0x10}, {MaxIRD: -1}, {MaxORD: 0x4000}, {MaxPrivateData: 513}, {MaxPrivateData: 3}} {
		if _, err := bad.Resolve(); err == nil {
			t.Errorf("%+v resolved", bad)
		}
	}
	if s := (RTRSetWrite | RTRSetSend).String(); s != "write|send" {
		t.Errorf("RTRSet string %q", s)
	}
}

func TestFirstSendDelayStretchesForSlowPeers(t *testing.T) {
	var p Policy
	for _, c := range []struct{ reply, want time.Duration }{
		{0, DefaultFirstSendDelay},
		{time.Millisecond, DefaultFirstSendDelay},
		{45 * time.Millisecond, 90 * time.Millisecond},
		{time.Second, MaxFirstSendDelay},
	} {
		if got := p.firstSendDelay(c.reply); got != c.want {
			t.Errorf("reply after %v: delay %v, want %v", c.reply, got, c.want)
		}
	}
	p.FirstSendDelay = 3 * time.Millisecond
	if got := p.firstSendDelay(time.Second); got != 3*time.Millisecond {
		t.Errorf("explicit delay overridden: %v", got)
	}
	p.FirstSendDelay = -1
	if got := p.firstSendDelay(time.Second); got != 0 {
		t.Errorf("negative delay: %v", got)
	}
}

// TestQPLimits: Initiator.MaxIRD/MaxORD and Responder.SetLimits lower the
// policy's limits for one handshake, and the IRD that relaxed negotiation
// would raise stays within them (what the QP behind the handshake serves).
func TestQPLimits(t *testing.T) {
	defer goleak.VerifyNone(t, pipeTimers)
	// Initiator: the Request carries at most MaxIRD.
	if _, err := (&Initiator{IRD: 16, ORD: 4, MaxIRD: 2}).Request(); !errors.Is(err, ErrIRDORDLimit) {
		t.Fatalf("IRD over MaxIRD: %v", err)
	}
	f, err := (&Initiator{IRD: 2, ORD: 4, MaxIRD: 2, MaxORD: 4}).Request()
	if err != nil || f.IRD != 2 || f.ORD != 4 {
		t.Fatalf("Request %+v, %v", f, err)
	}
	// A Reply whose ORD is above the initiator's IRD and MaxIRD gets the
	// Terminate for an insufficient IRD, though the policy's 128 would
	// have taken it.
	a, b := pipePair(t, true)
	peerDone := make(chan struct{})
	go func() {
		defer close(peerDone)
		buf := make([]byte, 600)
		_, _ = b.Read(buf)
		_, _ = b.Write(mustHex("4d504120494420526570204672616d65" + "10020004" + "00040003"))
		_ = b.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, b)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	term := func(b []byte, c TermCode) []byte { return append(b, 'T', byte(c)) }
	_, err = (&Initiator{IRD: 2, ORD: 4, MaxIRD: 2, Terminate: term}).Handshake(ctx, a)
	var hs *HandshakeError
	if !errors.As(err, &hs) || hs.Code != TermInsufficientIRD {
		t.Fatalf("Reply ORD 3 over MaxIRD 2: %v", err)
	}
	a.Close()
	<-peerDone

	// Responder: an initiator asking for ORD 16 gets the QP's IRD.
	c, d := pipePair(t, true)
	if _, err := c.Write(mustHex("4d504120494420526571204672616d65" + "10020004" + "00100010")); err != nil {
		t.Fatal(err)
	}
	r, err := ReadRequest(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep, _, _ := r.Negotiate(2, 4, nil); rep.IRD != 16 {
		t.Fatalf("without limits the relaxed negotiation raises IRD 2 to the initiator's ORD: %d", rep.IRD)
	}
	r.SetLimits(2, 4)
	if _, _, err := r.Negotiate(3, 4, nil); !errors.Is(err, ErrIRDORDLimit) {
		t.Fatalf("IRD over the limit: %v", err)
	}
	rep, params, err := r.Negotiate(2, 4, nil)
	if err != nil || rep.IRD != 2 || rep.ORD != 4 || params.IRD != 2 || params.ORD != 4 {
		t.Fatalf("Reply %+v, params IRD %d ORD %d, %v", rep, params.IRD, params.ORD, err)
	}
}
