package rdmap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// victim is a QP under attack and its memory: a registered window into a
// larger buffer whose bytes outside the window are canaries that must
// never change.
type victim struct {
	qp      *rdmap.QP
	cq      *rdmap.CQ
	pd      *rdmap.PD
	backing []byte
	window  []byte
	mr      *rdmap.MR // remote read/write/atomic over window
	localMR *rdmap.MR // local write only
	otherPD *rdmap.MR // in another PD
	recv    *rdmap.MR
	srcMR   *rdmap.MR
	rwMR    *rdmap.MR // remote read/write, no remote atomic
	// w1 is a type 1 window (remote write only, zero-based) over bytes
	// 1024-2047 of window; w1Stale its STag of an earlier bind.
	w1      *rdmap.MW
	w1Stale rdmap.STag
	fr      *rdmap.MR // a fast-register region never registered
}

const (
	canary  = 0xa5
	winOff  = 4096
	winSize = 4096
)

func newVictim(t *testing.T, dev *rdmap.Device, cfg rdmap.QPConfig) *victim {
	t.Helper()
	v := &victim{pd: dev.AllocPD()}
	var err error
	if v.cq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	cfg.SendCQ, cfg.RecvCQ = v.cq, v.cq
	if v.qp, err = v.pd.CreateQP(&cfg); err != nil {
		t.Fatal(err)
	}
	v.backing = bytes.Repeat([]byte{canary}, 3*winSize)
	v.window = v.backing[winOff : winOff+winSize]
	reg := func(pd *rdmap.PD, b []byte, acc rdmap.Access) *rdmap.MR {
		mr, err := pd.RegisterMemory(b, acc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mr.Deregister() })
		return mr
	}
	v.mr = reg(v.pd, v.window, accAll)
	v.localMR = reg(v.pd, v.window, rdmap.AccessLocalWrite)
	v.otherPD = reg(dev.AllocPD(), v.window, accAll)
	v.recv = reg(v.pd, make([]byte, 128), rdmap.AccessLocalWrite)
	v.srcMR = reg(v.pd, make([]byte, 64), rdmap.AccessLocalWrite)
	v.rwMR = reg(v.pd, v.window, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
	wmr := reg(v.pd, v.window, accAll|rdmap.AccessMWBind)
	if v.w1, err = v.pd.AllocMW(rdmap.MWType1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.w1.Dealloc() }) // before wmr's Deregister
	for range 2 {
		v.w1Stale = v.w1.STag()
		if _, err := v.w1.Bind(wmr, 1024, 1024, rdmap.AccessRemoteWrite, true); err != nil {
			t.Fatal(err)
		}
	}
	if v.fr, err = v.pd.AllocMR(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.fr.Deregister() })
	return v
}

func (v *victim) checkCanaries(t *testing.T) {
	t.Helper()
	for i, c := range v.backing {
		if (i < winOff || i >= winOff+winSize) && c != canary {
			t.Fatalf("byte %d outside the registered window changed to %#x", i, c)
		}
	}
}

type hostileCase struct {
	name    string
	o       rdmaptest.Options
	cfg     rdmap.QPConfig
	noRecvs bool
	// noRead: the victim posts no Read. Otherwise its Read Request may
	// go out (the peer's first FPDU opens the send side) before the
	// attack is judged, and a Read Response then finds it outstanding.
	noRead bool
	// attack sends the offending traffic and returns the ULPDU whose
	// header the Terminate must copy (nil: none).
	attack func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte
	layer  wire.Layer
	etype  uint8
	code   uint8
	hdr    bool // M and D, the offending DDP header copied
	rdma   bool // R, the Read Request copied
	// recvStatus is the status of the first posted receive (the second
	// is always flushed).
	recvStatus rdmap.WCStatus
	layout     wire.Layout
	// onMarkers is the Terminate expected instead when markers are in
	// use toward the victim (raw garbage: its first bytes are taken as a
	// marker, so the header read differs).
	onMarkers *termWant
}

