package layers

import (
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// RDMAPOpcode is an RDMAP opcode (RFC 5040 §4.2, RFC 7306 §9) with the
// layer type of the header that follows the DDP header.
type RDMAPOpcode wire.Opcode

// RDMAP opcodes, as rdmap defines them.
const (
	OpWrite          = RDMAPOpcode(wire.OpWrite)
	OpReadRequest    = RDMAPOpcode(wire.OpReadRequest)
	OpReadResponse   = RDMAPOpcode(wire.OpReadResponse)
	OpSend           = RDMAPOpcode(wire.OpSend)
	OpSendInv        = RDMAPOpcode(wire.OpSendInv)
	OpSendSE         = RDMAPOpcode(wire.OpSendSE)
	OpSendSEInv      = RDMAPOpcode(wire.OpSendSEInv)
	OpTerminate      = RDMAPOpcode(wire.OpTerminate)
	OpImmData        = RDMAPOpcode(wire.OpImmData)
	OpImmDataSE      = RDMAPOpcode(wire.OpImmDataSE)
	OpAtomicRequest  = RDMAPOpcode(wire.OpAtomicRequest)
	OpAtomicResponse = RDMAPOpcode(wire.OpAtomicResponse)
)

// String returns rdmap's short name: "rdma_write", "read_request", ...,
// or "unknown(N)".
func (o RDMAPOpcode) String() string { return wire.Opcode(o).String() }

// LayerType returns the layer type of the RDMAP header that follows the
// DDP header of a message with opcode o, or gopacket.LayerTypePayload when
// the ULP payload follows directly.
func (o RDMAPOpcode) LayerType() gopacket.LayerType {
	switch o {
	case OpReadRequest:
		return LayerTypeRDMAPReadRequest
	case OpTerminate:
		return LayerTypeRDMAPTerminate
	case OpAtomicRequest:
		return LayerTypeRDMAPAtomicRequest
	case OpAtomicResponse:
		return LayerTypeRDMAPAtomicResponse
	}
	return gopacket.LayerTypePayload
}

// DDP is a DDP segment header (RFC 5041 §4.2 tagged, §4.3 untagged)
// including the RDMAP control fields carried in its RsvdULP octets
// (RFC 5040 §4.1), as Wireshark's combined DDP/RDMAP dissector shows them:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV|RV |Rsv|OpCode | tagged: STag / untagged:      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+       Invalidate STag         +
//	|                               |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|      tagged: TO (64) / untagged: QN (32), MSN (32), MO (32)   |
//	~                                                               ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Contents is the 14- or 18-octet header. NextLayerType follows the
// opcode: Read Request, Terminate and the RFC 7306 atomics have a header
// of their own; everything else is followed by the ULP payload.
//
// A DDP must be used from one goroutine.
type DDP struct {
	gplayers.BaseLayer
	Tagged, Last bool
	// Version is DV; Reserved the Resrv bits in place (mask 0x3c).
	Version  uint8
	Reserved uint8
	// Tagged buffer model.
	STag uint32
	TO   uint64
	// Untagged buffer model.
	QN, MSN, MO uint32
	// RDMAP control (RFC 5040 §4.2): RV, the Rsv bits in place (mask
	// 0x30) and the opcode.
	RDMAPVersion  uint8
	RDMAPReserved uint8
	Opcode        RDMAPOpcode
	// InvalidateSTag is the untagged header's RsvdULP[8:39]: the
	// Invalidate STag of Send with Invalidate (and Send with SE and
	// Invalidate), reserved and normally zero otherwise.
	InvalidateSTag uint32
}

var errDDPField = errors.New("layers: DDP field out of range")

// LayerType returns LayerTypeDDP.
func (d *DDP) LayerType() gopacket.LayerType { return LayerTypeDDP }

// CanDecode returns LayerTypeDDP.
func (d *DDP) CanDecode() gopacket.LayerClass { return LayerTypeDDP }

// NextLayerType returns d.Opcode.LayerType().
func (d *DDP) NextLayerType() gopacket.LayerType { return d.Opcode.LayerType() }

// Payload returns what follows the DDP header (gopacket.ApplicationLayer).
func (d *DDP) Payload() []byte { return d.BaseLayer.Payload }

// DecodeFromBytes decodes the DDP header at the start of data through the
// ddp and rdmap packages' views. It resets d entirely, does not allocate,
// and leaves Contents and Payload aliasing data. On a DDP version other
// than 1 it decodes every field and returns the *ddp.VersionError.
func (d *DDP) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*d = DDP{}
	h, err := ddp.Parse(data)
	if h == nil {
		df.SetTruncated()
		return err
	}
	d.Tagged, d.Last = h.Tagged(), h.Last()
	d.Version, d.Reserved = h.Version(), h.Reserved()
	if d.Tagged {
		d.STag, d.TO = uint32(h.STag()), h.TO()
	} else {
		d.InvalidateSTag = h.RsvdULP32()
		d.QN, d.MSN, d.MO = h.QN(), h.MSN(), h.MO()
	}
	var op wire.Opcode
	d.RDMAPVersion, d.RDMAPReserved, op = wire.Control(h.RsvdULP())
	d.Opcode = RDMAPOpcode(op)
	d.Contents, d.BaseLayer.Payload = data[:h.Len()], data[h.Len():]
	return err
}

// SerializeTo prepends the DDP header to b. Fields too wide for the wire
// are an error; a zero Version is written as zero (not as version 1).
func (d *DDP) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if d.Version > ddp.VersionMask || d.Reserved&^ddp.ReservedMask != 0 ||
		d.RDMAPVersion > 3 || d.RDMAPReserved&^0x30 != 0 || d.Opcode > 0xf {
		return fmt.Errorf("%w: DV %d Resrv %#x RV %d Rsv %#x opcode %d", errDDPField,
			d.Version, d.Reserved, d.RDMAPVersion, d.RDMAPReserved, uint8(d.Opcode))
	}
	ctl := wire.ControlByte(d.RDMAPVersion, wire.Opcode(d.Opcode)) | d.RDMAPReserved
	n := ddp.UntaggedHeaderLen
	if d.Tagged {
		n = ddp.TaggedHeaderLen
	}
	h, err := b.PrependBytes(n)
	if err != nil {
		return err
	}
	if d.Tagged {
		ddp.PutTagged(h, &ddp.TaggedFields{Last: d.Last, RsvdULP: ctl, STag: ddp.STag(d.STag), TO: d.TO})
	} else {
		ddp.PutUntagged(h, &ddp.UntaggedFields{Last: d.Last, RsvdULP: ctl, RsvdULP32: d.InvalidateSTag,
			QN: d.QN, MSN: d.MSN, MO: d.MO})
	}
	// ddp's encoders take version 0 to mean version 1 and write no
	// reserved bits; write the control byte as the fields say.
	h[0] = h[0]&^(ddp.VersionMask|ddp.ReservedMask) | d.Version | d.Reserved
	return nil
}

func decodeDDP(data []byte, p gopacket.PacketBuilder) error {
	d := &DDP{}
	if err := d.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(d)
	p.SetApplicationLayer(d)
	return p.NextDecoder(d.NextLayerType())
}
