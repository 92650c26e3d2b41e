package rdmap

import (
	"strings"
	"sync/atomic"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// STag is a steering tag (RFC 5041 §3): a 24-bit index into the device's
// STag table shifted left by 8, ORed with an 8-bit key, as Linux siw
// builds it (siw_mem.c). An STag with a stale key is invalid.
type STag = ddp.STag

// Access is a set of memory region access rights.
type Access uint8

// Access rights. Local read is always granted. As in verbs, remote write
// and remote atomic access require local write.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic
)

func (a Access) String() string {
	if a == 0 {
		return "local_read"
	}
	var s []string
	for _, f := range []struct {
		a Access
		n string
	}{{AccessLocalWrite, "local_write"}, {AccessRemoteWrite, "remote_write"}, {AccessRemoteRead, "remote_read"}, {AccessRemoteAtomic, "remote_atomic"}} {
		if a&f.a != 0 {
			s = append(s, f.n)
		}
	}
	return strings.Join(s, "|")
}

const accessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// mrValid is the valid bit of MR.st, above the 32-bit STag.
const mrValid = 1 << 32

// MR is a registered memory region. Its tagged offsets are zero-based: TO
// 0 is the first byte of the registered slice (IB_ZERO_BASED addressing).
// The registered memory must stay alive and must not be resliced or
// reused by the caller while the region is registered; remote peers may
// write into it at any time its access rights allow. An MR is safe for
// concurrent use.
type MR struct {
	dev    *Device
	pd     *PD
	buf    []byte
	access Access
	index  uint32
	mem    *Memory // nil for caller memory

	// st holds the current STag and, in bit 32, whether it is valid; one
	// word, so a check sees a consistent pair.
	st atomic.Uint64
	// refs counts the registration (1) plus in-flight users (placement,
	// transmission, queued Read Responses); the backing Memory is
	// released when it drops to zero.
	refs  atomic.Int64
	dereg atomic.Bool
	// placers counts the receive engines placing into the region right
	// now (between enterPlace and leavePlace); fenceWaiters the
	// invalidations waiting for them to leave (see fence).
	placers      atomic.Int32
	fenceWaiters atomic.Int32
}

// RegisterMemory registers buf with the given access rights and returns
// the new region, valid, with STag key 0 (as siw's reg_mr). buf may be
// caller memory or part of a Device.AllocMemory region.
func (pd *PD) RegisterMemory(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, ErrInvalidSGE
	}
	if access&^accessAll != 0 || (access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0) {
		return nil, ErrAccess
	}
	d := pd.dev
	mr := &MR{dev: d, pd: pd, buf: buf[:len(buf):len(buf)], access: access}
	mem, err := d.memoryOf(buf)
	if err != nil {
		return nil, err
	}
	mr.mem = mem
	idx, err := d.allocIndex(mr)
	if err != nil {
		if mem != nil {
			mem.release()
		}
		return nil, err
	}
	mr.index = idx
	if mem != nil && !mem.addMR(mr) {
		d.freeIndex(idx, mr)
		mem.release()
		return nil, ErrClosed
	}
	mr.refs.Store(1)
	mr.st.Store(mrValid | uint64(idx<<8))
	d.stats.mrs.Add(1)
	return mr, nil
}

// STag returns the region's current STag (used both as local key and as
// remote key, as siw does).
func (mr *MR) STag() STag { return STag(uint32(mr.st.Load())) }

// Valid reports whether the region's STag is valid (not invalidated, not
// deregistered).
func (mr *MR) Valid() bool { return mr.st.Load()&mrValid != 0 }

// Len returns the length of the region.
func (mr *MR) Len() int { return len(mr.buf) }

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// Access returns the region's access rights.
func (mr *MR) Access() Access { return mr.access }

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// SGE returns a scatter/gather element for n bytes at offset off of the
// region.
func (mr *MR) SGE(off, n int) SGE { return SGE{MR: mr, Offset: uint64(off), Length: uint32(n)} }

// Invalidate invalidates the region's STag now, as a Local Invalidate
// work request does in SQ order. As in verbs, invalidating an invalid
// region is not an error. When Invalidate returns, no byte reaches the
// region through the old STag any more, on any path: a segment being
// placed into it at that moment is cut (see Deregister).
func (mr *MR) Invalidate() error {
	if mr.dereg.Load() {
		return ErrClosed
	}
	mr.invalidate()
	return nil
}

// invalidate clears the valid bit and fences: it returns once no receive
// engine is placing into the region any more. The caller must not be
// placing into memory itself (no receive engine calls it mid-placement).
func (mr *MR) invalidate() {
	for {
		old := mr.st.Load()
		if mr.st.CompareAndSwap(old, old&^mrValid) {
			break
		}
	}
	mr.fence()
}

// fence waits until no receive engine is inside a placement into the
// region. Paired with enterPlace: the engine publishes itself in placers
// and then loads st; fence is called after st changed and then loads
// placers (both sequentially consistent), so either the engine sees the
// change and places nothing, or fence sees the engine and waits for it.
// An engine waiting in the poller for the peer's next bytes is poked
// (its read deadline set to now); it then finds the STag changed, cuts
// the segment and leaves. The wait is bounded by one read syscall or
// one copy of at most an FPDU.
func (mr *MR) fence() {
	if mr.placers.Load() == 0 {
		return
	}
	d := mr.dev
	mr.fenceWaiters.Add(1)
	d.fenceMu.Lock()
	for mr.placers.Load() != 0 {
		d.pokePlacers(mr)
		d.fenceCond.Wait()
	}
	d.fenceMu.Unlock()
	mr.fenceWaiters.Add(-1)
}