type termWant struct {
	layer       wire.Layer
	etype, code uint8
}

func tagged(stag rdmap.STag, to uint64, payload []byte, last bool) []byte {
	h := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: to})
	return append(h, payload...)
}

func sendULPDU(p *rdmaptest.RawPeer, ul []byte) []byte {
	p.SendULPDU(ul)
	return ul
}

var hostileCases = []hostileCase{
	{name: "write-unknown-stag", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.mr.STag()^0x5a5a00, 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "write-stale-key", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.mr.STag()^0x01, 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "write-to-out-of-bounds", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.mr.STag(), winSize-8, bytes.Repeat([]byte{1}, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x01, hdr: true},
	{name: "write-to-wraps", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.mr.STag(), ^uint64(0)-7, bytes.Repeat([]byte{1}, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x01, hdr: true},
	{name: "write-wrong-pd", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.otherPD.STag(), 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x02, hdr: true},
	{name: "write-no-access-right", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.localMR.STag(), 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "write-stag-changes-mid-message", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.Write(v.mr.STag(), 0, make([]byte, 16), false)
		return sendULPDU(p, tagged(v.otherPD.STag(), 16, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "write-to-gap", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.Write(v.mr.STag(), 0, make([]byte, 16), false)
		return sendULPDU(p, tagged(v.mr.STag(), 100, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x01, hdr: true},
	{name: "send-no-receive", noRecvs: true, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), 1, 2, 3))
	}, layer: wire.LayerDDP, etype: 2, code: 0x02, hdr: true},
	{name: "send-too-long", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), make([]byte, 65)...))
	}, layer: wire.LayerDDP, etype: 2, code: 0x02, hdr: true, recvStatus: rdmap.WCLocLenErr},
	{name: "send-bad-qn", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 5, 1, 0, true, 0), 1))
	}, layer: wire.LayerDDP, etype: 2, code: 0x01, hdr: true},
	{name: "send-bad-msn", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 2, 0, true, 0), 1))
	}, layer: wire.LayerDDP, etype: 2, code: 0x03, hdr: true},
	{name: "send-msn-zero", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 0, 0, true, 0), 1))
	}, layer: wire.LayerDDP, etype: 2, code: 0x03, hdr: true},
	{name: "send-bad-mo", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 8, true, 0), 1))
	}, layer: wire.LayerDDP, etype: 2, code: 0x04, hdr: true},
	{name: "send-mo-gap", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, false, 0), 1, 2, 3, 4))
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 5, true, 0), 1))
	}, layer: wire.LayerDDP, etype: 2, code: 0x04, hdr: true, recvStatus: rdmap.WCWRFlushErr},
	{name: "ddp-version-untagged", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		ul := append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), 1)
		ul[0] = ul[0]&^ddp.VersionMask | 2
		p.SendULPDU(ul)
		return nil
	}, layer: wire.LayerDDP, etype: 2, code: 0x06},
	{name: "ddp-version-tagged", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		ul := tagged(v.mr.STag(), 0, make([]byte, 4), true)
		ul[0] &^= ddp.VersionMask
		p.SendULPDU(ul)
		return nil
	}, layer: wire.LayerDDP, etype: 1, code: 0x04},
	{name: "rdmap-version", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		ul := append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), 1)
		ul[1] = wire.ControlByte(2, wire.OpSend)
		p.SendULPDU(ul)
		return nil
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeInvalidVersion},
	{name: "unknown-opcode", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendULPDU(append(rdmaptest.UntaggedHeader(0xc, 0, 1, 0, true, 0), 1))
		return nil
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnexpectedOpcode},
	{name: "rfc7306-opcode-refused", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpImmData, 0, 1, 0, true, 0), make([]byte, 8)...))
		return nil
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnexpectedOpcode},
	{name: "read-request-bad-source-stag", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.mr.STag() ^ 0x777700}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeInvalidSTag, hdr: true, rdma: true},
	{name: "read-request-no-read-right", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.localMR.STag()}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeAccessRights, hdr: true, rdma: true},
	{name: "read-request-out-of-bounds", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.mr.STag(), SrcTO: winSize - 4}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeBaseBounds, hdr: true, rdma: true},
	{name: "read-request-wrong-pd", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.otherPD.STag()}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeSTagNotAssoc, hdr: true, rdma: true},
	{name: "read-request-bad-msn", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 3, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{Size: 16, SrcSTag: v.mr.STag()}))
	}, layer: wire.LayerDDP, etype: 2, code: 0x03, hdr: true},
	{name: "read-request-with-payload", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, append(wire.AppendReadRequest(h, &wire.ReadRequestFields{Size: 16, SrcSTag: v.mr.STag()}), 1, 2, 3, 4))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnspecified, hdr: true},
	{name: "read-requests-beyond-ird-0", o: rdmaptest.Options{ORD: -1}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{Size: 16, SrcSTag: v.mr.STag()}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeCatastrophicStream, hdr: true},
	{name: "read-response-unsolicited", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		ul := tagged(v.mr.STag(), 0, make([]byte, 8), true)
		ul[1] = wire.ControlByte(wire.Version1, wire.OpReadResponse)
		return sendULPDU(p, ul)
	}, layer: wire.LayerDDP, etype: 0, code: 0x00, hdr: true, noRead: true},
	{name: "read-response-inside-write", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.Write(v.mr.STag(), 0, make([]byte, 16), false)
		ul := tagged(v.mr.STag(), 16, make([]byte, 8), true)
		ul[1] = wire.ControlByte(wire.Version1, wire.OpReadResponse)
		return sendULPDU(p, ul)
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnexpectedOpcode, hdr: true},
	{name: "send-invalidate-bad-stag", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSendInv, 0, 1, 0, true, 0x42424200), 9))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeCannotInvalidate, hdr: true, recvStatus: rdmap.WCRemInvReqErr},
	{name: "send-invalidate-wrong-pd", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSendInv, 0, 1, 0, true, v.otherPD.STag()), 9))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeCannotInvalidate, hdr: true, recvStatus: rdmap.WCRemInvReqErr},
	{name: "atomic-bad-stag", cfg: rdmap.QPConfig{RFC7306: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpAtomicRequest, 3, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendAtomicRequest(h, &wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: 1, STag: v.mr.STag() ^ 0x5a5a00, TO: 0, AddSwap: 1}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeInvalidSTag, hdr: true},
	{name: "atomic-misaligned", cfg: rdmap.QPConfig{RFC7306: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpAtomicRequest, 3, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendAtomicRequest(h, &wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: 1, STag: v.mr.STag(), TO: 4, AddSwap: 1}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeBaseBounds, hdr: true},
	{name: "bad-crc", o: rdmaptest.Options{CRC: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		b := p.Framer.AppendFPDU(nil, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), 1, 2, 3), nil)
		b[len(b)-1] ^= 0xff
		p.SendRaw(b)
		return nil
	}, layer: wire.LayerLLP, etype: 0, code: uint8(mpa.TermCRC)},
	{name: "bad-crc-hides-bad-stag", o: rdmaptest.Options{CRC: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		b := p.Framer.AppendFPDU(nil, tagged(0x999900, 0, make([]byte, 100), true), nil)
		b[len(b)-2] ^= 0x10
		p.SendRaw(b)
		return nil
	}, layer: wire.LayerLLP, etype: 0, code: uint8(mpa.TermCRC)},
	{name: "ulpdu-shorter-than-header", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendULPDU([]byte{0x41, 0x43, 0, 0})
		p.Send([]byte("more data"))
		return nil
	}, layer: wire.LayerLLP, etype: 0, code: uint8(mpa.TermMarker)},
	{name: "truncated-fpdu", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		b := p.Framer.AppendFPDU(nil, append(rdmaptest.UntaggedHeader(wire.OpSend, 0, 1, 0, true, 0), make([]byte, 40)...), nil)
		p.SendRaw(b[:30])
		p.CloseWrite()
		return nil
	}, layer: wire.LayerLLP, etype: 0, code: uint8(mpa.TermTCPClosed), recvStatus: rdmap.WCWRFlushErr},
	{name: "siw-layout", o: rdmaptest.Options{TerminateLayoutSiw: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.mr.STag()^0x5a5a00, 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true, layout: wire.LayoutSiw},
	// Single-segment messages (issue 9 §4).
	{name: "read-request-not-last", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, false, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.mr.STag()}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnexpectedOpcode, hdr: true},
	{name: "atomic-not-last", cfg: rdmap.QPConfig{RFC7306: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpAtomicRequest, 3, 1, 0, false, 0)
		return sendULPDU(p, wire.AppendAtomicRequest(h, &wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: 1, STag: v.mr.STag(), TO: 0, AddSwap: 1}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnexpectedOpcode, hdr: true},
	{name: "terminate-not-last", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpTerminate, wire.QNTerminate, 1, 0, false, 0)
		return sendULPDU(p, wire.AppendTerminate(h, &wire.Terminate{Layer: wire.LayerRDMAP, EType: wire.ETypeRemoteOperation, Code: wire.CodeUnspecified}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeUnexpectedOpcode, hdr: true},
	{name: "send-invalidate-stag-changes", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendULPDU(append(rdmaptest.UntaggedHeader(wire.OpSendInv, 0, 1, 0, false, v.mr.STag()), 1, 2, 3, 4))
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSendInv, 0, 1, 4, true, v.localMR.STag()), 5))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeCannotInvalidate, hdr: true, recvStatus: rdmap.WCRemInvReqErr},
	// Read Responses that do not match the outstanding Read (issue 9 §7).
	{name: "read-response-too-long", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		stag, to := readRequestOf(t, p)
		return sendULPDU(p, readResponse(stag, to, make([]byte, 16)))
	}, layer: wire.LayerDDP, etype: 1, code: 0x01, hdr: true},
	{name: "read-response-wrong-stag", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		stag, to := readRequestOf(t, p)
		return sendULPDU(p, readResponse(stag^0x100, to, make([]byte, 8)))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "read-response-wrong-to", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		stag, to := readRequestOf(t, p)
		return sendULPDU(p, readResponse(stag, to+4, make([]byte, 4)))
	}, layer: wire.LayerDDP, etype: 1, code: 0x01, hdr: true},
	{name: "atomic-no-atomic-right", cfg: rdmap.QPConfig{RFC7306: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpAtomicRequest, 3, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendAtomicRequest(h, &wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: 1, STag: v.rwMR.STag(), TO: 0, AddSwap: 1}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeAccessRights, hdr: true},
	{name: "write-after-invalidation", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		if err := v.mr.Invalidate(); err != nil {
			t.Fatal(err)
		}
		return sendULPDU(p, tagged(v.mr.STag(), 16, bytes.Repeat([]byte{1}, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	// Fast-register regions and memory windows (issue 12).
	{name: "write-fast-register-unregistered", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.fr.STag(), 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "write-window-stale-key", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, tagged(v.w1Stale, 0, make([]byte, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "write-window-out-of-bounds", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		// Inside the region, past the window.
		return sendULPDU(p, tagged(v.w1.STag(), 1024-8, bytes.Repeat([]byte{1}, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x01, hdr: true},
	{name: "write-window-unbound", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		s := v.w1.STag()
		if err := v.w1.Unbind(); err != nil {
			t.Fatal(err)
		}
		return sendULPDU(p, tagged(s, 0, bytes.Repeat([]byte{1}, 16), true))
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "read-request-window-no-read-right", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.w1.STag()}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeAccessRights, hdr: true, rdma: true},
	{name: "read-request-window-stale-key", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x1234, Size: 16, SrcSTag: v.w1Stale}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeInvalidSTag, hdr: true, rdma: true},
	{name: "atomic-window-no-atomic-right", cfg: rdmap.QPConfig{RFC7306: true}, attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		h := rdmaptest.UntaggedHeader(wire.OpAtomicRequest, 3, 1, 0, true, 0)
		return sendULPDU(p, wire.AppendAtomicRequest(h, &wire.AtomicRequest{Op: wire.AtomicFetchAdd, ReqID: 1, STag: v.w1.STag(), TO: 0, AddSwap: 1}))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeAccessRights, hdr: true},
	{name: "send-invalidate-type1-window", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSendInv, 0, 1, 0, true, v.w1.STag()), 9))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteProtection, code: wire.CodeCannotInvalidate, hdr: true, recvStatus: rdmap.WCRemInvReqErr},
	{name: "send-invalidate-stale-window-key", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		return sendULPDU(p, append(rdmaptest.UntaggedHeader(wire.OpSendInv, 0, 1, 0, true, v.w1Stale), 9))
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeCannotInvalidate, hdr: true, recvStatus: rdmap.WCRemInvReqErr},
	// Garbage after the handshake, declaring a ULPDU that never comes:
	// answered from the header as soon as it is in (as siw does), on
	// every path, without waiting for the rest (the stall timeout is the
	// default 60s, the wait for the Terminate 10s).
	{name: "garbage-header", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendRaw([]byte{0x13, 0x37, 0x41, 0x00, 0xde, 0xad, 0xbe, 0xef, 0xca, 0xfe, 0xba, 0xbe, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a})
		return nil
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeInvalidVersion,
		onMarkers: &termWant{wire.LayerDDP, uint8(ddp.ErrTypeTagged), uint8(ddp.CodeTaggedVersion)}},
	{name: "second-mpa-request", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		p.SendRaw([]byte("MPA ID Req Frame\x10\x02\x00\x04\x00\x01\x00\x01"))
		return nil
	}, layer: wire.LayerRDMAP, etype: wire.ETypeRemoteOperation, code: wire.CodeInvalidVersion,
		onMarkers: &termWant{wire.LayerDDP, uint8(ddp.ErrTypeUntagged), uint8(ddp.CodeUntaggedVersion)}},
	// A well-formed header declaring a large ULPDU, then nothing more:
	// the invalid STag is answered from the header alone, on every path
	// (buffered and markers included).
	{name: "large-write-header-only", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		ul := tagged(v.mr.STag()^0x5a5a00, 0, make([]byte, 60000), true)
		p.SendRaw(p.Framer.AppendFPDU(nil, ul, nil)[:64])
		return ul
	}, layer: wire.LayerDDP, etype: 1, code: 0x00, hdr: true},
	{name: "large-send-bad-msn-header-only", attack: func(t *testing.T, p *rdmaptest.RawPeer, v *victim) []byte {
		ul := append(rdmaptest.UntaggedHeader(wire.OpSend, wire.QNSend, 7, 0, true, 0), make([]byte, 60000)...)
		p.SendRaw(p.Framer.AppendFPDU(nil, ul, nil)[:64])
		return ul
	}, layer: wire.LayerDDP, etype: 2, code: 0x03, hdr: true},
}

// readRequestOf lets the victim send its Read Request (a first FPDU
// opens its send side) and returns the sink STag and TO it names.
func readRequestOf(t *testing.T, p *rdmaptest.RawPeer) (rdmap.STag, uint64) {
	t.Helper()
	p.Write(0x100, 0, nil, true)
	ul, err := p.NextFPDU(10 * time.Second)
	if err != nil || rdmaptest.Opcode(ul) != wire.OpReadRequest {
		t.Fatalf("no Read Request from the victim: %v", err)
	}
	rr := wire.ReadRequest(ul[ddp.UntaggedHeaderLen:])
	return rr.SinkSTag(), rr.SinkTO()
}

func readResponse(stag rdmap.STag, to uint64, payload []byte) []byte {
	h := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpReadResponse), STag: stag, TO: to})
	return append(h, payload...)
}

