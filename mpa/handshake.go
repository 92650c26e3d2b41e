package mpa

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The MPA connection setup (RFC 5044 §7.1, RFC 6581 §5-§9) as two halves of
// straight-line code, one per side, in the manner of crypto/tls's
// handshake_client/handshake_server: each step either succeeds or sends the
// answer RFC 5044/6581 and Linux siw give (a Reply with R set, an LLP
// Terminate, or nothing) and returns an error. Neither half closes the
// connection: the caller owns it and closes it on error.
//
//	initiator                                   responder
//	---------                                   ---------
//	Initiator.Handshake:                        ReadRequest:
//	  send Request  ---- MPA Request ---->        read Request (deadline)
//	                                              validate; reject or close
//	                                            (the ULP decides)
//	                                            Responder.Accept / Reject:
//	  read Reply   <---- MPA Reply -------        send Reply (R set to reject)
//	  validate; Terminate or close
//	  -> Params (the QP sends the first FPDU;   -> Params (the QP sends nothing
//	     in P2P mode, the RTR)                     before the initiator's first FPDU)
//
// Deadlines come from the context (conn.SetDeadline from ctx.Deadline, and
// context.AfterFunc moves the deadline into the past on cancellation); they
// are cleared again on success.

// Handshake errors not already defined by the frame parser.
var (
	// ErrExtraData: bytes followed the Request or Reply before this side
	// answered it. RFC 5044 has the initiator wait for the Reply and the
	// responder wait for the first FPDU; Linux siw drops such a
	// connection (siw_recv_mpa_rr: -EPROTO).
	ErrExtraData = errors.New("mpa: bytes after the request/reply frame")
	// ErrMarkersRefused: the peer asked for markers and the policy refuses
	// them.
	ErrMarkersRefused = errors.New("mpa: markers refused by local policy")
	// ErrCRCRefused: the peer's C bit does not fit CRCRequired or
	// CRCStrict.
	ErrCRCRefused = errors.New("mpa: CRC setting refused by local policy")
	// ErrRevisionRefused: a revision 2 enhanced Request got a Reply that
	// is not revision 2 with H set ("the responder MUST reply with MPA
	// version 2", siw_proc_mpareply).
	ErrRevisionRefused = errors.New("mpa: reply is not revision 2 enhanced")
	// ErrInsufficientIRD: the Reply's ORD is above what this side can grant
	// as IRD (RFC 6581 §7, Terminate code 0x06).
	ErrInsufficientIRD = errors.New("mpa: peer ORD above the IRD this side can grant")
	// ErrNoMatchingRTR: the Reply picked no RTR type this side offered
	// (RFC 6581 §7, Terminate code 0x07).
	ErrNoMatchingRTR = errors.New("mpa: peer chose no RTR type this side offered")
	// ErrAnswered: Accept or Reject after the Request was answered.
	ErrAnswered = errors.New("mpa: request already answered")
	// ErrPrivateDataLimit: private data to send exceeds the policy's
	// MaxPrivateData.
	ErrPrivateDataLimit = errors.New("mpa: private data over the policy limit")
	// ErrIRDORDLimit: an IRD or ORD to send exceeds the policy's limits.
	ErrIRDORDLimit = errors.New("mpa: IRD or ORD over the policy limit")
)

// Answer is what one side sent the peer when its half of the handshake
// failed.
type Answer uint8

const (
	// AnswerClose: nothing was sent; the caller closes the connection.
	AnswerClose Answer = iota
	// AnswerReject: an MPA Reply with R set was sent.
	AnswerReject
	// AnswerTerminate: an LLP Terminate (layer LLP, type MPA) was sent.
	AnswerTerminate
)

// String names the answer ("reject").
func (a Answer) String() string {
	switch a {
	case AnswerClose:
		return "close"
	case AnswerReject:
		return "reject"
	case AnswerTerminate:
		return "terminate"
	}
	return fmt.Sprintf("unknown(%d)", uint8(a))
}