// enterPlace publishes that rx is about to write into mr, which it
// validated when the STag word was want. It reports false (and publishes
// nothing) when the word changed since: invalidated, deregistered or
// rekeyed. Every true must be paired with leavePlace.
func (rx *rxEngine) enterPlace(mr *MR, want uint64) bool {
	rx.placing.Store(mr)
	mr.placers.Add(1)
	if mr.st.Load() == want {
		return true
	}
	rx.leavePlace(mr)
	return false
}

// placeValid reports whether the region rx is placing into still has the
// STag word it was validated with; checked before each read syscall that
// writes into it.
func placeValid(mr *MR, want uint64) bool { return mr.st.Load() == want }

// leavePlace ends a placement and wakes the fences waiting for it.
func (rx *rxEngine) leavePlace(mr *MR) {
	if mr.placers.Add(-1) == 0 && mr.fenceWaiters.Load() > 0 {
		d := mr.dev
		d.fenceMu.Lock()
		d.fenceCond.Broadcast()
		d.fenceMu.Unlock()
	}
	rx.placing.Store(nil)
}

// Rekey gives an invalidated region a new 8-bit key and makes it valid
// again (the re-registration of a fast-register work request): old STags
// stay invalid.
func (mr *MR) Rekey(key uint8) (STag, error) {
	if mr.dereg.Load() {
		return 0, ErrClosed
	}
	old := mr.st.Load()
	if old&mrValid != 0 {
		return 0, ErrMRValid
	}
	s := uint64(mr.index<<8 | uint32(key))
	if !mr.st.CompareAndSwap(old, mrValid|s) {
		return 0, ErrBusy
	}
	return STag(s), nil
}

// Deregister invalidates the region and frees its STag. When it returns,
// no byte is placed into the region again by any receive path (tagged
// Write, Read Response, Send into a posted or SRQ receive, atomics): a
// segment being placed into it at that moment is cut, the rest of its
// FPDU discarded, and its QP ends with the Terminate for an invalid STag
// (an untagged receive: a local protection error). The wait is bounded
// by one read syscall. Work requests in flight that only read the
// region (Sends, Writes and Read Responses being transmitted) finish
// with it; the memory of an AllocMemory region is unmapped only after
// the last of them.
func (mr *MR) Deregister() error {
	if !mr.dereg.CompareAndSwap(false, true) {
		return ErrClosed
	}
	mr.invalidate()
	if mr.mem != nil {
		mr.mem.removeMR(mr)
	}
	mr.dev.freeIndex(mr.index, mr)
	mr.dev.stats.mrs.Add(-1)
	mr.release()
	return nil
}

// acquire takes an in-flight reference; it fails once the region is
// deregistered and idle.
func (mr *MR) acquire() bool {
	for {
		r := mr.refs.Load()
		if r <= 0 {
			return false
		}
		if mr.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (mr *MR) release() {
	if mr.refs.Add(-1) == 0 && mr.mem != nil {
		mr.mem.release()
	}
}

// accessErr classifies a failed memory access check, as siw_check_mem
// does; the Terminate codes are chosen from it per layer.
type accessErr uint8

const (
	accessOK accessErr = iota
	accessInvalidSTag
	accessBounds
	accessPD
	accessPerm
)

// check validates an access of n bytes at offset to through STag s, by a
// QP of pd needing perm, in siw's order: STag valid (with its key), PD,
// rights, bounds (a wrapping TO is a bounds error too).
func (mr *MR) check(pd *PD, s STag, perm Access, to, n uint64) accessErr {
	st := mr.st.Load()
	if st&mrValid == 0 || STag(uint32(st)) != s {
		return accessInvalidSTag
	}
	return mr.checkRest(pd, perm, to, n)
}

func (mr *MR) checkRest(pd *PD, perm Access, to, n uint64) accessErr {
	if mr.pd != pd {
		return accessPD
	}
	if mr.access&perm != perm {
		return accessPerm
	}
	if l := uint64(len(mr.buf)); to > l || n > l-to {
		return accessBounds
	}
	return accessOK
}

// checkLocal validates a local SGE: the region must be valid (any key),
// in pd, with perm, and in bounds.
func (mr *MR) checkLocal(pd *PD, perm Access, to, n uint64) accessErr {
	if mr.st.Load()&mrValid == 0 {
		return accessInvalidSTag
	}
	return mr.checkRest(pd, perm, to, n)
}

// ddpCode maps an access error to the DDP tagged buffer error code siw
// sends (siw_tagged_error): a missing right is reported as an invalid
// STag, the closest match RFC 5041 has.
func (e accessErr) ddpCode() uint8 {
	switch e {
	case accessBounds:
		return uint8(ddp.CodeBaseBounds)
	case accessPD:
		return uint8(ddp.CodeSTagNotAssoc)
	}
	return uint8(ddp.CodeInvalidSTag)
}

// rdmapCode maps an access error to the RDMAP remote protection error
// code siw sends (siw_rdmap_error).
func (e accessErr) rdmapCode() uint8 {
	switch e {
	case accessInvalidSTag:
		return wire.CodeInvalidSTag
	case accessBounds:
		return wire.CodeBaseBounds
	case accessPD:
		return wire.CodeSTagNotAssoc
	case accessPerm:
		return wire.CodeAccessRights
	}
	return wire.CodeUnspecified
}

// SGE is a scatter/gather element: Length bytes at Offset of MR.
type SGE struct {
	MR     *MR
	Offset uint64
	Length uint32
}

// Remote names remote memory: a peer's STag and a tagged offset.
type Remote struct {
	STag   STag
	Offset uint64
}
