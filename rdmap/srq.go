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
	maxSGE int

	mu     sync.Mutex
	rq     rqRing // +checklocks:mu
	users  int    // +checklocks:mu
	closed bool   // +checklocks:mu
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
	if c.MaxWR < 0 || c.MaxWR > 1<<20 {
		return nil, errConfigf("SRQConfig.MaxWR %d outside 0..%d", c.MaxWR, 1<<20)
	}
	if c.MaxSGE < 0 || c.MaxSGE > MaxSGE {
		return nil, errConfigf("SRQConfig.MaxSGE %d outside 0..%d", c.MaxSGE, MaxSGE)
	}
	return &SRQ{pd: pd, maxSGE: c.MaxSGE, rq: newRQRing(c.MaxWR, c.MaxSGE)}, nil
}

// PostRecv posts a receive work request to the SRQ. An SGL longer in
// total than MaxRecvLen is refused with ErrInvalidWR.
func (s *SRQ) PostRecv(wr RecvWR) error {
	if err := s.check(&wr); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.rq.full() {
		return ErrQueueFull
	}
	s.rq.post(wr)
	return nil
}

// PostRecvs posts the receive work requests wrs to the SRQ in order under
// one lock: wrs[:n] are posted exactly as n calls of PostRecv would post
// them. It returns n; when n < len(wrs) the error is why wrs[n] was
// refused (what PostRecv would return for it: a malformed request,
// ErrQueueFull when the SRQ has no room for it, ErrClosed) and none of
// wrs[n:] was posted. The requests before a malformed one are posted. It
// does not allocate; wrs and their SGLs may be reused once it returns.
func (s *SRQ) PostRecvs(wrs []RecvWR) (int, error) {
	valid, verr := validPrefix(wrs, s.check)
	if valid == 0 {
		return 0, verr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	n := min(valid, s.rq.limit-s.rq.len())
	if n < valid {
		verr = ErrQueueFull
	}
	for i := range n {
		s.rq.post(wrs[i])
	}
	return n, verr
}

// check validates a receive work request for the SRQ.
func (s *SRQ) check(wr *RecvWR) error {
	if len(wr.SGL) > s.maxSGE {
		return ErrTooManySGE
	}
	return checkRecvSGL(wr.SGL)
}

// Len returns the number of posted receives waiting.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.len()
}

func (s *SRQ) take(e *rxRecv) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.take(e)
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
	s.rq.drop()
	return nil
}
