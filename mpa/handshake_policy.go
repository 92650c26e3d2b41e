package mpa

import (
	"fmt"
	"strings"
	"time"
)

// Negotiation policy for the MPA connection setup (RFC 5044 §7.1, RFC 6581).
// The zero Policy behaves as Linux siw does with its built-in defaults
// (drivers/infiniband/sw/siw/siw_main.c, siw_cm.c): revision 2 with the
// RFC 6581 IRD/ORD block, CRC only when the peer asks, markers refused, no
// peer-to-peer mode as initiator, IRD/ORD at most 128, relaxed IRD
// negotiation.

// Defaults and Linux siw limits.
const (
	// DefaultMaxIRDORD is the IRD and ORD limit of Linux siw
	// (SIW_MAX_IRD_QP, SIW_MAX_ORD_QP).
	DefaultMaxIRDORD = 128
	// DefaultFirstSendDelay holds an initiator's first FPDU this long after
	// the Reply: Linux siw 6.1 attaches its receive path after sending its
	// Reply and can lose an FPDU that arrives within about a millisecond.
	DefaultFirstSendDelay = 5 * time.Millisecond
	// MaxFirstSendDelay caps the default delay's stretching for slow peers.
	MaxFirstSendDelay = 250 * time.Millisecond
	// SiwMaxPrivateData is the PD_Length to stay at or below toward Linux
	// siw. siw refuses PD_Length over 256 (MPA_MAX_PRIVDATA) and, in
	// revision 2, adds the 4-byte RFC 6581 block to the ULP length in u8
	// arithmetic (siw_send_mpareqrep), so that ULP private data of 252 to
	// 255 bytes wraps. With this limit, ULP private data stays at 251 bytes
	// or less in revision 2 (255 in revision 1).
	SiwMaxPrivateData = 255
)

// CRCPolicy says when this side asks for CRC32c on FPDUs and which answers
// it takes. RFC 5044 §7.1: CRC is used in both directions when either side
// sets C. The values mirror Linux siw's mpa_crc_required and mpa_crc_strict.
type CRCPolicy uint8

const (
	// CRCOff does not ask for CRC and uses it when the peer asks
	// (siw default: required=0, strict=0).
	CRCOff CRCPolicy = iota
	// CRCOn asks for CRC and takes a peer that does not set C (CRC is then
	// used anyway, since this side asked).
	CRCOn
	// CRCRequired asks for CRC; as initiator it refuses a Reply without C
	// (siw mpa_crc_required=1).
	CRCRequired
	// CRCStrict enforces CRC off: it never asks, a responder rejects a
	// Request with C and an initiator refuses a Reply with C
	// (siw mpa_crc_strict=1, mpa_crc_required=0).
	CRCStrict
)

// String names the policy ("required").
func (c CRCPolicy) String() string {
	switch c {
	case CRCOff:
		return "off"
	case CRCOn:
		return "on"
	case CRCRequired:
		return "required"
	case CRCStrict:
		return "strict"
	}
	return fmt.Sprintf("unknown(%d)", uint8(c))
}

// asks reports whether this side sets C in its own frame.
func (c CRCPolicy) asks() bool { return c == CRCOn || c == CRCRequired }

// MarkerPolicy says what this side does about MPA markers (RFC 5044 §5).
// M in a Request or Reply asks the other side to insert markers into the
// stream it sends.
type MarkerPolicy uint8

const (
	// MarkersRefuse never inserts markers: a responder rejects a Request
	// with M (Reply with R set, M clear), an initiator refuses a Reply with
	// M (Linux siw: "MPA Markers: currently not supported").
	MarkersRefuse MarkerPolicy = iota
	// MarkersAccept inserts markers when the peer asks, and does not ask.
	MarkersAccept
	// MarkersRequest asks the peer to insert markers, and inserts them when
	// the peer asks.
	MarkersRequest
)

// String names the policy ("refuse").
func (m MarkerPolicy) String() string {
	switch m {
	case MarkersRefuse:
		return "refuse"
	case MarkersAccept:
		return "accept"
	case MarkersRequest:
		return "request"
	}
	return fmt.Sprintf("unknown(%d)", uint8(m))
}

// RTRSet is a set of RTR types (RFC 6581 §4): the B, C and D bits of the
// IRD/ORD block.
type RTRSet uint8

