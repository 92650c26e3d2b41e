package cm

import (
	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// AppendLLPTerminate appends to b the ULPDU of an LLP Terminate with MPA
// error code code, as Linux siw builds it during the MPA handshake
// (siw_init_terminate, siw_send_terminate): an untagged DDP header on QN 2
// with MSN 1, MO 0 and L set, RDMAP version 1 opcode Terminate, then the
// control word (layer LLP, type MPA, the code; no M/D/R) in layout l. The
// handshake frames it (mpa.Initiator.Terminate); mpa.AppendFPDU(nil, u,
// nil, false) gives the FPDU siw sends, with a zero CRC field.
func AppendLLPTerminate(b []byte, code mpa.TermCode, l wire.Layout) []byte {
	b = ddp.AppendUntagged(b, &ddp.UntaggedFields{
		Last:    true,
		RsvdULP: wire.ControlByte(wire.Version1, wire.OpTerminate),
		QN:      wire.QNTerminate,
		MSN:     1,
	})
	return wire.AppendTerminate(b, &wire.Terminate{
		Layer:  wire.LayerLLP,
		EType:  mpa.TermTypeMPA,
		Code:   uint8(code),
		Layout: l,
	})
}
