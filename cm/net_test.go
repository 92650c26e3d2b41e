package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

func TestNetStyle(t *testing.T) {
	dev := newDev(t)
	ctx := context.Background()
	ln, err := cm.Listen(ctx, "127.0.0.1:0", dev, cfgT(t, cm.Config{Backlog: 4}))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// Accept.
	srvConns := make(chan *cm.Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			srvConns <- nil
			return
		}
		if !bytes.Equal(req.PrivateData, []byte("hi")) || req.IRD != 2 || req.ORD != 3 || req.Peer.Rev != 2 {
			t.Errorf("request %+v", req)
		}
		c, err := req.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 3, ORD: 2, PrivateData: []byte("welcome")})
		if err != nil {
			t.Error(err)
		}
		srvConns <- c
	}()
	c, err := cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 2, ORD: 3, PrivateData: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	s := <-srvConns
	if s == nil {
		t.FailNow()
	}
	if !bytes.Equal(c.PrivateData, []byte("welcome")) || c.Params.IRD != 2 || c.Params.ORD != 3 || s.Params.IRD != 3 || s.Params.ORD != 2 {
		t.Errorf("client %+v / server %+v", c.Params, s.Params)
	}
	if c.LocalAddr.String() != s.RemoteAddr.String() {
		t.Errorf("addresses %v %v", c.LocalAddr, s.RemoteAddr)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, s.Done(), "server conn done")
	if s.Err() != nil || c.Err() != nil {
		t.Errorf("errors %v %v", s.Err(), c.Err())
	}
	s.Close()
	s.Close() // idempotent

	// Reject: errors.As gives the peer's private data.
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			_ = req.Reject([]byte("busy"))
		}
	}()
	_, err = cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()})
	var rej *mpa.RejectedError
	if !errors.As(err, &rej) || !bytes.Equal(rej.Reply.PrivateData, []byte("busy")) || !rej.Reply.Reject {
		t.Errorf("dial rejected: %v", err)
	}

	// Abort: the server sees ECONNRESET.
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			srvConns <- nil
			return
		}
		c, _ := req.Accept(cm.ConnParam{QP: testutil.NewFakeQP()})
		srvConns <- c
	}()
	c, err = cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()})
	if err != nil {
		t.Fatal(err)
	}
	s = <-srvConns
	_ = c.Abort()
	waitClosed(t, s.Done(), "server conn done after abort")
	if s.Err() == nil || !errors.Is(c.Err(), testutil.ErrAborted) {
		t.Errorf("after abort: server %v client %v", s.Err(), c.Err())
	}
	s.Close()

	// Accept(ctx) honours its context.
	actx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ln.Accept(actx); !errors.Is(err, context.Canceled) {
		t.Errorf("accept with cancelled ctx: %v", err)
	}
}

func TestNetStyleCloseRejectsPending(t *testing.T) {
	dev := newDev(t)
	ctx := context.Background()
	ln, err := cm.Listen(ctx, "127.0.0.1:0", dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	dialed := make(chan error, 1)
	go func() {
		_, err := cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()})
		dialed <- err
	}()
	// Wait for the request to be pending, then close without taking it.
	req, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := ln.Accept(ctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after close: %v", err)
	}
	// A taken request outlives the listener.
	if err := req.Reject(nil); err != nil {
		t.Errorf("reject after close: %v", err)
	}
	var rej *mpa.RejectedError
	if err := <-dialed; !errors.As(err, &rej) {
		t.Errorf("dial: %v", err)
	}
	ln.Close() // idempotent
}

func TestDialErrors(t *testing.T) {
	dev := newDev(t)
	// Timeout: the peer never answers.
	addr := rawServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := cm.Dial(ctx, addr.String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()})
	var ce *cm.ConnectError
	if !errors.As(err, &ce) || !ce.Timeout() || ce.Status != cm.StatusTimeout {
		t.Errorf("dial timeout: %v", err)
	}
	// The Config's ReplyTimeout too.
	d := &cm.Dialer{Config: &cm.Config{ReplyTimeout: 200 * time.Millisecond}}
	if _, err := d.Dial(context.Background(), addr.String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()}); !errors.As(err, &ce) || !ce.Timeout() {
		t.Errorf("reply timeout: %v", err)
	}
	// Refused by policy: a reply with markers.
	addr = rawServer(t, func(req mpa.Frame) []byte {
		return frameBytes(mpa.Frame{Reply: true, Rev: 2, Enhanced: true, Markers: true})
	})
	if _, err := cm.Dial(context.Background(), addr.String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()}); !errors.As(err, &ce) ||
		ce.Status != cm.StatusRefused || !errors.Is(err, mpa.ErrMarkersRefused) {
		t.Errorf("markers: %v", err)
	}
	// Bad parameters.
	if _, err := cm.Dial(context.Background(), addr.String(), dev, cm.ConnParam{}); !errors.Is(err, cm.ErrNoQP) {
		t.Errorf("no QP: %v", err)
	}
	if _, err := (&cm.Dialer{Config: &cm.Config{MPA: mpa.Policy{Rev: 7}}}).Dial(context.Background(), addr.String(), dev,
		cm.ConnParam{QP: testutil.NewFakeQP()}); err == nil {
		t.Error("bad config accepted")
	}
}
