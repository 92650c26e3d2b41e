//go:build interop

package interop

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// rdma-core's rdma_server/rdma_client examples (librdmacm/examples) speak
// plain Send/Recv over rdma_cm: the client posts a receive, connects,
// sends 16 bytes and waits for 16 bytes back; the server posts a receive,
// accepts, waits for the client's message, answers with 16 bytes, then
// disconnects.

const cmaMsgLen = 16

type sendRecv struct {
	dev        *rdmap.Device
	cq         *rdmap.CQ
	qp         *rdmap.QP
	sbuf, rbuf []byte
	smr, rmr   *rdmap.MR
}

func newSendRecv(dev *rdmap.Device) (*sendRecv, error) {
	pd := dev.AllocPD()
	s := &sendRecv{dev: dev, sbuf: bytes.Repeat([]byte("gosiw-to-linux!!"), 1), rbuf: make([]byte, cmaMsgLen)}
	var err error
	if s.cq, err = dev.CreateCQ(8); err != nil {
		return nil, err
	}
	if s.qp, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 4, MaxRecvWR: 4}); err != nil {
		return nil, err
	}
	if s.smr, err = pd.RegisterMemory(s.sbuf, 0); err != nil {
		return nil, err
	}
	if s.rmr, err = pd.RegisterMemory(s.rbuf, rdmap.AccessLocalWrite); err != nil {
		return nil, err
	}
	return s, s.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{s.rmr.SGE(0, cmaMsgLen)}})
}

func (s *sendRecv) close() {
	s.qp.Close()
	s.cq.Close()
}

// await waits for a completion of kind op.
func (s *sendRecv) await(ctx context.Context, op rdmap.WCOpcode) (rdmap.WC, error) {
	var wc [1]rdmap.WC
	for {
		if s.cq.Poll(wc[:]) == 1 {
			if wc[0].Status != rdmap.WCSuccess {
				return wc[0], fmt.Errorf("%v completion: %v", wc[0].Op, wc[0].Status)
			}
			if wc[0].Op == op {
				return wc[0], nil
			}
			continue
		}
		if err := s.cq.Wait(ctx); err != nil {
			return wc[0], err
		}
	}
}

func (s *sendRecv) send(ctx context.Context) error {
	if err := s.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{s.smr.SGE(0, cmaMsgLen)}, Signaled: true}); err != nil {
		return err
	}
	_, err := s.await(ctx, rdmap.WCSend)
	return err
}

// cmaClient plays rdma_client against the guest's rdma_server.
func cmaClient() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	s, err := newSendRecv(dev)
	if err != nil {
		return "", err
	}
	defer s.close()
	conn, err := dialGuest(ctx, fwdCMA, dev, &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}},
		cm.ConnParam{QP: s.qp, IRD: 1, ORD: 1})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := s.send(ctx); err != nil {
		return "", err
	}
	wc, err := s.await(ctx, rdmap.WCRecv)
	if err != nil {
		return "", err
	}
	if wc.ByteLen != cmaMsgLen {
		return "", fmt.Errorf("rdma_server answered %d bytes, want %d", wc.ByteLen, cmaMsgLen)
	}
	select {
	case <-conn.Done(): // rdma_server disconnects after its send
	case <-ctx.Done():
		return "", fmt.Errorf("rdma_server did not disconnect")
	}
	return fmt.Sprintf("sent 16 B, got %d B back, server disconnected", wc.ByteLen), nil
}

// cmaServer plays rdma_server for the guest's rdma_client on addr.
func cmaServer(ctx context.Context, addr string, ready chan<- error) (string, error) {
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	ln, err := cm.Listen(ctx, addr, dev, &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}})
	ready <- err
	if err != nil {
		return "", err
	}
	defer ln.Close()
	req, err := ln.Accept(ctx)
	if err != nil {
		return "", err
	}
	s, err := newSendRecv(dev)
	if err != nil {
		req.Reject(nil)
		return "", err
	}
	defer s.close()
	conn, err := req.Accept(cm.ConnParam{QP: s.qp, IRD: 1, ORD: 1})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	wc, err := s.await(ctx, rdmap.WCRecv)
	if err != nil {
		return "", err
	}
	if err := s.send(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("got %d B from rdma_client, answered 16 B", wc.ByteLen), nil
}

// cmatoseClient plays ucmatose's client (librdmacm/examples/cmatose.c)
// against the guest's ucmatose server: post count receives of size bytes,
// connect, receive the server's count messages, send count back, and wait
// for the server's disconnect.
func cmatoseClient(count, size int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(2 * count)
	if err != nil {
		return "", err
	}
	defer cq.Close()
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: count, MaxRecvWR: count, SignalAll: true})
	if err != nil {
		return "", err
	}
	defer qp.Close()
	mem := make([]byte, size)
	mr, err := pd.RegisterMemory(mem, rdmap.AccessLocalWrite)
	if err != nil {
		return "", err
	}
	for i := 0; i < count; i++ {
		if err := qp.PostRecv(rdmap.RecvWR{ID: uint64(i), SGL: []rdmap.SGE{mr.SGE(0, size)}}); err != nil {
			return "", err
		}
	}
	// ucmatose's server sends as soon as it is established: take FPDUs
	// that come with the Reply.
	conn, err := dialGuest(ctx, fwdCMA, dev, &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData, AcceptEarlyFPDUs: true}},
		cm.ConnParam{QP: qp, IRD: 1, ORD: 1})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	s := &sendRecv{cq: cq}
	recvd := 0
	for ; recvd < count; recvd++ {
		wc, err := s.await(ctx, rdmap.WCRecv)
		if err != nil {
			return "", fmt.Errorf("after %d messages: %w", recvd, err)
		}
		if int(wc.ByteLen) != size {
			return "", fmt.Errorf("message %d is %d bytes, want %d", recvd, wc.ByteLen, size)
		}
	}
	for i := 0; i < count; i++ {
		if err := qp.PostSend(rdmap.SendWR{ID: uint64(100 + i), Op: rdmap.WRSend, SGL: []rdmap.SGE{mr.SGE(0, size)}}); err != nil {
			return "", err
		}
	}
	for i := 0; i < count; i++ {
		if _, err := s.await(ctx, rdmap.WCSend); err != nil {
			return "", fmt.Errorf("send %d: %w", i, err)
		}
	}
	select {
	case <-conn.Done():
	case <-ctx.Done():
		return "", fmt.Errorf("ucmatose did not disconnect")
	}
	return fmt.Sprintf("received %d x %d B, sent %d x %d B, server disconnected", recvd, size, count, size), nil
}
