package rping

import (
	"context"
	"fmt"

	"github.com/gosiw/gosiw/rdmap"
)

// Endpoint holds the verbs resources of one rping side: a CQ, a QP and
// the registered buffers (recv, send, rdma and, for the client, start).
// Make it with NewEndpoint, post the first receive with Arm before the
// connection is established (rping does), then run Client or Server.
type Endpoint struct {
	PD *rdmap.PD
	CQ *rdmap.CQ
	QP *rdmap.QP

	recvMR, sendMR, rdmaMR, startMR *rdmap.MR
	recvBuf, sendBuf                [MsgLen]byte
	rdmaBuf, startBuf               []byte
	w                               cqWaiter
}

// NewEndpoint allocates a CQ, a QP and buffers of size bytes on pd.
func NewEndpoint(pd *rdmap.PD, size int, client bool) (*Endpoint, error) {
	if size < MinSize || size > MaxSize {
		return nil, fmt.Errorf("rping: size %d out of range [%d, %d]", size, MinSize, MaxSize)
	}
	cq, err := pd.Device().CreateCQ(32)
	if err != nil {
		return nil, err
	}
	e := &Endpoint{PD: pd, CQ: cq, w: cqWaiter{cq: cq}, rdmaBuf: make([]byte, size)}
	fail := func(err error) (*Endpoint, error) { e.Close(); return nil, err }
	// rping: max_send_wr 16, max_recv_wr 2, one SGE each.
	if e.QP, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		return fail(err)
	}
	rw := rdmap.AccessLocalWrite | rdmap.AccessRemoteRead | rdmap.AccessRemoteWrite
	if e.recvMR, err = pd.RegisterMemory(e.recvBuf[:], rdmap.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if e.sendMR, err = pd.RegisterMemory(e.sendBuf[:], 0); err != nil {
		return fail(err)
	}
	if e.rdmaMR, err = pd.RegisterMemory(e.rdmaBuf, rw); err != nil {
		return fail(err)
	}
	if client {
		e.startBuf = make([]byte, size)
		if e.startMR, err = pd.RegisterMemory(e.startBuf, rw); err != nil {
			return fail(err)
		}
	}
	return e, nil
}

// Arm posts the receive for the peer's next message.
func (e *Endpoint) Arm() error {
	return e.QP.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{e.recvMR.SGE(0, MsgLen)}})
}

// Close releases the QP, the buffers and the CQ.
func (e *Endpoint) Close() {
	if e.QP != nil {
		e.QP.Close()
	}
	for _, mr := range []*rdmap.MR{e.recvMR, e.sendMR, e.rdmaMR, e.startMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	e.CQ.Close()
}

func (e *Endpoint) send(ctx context.Context, info Info) error {
	info.Put(e.sendBuf[:])
	if err := e.QP.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{e.sendMR.SGE(0, MsgLen)}, Signaled: true}); err != nil {
		return err
	}
	_, err := e.w.expect(ctx, rdmap.WCSend)
	return err
}

// recv waits for the peer's next message and re-arms the receive.
func (e *Endpoint) recv(ctx context.Context) (Info, error) {
	wc, err := e.w.expect(ctx, rdmap.WCRecv)
	if err != nil {
		return Info{}, err
	}
	info, err := ParseInfo(e.recvBuf[:], int(wc.ByteLen))
	if err != nil {
		return info, err
	}
	return info, e.Arm()
}

// rdma runs one signaled RDMA Read or Write of n bytes of rdma_buf.
func (e *Endpoint) rdma(ctx context.Context, op rdmap.WROpcode, peer Info, n int) error {
	err := e.QP.PostSend(rdmap.SendWR{ID: 3, Op: op, SGL: []rdmap.SGE{e.rdmaMR.SGE(0, n)},
		Remote: rdmap.Remote{STag: rdmap.STag(peer.RKey), Offset: peer.Buf}, Signaled: true})
	if err != nil {
		return err
	}
	want := rdmap.WCRead
	if op == rdmap.WRWrite {
		want = rdmap.WCWrite
	}
	_, err = e.w.expect(ctx, want)
	return err
}