// RTR type bits.
const (
	RTRSetWrite RTRSet = 1 << iota // C: zero-length RDMA Write
	RTRSetRead                     // D: zero-length RDMA Read
	RTRSetSend                     // B: zero-length Send
	// RTRSetAll is every RTR type.
	RTRSetAll = RTRSetWrite | RTRSetRead | RTRSetSend
	// DefaultRTRs is what Linux siw offers and accepts (rtr_type in
	// siw_cm.c); it never uses the zero-length Send RTR.
	DefaultRTRs = RTRSetWrite | RTRSetRead
)

// Set returns the one-element set holding r (empty for RTRNone).
func (r RTR) Set() RTRSet {
	switch r {
	case RTRWrite:
		return RTRSetWrite
	case RTRRead:
		return RTRSetRead
	case RTRSend:
		return RTRSetSend
	}
	return 0
}

// Has reports whether r is in s.
func (s RTRSet) Has(r RTR) bool { return r != RTRNone && s&r.Set() != 0 }

// Choose returns the RTR type a responder picks from s: Write before Read
// before Send, as Linux siw does; RTRNone for the empty set.
func (s RTRSet) Choose() RTR {
	switch {
	case s&RTRSetWrite != 0:
		return RTRWrite
	case s&RTRSetRead != 0:
		return RTRRead
	case s&RTRSetSend != 0:
		return RTRSend
	}
	return RTRNone
}

// String lists the set's RTR types ("write|read"; "none" when empty).
func (s RTRSet) String() string {
	if s == 0 {
		return "none"
	}
	var parts []string
	for _, r := range []RTR{RTRWrite, RTRRead, RTRSend} {
		if s.Has(r) {
			parts = append(parts, r.String())
		}
	}
	if s&^RTRSetAll != 0 {
		parts = append(parts, fmt.Sprintf("unknown(%#x)", uint8(s&^RTRSetAll)))
	}
	return strings.Join(parts, "|")
}

// RTRs returns the RTR bits of an enhanced frame.
func (f *Frame) RTRs() RTRSet {
	var s RTRSet
	if f.RTRWrite {
		s |= RTRSetWrite
	}
	if f.RTRRead {
		s |= RTRSetRead
	}
	if f.RTRSend {
		s |= RTRSetSend
	}
	return s
}

// SetRTRs sets the RTR bits of an enhanced frame to s.
func (f *Frame) SetRTRs(s RTRSet) {
	f.RTRWrite = s&RTRSetWrite != 0
	f.RTRRead = s&RTRSetRead != 0
	f.RTRSend = s&RTRSetSend != 0
}

