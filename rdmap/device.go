package rdmap

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Config configures a Device. The zero value is valid.
type Config struct {
	// Logger receives lifecycle logs. nil means zap.NewNop().
	Logger *zap.Logger
	// LockMemory pins the pages of AllocMemory regions (mlock). Default
	// off; raising RLIMIT_MEMLOCK is the daemon's business.
	LockMemory bool
}

// Device is a software RNIC: the factory of protection domains, memory
// regions, completion queues and queue pairs, and the owner of the STag
// table. It is safe for concurrent use.
//
// Lock order: Device.mu is a leaf; no other lock is taken while holding
// it.
type Device struct {
	lg  *zap.Logger
	cfg Config

	mu      sync.RWMutex
	mrs     map[uint32]*MR // by STag index; +checklocks:mu
	nextIdx uint32         // next STag index to try; +checklocks:mu
	qps     map[*QP]struct{}
	mems    []*Memory // live AllocMemory regions; +checklocks:mu
	closed  bool

	pdSeq  atomic.Uint32
	qpnSeq atomic.Uint32

	// atomicMu serializes RFC 7306 atomic operations executed by this
	// device, so they are atomic with respect to each other.
	atomicMu sync.Mutex

	// fenceMu and fenceCond let invalidations wait for the receive
	// engines placing into a region (MR.fence). Lock order: fenceMu ->
	// mu.
	fenceMu   sync.Mutex
	fenceCond *sync.Cond

	stats deviceCounters
}

// maxSTagIndex is the largest 24-bit STag index; index 0 is never used,
// so no STag below 256 is ever valid (STag 1 is what a P2P RTR targets).
const maxSTagIndex = 1<<24 - 1

// NewDevice returns a new software RNIC.
func NewDevice(cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	start := binary.LittleEndian.Uint32(b[:])%maxSTagIndex + 1
	d := &Device{
		lg:      lg.Named("rdmap"),
		cfg:     c,
		mrs:     make(map[uint32]*MR),
		nextIdx: start,
		qps:     make(map[*QP]struct{}),
	}
	d.fenceCond = sync.NewCond(&d.fenceMu)
	return d, nil
}

// pokePlacers interrupts the read of every receive engine placing into
// mr: its read deadline is set to now, so a read parked in the poller
// returns at once and the engine rechecks the region.
func (d *Device) pokePlacers(mr *MR) {
	now := time.Now()
	d.mu.RLock()
	defer d.mu.RUnlock()
	for qp := range d.qps {
		if qp.rx.placing.Load() == mr {
			_ = qp.rx.conn.SetReadDeadline(now)
		}
	}
}

// Logger returns the device's logger.
func (d *Device) Logger() *zap.Logger { return d.lg }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() *PD {
	return &PD{dev: d, id: d.pdSeq.Add(1)}
}

// lookupMR returns the memory region whose STag index matches s, or nil.
// The caller still compares the whole STag (the key) and the MR's state.
func (d *Device) lookupMR(s STag) *MR {
	d.mu.RLock()
	mr := d.mrs[uint32(s)>>8]
	d.mu.RUnlock()
	return mr
}

// allocIndex reserves a free STag index for mr, cycling from a random
// start as Linux siw does (xa_alloc_cyclic in [1, 0xffffff]).
func (d *Device) allocIndex(mr *MR) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if len(d.mrs) >= maxSTagIndex {
		return 0, ErrBusy
	}
	for {
		idx := d.nextIdx
		d.nextIdx++
		if d.nextIdx > maxSTagIndex {
			d.nextIdx = 1
		}
		if _, used := d.mrs[idx]; !used {
			d.mrs[idx] = mr
			return idx, nil
		}
	}
}

func (d *Device) freeIndex(idx uint32, mr *MR) {
	d.mu.Lock()
	if d.mrs[idx] == mr {
		delete(d.mrs, idx)
	}
	d.mu.Unlock()
}

func (d *Device) addQP(qp *QP) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	d.qps[qp] = struct{}{}
	return nil
}

func (d *Device) removeQP(qp *QP) {
	d.mu.Lock()
	delete(d.qps, qp)
	d.mu.Unlock()
}

// Close destroys every queue pair of the device (abruptly, flushing their
// work requests) and refuses new objects. When it returns no receive
// engine of the device places anything any more. Memory regions and mappings
// stay usable until their owners release them. Close is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for qp := range d.qps {
		qps = append(qps, qp)
	}
	d.mu.Unlock()
	for _, qp := range qps {
		qp.Close()
	}
	return nil
}

// PD is a protection domain: memory regions and queue pairs of one PD
// work only with each other. It is safe for concurrent use.
type PD struct {
	dev *Device
	id  uint32
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }
