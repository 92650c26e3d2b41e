package nvmeof

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// Host defaults.
const (
	DefaultHostQueueDepth = 32
	hostWRSend            = 1 << 16
)

// HostConfig configures a Host. Zero fields take the defaults noted.
type HostConfig struct {
	// SubNQN is the subsystem to connect to (DiscoveryNQN for discovery).
	SubNQN string
	// HostNQN names the host; default "nqn.2014-08.org.nvmexpress:uuid:"
	// and the host id.
	HostNQN string
	// HostID is the 128-bit host identifier; default random.
	HostID [16]byte
	// IOQueues is the number of I/O queues to connect (0 for a discovery
	// controller; the target may grant fewer).
	IOQueues int
	// QueueDepth is each I/O queue's depth (default 32; the admin queue
	// is always 32).
	QueueDepth int
	// KATO is the Keep Alive Timeout sent in Connect (0: none). The host
	// then sends Keep Alive every KATO/2, unless NoKeepAlive.
	KATO        time.Duration
	NoKeepAlive bool
	// InCapsule sends write data in the capsule when it fits in what the
	// controller's IOCCSZ allows (and the I/O queues' Connect data too).
	InCapsule bool
	// NoInvalidate asks for plain Sends: keyed SGLs of subtype address
	// instead of "invalidate key".
	NoInvalidate bool
	// CM configures the connections; nil: siw's defaults with
	// mpa.SiwMaxPrivateData.
	CM *cm.Config
}

// Host is an NVMe-oF host connected to one controller: an admin queue and
// zero or more I/O queues. Its methods are safe for concurrent use.
type Host struct {
	dev   *rdmap.Device
	pd    *rdmap.PD
	cfg   HostConfig
	addr  string
	admin *hostQueue
	io    []*hostQueue
	// CntlID is the controller id the target assigned.
	CntlID uint16
	// Ctrl is the controller's Identify data.
	Ctrl ControllerInfo

	kaStop chan struct{}
	kaDone chan struct{}
	once   sync.Once
}

// ErrQueueClosed is a command on a queue whose connection has ended.
var ErrQueueClosed = errors.New("nvmeof: queue closed")

// Dial connects the admin queue to the target at addr, connects to
// cfg.SubNQN, enables the controller, identifies it, negotiates the
// number of I/O queues and connects them. ctx bounds the whole setup.
func Dial(ctx context.Context, addr string, dev *rdmap.Device, cfg *HostConfig) (*Host, error) {
	h := &Host{dev: dev, pd: dev.AllocPD(), cfg: *cfg, addr: addr}
	c := &h.cfg
	if c.QueueDepth == 0 {
		c.QueueDepth = DefaultHostQueueDepth
	}
	if c.HostID == ([16]byte{}) {
		rand.Read(c.HostID[:])
	}
	if c.HostNQN == "" {
		c.HostNQN = fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", c.HostID[0:4], c.HostID[4:6], c.HostID[6:8], c.HostID[8:10], c.HostID[10:16])
	}
	if c.CM == nil {
		c.CM = &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}
	}
	var err error
	if h.admin, err = h.connectQueue(ctx, 0, adminDepth, 0xffff); err != nil {
		return nil, err
	}
	fail := func(err error) (*Host, error) { h.abort(); return nil, err }
	// Enable: 4 KiB pages, 64-byte SQEs and 16-byte CQEs.
	if _, err := h.propSet(ctx, PropCC, CCEnable|6<<ccIOSQESShift|4<<ccIOCQESShift); err != nil {
		return fail(err)
	}
	for {
		v, err := h.PropertyGet(ctx, PropCSTS)
		if err != nil {
			return fail(err)
		}
		if v&CSTSFatal != 0 {
			return fail(errors.New("nvmeof: controller fatal status on enable"))
		}
		if v&CSTSReady != 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	id := make([]byte, IdentifySize)
	if _, err := h.AdminCmd(ctx, identifyCmd(CNSController, 0), id, false); err != nil {
		return fail(err)
	}
	if h.Ctrl, err = ParseControllerInfo(id); err != nil {
		return fail(err)
	}
	if c.IOQueues > 0 {
		var cmd Command
		cmd.SetHeader(AdminSetFeatures, 0, 0)
		cmd.SetCDW(10, FeatNumQueues)
		cmd.SetCDW(11, uint32(c.IOQueues-1)<<16|uint32(c.IOQueues-1))
		cqe, err := h.AdminCmd(ctx, &cmd, nil, false)
		if err != nil {
			return fail(err)
		}
		n := min(int(cqe.Result&0xffff), int(cqe.Result>>16&0xffff)) + 1
		depth := min(c.QueueDepth, int(h.Ctrl.MaxCmd))
		for qid := 1; qid <= min(n, c.IOQueues); qid++ {
			q, err := h.connectQueue(ctx, uint16(qid), depth, h.CntlID)
			if err != nil {
				return fail(err)
			}
			h.io = append(h.io, q)
		}
	}
	if c.KATO > 0 && !c.NoKeepAlive {
		h.kaStop, h.kaDone = make(chan struct{}), make(chan struct{})
		go h.keepAlive()
	}
	return h, nil
}

