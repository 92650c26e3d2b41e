package rdmap

import (
	"errors"
	"io"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// termInfo is a Terminate to send (RFC 5040 §4.8, with the codes and the
// header copies Linux siw uses, siw_send_terminate):
//   - DDP layer errors copy the terminated DDP header (D) and set M,
//     except for an invalid DDP version ("layout unknown": nothing).
//   - RDMAP remote operation errors copy the DDP header too, except for
//     an invalid RDMAP version or an unexpected opcode.
//   - RDMAP remote protection errors on a Read Request also copy the
//     Read Request header (R).
//   - Local catastrophic and LLP (MPA) errors copy nothing.
type termInfo struct {
	layer       wire.Layer
	etype, code uint8
	m           bool
	ddpHdr      [ddp.UntaggedHeaderLen]byte
	ddpLen      int
	rdmaHdr     [wire.ReadRequestLen]byte
	hasRDMA     bool
	// ulpduLen and payLen describe the terminated FPDU: its ULPDU_Length
	// and its payload length (what siw puts in DDP Segment Length).
	ulpduLen, payLen int
	cause            error
}

// localCatastrophic is the Terminate siw sends when the local side fails
// (siw_qp_nextstate_from_rts: RDMAP, catastrophic, unspecified 0xff).
func localCatastrophic(cause error) *termInfo {
	return &termInfo{layer: wire.LayerRDMAP, etype: wire.ETypeLocalCatastrophic, code: wire.CodeUnspecified, cause: cause}
}

// termFor is the one place that maps an MPA or DDP error of the
// receive path to the Terminate RFC 5040/5041/5044 and Linux siw give it
// (siw_qp_rx.c, siw_qp.c), built in rx.termBuf:
//
//	mpa.ErrBadCRC        LLP, MPA, CRC error
//	errShortULPDU        LLP, MPA, marker and ULPDU length mismatch (what
//	                     siw sends for a ULPDU too short for its header)
//	io.ErrUnexpectedEOF  LLP, MPA, TCP connection closed (errTruncated)
//	ErrRxStalled         LLP, MPA, TCP connection closed
//	*ddp.Error           DDP, its type and code; the terminated DDP header
//	                     copied (M, D), except after an invalid DDP
//	                     version (the layout is unknown)
//
// LLP errors copy no header. It returns nil for any other error. RDMAP
// errors (opcode, version, access, IRD) are RDMAP semantics: the receive
// engine builds them with rx.term.
func (rx *rxEngine) termFor(err error) *termInfo {
	llp := func(code mpa.TermCode, cause error) *termInfo {
		ti := &rx.termBuf
		*ti = termInfo{layer: wire.LayerLLP, etype: mpa.TermTypeMPA, code: uint8(code), cause: cause}
		return ti
	}
	var de *ddp.Error
	switch {
	case errors.Is(err, mpa.ErrBadCRC):
		return llp(mpa.TermCRC, mpa.ErrBadCRC)
	case errors.Is(err, errShortULPDU):
		return llp(mpa.TermMarker, errShortULPDU)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return llp(mpa.TermTCPClosed, errTruncated)
	case errors.Is(err, ErrRxStalled):
		return llp(mpa.TermTCPClosed, ErrRxStalled)
	case errors.As(err, &de):
		return rx.term(wire.LayerDDP, uint8(de.Type), uint8(de.Code), !de.Version())
	}
	return nil
}

func (t *termInfo) err() *TerminateError {
	return &TerminateError{Layer: t.layer, EType: t.etype, Code: t.code, err: t.cause}
}

// message returns the Terminate to encode. The DDP Segment Length is the
// terminated segment's length (DDP header and payload, RFC 5041's "DDP
// Segment") in the RFC layout, and its payload length in siw's layout,
// which is what siw writes and reads there.
func (t *termInfo) message(l wire.Layout) wire.Terminate {
	m := wire.Terminate{Layer: t.layer, EType: t.etype, Code: t.code, M: t.m, D: t.ddpLen > 0, R: t.hasRDMA, Layout: l}
	if m.M || m.D || m.R {
		if l == wire.LayoutSiw {
			m.SegLen = uint16(t.payLen)
		} else {
			m.SegLen = uint16(t.ulpduLen)
		}
	}
	if m.D {
		m.DDPHeader = t.ddpHdr[:t.ddpLen]
	}
	if m.R {
		m.RDMAHeader = t.rdmaHdr[:]
	}
	return m
}
