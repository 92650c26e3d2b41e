package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// Run runs a test against the perf responder at addr (siwd, or `siw perf
// -s`) over gosiw and returns what it measured. The test ends after
// o.Duration or when ctx is done, whichever comes first; either way the
// streams then drain, exchange their final counts with the responder (an
// error if they disagree or the data was wrong) and disconnect. A failed
// connection comes back as the cm's error: an *mpa.RejectedError carrying
// the responder's reason (Reply.PrivateData), or a *cm.ConnectError; a
// connection that fails during the test wraps the QP's error (a
// *rdmap.TerminateError for a Terminate). The Result is returned, partial, with a stream's error.
func Run(ctx context.Context, addr string, o *Options) (*Result, error) {
	c, err := o.resolve()
	if err != nil {
		return nil, err
	}
	dev := c.Device
	if dev == nil {
		if dev, err = rdmap.NewDevice(nil); err != nil {
			return nil, err
		}
		defer dev.Close()
	}
	return run(ctx, "gosiw", &c, func(ctx context.Context, id int) (stream, error) {
		return dialRDMA(ctx, addr, &c, dev, id)
	})
}

// Work request IDs of the client: data Sends carry their sequence number,
// Writes and Reads a counter; finID is the "fin". Receive IDs are slots.
const finID = 1 << 63

// rdmaStream is one gosiw connection of a client run, owned by the run's
// goroutine for that stream.
type rdmaStream struct {
	id   int
	p    Params
	crc  bool
	conn *cm.Conn
	qp   *rdmap.QP
	cq   *rdmap.CQ

	data    []byte // write source, read sink, send slots (depth of them)
	dataMR  *rdmap.MR
	recv    []byte // receive slots, nrecv of recvLen
	recvMR  *rdmap.MR
	nrecv   int
	recvLen int

	peer      Reply
	credits   int    // Sends the responder has room for
	ctrlBytes uint64 // bytes of Sends received
	pat       []byte
	wcs       [32]rdmap.WC
	wrs       []rdmap.SendWR // the list being posted (signalEvery of them)
	sges      []rdmap.SGE    // wrs' SGLs
	release   []func() error
}

// signalEvery is how many data work requests a stream posts per list
// (PostSends), of which only the last is signaled (selective signaling,
// as perftest's CQ moderation): a quarter of the depth for Writes and
// Sends, every Read.
func signalEvery(p *Params) int {
	if p.Op == OpWrite || p.Op == OpSend {
		return max(1, p.Depth/4)
	}
	return 1
}

// Receive slots per op: write and read need the responder's "ok" (and one
// spare); send also its credits (at most one unread: every credit message
// carries at least half the responder's receives, and the client is never
// owed more than recvs-1 at once); pingpong its echo.
func clientRecvs(op Op) int {
	switch op {
	case OpSend:
		return 6
	case OpPingPong:
		return 3
	}
	return 2
}