// Policy is one side's MPA negotiation policy. The zero value is valid and
// behaves as Linux siw's defaults. Policy values are copied on use; a
// Policy may be shared by concurrent handshakes.
type Policy struct {
	// Rev is the revision an initiator sends (2 with the RFC 6581 block,
	// or 1) and the highest a responder answers with. 0 means 2.
	Rev uint8
	// CRC: when to ask for CRC and which answers to take. Default CRCOff.
	CRC CRCPolicy
	// Markers: whether markers are refused, accepted or requested.
	// Default MarkersRefuse.
	Markers MarkerPolicy
	// P2P makes an initiator ask for peer-to-peer mode (RFC 6581 §4, the A
	// bit), offering the RTR types in RTRs. Responders always echo A when
	// asked (RFC 6581 §9.2). Default off, as siw's peer_to_peer.
	P2P bool
	// RTRs are the RTR types an initiator offers and a responder accepts.
	// 0 means DefaultRTRs (Write and Read).
	RTRs RTRSet
	// MaxIRD and MaxORD bound the IRD and ORD this side negotiates.
	// 0 means DefaultMaxIRDORD (128); at most MaxIRDORD (0x3fff).
	MaxIRD, MaxORD int
	// MaxPrivateData bounds PD_Length (as on the wire, the RFC 6581 block
	// included) in frames this side sends and receives. 0 means
	// MaxPrivateData (512, RFC 5044). Toward Linux siw use
	// SiwMaxPrivateData.
	MaxPrivateData int
	// FirstSendDelay is copied into Params for an initiator's QP: the delay
	// between the Reply and the first FPDU. 0 means DefaultFirstSendDelay,
	// stretched to twice the Request-to-Reply time for a slow peer (at most
	// MaxFirstSendDelay);
	// a negative value means none.
	FirstSendDelay time.Duration
	// AcceptEarlyFPDUs lets an initiator take FPDUs that arrive with, or
	// right behind, the Reply, before it sent its own first FPDU: they go
	// to the QP in Params.Leftover. RFC 5044 has the initiator send first,
	// and Linux siw drops a connection whose Reply comes with more bytes
	// (ErrExtraData, the default here too), but some responders send at
	// once (Linux siw under rdma-core's ucmatose, whose server sends
	// first); set this to talk to them.
	AcceptEarlyFPDUs bool
	// TerminateLayoutSiw writes Terminate control words in Linux siw's
	// byte order (see rdmap/wire.LayoutSiw), in the handshake and after it.
	TerminateLayoutSiw bool
	// SMBD negotiates IRD and ORD in MPA revision 1 with the [MS-SMBD]
	// IRD/ORD Negotiate Header ([MS-SMBD] section 6.1; see
	// AppendSMBDHeader), as Windows SMB Direct does over revision 1 RNICs
	// such as the Chelsio T4. Default off: nothing changes, byte for byte.
	//
	// It applies to a connection whose MPA Request is revision 1 (an
	// initiator with Rev 1); a revision 2 Request never carries the
	// header (the RFC 6581 block does that job), even when a responder
	// answers it with revision 1, and this field is then ignored. When it
	// applies:
	//
	//   - The initiator puts the header first in the Request's private
	//     data, carrying its IRD and ORD (0 is sent as 1: [MS-SMBD] wants
	//     values greater than zero), then the ULP's private data.
	//   - The responder takes the header off the Request's private data
	//     (Responder.Request, cm's ConnectRequest event and Frame.PrivateData
	//     hold only the ULP's part; Frame.SMBDIRD/SMBDORD the values). A
	//     Request whose private data is shorter than 8 bytes (ErrSMBDShort)
	//     or whose IRD or ORD is 0 (ErrSMBDZero) is answered with a Reply
	//     with R set and never reaches the ULP.
	//   - Accept negotiates as RFC 6581 does, with the same relaxed rules
	//     and limits as the revision 2 path (see Responder.Negotiate), and
	//     the Reply starts with the header carrying the result (an ORD of
	//     0 is sent, and settled, as 1).
	//   - The initiator checks the Reply (R clear) as it checks an RFC
	//     6581 block: no header or IRD/ORD 0 gets an LLP Terminate with
	//     TermInvalidReqRep (ErrSMBDShort, ErrSMBDZero); an ORD above the
	//     IRD it sent and above MaxIRD the Terminate for an insufficient
	//     IRD (ErrInsufficientIRD); Params.IRD is the Reply's ORD,
	//     Params.ORD its IRD lowered to MaxORD. Values above the limits
	//     (a little-endian sender's, say) are clamped, never masked.
	//   - A Reject of a Request that carried the header carries one too
	//     (this side's IRD/ORD limits), and the initiator takes 8 bytes off
	//     a rejecting Reply's private data when it has that many.
	//   - The header counts in PD_Length: MaxPrivateData bounds header and
	//     ULP private data together (MaxULPPrivateDataIn). Revision 1 has
	//     no P2P or RTR negotiation; P2P is ignored.
	//
	// Both sides must agree on it out of band, as SMB Direct does: MPA
	// cannot tell a header from 8 bytes of ULP private data. A side with
	// SMBD off hands the peer's header to its ULP as private data; a side
	// with it on reads the first 8 bytes of the peer's private data as the
	// header, and only a short or zero one is caught.
	SMBD bool
}