func identifyCmd(cns uint32, nsid uint32) *Command {
	var cmd Command
	cmd.SetHeader(AdminIdentify, 0, nsid)
	cmd.SetCDW(10, cns)
	return &cmd
}

func (h *Host) keepAlive() {
	defer close(h.kaDone)
	t := time.NewTicker(h.cfg.KATO / 2)
	defer t.Stop()
	for {
		select {
		case <-h.kaStop:
			return
		case <-t.C:
			var cmd Command
			cmd.SetHeader(AdminKeepAlive, 0, 0)
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.KATO)
			_, err := h.AdminCmd(ctx, &cmd, nil, false)
			cancel()
			if errors.Is(err, ErrQueueClosed) {
				return
			}
		}
	}
}

// IOQueues returns the number of I/O queues connected.
func (h *Host) IOQueues() int { return len(h.io) }

// AdminCmd runs cmd on the admin queue (its command id is set by the
// queue). data, when not empty, is registered for the command: written by
// the target (toTarget false) or read by it (toTarget true). It returns
// the completion; a status other than success is a *StatusError.
func (h *Host) AdminCmd(ctx context.Context, cmd *Command, data []byte, toTarget bool) (Completion, error) {
	return h.admin.do(ctx, cmd, data, toTarget, false)
}

// IOCmd runs cmd on I/O queue q (0-based) as AdminCmd does.
func (h *Host) IOCmd(ctx context.Context, q int, cmd *Command, data []byte, toTarget bool) (Completion, error) {
	if q < 0 || q >= len(h.io) {
		return Completion{}, fmt.Errorf("nvmeof: no I/O queue %d", q)
	}
	inCapsule := toTarget && h.cfg.InCapsule && len(data) <= int(h.Ctrl.IOCCSZ)*16-SQESize
	return h.io[q].do(ctx, cmd, data, toTarget, inCapsule)
}

// PropertyGet reads a controller property (CAP is 8 bytes, others 4).
func (h *Host) PropertyGet(ctx context.Context, off uint32) (uint64, error) {
	var cmd Command
	cmd.SetProperty(FabricsPropertyGet, 0, off == PropCAP, off, 0)
	cqe, err := h.AdminCmd(ctx, &cmd, nil, false)
	return cqe.Result, err
}

func (h *Host) propSet(ctx context.Context, off uint32, v uint32) (Completion, error) {
	var cmd Command
	cmd.SetProperty(FabricsPropertySet, 0, false, off, uint64(v))
	return h.AdminCmd(ctx, &cmd, nil, false)
}

// IdentifyNamespace returns namespace nsid's Identify data.
func (h *Host) IdentifyNamespace(ctx context.Context, nsid uint32) (NamespaceInfo, error) {
	b := make([]byte, IdentifySize)
	if _, err := h.AdminCmd(ctx, identifyCmd(CNSNamespace, nsid), b, false); err != nil {
		return NamespaceInfo{}, err
	}
	return ParseNamespaceInfo(b)
}

// ActiveNamespaces lists the active namespace ids.
func (h *Host) ActiveNamespaces(ctx context.Context) ([]uint32, error) {
	b := make([]byte, IdentifySize)
	if _, err := h.AdminCmd(ctx, identifyCmd(CNSActiveNSList, 0), b, false); err != nil {
		return nil, err
	}
	var out []uint32
	for i := 0; i < IdentifySize; i += 4 {
		if id := le.Uint32(b[i:]); id != 0 {
			out = append(out, id)
		}
	}
	return out, nil
}