// TestHostilePeer sends each kind of protocol violation from a raw peer
// and checks the Terminate on the wire, the victim's error and
// completions, its memory, and that a healthy pair on the same device
// keeps working.
func TestHostilePeer(t *testing.T) {
	dev := newDevice(t)
	ha := newSide(t, dev, rdmap.QPConfig{})
	hb := newSide(t, dev, rdmap.QPConfig{})
	rdmaptest.Connect(t, ha.qp, hb.qp, &rdmaptest.Options{CRC: true})
	// Each case runs on the direct path, the buffered path, and with
	// markers toward the victim: all three check headers first. An FPDU
	// that arrives whole is taken whole (mpa.Reader.Whole) on the first
	// two; "headerfirst" reads every FPDU the header-first way.
	for _, path := range []string{"direct", "buffered", "markers", "headerfirst"} {
		t.Run(path, func(t *testing.T) {
			for _, c := range hostileCases {
				switch path {
				case "buffered":
					c.cfg.BufferedRx = true
				case "markers":
					c.o.MarkersAB = true
				}
				if path == "markers" && c.onMarkers != nil {
					c.layer, c.etype, c.code = c.onMarkers.layer, c.onMarkers.etype, c.onMarkers.code
				}
				t.Run(c.name, func(t *testing.T) { runHostile(t, dev, ha, hb, c, path) })
			}
		})
	}
}

