package layers

import (
	"fmt"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// RDMAPReadRequest is the RDMA Read Request header (RFC 5040 §4.4) that
// follows the untagged DDP header on queue 1:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Data Sink STag                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Data Sink Tagged Offset (64)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    RDMA Read Message Size                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Data Source STag                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Data Source Tagged Offset (64)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A Read Request carries no payload; octets after the header are the
// layer's Payload. It must be used from one goroutine.
type RDMAPReadRequest struct {
	gplayers.BaseLayer
	SinkSTag uint32
	SinkTO   uint64
	Size     uint32
	SrcSTag  uint32
	SrcTO    uint64
}

// LayerType returns LayerTypeRDMAPReadRequest.
func (r *RDMAPReadRequest) LayerType() gopacket.LayerType { return LayerTypeRDMAPReadRequest }

// CanDecode returns LayerTypeRDMAPReadRequest.
func (r *RDMAPReadRequest) CanDecode() gopacket.LayerClass { return LayerTypeRDMAPReadRequest }

// NextLayerType returns gopacket.LayerTypePayload.
func (r *RDMAPReadRequest) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes the header with wire.ParseReadRequest. It does
// not allocate.
func (r *RDMAPReadRequest) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*r = RDMAPReadRequest{}
	v, err := wire.ParseReadRequest(data)
	if err != nil {
		df.SetTruncated()
		return err
	}
	r.SinkSTag, r.SinkTO, r.Size = uint32(v.SinkSTag()), v.SinkTO(), v.Size()
	r.SrcSTag, r.SrcTO = uint32(v.SrcSTag()), v.SrcTO()
	r.Contents, r.Payload = data[:wire.ReadRequestLen], data[wire.ReadRequestLen:]
	return nil
}

// SerializeTo prepends the header to b.
func (r *RDMAPReadRequest) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(wire.ReadRequestLen)
	if err != nil {
		return err
	}
	wire.AppendReadRequest(h[:0], &wire.ReadRequestFields{
		SinkSTag: ddp.STag(r.SinkSTag), SinkTO: r.SinkTO, Size: r.Size,
		SrcSTag: ddp.STag(r.SrcSTag), SrcTO: r.SrcTO,
	})
	return nil
}

func decodeRDMAPReadRequest(data []byte, p gopacket.PacketBuilder) error {
	r := &RDMAPReadRequest{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	return p.NextDecoder(r.NextLayerType())
}

// RDMAPTerminate is the Terminate header (RFC 5040 §4.8) that follows the
// untagged DDP header on queue 2:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|       Reserved          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      DDP Segment Length       |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~          Terminated DDP Header (14 or 18 octets, if D)        ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~          Terminated RDMA Header (28 octets, if R)             ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The fields are those of wire.Terminate, which decodes them
// (ParseTerminate, which also recognises the bit order Linux siw writes
// the control word in and reports it in Layout). SerializeTo writes the
// control word in Layout. It must be used from one goroutine.
type RDMAPTerminate struct {
	gplayers.BaseLayer
	wire.Terminate
}

// LayerType returns LayerTypeRDMAPTerminate.
func (t *RDMAPTerminate) LayerType() gopacket.LayerType { return LayerTypeRDMAPTerminate }

// CanDecode returns LayerTypeRDMAPTerminate.
func (t *RDMAPTerminate) CanDecode() gopacket.LayerClass { return LayerTypeRDMAPTerminate }

// NextLayerType returns gopacket.LayerTypePayload.
func (t *RDMAPTerminate) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes the header with wire.ParseTerminate. It does
// not allocate; DDPHeader and RDMAHeader alias data.
func (t *RDMAPTerminate) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*t = RDMAPTerminate{}
	if err := wire.ParseTerminate(data, &t.Terminate); err != nil {
		df.SetTruncated()
		return err
	}
	n := t.Len()
	t.Contents, t.Payload = data[:n], data[n:]
	return nil
}

// SerializeTo prepends the header to b. The terminated headers must have
// the lengths their flags promise: a DDP header of the length its control
// octet implies when D is set, 28 octets when R is set.
func (t *RDMAPTerminate) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if t.D && (len(t.DDPHeader) == 0 || len(t.DDPHeader) != ddp.HeaderLen(t.DDPHeader[0])) {
		return fmt.Errorf("layers: terminated DDP header of %d octets", len(t.DDPHeader))
	}
	if t.R && len(t.RDMAHeader) != wire.ReadRequestLen {
		return fmt.Errorf("layers: terminated RDMA header of %d octets", len(t.RDMAHeader))
	}
	if t.Layer > 0xf || t.EType > 0xf {
		return fmt.Errorf("layers: terminate layer %d or type %d above 4 bits", t.Layer, t.EType)
	}
	h, err := b.PrependBytes(t.Len())
	if err != nil {
		return err
	}
	wire.AppendTerminate(h[:0], &t.Terminate)
	return nil
}