// GetLogPage reads len(b) bytes (a multiple of 4) of log page lid from
// offset off.
func (h *Host) GetLogPage(ctx context.Context, lid uint8, off uint64, b []byte) error {
	var cmd Command
	cmd.SetHeader(AdminGetLogPage, 0, 0xffffffff)
	numd := uint32(len(b)/4 - 1)
	cmd.SetCDW(10, uint32(lid)|numd<<16)
	cmd.SetCDW(11, numd>>16)
	cmd.SetCDW(12, uint32(off))
	cmd.SetCDW(13, uint32(off>>32))
	_, err := h.AdminCmd(ctx, &cmd, b, false)
	return err
}

// DiscoveryLog reads the whole discovery log (on a discovery controller).
func (h *Host) DiscoveryLog(ctx context.Context) ([]DiscoveryEntry, error) {
	hdr := make([]byte, discHeaderSize)
	if err := h.GetLogPage(ctx, LogDiscovery, 0, hdr); err != nil {
		return nil, err
	}
	n := le.Uint64(hdr[8:])
	if n > 64 {
		return nil, errors.New("nvmeof: discovery log too long")
	}
	b := make([]byte, discHeaderSize+int(n)*discEntrySize)
	if err := h.GetLogPage(ctx, LogDiscovery, 0, b); err != nil {
		return nil, err
	}
	_, es, err := ParseDiscoveryLog(b)
	return es, err
}

func rwCmd(op uint8, nsid uint32, slba uint64, nlb int) *Command {
	var cmd Command
	cmd.SetHeader(op, 0, nsid)
	cmd.SetCDW(10, uint32(slba))
	cmd.SetCDW(11, uint32(slba>>32))
	cmd.SetCDW(12, uint32(nlb-1))
	return &cmd
}

// Read reads len(p) bytes (a whole number of blocks of shift bits) from
// block slba of namespace nsid on I/O queue q into p.
func (h *Host) Read(ctx context.Context, q int, nsid uint32, shift uint8, slba uint64, p []byte) error {
	_, err := h.IOCmd(ctx, q, rwCmd(IORead, nsid, slba, len(p)>>shift), p, false)
	return err
}

// Write writes p (whole blocks) at block slba of namespace nsid on I/O
// queue q.
func (h *Host) Write(ctx context.Context, q int, nsid uint32, shift uint8, slba uint64, p []byte) error {
	_, err := h.IOCmd(ctx, q, rwCmd(IOWrite, nsid, slba, len(p)>>shift), p, true)
	return err
}

