package cm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// newQP makes a QP with its own CQ on a new PD of dev.
func newQP(dev *rdmap.Device) (*rdmap.QP, error) {
	cq, err := dev.CreateCQ(16)
	if err != nil {
		return nil, err
	}
	return dev.AllocPD().CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
}

// Listen and Dial are the net-style layer: the client's private data
// arrives with the Request, the server's with the Reply.
func ExampleListen() {
	if err := listenDial(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// server: request "hello from the client", IRD 4 ORD 4
	// client: reply "welcome", revision 2, enhanced true
}

func listenDial() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	ln, err := cm.Listen(ctx, "127.0.0.1:0", dev, nil)
	if err != nil {
		return err
	}
	defer ln.Close()
	serverQP, err := newQP(dev)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	var server *cm.Conn
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			served <- err
			return
		}
		fmt.Printf("server: request %q, IRD %d ORD %d\n", req.PrivateData, req.IRD, req.ORD)
		server, err = req.Accept(cm.ConnParam{QP: serverQP, IRD: 4, ORD: 4, PrivateData: []byte("welcome")})
		served <- err
	}()

	clientQP, err := newQP(dev)
	if err != nil {
		return err
	}
	conn, err := cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: clientQP, IRD: 4, ORD: 4,
		PrivateData: []byte("hello from the client")})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := <-served; err != nil {
		return err
	}
	defer server.Close()
	fmt.Printf("client: reply %q, revision %d, enhanced %v\n", conn.PrivateData, conn.Params.Rev, conn.Params.Enhanced)
	return nil
}

// NewID is iw_cm's API: events reach a handler on the ID's own goroutine.
// This listener refuses every request with a reason in the MPA Reply's
// private data; the client gets it in a *mpa.RejectedError.
func ExampleNewID() {
	if err := rejectWithReason(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// listener: request with "may I?", rejecting
	// client: rejected: "no such service"
}

func rejectWithReason() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	listener := cm.NewID(dev, func(id *cm.ID, ev *cm.Event) error {
		if ev.Type != cm.EventConnectRequest {
			return nil
		}
		// id is the request's own child ID. After Reject returns no more
		// events reach it, and the reason's bytes may be reused.
		fmt.Printf("listener: request with %q, rejecting\n", ev.PrivateData)
		if err := id.Reject([]byte("no such service")); err != nil {
			return err // destroys the child ID, which rejects the request
		}
		return cm.ErrDestroy // done with the child: destroy it, as iw_cm does
	})
	defer listener.Destroy()
	if err := listener.Listen("127.0.0.1:0", 0); err != nil {
		return err
	}

	qp, err := newQP(dev)
	if err != nil {
		return err
	}
	_, err = cm.Dial(ctx, listener.LocalAddr().String(), dev, cm.ConnParam{QP: qp, IRD: 1, ORD: 1, PrivateData: []byte("may I?")})
	var rej *mpa.RejectedError
	if !errors.As(err, &rej) {
		return fmt.Errorf("want a reject, got %v", err)
	}
	fmt.Printf("client: rejected: %q\n", rej.Reply.PrivateData)
	return nil
}