func dialRDMA(ctx context.Context, addr string, o *Options, dev *rdmap.Device, id int) (_ stream, err error) {
	p := o.params()
	if p.Op == OpSend {
		// A Send needs its buffer until it completes: depth of them.
		p.Depth = max(1, min(p.Depth, MaxBuffer/p.Size))
	}
	s := &rdmaStream{id: id, p: p, nrecv: clientRecvs(p.Op), recvLen: ctrlLen}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	pd := dev.AllocPD()
	dataLen := p.Size
	if p.Op == OpSend {
		dataLen = p.Size * p.Depth
	}
	if p.Op == OpPingPong {
		s.recvLen = max(p.Size, ctrlLen)
	}
	mem, closeMem, err := allocMemory(dev, dataLen+s.nrecv*s.recvLen)
	if err != nil {
		return nil, err
	}
	s.release = append(s.release, closeMem)
	s.data, s.recv = mem[:dataLen:dataLen], mem[dataLen:]
	switch p.Op {
	case OpWrite:
		fillPattern(s.data)
	case OpSend, OpPingPong:
		s.pat = make([]byte, p.Size)
		fillPattern(s.pat)
		for i := 0; i < len(s.data); i += p.Size {
			copy(s.data[i:], s.pat)
		}
	}
	if s.dataMR, err = pd.RegisterMemory(s.data, rdmap.AccessLocalWrite); err != nil {
		return nil, err
	}
	s.release = append(s.release, s.dataMR.Deregister)
	if s.recvMR, err = pd.RegisterMemory(s.recv, rdmap.AccessLocalWrite); err != nil {
		return nil, err
	}
	s.release = append(s.release, s.recvMR.Deregister)
	if s.cq, err = dev.CreateCQ(2*(p.Depth+s.nrecv) + 16); err != nil {
		return nil, err
	}
	s.release = append(s.release, s.cq.Close)
	if s.qp, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: p.Depth + 2, MaxRecvWR: s.nrecv,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: ctrlLen,
		PollRx: p.Op == OpPingPong, // a ping-pong's waiter receives itself
		PollTx: !o.SendGoroutine && (p.Op == OpWrite || p.Op == OpSend),
		// Read Responses land in s.data, which nothing writes during
		// a Read test: with CRC they go straight in, their CRC computed
		// there.
		CRCInPlace: true}); err != nil {
		return nil, err
	}
	s.release = append(s.release, s.qp.Close)
	// Receives go up before the connection does: the responder's first
	// credit may follow the first Send closely.
	for i := range s.nrecv {
		if err := s.repost(i); err != nil {
			return nil, err
		}
	}
	pol := mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}
	if o.CRC {
		pol.CRC = mpa.CRCOn
	}
	ord := 1
	if p.Op == OpRead {
		ord = p.Depth
	}
	d := cm.Dialer{Config: &cm.Config{MPA: pol}}
	s.conn, err = d.Dial(ctx, addr, dev, cm.ConnParam{QP: s.qp, IRD: 1, ORD: ord, PrivateData: AppendRequest(nil, &p)})
	if err != nil {
		return nil, err
	}
	s.crc = s.conn.Params.CRC
	if s.peer, err = ParseReply(s.conn.PrivateData); err != nil {
		return nil, fmt.Errorf("perf: the responder's reply: %w", err)
	}
	if (p.Op == OpWrite || p.Op == OpRead) && s.peer.Len < p.Size {
		return nil, fmt.Errorf("perf: the responder's buffer is %d bytes, less than the size %d", s.peer.Len, p.Size)
	}
	if p.Op == OpRead {
		s.p.Depth = min(s.p.Depth, max(s.conn.Params.ORD, 1))
	}
	s.credits = s.peer.Recvs - 1
	k := signalEvery(&s.p)
	s.wrs, s.sges = make([]rdmap.SendWR, k), make([]rdmap.SGE, k)
	// What stays the same in every data work request is set once: fill
	// sets the rest field by field (a composite literal per request is
	// built on the stack and copied with wide loads that wait for its
	// narrow stores: 13.5% of the client's time at 64 bytes).
	op := rdmap.WRSend
	switch s.p.Op {
	case OpWrite:
		op = rdmap.WRWrite
	case OpRead:
		op = rdmap.WRRead
	}
	for j := range s.wrs {
		s.sges[j] = s.dataMR.SGE(0, s.p.Size)
		s.wrs[j] = rdmap.SendWR{Op: op, Remote: rdmap.Remote{STag: s.peer.STag}, SGL: s.sges[j : j+1]}
	}
	return s, nil
}

func (s *rdmaStream) info() StreamInfo {
	si := StreamInfo{ID: s.id, CRC: s.crc, Depth: s.p.Depth}
	if s.conn != nil {
		si.Local, si.Remote = s.conn.LocalAddr.String(), s.conn.RemoteAddr.String()
	}
	return si
}

func (s *rdmaStream) repost(slot int) error {
	return s.qp.PostRecv(rdmap.RecvWR{ID: uint64(slot), SGL: []rdmap.SGE{s.recvMR.SGE(slot*s.recvLen, s.recvLen)}})
}

func (s *rdmaStream) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	for i := len(s.release) - 1; i >= 0; i-- {
		s.release[i]()
	}
	s.release = nil
}

// fill makes s.wrs[j] data work request seq (unsignaled: the caller
// signals the last of a list). Its opcode, remote STag and SGE were set
// when the stream was made; a Send's SGE moves to the slot of seq.
func (s *rdmaStream) fill(j int, seq uint64) {
	wr := &s.wrs[j]
	wr.ID, wr.Signaled = seq, false
	if s.p.Op == OpSend || s.p.Op == OpPingPong {
		// Requests complete in order and at most depth are outstanding,
		// so slot seq%depth is free again.
		off := int(seq%uint64(s.p.Depth)) * s.p.Size
		if s.p.Size >= seqLen {
			binary.BigEndian.PutUint64(s.data[off:], seq)
		}
		s.sges[j].Offset = uint64(off)
	}
}

// post posts the m data work requests from seq on as one list, the last
// signaled: its completion retires them all.
func (s *rdmaStream) post(seq uint64, m int) error {
	for j := range m {
		s.fill(j, seq+uint64(j))
	}
	s.wrs[m-1].Signaled = true
	_, err := s.qp.PostSends(s.wrs[:m])
	return err
}

