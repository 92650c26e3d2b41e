package testutil

import (
	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// RTRSTag is the STag Linux siw's RTRs name ("some HW may treat STag 0
// special", siw_qp_mpa_rts).
const RTRSTag = 1

// AppendRTR appends to b the FPDU of the RTR r as Linux siw sends it
// (siw_qp_mpa_rts): a zero-length RDMA Write to STag 1, TO 0; a zero-length
// RDMA Read Request (QN 1, MSN 1) with sink STag 0 and source STag 1; or a
// zero-length Send (QN 0, MSN 1). f frames it (CRC, markers).
func AppendRTR(b []byte, f *mpa.Framer, r mpa.RTR) []byte {
	var hdr []byte
	switch r {
	case mpa.RTRWrite:
		hdr = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true,
			RsvdULP: rdmap.ControlByte(rdmap.Version1, rdmap.OpWrite), STag: RTRSTag})
	case mpa.RTRRead:
		hdr = ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true,
			RsvdULP: rdmap.ControlByte(rdmap.Version1, rdmap.OpReadRequest), QN: rdmap.QNReadRequest, MSN: 1})
		hdr = rdmap.AppendReadRequest(hdr, &rdmap.ReadRequestFields{SrcSTag: RTRSTag})
	case mpa.RTRSend:
		return AppendSend(b, f, 1, nil)
	default:
		return b
	}
	return f.AppendFPDU(b, hdr, nil)
}

// AppendSend appends the FPDU of an RDMAP Send message of one segment with
// MSN msn carrying payload.
func AppendSend(b []byte, f *mpa.Framer, msn uint32, payload []byte) []byte {
	hdr := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true,
		RsvdULP: rdmap.ControlByte(rdmap.Version1, rdmap.OpSend), QN: rdmap.QNSend, MSN: msn})
	return f.AppendFPDU(b, hdr, payload)
}

// RTROf returns which RTR the ULPDU is, or mpa.RTRNone.
func RTROf(ulpdu []byte) mpa.RTR {
	h, err := ddp.Parse(ulpdu)
	if err != nil {
		return mpa.RTRNone
	}
	_, _, op := rdmap.Control(h.RsvdULP())
	switch {
	case h.Tagged() && op == rdmap.OpWrite && h.STag() == RTRSTag && len(ulpdu) == h.Len():
		return mpa.RTRWrite
	case !h.Tagged() && op == rdmap.OpReadRequest && h.QN() == rdmap.QNReadRequest && h.MSN() == 1:
		rr, err := rdmap.ParseReadRequest(ulpdu[h.Len():])
		if err == nil && rr.Size() == 0 && rr.SrcSTag() == RTRSTag {
			return mpa.RTRRead
		}
	case !h.Tagged() && op == rdmap.OpSend && h.QN() == rdmap.QNSend && h.MSN() == 1 && len(ulpdu) == h.Len():
		return mpa.RTRSend
	}
	return mpa.RTRNone
}
