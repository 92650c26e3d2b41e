package rdmap

import "fmt"

// WROpcode is the operation of a send work request.
type WROpcode uint8

// Send queue operations. Solicited Event and Fence are flags of the work
// request (SendWR.Solicited turns a Send into Send with SE).
const (
	// WRSend sends a message into the peer's next receive buffer.
	WRSend WROpcode = iota
	// WRSendInv is Send with Invalidate: the peer also invalidates
	// InvalidateSTag, one of its own STags.
	WRSendInv
	// WRWrite is an RDMA Write to Remote.
	WRWrite
	// WRWriteImm is an RDMA Write followed by an RFC 7306 Immediate Data
	// message carrying Imm (consumes a receive at the peer).
	WRWriteImm
	// WRRead is an RDMA Read of SGL[0].Length bytes from Remote into
	// SGL[0] (one SGE, as siw).
	WRRead
	// WRLocalInv invalidates the local STag InvalidateSTag in SQ order.
	WRLocalInv
	// WRImmData sends an RFC 7306 Immediate Data message carrying Imm.
	WRImmData
	// WRFetchAdd is the RFC 7306 Atomic Fetch-and-Add of CompareAdd to the
	// 8 bytes at Remote (masked by AddMask); the original value lands in
	// SGL[0] (8 bytes).
	WRFetchAdd
	// WRCmpSwap is the RFC 7306 Atomic Compare-and-Swap at Remote: if the
	// value equals CompareAdd (under CompareMask) it becomes Swap (under
	// SwapMask); the original value lands in SGL[0] (8 bytes).
	WRCmpSwap
	// WRRegMR maps the fast-register region Mem.MR (PD.AllocMR) over
	// Mem.Mem with rights Mem.Access and key Mem.Key, in SQ order: when
	// the send engine takes the next work request, the region is valid
	// with its new STag, so a Send advertising the STag posted right
	// after it needs no wait for its completion (nor a Fence), and a
	// peer's access that follows that Send finds the region mapped. It
	// completes with WCRegMR (signaled or on error): a local QP
	// operation error while the region is valid or with its previous
	// key, a local protection error if the region was deregistered
	// meanwhile. What can be checked at PostSend is (see MemOp).
	WRRegMR
	// WRBindMW binds type 2 window Mem.MW over Mem.Length bytes at
	// Mem.Offset of Mem.MR, with rights Mem.Access and key Mem.Key, in SQ
	// order (as WRRegMR), and associates it with this QP. It completes
	// with WCBindMW: a local QP operation error while the window is bound
	// or with its current key, a local protection error when the region
	// is invalid, deregistered, without AccessMWBind or the rights, or too
	// short for the range, or the window deallocated.
	WRBindMW
)

var wrOpNames = [...]string{"send", "send_inv", "write", "write_imm", "read", "local_inv", "imm_data", "fetch_add", "cmp_swap", "reg_mr", "bind_mw"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpNames) {
		return wrOpNames[o]
	}
	return fmt.Sprintf("unknown(%d)", uint8(o))
}

// rfc7306 reports whether o needs RFC 7306 support from the peer.
func (o WROpcode) rfc7306() bool {
	return o == WRWriteImm || o == WRImmData || o == WRFetchAdd || o == WRCmpSwap
}

// SendWR is a send queue work request. PostSend copies it; the SGL and
// InlineData slices may be reused as soon as PostSend returns (the memory
// the SGEs name may not, except with InlineData, until completion).
type SendWR struct {
	ID uint64
	Op WROpcode
	// SGL names the local memory: the source of Sends and Writes, the
	// sink of a Read, the 8-byte result buffer of an atomic.
	SGL []SGE
	// InlineData, when not nil, is the payload of a Send or Write, copied
	// at post time (at most QPConfig.MaxInline bytes); SGL is ignored.
	InlineData []byte
	// Remote is the peer memory of Write, Read and atomics.
	Remote Remote
	// Signaled asks for a completion on success (errors always complete).
	// Completions come in SQ order, so a signaled completion also says
	// that every request posted before it has completed (an unsignaled
	// one that failed has its own completion, before it). An unsignaled
	// request's SQ slot is free once it has completed, without waiting
	// for a later signaled completion to be polled as verbs do: a
	// caller that counts its slots by the verbs rule never finds the SQ
	// full, one that never signals does not stall.
	Signaled bool
	// Solicited sets the Solicited Event bit of a Send or Immediate Data.
	Solicited bool
	// Fence holds the request until every earlier Read and atomic has
	// completed.
	Fence bool
	// InvalidateSTag is the remote STag of WRSendInv, the local one of
	// WRLocalInv (a region's or a type 2 window's).
	InvalidateSTag STag
	// Mem is the operand of WRRegMR and WRBindMW.
	Mem MemOp
	// Imm is the 8-byte immediate data of WRImmData and WRWriteImm.
	Imm uint64
	// Atomic operands. A zero CompareMask or SwapMask means all ones
	// (plain compare-and-swap); a zero AddMask is a plain add.
	CompareAdd, Swap               uint64
	AddMask, CompareMask, SwapMask uint64
}