// measure keeps up to depth data work requests outstanding, posted in
// lists of signalEvery (fewer when the window or the send credits have
// less room) of which the last is signaled. A request is outstanding
// until a signaled completion at or after it has been reaped, as verbs
// count SQ slots.
func (s *rdmaStream) measure(ctx context.Context, st *streamStats, stop *atomic.Bool) error {
	if s.p.Op == OpPingPong {
		return s.pingPong(ctx, st, stop)
	}
	size := uint64(s.p.Size)
	var seq, retired uint64 // the next request; every one before retired has completed
	for {
		for !stop.Load() {
			m := min(len(s.wrs), s.p.Depth-int(seq-retired))
			if s.p.Op == OpSend {
				m = min(m, s.credits)
			}
			if m <= 0 {
				break
			}
			if err := s.post(seq, m); err != nil {
				return s.failed(fmt.Errorf("post: %w", err))
			}
			seq += uint64(m)
			if s.p.Op == OpSend {
				s.credits -= m
			}
		}
		if seq == retired && stop.Load() {
			return nil
		}
		n, err := pollWait(ctx, s.cq, s.wcs[:])
		if err != nil {
			return s.failed(fmt.Errorf("waiting for completions: %w", err))
		}
		var done uint64
		for _, wc := range s.wcs[:n] {
			if wc.Status != rdmap.WCSuccess {
				return s.failedWC(wc)
			}
			if wc.Op == rdmap.WCRecv {
				if err := s.credit(wc); err != nil {
					return err
				}
				continue
			}
			if wc.ID < retired || wc.ID >= seq {
				return fmt.Errorf("perf: completion of request %d, want one of %d..%d", wc.ID, retired, seq-1)
			}
			done += wc.ID + 1 - retired
			retired = wc.ID + 1
		}
		if done > 0 {
			st.ops.Add(done)
			st.bytes.Add(done * size)
		}
	}
}

// credit takes a control message that arrived during the test: a credit.
func (s *rdmaStream) credit(wc rdmap.WC) error {
	msg := s.recv[int(wc.ID)*s.recvLen:][:wc.ByteLen]
	s.ctrlBytes += uint64(wc.ByteLen)
	n, err := parseCredit(msg)
	if err != nil {
		return err
	}
	// The client is never owed more than the responder's receives less
	// the one kept for "fin": a credit past that would let Sends go with
	// no receive posted for them (and a large one overflow the count).
	if owed := s.peer.Recvs - 1 - s.credits; n > owed {
		return fmt.Errorf("perf: the responder granted %d credits with %d Sends owed", n, owed)
	}
	s.credits += n
	return s.repost(int(wc.ID))
}

func (s *rdmaStream) pingPong(ctx context.Context, st *streamStats, stop *atomic.Bool) error {
	size := uint64(s.p.Size)
	for seq := uint64(0); !stop.Load(); seq++ {
		t := time.Now()
		// A ping is unsignaled: its echo says it went out, and a
		// completion would wake the client a second time per round
		// trip. An error still completes it.
		s.fill(0, seq)
		if err := s.qp.PostSend(s.wrs[0]); err != nil {
			return s.failed(fmt.Errorf("post: %w", err))
		}
		var rtt time.Duration
		for echoed := false; !echoed; {
			n, err := pollWait(ctx, s.cq, s.wcs[:])
			if err != nil {
				return s.failed(fmt.Errorf("waiting for completions: %w", err))
			}
			for _, wc := range s.wcs[:n] {
				if wc.Status != rdmap.WCSuccess {
					return s.failedWC(wc)
				}
				switch {
				case wc.Op == rdmap.WCSend:
					return fmt.Errorf("perf: a completion for the unsignaled ping %d", wc.ID)
				case wc.Flags&rdmap.WCSolicited != 0:
					return fmt.Errorf("perf: unexpected message from the responder: %.60q",
						s.recv[int(wc.ID)*s.recvLen:][:wc.ByteLen])
				default:
					rtt = time.Since(t)
					echo := s.recv[int(wc.ID)*s.recvLen:][:wc.ByteLen]
					if len(echo) != s.p.Size {
						return fmt.Errorf("perf: echo %d is %d bytes, want %d", seq, len(echo), s.p.Size)
					}
					if err := checkMsg(echo, seq, s.pat); err != nil {
						return fmt.Errorf("perf: echo: %w", err)
					}
					if err := s.repost(int(wc.ID)); err != nil {
						return s.failed(err)
					}
					echoed = true
				}
			}
		}
		st.hist.add(rtt)
		st.latNS.Add(uint64(rtt))
		st.ops.Add(1)
		st.bytes.Add(size)
	}
	return nil
}

