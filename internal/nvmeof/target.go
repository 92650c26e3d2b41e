package nvmeof

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// Target defaults.
const (
	DefaultInlineDataSize = 4096 // in-capsule data of an I/O command (nvmet-rdma's default)
	DefaultMaxQueueSize   = 128  // CAP.MQES + 1
	DefaultMaxIOQueues    = 16
	DefaultLBAShift       = 9
	// MDTS is the largest transfer of one command: 2^8 pages of 4 KiB.
	MDTS        = 8
	MaxTransfer = 4096 << MDTS
	adminDepth  = 32 // NVME_AQ_DEPTH: the largest admin queue
	scratchSize = 16 << 10
	maxAERs     = 4
)

// Namespace is a block device served by the target: Data, whose length is
// a multiple of the block size (a tail shorter than a block is not
// exported), is the medium. Data must stay valid and unmoved while the
// Target runs; hosts read and write it concurrently with whatever else
// the caller does with it.
type Namespace struct {
	// NSID is the namespace id, from 1, unique in its subsystem.
	NSID uint32
	// Data backs the namespace.
	Data []byte
	// ReadOnly exports the namespace write protected: writes fail with
	// Namespace Is Write Protected.
	ReadOnly bool
	// LBAShift is log2 of the block size: 9 (512 bytes, the default when
	// 0) up to 12.
	LBAShift uint8
	// Sync, when set, is called by Flush (e.g. msync of a file mapping).
	Sync func() error

	mr *rdmap.MR
}

func (ns *Namespace) blocks() uint64 { return uint64(len(ns.Data)) >> ns.LBAShift }

// Subsystem is an NVM subsystem: an NQN, its namespaces and the hosts
// allowed to connect (none listed: any host).
type Subsystem struct {
	NQN          string
	Namespaces   []*Namespace
	AllowedHosts []string
	// Serial is reported by Identify Controller (default derived from the
	// NQN).
	Serial string
}

func (s *Subsystem) allows(hostNQN string) bool {
	return len(s.AllowedHosts) == 0 || slices.Contains(s.AllowedHosts, hostNQN)
}

func (s *Subsystem) ns(nsid uint32) *Namespace {
	for _, n := range s.Namespaces {
		if n.NSID == nsid {
			return n
		}
	}
	return nil
}

// Config configures a Target. Zero fields take the defaults noted.
type Config struct {
	// Subsystems served (the discovery subsystem is always there).
	Subsystems []*Subsystem
	// InlineDataSize is the in-capsule data an I/O command may carry
	// (IOCCSZ = 4 + InlineDataSize/16); default DefaultInlineDataSize.
	InlineDataSize int
	// MaxQueueSize bounds an I/O queue's depth (CAP.MQES + 1); default
	// DefaultMaxQueueSize.
	MaxQueueSize int
	// MaxIOQueues bounds the I/O queues of a controller; default
	// DefaultMaxIOQueues.
	MaxIOQueues int
	// CM configures the listener (MPA policy: set MaxPrivateData to
	// mpa.SiwMaxPrivateData toward Linux). nil: siw defaults.
	CM *cm.Config
	// Metrics, when set, counts commands, bytes, queues and latency.
	Metrics *Metrics
	// Logger receives the target's logs; nil means zap.NewNop().
	Logger *zap.Logger
}

// Target is an NVMe-oF target on the RDMA transport: it listens with the
// connection manager, takes one queue pair per host queue (admin or
// I/O), and runs each queue on a goroutine of its own. Its methods are
// safe for concurrent use.
type Target struct {
	dev  *rdmap.Device
	pd   *rdmap.PD
	cfg  Config
	lg   *zap.Logger
	m    *Metrics
	cnt  counters
	subs map[string]*Subsystem
	disc *Subsystem

	mu       sync.Mutex
	ln       *cm.Listener
	ctrls    map[uint16]*controller
	queues   map[*queue]struct{}
	nextCtrl uint16
	closed   bool
	wg       sync.WaitGroup
}