// HandshakeError is a failed handshake: the cause and what this side
// answered. Causes include the frame parser's errors (ErrBadKey,
// *RevisionError, ErrPDTooLong, ErrTruncated, ErrEnhancedShort), the
// handshake's (ErrExtraData, ErrMarkersRefused, ...), and I/O errors
// (io.EOF, io.ErrUnexpectedEOF, timeouts, resets, context.Canceled).
type HandshakeError struct {
	// Initiator: the failing half is the initiator's.
	Initiator bool
	// Answer is what was sent to the peer; Code is the Terminate's MPA
	// error code when Answer is AnswerTerminate.
	Answer Answer
	// Code is the Terminate's MPA error code (AnswerTerminate only).
	Code TermCode
	// Frame is the peer's frame when it was read whole (its PrivateData is
	// a copy owned by the error), else nil.
	Frame *Frame
	// Raw holds the first bytes the peer sent (at most RawLen, a copy
	// owned by the error) when they are not an MPA frame (ErrBadKey), so
	// that a caller can show what a peer that is not iWARP answered; else
	// nil.
	Raw []byte
	// Err is the cause.
	Err error
}

// RawLen bounds HandshakeError.Raw.
const RawLen = 128

// Error describes the failure and the answer sent.
func (e *HandshakeError) Error() string {
	side := "responder"
	if e.Initiator {
		side = "initiator"
	}
	switch e.Answer {
	case AnswerReject:
		return fmt.Sprintf("mpa: %s handshake: %v (rejected)", side, e.Err)
	case AnswerTerminate:
		return fmt.Sprintf("mpa: %s handshake: %v (terminated: %v)", side, e.Err, e.Code)
	}
	return fmt.Sprintf("mpa: %s handshake: %v", side, e.Err)
}

// Unwrap returns the cause.
func (e *HandshakeError) Unwrap() error { return e.Err }

// Timeout reports whether the handshake ran out of time.
func (e *HandshakeError) Timeout() bool {
	return isTimeout(e.Err)
}

// Refused reports whether the peer's terms were refused by local policy
// (markers, CRC, revision) rather than malformed or cut short.
func (e *HandshakeError) Refused() bool {
	return errors.Is(e.Err, ErrMarkersRefused) || errors.Is(e.Err, ErrCRCRefused) ||
		errors.Is(e.Err, ErrRevisionRefused)
}

// RejectedError is the peer's Reply with R set. Reply.PrivateData is the
// rejecting ULP's private data (without the RFC 6581 block, and without
// the first 8 bytes when the Request carried the [MS-SMBD] header and the
// Reply has that many: see Policy.SMBD), a copy owned by the error.
type RejectedError struct {
	// Reply is the rejecting Reply.
	Reply Frame
}

// Error describes the reject.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("mpa: rejected by peer (%d bytes of private data)", len(e.Reply.PrivateData))
}

// frameSlack is how many bytes past the longest acceptable frame a read may
// return, so that data following the frame shows.
const frameSlack = 64

// readFrame reads one Request or Reply frame with PD_Length at most limit
// into buf and parses it into f. It returns the frame's length and the
// bytes read past it. ErrEnhancedShort comes with the whole frame read (f
// holds the fields before the RFC 6581 block). ErrReservedBits is not an
// error here: RFC 5044 has reserved bits ignored on receipt. ErrBadKey
// comes with the bytes read (the frame's place), for HandshakeError.Raw.
func readFrame(r io.Reader, buf []byte, limit int, f *Frame) (int, []byte, error) {
	have := 0
	var rerr error
	for {
		if have >= HeaderLen {
			n, err := ParseFrame(buf[:have], f)
			total, _ := FrameLen(buf[:have])
			switch {
			case err == nil || errors.Is(err, ErrReservedBits) || errors.Is(err, ErrTruncated) ||
				errors.Is(err, ErrEnhancedShort):
				if total-HeaderLen > limit {
					return 0, nil, ErrPDTooLong
				}
			case errors.Is(err, ErrBadKey):
				return 0, buf[:have], err // what came, for HandshakeError.Raw
			default:
				return 0, nil, err
			}
			switch {
			case err == nil || errors.Is(err, ErrReservedBits):
				return n, buf[n:have], nil
			case errors.Is(err, ErrEnhancedShort):
				return total, buf[total:have], err
			}
		}
		if rerr != nil {
			if rerr == io.EOF && have > 0 {
				rerr = io.ErrUnexpectedEOF
			}
			return 0, nil, rerr
		}
		var m int
		m, rerr = r.Read(buf[have:])
		have += m
	}
}

