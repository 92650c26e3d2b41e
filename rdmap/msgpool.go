package rdmap

import (
	"context"
	"errors"

	"github.com/gosiw/gosiw/rdmap/internal/bufpool"
)

// MsgPool is a pool of registered, fixed-size message buffers for Sends
// and receives: one region mapped outside the Go heap (Device.AllocMemory,
// or Go memory where mapping is unsupported), registered once, cut into
// Count buffers. Get waits while every buffer is in use (back-pressure
// rather than growth). It is safe for concurrent use.
type MsgPool struct {
	mem  *Memory // nil when the backing is Go memory
	mr   *MR
	slab *bufpool.Slab
}

// Msg is one buffer of a MsgPool.
type Msg struct {
	// Buf is the buffer (its capacity ends at the buffer's end).
	Buf  []byte
	idx  int32
	pool *MsgPool
}

// SGE returns the scatter/gather element for the first n bytes of the
// buffer.
func (m Msg) SGE(n int) SGE {
	return m.pool.mr.SGE(m.pool.slab.Offset(m.idx), n)
}

// NewMsgPool creates a pool of count buffers of size bytes registered in
// pd with the given access.
func (pd *PD) NewMsgPool(size, count int, access Access) (*MsgPool, error) {
	if size <= 0 || count <= 0 {
		return nil, errConfigf("NewMsgPool: size %d and count %d, want both at least 1", size, count)
	}
	p := &MsgPool{}
	var backing []byte
	mem, err := pd.dev.AllocMemory(size * count)
	switch {
	case err == nil:
		p.mem, backing = mem, mem.Bytes()
	case errors.Is(err, errors.ErrUnsupported):
		backing = make([]byte, size*count)
	default:
		return nil, err
	}
	if p.mr, err = pd.RegisterMemory(backing, access); err != nil {
		if p.mem != nil {
			p.mem.Close()
		}
		return nil, err
	}
	p.slab, _ = bufpool.NewSlab(backing, size)
	return p, nil
}

// MR returns the pool's memory region.
func (p *MsgPool) MR() *MR { return p.mr }

// Get returns a free buffer, waiting until one is free or ctx is done.
func (p *MsgPool) Get(ctx context.Context) (Msg, error) {
	i, err := p.slab.Get(ctx)
	if err != nil {
		return Msg{}, err
	}
	return Msg{Buf: p.slab.Chunk(i), idx: i, pool: p}, nil
}

// TryGet returns a free buffer, or false when none is free.
func (p *MsgPool) TryGet() (Msg, bool) {
	i, ok := p.slab.TryGet()
	if !ok {
		return Msg{}, false
	}
	return Msg{Buf: p.slab.Chunk(i), idx: i, pool: p}, true
}

// Put returns a buffer to the pool. The caller must be done with it (the
// work request using it has completed).
func (p *MsgPool) Put(m Msg) { p.slab.Put(m.idx) }

// Close deregisters the pool's region and releases its memory (once no
// work request uses it any more).
func (p *MsgPool) Close() error {
	err := p.mr.Deregister()
	if p.mem != nil {
		p.mem.Close()
	}
	return err
}
