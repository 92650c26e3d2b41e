package rdmap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// FuzzEngine drives a live QP (the MPA responder, over loopback TCP)
// with a sequence of FPDUs from a raw peer. The input decodes into a
// configuration byte and a list of operations (see engineOp): FPDUs with
// valid MPA framing and DDP/RDMAP fields that are either what a correct
// peer would send next or random, raw garbage, bad CRCs and write
// boundaries (the TCP segmentation). The QP has memory registered with
// canaries around and inside each window, posted receives (or an SRQ),
// Reads and an atomic outstanding. After the sequence the peer half-closes
// and reads until the QP closes too. Then:
//
//   - no byte outside what the peer may write changed (canaries, and the
//     source of the QP's own Send and Write);
//   - every posted work request completed exactly once (SRQ receives that
//     no message took stay in the SRQ, in order);
//   - the QP ended gracefully (no Terminate on the wire), or by a Terminate
//     it sent (the peer decoded exactly that one, with the layer, type and
//     code of QP.Err), or by the peer's own Terminate;
//   - no goroutine the iteration started is left.
func FuzzEngine(f *testing.F) {
	for _, s := range engineSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runEngine(t, data)
	})
}

// Configuration bits (the first input byte).
const (
	cfgCRC = 1 << iota
	cfgSRQ
	cfgRFC7306
	cfgBuffered
	cfgCRCInPlace // QPConfig.CRCInPlace (with cfgCRC: large payloads placed straight, their CRC computed there)
)

// Operations (an input byte modulo opCount), each followed by its
// fields.
const (
	opWrite = iota
	opReadResp
	opSend
	opReadReq
	opTerminate
	opAtomicReq
	opAtomicResp
	opImm
	opRandomHeader
	opGarbage
	opCut
	opCount
)

// Memory layout. One canary-filled backing array holds every window, with
// gaps between them. The peer may write only: all of winAll (remote
// rights), and inside winLocal the SGEs of the posted receives, Reads and
// the atomic's result.
const (
	engCanary = 0x5a
	engGap    = 512
	winAllLen = 8192 // remote read/write/atomic
	winROLen  = 1024 // remote read only
	winPDLen  = 1024 // remote all, another PD
	winInvLen = 1024 // remote all, invalidated
	winDerLen = 1024 // remote all, deregistered
	winLocLen = 16384
	winSrcLen = 256 // source of the QP's own Send and Write
	nRecvs    = 4
	recvSGE   = 128 // two SGEs of this size per receive, 128 bytes apart (or one of twice the size)
)

// Read sinks inside winLocal: offset and length.
var engReads = [...]struct{ off, n int }{{4096, 100}, {4352, 6000}, {10496, 16}}

const engAtomicOff = 10624

// engine is one fuzz iteration's world.
type engine struct {
	t       *testing.T
	cfg     byte
	dev     *rdmap.Device
	pd      *rdmap.PD
	cq      *rdmap.CQ
	srq     *rdmap.SRQ
	qp      *rdmap.QP
	backing []byte
	// windows in backing: [lo, hi) and whether the peer may write it all.
	wins                           []engWin
	mrAll, mrRO, mrPD, mrInv, mrDe *rdmap.MR
	mrLocal, mrSrc                 *rdmap.MR
	deregSTag                      rdmap.STag
	// mw is a type 1 window over the first half of mrAll's bytes (remote
	// read and write); mwStale its STag of an earlier bind.
	mw      *rdmap.MW
	mwStale rdmap.STag
	// fr is a fast-register region the QP's first work request maps over
	// the second half of mrAll's bytes (valid once the send engine ran).
	fr *rdmap.MR
	// allowed marks the bytes of backing the peer may change; every other
	// byte must stay as in want (canaries, and the QP's source data).
	allowed []bool
	want    []byte

	posted   map[uint64]string // WR ID -> what
	srqOrder []uint64

	conn    *net.TCPConn
	framer  mpa.Framer
	written int // bytes the peer wrote
	rd      *engReader
}

type engWin struct {
	lo, hi int
	name   string
}

func runEngine(t *testing.T, data []byte) {
	leakOpts := goleak.IgnoreCurrent()
	var cfg byte
	if len(data) > 0 {
		cfg, data = data[0], data[1:]
	}
	e := newEngine(t, cfg)
	e.run(data)
	e.check()
	if err := goleak.Find(leakOpts); err != nil {
		t.Fatalf("goroutines left: %v", err)
	}
}

