package rping

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFill(t *testing.T) {
	buf := make([]byte, 64)
	next := Fill(buf, 0, 65)
	want := "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	if got := string(buf[:63]); got != want || buf[63] != 0 || next != 66 {
		t.Fatalf("Fill = %q (last %d, next %d), want %q", got, buf[63], next, want)
	}
	// Wrap-around from 'z' to 'A', and the start letter cycling.
	buf = make([]byte, 80)
	Fill(buf, 7, 'y')
	if !strings.HasPrefix(string(buf), "rdma-ping-7: yzABC") {
		t.Fatalf("wrap: %q", buf[:20])
	}
	if Fill(buf, 1, 122) != 65 {
		t.Fatal("start letter does not wrap")
	}
}

func TestInfo(t *testing.T) {
	var b [MsgLen]byte
	in := Info{Buf: 0x0000558d6e497b80, RKey: 0x13b34d00, Size: 0x40}
	in.Put(b[:])
	// The bytes Linux rping sent in the lab capture.
	if fmt.Sprintf("%x", b) != "0000558d6e497b8013b34d0000000040" {
		t.Fatalf("encoded %x", b)
	}
	out, err := ParseInfo(b[:], MsgLen)
	if err != nil || out != in {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := ParseInfo(b[:], 15); err != ErrBogus {
		t.Fatalf("short message: %v", err)
	}
}

// TestPingPong runs rping's exchange between a gosiw client and a gosiw
// server over loopback TCP at rping's sizes, with validation.
func TestPingPong(t *testing.T) {
	for _, size := range []int{MinSize, 64, 1024, 4096, MaxSize} {
		for _, crc := range []bool{false, true} {
			t.Run(fmt.Sprintf("size=%d/crc=%v", size, crc), func(t *testing.T) { pingPong(t, size, 3, crc) })
		}
	}
}

func pingPong(t *testing.T, size, count int, crc bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cfg := &cm.Config{}
	if crc {
		cfg.MPA.CRC = mpa.CRCOn
	}
	ln, err := cm.Listen(ctx, "127.0.0.1:0", dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	type srvResult struct {
		n    int
		last string
		err  error
	}
	srvDone := make(chan srvResult, 1)
	go func() {
		var r srvResult
		defer func() { srvDone <- r }()
		req, err := ln.Accept(ctx)
		if err != nil {
			r.err = err
			return
		}
		e, err := NewEndpoint(dev.AllocPD(), MaxSize, false)
		if err != nil {
			req.Reject(nil)
			r.err = err
			return
		}
		defer e.Close()
		if err := e.Arm(); err != nil {
			r.err = err
			return
		}
		conn, err := req.Accept(cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
		if err != nil {
			r.err = err
			return
		}
		defer conn.Close()
		r.n, r.err = e.Server(ctx, func(_ int, data []byte) { r.last = string(data) })
	}()

	e, err := NewEndpoint(dev.AllocPD(), size, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Arm(); err != nil {
		t.Fatal(err)
	}
	conn, err := cm.Dial(ctx, ln.Addr().String(), dev, cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	if conn.Params.CRC != crc {
		t.Fatalf("CRC negotiated %v, want %v", conn.Params.CRC, crc)
	}
	res, err := e.Client(ctx, count, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	sr := <-srvDone
	if sr.err != nil {
		t.Fatalf("server: %v", sr.err)
	}
	if res.Pings != count || sr.n != count {
		t.Fatalf("client pinged %d, server served %d, want %d", res.Pings, sr.n, count)
	}
	want := make([]byte, size)
	Fill(want, count-1, byte(65+count-1))
	if res.Data != string(want[:size-1]) || sr.last != res.Data {
		t.Fatalf("last ping data: client %q server %q want %q", res.Data, sr.last, want[:size-1])
	}
}

// FuzzParseInfo: the info message comes from the rping peer; ParseInfo
// takes exactly MsgLen bytes and what it reads Put writes back.
func FuzzParseInfo(f *testing.F) {
	b := make([]byte, MsgLen)
	Info{Buf: 0x1000, RKey: 0x12345601, Size: DefaultSize}.Put(b)
	f.Add(b)
	f.Add(b[:MsgLen-1])
	f.Fuzz(func(t *testing.T, msg []byte) {
		info, err := ParseInfo(msg, len(msg))
		if (err == nil) != (len(msg) == MsgLen) {
			t.Fatalf("%d bytes: %v", len(msg), err)
		}
		if err != nil {
			return
		}
		out := make([]byte, MsgLen)
		info.Put(out)
		if !bytes.Equal(out, msg) {
			t.Fatalf("%x parsed to %+v, which encodes as %x", msg, info, out)
		}
	})
}
