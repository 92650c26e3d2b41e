package rdmap

// MWType is the type of a memory window (RFC 5040 §2.2, verbs' MW types).
type MWType uint8

// Memory window types.
const (
	// MWType1 windows are bound and unbound by a call (MW.Bind,
	// MW.Unbind), not associated with a QP: any QP of the PD may use
	// their STag. A peer cannot invalidate them (a Send with Invalidate
	// naming one ends the connection with a Terminate), nor can a Local
	// Invalidate.
	MWType1 MWType = 1
	// MWType2 windows are bound by a WRBindMW work request, in SQ order,
	// each time with a fresh key, and are associated with the QP that
	// bound them: only that QP's peer may use the STag. A Local
	// Invalidate (on any QP of the PD) or a Send with Invalidate received
	// on that QP unbinds them; a Send with Invalidate on another QP is
	// refused with a Terminate. The association outlives the QP: a window
	// bound on a QP since closed can still be unbound by a Local
	// Invalidate on another QP of the PD, or by MW.Dealloc.
	MWType2 MWType = 2
)

// MW is a memory window: an STag of its own granting remote peers access
// to part of a memory region, with rights at most the region's own. A
// remote access through the window is checked against the window (STag
// and key, PD, for type 2 the QP, rights, bounds) and then against the
// region (still valid); its bytes land through the same fences as the
// region's (see Memory fences in the package documentation): once the
// window has been unbound (MW.Unbind, a completed Local Invalidate, a
// received Send with Invalidate, MW.Dealloc) or its region invalidated or
// deregistered, no byte lands through it any more.
//
// A window keeps its region from being deregistered while bound
// (MR.Deregister fails with ErrBusy); invalidating the region (a Local
// Invalidate, a Send with Invalidate, MR.Invalidate) unbinds every
// window bound over it. An MW is safe for concurrent use.
type MW struct {
	m   *MR // its STag table entry, kind mrWindow1 or mrWindow2
	typ MWType
}

// AllocMW allocates a memory window of type t in the PD, unbound: its
// STag (key 0) is reserved and invalid until a bind.
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	kind := mrWindow1
	switch t {
	case MWType1:
	case MWType2:
		kind = mrWindow2
	default:
		return nil, ErrInvalidWR
	}
	d := pd.dev
	mw := &MW{typ: t}
	mw.m = &MR{dev: d, pd: pd, kind: kind, mw: mw}
	idx, err := d.allocIndex(mw.m)
	if err != nil {
		return nil, err
	}
	mw.m.index = idx
	mw.m.refs.Store(1)
	mw.m.st.Store(uint64(idx << 8))
	return mw, nil
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// STag returns the window's current STag (its rkey).
func (mw *MW) STag() STag { return mw.m.STag() }

// Valid reports whether the window is bound (and not since invalidated).
func (mw *MW) Valid() bool { return mw.m.Valid() }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.m.pd }

// Bind binds a type 1 window over n bytes at offset off of mr, with
// rights access (remote rights only, a subset of mr's; mr needs
// AccessMWBind) and a new key (the previous key plus one, as
// ibv_inc_rkey), and returns the new STag. With zeroBased the window's
// tagged offsets start at 0, otherwise they are mr's (off to off+n-1).
// A bound window is rebound in one step: the old STag is invalidated
// (with its fence) before the new one becomes valid.
//
// Unlike ibv_bind_mw, which posts a type 1 bind on a QP's SQ, Bind is a
// synchronous call outside any SQ: the new STag is valid for every QP
// of the PD when Bind returns, and the old one is refused. A ULP that
// needs a bind ordered with its work requests uses a type 2 window and
// WRBindMW. Errors: ErrInvalidWR (a type 2 window, n 0), ErrWrongPD (mr
// in another PD), ErrAccess (rights that are not remote rights or not
// mr's, mr without AccessMWBind), ErrInvalidSGE (range outside mr),
// ErrMRInvalid (mr invalid), ErrClosed (window deallocated, mr
// deregistered).
func (mw *MW) Bind(mr *MR, off, n uint64, access Access, zeroBased bool) (STag, error) {
	if mw.typ != MWType1 || n == 0 {
		return 0, ErrInvalidWR
	}
	if err := mw.checkBind(mr, access); err != nil {
		return 0, err
	}
	mw.m.mu.Lock()
	defer mw.m.mu.Unlock()
	if mw.m.dereg.Load() {
		return 0, ErrClosed
	}
	if mw.m.Valid() {
		mw.m.invalidate()
	}
	key := uint8(mw.m.st.Load()) + 1
	if err := mw.bind(mr, off, n, access, zeroBased, key, nil); err != nil {
		return 0, err
	}
	return mw.STag(), nil
}