func newEngine(t *testing.T, cfg byte) *engine {
	e := &engine{t: t, cfg: cfg, posted: map[uint64]string{}}
	var err error
	e.dev, err = rdmap.NewDevice(&rdmap.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.dev.Close() })
	e.pd = e.dev.AllocPD()
	if e.cq, err = e.dev.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	qc := rdmap.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, RFC7306: cfg&cfgRFC7306 != 0, BufferedRx: cfg&cfgBuffered != 0,
		CRCInPlace: cfg&cfgCRCInPlace != 0}
	if cfg&cfgSRQ != 0 {
		if e.srq, err = e.pd.CreateSRQ(nil); err != nil {
			t.Fatal(err)
		}
		qc.SRQ = e.srq
	}
	if e.qp, err = e.pd.CreateQP(&qc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.qp.Close()
		if e.srq != nil {
			e.srq.Close()
		}
		e.cq.Close()
	})

	// Lay out the windows.
	off := engGap
	win := func(n int, name string) []byte {
		lo := off
		off += n + engGap
		e.wins = append(e.wins, engWin{lo, lo + n, name})
		return nil
	}
	for _, w := range []struct {
		n    int
		name string
	}{{winAllLen, "all"}, {winROLen, "read-only"}, {winPDLen, "other PD"}, {winInvLen, "invalidated"},
		{winDerLen, "deregistered"}, {winLocLen, "local"}, {winSrcLen, "source"}} {
		win(w.n, w.name)
	}
	e.backing = bytes.Repeat([]byte{engCanary}, off)
	e.allowed = make([]bool, off)
	b := func(i int) []byte { return e.backing[e.wins[i].lo:e.wins[i].hi:e.wins[i].hi] }
	reg := func(pd *rdmap.PD, buf []byte, acc rdmap.Access) *rdmap.MR {
		mr, err := pd.RegisterMemory(buf, acc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mr.Deregister() })
		return mr
	}
	e.mrAll = reg(e.pd, b(0), accAll|rdmap.AccessMWBind)
	if e.mw, err = e.pd.AllocMW(rdmap.MWType1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.mw.Dealloc() }) // before mrAll's Deregister
	for range 2 {
		e.mwStale = e.mw.STag()
		if _, err := e.mw.Bind(e.mrAll, 0, winAllLen/2, rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead, true); err != nil {
			t.Fatal(err)
		}
	}
	e.mrRO = reg(e.pd, b(1), rdmap.AccessRemoteRead)
	e.mrPD = reg(e.dev.AllocPD(), b(2), accAll)
	e.mrInv = reg(e.pd, b(3), accAll)
	if err := e.mrInv.Invalidate(); err != nil {
		t.Fatal(err)
	}
	e.mrDe = reg(e.pd, b(4), accAll)
	e.deregSTag = e.mrDe.STag()
	if err := e.mrDe.Deregister(); err != nil {
		t.Fatal(err)
	}
	e.mrLocal = reg(e.pd, b(5), rdmap.AccessLocalWrite)
	e.mrSrc = reg(e.pd, b(6), 0)
	copy(e.mrSrc.Bytes(), bytes.Repeat([]byte("source!."), winSrcLen/8))
	e.allow(0, 0, winAllLen)

	// Receives: the first half two SGEs each, with a canary gap inside
	// the SGL's span; the others one SGE of the same total length (the
	// receives a run of small Sends takes without the generic path).
	for i := range nRecvs {
		o := i * 512
		wr := rdmap.RecvWR{SGL: []rdmap.SGE{e.mrLocal.SGE(o, recvSGE), e.mrLocal.SGE(o+2*recvSGE, recvSGE)}}
		if i < nRecvs/2 {
			e.allow(5, o, recvSGE)
			e.allow(5, o+2*recvSGE, recvSGE)
		} else {
			e.allow(5, o, 2*recvSGE)
			wr.SGL = []rdmap.SGE{e.mrLocal.SGE(o, 2*recvSGE)}
		}
		if e.srq != nil {
			wr.ID = 100 + uint64(i)
			mustPost(t, e.srq.PostRecv(wr))
			e.srqOrder = append(e.srqOrder, wr.ID)
		} else {
			wr.ID = 1 + uint64(i)
			mustPost(t, e.qp.PostRecv(wr))
		}
		e.posted[wr.ID] = "recv"
	}
	// The QP's own work: a Send, a Write, Reads, an atomic.
	post := func(wr rdmap.SendWR, what string) {
		wr.Signaled = true
		mustPost(t, e.qp.PostSend(wr))
		e.posted[wr.ID] = what
	}
	if e.fr, err = e.pd.AllocMR(3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.fr.Deregister() })
	post(rdmap.SendWR{ID: 199, Op: rdmap.WRRegMR, Mem: rdmap.MemOp{MR: e.fr, Mem: b(0)[winAllLen/2:], Access: accAll, Key: 0x5a}}, "reg_mr")
	post(rdmap.SendWR{ID: 200, Op: rdmap.WRSend, SGL: []rdmap.SGE{e.mrSrc.SGE(0, 40)}}, "send")
	post(rdmap.SendWR{ID: 201, Op: rdmap.WRWrite, SGL: []rdmap.SGE{e.mrSrc.SGE(0, 64)}, Remote: rdmap.Remote{STag: 0x4242, Offset: 8}}, "write")
	for i, r := range engReads {
		e.allow(5, r.off, r.n)
		post(rdmap.SendWR{ID: 210 + uint64(i), Op: rdmap.WRRead, SGL: []rdmap.SGE{e.mrLocal.SGE(r.off, r.n)},
			Remote: rdmap.Remote{STag: 0x5000 + rdmap.STag(i), Offset: 64}}, "read")
	}
	if qc.RFC7306 {
		e.allow(5, engAtomicOff, 8)
		post(rdmap.SendWR{ID: 220, Op: rdmap.WRFetchAdd, SGL: []rdmap.SGE{e.mrLocal.SGE(engAtomicOff, 8)},
			Remote: rdmap.Remote{STag: 0x6000}, CompareAdd: 5}, "fetch_add")
	}

	e.want = bytes.Clone(e.backing)

	// Connect over loopback TCP; the raw peer is the MPA initiator.
	o := &rdmaptest.Options{CRC: cfg&cfgCRC != 0}
	qc2, pc := rdmaptest.ConnPair(t, false)
	p := o.Params(false)
	if err := e.qp.Start(qc2, p); err != nil {
		qc2.Close()
		pc.Close()
		t.Fatal(err)
	}
	e.conn = pc.(*net.TCPConn)
	_ = e.conn.SetNoDelay(true)
	t.Cleanup(func() { e.conn.Close() })
	e.framer = mpa.Framer{CRC: p.CRC}
	e.rd = newEngReader(pc, p.CRC)
	return e
}