// RecvWR is a receive work request: the buffer for one incoming Send (or
// Immediate Data message). PostRecv copies it.
//
// The SGL's total length may not exceed MaxRecvLen: a message's offset
// (the DDP MO) is 32 bits, so no more can be addressed. SGEs may overlap
// (as in verbs and siw): the payload is scattered in SGL order, so in an
// overlap the later SGE's bytes are the ones that stay.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// MaxRecvLen is the largest total SGL length of a receive work request:
// what the 32-bit message offset of an untagged DDP segment addresses.
const MaxRecvLen = 1<<32 - 1

// checkRecvSGL validates a receive's SGL (the SGE count is checked by
// the caller).
func checkRecvSGL(sgl []SGE) error {
	var total uint64
	for _, s := range sgl {
		if s.MR == nil {
			return ErrInvalidSGE
		}
		total += uint64(s.Length)
	}
	if total > MaxRecvLen {
		return ErrInvalidWR
	}
	return nil
}

// WCStatus is the outcome of a work request.
type WCStatus uint8

// Completion statuses (the verbs set siw uses).
const (
	WCSuccess      WCStatus = iota
	WCLocLenErr             // local length error (receive buffer too short)
	WCLocQPOpErr            // local QP operation error
	WCLocProtErr            // local protection error (bad local SGE)
	WCWRFlushErr            // flushed: the QP left RTS before the request completed
	WCRemAccessErr          // remote access error (the peer refused our STag access)
	WCRemOpErr              // remote operation error
	WCRemInvReqErr          // remote invalid request (e.g. a bad Invalidate STag)
	WCGeneralErr            // general error
)

var wcStatusNames = [...]string{"success", "local_length_error", "local_qp_operation_error", "local_protection_error", "flush_error", "remote_access_error", "remote_operation_error", "remote_invalid_request", "general_error"}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// WCOpcode says what kind of work request a completion is for.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCLocalInv
	WCImmData
	WCFetchAdd
	WCCmpSwap
	WCRecv    // a received Send
	WCRecvImm // a received Immediate Data message
	WCRegMR   // a WRRegMR
	WCBindMW  // a WRBindMW
)

var wcOpNames = [...]string{"send", "write", "read", "local_inv", "imm_data", "fetch_add", "cmp_swap", "recv", "recv_imm", "reg_mr", "bind_mw"}

func (o WCOpcode) String() string {
	if int(o) < len(wcOpNames) {
		return wcOpNames[o]
	}
	return fmt.Sprintf("unknown(%d)", uint8(o))
}

// WCFlags qualify a receive completion.
type WCFlags uint8

// Completion flags.
const (
	// WCWithInv: the Send invalidated InvalidatedSTag.
	WCWithInv WCFlags = 1 << iota
	// WCWithImm: Imm holds immediate data.
	WCWithImm
	// WCSolicited: the message carried the Solicited Event bit.
	WCSolicited
)

func (f WCFlags) String() string {
	var s string
	for _, x := range []struct {
		f WCFlags
		n string
	}{{WCWithInv, "with_inv"}, {WCWithImm, "with_imm"}, {WCSolicited, "solicited"}} {
		if f&x.f != 0 {
			if s != "" {
				s += "|"
			}
			s += x.n
		}
	}
	if rest := f &^ (WCWithInv | WCWithImm | WCSolicited); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("unknown(%#x)", uint8(rest))
	}
	return s
}

// WC is a work completion.
type WC struct {
	ID     uint64
	Status WCStatus
	Op     WCOpcode
	Flags  WCFlags
	// ByteLen is the number of bytes transferred (received, for receives).
	ByteLen         uint32
	Imm             uint64
	InvalidatedSTag STag
	QPN             uint32
}

func wcOpOf(op WROpcode) WCOpcode {
	switch op {
	case WRSend, WRSendInv:
		return WCSend
	case WRWrite, WRWriteImm:
		return WCWrite
	case WRRead:
		return WCRead
	case WRLocalInv:
		return WCLocalInv
	case WRImmData:
		return WCImmData
	case WRFetchAdd:
		return WCFetchAdd
	case WRRegMR:
		return WCRegMR
	case WRBindMW:
		return WCBindMW
	}
	return WCCmpSwap
}