func runHostile(t *testing.T, dev *rdmap.Device, ha, hb *side, c hostileCase, path string) {
	{
		{
			v := newVictim(t, dev, c.cfg)
			if path == "headerfirst" {
				rdmap.SetRxNoWhole(v.qp)
			}
			if !c.noRecvs {
				mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{v.recv.SGE(0, 64)}}))
				mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 2, SGL: []rdmap.SGE{v.recv.SGE(64, 64)}}))
			}
			// A Read the raw peer never answers.
			if !c.noRead {
				mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 10, Op: rdmap.WRRead, SGL: []rdmap.SGE{v.srcMR.SGE(0, 8)}, Remote: rdmap.Remote{STag: 0x100}, Signaled: true}))
			}
			p := rdmaptest.NewRawPeer(t, v.qp, &c.o, false)
			offending := c.attack(t, p, v)

			term, h := p.ExpectTerminate(10 * time.Second)
			if h.QN() != wire.QNTerminate || h.MSN() != 1 || h.MO() != 0 || !h.Last() {
				t.Errorf("Terminate DDP header: QN %d MSN %d MO %d L %v", h.QN(), h.MSN(), h.MO(), h.Last())
			}
			if term.Layer != c.layer || term.EType != c.etype || term.Code != c.code {
				t.Errorf("Terminate %v (layer %d type %d code %#x), want layer %d type %d code %#x", &term, term.Layer, term.EType, term.Code, c.layer, c.etype, c.code)
			}
			if term.Layout != c.layout {
				t.Errorf("Terminate layout %v, want %v", term.Layout, c.layout)
			}
			if term.M != c.hdr || term.D != c.hdr || term.R != c.rdma {
				t.Errorf("Terminate flags M %v D %v R %v", term.M, term.D, term.R)
			}
			if c.hdr && offending != nil {
				hl := ddp.HeaderLen(offending[0])
				if !bytes.Equal(term.DDPHeader, offending[:hl]) {
					t.Errorf("terminated DDP header % x, want % x", term.DDPHeader, offending[:hl])
				}
				wantLen := len(offending)
				if c.layout == wire.LayoutSiw {
					wantLen -= hl
				}
				if int(term.SegLen) != wantLen {
					t.Errorf("DDP Segment Length %d, want %d", term.SegLen, wantLen)
				}
				if c.rdma && !bytes.Equal(term.RDMAHeader, offending[hl:hl+wire.ReadRequestLen]) {
					t.Errorf("terminated RDMA header % x", term.RDMAHeader)
				}
			}
			p.ExpectEOF(10 * time.Second)
			p.Conn.Close()
			rdmaptest.WaitDone(t, v.qp, 10*time.Second)

			var te *rdmap.TerminateError
			if err := v.qp.Err(); !errors.As(err, &te) || te.Remote || te.Layer != c.layer || te.EType != c.etype || te.Code != c.code {
				t.Errorf("victim Err() = %v", err)
			} else if !errors.Is(err, net.ErrClosed) {
				t.Errorf("victim Err() %v is not net.ErrClosed", err)
			}
			if st := v.qp.State(); st != rdmap.StateError {
				t.Errorf("victim state %v", st)
			}
			checkFlushed(t, v, c)
			v.checkCanaries(t)
			pingPong(t, ha, hb)
		}
	}
}