// allow marks n bytes at off of window w as writable by the peer.
func (e *engine) allow(w, off, n int) {
	lo := e.wins[w].lo + off
	for i := lo; i < lo+n; i++ {
		e.allowed[i] = true
	}
}

// engReader reads everything the QP sends, keeps its Read Requests,
// Atomic Requests and Terminates, and tells waiters when one arrives or
// the stream ends.
type engReader struct {
	mu       sync.Mutex
	cond     *sync.Cond
	readReqs [][]byte
	atomics  [][]byte
	terms    [][]byte
	fpdus    int
	err      error // why reading stopped (io.EOF for a clean end)
	done     chan struct{}
}

func newEngReader(c net.Conn, crc bool) *engReader {
	r := &engReader{done: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	df := mpa.NewDeframer(c, mpa.DeframerConfig{CRC: crc})
	go func() {
		defer close(r.done)
		for {
			f, err := df.Next()
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.cond.Broadcast()
				r.mu.Unlock()
				return
			}
			r.fpdus++
			ul := append([]byte(nil), f.ULPDU...)
			if len(ul) >= ddp.UntaggedHeaderLen && ul[0]&ddp.FlagTagged == 0 {
				switch rdmaptest.Opcode(ul) {
				case wire.OpReadRequest:
					r.readReqs = append(r.readReqs, ul)
				case wire.OpAtomicRequest:
					r.atomics = append(r.atomics, ul)
				case wire.OpTerminate:
					r.terms = append(r.terms, ul)
				}
			}
			r.cond.Broadcast()
			r.mu.Unlock()
		}
	}()
	return r
}

// wait returns the i-th Read Request (atomic false) or Atomic Request the
// QP sent, or nil once the QP's stream has ended without it.
func (r *engReader) wait(atomic bool, i int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		l := r.readReqs
		if atomic {
			l = r.atomics
		}
		if i < len(l) {
			return l[i]
		}
		if r.err != nil {
			return nil
		}
		r.cond.Wait()
	}
}

// in decodes the fuzz input; past its end every value is zero.
type in struct{ b []byte }

