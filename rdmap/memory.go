package rdmap

import (
	"sync/atomic"

	"github.com/gosiw/gosiw/internal/sys"
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

// Close releases the memory: it is unmapped as soon as no memory region
// over it remains registered and no work request uses it. Close is
// idempotent.
func (mem *Memory) Close() error {
	if !mem.close.CompareAndSwap(false, true) {
		return nil
	}
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