// Close shuts the controller down (CC.SHN, waiting up to 1 s for
// CSTS.SHST) and disconnects every queue, I/O queues first. It is
// idempotent.
func (h *Host) Close() error {
	h.once.Do(func() {
		if h.kaStop != nil {
			close(h.kaStop)
			<-h.kaDone
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := h.propSet(ctx, PropCC, 1<<14); err == nil {
			for ctx.Err() == nil {
				v, err := h.PropertyGet(ctx, PropCSTS)
				if err != nil || v&CSTSShstMask == CSTSShstDone {
					break
				}
			}
		}
		h.abortQueues(false)
	})
	return nil
}

// abort drops every queue at once.
func (h *Host) abort() { h.once.Do(func() { h.abortQueues(true) }) }

func (h *Host) abortQueues(abrupt bool) {
	for _, q := range h.io {
		q.close(abrupt)
	}
	if h.admin != nil {
		h.admin.close(abrupt)
	}
}

// ---------------------------------------------------------------- host queues

type hostQueue struct {
	h      *Host
	qid    uint16
	depth  int
	conn   *cm.Conn
	qp     *rdmap.QP
	cq     *rdmap.CQ
	recvMR *rdmap.MR
	sqeMR  *rdmap.MR
	slots  chan int

	mu   sync.Mutex
	reqs []hostReq
	done chan struct{}
	err  error
}

type hostReq struct {
	active, sent, answered bool
	signaled               bool
	failed                 error
	cqe                    Completion
	ch                     chan struct{}
	lost                   *rdmap.MR // registered for a command given up on (ctx ended)
}

// notify wakes the command's waiter, once per command (q.mu held).
func (r *hostReq) notify() {
	if !r.signaled {
		r.signaled = true
		r.ch <- struct{}{}
	}
}

func (h *Host) connectQueue(ctx context.Context, qid uint16, depth int, cntlid uint16) (*hostQueue, error) {
	q, err := h.openQueue(ctx, qid, depth, CMRequest{QID: qid, HRQSize: uint16(depth), HSQSize: uint16(depth - 1)}.Append(nil))
	if err != nil {
		return nil, err
	}
	// Connect.
	var cmd Command
	cmd.SetConnect(0, ConnectCmd{QID: qid, SQSize: uint16(depth - 1), KATO: uint32(h.cfg.KATO / time.Millisecond)})
	data := make([]byte, ConnectDataSize)
	ConnectData{HostID: h.cfg.HostID, CntlID: cntlid, SubNQN: h.cfg.SubNQN, HostNQN: h.cfg.HostNQN}.Put(data)
	inCapsule := qid != 0 && h.cfg.InCapsule && int(h.Ctrl.IOCCSZ)*16-SQESize >= ConnectDataSize
	cqe, err := q.do(ctx, &cmd, data, true, inCapsule)
	if err != nil {
		q.close(true)
		return nil, err
	}
	if qid == 0 {
		h.CntlID = uint16(cqe.Result)
	}
	return q, nil
}

// openQueue connects a queue's RDMA connection with the CM private data
// pd, without the Fabrics Connect.
func (h *Host) openQueue(ctx context.Context, qid uint16, depth int, pd []byte) (*hostQueue, error) {
	q := &hostQueue{h: h, qid: qid, depth: depth, slots: make(chan int, depth), reqs: make([]hostReq, depth),
		done: make(chan struct{})}
	var err error
	fail := func(err error) (*hostQueue, error) { q.release(); return nil, err }
	if q.cq, err = h.dev.CreateCQ(2*depth + 16); err != nil {
		return nil, err
	}
	if q.qp, err = h.pd.CreateQP(&rdmap.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: depth + 4, MaxRecvWR: depth,
		MaxSendSGE: 2, MaxRecvSGE: 1}); err != nil {
		return fail(err)
	}
	if q.recvMR, err = h.pd.RegisterMemory(make([]byte, depth*CQESize), rdmap.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if q.sqeMR, err = h.pd.RegisterMemory(make([]byte, depth*SQESize), 0); err != nil {
		return fail(err)
	}
	for i := range depth {
		q.slots <- i
		q.reqs[i].ch = make(chan struct{}, 1)
		if err := q.postRecv(i); err != nil {
			return fail(err)
		}
	}
	conn, err := (&cm.Dialer{Config: h.cfg.CM}).Dial(ctx, h.addr, h.dev, cm.ConnParam{QP: q.qp, IRD: 16, ORD: 0, PrivateData: pd})
	if err != nil {
		var rej *mpa.RejectedError
		if errors.As(err, &rej) {
			if r, perr := ParseCMReject(rej.Reply.PrivateData); perr == nil {
				err = &RejectError{QID: qid, Status: r.Status, Err: err}
			}
		}
		return fail(err)
	}
	q.conn = conn
	go q.poll()
	return q, nil
}

// RejectError is a queue the target refused with the transport's reject
// record.
type RejectError struct {
	QID    uint16
	Status uint16 // CM* status
	Err    error
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("nvmeof: queue %d rejected by the target (status %#x)", e.QID, e.Status)
}

func (e *RejectError) Unwrap() error { return e.Err }

func (q *hostQueue) postRecv(i int) error {
	return q.qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{q.recvMR.SGE(i*CQESize, CQESize)}})
}

func (q *hostQueue) release() {
	if q.qp != nil {
		q.qp.Close()
	}
	for _, mr := range []*rdmap.MR{q.recvMR, q.sqeMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if q.cq != nil {
		q.cq.Close()
	}
}

func (q *hostQueue) close(abrupt bool) {
	if q.conn != nil {
		if abrupt {
			q.conn.Abort()
		} else {
			q.conn.Close()
		}
		<-q.done
	}
	for i := range q.reqs {
		if mr := q.reqs[i].lost; mr != nil {
			mr.Deregister()
		}
	}
	q.release()
}

// poll takes the queue's completions until its connection ends.
func (q *hostQueue) poll() {
	defer close(q.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-q.qp.Done():
		case <-q.done:
		}
		cancel()
	}()
	var wcs [16]rdmap.WC
	for {
		n := q.cq.Poll(wcs[:])
		if n == 0 {
			if q.cq.Wait(ctx) != nil {
				n = q.cq.Poll(wcs[:])
				for i := range n {
					q.wc(&wcs[i])
				}
				q.mu.Lock()
				q.err = ErrQueueClosed
				for i := range q.reqs {
					r := &q.reqs[i]
					if r.active && r.failed == nil {
						r.failed = ErrQueueClosed
						r.notify()
					}
				}
				q.mu.Unlock()
				return
			}
			continue
		}
		for i := range n {
			q.wc(&wcs[i])
		}
	}
}