// NewTarget registers the namespaces' memory on dev and returns a target
// ready to Listen. Subsystem NQNs must be unique, at most MaxNQNLen
// bytes, and not the discovery NQN.
func NewTarget(dev *rdmap.Device, cfg *Config) (*Target, error) {
	t := &Target{dev: dev, pd: dev.AllocPD(), cfg: *cfg, subs: map[string]*Subsystem{},
		ctrls: map[uint16]*controller{}, queues: map[*queue]struct{}{}, nextCtrl: 1}
	c := &t.cfg
	if c.InlineDataSize == 0 {
		c.InlineDataSize = DefaultInlineDataSize
	}
	if c.MaxQueueSize == 0 {
		c.MaxQueueSize = DefaultMaxQueueSize
	}
	if c.MaxIOQueues == 0 {
		c.MaxIOQueues = DefaultMaxIOQueues
	}
	if c.InlineDataSize < 0 || c.InlineDataSize%16 != 0 || c.InlineDataSize > 64<<10 ||
		c.MaxQueueSize < 2 || c.MaxQueueSize > 1024 || c.MaxIOQueues < 1 || c.MaxIOQueues > 128 {
		return nil, errors.New("nvmeof: config out of range")
	}
	t.lg = c.Logger
	if t.lg == nil {
		t.lg = zap.NewNop()
	}
	t.m = c.Metrics
	t.disc = &Subsystem{NQN: DiscoveryNQN}
	fail := func(err error) (*Target, error) { t.release(); return nil, err }
	for _, s := range c.Subsystems {
		if s.NQN == "" || len(s.NQN) > MaxNQNLen || s.NQN == DiscoveryNQN || t.subs[s.NQN] != nil {
			return fail(fmt.Errorf("nvmeof: subsystem NQN %q: empty, too long, the discovery NQN or defined twice", s.NQN))
		}
		t.subs[s.NQN] = s
		seen := map[uint32]bool{}
		for _, ns := range s.Namespaces {
			if ns.LBAShift == 0 {
				ns.LBAShift = DefaultLBAShift
			}
			if ns.NSID == 0 || ns.NSID == 0xffffffff || seen[ns.NSID] || ns.LBAShift < 9 || ns.LBAShift > 12 || ns.blocks() == 0 {
				return fail(fmt.Errorf("nvmeof: subsystem %s: namespace %d: bad id, block size or size", s.NQN, ns.NSID))
			}
			seen[ns.NSID] = true
			acc := rdmap.AccessLocalWrite
			if ns.ReadOnly {
				acc = 0
			}
			mr, err := t.pd.RegisterMemory(ns.Data[:ns.blocks()<<ns.LBAShift], acc)
			if err != nil {
				return fail(fmt.Errorf("nvmeof: namespace %d: %w", ns.NSID, err))
			}
			ns.mr = mr
		}
		slices.SortFunc(s.Namespaces, func(a, b *Namespace) int { return int(int64(a.NSID) - int64(b.NSID)) })
	}
	return t, nil
}

func (t *Target) release() {
	for _, s := range t.cfg.Subsystems {
		for _, ns := range s.Namespaces {
			if ns.mr != nil {
				ns.mr.Deregister()
				ns.mr = nil
			}
		}
	}
}

// Listen starts listening on the TCP address addr ("127.0.0.1:4420").
func (t *Target) Listen(ctx context.Context, addr string) error {
	cfg := t.cfg.CM.Clone()
	if cfg == nil {
		cfg = &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}
	}
	if cfg.Logger == nil {
		cfg.Logger = t.lg
	}
	ln, err := cm.Listen(ctx, addr, t.dev, cfg)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.ln = ln
	t.mu.Unlock()
	t.lg.Info("nvme target listening", zap.Stringer("addr", ln.Addr()))
	return nil
}

// Addr returns the listening address (nil before Listen).
func (t *Target) Addr() net.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ln == nil {
		return nil
	}
	return t.ln.Addr()
}

// Serve answers connection requests until ctx ends or Close is called,
// then closes the target (see Close) and returns nil.
func (t *Target) Serve(ctx context.Context) error {
	t.mu.Lock()
	ln := t.ln
	t.mu.Unlock()
	if ln == nil {
		return errors.New("nvmeof: Serve before Listen")
	}
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			break
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.handle(req)
		}()
	}
	t.Close()
	return nil
}

// Close stops listening, resets every queue's connection (abrupt
// disconnect: hosts see their queues end and reconnect), waits for the
// queue goroutines to end and releases the namespaces' registrations; the
// namespaces' memory is the caller's again when Close returns. It is
// idempotent.
func (t *Target) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return
	}
	t.closed = true
	ln := t.ln
	qs := make([]*queue, 0, len(t.queues))
	for q := range t.queues {
		qs = append(qs, q)
	}
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, q := range qs {
		q.qp.Disconnect(true)
	}
	t.wg.Wait()
	t.release()
}

// Subsystems returns the NQNs served (not the discovery subsystem).
func (t *Target) Subsystems() []string {
	var out []string
	for _, s := range t.cfg.Subsystems {
		out = append(out, s.NQN)
	}
	return out
}

func (t *Target) reject(req *cm.Request, st uint16, why string) {
	t.lg.Info("nvme queue refused", zap.Stringer("remote", req.RemoteAddr), zap.String("why", why), zap.Uint16("status", st))
	t.m.refused(why)
	req.Reject(CMReject{Status: st}.Append(nil))
}

