package rdmap_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// stallVictim is a QP facing a raw peer over net.Pipe inside a synctest
// bubble, with one receive posted.
func stallVictim(t *testing.T, cfg rdmap.QPConfig, o rdmaptest.Options) (*victim, *rdmaptest.RawPeer) {
	t.Helper()
	dev := newDevice(t)
	v := newVictim(t, dev, cfg)
	mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{v.recv.SGE(0, 128)}}))
	o.Pipe = true
	p := rdmaptest.NewRawPeer(t, v.qp, &o, false)
	return v, p
}

// partialSend writes the first n bytes of the FPDU of a 100-byte Send.
func partialSend(p *rdmaptest.RawPeer, n int) []byte {
	ul := append(rdmaptest.UntaggedHeader(wire.OpSend, wire.QNSend, 1, 0, true, 0), make([]byte, 100)...)
	b := p.Framer.AppendFPDU(nil, ul, nil)
	go func() { _, _ = p.Conn.Write(b[:n]) }()
	return b[n:]
}

// expectStall waits for the stall Terminate and checks that it came
// exactly timeout after the last byte (the bubble's clock is fake, so
// the figure is exact).
func expectStall(t *testing.T, v *victim, p *rdmaptest.RawPeer, last time.Time, timeout time.Duration) {
	t.Helper()
	term, _ := p.ExpectTerminate(24 * time.Hour)
	if got := time.Since(last); got != timeout {
		t.Errorf("Terminate %v after the last byte, want %v", got, timeout)
	}
	if term.Layer != wire.LayerLLP || term.EType != mpa.TermTypeMPA || term.Code != uint8(mpa.TermTCPClosed) {
		t.Errorf("Terminate %v, want LLP/MPA/TCP connection closed", &term)
	}
	p.ExpectEOF(time.Hour)
	p.Conn.Close()
	rdmaptest.WaitDone(t, v.qp, time.Hour)
	err := v.qp.Err()
	var te *rdmap.TerminateError
	if !errors.As(err, &te) || te.Remote || te.Layer != wire.LayerLLP || !errors.Is(err, rdmap.ErrRxStalled) {
		t.Fatalf("Err() = %v, want the local LLP Terminate caused by ErrRxStalled", err)
	}
	wcs := pollN(t, v.cq, 1)
	if wcs[0].ID != 1 || wcs[0].Status != rdmap.WCWRFlushErr {
		t.Errorf("receive completed %+v", wcs[0])
	}
}

// TestRxStallTimeout: a partial FPDU that makes no progress ends the QP
// after QPConfig.RxStallTimeout (default 60s), measured from the last
// byte that arrived; an idle connection never times out; a negative
// timeout turns the limit off.
//
// It runs on every receive path: direct, buffered and markers, each with
// and without CRC.
func TestRxStallTimeout(t *testing.T) {
	for _, m := range []struct {
		name string
		cfg  rdmap.QPConfig
		o    rdmaptest.Options
	}{
		{"nocrc", rdmap.QPConfig{}, rdmaptest.Options{}},
		{"crc", rdmap.QPConfig{}, rdmaptest.Options{CRC: true}},
		{"buffered", rdmap.QPConfig{BufferedRx: true}, rdmaptest.Options{}},
		{"buffered-crc", rdmap.QPConfig{BufferedRx: true}, rdmaptest.Options{CRC: true}},
		{"markers", rdmap.QPConfig{}, rdmaptest.Options{MarkersAB: true}},
		{"markers-crc", rdmap.QPConfig{}, rdmaptest.Options{MarkersAB: true, CRC: true}},
	} {
		name, o := m.name, m.o
		cfg := func(c rdmap.QPConfig) rdmap.QPConfig {
			c.BufferedRx = m.cfg.BufferedRx
			return c
		}
		t.Run(name+"/default", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v, p := stallVictim(t, cfg(rdmap.QPConfig{}), o)
				// Idle for an hour: nothing happens.
				time.Sleep(time.Hour)
				synctest.Wait()
				if st := v.qp.State(); st != rdmap.StateRTS {
					t.Fatalf("idle QP in %v", st)
				}
				partialSend(p, 9)
				synctest.Wait()
				expectStall(t, v, p, time.Now(), 60*time.Second)
			})
		})
		t.Run(name+"/progress", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const timeout = 5 * time.Second
				v, p := stallVictim(t, cfg(rdmap.QPConfig{RxStallTimeout: timeout}), o)
				rest := partialSend(p, 5)
				synctest.Wait()
				// One byte every 4s: progress, never a stall, although
				// the FPDU takes far longer than the timeout.
				for range 10 {
					time.Sleep(4 * time.Second)
					if st := v.qp.State(); st != rdmap.StateRTS {
						t.Fatalf("QP making progress in %v", st)
					}
					_, _ = p.Conn.Write(rest[:1])
					rest = rest[1:]
				}
				expectStall(t, v, p, time.Now(), timeout)
			})
		})
		t.Run(name+"/off", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v, p := stallVictim(t, cfg(rdmap.QPConfig{RxStallTimeout: -1}), o)
				rest := partialSend(p, 30)
				time.Sleep(24 * time.Hour)
				synctest.Wait()
				if st := v.qp.State(); st != rdmap.StateRTS {
					t.Fatalf("QP with the limit off in %v", st)
				}
				// The rest still completes the Send.
				go func() { _, _ = p.Conn.Write(rest) }()
				expectWC(t, poll(t, v.cq), 1, rdmap.WCRecv, rdmap.WCSuccess)
			})
		})
	}
}

// TestRxStallGarbageWithCRC: with CRC a garbage header is not acted on
// before the CRC that covers it has arrived, so a second MPA Request
// after the handshake (a ULPDU_Length of 0x4d50 that never comes) ends
// with the stall Terminate instead of waiting forever.
func TestRxStallGarbageWithCRC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v, p := stallVictim(t, rdmap.QPConfig{RxStallTimeout: 10 * time.Second}, rdmaptest.Options{CRC: true})
		go func() { _, _ = p.Conn.Write([]byte("MPA ID Req Frame\x10\x02\x00\x00")) }()
		synctest.Wait()
		expectStall(t, v, p, time.Now(), 10*time.Second)
	})
}