// aLongTimeAgo is a deadline in the past: setting it makes blocked I/O
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// bindContext applies ctx to conn's deadlines. The returned release clears
// them again and reports ctx's error if ctx ended in the meantime. (An
// error clearing the deadline means the connection is gone; whoever uses
// it next finds out.)
func bindContext(ctx context.Context, conn net.Conn) (release func() error) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	return func() error {
		if !stop() {
			return ctx.Err()
		}
		_ = conn.SetDeadline(time.Time{})
		return nil
	}
}

// ctxCause replaces a deadline error caused by cancelling ctx with
// context.Canceled, so that callers can tell a cancel from a timeout.
func ctxCause(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) && isTimeout(err) {
		return context.Canceled
	}
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// Initiator is the initiator's half: it sends the MPA Request and checks
// the Reply against its Policy. Set the fields, then call Handshake once.
type Initiator struct {
	// Policy is the negotiation policy; nil means the zero Policy.
	Policy *Policy
	// IRD and ORD are what this side asks for (sent in the RFC 6581 block
	// in revision 2, in the [MS-SMBD] header in revision 1 with
	// Policy.SMBD). In P2P mode an ORD of 0 is sent as 1, as siw does; in
	// the [MS-SMBD] header an IRD or ORD of 0 is sent as 1.
	IRD, ORD int
	// MaxIRD and MaxORD, when positive, lower the Policy's MaxIRD and
	// MaxORD for this handshake: what the QP that takes the connection
	// enforces. IRD and ORD must fit them, and the IRD a Reply may raise
	// (relaxed negotiation) stays within MaxIRD, so that the Params never
	// settle more than the QP serves.
	MaxIRD, MaxORD int
	// PrivateData is the ULP private data for the Request.
	PrivateData []byte
	// Terminate, if set, appends to b the ULPDU of an LLP Terminate with
	// the given MPA error code: the untagged DDP header (QN 2) and the
	// Terminate message, built by the caller, which knows DDP and RDMAP.
	// The initiator frames it and sends it, as Linux siw does, before
	// failing on a Reply with a bad key (0x04), an ORD above what it can
	// grant (0x06) or no matching RTR (0x07). Without it the initiator
	// only fails.
	//
	// Framing: after a Reply that settled CRC and markers (0x06, 0x07) the
	// Terminate is the first FPDU of the stream and is framed with them,
	// so that a peer that checks CRC reads the Terminate and not a CRC
	// error; Linux siw frames it with CRC off in every case
	// (siw_send_terminate before siw_qp_modify). Without a valid Reply
	// (0x04) it is framed with CRC off and no markers.
	Terminate func(b []byte, code TermCode) []byte
}

// Result is what a successful initiator handshake settled.
type Result struct {
	// Params is what the handshake settled, for the QP.
	Params Params
	// Request is the frame sent (PrivateData aliases Initiator.PrivateData).
	Request Frame
	// Reply is the frame received; its PrivateData (without the RFC 6581
	// block or the [MS-SMBD] header, whose values are in Reply.SMBDIRD and
	// SMBDORD) is a copy owned by the Result.
	Reply Frame
}

// Request returns the Request frame the initiator sends, after checking
// IRD, ORD and private data against the policy. It does no I/O.
func (h *Initiator) Request() (Frame, error) {
	p, err := h.policy()
	if err != nil {
		return Frame{}, err
	}
	return h.request(&p)
}

