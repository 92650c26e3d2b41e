package rdmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// rxMode is how wholeRun has the engine take the FPDUs of its stream.
type rxMode int

const (
	modeHeaderFirst rxMode = iota // rx.fpdu, never mpa.Reader.Whole
	modeWhole                     // rx.fpdu, one FPDU a call, taken whole
	modeRun                       // rx.fpdus, as the receive loop: runs
)

func (m rxMode) String() string { return [...]string{"header-first", "whole", "run"}[m] }

// wholeRun receives the stream build returns for the STag of its region
// (served whole by every read) with a fresh engine, in the given mode,
// until the first Terminate: it returns the registered memory, the
// completions and the Terminate. With cut >= 0 the region is invalidated
// just before FPDU cut of the stream is received: between two calls of
// the engine, or (modeRun) from another goroutine while the run holds
// the region entered, which must then wait for the run to leave it.
func wholeRun(t *testing.T, build func(STag) []byte, crc bool, mode rxMode, fpdus, cut int) ([]byte, []WC, *termInfo) {
	t.Helper()
	mem := make([]byte, 1024)
	qp, cq, mr := engineQP(t, 64, QPConfig{}, mem)
	stream := build(mr.STag())
	for i := range 6 {
		sgl := []SGE{mr.SGE(512+i*80, 70)}
		if i == 2 {
			sgl = []SGE{mr.SGE(512+i*80, 30), mr.SGE(512+i*80+30, 40)}
		}
		if err := qp.PostRecv(RecvWR{ID: uint64(i), SGL: sgl}); err != nil {
			t.Fatal(err)
		}
	}
	qp.p = mpa.Params{CRC: crc}
	rx := &qp.rx
	rx.noWhole = mode == modeHeaderFirst
	rx.init(qp, &cycleConn{data: stream, max: len(stream)})
	defer rx.release()
	var invalidated chan error
	done := 0 // FPDUs received
	rx.runStep = func(n int) {
		if done+1+n == cut {
			// The run holds the region entered: Invalidate waits for it.
			invalidated = make(chan error, 1)
			go func() { invalidated <- mr.Invalidate() }()
			for mr.Valid() {
				runtime.Gosched()
			}
		}
	}
	var ti *termInfo
	for done < fpdus {
		if done == cut {
			if err := mr.Invalidate(); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		n := 1
		if mode == modeRun {
			n, ti, err = rx.fpdus(fpdus - done)
		} else {
			ti, err = rx.fpdu()
		}
		rx.dropRefs()
		done += n
		if err != nil {
			t.Fatalf("fpdu: %v", err)
		}
		if ti != nil {
			saved := *ti
			ti = &saved
			break
		}
	}
	if invalidated != nil {
		if err := <-invalidated; err != nil {
			t.Fatal(err)
		}
	}
	if cut >= 0 && cut < done && mr.Valid() {
		t.Fatal("the region is still valid")
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
// (mpa.Reader.Whole), one a call or in runs as the receive loop takes
// them (rx.fpdus: a run of Writes into one region entered once), are
// received exactly as the header-first path receives them: the same
// bytes placed, the same completions, the same Terminate for a hostile
// FPDU among them (after the valid ones, in the middle of a run of
// Writes or of a Write message), or for a Write into the region
// invalidated between two FPDUs of a run, with CRC on and off; a CRC
// error is reported before anything of its FPDU is acted on.
func TestRxWholeAgrees(t *testing.T) {
	pat := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	send := func(msn, mo uint32, last bool, op ...wire.Opcode) []byte {
		o := wire.OpSend
		if len(op) > 0 {
			o = op[0]
		}
		return ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, o), QN: wire.QNSend, MSN: msn, MO: mo})
	}
	// A Write's STag is that of the region (0) or another (1).
	write := func(to uint64, last bool, other ...byte) []byte {
		return ddp.AppendTagged(nil, &ddp.TaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: STag(len(other)), TO: to})
	}
	type seg = rxSeg
	valid := []seg{
		{send(1, 0, true), pat(64, 1)},  // a single-segment Send
		{write(0, false), pat(60, 2)},   // a Write of two segments
		{write(60, true), pat(40, 3)},   //
		{send(2, 0, false), pat(30, 4)}, // a Send of two segments
		{send(2, 30, true), pat(34, 5)}, //
		{write(200, true), nil},         // a zero-length Write
		{write(300, true), pat(1, 6)},   // a one-byte Write
		// A run of small Writes, one of them a message of two
		// segments, and single-segment Sends (one into a receive of
		// two SGEs), then two more Writes.
		{write(400, true), pat(10, 8)},                 // 7
		{write(410, true), pat(10, 9)},                 // 8
		{write(420, false), pat(10, 10)},               // 9
		{write(430, true), pat(10, 11)},                // 10
		{send(3, 0, true, wire.OpSendSE), pat(50, 15)}, // 11
		{send(4, 0, true, wire.OpSendSE), pat(20, 16)}, // 12
		{send(5, 0, true), pat(70, 17)},                // 13
		{write(440, true), pat(10, 12)},                // 14
	}
	tail := []seg{{write(450, true), pat(10, 13)}, {write(460, true), pat(10, 14)}}
	hostile := map[string][]seg{
		"msn":         {{send(5, 0, true), pat(8, 7)}},                                                                                                                             // DDP untagged, MSN range
		"stag":        {{write(0, true, 1), pat(8, 7)}},                                                                                                                            // invalid STag
		"bounds":      {{write(1020, true), pat(8, 7)}},                                                                                                                            // base or bounds
		"too-long":    {{send(3, 0, true), pat(71, 7)}},                                                                                                                            // no buffer (longer than the receive)
		"no-recv":     {{send(3, 0, true), pat(8, 7)}, {send(4, 0, true), pat(8, 7)}, {send(5, 0, true), pat(8, 7)}, {send(6, 0, true), pat(8, 7)}, {send(7, 0, true), pat(8, 7)}}, // six receives
		"short-ulpdu": {{send(3, 0, true)[:10], nil}},                                                                                                                              // shorter than its header
		"short-write": {{write(0, true)[:10], nil}},
		"opcode":      {{ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, 14), QN: wire.QNSend, MSN: 3}), nil}},
		"to":          {{write(5, true), pat(8, 7)}}, // in a Write message: TO out of sequence
		"read-resp":   {{ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpReadResponse), TO: 0}), pat(8, 7)}},
	}
	// Where the hostile FPDUs go: after the valid ones, in the middle of
	// the run of Writes, in the middle of its two-segment Write message.
	at := map[string]int{"end": len(valid), "run": 9, "message": 10, "sends": 12}
	for _, crc := range []bool{false, true} {
		for name, hs := range hostile {
			for where, pos := range at {
				for _, corrupt := range []bool{false, true} {
					// The hostile Sends of no-recv have the MSNs of
					// the run's Sends, which must follow them.
					if corrupt && !crc || name == "to" && where != "message" || name == "no-recv" && where != "run" && where != "message" {
						continue // (elsewhere that Write is valid)
					}
					t.Run(fmt.Sprintf("crc=%v/%s/at=%s/corrupt=%v", crc, name, where, corrupt), func(t *testing.T) {
						segs := append(append(append(slices.Clone(valid[:pos]), hs...), valid[pos:]...), tail...)
						rxAgree(t, segs, crc, corrupt, pos+len(hs)-1, -1)
					})
				}
			}
		}
		for _, cut := range []int{7, 8, 9, 10, 12, 13, 14} {
			t.Run(fmt.Sprintf("crc=%v/invalidated/before=%d", crc, cut), func(t *testing.T) {
				rxAgree(t, append(slices.Clone(valid), tail...), crc, false, -1, cut)
			})
		}
	}
}