// Resolve returns a copy of p (nil means the zero Policy) with defaults
// filled in, or an error naming the first field out of range. Resolving a
// resolved Policy changes nothing.
func (p *Policy) Resolve() (Policy, error) {
	var c Policy
	if p != nil {
		c = *p
	}
	if c.Rev == 0 {
		c.Rev = Rev2
	}
	if c.Rev != Rev1 && c.Rev != Rev2 {
		return c, fmt.Errorf("mpa: policy revision %d not supported (1 or 2)", c.Rev)
	}
	if c.CRC > CRCStrict {
		return c, fmt.Errorf("mpa: policy CRC %v", c.CRC)
	}
	if c.Markers > MarkersRequest {
		return c, fmt.Errorf("mpa: policy markers %v", c.Markers)
	}
	if c.RTRs == 0 {
		c.RTRs = DefaultRTRs
	}
	if c.RTRs&^RTRSetAll != 0 {
		return c, fmt.Errorf("mpa: policy RTR set %v", c.RTRs)
	}
	if c.MaxIRD == 0 {
		c.MaxIRD = DefaultMaxIRDORD
	}
	if c.MaxORD == 0 {
		c.MaxORD = DefaultMaxIRDORD
	}
	if c.MaxIRD < 0 || c.MaxIRD > MaxIRDORD || c.MaxORD < 0 || c.MaxORD > MaxIRDORD {
		return c, fmt.Errorf("mpa: policy IRD/ORD limits %d/%d outside 1..%d", c.MaxIRD, c.MaxORD, MaxIRDORD)
	}
	if c.MaxPrivateData == 0 {
		c.MaxPrivateData = MaxPrivateData
	}
	if c.MaxPrivateData < 0 || c.MaxPrivateData > MaxPrivateData {
		return c, fmt.Errorf("mpa: policy private data limit %d outside 1..%d", c.MaxPrivateData, MaxPrivateData)
	}
	if c.Rev == Rev2 && c.MaxPrivateData < EnhancedLen {
		return c, fmt.Errorf("mpa: policy private data limit %d leaves no room for the RFC 6581 block", c.MaxPrivateData)
	}
	if c.SMBD && c.MaxPrivateData < SMBDHeaderLen {
		return c, fmt.Errorf("mpa: policy private data limit %d leaves no room for the [MS-SMBD] header", c.MaxPrivateData)
	}
	return c, nil
}

// firstSendDelay returns the delay to put into Params, given how long the
// Reply took to come. By default it is DefaultFirstSendDelay, stretched to
// twice the Request-to-Reply time (at most MaxFirstSendDelay) for a slow
// peer: Linux siw attaches its receive path only after sending its Reply,
// and a peer that was slow to answer is slow to do that too. In the
// interop lab (siw under qemu TCG on a loaded host) the Reply took ~45 ms
// and an FPDU sent 9 ms after it was lost.
func (p *Policy) firstSendDelay(replyTime time.Duration) time.Duration {
	switch {
	case p.FirstSendDelay == 0:
		return min(max(DefaultFirstSendDelay, 2*replyTime), MaxFirstSendDelay)
	case p.FirstSendDelay < 0:
		return 0
	}
	return p.FirstSendDelay
}

// checkIRDORD returns an error wrapping ErrIRDORDLimit unless ird is in
// 0..p.MaxIRD and ord in 0..p.MaxORD: the IRD and ORD a side may send, as
// initiator (Initiator.Request) and as responder (Responder.Negotiate).
func (p *Policy) checkIRDORD(ird, ord int) error {
	if ird < 0 || ird > p.MaxIRD || ord < 0 || ord > p.MaxORD {
		return fmt.Errorf("%w: IRD %d ORD %d, limits %d/%d", ErrIRDORDLimit, ird, ord, p.MaxIRD, p.MaxORD)
	}
	return nil
}

// checkPrivateData returns an error wrapping ErrPrivateDataLimit when pd
// is more ULP private data than the frame f this side sends (Request,
// Reply or reject) may carry under p, with f's RFC 6581 block and
// [MS-SMBD] header (MaxULPPrivateDataIn).
func (p *Policy) checkPrivateData(pd []byte, f *Frame) error {
	if max := p.MaxULPPrivateDataIn(f); len(pd) > max {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrPrivateDataLimit, len(pd), max)
	}
	return nil
}

// MaxULPPrivateData returns the most ULP private data (without the RFC 6581
// block) a frame may carry under p, with or without that block.
func (p *Policy) MaxULPPrivateData(enhanced bool) int {
	n := p.MaxPrivateData
	if n == 0 {
		n = MaxPrivateData
	}
	if enhanced {
		n -= EnhancedLen
	}
	return max(n, 0)
}

// MaxULPPrivateDataIn returns the most ULP private data the frame f may
// carry under p: the private data limit less the RFC 6581 block when
// f.Enhanced and less the [MS-SMBD] header when f.SMBD.
func (p *Policy) MaxULPPrivateDataIn(f *Frame) int {
	n := p.MaxULPPrivateData(f.Enhanced)
	if f.SMBD {
		n -= SMBDHeaderLen
	}
	return max(n, 0)
}