// policy resolves the Policy and applies MaxIRD and MaxORD.
func (h *Initiator) policy() (Policy, error) {
	p, err := h.Policy.Resolve()
	if err != nil {
		return p, err
	}
	p.MaxIRD, p.MaxORD = lowerLimit(p.MaxIRD, h.MaxIRD), lowerLimit(p.MaxORD, h.MaxORD)
	return p, nil
}

// lowerLimit returns limit lowered to lim when lim is positive.
func lowerLimit(limit, lim int) int {
	if lim > 0 {
		return min(limit, lim)
	}
	return limit
}

func (h *Initiator) request(p *Policy) (Frame, error) {
	f := Frame{
		Rev:         p.Rev,
		Enhanced:    p.Rev == Rev2,
		CRC:         p.CRC.asks(),
		Markers:     p.Markers == MarkersRequest,
		SMBD:        p.SMBD && p.Rev == Rev1,
		PrivateData: h.PrivateData,
	}
	ird, ord := h.IRD, h.ORD
	if err := p.checkIRDORD(ird, ord); err != nil {
		return Frame{}, err
	}
	if err := p.checkPrivateData(h.PrivateData, &f); err != nil {
		return Frame{}, err
	}
	if f.SMBD {
		// [MS-SMBD] section 6.1: IRD and ORD first in the private data,
		// each greater than zero.
		f.SMBDIRD, f.SMBDORD = smbdValue(ird), smbdValue(ord)
	}
	if f.Enhanced {
		if p.P2P {
			// siw_connect: "if p2p and ord == 0, ord = 1".
			ord = max(ord, 1)
			f.P2P = true
			f.SetRTRs(p.RTRs)
		}
		f.IRD, f.ORD = uint16(ird), uint16(ord)
	}
	return f, nil
}