// rxSeg is an FPDU's DDP (and RDMAP) header and payload.
type rxSeg struct{ h, p []byte }

// rxAgree receives segs in every rxMode and checks that they agree: see
// TestRxWholeAgrees. The FPDU bad is the one a Terminate answers (-1: the
// one before which the region is invalidated, cut); corrupt breaks its
// CRC.
func rxAgree(t *testing.T, segs []rxSeg, crc, corrupt bool, bad, cut int) {
	t.Helper()
	build := func(stag STag) []byte {
		var stream []byte
		for i, s := range segs {
			if s.h[0]&ddp.FlagTagged != 0 && len(s.h) >= ddp.TaggedHeaderLen {
				// Name the region (or the region's STag plus one: not
				// a valid one).
				s.h = bytes.Clone(s.h)
				binary.BigEndian.PutUint32(s.h[2:], uint32(stag)+binary.BigEndian.Uint32(s.h[2:]))
			}
			stream = mpa.AppendFPDU(stream, s.h, s.p, crc)
			if corrupt && i == bad {
				stream[len(stream)-mpa.CRCLen] ^= 1
			}
		}
		return stream
	}
	var mem [3][]byte
	var wcs [3][]WC
	var ti [3]*termInfo
	for m := range []rxMode{modeHeaderFirst, modeWhole, modeRun} {
		mem[m], wcs[m], ti[m] = wholeRun(t, build, crc, rxMode(m), len(segs), cut)
		if ti[m] == nil {
			t.Fatalf("%v: no Terminate", rxMode(m))
		}
		ti[m].cause = nil
		if ti[m].ddpHdr[0]&ddp.FlagTagged != 0 {
			// Each run's region has its own STag.
			clear(ti[m].ddpHdr[2:6])
		}
	}
	for m := modeWhole; m <= modeRun; m++ {
		if *ti[m] != *ti[modeHeaderFirst] {
			t.Fatalf("Terminate %v %+v\nheader first %+v", m, ti[m], ti[modeHeaderFirst])
		}
		if !bytes.Equal(mem[m], mem[modeHeaderFirst]) {
			t.Fatalf("placed bytes differ: %v", m)
		}
		if fmt.Sprint(wcs[m]) != fmt.Sprint(wcs[modeHeaderFirst]) {
			t.Fatalf("completions %v %+v\nheader first %+v", m, wcs[m], wcs[modeHeaderFirst])
		}
	}
	memW, tiW := mem[modeRun], ti[modeRun]
	if corrupt && (tiW.layer != wire.LayerLLP || tiW.code != uint8(mpa.TermCRC)) {
		t.Fatalf("corrupt FPDU: Terminate %+v, want the LLP CRC error", tiW)
	}
	if cut >= 0 {
		// A Write into the invalidated region names an invalid STag; a
		// Send into a receive there is a local protection error.
		etype, code := ddp.ErrTypeTagged, ddp.CodeInvalidSTag
		if segs[cut].h[0]&ddp.FlagTagged == 0 {
			etype, code = ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic
		}
		if tiW.layer != wire.LayerDDP || tiW.etype != uint8(etype) || tiW.code != uint8(code) {
			t.Fatalf("FPDU %d into the invalidated region: Terminate %+v, want DDP %v/%v", cut, tiW, etype, code)
		}
	}
	if len(wcs[modeRun]) < 2 {
		t.Fatalf("completions %+v, want those of the two valid Sends", wcs[modeRun])
	}
	pat := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	if !bytes.Equal(memW[512:576], pat(64, 1)) || !bytes.Equal(memW[:60], pat(60, 2)) || !bytes.Equal(memW[60:100], pat(40, 3)) ||
		!bytes.Equal(memW[592:622], pat(30, 4)) || !bytes.Equal(memW[622:656], pat(34, 5)) || memW[300] != 6 {
		t.Fatal("the valid FPDUs' payloads are not where their headers say")
	}
	// The run's Writes before the failed FPDU landed, none after it.
	stop := bad
	if stop < 0 {
		stop = cut
	}
	for i, s := range segs {
		h := s.h
		if h[0]&ddp.FlagTagged == 0 || len(h) < ddp.TaggedHeaderLen || len(s.p) != 10 || binary.BigEndian.Uint32(h[2:]) != 0 {
			continue
		}
		to := binary.BigEndian.Uint64(h[6:])
		if got, want := memW[to:to+10], pat(10, s.p[0]); (i < stop) != bytes.Equal(got, want) {
			t.Fatalf("Write %d (before the failed FPDU %d: %v): memory %v", i, stop, i < stop, got)
		}
	}
}
