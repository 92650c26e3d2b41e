package nvmeof

import (
	"context"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/rdmap"
)

// Work request ids: the kind in the top byte, an index below.
const (
	wrRecv  = 1 << 56
	wrResp  = 2 << 56
	wrRead  = 3 << 56
	wrKind  = 0xff << 56
	wrIndex = 1<<56 - 1
)

// queue is one host queue (admin or I/O) on its own QP. Everything but
// the fields noted is owned by the queue's goroutine (run).
type queue struct {
	t     *Target
	qid   uint16
	depth int
	cap   int // capsule size: 64 + in-capsule data

	cq     *rdmap.CQ
	qp     *rdmap.QP
	recvMR *rdmap.MR
	conn   *cm.Conn
	local  netip.AddrPort

	ctrl  *controller // set by Connect
	sqhd  uint16
	slots []*slot
	free_ []*slot
	wcs   [32]rdmap.WC
	lg    *zap.Logger
}

// slot is one command in flight: from its capsule to the completion of
// its response Send.
type slot struct {
	idx   int
	cmd   Command
	sgl   SGL
	buf   []byte // scratch for admin data and DSM ranges (lazily registered)
	mr    *rdmap.MR
	cont  func(*slot) (Status, uint64) // run when the host's data has been read
	start time.Time
	io    bool
	bytes int  // data moved (for the metrics)
	dir   int8 // +1 to host, -1 from host
}

func (t *Target) newQueue(qid uint16, depth int) (*queue, error) {
	q := &queue{t: t, qid: qid, depth: depth, cap: SQESize, lg: t.lg.With(zap.Uint16("qid", qid))}
	if qid != 0 {
		q.cap += t.cfg.InlineDataSize
	}
	var err error
	if q.cq, err = t.dev.CreateCQ(4*depth + 64); err != nil {
		return nil, err
	}
	if q.qp, err = t.pd.CreateQP(&rdmap.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: 4*depth + 16,
		MaxRecvWR: depth, MaxSendSGE: 2, MaxRecvSGE: 1}); err != nil {
		q.free()
		return nil, err
	}
	if q.recvMR, err = t.pd.RegisterMemory(make([]byte, depth*q.cap), rdmap.AccessLocalWrite); err != nil {
		q.free()
		return nil, err
	}
	for i := range depth {
		if err := q.postRecv(i); err != nil {
			q.free()
			return nil, err
		}
	}
	return q, nil
}

func (q *queue) postRecv(i int) error {
	return q.qp.PostRecv(rdmap.RecvWR{ID: wrRecv | uint64(i), SGL: []rdmap.SGE{q.recvMR.SGE(i*q.cap, q.cap)}})
}

func (q *queue) free() {
	if q.qp != nil {
		q.qp.Close()
	}
	for _, s := range q.slots {
		if s.mr != nil {
			s.mr.Deregister()
		}
	}
	if q.recvMR != nil {
		q.recvMR.Deregister()
	}
	if q.cq != nil {
		q.cq.Close()
	}
}

// run serves the queue until its connection ends.
func (q *queue) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-q.qp.Done():
			cancel()
		case <-stop:
		}
	}()
	defer q.end()
	for {
		n := q.cq.Poll(q.wcs[:])
		if n == 0 {
			if err := q.cq.Wait(ctx); err != nil {
				for {
					n := q.cq.Poll(q.wcs[:])
					if n == 0 {
						return
					}
					for i := range n {
						q.completion(&q.wcs[i])
					}
				}
			}
			continue
		}
		for i := range n {
			q.completion(&q.wcs[i])
		}
	}
}

func (q *queue) end() {
	c := q.ctrl
	if c == nil {
		return
	}
	if q.qid == 0 {
		c.remove()
		return
	}
	c.mu.Lock()
	if c.io[q.qid] == q {
		delete(c.io, q.qid)
	}
	c.mu.Unlock()
}

// fatal ends the queue: the host broke the transport's rules.
func (q *queue) fatal(why string) {
	q.lg.Info("nvme queue fatal error: disconnecting", zap.String("why", why))
	q.t.m.fatal(why)
	q.qp.Disconnect(true)
}

func (q *queue) completion(wc *rdmap.WC) {
	idx := int(wc.ID & wrIndex)
	switch wc.ID & wrKind {
	case wrRecv:
		if wc.Status != rdmap.WCSuccess {
			if wc.Status != rdmap.WCWRFlushErr {
				q.fatal("receive failed: " + wc.Status.String())
			}
			return // flushed: the queue is ending
		}
		q.recv(idx, int(wc.ByteLen))
		if err := q.postRecv(idx); err != nil && q.qp.State() == rdmap.StateRTS {
			q.fatal("cannot repost a receive")
		}
	case wrRead:
		s := q.slotAt(idx)
		if s == nil || s.cont == nil {
			return
		}
		cont := s.cont
		s.cont = nil
		if wc.Status != rdmap.WCSuccess {
			q.complete(s, StatusDataXferError, 0)
			return
		}
		st, res := cont(s)
		q.complete(s, st, res)
	case wrResp:
		if s := q.slotAt(idx); s != nil {
			q.release(s)
		}
	}
}

func (q *queue) slotAt(i int) *slot {
	if i < len(q.slots) {
		return q.slots[i]
	}
	return nil
}

func (q *queue) alloc() *slot {
	if n := len(q.free_); n > 0 {
		s := q.free_[n-1]
		q.free_ = q.free_[:n-1]
		return s
	}
	s := &slot{idx: len(q.slots)}
	q.slots = append(q.slots, s)
	return s
}

func (q *queue) release(s *slot) {
	s.cont, s.bytes, s.dir = nil, 0, 0
	q.free_ = append(q.free_, s)
}

