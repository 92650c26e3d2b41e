package rdmap

import (
	"strings"
	"sync"
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
	// AccessMWBind lets memory windows be bound over the region (MW.Bind,
	// WRBindMW), as IBV_ACCESS_MW_BIND. A window grants remote peers at
	// most the region's own remote rights.
	AccessMWBind
)

func (a Access) String() string {
	if a == 0 {
		return "local_read"
	}
	var s []string
	for _, f := range []struct {
		a Access
		n string
	}{{AccessLocalWrite, "local_write"}, {AccessRemoteWrite, "remote_write"}, {AccessRemoteRead, "remote_read"}, {AccessRemoteAtomic, "remote_atomic"}, {AccessMWBind, "mw_bind"}} {
		if a&f.a != 0 {
			s = append(s, f.n)
		}
	}
	return strings.Join(s, "|")
}

const (
	accessAll    = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind
	accessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// checkAccess reports whether a is a valid set of region rights: known
// bits only, and remote write or atomic only with local write (verbs).
func checkAccess(a Access) error {
	if a&^accessAll != 0 || (a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0) {
		return ErrAccess
	}
	return nil
}

// mrValid is the valid bit of MR.st, above the 32-bit STag; mrUsed says a
// fast-register region or a window has been mapped at least once (its
// key must change with each mapping after that).
const (
	mrValid = 1 << 32
	mrUsed  = 1 << 33
)

// MR is a registered memory region. Its tagged offsets are zero-based: TO
// 0 is the first byte of the registered slice (IB_ZERO_BASED addressing).
// The registered memory must stay alive and must not be resliced or
// reused by the caller while the region is registered; remote peers may
// write into it at any time its access rights allow. An MR is safe for
// concurrent use.
//
// A region comes from PD.RegisterMemory (valid at once over the given
// memory) or PD.AllocMR (a fast-register region: invalid until a WRRegMR
// work request maps it, which it may do again after each invalidation,
// over other memory and with other rights; see AllocMR). Memory windows
// (MW) may be bound over a region with AccessMWBind.
//
// Life cycle relative to the SQ and to peers: a work request's effect on
// the region (WRRegMR, WRLocalInv, WRBindMW over it) happens when the send
// engine takes that work request, after every earlier work request of the
// same SQ has been taken and before any later one is; a peer's access is
// checked when its segment arrives, against the state at that moment.
// Once an invalidation has taken effect (MR.Invalidate returned, the
// Local Invalidate completed, the Send with Invalidate's receive
// completed), no peer byte lands in the memory through the old STag, and
// the caller may reuse the memory for anything, except that work requests
// still in flight that read it (Sends, Writes, Read Responses already
// queued) may still read it until they complete.
type MR struct {
	dev   *Device
	pd    *PD
	index uint32
	kind  mrKind
	// maxPages bounds a fast-register region's mappings (PD.AllocMR).
	maxPages int
	// mw is the window this is the STag entry of (kind mrWindow1/2).
	mw *MW

	// bind is the current mapping: set once by RegisterMemory, by each
	// fast registration (WRRegMR) and each window bind, always before st
	// becomes valid with the new key. Immutable once published, so a
	// check sees one consistent mapping; see check.
	bind atomic.Pointer[mrBinding]

	// mu guards mems, windows and the transitions of dereg against binds.
	mu sync.Mutex
	// mems are the AllocMemory regions the region has been mapped over
	// (one for RegisterMemory; every one a fast registration used), each
	// with a reference released when refs drops to zero. +checklocks:mu
	mems []*Memory
	// windows are the memory windows bound over the region now.
	// +checklocks:mu
	windows map[*MR]struct{}

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

// mrKind says what an STag table entry is.
type mrKind uint8

const (
	mrRegular mrKind = iota // PD.RegisterMemory
	mrFast                  // PD.AllocMR, mapped by WRRegMR
	mrWindow1               // the STag of a type 1 memory window
	mrWindow2               // the STag of a type 2 memory window
)

func (k mrKind) window() bool { return k == mrWindow1 || k == mrWindow2 }

// mrBinding is one mapping of an STag: the bytes it names, the rights it
// grants, the tagged offset of buf[0], and for a window the region it is
// bound over (and, type 2, the QP it was bound on). Never modified once
// published in MR.bind.
type mrBinding struct {
	buf    []byte
	access Access
	base   uint64
	parent *MR
	qp     *QP
}

// RegisterMemory registers buf with the given access rights and returns
// the new region, valid, with STag key 0 (as siw's reg_mr). buf may be
// caller memory or part of a Device.AllocMemory region.
func (pd *PD) RegisterMemory(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, ErrInvalidSGE
	}
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	d := pd.dev
	mr := &MR{dev: d, pd: pd}
	mem, err := d.memoryOf(buf)
	if err != nil {
		return nil, err
	}
	idx, err := d.allocIndex(mr)
	if err != nil {
		if mem != nil {
			mem.release()
		}
		return nil, err
	}
	mr.index = idx
	if mem != nil {
		if !mem.addMR(mr) {
			d.freeIndex(idx, mr)
			mem.release()
			return nil, ErrClosed
		}
		mr.mems = []*Memory{mem}
	}
	mr.bind.Store(&mrBinding{buf: buf[:len(buf):len(buf)], access: access})
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

// Len returns the length of the region's current mapping (0 for a
// fast-register region never registered).
func (mr *MR) Len() int { return len(mr.Bytes()) }

// Bytes returns the memory of the region's current mapping: the
// registered slice, or the memory of a fast-register region's latest
// registration (nil before the first one).
func (mr *MR) Bytes() []byte {
	if b := mr.bind.Load(); b != nil {
		return b.buf
	}
	return nil
}

// Access returns the rights of the region's current mapping.
func (mr *MR) Access() Access {
	if b := mr.bind.Load(); b != nil {
		return b.access
	}
	return 0
}

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// SGE returns a scatter/gather element for n bytes at offset off of the
// region.
func (mr *MR) SGE(off, n int) SGE { return SGE{MR: mr, Offset: uint64(off), Length: uint32(n)} }

// Invalidate invalidates the region's STag now, as a Local Invalidate
// work request does in SQ order. As in verbs, invalidating an invalid
// region is not an error. When Invalidate returns, no byte reaches the
// region through the old STag any more, on any path: a segment being
// placed into it at that moment is cut (see Deregister). The memory
// windows bound over the region are unbound with it (each with the same
// fence) before Invalidate returns.
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
// A region's windows are invalidated with it (each fenced the same way);
// a window leaves its region's set of bound windows.
func (mr *MR) invalidate() { mr.invalidateSTag(0) }

// invalidateSTag is invalidate for STag s only: it reports false, and
// does nothing, when the region's STag is no longer s (re-registered or
// re-bound since the caller looked it up). s 0 matches any STag (no
// region has STag index 0).
func (mr *MR) invalidateSTag(s STag) bool {
	for {
		old := mr.st.Load()
		if s != 0 && STag(uint32(old)) != s {
			return false
		}
		if mr.st.CompareAndSwap(old, old&^mrValid) {
			break
		}
	}
	if mr.kind.window() {
		if b := mr.bind.Load(); b != nil {
			p := b.parent
			p.mu.Lock()
			delete(p.windows, mr)
			p.mu.Unlock()
		}
	} else {
		mr.mu.Lock()
		ws := mr.windows
		mr.windows = nil
		mr.mu.Unlock()
		for w := range ws {
			w.invalidate()
		}
	}
	mr.fence()
	return true
}

// fence waits until no receive engine is inside a placement into the
// region. Paired with enterPlace: the engine publishes itself in placers
// and then loads st; fence is called after st changed and then loads
// placers (both sequentially consistent), so either the engine sees the
// change and places nothing, or fence sees the engine and waits for it.
// An engine waiting in the poller for the peer's next bytes is poked
// (its read deadline set to now); it then finds the STag changed, cuts
// the segment and leaves. The wait is bounded by one read syscall or
// the copies of one buffer's FPDUs (a run, rxEngine.wholeRun).
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
	if rx.placing.Load() != mr {
		rx.placing.Store(mr)
	}
	mr.placers.Add(1)
	if mr.st.Load() == want {
		rx.inPlace = true
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
// rx.placing stays (see rxEngine.placing).
func (rx *rxEngine) leavePlace(mr *MR) {
	rx.inPlace = false
	if mr.placers.Add(-1) == 0 && mr.fenceWaiters.Load() > 0 {
		d := mr.dev
		d.fenceMu.Lock()
		d.fenceCond.Broadcast()
		d.fenceMu.Unlock()
	}
}

// Rekey gives an invalidated region a new 8-bit key and makes it valid
// again over the same memory and rights: old STags stay invalid. It
// takes effect at once, outside SQ order; WRRegMR is the work request
// that registers a fast-register region in SQ order.
func (mr *MR) Rekey(key uint8) (STag, error) {
	if mr.dereg.Load() {
		return 0, ErrClosed
	}
	if mr.kind.window() || mr.bind.Load() == nil {
		return 0, ErrMRInvalid
	}
	old := mr.st.Load()
	if old&mrValid != 0 {
		return 0, ErrMRValid
	}
	s := uint64(mr.index<<8 | uint32(key))
	if !mr.st.CompareAndSwap(old, old&mrUsed|mrValid|s) {
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
// with it; the memory of an AllocMemory region (every one a fast-register
// region was ever mapped over) is unmapped only after the last of them.
//
// As in verbs, a region with memory windows bound over it is not
// deregistered: Deregister fails with ErrBusy and changes nothing
// (unbind or deallocate the windows, or invalidate the region, which
// invalidates its windows, first).
func (mr *MR) Deregister() error {
	mr.mu.Lock()
	if len(mr.windows) > 0 {
		mr.mu.Unlock()
		return ErrBusy
	}
	if !mr.dereg.CompareAndSwap(false, true) {
		mr.mu.Unlock()
		return ErrClosed
	}
	mems := mr.mems
	mr.mu.Unlock()
	mr.invalidate()
	for _, mem := range mems {
		mem.removeMR(mr)
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

// release drops an in-flight reference (acquire's, or the region's own
// at Deregister); the last one lets go of the region's memory (idle).
func (mr *MR) release() {
	if mr.refs.Add(-1) == 0 {
		mr.idle()
	}
}

// idle lets go of the memory of a region whose last reference dropped
// (release's slow path, out of line so that release inlines).
func (mr *MR) idle() {
	mr.mu.Lock()
	mems := mr.mems
	mr.mems = nil
	mr.mu.Unlock()
	for _, mem := range mems {
		mem.release()
	}
}

// pin returns the region whose references keep the memory of binding b
// mapped: the region itself, or a window's region.
func (mr *MR) pin(b *mrBinding) *MR {
	if b != nil && b.parent != nil {
		return b.parent
	}
	return mr
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

// check validates a remote access of n bytes at tagged offset to through
// STag s by qp needing perm, in siw's order: STag valid (with its key),
// PD, rights, bounds (a wrapping TO is a bounds error too); a window is
// checked against its QP (type 2) and its region's validity as well. It
// returns the n bytes named, from the same mapping it checked (a
// concurrent re-registration or re-bind cannot make them stale in a way
// that matters: it changes the STag word, which enterPlace rechecks).
func (mr *MR) check(qp *QP, s STag, perm Access, to, n uint64) ([]byte, accessErr) {
	st := mr.st.Load()
	if st&mrValid == 0 || STag(uint32(st)) != s {
		return nil, accessInvalidSTag
	}
	b := mr.bind.Load()
	if b == nil {
		return nil, accessInvalidSTag
	}
	if mr.pd != qp.pd || (b.qp != nil && b.qp != qp) {
		return nil, accessPD
	}
	if b.parent != nil && b.parent.st.Load()&mrValid == 0 {
		return nil, accessInvalidSTag
	}
	return b.slice(perm, to, n)
}

// slice checks rights and bounds and returns the bytes at [to, to+n).
func (b *mrBinding) slice(perm Access, to, n uint64) ([]byte, accessErr) {
	if b.access&perm != perm {
		return nil, accessPerm
	}
	if to < b.base {
		return nil, accessBounds
	}
	to -= b.base
	if l := uint64(len(b.buf)); to > l || n > l-to {
		return nil, accessBounds
	}
	return b.buf[to : to+n : to+n], accessOK
}

// checkLocal validates a local SGE: the region must be valid (any key),
// in pd, with perm, and in bounds. It returns the n bytes named, from the
// mapping it checked. Windows are never local SGEs.
func (mr *MR) checkLocal(pd *PD, perm Access, to, n uint64) ([]byte, accessErr) {
	b, ae := mr.localBinding(pd)
	if ae != accessOK {
		return nil, ae
	}
	return b.slice(perm, to, n)
}

// localBinding is checkLocal's check of the region itself (valid, not a
// window, in pd): it returns the mapping whose rights and bounds
// (slice) decide the rest, so that several SGEs of the region checked at
// one moment (a run of the send engine) share the check.
func (mr *MR) localBinding(pd *PD) (*mrBinding, accessErr) {
	if mr.st.Load()&mrValid == 0 {
		return nil, accessInvalidSTag
	}
	b := mr.bind.Load()
	if b == nil || mr.kind.window() {
		return nil, accessInvalidSTag
	}
	if mr.pd != pd {
		return nil, accessPD
	}
	return b, accessOK
}

// localBytes returns n bytes at offset off of the region's current
// mapping for the send engine, which checked the SGE (checkLocal) when it
// took the work request. Should the region have been re-registered to a
// smaller mapping since (a ULP that re-registers memory it is still
// sending from), it returns zeros rather than bytes of another mapping.
func (mr *MR) localBytes(off, n uint64) []byte {
	if b := mr.bind.Load(); b != nil {
		if l := uint64(len(b.buf)); off <= l && n <= l-off {
			return b.buf[off : off+n]
		}
	}
	return make([]byte, n)
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