func (q *hostQueue) wc(wc *rdmap.WC) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wc.ID&hostWRSend != 0 {
		r := &q.reqs[wc.ID&0xffff]
		if !r.active {
			return
		}
		if wc.Status != rdmap.WCSuccess {
			if r.failed == nil {
				r.failed = fmt.Errorf("nvmeof: command send: %v", wc.Status)
				r.notify()
			}
			return
		}
		r.sent = true
		if r.answered && r.failed == nil {
			r.notify()
		}
		return
	}
	if wc.Status != rdmap.WCSuccess {
		if wc.Status != rdmap.WCWRFlushErr {
			// A completion could not be received (e.g. the target
			// invalidated one of our own STags): end the queue rather
			// than lose the completion.
			q.qp.Disconnect(true)
		}
		return
	}
	i := int(wc.ID)
	cqe, err := ParseCompletion(q.recvMR.Bytes()[i*CQESize : (i+1)*CQESize])
	_ = q.postRecv(i)
	if err != nil || int(cqe.CID) >= len(q.reqs) {
		return
	}
	r := &q.reqs[cqe.CID]
	if !r.active || r.answered {
		return
	}
	r.cqe, r.answered = cqe, true
	if r.sent && r.failed == nil {
		r.notify()
	}
}

// do runs one command: registers data, posts the capsule, waits for the
// completion (and the capsule's Send completion), deregisters.
func (q *hostQueue) do(ctx context.Context, cmd *Command, data []byte, toTarget, inCapsule bool) (Completion, error) {
	var slot int
	select {
	case slot = <-q.slots:
	case <-q.done:
		return Completion{}, ErrQueueClosed
	case <-ctx.Done():
		return Completion{}, ctx.Err()
	}
	c := *cmd
	le.PutUint16(c[2:], uint16(slot))
	sgl := []rdmap.SGE{q.sqeMR.SGE(slot*SQESize, SQESize)}
	var mr *rdmap.MR
	if len(data) > 0 {
		acc := rdmap.AccessLocalWrite | rdmap.AccessRemoteWrite
		if toTarget {
			acc = rdmap.AccessRemoteRead
		}
		var err error
		if mr, err = q.h.pd.RegisterMemory(data, acc); err != nil {
			q.slots <- slot
			return Completion{}, err
		}
		if inCapsule {
			c.SetSGL(SGL{Type: SGLInCapsule, Length: uint32(len(data))})
			sgl = append(sgl, mr.SGE(0, len(data)))
		} else {
			t := uint8(SGLKeyedInvalid)
			if q.h.cfg.NoInvalidate {
				t = SGLKeyed
			}
			c.SetSGL(SGL{Type: t, Length: uint32(len(data)), Key: uint32(mr.STag())})
		}
	} else {
		c.SetSGL(SGL{Type: SGLKeyed})
	}
	copy(q.sqeMR.Bytes()[slot*SQESize:], c[:])
	q.mu.Lock()
	r := &q.reqs[slot]
	*r = hostReq{active: true, ch: r.ch}
	if q.err != nil {
		r.active = false
		q.mu.Unlock()
		q.finish(slot, mr)
		return Completion{}, q.err
	}
	q.mu.Unlock()
	if err := q.qp.PostSend(rdmap.SendWR{ID: hostWRSend | uint64(slot), Op: rdmap.WRSend, SGL: sgl, Signaled: true}); err != nil {
		q.mu.Lock()
		r.active = false
		q.mu.Unlock()
		q.finish(slot, mr)
		return Completion{}, err
	}
	select {
	case <-r.ch:
	case <-ctx.Done():
		// The command stays outstanding: the slot (and the memory the
		// target may still access) is held until the queue ends, so that
		// a late completion is not misattributed.
		q.mu.Lock()
		r.lost = mr
		q.mu.Unlock()
		return Completion{}, ctx.Err()
	}
	q.mu.Lock()
	cqe, failed := r.cqe, r.failed
	r.active = false
	q.mu.Unlock()
	q.finish(slot, mr)
	if failed != nil {
		return Completion{}, failed
	}
	if cqe.Status != StatusSuccess {
		return cqe, &StatusError{Op: cmd.Opcode(), Status: cqe.Status, Result: cqe.Result}
	}
	return cqe, nil
}

func (q *hostQueue) finish(slot int, mr *rdmap.MR) {
	if mr != nil {
		mr.Deregister()
	}
	q.slots <- slot
}

// CRC reports whether the admin queue's connection carries MPA CRCs.
func (h *Host) CRC() bool { return h.admin.conn.Params.CRC }