func (d *in) more() bool { return len(d.b) > 0 }
func (d *in) u8() byte {
	if len(d.b) == 0 {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}
func (d *in) u16() uint16 { return uint16(d.u8())<<8 | uint16(d.u8()) }
func (d *in) u32() uint32 { return uint32(d.u16())<<16 | uint32(d.u16()) }
func (d *in) u64() uint64 { return uint64(d.u32())<<32 | uint64(d.u32()) }

// gen builds the stream: it models what a correct peer would send next,
// and stays "clean" while everything sent so far was what the model
// expected (then a valid Read or Atomic Response may wait for the QP's
// request, which a clean stream guarantees will come or the QP ends).
type gen struct {
	e      *engine
	d      in
	out    []byte // bytes not yet written
	clean  bool
	fpdus  int // complete FPDUs sent
	msn    [4]uint32
	sendMO uint32 // MO of the Send message in progress (clean only)
	recvs  int    // receives the model thinks are left
	allOK  bool   // mrAll still valid in the model
	orq    int    // index of the QP's Read or atomic at the ORQ head
	got    int    // bytes of the head Read answered
	ird    int    // peer Read Requests not yet answered (model bound)
}

func (e *engine) run(data []byte) {
	g := &gen{e: e, d: in{data}, clean: true, msn: [4]uint32{1, 1, 1, 1}, recvs: nRecvs, allOK: true}
	for n := 0; g.d.more() && n < 64; n++ {
		g.op()
	}
	g.flush()
	_ = e.conn.CloseWrite()
	// The QP answers the FIN (or a Terminate it sent) by closing: wait
	// for the end of its stream, then for the QP itself.
	<-e.rd.done
	<-e.qp.Done()
}

// flush writes what was built so far (one write: a segment boundary).
func (g *gen) flush() {
	if len(g.out) == 0 {
		return
	}
	n, _ := g.e.conn.Write(g.out) // the QP may have closed: ignore
	g.e.written += n
	g.out = g.out[:0]
}

// fpdu frames ulpdu; flags may spoil the CRC (with CRC on) or cut the
// FPDU short.
func (g *gen) fpdu(ulpdu []byte, flags byte) {
	start := len(g.out)
	g.out = g.e.framer.AppendFPDU(g.out, ulpdu, nil)
	switch {
	case flags&0x0f == 1 && g.e.framer.CRC:
		g.out[len(g.out)-1] ^= 0x80
		g.clean = false
	case flags&0x0f == 2:
		cut := start + int(flags>>4)%(len(g.out)-start)
		g.out = g.out[:cut]
		g.clean = false
	default:
		g.fpdus++
	}
}

func (g *gen) fill(n int) []byte {
	v := g.d.u8()
	if v == engCanary {
		v ^= 1
	}
	return bytes.Repeat([]byte{v}, n)
}

// stag picks an STag: the sel-th of the interesting ones, or random.
func (g *gen) stag(sel byte) rdmap.STag {
	e := g.e
	switch sel % 8 {
	case 0:
		return e.mrAll.STag()
	case 1:
		return e.mrRO.STag()
	case 2:
		return e.mrPD.STag()
	case 3:
		return e.mrInv.STag()
	case 4:
		return e.deregSTag
	case 5:
		return e.mrLocal.STag()
	case 6:
		return e.mrAll.STag() ^ 1 // right index, wrong key
	}
	switch {
	case sel&0x40 != 0:
		return e.mw.STag() // the window (the model counts it as not clean)
	case sel&0x20 != 0:
		return e.mwStale
	case sel&0x10 != 0:
		return e.fr.STag()&^0xff | 0x5a // valid once the QP's REG_MR ran
	}
	return rdmap.STag(g.d.u32())
}

func (g *gen) op() {
	d := &g.d
	switch d.u8() % opCount {
	case opWrite:
		// fields: stag sel, TO, length, segments, flags
		sel, to, n, segs, flags := d.u8(), uint64(d.u16()), int(d.u16()%10000), int(d.u8()%3)+1, d.u8()
		st := g.stag(sel)
		valid := sel%8 == 0 && g.allOK && to+uint64(n) <= winAllLen
		if sel&0x80 != 0 {
			to = d.u64() // any offset at all
			valid = false
		}
		if !valid {
			g.clean = false
		}
		for s := range segs {
			k := n / segs
			if s == segs-1 {
				k = n - s*k
			}
			h := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: s == segs-1, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: st, TO: to})
			g.fpdu(append(h, g.fill(k)...), flags)
			to += uint64(k)
		}
	case opReadResp:
		g.readResp()
	case opSend:
		g.send()
	case opReadReq:
		sel, to, size, flags := d.u8(), uint64(d.u16()), uint32(d.u16()), d.u8()
		src := g.stag(sel)
		lim := uint64(winAllLen)
		if sel%8 == 1 {
			lim = winROLen
		}
		msn := g.msn[wire.QNReadRequest]
		if flags&0x10 != 0 {
			msn = d.u32()
		}
		if !(sel%8 <= 1 && (sel%8 == 1 || g.allOK) && to+uint64(size) <= lim && msn == g.msn[wire.QNReadRequest] && g.ird < 16) {
			g.clean = false
		}
		if msn == g.msn[wire.QNReadRequest] {
			g.msn[wire.QNReadRequest]++
			g.ird++
		}
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, wire.QNReadRequest, msn, 0, true, 0)
		g.fpdu(wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: rdmap.STag(d.u32()), SinkTO: d.u64(), Size: size, SrcSTag: src, SrcTO: to}), flags)
	case opTerminate:
		g.clean = false
		t := wire.Terminate{Layer: wire.Layer(d.u8() % 4), EType: d.u8() % 16, Code: d.u8()}
		flags := d.u8()
		h := rdmaptest.UntaggedHeader(wire.OpTerminate, wire.QNTerminate, g.msn[wire.QNTerminate], 0, true, 0)
		if flags&0x10 != 0 {
			h = rdmaptest.UntaggedHeader(wire.OpTerminate, d.u32()%4, d.u32(), d.u32(), flags&0x20 == 0, 0)
		}
		g.fpdu(wire.AppendTerminate(h, &t), flags)
	case opAtomicReq:
		sel, op, to, flags := d.u8(), wire.AtomicOp(d.u8()%4), uint64(d.u16()), d.u8()
		a := wire.AtomicRequest{Op: op, ReqID: d.u32(), STag: g.stag(sel), TO: to, AddSwap: d.u64(), AddSwapMask: d.u64(), Compare: d.u64(), CompareMask: d.u64()}
		msn := g.msn[wire.QNAtomic]
		if !(g.e.cfg&cfgRFC7306 != 0 && sel%8 == 0 && g.allOK && to%8 == 0 && to+8 <= winAllLen && (op == wire.AtomicFetchAdd || op == wire.AtomicCmpSwap) && g.ird < 16) {
			g.clean = false
		}
		g.msn[wire.QNAtomic]++
		g.ird++
		h := rdmaptest.UntaggedHeader(wire.OpAtomicRequest, wire.QNAtomic, msn, 0, true, 0)
		g.fpdu(wire.AppendAtomicRequest(h, &a), flags)
	case opAtomicResp:
		g.atomicResp()
	case opImm:
		op, flags := wire.OpImmData, d.u8()
		if flags&0x10 != 0 {
			op = wire.OpImmDataSE
		}
		if g.e.cfg&cfgRFC7306 == 0 || g.recvs == 0 || g.sendMO != 0 {
			g.clean = false
		}
		g.recvs--
		h := rdmaptest.UntaggedHeader(op, wire.QNSend, g.msn[wire.QNSend], 0, true, 0)
		g.msn[wire.QNSend]++
		g.fpdu(binary.BigEndian.AppendUint64(h, d.u64()), flags)
	case opRandomHeader:
		// Any DDP control byte and RDMAP control byte, any fields.
		g.clean = false
		ctl, rctl, n, flags := d.u8(), d.u8(), int(d.u16()%600), d.u8()
		hl := ddp.HeaderLen(ctl)
		ul := make([]byte, hl+n)
		ul[0], ul[1] = ctl, rctl
		for i := 2; i < len(ul) && d.more(); i++ {
			ul[i] = d.u8()
			if i > 64 {
				break
			}
		}
		g.fpdu(ul, flags)
	case opGarbage:
		// Raw bytes with no framing at all: a length field of anything.
		g.clean = false
		n := int(d.u8()%64) + 1
		for range n {
			g.out = append(g.out, d.u8())
		}
	case opCut:
		g.flush()
	}
}

