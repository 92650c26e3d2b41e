package cm

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// earlyResponder answers one Request with a Reply and, in the same write,
// an FPDU carrying a Send of msg: a responder that sends first.
func earlyResponder(t *testing.T, ln net.Listener, msg []byte) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	hdr := make([]byte, mpa.HeaderLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return
	}
	n, _ := mpa.FrameLen(hdr)
	rest := make([]byte, n-mpa.HeaderLen)
	io.ReadFull(c, rest)
	var req mpa.Frame
	mpa.ParseFrame(append(hdr, rest...), &req)
	out, _ := mpa.AppendFrame(nil, &mpa.Frame{Reply: true, Rev: req.Rev, Enhanced: req.Enhanced, IRD: req.ORD, ORD: req.IRD})
	dh := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpSend), QN: 0, MSN: 1})
	out = mpa.AppendFPDU(out, dh, msg, false)
	c.Write(out)
	io.Copy(io.Discard, c)
}

func TestAcceptEarlyFPDUs(t *testing.T) {
	for _, accept := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); earlyResponder(t, ln, []byte("hello")) }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		dev, _ := rdmap.NewDevice(nil)
		pd := dev.AllocPD()
		cq, _ := dev.CreateCQ(4)
		qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
		buf := make([]byte, 16)
		mr, _ := pd.RegisterMemory(buf, rdmap.AccessLocalWrite)
		qp.PostRecv(rdmap.RecvWR{ID: 7, SGL: []rdmap.SGE{mr.SGE(0, 16)}})
		conn, err := (&Dialer{Config: &Config{MPA: mpa.Policy{AcceptEarlyFPDUs: accept}}}).Dial(ctx, ln.Addr().String(), dev, ConnParam{QP: qp, IRD: 1, ORD: 1})
		if !accept {
			if !errors.Is(err, mpa.ErrExtraData) {
				t.Errorf("strict initiator: %v, want ErrExtraData", err)
			}
		} else if err != nil {
			t.Errorf("lenient initiator: %v", err)
		} else {
			var wc [1]rdmap.WC
			for cq.Poll(wc[:]) == 0 {
				if err := cq.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if wc[0].Status != rdmap.WCSuccess || wc[0].ID != 7 || string(buf[:wc[0].ByteLen]) != "hello" {
				t.Errorf("early Send: %+v %q", wc[0], buf[:wc[0].ByteLen])
			}
			conn.Abort()
		}
		qp.Close()
		dev.Close()
		ln.Close()
		<-done
		cancel()
	}
}