// finish sends "fin" with the client's counts and checks the responder's
// answer against them.
func (s *rdmaStream) finish(ctx context.Context, st *streamStats) (*PeerCounts, error) {
	mine := counts{Ops: st.ops.Load(), Bytes: st.bytes.Load(), HasOps: true, HasBytes: true}
	fin := appendCounts(nil, "fin", mine)
	if err := s.qp.PostSend(rdmap.SendWR{ID: finID, Op: rdmap.WRSend, InlineData: fin, Solicited: true, Signaled: true}); err != nil {
		return nil, s.failed(fmt.Errorf("sending fin: %w", err))
	}
	var answer []byte
	for sent := false; !sent || answer == nil; {
		n, err := pollWait(ctx, s.cq, s.wcs[:])
		if err != nil {
			return nil, s.failed(fmt.Errorf("waiting for the responder's counts: %w", err))
		}
		for _, wc := range s.wcs[:n] {
			if wc.Status != rdmap.WCSuccess {
				return nil, s.failedWC(wc)
			}
			switch {
			case wc.Op == rdmap.WCSend:
				sent = true
			case answer == nil:
				msg := s.recv[int(wc.ID)*s.recvLen:][:wc.ByteLen]
				if verb, _ := parseCtrl(msg); verb == "credit" {
					if err := s.credit(wc); err != nil {
						return nil, err
					}
					continue
				}
				s.ctrlBytes += uint64(wc.ByteLen)
				answer = append([]byte(nil), msg...)
			}
		}
	}
	verb, rest := parseCtrl(answer)
	switch verb {
	case "ok":
	case "error":
		return nil, &DataError{Peer: true, Msg: rest}
	default:
		return nil, fmt.Errorf("perf: unexpected answer to fin: %.60q", answer)
	}
	c, err := parseCounts(rest)
	if err != nil {
		return nil, fmt.Errorf("perf: the responder's counts %.60q: %w", answer, err)
	}
	var pc *PeerCounts
	if c.HasOps || c.HasBytes {
		pc = &PeerCounts{}
		if c.HasOps {
			pc.Ops = &c.Ops
		}
		if c.HasBytes {
			pc.Bytes = &c.Bytes
		}
	}
	if c.HasOps && c.Ops != mine.Ops {
		return pc, &DataError{Msg: fmt.Sprintf("the responder received %d messages, the client sent %d", c.Ops, mine.Ops)}
	}
	if c.HasBytes && c.Bytes != mine.Bytes {
		return pc, &DataError{Msg: fmt.Sprintf("the responder received %d bytes, the client sent %d", c.Bytes, mine.Bytes)}
	}
	if s.p.Op == OpRead {
		if err := s.checkRead(mine); err != nil {
			return pc, err
		}
	}
	return pc, nil
}

// checkRead checks that the reads placed what they claim: the bytes
// placed in the client's memory (less the Sends received) and the pattern
// in the sink.
func (s *rdmaStream) checkRead(mine counts) error {
	st := s.qp.Stats()
	if placed := st.RxPlacedDirect + st.RxPlacedCopied - s.ctrlBytes; placed != mine.Bytes {
		return &DataError{Msg: fmt.Sprintf("reads placed %d bytes, completed %d", placed, mine.Bytes)}
	}
	if mine.Ops == 0 {
		return nil
	}
	want := make([]byte, len(s.data))
	fillPattern(want)
	for i := range want {
		if s.data[i] != want[i] {
			return &DataError{Msg: fmt.Sprintf("read data differs from the pattern at byte %d", i)}
		}
	}
	return nil
}

// DataError says the data or the counts of a test were wrong.
type DataError struct {
	// Peer: the responder found it (its "error" answer).
	Peer bool
	Msg  string
}

func (e *DataError) Error() string {
	if e.Peer {
		return "perf: the responder reports bad data: " + e.Msg
	}
	return "perf: " + e.Msg
}

// failedWC describes a failed completion, with the connection's error.
func (s *rdmaStream) failedWC(wc rdmap.WC) error {
	if wc.Status == rdmap.WCWRFlushErr {
		return s.failed(errors.New("the connection ended"))
	}
	return s.failed(fmt.Errorf("%v completed with %v", wc.Op, wc.Status))
}

// failed adds the reason the connection ended, once known, to err. The QP
// reports it when it is done, which follows a failed completion closely.
func (s *rdmaStream) failed(err error) error {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-s.qp.Done():
	case <-t.C:
		// The connection is up: what it moved says which side stopped.
		st := s.qp.Stats()
		return fmt.Errorf("perf: %w (the connection is up; it sent %d FPDUs, %d bytes in %d writes, and received %d FPDUs, %d bytes)",
			err, st.TxFPDUs, st.TxBytes, st.TxWritevs, st.RxFPDUs, st.RxBytes)
	}
	if qerr := s.qp.Err(); qerr != nil {
		return fmt.Errorf("perf: %v: %w", err, qerr)
	}
	return fmt.Errorf("perf: %w (closed by the responder)", err)
}
