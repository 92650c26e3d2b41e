// Package bufpool holds the buffer pools of the data path.
//
// Pool is a size class of scratch buffers (a sync.Pool of pointers, so a
// Put does not allocate; after wireguard-go device/pools.go): the QP
// engines borrow their receive buffer and batch buffers from one while
// data moves and give them back when they go idle.
//
// Slab is a bounded set of equal chunks cut from one backing array (for
// example memory mapped outside the Go heap and registered once): Get
// blocks when every chunk is in use, which gives back-pressure instead of
// unbounded growth (wireguard-go's WaitPool idea).
package bufpool

import (
	"context"
	"fmt"
	"sync"
)

// Pool is a pool of byte slices of one size. It is safe for concurrent
// use.
type Pool struct {
	size int
	p    sync.Pool
}

// New returns a pool of size-byte buffers.
func New(size int) *Pool {
	p := &Pool{size: size}
	p.p.New = func() any {
		b := make([]byte, size)
		return &b
	}
	return p
}

// Size returns the buffer size of the pool.
func (p *Pool) Size() int { return p.size }

// Get returns a buffer of Size bytes. Its contents are undefined.
func (p *Pool) Get() *[]byte {
	b := p.p.Get().(*[]byte)
	*b = (*b)[:p.size]
	return b
}

// Put returns b to the pool. It panics if b did not come from a pool of
// this size: a wrong-size Put is a bug that would otherwise surface far
// away.
func (p *Pool) Put(b *[]byte) {
	if b == nil {
		return
	}
	if cap(*b) != p.size {
		panic(fmt.Sprintf("bufpool: Put of a %d-byte buffer into the %d-byte pool", cap(*b), p.size))
	}
	p.p.Put(b)
}

// Slab hands out fixed-size chunks of one backing array. It is safe for
// concurrent use.
type Slab struct {
	backing []byte
	size    int
	free    chan int32
	out     []bool // chunk handed out; guards against a double Put
	mu      sync.Mutex
}

// NewSlab cuts backing into len(backing)/size chunks of size bytes.
func NewSlab(backing []byte, size int) (*Slab, error) {
	if size <= 0 || len(backing) < size {
		return nil, fmt.Errorf("bufpool: cannot cut %d bytes into %d-byte chunks", len(backing), size)
	}
	n := len(backing) / size
	s := &Slab{backing: backing, size: size, free: make(chan int32, n), out: make([]bool, n)}
	for i := range n {
		s.free <- int32(i)
	}
	return s, nil
}

// Len returns the number of chunks; ChunkSize their size.
func (s *Slab) Len() int       { return cap(s.free) }
func (s *Slab) ChunkSize() int { return s.size }

// Available returns how many chunks are free now.
func (s *Slab) Available() int { return len(s.free) }

// Chunk returns chunk i (its capacity is capped at the chunk end).
func (s *Slab) Chunk(i int32) []byte {
	off := int(i) * s.size
	return s.backing[off : off+s.size : off+s.size]
}

// Offset returns the byte offset of chunk i in the backing array.
func (s *Slab) Offset(i int32) int { return int(i) * s.size }

func (s *Slab) take(i int32) int32 {
	s.mu.Lock()
	s.out[i] = true
	s.mu.Unlock()
	return i
}

// TryGet returns a free chunk index, or false when none is free.
func (s *Slab) TryGet() (int32, bool) {
	select {
	case i := <-s.free:
		return s.take(i), true
	default:
		return 0, false
	}
}

// Get waits for a free chunk index until ctx is done.
func (s *Slab) Get(ctx context.Context) (int32, error) {
	select {
	case i := <-s.free:
		return s.take(i), nil
	default:
	}
	select {
	case i := <-s.free:
		return s.take(i), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Put returns chunk i. It panics on an index that is out of range or not
// handed out.
func (s *Slab) Put(i int32) {
	s.mu.Lock()
	if i < 0 || int(i) >= len(s.out) || !s.out[i] {
		s.mu.Unlock()
		panic(fmt.Sprintf("bufpool: Put of chunk %d that is not in use", i))
	}
	s.out[i] = false
	s.mu.Unlock()
	s.free <- i
}
