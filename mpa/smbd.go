package mpa

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The [MS-SMBD] IRD/ORD Negotiate Header ([MS-SMBD] section 6.1, in
// "Appendix A: RDMA Provider IRD/ORD Negotiation"): for iWARP providers that
// speak MPA revision 1, which has no RFC 6581 block, SMB Direct has each
// side put its IRD and ORD as the first 8 bytes of the MPA private data.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              IRD                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              ORD                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// IRD and ORD are 32-bit unsigned values, "the Incoming [Outgoing] RDMA Read
// Depth currently in use by the sending peer on the connection", and each
// "has to be greater than zero" ([MS-SMBD] section 6.1). The section's
// diagram names no byte order; they are sent in network byte order
// (big-endian), as the rest of the MPA frame, as Linux's SMB Direct client
// and server read them and as the 2025 Linux siw patch series that was
// tested against Windows with a Chelsio T404 sends them. Old Linux SMB
// Direct clients sent them little-endian: such a value reads here as a
// huge one and is negotiated down like any value over the limits.
//
// Nothing on the wire says the header is there: a revision 1 frame's
// private data is opaque to MPA. Both sides must agree on it out of band,
// as SMB Direct does (it is used on SMB Direct's port 5445), by setting
// Policy.SMBD. The rules gosiw applies are spelled out on Policy.SMBD.

// SMBDHeaderLen is the length of the [MS-SMBD] IRD/ORD Negotiate Header.
const SMBDHeaderLen = 8

// Errors for a frame that should carry the [MS-SMBD] header and does not
// carry a valid one. A responder answers them with a Reply with R set, an
// initiator with an LLP Terminate (TermInvalidReqRep).
var (
	// ErrSMBDShort: the private data is shorter than the 8-byte header.
	ErrSMBDShort = errors.New("mpa: private data shorter than the [MS-SMBD] IRD/ORD header")
	// ErrSMBDZero: the header's IRD or ORD is 0 ([MS-SMBD] section 6.1:
	// each "has to be greater than zero").
	ErrSMBDZero = errors.New("mpa: [MS-SMBD] IRD/ORD header with IRD or ORD 0")
)

// AppendSMBDHeader appends the 8-byte [MS-SMBD] IRD/ORD Negotiate Header
// carrying ird and ord (big-endian) to b. It writes any value, 0 included,
// so that tests and probes can build bad headers.
func AppendSMBDHeader(b []byte, ird, ord uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, ird)
	return binary.BigEndian.AppendUint32(b, ord)
}

// ParseSMBDHeader decodes the [MS-SMBD] IRD/ORD Negotiate Header at the
// start of pd. It returns ErrSMBDShort (and zeros) when pd has fewer than
// SMBDHeaderLen bytes, and ErrSMBDZero, with both values decoded, when IRD
// or ORD is 0.
func ParseSMBDHeader(pd []byte) (ird, ord uint32, err error) {
	if len(pd) < SMBDHeaderLen {
		return 0, 0, fmt.Errorf("%w: %d bytes", ErrSMBDShort, len(pd))
	}
	ird, ord = binary.BigEndian.Uint32(pd), binary.BigEndian.Uint32(pd[4:])
	if ird == 0 || ord == 0 {
		return ird, ord, fmt.Errorf("%w: IRD %d ORD %d", ErrSMBDZero, ird, ord)
	}
	return ird, ord, nil
}

// SplitSMBD takes the [MS-SMBD] IRD/ORD Negotiate Header off the front of
// f.PrivateData: on success f.SMBD is set, f.SMBDIRD and f.SMBDORD hold
// the header's values and f.PrivateData is what follows it (the ULP's
// private data; it still aliases the same buffer). With ErrSMBDZero the
// header is taken off all the same (the values are in f); with
// ErrSMBDShort f is unchanged. ParseFrame never does this itself: only
// the handshake knows, from Policy.SMBD, that the header is there. A frame
// already split (f.SMBD set) is left alone.
func (f *Frame) SplitSMBD() error {
	if f.SMBD {
		return nil
	}
	ird, ord, err := ParseSMBDHeader(f.PrivateData)
	if errors.Is(err, ErrSMBDShort) {
		return err
	}
	f.SMBD, f.SMBDIRD, f.SMBDORD = true, ird, ord
	f.PrivateData = f.PrivateData[SMBDHeaderLen:]
	return err
}

// AdvertisedIRDORD returns the IRD and ORD the frame's sender advertised:
// the [MS-SMBD] header's when f.SMBD (values above math.MaxInt32 reported
// as math.MaxInt32), else the RFC 6581 block's when f.Enhanced, else 0 and
// 0. (A frame has both only when a peer answered a revision 1 Request
// carrying the header with a revision 2 enhanced Reply; the header, which
// the Request asked for, counts.)
func (f *Frame) AdvertisedIRDORD() (ird, ord int) {
	switch {
	case f.SMBD:
		return int(min(f.SMBDIRD, math.MaxInt32)), int(min(f.SMBDORD, math.MaxInt32))
	case f.Enhanced:
		return int(f.IRD), int(f.ORD)
	}
	return 0, 0
}

// smbdValue returns v (an IRD or ORD this side negotiated, never negative)
// as the header carries it: at least 1, since [MS-SMBD] section 6.1 wants
// values greater than zero.
func smbdValue(v int) uint32 { return uint32(max(v, 1)) }
