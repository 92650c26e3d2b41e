package rdmap

import (
	"sync"
	"sync/atomic"

	"github.com/gosiw/gosiw/rdmap/internal/sys"
)

// Memory is anonymous memory mapped outside the Go heap, between two
// inaccessible guard pages: never moved or scanned by the garbage
// collector, page-aligned, and a stray access past either end faults at
// once. Register all or part of it with PD.RegisterMemory. It is safe for
// concurrent use.
type Memory struct {
	dev   *Device
	m     *sys.Mapping
	lo    uintptr // address range of m.Data
	hi    uintptr
	refs  atomic.Int64 // the owner plus one per memory region over it
	close atomic.Bool

	mu  sync.Mutex
	mrs map[*MR]struct{} // regions registered over it; +checklocks:mu
}

// AllocMemory maps n bytes of zeroed memory outside the Go heap (pinned
// when Config.LockMemory is set).
func (d *Device) AllocMemory(n int) (*Memory, error) {
	m, err := sys.MapGuarded(n, d.cfg.LockMemory)
	if err != nil {
		return nil, err
	}
	mem := &Memory{dev: d, m: m}
	mem.lo, mem.hi = sliceRange(m.Data)
	mem.refs.Store(1)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = m.Unmap()
		return nil, ErrClosed
	}
	d.mems = append(d.mems, mem)
	d.mu.Unlock()
	return mem, nil
}

// Bytes returns the mapped memory. It must not be used after Close.
func (mem *Memory) Bytes() []byte { return mem.m.Data }

// Len returns the size of the mapping.
func (mem *Memory) Len() int { return len(mem.m.Data) }

// Close releases the memory. It is refused with ErrBusy while a memory
// region is still registered over it, a fast-register region counting
// from its first WRRegMR over the memory until its Deregister even when
// it has been re-registered elsewhere since (deregister those first: once
// their Deregister has returned no peer byte lands in the memory); the memory
// then stays mapped and usable, and Close may be called again. Once Close
// succeeded Bytes must not be used; the mapping itself goes as soon as no
// work request in flight still reads it, so no engine ever touches
// unmapped memory. Close is idempotent.
func (mem *Memory) Close() error {
	mem.mu.Lock()
	if mem.close.Load() {
		mem.mu.Unlock()
		return nil
	}
	if len(mem.mrs) > 0 {
		mem.mu.Unlock()
		return ErrBusy
	}
	mem.close.Store(true)
	mem.mu.Unlock()
	d := mem.dev
	d.mu.Lock()
	for i, x := range d.mems {
		if x == mem {
			d.mems = append(d.mems[:i], d.mems[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
	mem.release()
	return nil
}

// addMR records a region registered over the memory; it fails once Close
// has begun.
func (mem *Memory) addMR(mr *MR) bool {
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.close.Load() {
		return false
	}
	if mem.mrs == nil {
		mem.mrs = make(map[*MR]struct{})
	}
	mem.mrs[mr] = struct{}{}
	return true
}

func (mem *Memory) removeMR(mr *MR) {
	mem.mu.Lock()
	delete(mem.mrs, mr)
	mem.mu.Unlock()
}

func (mem *Memory) release() {
	if mem.refs.Add(-1) == 0 {
		_ = mem.m.Unmap()
	}
}

// memoryOf returns the live AllocMemory region that holds b, with a
// reference taken, or nil for other memory.
func (d *Device) memoryOf(b []byte) (*Memory, error) {
	lo, hi := sliceRange(b)
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, mem := range d.mems {
		if lo >= mem.lo && hi <= mem.hi {
			mem.refs.Add(1)
			return mem, nil
		}
		if lo < mem.hi && hi > mem.lo {
			return nil, ErrInvalidSGE // straddles a mapping's edge
		}
	}
	return nil, nil
}