func (t *Target) handle(req *cm.Request) {
	r, err := ParseCMRequest(req.PrivateData)
	switch {
	case err != nil:
		t.reject(req, CMInvalidLen, "private data length")
		return
	case r.Recfmt != 0:
		t.reject(req, CMInvalidRecfmt, "record format")
		return
	case r.QID > uint16(t.cfg.MaxIOQueues):
		t.reject(req, CMInvalidQID, "queue id")
		return
	}
	maxDepth := t.cfg.MaxQueueSize
	if r.QID == 0 {
		maxDepth = adminDepth
	}
	depth := int(r.HSQSize) + 1
	if r.HSQSize == 0 || depth > maxDepth {
		t.reject(req, CMInvalidHSQSize, "submission queue size")
		return
	}
	if r.HRQSize == 0 || int(r.HRQSize) > maxDepth+1 {
		t.reject(req, CMInvalidHRQSize, "receive queue size")
		return
	}
	q, err := t.newQueue(r.QID, depth)
	if err != nil {
		t.reject(req, CMNoResources, "resources")
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		q.free()
		t.reject(req, CMNoResources, "shutting down")
		return
	}
	t.queues[q] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.queues, q)
		t.mu.Unlock()
		q.free()
	}()
	conn, err := req.Accept(cm.ConnParam{QP: q.qp, IRD: req.ORD, ORD: min(max(req.IRD, 1), rdmap.MaxIRDORD),
		PrivateData: CMReply{CRQSize: uint16(depth)}.Append(nil)})
	if err != nil {
		t.lg.Info("nvme queue accept failed", zap.Stringer("remote", req.RemoteAddr), zap.Error(err))
		return
	}
	q.conn = conn
	q.local = addrPort(conn.LocalAddr)
	t.m.queueUp(q.qid == 0)
	t.lg.Debug("nvme queue up", zap.Stringer("remote", conn.RemoteAddr), zap.Uint16("qid", q.qid), zap.Int("depth", depth),
		zap.Bool("crc", conn.Params.CRC))
	q.run()
	t.m.queueDown(q.qid == 0)
	conn.Close()
	t.lg.Debug("nvme queue down", zap.Stringer("remote", conn.RemoteAddr), zap.Uint16("qid", q.qid), zap.NamedError("cause", q.qp.Err()))
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// ---------------------------------------------------------------- controllers

// controller is the state one host's admin Connect created.
type controller struct {
	t       *Target
	id      uint16
	sub     *Subsystem
	disc    bool
	hostNQN string
	hostID  [16]byte
	admin   *queue

	mu      sync.Mutex
	cc      uint32
	csts    uint32
	kato    time.Duration
	kaTimer *time.Timer
	nrIOQ   int
	aec     uint32
	vwc     uint32
	io      map[uint16]*queue
	aers    []*slot // held Asynchronous Event Requests (admin queue goroutine only)
	dead    bool
}

func (t *Target) newController(sub *Subsystem, host ConnectData, admin *queue, kato time.Duration) (*controller, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for range 0xffef {
		id := t.nextCtrl
		t.nextCtrl++
		if t.nextCtrl > 0xffef {
			t.nextCtrl = 1
		}
		if t.ctrls[id] == nil {
			c := &controller{t: t, id: id, sub: sub, disc: sub == t.disc, hostNQN: host.HostNQN, hostID: host.HostID,
				admin: admin, kato: kato, nrIOQ: t.cfg.MaxIOQueues, vwc: 1, io: map[uint16]*queue{}}
			if c.disc {
				c.nrIOQ = 0
			}
			t.ctrls[id] = c
			c.armKeepAliveLocked()
			t.m.ctrlUp()
			return c, nil
		}
	}
	return nil, errors.New("nvmeof: no controller id free")
}

func (t *Target) lookupController(id uint16) *controller {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctrls[id]
}

// armKeepAlive starts or restarts the Keep Alive timer.
func (c *controller) armKeepAlive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armKeepAliveLocked()
}

func (c *controller) armKeepAliveLocked() {
	if c.kato <= 0 || c.dead {
		return
	}
	// Some slack past KATO: a host sends Keep Alive every KATO/2, and a
	// busy host (or network) may send it late.
	d := c.kato + c.kato/2
	if c.kaTimer == nil {
		c.kaTimer = time.AfterFunc(d, c.keepAliveExpired)
		return
	}
	c.kaTimer.Reset(d)
}

func (c *controller) keepAliveExpired() {
	c.t.lg.Info("nvme keep alive timeout: controller lost", zap.Uint16("cntlid", c.id), zap.String("hostnqn", c.hostNQN),
		zap.Duration("kato", c.kato))
	c.mu.Lock()
	c.csts |= CSTSFatal
	c.mu.Unlock()
	c.t.m.keepAliveTimeout()
	c.teardown()
}

// teardown disconnects every queue of the controller; it ends when the
// admin queue's goroutine has gone.
func (c *controller) teardown() {
	c.mu.Lock()
	qs := []*queue{c.admin}
	for _, q := range c.io {
		qs = append(qs, q)
	}
	c.mu.Unlock()
	for _, q := range qs {
		q.qp.Disconnect(true)
	}
}

// remove is called by the admin queue when it ends.
func (c *controller) remove() {
	c.t.mu.Lock()
	delete(c.t.ctrls, c.id)
	c.t.mu.Unlock()
	c.mu.Lock()
	c.dead = true
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	c.mu.Unlock()
	c.t.m.ctrlDown()
	c.teardown()
}

func (c *controller) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.csts&CSTSReady != 0 && c.cc&CCEnable != 0
}

func (c *controller) cap() uint64 {
	mqes := uint64(c.t.cfg.MaxQueueSize - 1)
	return mqes | 1<<16 | 15<<24 | 1<<37
}
