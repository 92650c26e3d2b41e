package testutil

import (
	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// AppendRTR appends to b the FPDU of the RTR r as Linux siw sends it:
// the headers wire.AppendRTR builds, framed by f (CRC, markers). For
// mpa.RTRNone it appends nothing.
func AppendRTR(b []byte, f *mpa.Framer, r mpa.RTR) []byte {
	hdr := wire.AppendRTR(nil, r)
	if len(hdr) == 0 {
		return b
	}
	return f.AppendFPDU(b, hdr, nil)
}

// AppendSend appends the FPDU of an RDMAP Send message of one segment with
// MSN msn carrying payload.
func AppendSend(b []byte, f *mpa.Framer, msn uint32, payload []byte) []byte {
	hdr := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true,
		RsvdULP: wire.ControlByte(wire.Version1, wire.OpSend), QN: wire.QNSend, MSN: msn})
	return f.AppendFPDU(b, hdr, payload)
}

// RTROf returns which RTR the ULPDU is, or mpa.RTRNone.
func RTROf(ulpdu []byte) mpa.RTR {
	h, err := ddp.Parse(ulpdu)
	if err != nil {
		return mpa.RTRNone
	}
	_, _, op := wire.Control(h.RsvdULP())
	switch {
	case h.Tagged() && op == wire.OpWrite && h.STag() == wire.RTRSTag && len(ulpdu) == h.Len():
		return mpa.RTRWrite
	case !h.Tagged() && op == wire.OpReadRequest && h.QN() == wire.QNReadRequest && h.MSN() == 1:
		rr, err := wire.ParseReadRequest(ulpdu[h.Len():])
		if err == nil && rr.Size() == 0 && rr.SrcSTag() == wire.RTRSTag {
			return mpa.RTRRead
		}
	case !h.Tagged() && op == wire.OpSend && h.QN() == wire.QNSend && h.MSN() == 1 && len(ulpdu) == h.Len():
		return mpa.RTRSend
	}
	return mpa.RTRNone
}