// scratch returns the slot's registered scratch buffer.
func (q *queue) scratch(s *slot) ([]byte, bool) {
	if s.mr == nil {
		mr, err := q.t.pd.RegisterMemory(make([]byte, scratchSize), rdmap.AccessLocalWrite)
		if err != nil {
			return nil, false
		}
		s.mr, s.buf = mr, mr.Bytes()
	}
	return s.buf, true
}

// recv takes one capsule from receive buffer i.
func (q *queue) recv(i, n int) {
	if n < SQESize {
		q.fatal("capsule shorter than 64 bytes")
		return
	}
	b := q.recvMR.Bytes()[i*q.cap : i*q.cap+n]
	s := q.alloc()
	copy(s.cmd[:], b)
	s.sgl = s.cmd.SGL()
	s.start = time.Now()
	s.io = q.qid != 0
	q.sqhd++
	if int(q.sqhd) >= q.depth {
		q.sqhd = 0
	}
	inCapsule := b[SQESize:]
	if s.cmd.Flags()&flagFused != 0 || s.cmd.Flags()&flagPSDT != FlagSGL {
		q.complete(s, StatusInvalidField|StatusDNR, 0)
		return
	}
	if q.ctrl == nil {
		if s.cmd.Opcode() != OpFabrics || s.cmd.FCType() != FabricsConnect {
			q.complete(s, StatusInvalidOpcode|StatusDNR, 0) // a command on a queue never connected
			return
		}
		q.connect(s, inCapsule)
		return
	}
	if s.cmd.Opcode() == OpFabrics {
		q.fabrics(s)
		return
	}
	if !q.ctrl.ready() {
		q.complete(s, StatusCmdSeqError|StatusDNR, 0)
		return
	}
	if q.qid == 0 {
		q.admin(s, inCapsule)
		return
	}
	q.ioCommand(s, inCapsule)
}

// toHost sends data (in the slot's scratch) to the host's keyed SGL and
// completes the command.
func (q *queue) toHost(s *slot, data []byte, result uint64) {
	if st := q.checkToHost(s, len(data)); st != StatusSuccess {
		q.complete(s, st, 0)
		return
	}
	if len(data) > 0 {
		err := q.qp.PostSend(rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{s.mr.SGE(0, len(data))},
			Remote: rdmap.Remote{STag: rdmap.STag(s.sgl.Key), Offset: s.sgl.Addr}})
		if err != nil {
			q.fatal("cannot post an RDMA Write")
			return
		}
		s.bytes, s.dir = len(data), 1
	}
	q.complete(s, StatusSuccess, result)
}

// checkToHost checks that the command's SGL can take n bytes to the host.
func (q *queue) checkToHost(s *slot, n int) Status {
	switch {
	case !s.sgl.Keyed():
		if s.sgl.InCapsule() {
			return StatusInvalidField | StatusDNR
		}
		return StatusSGLInvalidType | StatusDNR
	case int(s.sgl.Length) != n:
		return StatusSGLInvalidData | StatusDNR
	}
	return StatusSuccess
}

// fromHost gets n bytes of the host's data into dst (registered memory
// dst.MR: the slot's scratch or a namespace), from the capsule or by an
// RDMA Read, then runs cont and completes the command with its answer.
func (q *queue) fromHost(s *slot, inCapsule []byte, dst rdmap.SGE, cont func(*slot) (Status, uint64)) {
	n := int(dst.Length)
	d := s.sgl
	switch {
	case d.InCapsule():
		switch {
		case d.Addr != 0:
			q.complete(s, StatusSGLInvalidOffset|StatusDNR, 0)
			return
		case int(d.Length) != n || n > len(inCapsule):
			q.complete(s, StatusSGLInvalidData|StatusDNR, 0)
			return
		}
		copy(dst.MR.Bytes()[dst.Offset:dst.Offset+uint64(n)], inCapsule[:n])
		s.bytes, s.dir = n, -1
		st, res := cont(s)
		q.complete(s, st, res)
	case d.Keyed():
		if int(d.Length) != n {
			q.complete(s, StatusSGLInvalidData|StatusDNR, 0)
			return
		}
		if n == 0 {
			st, res := cont(s)
			q.complete(s, st, res)
			return
		}
		s.cont = cont
		s.bytes, s.dir = n, -1
		err := q.qp.PostSend(rdmap.SendWR{ID: wrRead | uint64(s.idx), Op: rdmap.WRRead, SGL: []rdmap.SGE{dst},
			Remote: rdmap.Remote{STag: rdmap.STag(d.Key), Offset: d.Addr}, Signaled: true})
		if err != nil {
			s.cont = nil
			q.fatal("cannot post an RDMA Read")
		}
	default:
		q.complete(s, StatusSGLInvalidType|StatusDNR, 0)
	}
}

// complete sends the command's completion: by Send with Invalidate when
// the host's keyed SGL asked for it, else by Send.
func (q *queue) complete(s *slot, st Status, result uint64) {
	var cqe [CQESize]byte
	Completion{Result: result, SQHead: q.sqhd, SQID: q.qid, CID: s.cmd.CID(), Status: st}.Put(cqe[:])
	wr := rdmap.SendWR{ID: wrResp | uint64(s.idx), Op: rdmap.WRSend, InlineData: cqe[:], Signaled: true}
	if s.sgl.Invalidate() && s.sgl.Length > 0 {
		wr.Op, wr.InvalidateSTag = rdmap.WRSendInv, rdmap.STag(s.sgl.Key)
	}
	q.t.observe(s, st)
	if err := q.qp.PostSend(wr); err != nil {
		q.release(s)
		if q.qp.State() == rdmap.StateRTS {
			q.fatal("cannot post a completion")
		}
	}
}
