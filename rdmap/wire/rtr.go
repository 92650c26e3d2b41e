package wire

import (
	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
)

// RTRSTag is the STag of the zero-length RDMA Write RTR and the Data
// Source STag of the zero-length Read Request RTR: 1, as Linux siw sends
// them ("some HW may treat STag 0 special", siw_qp_mpa_rts).
const RTRSTag ddp.STag = 1

// AppendRTR appends to b the DDP and RDMAP headers of the peer-to-peer
// ready-to-receive message r (RFC 6581 §3) as Linux siw sends it
// (siw_qp_mpa_rts), and returns the extended slice:
//
//	mpa.RTRWrite  zero-length RDMA Write to STag RTRSTag, TO 0 (tagged)
//	mpa.RTRRead   zero-length Read Request on QN 1, MSN 1, MO 0, with
//	              sink STag 0, TO 0 and source STag RTRSTag, TO 0
//	mpa.RTRSend   zero-length Send on QN 0, MSN 1, MO 0
//
// The RTR is the first message the initiator sends, so an untagged one
// carries MSN 1; a sender that counts MSNs must count it on its queue
// (QNReadRequest or QNSend). The message has no payload: it is one FPDU
// whose ULPDU is exactly the appended bytes. For any other r (mpa.RTRNone
// included) AppendRTR appends nothing.
func AppendRTR(b []byte, r mpa.RTR) []byte {
	switch r {
	case mpa.RTRWrite:
		return ddp.AppendTagged(b, &ddp.TaggedFields{Last: true,
			RsvdULP: ControlByte(Version1, OpWrite), STag: RTRSTag})
	case mpa.RTRRead:
		b = ddp.AppendUntagged(b, &ddp.UntaggedFields{Last: true,
			RsvdULP: ControlByte(Version1, OpReadRequest), QN: QNReadRequest, MSN: 1})
		return AppendReadRequest(b, &ReadRequestFields{SrcSTag: RTRSTag})
	case mpa.RTRSend:
		return ddp.AppendUntagged(b, &ddp.UntaggedFields{Last: true,
			RsvdULP: ControlByte(Version1, OpSend), QN: QNSend, MSN: 1})
	}
	return b
}
