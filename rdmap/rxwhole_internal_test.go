package rdmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// wholeRun receives the stream build returns for the STag of its region
// (served whole by every read) with a fresh engine, taken whole
// (mpa.Reader.Whole) or header first, until the first Terminate: it
// returns the registered memory, the completions and the Terminate.
func wholeRun(t *testing.T, build func(STag) []byte, crc, noWhole bool, fpdus int) ([]byte, []WC, *termInfo) {
	t.Helper()
	mem := make([]byte, 1024)
	qp, cq, mr := engineQP(t, 64, QPConfig{}, mem)
	stream := build(mr.STag())
	for i := range 3 {
		if err := qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(512+i*128, 70)}}); err != nil {
			t.Fatal(err)
		}
	}
	qp.p = mpa.Params{CRC: crc}
	rx := &qp.rx
	rx.noWhole = noWhole
	rx.init(qp, &cycleConn{data: stream, max: len(stream)})
	defer rx.release()
	var ti *termInfo
	for range fpdus {
		var err error
		ti, err = rx.fpdu()
		rx.dropRefs()
		if err != nil {
			t.Fatalf("fpdu: %v", err)
		}
		if ti != nil {
			saved := *ti
			ti = &saved
			break
		}
	}
	rx.flushRecvs()
	wcs := make([]WC, 16)
	n := cq.Poll(wcs)
	return bytes.Clone(mem), wcs[:n], ti
}

// engineQP returns a QP (not started) with cfg and one CQ of cqn
// completions as both of its CQs, and mem registered in its PD for local
// and remote writes, for a test that drives the QP's receive engine
// itself (rx.init); all of it is closed when the test ends.
func engineQP(tb testing.TB, cqn int, cfg QPConfig, mem []byte) (*QP, *CQ, *MR) {
	tb.Helper()
	dev, err := NewDevice(&Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(cqn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cq.Close() })
	cfg.SendCQ, cfg.RecvCQ = cq, cq
	qp, err := pd.CreateQP(&cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { qp.Close() })
	mr, err := pd.RegisterMemory(mem, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mr.Deregister() })
	return qp, cq, mr
}

// TestRxWholeAgrees: FPDUs taken whole from the reader's buffer
// (mpa.Reader.Whole) are received exactly as the header-first path
// receives them: the same bytes placed, the same completions, the same
// Terminate for a hostile FPDU among them, with CRC on and off, and a
// CRC error is reported before anything of its FPDU is acted on.
func TestRxWholeAgrees(t *testing.T) {
	pat := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	send := func(msn, mo uint32, last bool) []byte {
		return ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpSend), QN: wire.QNSend, MSN: msn, MO: mo})
	}
	// A Write's STag is that of the region (0) or another (1).
	write := func(to uint64, last bool, other ...byte) []byte {
		return ddp.AppendTagged(nil, &ddp.TaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: STag(len(other)), TO: to})
	}
	type seg struct{ h, p []byte }
	valid := []seg{
		{send(1, 0, true), pat(64, 1)},  // a single-segment Send
		{write(0, false), pat(60, 2)},   // a Write of two segments
		{write(60, true), pat(40, 3)},   //
		{send(2, 0, false), pat(30, 4)}, // a Send of two segments
		{send(2, 30, true), pat(34, 5)}, //
		{write(200, true), nil},         // a zero-length Write
		{write(300, true), pat(1, 6)},   // a one-byte Write
	}
	hostile := map[string]seg{
		"msn":         {send(5, 0, true), pat(8, 7)},  // DDP untagged, MSN range
		"stag":        {write(0, true, 1), pat(8, 7)}, // invalid STag
		"bounds":      {write(1020, true), pat(8, 7)}, // base or bounds
		"too-long":    {send(3, 0, true), pat(71, 7)}, // no buffer (longer than the receive)
		"short-ulpdu": {send(3, 0, true)[:10], nil},   // shorter than its header
		"opcode":      {ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, 14), QN: wire.QNSend, MSN: 3}), nil},
	}
	for _, crc := range []bool{false, true} {
		for name, h := range hostile {
			for _, corrupt := range []bool{false, true} {
				if corrupt && !crc {
					continue
				}
				t.Run(fmt.Sprintf("crc=%v/%s/corrupt=%v", crc, name, corrupt), func(t *testing.T) {
					build := func(stag STag) []byte {
						var stream []byte
						for _, s := range append(valid, h) {
							if s.h[0]&ddp.FlagTagged != 0 {
								// Name the region (or the region's STag
								// plus one: not a valid one).
								s.h = bytes.Clone(s.h)
								binary.BigEndian.PutUint32(s.h[2:], uint32(stag)+binary.BigEndian.Uint32(s.h[2:]))
							}
							stream = mpa.AppendFPDU(stream, s.h, s.p, crc)
						}
						if corrupt {
							stream[len(stream)-mpa.CRCLen] ^= 1 // the hostile FPDU's CRC
						}
						return stream
					}
					fpdus := len(valid) + 1
					memW, wcsW, tiW := wholeRun(t, build, crc, false, fpdus)
					memH, wcsH, tiH := wholeRun(t, build, crc, true, fpdus)
					if tiW == nil || tiH == nil {
						t.Fatalf("Terminate whole %+v, header first %+v", tiW, tiH)
					}
					tiW.cause, tiH.cause = nil, nil
					if tiW.ddpHdr[0]&ddp.FlagTagged != 0 {
						// Each run's region has its own STag.
						clear(tiW.ddpHdr[2:6])
						clear(tiH.ddpHdr[2:6])
					}
					if *tiW != *tiH {
						t.Fatalf("Terminate whole %+v\nheader first %+v", tiW, tiH)
					}
					if corrupt && (tiW.layer != wire.LayerLLP || tiW.code != uint8(mpa.TermCRC)) {
						t.Fatalf("corrupt FPDU: Terminate %+v, want the LLP CRC error", tiW)
					}
					if !bytes.Equal(memW, memH) {
						t.Fatal("placed bytes differ")
					}
					if len(wcsW) != 2 || fmt.Sprint(wcsW) != fmt.Sprint(wcsH) {
						t.Fatalf("completions whole %+v\nheader first %+v", wcsW, wcsH)
					}
					if !bytes.Equal(memW[512:576], pat(64, 1)) || !bytes.Equal(memW[:60], pat(60, 2)) || !bytes.Equal(memW[60:100], pat(40, 3)) ||
						!bytes.Equal(memW[640:670], pat(30, 4)) || !bytes.Equal(memW[670:704], pat(34, 5)) || memW[300] != 6 {
						t.Fatal("the valid FPDUs' payloads are not where their headers say")
					}
				})
			}
		}
	}
}
