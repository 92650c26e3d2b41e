package testutil

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/mpa"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAppendRTR(t *testing.T) {
	// Linux siw's Write RTR, as captured in the lab (p2p-rping-default).
	siwWrite, _ := hex.DecodeString("000ec14000000001000000000000000000000000")
	if got := AppendRTR(nil, &mpa.Framer{}, mpa.RTRWrite); !bytes.Equal(got, siwWrite) {
		t.Errorf("write RTR % x, siw % x", got, siwWrite)
	}
	for _, r := range []mpa.RTR{mpa.RTRWrite, mpa.RTRRead, mpa.RTRSend} {
		for _, crc := range []bool{false, true} {
			b := AppendRTR(nil, &mpa.Framer{CRC: crc}, r)
			f, err := mpa.ParseFPDU(b, crc)
			if err != nil || f.WireLen != len(b) {
				t.Fatalf("%v: % x: %v", r, b, err)
			}
			if got := RTROf(f.ULPDU); got != r {
				t.Errorf("RTROf(%v RTR) = %v", r, got)
			}
		}
	}
	if RTROf(AppendSend(nil, &mpa.Framer{}, 1, []byte("x"))[2:]) != mpa.RTRNone {
		t.Error("a Send with payload taken for an RTR")
	}
	if AppendRTR(nil, &mpa.Framer{}, mpa.RTRNone) != nil {
		t.Error("RTRNone appended bytes")
	}
}

func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return a, <-ch
}

func wait(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
}

func TestFakeQPPair(t *testing.T) {
	for _, p := range []mpa.Params{
		{P2P: true, RTR: mpa.RTRRead, CRC: true},
		{CRC: true, MarkersTx: true, MarkersRx: true},
		{},
	} {
		a, b := tcpPair(t)
		ini, resp := NewFakeQP(), NewFakeQP()
		ini.FirstSend = []byte("first")
		pi, pr := p, p
		pi.Initiator = true
		if err := resp.Start(b, &pr); err != nil {
			t.Fatal(err)
		}
		if err := ini.Start(a, &pi); err != nil {
			t.Fatal(err)
		}
		wait(t, resp.First())
		got, _ := resp.Received()
		if p.P2P && RTROf(got[0]) != p.RTR {
			t.Errorf("%+v: first FPDU % x", p, got[0])
		}
		if !p.P2P && !bytes.HasSuffix(got[0], []byte("first")) {
			t.Errorf("%+v: first FPDU % x", p, got[0])
		}
		if err := resp.Send(bytes.Repeat([]byte("y"), 1500)); err != nil {
			t.Fatal(err)
		}
		wait(t, ini.First())
		ini.Disconnect(false)
		wait(t, ini.Done())
		wait(t, resp.Done())
		if ini.Err() != nil || resp.Err() != nil {
			t.Errorf("%+v: errors %v %v", p, ini.Err(), resp.Err())
		}
	}
	// Abrupt.
	a, b := tcpPair(t)
	ini, resp := NewFakeQP(), NewFakeQP()
	_ = ini.Start(a, &mpa.Params{Initiator: true})
	_ = resp.Start(b, &mpa.Params{})
	ini.Disconnect(true)
	wait(t, ini.Done())
	wait(t, resp.Done())
	if !errors.Is(ini.Err(), ErrAborted) || resp.Err() == nil {
		t.Errorf("abrupt: %v %v", ini.Err(), resp.Err())
	}
	if err := (&FakeQP{StartErr: errors.New("x")}).Start(nil, nil); err == nil {
		t.Error("StartErr ignored")
	}
}
