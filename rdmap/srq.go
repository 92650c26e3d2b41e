package rdmap

import "sync"

// SRQConfig configures a shared receive queue.
type SRQConfig struct {
	// MaxWR is the queue depth (default 128); MaxSGE bounds the SGEs per
	// receive (default 6, at most MaxSGE).
	MaxWR, MaxSGE int
}

// SRQ is a shared receive queue: QPs created with it take their receive
// buffers from it, in posting order. Receive buffers are checked against
// the SRQ's PD. A flushed QP returns nothing to the SRQ: only the receive
// it was filling completes with a flush status. It is safe for concurrent
// use.
type SRQ struct {
	pd     *PD
	maxWR  int
	maxSGE int

	mu         sync.Mutex
	ring       []rqEntry // +checklocks:mu
	mask       uint64
	head, tail uint64 // +checklocks:mu
	users      int    // +checklocks:mu
	closed     bool   // +checklocks:mu
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(cfg *SRQConfig) (*SRQ, error) {
	var c SRQConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MaxWR == 0 {
		c.MaxWR = defaultWR
	}
	if c.MaxSGE == 0 {
		c.MaxSGE = defaultSGE
	}
	if c.MaxWR < 0 || c.MaxWR > 1<<20 || c.MaxSGE < 0 || c.MaxSGE > MaxSGE {
		return nil, ErrConfig
	}
	n := ringSize(c.MaxWR)
	return &SRQ{pd: pd, maxWR: c.MaxWR, maxSGE: c.MaxSGE, ring: make([]rqEntry, n), mask: uint64(n - 1)}, nil
}

// PostRecv posts a receive work request to the SRQ. An SGL longer in
// total than MaxRecvLen is refused with ErrInvalidWR.
func (s *SRQ) PostRecv(wr RecvWR) error {
	if len(wr.SGL) > s.maxSGE {
		return ErrTooManySGE
	}
	if err := checkRecvSGL(wr.SGL); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.tail-s.head >= uint64(s.maxWR) {
		return ErrQueueFull
	}
	e := &s.ring[s.tail&s.mask]
	e.id = wr.ID
	e.nsge = uint8(copy(e.sgl[:], wr.SGL))
	s.tail++
	return nil
}

// Len returns the number of posted receives waiting.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.tail - s.head)
}

func (s *SRQ) take(e *rqEntry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == s.tail {
		return false
	}
	src := &s.ring[s.head&s.mask]
	*e = *src
	for i := range src.nsge {
		src.sgl[i].MR = nil
	}
	s.head++
	return true
}

func (s *SRQ) attach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.users++
	return nil
}

func (s *SRQ) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// Close destroys the SRQ; it fails with ErrBusy while a QP uses it. The
// receives still posted are dropped without completions (they belong to
// no QP). Close is idempotent.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users > 0 {
		return ErrBusy
	}
	s.closed = true
	s.head = s.tail
	return nil
}