// Handshake runs the initiator's half on conn: send the Request, read the
// Reply within ctx, validate it. On a Reply with R set it returns a
// *RejectedError; on any other failure a *HandshakeError saying what was
// sent to the peer. It never closes conn. On success the connection's
// deadlines are cleared and nothing past the Reply has been read.
func (h *Initiator) Handshake(ctx context.Context, conn net.Conn) (*Result, error) {
	p, err := h.policy()
	if err != nil {
		return nil, err
	}
	req, err := h.request(&p)
	if err != nil {
		return nil, err
	}
	release := bindContext(ctx, conn)
	res, err := h.run(conn, &p, &req)
	if rerr := release(); err == nil && rerr != nil {
		err = &HandshakeError{Initiator: true, Err: rerr}
	}
	if hs, ok := err.(*HandshakeError); ok {
		hs.Err = ctxCause(ctx, hs.Err)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (h *Initiator) fail(cause error, f *Frame) error {
	return &HandshakeError{Initiator: true, Answer: AnswerClose, Frame: f, Err: cause}
}

// terminate sends the LLP Terminate framed by fr (best effort, as
// siw_send_terminate) and returns the error.
func (h *Initiator) terminate(conn net.Conn, fr Framer, code TermCode, cause error, f *Frame) error {
	e := &HandshakeError{Initiator: true, Answer: AnswerClose, Frame: f, Err: cause}
	if h.Terminate != nil {
		if u := h.Terminate(nil, code); len(u) > 0 {
			if _, err := conn.Write(fr.AppendFPDU(nil, u, nil)); err == nil {
				e.Answer, e.Code = AnswerTerminate, code
			}
		}
	}
	return e
}

func (h *Initiator) run(conn net.Conn, p *Policy, req *Frame) (*Result, error) {
	// 1. Send the Request (RFC 5044 §7.1.1).
	out, err := AppendFrame(make([]byte, 0, req.Length()), req)
	if err != nil {
		return nil, h.fail(err, nil)
	}
	if _, err := conn.Write(out); err != nil {
		return nil, h.fail(err, nil)
	}
	sent := time.Now()

	// 2. Read the Reply. siw_proc_mpareply's order: PD_Length and trailing
	// bytes (-EPROTO, close), revision (close), key (Terminate 0x04), R.
	var rep Frame
	buf := make([]byte, HeaderLen+p.MaxPrivateData+frameSlack)
	_, rest, err := readFrame(conn, buf, p.MaxPrivateData, &rep)
	switch {
	case errors.Is(err, ErrBadKey):
		e := h.terminate(conn, Framer{}, TermInvalidReqRep, err, nil)
		e.(*HandshakeError).Raw = bytes.Clone(rest[:min(len(rest), RawLen)])
		return nil, e
	case errors.Is(err, ErrEnhancedShort):
		return nil, h.terminate(conn, Framer{}, TermInvalidReqRep, err, nil)
	case err != nil:
		return nil, h.fail(err, nil)
	}
	rep.PrivateData = bytes.Clone(rep.PrivateData)
	if !rep.Reply {
		return nil, h.terminate(conn, Framer{}, TermInvalidReqRep, fmt.Errorf("%w: a Request where the Reply belongs", ErrBadKey), &rep)
	}
	var early []byte
	if len(rest) > 0 {
		if !p.AcceptEarlyFPDUs || rep.Reject {
			return nil, h.fail(fmt.Errorf("%w: %d bytes", ErrExtraData, len(rest)), &rep)
		}
		early = bytes.Clone(rest)
	}
	if rep.Reject {
		if req.SMBD && len(rep.PrivateData) >= SMBDHeaderLen {
			_ = rep.SplitSMBD() // the ULP's reason follows the header; its values do not matter
		}
		return nil, &RejectedError{Reply: rep}
	}

	// 3. The Reply's terms against the policy.
	if rep.Markers && p.Markers == MarkersRefuse {
		return nil, h.fail(ErrMarkersRefused, &rep)
	}
	if (p.CRC == CRCRequired && !rep.CRC) || (p.CRC == CRCStrict && rep.CRC) {
		return nil, h.fail(fmt.Errorf("%w: reply C=%t, policy %v", ErrCRCRefused, rep.CRC, p.CRC), &rep)
	}
	if req.Enhanced && (rep.Rev != Rev2 || !rep.Enhanced) {
		return nil, h.fail(fmt.Errorf("%w: reply revision %d, H=%t", ErrRevisionRefused, rep.Rev, rep.Enhanced), &rep)
	}
	params := Params{
		Initiator:          true,
		Rev:                min(req.Rev, rep.Rev),
		Enhanced:           req.Enhanced,
		CRC:                req.CRC || rep.CRC, // RFC 5044: used if either side asks
		MarkersTx:          rep.Markers,
		MarkersRx:          req.Markers,
		IRD:                h.IRD,
		ORD:                h.ORD,
		FirstSendDelay:     p.firstSendDelay(time.Since(sent)),
		TerminateLayoutSiw: p.TerminateLayoutSiw,
	}

	// 4. RFC 6581 IRD/ORD (or, in revision 1 with Policy.SMBD, the
	// [MS-SMBD] section 6.1 header), with siw's relaxed negotiation: this
	// side's IRD becomes the responder's ORD (Terminate 0x06 if that is
	// above what it can grant), its ORD the responder's IRD.
	settled := Framer{CRC: params.CRC, Markers: params.MarkersTx}
	if req.SMBD {
		if err := rep.SplitSMBD(); err != nil {
			return nil, h.terminate(conn, settled, TermInvalidReqRep, err, &rep)
		}
		params.SMBD = true
	}
	if req.Enhanced || req.SMBD {
		reqIRD, _ := req.AdvertisedIRDORD()
		repIRD, repORD := rep.AdvertisedIRDORD()
		if repORD > reqIRD && repORD > p.MaxIRD {
			return nil, h.terminate(conn, settled, TermInsufficientIRD,
				fmt.Errorf("%w: peer ORD %d, IRD %d, limit %d", ErrInsufficientIRD, repORD, reqIRD, p.MaxIRD), &rep)
		}
		params.IRD = repORD
		params.ORD = min(repIRD, p.MaxORD)
		if req.P2P {
			rtr := (rep.RTRs() & req.RTRs()).Choose()
			if rtr == RTRNone {
				return nil, h.terminate(conn, settled, TermNoMatchingRTR,
					fmt.Errorf("%w: offered %v, reply %v", ErrNoMatchingRTR, req.RTRs(), rep.RTRs()), &rep)
			}
			params.P2P, params.RTR = true, rtr
		}
	}
	params.Leftover = early
	return &Result{Params: params, Request: *req, Reply: rep}, nil
}

// Responder is the responder's half, between reading a valid Request and
// answering it. Make one with ReadRequest; answer with Accept or Reject,
// once. A Responder must be used from one goroutine at a time.
type Responder struct {
	conn           net.Conn
	p              Policy
	req            Frame
	answered       bool
	limIRD, limORD int // SetLimits; 0: the policy's
}

// ReadRequest runs the first part of the responder's half on conn: read
// the Request within ctx and validate it. A Request the policy cannot
// take gets the answer Linux siw gives: a Reply with R set for an enhanced
// frame without its block, markers (MarkersRefuse) or C (CRCStrict) (and,
// with Policy.SMBD, for a revision 1 Request without a valid [MS-SMBD]
// header: ErrSMBDShort, ErrSMBDZero); no
// answer at all for a bad key, an unknown revision, PD_Length over the
// limit, bytes after the frame, a timeout or a closed connection. It
// returns a *HandshakeError saying which; it never closes conn. On success
// the connection's deadlines are cleared.
func ReadRequest(ctx context.Context, conn net.Conn, policy *Policy) (*Responder, error) {
	p, err := policy.Resolve()
	if err != nil {
		return nil, err
	}
	r := &Responder{conn: conn, p: p}
	release := bindContext(ctx, conn)
	err = r.read()
	if rerr := release(); err == nil && rerr != nil {
		err = &HandshakeError{Err: rerr}
	}
	if hs, ok := err.(*HandshakeError); ok {
		hs.Err = ctxCause(ctx, hs.Err)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Responder) read() error {
	p := &r.p
	buf := make([]byte, HeaderLen+p.MaxPrivateData+frameSlack)
	_, rest, err := readFrame(r.conn, buf, p.MaxPrivateData, &r.req)
	short := errors.Is(err, ErrEnhancedShort)
	if err != nil && !short {
		// siw_proc_mpareq: -EPROTO, the socket is released without a word.
		e := &HandshakeError{Err: err}
		if errors.Is(err, ErrBadKey) {
			e.Raw = bytes.Clone(rest[:min(len(rest), RawLen)])
		}
		return e
	}
	r.req.PrivateData = bytes.Clone(r.req.PrivateData)
	var smbdErr error
	if p.SMBD && r.req.Rev == Rev1 {
		// [MS-SMBD] section 6.1: the header is the first 8 bytes.
		smbdErr = r.req.SplitSMBD()
	}
	f := r.req
	if r.req.Reply {
		return &HandshakeError{Frame: &f, Err: fmt.Errorf("%w: a Reply where the Request belongs", ErrBadKey)}
	}
	if len(rest) > 0 {
		return &HandshakeError{Frame: &f, Err: fmt.Errorf("%w: %d bytes", ErrExtraData, len(rest))}
	}
	var cause error
	switch {
	case short:
		cause = err
	case smbdErr != nil:
		cause = smbdErr
	case r.req.Markers && p.Markers == MarkersRefuse:
		cause = ErrMarkersRefused
	case r.req.CRC && p.CRC == CRCStrict:
		cause = fmt.Errorf("%w: request C=1, policy %v", ErrCRCRefused, p.CRC)
	default:
		return nil
	}
	// siw's reject_conn: a Reply with R set, M clear, no private data; in
	// revision 2 enhanced the IRD/ORD block is zero.
	rej := r.rejectFrame(nil) // for a short block: enhanced not set, so no block
	e := &HandshakeError{Answer: AnswerReject, Frame: &f, Err: cause}
	if werr := r.write(&rej); werr != nil {
		e.Answer = AnswerClose
	}
	r.answered = true
	return e
}

// Request returns the peer's Request. Its PrivateData (the ULP's, without
// the RFC 6581 block or the [MS-SMBD] header) is owned by the Responder and
// must not be modified.
func (r *Responder) Request() Frame { return r.req }

// Policy returns the resolved policy the Responder applies.
func (r *Responder) Policy() Policy { return r.p }

// SetLimits lowers, for the answer, the Policy's MaxIRD and MaxORD to
// maxIRD and maxORD: what the QP that takes the connection enforces. A
// value of 0 or less keeps the policy's limit. Each call replaces the
// limits of the previous one (for an Accept retried with another QP).
// Negotiate and Accept then take ird and ord within these limits, and the
// IRD the Reply advertises (raised to the initiator's ORD by the relaxed
// negotiation) never exceeds maxIRD.
func (r *Responder) SetLimits(maxIRD, maxORD int) { r.limIRD, r.limORD = maxIRD, maxORD }

// Negotiate computes the Reply that accepts the Request with this side's
// ird, ord and private data, and the Params that follow, without I/O. As
// Linux siw with relaxed_ird_negotiation (siw_accept): the Reply's ORD is
// lowered to the initiator's IRD and its IRD raised to the initiator's
// ORD, each first capped by the policy limits; P2P is echoed and the RTR
// chosen from the offer (Write, then Read, then Send), else the first this
// side accepts is proposed. The limits are the policy's, lowered by
// SetLimits. A revision 1 Request that carried the [MS-SMBD] header
// (Policy.SMBD) is negotiated by the same rules, and the Reply's header
// carries the result; an ORD of 0 is raised to 1 there, in the Reply and
// in the Params, since [MS-SMBD] section 6.1 wants values greater than
// zero.
func (r *Responder) Negotiate(ird, ord int, pd []byte) (Frame, Params, error) {
	pol := r.p
	pol.MaxIRD, pol.MaxORD = lowerLimit(pol.MaxIRD, r.limIRD), lowerLimit(pol.MaxORD, r.limORD)
	p := &pol
	if err := p.checkIRDORD(ird, ord); err != nil {
		return Frame{}, Params{}, err
	}
	rev := min(r.req.Rev, p.Rev)
	enhanced := r.req.Enhanced && rev == Rev2
	smbd := r.req.SMBD // set by read: Policy.SMBD and a revision 1 Request
	rep := Frame{
		Reply:       true,
		Rev:         rev,
		Enhanced:    enhanced,
		CRC:         r.req.CRC || p.CRC.asks(),
		Markers:     p.Markers == MarkersRequest,
		SMBD:        smbd,
		PrivateData: pd,
	}
	if err := p.checkPrivateData(pd, &rep); err != nil {
		return Frame{}, Params{}, err
	}
	params := Params{
		Rev:                rev,
		Enhanced:           enhanced,
		CRC:                rep.CRC,
		MarkersTx:          r.req.Markers,
		MarkersRx:          rep.Markers,
		IRD:                ird,
		ORD:                ord,
		TerminateLayoutSiw: p.TerminateLayoutSiw,
	}
	if enhanced || smbd {
		reqIRD, reqORD := r.req.AdvertisedIRDORD()
		peerIRD := min(reqIRD, p.MaxORD)
		peerORD := min(reqORD, p.MaxIRD)
		ord = min(ord, peerIRD)
		ird = max(ird, peerORD)
		if smbd {
			// [MS-SMBD] section 6.1: values greater than zero. The IRD is
			// at least the peer's ORD (itself at least 1); an ORD of 0
			// is raised, and settled, as 1 (within MaxORD, at least 1).
			ord = max(ord, 1)
			rep.SMBDIRD, rep.SMBDORD = smbdValue(ird), smbdValue(ord)
			params.SMBD = true
		} else {
			rep.IRD, rep.ORD = uint16(ird), uint16(ord)
		}
		params.IRD, params.ORD = ird, ord
		if r.req.P2P {
			rtr := (r.req.RTRs() & p.RTRs).Choose()
			if rtr == RTRNone {
				rtr = p.RTRs.Choose()
			}
			rep.P2P = true
			rep.SetRTRs(rtr.Set())
			params.P2P, params.RTR = true, rtr
		}
	}
	return rep, params, nil
}

// Accept answers the Request with a Reply (see Negotiate) written within
// ctx, and returns what was settled. After an error from Negotiate's checks
// nothing was written and the Request may still be answered.
func (r *Responder) Accept(ctx context.Context, ird, ord int, pd []byte) (*Params, error) {
	if r.answered {
		return nil, ErrAnswered
	}
	rep, params, err := r.Negotiate(ird, ord, pd)
	if err != nil {
		return nil, err
	}
	r.answered = true
	release := bindContext(ctx, r.conn)
	err = r.write(&rep)
	if rerr := release(); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return nil, &HandshakeError{Err: ctxCause(ctx, err)}
	}
	return &params, nil
}

// rejectFrame builds the Reply with R set (see RejectFrame).
func (r *Responder) rejectFrame(pd []byte) Frame {
	rev := min(r.req.Rev, r.p.Rev)
	f := Frame{
		Reply:       true,
		Reject:      true,
		Rev:         rev,
		Enhanced:    r.req.Enhanced && rev == Rev2,
		CRC:         r.req.CRC && r.p.CRC != CRCStrict,
		PrivateData: pd,
	}
	if r.req.SMBD {
		f.SMBD = true
		f.SMBDIRD = smbdValue(lowerLimit(r.p.MaxIRD, r.limIRD))
		f.SMBDORD = smbdValue(lowerLimit(r.p.MaxORD, r.limORD))
	}
	return f
}

// RejectFrame returns the Reply with R set that Reject would send with pd:
// M clear, C as in the Request (cleared under CRCStrict), the revision
// answered, in revision 2 enhanced a zero IRD/ORD block, and after a
// Request that carried the [MS-SMBD] header (Policy.SMBD) a header with
// this side's IRD/ORD limits, those of the policy lowered by SetLimits
// (values greater than zero, as [MS-SMBD] section 6.1 wants). The frame's
// PrivateData aliases pd.
func (r *Responder) RejectFrame(pd []byte) Frame { return r.rejectFrame(pd) }

// CheckReject returns the error Reject would return for pd before
// sending anything (pd over the policy's limit for RejectFrame's frame:
// ErrPrivateDataLimit), or nil. It does no I/O and leaves the Request
// unanswered.
func (r *Responder) CheckReject(pd []byte) error {
	rej := r.rejectFrame(nil)
	return r.p.checkPrivateData(pd, &rej)
}

// Reject answers the Request with a Reply with R set carrying pd (after
// the RFC 6581 block when the Request was enhanced, after the [MS-SMBD]
// header when it carried one; see RejectFrame), written within ctx. pd is
// copied before Reject returns. After an error from CheckReject's check
// nothing was written and the Request may still be answered.
func (r *Responder) Reject(ctx context.Context, pd []byte) error {
	if r.answered {
		return ErrAnswered
	}
	if err := r.CheckReject(pd); err != nil {
		return err
	}
	rej := r.rejectFrame(pd)
	r.answered = true
	release := bindContext(ctx, r.conn)
	err := r.write(&rej)
	if rerr := release(); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return &HandshakeError{Answer: AnswerClose, Err: ctxCause(ctx, err)}
	}
	return nil
}

func (r *Responder) write(f *Frame) error {
	out, err := AppendFrame(make([]byte, 0, f.Length()), f)
	if err != nil {
		return err
	}
	_, err = r.conn.Write(out)
	return err
}