// send builds a Send-family message of one or two segments.
func (g *gen) send() {
	d := &g.d
	kind, n, flags := d.u8(), int(d.u16()%1200), d.u8()
	ops := [...]wire.Opcode{wire.OpSend, wire.OpSendSE, wire.OpSendInv, wire.OpSendSEInv}
	op := ops[kind%4]
	var inv rdmap.STag
	if op == wire.OpSendInv || op == wire.OpSendSEInv {
		inv = g.stag(d.u8())
	}
	msn, mo := g.msn[wire.QNSend], g.sendMO
	if flags&0x10 != 0 {
		msn = d.u32()
	}
	if flags&0x20 != 0 {
		mo = d.u32()
	}
	last := flags&0x40 == 0
	if !(msn == g.msn[wire.QNSend] && mo == g.sendMO && g.recvs > 0 && int(mo)+n <= 2*recvSGE &&
		(inv == 0 || inv == g.e.mrAll.STag() && g.allOK)) {
		g.clean = false
	}
	h := rdmaptest.UntaggedHeader(op, wire.QNSend, msn, mo, last, inv)
	g.fpdu(append(h, g.fill(n)...), flags)
	if last {
		g.msn[wire.QNSend]++
		g.sendMO = 0
		g.recvs--
		if inv == g.e.mrAll.STag() {
			g.allOK = false
		}
	} else {
		g.sendMO = mo + uint32(n)
	}
}

// readResp answers (a part of) the Read at the ORQ head. On a clean
// stream it waits for the QP's Read Request and takes the sink from it.
func (g *gen) readResp() {
	d := &g.d
	n, mut := int(d.u16()), d.u8()
	if g.orq >= len(engReads) {
		g.clean = false
	}
	i := min(g.orq, len(engReads)-1)
	sink, to, size := g.e.mrLocal.STag(), uint64(engReads[i].off), engReads[i].n
	if g.clean {
		if g.fpdus == 0 {
			// The responder QP sends nothing before the first FPDU.
			g.fpdu(ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: 0x100}), 0)
		}
		g.flush()
		rr := g.e.rd.wait(false, i)
		if rr == nil {
			return // the QP has ended
		}
		r, err := wire.ParseReadRequest(rr[ddp.UntaggedHeaderLen:])
		if err != nil {
			g.e.t.Fatalf("the QP's Read Request % x: %v", rr, err)
		}
		sink, to, size = r.SinkSTag(), r.SinkTO(), int(r.Size())
	}
	rem := size - g.got
	n %= rem + 1
	last := g.got+n == size
	to += uint64(g.got)
	if mut&0x0f != 0 {
		g.clean = false
		switch mut & 3 {
		case 1:
			sink = g.stag(d.u8())
		case 2:
			to = d.u64() % (winLocLen * 2)
		case 3:
			n += int(d.u8()) + 1
		}
		if mut&4 != 0 {
			last = !last
		}
	}
	h := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpReadResponse), STag: sink, TO: to})
	g.fpdu(append(h, g.fill(n)...), mut>>4)
	if mut&0x0f == 0 {
		g.got += n
		if last {
			g.orq++
			g.got = 0
		}
	}
}

