package rdmap

import (
	"net"
	"os"
	"syscall"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/internal/sys"
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

// llpTerm is an MPA (LLP) Terminate.
func llpTerm(code mpa.TermCode) *termInfo {
	return &termInfo{layer: wire.LayerLLP, etype: mpa.TermTypeMPA, code: uint8(code)}
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

// emssOf returns the connection's EMSS: TCP_MAXSEG, or defaultEMSS for a
// connection without one.
func emssOf(c net.Conn) int {
	if sc, ok := c.(syscall.Conn); ok {
		if mss, err := sys.TCPMaxSeg(sc); err == nil && mss > 0 {
			return mss
		}
	}
	return defaultEMSS
}

// abortConn resets the connection: RST instead of FIN (SO_LINGER 0).
func abortConn(c net.Conn) {
	if c == nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// sockError returns the socket's pending error (SO_ERROR; reading it
// clears it), or nil for a connection without one.
func sockError(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var serr int
	if err := rc.Control(func(fd uintptr) {
		serr = sys.SockError(fd)
	}); err != nil || serr == 0 {
		return nil
	}
	return os.NewSyscallError("recv", syscall.Errno(serr))
}

// closeWrite sends a FIN if the connection supports half-close. It
// reports false when it does not.
func closeWrite(c net.Conn) bool {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return false
	}
	_ = cw.CloseWrite()
	return true
}
