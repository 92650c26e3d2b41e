package cm_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

// Linux siw's own Request and Reply bytes (cm/testdata, captured in the
// lab), accepted and answered as siw answers them.

// TestSiwRequestToListener feeds siw's Request (rping -c: rev 2, H,
// IRD/ORD 1/1) to a listener that accepts with rping's 1/1: the Reply is
// byte for byte the one siw sends, and the handler sees IRD/ORD 1/1.
func TestSiwRequestToListener(t *testing.T) {
	dev := newDev(t)
	srv := newRecorder(t)
	qps := make(chan *testutil.FakeQP, 1)
	srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		q := testutil.NewFakeQP()
		qps <- q
		return id.Accept(cm.ConnParam{QP: q, IRD: 1, ORD: 1})
	}
	l := listenID(t, dev, cfgT(t, cm.Config{}), 0, srv.handle)
	for _, name := range []string{"siw-mpa-request.bin", "siw-mpa-request2.bin"} {
		raw := rawDial(t, l.LocalAddr())
		_, _ = raw.Write(siwBytes(t, name))
		_, got := readFrame(t, raw)
		if want := siwBytes(t, "siw-mpa-reply.bin"); !bytes.Equal(got, want) {
			t.Errorf("%s: reply % x, siw's % x", name, got, want)
		}
		req := srv.wait(nil, cm.EventConnectRequest).ev
		if req.IRD != 1 || req.ORD != 1 || req.Peer.Rev != 2 || !req.Peer.Enhanced || req.Peer.P2P || len(req.PrivateData) != 0 {
			t.Errorf("request event %+v %+v", req, req.Peer)
		}
		// rping's first Send, as siw sent it in the lab, reaches the QP.
		send := mustHex("0022 4143 0000 0000 0000 0000 0000 0001 0000 0000 0000 558d 6e49 7b80 13b3 4d00 0000 0040 0000 0000")
		_, _ = raw.Write(send)
		q := <-qps
		waitClosed(t, q.First(), "rping's Send")
		got2, _ := q.Received()
		if !bytes.Equal(got2[0], send[2:36]) {
			t.Errorf("QP got % x", got2[0])
		}
		raw.Close()
		waitDone(t, q)
		srv.mu.Lock()
		srv.all = nil
		srv.mu.Unlock()
	}
}

// TestSiwRepliesToConnect answers gosiw's Connect with each Reply siw gave
// in the lab to the matching Request.
func TestSiwRepliesToConnect(t *testing.T) {
	dev := newDev(t)
	cases := []struct {
		file   string
		cfg    cm.Config
		status cm.Status
		check  func(t *testing.T, p *mpa.Params, q *testutil.FakeQP, after []byte)
	}{
		{"siw-mpa-reply-v2.bin", cm.Config{}, cm.StatusOK, func(t *testing.T, p *mpa.Params, _ *testutil.FakeQP, _ []byte) {
			if p.Rev != 2 || !p.Enhanced || p.IRD != 1 || p.ORD != 1 || p.CRC || p.P2P {
				t.Errorf("params %+v", p)
			}
		}},
		{"siw-mpa-reply-v1.bin", cm.Config{MPA: mpa.Policy{Rev: 1}}, cm.StatusOK, func(t *testing.T, p *mpa.Params, _ *testutil.FakeQP, _ []byte) {
			if p.Rev != 1 || p.Enhanced {
				t.Errorf("params %+v", p)
			}
		}},
		{"siw-mpa-reply-v2-crc.bin", cm.Config{MPA: mpa.Policy{CRC: mpa.CRCRequired}}, cm.StatusOK, func(t *testing.T, p *mpa.Params, _ *testutil.FakeQP, after []byte) {
			if !p.CRC {
				t.Errorf("params %+v", p)
			}
			// The first FPDU after the Reply carries a good CRC32c.
			if _, err := mpa.ParseFPDU(after, true); err != nil {
				t.Errorf("first FPDU % x: %v", after, err)
			}
		}},
		{"siw-mpa-reply-v2-markers.bin", cm.Config{MPA: mpa.Policy{Markers: mpa.MarkersRequest}}, cm.StatusRejected, nil},
		{"siw-mpa-reply-v1-markers.bin", cm.Config{MPA: mpa.Policy{Rev: 1, Markers: mpa.MarkersRequest}}, cm.StatusRejected, nil},
		{"siw-mpa-reply-v2-noH.bin", cm.Config{}, cm.StatusRefused, nil},
		{"siw-mpa-reply-v2-pd.bin", cm.Config{}, cm.StatusOK, nil},
		{"siw-mpa-reply-v2-p2p-rtr.bin", cm.Config{MPA: mpa.Policy{P2P: true, RTRs: mpa.RTRSetAll}}, cm.StatusOK, func(t *testing.T, p *mpa.Params, _ *testutil.FakeQP, after []byte) {
			if !p.P2P || p.RTR != mpa.RTRWrite || p.IRD != 16 || p.ORD != 16 {
				t.Errorf("params %+v", p)
			}
			// The RTR on the wire is the one siw sends as initiator.
			if want := mustHex("000e c140 00000001 0000000000000000 00000000"); !bytes.Equal(after, want) {
				t.Errorf("RTR % x, siw sends % x", after, want)
			}
		}},
		{"siw-mpa-reply-v3.bin", cm.Config{}, cm.StatusReset, nil}, // siw closes without a word
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			reply := siwBytes(t, c.file)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			after := make(chan []byte, 1)
			go func() {
				cn, err := ln.Accept()
				if err != nil {
					after <- nil
					return
				}
				defer cn.Close()
				if _, err := readFrameQuiet(cn); err != nil {
					after <- nil
					return
				}
				if len(reply) == 0 {
					after <- nil
					return
				}
				_, _ = cn.Write(reply)
				// The first FPDU the initiator sends, if any.
				_ = cn.SetReadDeadline(time.Now().Add(waitLimit))
				buf := make([]byte, 256)
				n, _ := io.ReadAtLeast(cn, buf, 1)
				after <- buf[:n]
			}()
			r := newRecorder(t)
			id := cm.NewID(dev, r.handle)
			defer id.Destroy()
			if err := id.SetConfig(cfgT(t, c.cfg)); err != nil {
				t.Fatal(err)
			}
			ird, ord := 1, 1
			if c.file == "siw-mpa-reply-v2-p2p-rtr.bin" {
				ird, ord = 16, 16
			}
			q := testutil.NewFakeQP()
			q.FirstSend = []byte("hello")
			if err := id.Connect(ln.Addr().String(), cm.ConnParam{QP: q, IRD: ird, ORD: ord}); err != nil {
				t.Fatal(err)
			}
			ev := r.wait(id, cm.EventConnectReply).ev
			if ev.Status != c.status {
				t.Fatalf("status %v (%v), want %v", ev.Status, ev.Err, c.status)
			}
			a := <-after
			if c.check != nil {
				c.check(t, ev.Params, q, a)
			}
		})
	}
}