// checkFlushed checks that every work request the victim had completed
// with the expected status.
func checkFlushed(t *testing.T, v *victim, c hostileCase) {
	t.Helper()
	want := map[uint64]rdmap.WCStatus{}
	if !c.noRead {
		want[10] = rdmap.WCWRFlushErr
	}
	if !c.noRecvs {
		want[1] = rdmap.WCWRFlushErr
		if c.recvStatus != rdmap.WCSuccess {
			want[1] = c.recvStatus
		}
		want[2] = rdmap.WCWRFlushErr
	}
	wcs := make([]rdmap.WC, 16)
	n := v.cq.Poll(wcs)
	got := map[uint64]rdmap.WCStatus{}
	for _, wc := range wcs[:n] {
		got[wc.ID] = wc.Status
	}
	if len(got) != len(want) {
		t.Fatalf("completions %v, want %v", got, want)
	}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("WR %d completed with %v, want %v", id, got[id], st)
		}
	}
}

// pingPong checks a healthy pair still works.
func pingPong(t *testing.T, a, b *side) {
	t.Helper()
	buf := make([]byte, 32)
	mr := b.reg(t, buf, rdmap.AccessLocalWrite)
	msg := a.reg(t, []byte("still alive"), 0)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 77, SGL: []rdmap.SGE{mr.SGE(0, 32)}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 78, Op: rdmap.WRSend, SGL: []rdmap.SGE{msg.SGE(0, 11)}}))
	expectWC(t, poll(t, b.cq), 77, rdmap.WCRecv, rdmap.WCSuccess)
	if string(buf[:11]) != "still alive" {
		t.Fatalf("healthy pair got %q", buf[:11])
	}
}