// atomicResp answers the QP's atomic (at the ORQ head once its Reads are
// done).
func (g *gen) atomicResp() {
	d := &g.d
	mut := d.u8()
	var id uint32
	if g.e.cfg&cfgRFC7306 == 0 || g.orq != len(engReads) {
		g.clean = false
	}
	if g.clean {
		g.flush()
		ar := g.e.rd.wait(true, 0)
		if ar == nil {
			return
		}
		var a wire.AtomicRequest
		if err := wire.ParseAtomicRequest(ar[ddp.UntaggedHeaderLen:], &a); err != nil {
			g.e.t.Fatalf("the QP's Atomic Request % x: %v", ar, err)
		}
		id = a.ReqID
	}
	if mut&0x0f != 0 {
		g.clean = false
		id = d.u32()
	}
	h := rdmaptest.UntaggedHeader(wire.OpAtomicResponse, wire.QNAtomic, g.msn[wire.QNAtomic], 0, true, 0)
	g.fpdu(wire.AppendAtomicResponse(h, &wire.AtomicResponse{ReqID: id, OriginalValue: d.u64()}), mut>>4)
	if mut&0x0f == 0 {
		g.orq++
	}
}

// check runs the assertions once the QP is done.
func (e *engine) check() {
	t := e.t
	// Canaries.
	for i, c := range e.backing {
		if !e.allowed[i] && c != e.want[i] {
			where := "a gap"
			for _, w := range e.wins {
				if i >= w.lo && i < w.hi {
					where = fmt.Sprintf("window %q at offset %d", w.name, i-w.lo)
				}
			}
			t.Fatalf("byte %d (%s) changed to %#x", i, where, c)
		}
	}
	// The end of the QP.
	e.rd.mu.Lock()
	rerr, terms := e.rd.err, e.rd.terms
	e.rd.mu.Unlock()
	qerr := e.qp.Err()
	var te *rdmap.TerminateError
	// After a Terminate the QP waits a while for the peer's FIN, then
	// closes (a reset, when the peer's bytes are still unread): on a slow
	// machine the peer may still be writing then.
	if rerr != io.EOF && !(errors.As(qerr, &te) && errors.Is(rerr, syscall.ECONNRESET)) {
		t.Fatalf("the QP's stream did not end cleanly: %v (QP error %v)", rerr, qerr)
	}
	switch {
	case qerr == nil:
		if len(terms) != 0 {
			t.Fatalf("graceful end, yet the QP sent %d Terminates", len(terms))
		}
	case errors.As(qerr, &te) && te.Remote:
		if len(terms) != 0 {
			t.Fatalf("the QP answered a Terminate (%v) with %d Terminates", qerr, len(terms))
		}
	case errors.As(qerr, &te) && len(terms) == 0 && e.written < mpa.LengthFieldLen:
		// The peer closed before a length field was complete: the
		// responder has not heard from the initiator, and sends nothing
		// (not even its Terminate).
	case errors.As(qerr, &te):
		if len(terms) != 1 {
			t.Fatalf("QP error %v, but the peer got %d Terminates", qerr, len(terms))
		}
		h, err := ddp.Parse(terms[0])
		if err != nil {
			t.Fatalf("Terminate DDP header: %v", err)
		}
		var got wire.Terminate
		if err := wire.ParseTerminate(terms[0][h.Len():], &got); err != nil {
			t.Fatalf("Terminate % x: %v", terms[0], err)
		}
		if got.Layer != te.Layer || got.EType != te.EType || got.Code != te.Code {
			t.Fatalf("Terminate on the wire %v, QP error %v", &got, qerr)
		}
		if h.QN() != wire.QNTerminate || h.MSN() != 1 || h.MO() != 0 || !h.Last() {
			t.Fatalf("Terminate DDP header QN %d MSN %d MO %d L %v", h.QN(), h.MSN(), h.MO(), h.Last())
		}
	default:
		t.Fatalf("the QP ended with %v: neither graceful nor a Terminate", qerr)
	}
	if st := e.qp.State(); st != rdmap.StateError {
		t.Fatalf("done QP in state %v", st)
	}
	// Completions: every posted WR exactly once.
	if err := e.cq.Err(); err != nil {
		t.Fatalf("CQ: %v", err)
	}
	wcs := make([]rdmap.WC, 512)
	n := e.cq.Poll(wcs)
	seen := map[uint64]int{}
	if testing.Verbose() {
		var sb []string
		for _, wc := range wcs[:n] {
			sb = append(sb, fmt.Sprintf("%d:%v", wc.ID, wc.Status))
		}
		t.Logf("QP end: %v; %d FPDUs from the QP; completions %v", qerr, e.rd.fpdus, sb)
	}
	for _, wc := range wcs[:n] {
		if _, ok := e.posted[wc.ID]; !ok {
			t.Fatalf("completion for WR %d that was never posted: %+v", wc.ID, wc)
		}
		seen[wc.ID]++
		if seen[wc.ID] > 1 {
			t.Fatalf("WR %d (%s) completed twice", wc.ID, e.posted[wc.ID])
		}
	}
	left := 0
	if e.srq != nil {
		left = e.srq.Len()
	}
	for id, what := range e.posted {
		if seen[id] == 1 {
			continue
		}
		// An SRQ receive no message took stays in the SRQ: the last ones.
		if k := indexOf(e.srqOrder, id); k >= 0 && k >= len(e.srqOrder)-left {
			continue
		}
		t.Fatalf("WR %d (%s) never completed (%d completions, %d left in the SRQ)", id, what, n, left)
	}
	for k := len(e.srqOrder) - left; k < len(e.srqOrder); k++ {
		if seen[e.srqOrder[k]] != 0 {
			t.Fatalf("SRQ receive %d completed but the SRQ still holds %d", e.srqOrder[k], left)
		}
	}
}

