package rdmap

import "os"

// Fast registration (FRWR): a region allocated without memory and mapped,
// in SQ order, by a register work request (IB_WR_REG_MR in Linux, the
// Fast-Register of RFC 5040's verbs); Local Invalidate and a received
// Send with Invalidate unmap it again.

// AllocMR allocates a fast-register memory region for mappings of up to
// maxPages pages (of os.Getpagesize bytes): its STag index is reserved at
// once, key 0, and it starts invalid: no memory, no rights, every access
// through its STag refused with the Terminate for an invalid STag.
//
// A WRRegMR work request maps it; see MemOp for what it may map. The
// region then cycles. It becomes valid, under its new STag, when the send
// engine takes the WRRegMR: after every earlier work request of that SQ
// was taken and before any later one is, so a peer that learnt the STag
// from a later Send finds it mapped; the WRRegMR's completion may come
// later than that. It becomes invalid again when a Local Invalidate
// (WRLocalInv) of its STag is taken, when a Send with Invalidate naming
// it is received (before that receive completes), or when MR.Invalidate
// is called; from then on no peer byte lands in the memory (see MR) and
// the caller may reuse it, while the region keeps its reference to an
// AllocMemory region (see MemOp). Each registration must use a key
// different from the previous one, so that STags handed out before stay
// invalid. Deregister frees the region at any point (as for
// RegisterMemory regions).
func (pd *PD) AllocMR(maxPages int) (*MR, error) {
	if maxPages <= 0 {
		return nil, ErrInvalidWR
	}
	d := pd.dev
	mr := &MR{dev: d, pd: pd, kind: mrFast, maxPages: maxPages}
	idx, err := d.allocIndex(mr)
	if err != nil {
		return nil, err
	}
	mr.index = idx
	mr.refs.Store(1)
	mr.st.Store(uint64(idx << 8))
	d.stats.mrs.Add(1)
	return mr, nil
}

// MaxPages returns the page limit of a fast-register region (AllocMR), 0
// for other regions.
func (mr *MR) MaxPages() int { return mr.maxPages }

// MemOp is the operand of the memory work requests, WRRegMR and WRBindMW
// (SendWR.Mem). PostSend copies it.
//
// WRRegMR maps fast-register region MR (from PD.AllocMR, in the QP's PD)
// over Mem with rights Access and STag key Key. Mem is memory the device
// can reach: Go memory or part of a Device.AllocMemory region (as
// RegisterMemory takes), not straddling a mapping's edge, covering at
// most MR.MaxPages pages. Its tagged offsets are zero-based (TO 0 is
// Mem[0]). The memory must stay alive, and an AllocMemory region open,
// from PostSend until the region is deregistered: an AllocMemory region
// a fast-register region has been mapped over refuses Close (ErrBusy)
// until then, even after the region moved on to other memory.
//
// WRBindMW binds type 2 window MW (see MW) over Length bytes at offset
// Offset of region MR with rights Access (remote rights only, a subset of
// MR's; MR needs AccessMWBind) and key Key; ZeroBased makes the window's
// tagged offsets start at 0, otherwise they are MR's (Offset to
// Offset+Length-1).
type MemOp struct {
	MR        *MR
	MW        *MW
	Mem       []byte
	Offset    uint64
	Length    uint64
	Access    Access
	Key       uint8
	ZeroBased bool
}

// pages returns the number of pages b touches.
func pages(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	ps := uintptr(os.Getpagesize())
	lo, hi := sliceRange(b)
	return int((hi-1)/ps - lo/ps + 1)
}

// validateRegMR checks a WRRegMR synchronously, at PostSend: what does
// not depend on the work requests ahead of it in the SQ.
func (qp *QP) validateRegMR(op *MemOp) error {
	mr := op.MR
	switch {
	case mr == nil || mr.kind != mrFast:
		return ErrInvalidWR
	case mr.pd != qp.pd:
		return ErrWrongPD
	case len(op.Mem) == 0 || pages(op.Mem) > mr.maxPages:
		return ErrInvalidSGE
	}
	if err := checkAccess(op.Access); err != nil {
		return err
	}
	mem, err := qp.dev.memoryOf(op.Mem)
	if err != nil {
		return err
	}
	if mem != nil {
		mem.release()
	}
	return nil
}

// execRegMR executes a WRRegMR when the send engine takes it, in SQ
// order: work requests before it saw the region as it was, work requests
// after it see it registered. Refused with a local QP operation error
// while the region is valid or with the key of the previous
// registration, a local protection error once it is deregistered or when
// its memory was closed since PostSend.
func (qp *QP) execRegMR(op *MemOp) WCStatus {
	mr := op.MR
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dereg.Load() {
		return WCLocProtErr
	}
	old := mr.st.Load()
	if old&mrValid != 0 || (old&mrUsed != 0 && uint8(old) == op.Key) {
		return WCLocQPOpErr
	}
	mem, err := qp.dev.memoryOf(op.Mem)
	if err != nil {
		return WCLocProtErr
	}
	if mem != nil {
		pinned := false
		for _, m := range mr.mems {
			if m == mem {
				pinned = true
			}
		}
		switch {
		case pinned:
			mem.release()
		case !mem.addMR(mr):
			mem.release()
			return WCLocProtErr
		default:
			mr.mems = append(mr.mems, mem)
		}
	}
	mr.bind.Store(&mrBinding{buf: op.Mem[:len(op.Mem):len(op.Mem)], access: op.Access})
	mr.st.Store(mrValid | mrUsed | uint64(mr.index<<8|uint32(op.Key)))
	return WCSuccess
}

// invalidateSTag invalidates STag s for qp: a Local Invalidate (remote
// false) or a received Send with Invalidate (remote true). It reports
// accessInvalidSTag for an STag that is not valid with that key,
// accessPD for one of another PD (or a type 2 window bound on another
// QP), accessPerm for one that may not be invalidated that way (a type 1
// window). On success the fence has been passed: no peer byte lands
// through s any more.
func (d *Device) invalidateSTag(qp *QP, s STag, remote bool) accessErr {
	mr := d.lookupMR(s)
	if mr == nil || STag(uint32(mr.st.Load())) != s {
		return accessInvalidSTag
	}
	if mr.pd != qp.pd {
		return accessPD
	}
	switch mr.kind {
	case mrWindow1:
		return accessPerm
	case mrWindow2:
		if b := mr.bind.Load(); remote && b != nil && b.qp != qp {
			return accessPD
		}
	}
	if !mr.invalidateSTag(s) {
		return accessInvalidSTag
	}
	return accessOK
}