// TestReceivedTerminate: a Terminate from the peer puts the QP in ERROR,
// flushes it, surfaces layer/type/code, and is not answered.
func TestReceivedTerminate(t *testing.T) {
	for _, layout := range []wire.Layout{wire.LayoutRFC, wire.LayoutSiw} {
		t.Run(layout.String(), func(t *testing.T) {
			dev := newDevice(t)
			v := newVictim(t, dev, rdmap.QPConfig{})
			mustPost(t, v.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{v.recv.SGE(0, 64)}}))
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 10, Op: rdmap.WRRead, SGL: []rdmap.SGE{v.srcMR.SGE(0, 8)}, Remote: rdmap.Remote{STag: 0x100}, Signaled: true}))
			p := rdmaptest.NewRawPeer(t, v.qp, nil, false)
			p.Write(0x100, 0, nil, true) // a first FPDU, so the victim may send
			// Read the victim's Read Request, then refuse it.
			ul, err := p.NextFPDU(5 * time.Second)
			if err != nil || rdmaptest.Opcode(ul) != wire.OpReadRequest {
				t.Fatalf("expected the victim's Read Request: %v", err)
			}
			p.SendTerminate(&wire.Terminate{Layer: wire.LayerRDMAP, EType: wire.ETypeRemoteProtection, Code: wire.CodeInvalidSTag,
				M: true, D: true, R: true, SegLen: uint16(len(ul)), DDPHeader: ul[:ddp.UntaggedHeaderLen], RDMAHeader: ul[ddp.UntaggedHeaderLen:], Layout: layout})
			p.ExpectEOFNoData(10 * time.Second)
			p.Conn.Close()
			rdmaptest.WaitDone(t, v.qp, 10*time.Second)
			var te *rdmap.TerminateError
			err = v.qp.Err()
			if !errors.As(err, &te) || !te.Remote || te.Layer != wire.LayerRDMAP || te.EType != wire.ETypeRemoteProtection || te.Code != wire.CodeInvalidSTag || te.Layout != layout || te.Bogus {
				t.Fatalf("Err() = %v (%+v)", err, te)
			}
			if !errors.Is(err, &rdmap.TerminateError{Remote: true, Layer: wire.LayerRDMAP, EType: wire.ETypeRemoteProtection, Code: wire.CodeInvalidSTag}) {
				t.Error("errors.Is does not match the TerminateError")
			}
			wcs := pollN(t, v.cq, 2)
			for _, wc := range wcs {
				switch wc.ID {
				case 1:
					if wc.Status != rdmap.WCWRFlushErr {
						t.Errorf("receive: %v", wc.Status)
					}
				case 10:
					// The Terminate names our Read: a remote access error.
					if wc.Status != rdmap.WCRemAccessErr || wc.Op != rdmap.WCRead {
						t.Errorf("read: %v", wc.Status)
					}
				}
			}
			if s := v.qp.Stats(); s.TerminatesRecvd != 1 || s.TerminatesSent != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestReadRequestsBeyondIRD overflows an IRD of 1 while the victim is
