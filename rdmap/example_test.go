package rdmap_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/rdmap"
)

// endpoint is one side of the example: a PD, a CQ and a QP on it.
type endpoint struct {
	pd *rdmap.PD
	cq *rdmap.CQ
	qp *rdmap.QP
}

func newEndpoint(dev *rdmap.Device) (*endpoint, error) {
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		return nil, err
	}
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		return nil, err
	}
	return &endpoint{pd: pd, cq: cq, qp: qp}, nil
}

// next waits for the next completion on cq and fails unless it succeeded.
func next(ctx context.Context, cq *rdmap.CQ) (rdmap.WC, error) {
	var wc [1]rdmap.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return rdmap.WC{}, err
		}
	}
	if wc[0].Status != rdmap.WCSuccess {
		return wc[0], fmt.Errorf("work request %d: %v", wc[0].ID, wc[0].Status)
	}
	return wc[0], nil
}

// Example embeds gosiw as a software RNIC: a server and a client on one
// device connect over loopback TCP (the connection manager runs the MPA
// handshake). The server tells the client where its buffer is in the MPA
// private data of its Reply (an rdmap.BufferDesc); the client RDMA-Writes
// into that buffer, RDMA-Reads it back, and Sends the server a
// BufferDesc of its own buffer, which the server receives.
func Example() {
	if err := writeReadSend(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// client: wrote and read back "hello, RDMA" at offset 8
	// server: buffer holds "........hello, RDMA....."
	// server: the client's buffer is 64 bytes, STag as registered: true
}

func writeReadSend() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()

	// Server: a buffer open to remote reads and writes, a receive buffer.
	srv, err := newEndpoint(dev)
	if err != nil {
		return err
	}
	target := []byte("........................")
	targetMR, err := srv.pd.RegisterMemory(target, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
	if err != nil {
		return err
	}
	inbox := make([]byte, 64)
	inboxMR, err := srv.pd.RegisterMemory(inbox, rdmap.AccessLocalWrite)
	if err != nil {
		return err
	}
	if err := srv.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{inboxMR.SGE(0, len(inbox))}}); err != nil {
		return err
	}
	desc, err := targetMR.Describe(0, uint32(len(target))).AppendBinary(nil)
	if err != nil {
		return err
	}

	ln, err := cm.Listen(ctx, "127.0.0.1:0", dev, nil)
	if err != nil {
		return err
	}
	defer ln.Close()
	type accepted struct {
		conn *cm.Conn
		err  error
	}
	acc := make(chan accepted, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			acc <- accepted{err: err}
			return
		}
		conn, err := req.Accept(cm.ConnParam{QP: srv.qp, IRD: 4, ORD: 4, PrivateData: desc})
		acc <- accepted{conn, err}
	}()

	// Client: its own PD, CQ, QP and buffer.
	cl, err := newEndpoint(dev)
	if err != nil {
		return err
	}
	local := make([]byte, 64)
	copy(local, "hello, RDMA")
	localMR, err := cl.pd.RegisterMemory(local, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	if err != nil {
		return err
	}
	conn, err := cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: cl.qp, IRD: 4, ORD: 4})
	if err != nil {
		return err
	}
	defer conn.Close()
	a := <-acc
	if a.err != nil {
		return a.err
	}
	defer a.conn.Close()

	// The server's buffer, from its Reply.
	remote, _, err := rdmap.ParseBufferDesc(conn.PrivateData)
	if err != nil {
		return err
	}
	const n, at = 11, 8
	if at+n > remote.Len {
		return errors.New("the server's buffer is too small")
	}
	dst := remote.Remote()
	dst.Offset += at
	if err := cl.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRWrite, SGL: []rdmap.SGE{localMR.SGE(0, n)},
		Remote: dst, Signaled: true}); err != nil {
		return err
	}
	if _, err := next(ctx, cl.cq); err != nil {
		return err
	}
	// Read it back into the second half of the local buffer.
	if err := cl.qp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRRead, SGL: []rdmap.SGE{localMR.SGE(32, n)},
		Remote: dst, Signaled: true}); err != nil {
		return err
	}
	if _, err := next(ctx, cl.cq); err != nil {
		return err
	}
	fmt.Printf("client: wrote and read back %q at offset %d\n", local[32:32+n], at)

	// Tell the server about the client's buffer in a Send.
	mine, err := localMR.Describe(0, uint32(len(local))).AppendBinary(nil)
	if err != nil {
		return err
	}
	msgMR, err := cl.pd.RegisterMemory(mine, 0)
	if err != nil {
		return err
	}
	if err := cl.qp.PostSend(rdmap.SendWR{ID: 4, Op: rdmap.WRSend, SGL: []rdmap.SGE{msgMR.SGE(0, len(mine))}, Signaled: true}); err != nil {
		return err
	}
	if _, err := next(ctx, cl.cq); err != nil {
		return err
	}
	wc, err := next(ctx, srv.cq)
	if err != nil {
		return err
	}
	theirs, _, err := rdmap.ParseBufferDesc(inbox[:wc.ByteLen])
	if err != nil {
		return err
	}
	fmt.Printf("server: buffer holds %q\n", target)
	fmt.Printf("server: the client's buffer is %d bytes, STag as registered: %v\n", theirs.Len, theirs.STag == localMR.STag())
	return nil
}

// A BufferDesc travels in 16 bytes: STag, offset, length.
func ExampleBufferDesc() {
	d := rdmap.BufferDesc{STag: 0x12345601, Offset: 4096, Len: 65536}
	b, err := d.AppendBinary(nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("% x\n", b)
	got, rest, err := rdmap.ParseBufferDesc(b)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got, len(rest))
	// Output:
	// 12 34 56 01 00 00 00 00 00 00 10 00 00 01 00 00
	// stag 0x12345601 offset 4096 len 65536 0
}