// Unbind invalidates a type 1 window (what a zero-length bind does in
// verbs). When it returns, no peer byte lands through its STag any more:
// a segment being placed through it is cut, as MR.Invalidate does.
// Unbinding an unbound window is not an error.
func (mw *MW) Unbind() error {
	if mw.typ != MWType1 {
		return ErrInvalidWR
	}
	mw.m.mu.Lock()
	defer mw.m.mu.Unlock()
	if mw.m.dereg.Load() {
		return ErrClosed
	}
	mw.m.invalidate()
	return nil
}

// Dealloc unbinds the window (with the fence of Unbind) and frees its
// STag. The window cannot be used again; work requests still queued that
// bind it fail with a local protection error.
func (mw *MW) Dealloc() error {
	mw.m.mu.Lock()
	defer mw.m.mu.Unlock()
	if !mw.m.dereg.CompareAndSwap(false, true) {
		return ErrClosed
	}
	mw.m.invalidate()
	mw.m.dev.freeIndex(mw.m.index, mw.m)
	return nil
}

// checkBind checks what a bind needs of the window and the region that
// does not change with the SQ: same PD, region not a window, rights.
func (mw *MW) checkBind(mr *MR, access Access) error {
	switch {
	case mr == nil || mr.kind.window():
		return ErrInvalidWR
	case mr.pd != mw.m.pd:
		return ErrWrongPD
	case access&^accessRemote != 0:
		return ErrAccess
	}
	return nil
}

// bind publishes a binding over mr with key (the window must be
// invalid; the caller holds the window's lock, which orders binds of one
// window). qp is the QP of a type 2 bind. It fails when mr is
// deregistered (ErrClosed) or invalid (ErrMRInvalid), lacks the bind
// right or the rights asked for (ErrAccess), or the range is outside it
// (ErrInvalidSGE). The region's lock orders it against the region's
// invalidation and deregistration: a window is either refused or in the
// region's set before the region's invalidation looks at it.
func (mw *MW) bind(mr *MR, off, n uint64, access Access, zeroBased bool, key uint8, qp *QP) error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dereg.Load() {
		return ErrClosed
	}
	b := mr.bind.Load()
	if mr.st.Load()&mrValid == 0 || b == nil {
		return ErrMRInvalid
	}
	if b.access&AccessMWBind == 0 || b.access&access != access {
		return ErrAccess
	}
	if l := uint64(len(b.buf)); off > l || n > l-off {
		return ErrInvalidSGE
	}
	base := off
	if zeroBased {
		base = 0
	}
	w := mw.m
	w.bind.Store(&mrBinding{buf: b.buf[off : off+n : off+n], access: access, base: base, parent: mr, qp: qp})
	if mr.windows == nil {
		mr.windows = make(map[*MR]struct{})
	}
	mr.windows[w] = struct{}{}
	w.st.Store(mrValid | mrUsed | uint64(w.index<<8|uint32(key)))
	return nil
}

// execBindMW executes a WRBindMW when the send engine takes it, in SQ
// order (PostSend checked the window type, PDs and rights). Refused with
// a local QP operation error while the window is bound or with its
// current key, a local protection error when the window is deallocated
// or the region deregistered, invalid, without the bind right or the
// rights, or too short.
func (qp *QP) execBindMW(op *MemOp) WCStatus {
	w := op.MW.m
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dereg.Load() {
		return WCLocProtErr
	}
	st := w.st.Load()
	if st&mrValid != 0 || (st&mrUsed != 0 && uint8(st) == op.Key) {
		return WCLocQPOpErr
	}
	if op.MW.bind(op.MR, op.Offset, op.Length, op.Access, op.ZeroBased, op.Key, qp) != nil {
		return WCLocProtErr
	}
	return WCSuccess
}

// validateBindMW checks a WRBindMW synchronously, at PostSend.
func (qp *QP) validateBindMW(op *MemOp) error {
	if op.MW == nil || op.MW.typ != MWType2 || op.Length == 0 {
		return ErrInvalidWR
	}
	if op.MW.m.pd != qp.pd {
		return ErrWrongPD
	}
	return op.MW.checkBind(op.MR, op.Access)
}
