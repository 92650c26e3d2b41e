package rdmap_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/rdmap"
)

// wait returns the next completion of cq.
func wait(ctx context.Context, cq *rdmap.CQ) rdmap.WC {
	var wc [1]rdmap.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			panic(err)
		}
	}
	return wc[0]
}

// Example embeds gosiw as a software RNIC: a listener and a client on one
// device connect over loopback TCP (MPA handshake by the connection
// manager); the client RDMA-Writes into the server's registered buffer,
// then Sends a message that the server receives.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()

	// Server: a buffer open to remote writes, a receive buffer, a QP.
	spd := dev.AllocPD()
	target := make([]byte, 64)
	targetMR, _ := spd.RegisterMemory(target, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	inbox := make([]byte, 64)
	inboxMR, _ := spd.RegisterMemory(inbox, rdmap.AccessLocalWrite)
	scq, _ := dev.CreateCQ(16)
	sqp, _ := spd.CreateQP(&rdmap.QPConfig{SendCQ: scq, RecvCQ: scq})
	sqp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{inboxMR.SGE(0, 64)}})

	ln, _ := cm.Listen(ctx, "127.0.0.1:0", dev, nil)
	defer ln.Close()
	accepted := make(chan *cm.Conn, 1)
	go func() {
		req, _ := ln.Accept(ctx)
		conn, _ := req.Accept(cm.ConnParam{QP: sqp, IRD: 4, ORD: 4})
		accepted <- conn
	}()

	// Client: its own PD, buffers and QP.
	cpd := dev.AllocPD()
	msg := []byte("hello, RDMA")
	msgMR, _ := cpd.RegisterMemory(msg, 0)
	ccq, _ := dev.CreateCQ(16)
	cqp, _ := cpd.CreateQP(&rdmap.QPConfig{SendCQ: ccq, RecvCQ: ccq})
	conn, err := cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: cqp, IRD: 4, ORD: 4})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	server := <-accepted

	// The server's STag would normally travel in private data or a Send.
	cqp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRWrite, SGL: []rdmap.SGE{msgMR.SGE(0, len(msg))},
		Remote: rdmap.Remote{STag: targetMR.STag(), Offset: 0}})
	cqp.PostSend(rdmap.SendWR{ID: 3, Op: rdmap.WRSend, SGL: []rdmap.SGE{msgMR.SGE(0, 5)}, Signaled: true})
	fmt.Println("client:", wait(ctx, ccq).Status)
	wc := wait(ctx, scq) // Writes before the Send are placed before the Send completes
	fmt.Printf("server: %v %q, target %q\n", wc.Op, inbox[:wc.ByteLen], target[:len(msg)])

	conn.Close()
	server.Close()
	// Output:
	// client: success
	// server: recv "hello", target "hello, RDMA"
}