func decodeRDMAPTerminate(data []byte, p gopacket.PacketBuilder) error {
	t := &RDMAPTerminate{}
	if err := t.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(t)
	return p.NextDecoder(t.NextLayerType())
}

// RDMAPAtomicRequest is the Atomic Request header (RFC 7306 §5.2.1) that
// follows the untagged DDP header on queue 3:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Reserved (28 bits)                    |AtomOp |
//	|                      Request Identifier                       |
//	|                          Remote STag                          |
//	|                  Remote Tagged Offset (64)                    |
//	|                   Add or Swap Data (64)                       |
//	|                   Add or Swap Mask (64)                       |
//	|                     Compare Data (64)                         |
//	|                     Compare Mask (64)                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The fields are those of wire.AtomicRequest. It must be used from one
// goroutine.
type RDMAPAtomicRequest struct {
	gplayers.BaseLayer
	wire.AtomicRequest
}

// LayerType returns LayerTypeRDMAPAtomicRequest.
func (a *RDMAPAtomicRequest) LayerType() gopacket.LayerType { return LayerTypeRDMAPAtomicRequest }

// CanDecode returns LayerTypeRDMAPAtomicRequest.
func (a *RDMAPAtomicRequest) CanDecode() gopacket.LayerClass { return LayerTypeRDMAPAtomicRequest }

// NextLayerType returns gopacket.LayerTypePayload.
func (a *RDMAPAtomicRequest) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes the header with wire.ParseAtomicRequest. It
// does not allocate.
func (a *RDMAPAtomicRequest) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*a = RDMAPAtomicRequest{}
	if err := wire.ParseAtomicRequest(data, &a.AtomicRequest); err != nil {
		df.SetTruncated()
		return err
	}
	a.Contents, a.Payload = data[:wire.AtomicRequestLen], data[wire.AtomicRequestLen:]
	return nil
}

// SerializeTo prepends the header to b.
func (a *RDMAPAtomicRequest) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if a.Op > 0xf || a.Reserved&0xf != 0 {
		return fmt.Errorf("layers: atomic op %d or reserved bits %#x do not fit", a.Op, a.Reserved)
	}
	h, err := b.PrependBytes(wire.AtomicRequestLen)
	if err != nil {
		return err
	}
	wire.AppendAtomicRequest(h[:0], &a.AtomicRequest)
	return nil
}

func decodeRDMAPAtomicRequest(data []byte, p gopacket.PacketBuilder) error {
	a := &RDMAPAtomicRequest{}
	if err := a.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(a)
	return p.NextDecoder(a.NextLayerType())
}

// RDMAPAtomicResponse is the Atomic Response header (RFC 7306 §5.2.2)
// that follows the untagged DDP header on queue 3:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Original Request Identifier                   |
//	|               Original Remote Data Value (64)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The fields are those of wire.AtomicResponse. It must be used from one
// goroutine.
type RDMAPAtomicResponse struct {
	gplayers.BaseLayer
	wire.AtomicResponse
}

// LayerType returns LayerTypeRDMAPAtomicResponse.
func (a *RDMAPAtomicResponse) LayerType() gopacket.LayerType { return LayerTypeRDMAPAtomicResponse }

// CanDecode returns LayerTypeRDMAPAtomicResponse.
func (a *RDMAPAtomicResponse) CanDecode() gopacket.LayerClass { return LayerTypeRDMAPAtomicResponse }

// NextLayerType returns gopacket.LayerTypePayload.
func (a *RDMAPAtomicResponse) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes the header with wire.ParseAtomicResponse. It
// does not allocate.
func (a *RDMAPAtomicResponse) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*a = RDMAPAtomicResponse{}
	if err := wire.ParseAtomicResponse(data, &a.AtomicResponse); err != nil {
		df.SetTruncated()
		return err
	}
	a.Contents, a.Payload = data[:wire.AtomicResponseLen], data[wire.AtomicResponseLen:]
	return nil
}

// SerializeTo prepends the header to b.
func (a *RDMAPAtomicResponse) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(wire.AtomicResponseLen)
	if err != nil {
		return err
	}
	wire.AppendAtomicResponse(h[:0], &a.AtomicResponse)
	return nil
}

func decodeRDMAPAtomicResponse(data []byte, p gopacket.PacketBuilder) error {
	a := &RDMAPAtomicResponse{}
	if err := a.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(a)
	return p.NextDecoder(a.NextLayerType())
}