// still busy answering a large Read.
func TestReadRequestsBeyondIRD(t *testing.T) {
	dev := newDevice(t)
	v := newVictim(t, dev, rdmap.QPConfig{})
	big, err := v.pd.RegisterMemory(make([]byte, 8<<20), rdmap.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Deregister()
	p := rdmaptest.NewRawPeer(t, v.qp, &rdmaptest.Options{ORD: 1, IRD: 1}, false)
	var b []byte
	for i := range 3 {
		h := rdmaptest.UntaggedHeader(wire.OpReadRequest, 1, uint32(i+1), 0, true, 0)
		ul := wire.AppendReadRequest(h, &wire.ReadRequestFields{SinkSTag: 0x500, Size: 8 << 20, SrcSTag: big.STag()})
		b = p.Framer.AppendFPDU(b, ul, nil)
	}
	p.SendRaw(b)
	term, _ := p.ExpectTerminate(20 * time.Second)
	if term.Layer != wire.LayerRDMAP || term.EType != wire.ETypeRemoteOperation || term.Code != wire.CodeCatastrophicStream || !term.D {
		t.Fatalf("Terminate %v", &term)
	}
	if dh := ddp.Header(term.DDPHeader); dh.QN() != 1 || dh.MSN() != 2 {
		t.Fatalf("terminated header QN %d MSN %d, want the second Read Request", dh.QN(), dh.MSN())
	}
	p.ExpectEOF(10 * time.Second)
	p.Conn.Close()
	rdmaptest.WaitDone(t, v.qp, 10*time.Second)
}

func TestHostileAllocMemoryGuard(t *testing.T) {
	dev := newDevice(t)
	mem, err := dev.AllocMemory(10000)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	v := newVictim(t, dev, rdmap.QPConfig{})
	mr, err := v.pd.RegisterMemory(mem.Bytes(), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	p := rdmaptest.NewRawPeer(t, v.qp, nil, false)
	// The last byte is fine; one past the end is a bounds error (and
	// would have faulted on the guard page had it been placed).
	p.Write(mr.STag(), uint64(mem.Len()-1), []byte{7}, true)
	p.Write(mr.STag(), uint64(mem.Len()), []byte{7, 7, 7, 7}, true)
	term, _ := p.ExpectTerminate(10 * time.Second)
	if term.Layer != wire.LayerDDP || term.EType != 1 || term.Code != 0x01 {
		t.Fatalf("Terminate %v", &term)
	}
	p.ExpectEOF(10 * time.Second)
	p.Conn.Close()
	rdmaptest.WaitDone(t, v.qp, 10*time.Second)
	if b := mem.Bytes(); b[len(b)-1] != 7 {
		t.Fatalf("last byte %d", b[len(b)-1])
	}
	_ = binary.LittleEndian
}