func indexOf(l []uint64, v uint64) int {
	for i, x := range l {
		if x == v {
			return i
		}
	}
	return -1
}

// engineSeeds are valid sequences that exercise every opcode, and a few
// hostile ones.
func engineSeeds() [][]byte {
	var seeds [][]byte
	b := func(cfg byte, ops ...[]byte) {
		s := []byte{cfg}
		for _, o := range ops {
			s = append(s, o...)
		}
		seeds = append(seeds, s)
	}
	be16 := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	cat := func(p ...[]byte) []byte { return bytes.Join(p, nil) }
	// writeOp: a Write of n bytes at to in segs segments (1..3).
	writeOp := func(sel byte, to, n uint16, segs, flags byte) []byte {
		return cat([]byte{opWrite, sel}, be16(to), be16(n), []byte{segs - 1, flags}, bytes.Repeat([]byte{0x11}, int(segs)))
	}
	write := func(to, n uint16, segs byte) []byte { return writeOp(0, to, n, segs, 0) }
	readResp := func(n uint16) []byte { return cat([]byte{opReadResp}, be16(n), []byte{0, 0x22}) }
	send := func(kind byte, n uint16, flags byte, extra ...byte) []byte {
		return cat([]byte{opSend, kind}, be16(n), []byte{flags}, extra, []byte{0x33})
	}
	readReq := func(sel byte, to, size uint16) []byte {
		return cat([]byte{opReadReq, sel}, be16(to), be16(size), []byte{0}, make([]byte, 12))
	}
	atomicReq := func(op byte) []byte {
		return cat([]byte{opAtomicReq, 0, op}, be16(16), []byte{0}, make([]byte, 4+32))
	}
	atomicResp := []byte{opAtomicResp, 0, 0, 0, 0, 0, 0, 0, 0, 42}
	imm := cat([]byte{opImm, 0}, make([]byte, 8))
	cut := []byte{opCut}
	for _, cfg := range []byte{0, cfgCRC, cfgBuffered, cfgCRC | cfgBuffered, cfgSRQ, cfgSRQ | cfgCRC, cfgCRC | cfgCRCInPlace} {
		// Everything a correct peer does: Writes (small and direct),
		// Sends (whole and in two segments), Read Requests, all three
		// Reads answered (the large one in pieces).
		b(cfg,
			write(0, 100, 1), cut, write(100, 6000, 3), cut,
			send(0, 200, 0), send(1, 100, 0x40), send(1, 50, 0), cut,
			readReq(0, 0, 4096), readReq(1, 10, 100),
			readResp(100), readResp(3000), cut, readResp(3000), readResp(16),
			send(0, 0, 0))
	}
	for _, cfg := range []byte{cfgRFC7306, cfgRFC7306 | cfgCRC, cfgRFC7306 | cfgSRQ} {
		b(cfg, write(0, 8, 1), imm, atomicReq(0), atomicReq(2), readResp(100), readResp(6000), readResp(16), atomicResp,
			send(2, 10, 0, 0), write(0, 8, 1)) // Send with Invalidate of mrAll, then a Write into it
	}
	// Through the memory window, and its stale key (issue 12).
	for _, cfg := range []byte{0, cfgCRC, cfgBuffered} {
		b(cfg, writeOp(0x47, 0, 100, 1, 0), writeOp(0x47, 100, 3000, 2, 0), readReq(0x47, 0, 200), readResp(100), cut,
			writeOp(0x47, winAllLen/2-8, 16, 1, 0))
		b(cfg, writeOp(0x47, 0, 100, 1, 0), writeOp(0x27, 0, 100, 1, 0))
		b(cfg, readReq(0x27, 0, 16))
		b(cfg, write(0, 8, 1), cut, writeOp(0x17, 0, 100, 1, 0), readReq(0x17, 0, 64), readResp(100), readResp(3000), cut, writeOp(0x17, winAllLen/2-8, 16, 1, 0))
	}
	// Runs of small Writes in one TCP write (the receive engine takes
	// them in one run), through the region and the window, a message of
	// two segments among them, then one beyond the window, an invalid
	// STag, and a Write after a Send with Invalidate of its region.
	for _, cfg := range []byte{0, cfgCRC} {
		b(cfg, write(0, 8, 1), write(8, 8, 1), write(16, 100, 2), write(116, 8, 1), write(124, 8, 1), cut,
			writeOp(0x47, 0, 8, 1, 0), writeOp(0x47, 8, 8, 1, 0), write(200, 8, 1), write(208, 8, 1), write(8000, 1000, 1), write(300, 8, 1))
		b(cfg|cfgRFC7306, write(0, 8, 1), write(8, 8, 1), writeOp(3, 0, 10, 1, 0), write(16, 8, 1))
		b(cfg|cfgRFC7306, write(0, 8, 1), write(8, 8, 1), send(2, 10, 0, 0), write(16, 8, 1), write(24, 8, 1))
		// Small Sends in one TCP write: the last two receives (one SGE
		// each) are taken in a run; then one more than posted.
		b(cfg, send(0, 20, 0), send(0, 20, 0), write(0, 8, 1), send(0, 30, 0), send(1, 200, 0), write(8, 8, 1), send(0, 8, 0))
		b(cfg, send(0, 20, 0), send(0, 20, 0), send(0, 30, 0), send(0, 300, 0))
	}
	// Hostile ones.
	b(0, write(0, 100, 1), []byte{opGarbage, 3, 0xff, 0xff, 0x12})
	b(cfgCRC, writeOp(0, 0, 10, 1, 1))                                                         // bad CRC
	b(cfgCRC|cfgCRCInPlace, write(0, 8, 1), cut, writeOp(0, 0, 6000, 1, 1))                    // bad CRC of a payload placed straight
	b(0, writeOp(0, 0, 3000, 1, 0x72))                                                         // cut short
	b(0, write(8000, 1000, 1))                                                                 // beyond the window
	b(0, writeOp(1, 0, 10, 1, 0))                                                              // read-only MR
	b(0, writeOp(3, 0, 10, 1, 0))                                                              // invalidated MR
	b(0, writeOp(4, 0, 10, 1, 0))                                                              // deregistered MR
	b(0, writeOp(2, 0, 10, 1, 0))                                                              // other PD
	b(0, write(0, 8, 1), cat([]byte{opReadResp}, be16(200), []byte{0x03, 0, 0x22}))            // Read Response too long
	b(0, write(0, 8, 1), cat([]byte{opReadResp}, be16(50), []byte{0x01, 0, 0x22}))             // wrong STag
	b(0, write(0, 8, 1), cat([]byte{opReadResp}, be16(50), []byte{0x02, 0, 0, 0, 0, 0, 0, 9})) // wrong TO
	b(0, atomicReq(0))                                                                         // atomic without RFC 7306
	b(cfgRFC7306, cat([]byte{opAtomicReq, 1, 0}, be16(16), []byte{0}, make([]byte, 36)))       // atomic on a read-only MR
	b(0, send(0, 300, 0))                                                                      // Send longer than the receive
	b(0, send(0, 10, 0), send(0, 10, 0), send(0, 10, 0), send(0, 10, 0), send(0, 10, 0))       // more Sends than receives
	b(cfgSRQ, send(0, 10, 0x10, 0, 0, 0, 9))                                                   // wrong MSN
	b(0, []byte{opTerminate, 1, 2, 3, 0})                                                      // the peer's Terminate
	b(0, cat([]byte{opRandomHeader, 0x41, 0x43}, be16(8), []byte{0}))                          // garbage header
	b(0, write(0, 8, 1), []byte{opGarbage, 8}, []byte("\x4d\x50\x41\x20\x49\x44\x20\x52"))     // a second MPA Request
	b(cfgBuffered|cfgCRC, []byte{opRandomHeader, 0xc1, 0x40, 0x10, 0x00, 0x00})
	return seeds
}
