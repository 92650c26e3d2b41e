package layers

import (
	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
)

// Layer type numbers, in gopacket's 1000-1999 range for application
// layers. They are listed in doc.go; never reuse or renumber them.
const (
	layerNumMPA                 = 1500
	layerNumMPAStartup          = 1501
	layerNumDDP                 = 1502
	layerNumRDMAPReadRequest    = 1503
	layerNumRDMAPTerminate      = 1504
	layerNumRDMAPAtomicRequest  = 1505
	layerNumRDMAPAtomicResponse = 1506
)

// The gopacket layer types of this package. RegisterLayerType is the only
// global gopacket state the package touches.
var (
	LayerTypeMPA = gopacket.RegisterLayerType(layerNumMPA,
		gopacket.LayerTypeMetadata{Name: "MPA", Decoder: gopacket.DecodeFunc(decodeMPA)})
	LayerTypeMPAStartup = gopacket.RegisterLayerType(layerNumMPAStartup,
		gopacket.LayerTypeMetadata{Name: "MPAStartup", Decoder: gopacket.DecodeFunc(decodeMPAStartup)})
	LayerTypeDDP = gopacket.RegisterLayerType(layerNumDDP,
		gopacket.LayerTypeMetadata{Name: "DDP", Decoder: gopacket.DecodeFunc(decodeDDP)})
	LayerTypeRDMAPReadRequest = gopacket.RegisterLayerType(layerNumRDMAPReadRequest,
		gopacket.LayerTypeMetadata{Name: "RDMAPReadRequest", Decoder: gopacket.DecodeFunc(decodeRDMAPReadRequest)})
	LayerTypeRDMAPTerminate = gopacket.RegisterLayerType(layerNumRDMAPTerminate,
		gopacket.LayerTypeMetadata{Name: "RDMAPTerminate", Decoder: gopacket.DecodeFunc(decodeRDMAPTerminate)})
	LayerTypeRDMAPAtomicRequest = gopacket.RegisterLayerType(layerNumRDMAPAtomicRequest,
		gopacket.LayerTypeMetadata{Name: "RDMAPAtomicRequest", Decoder: gopacket.DecodeFunc(decodeRDMAPAtomicRequest)})
	LayerTypeRDMAPAtomicResponse = gopacket.RegisterLayerType(layerNumRDMAPAtomicResponse,
		gopacket.LayerTypeMetadata{Name: "RDMAPAtomicResponse", Decoder: gopacket.DecodeFunc(decodeRDMAPAtomicResponse)})
)

// RegisterPort makes gopacket's TCP layer hand the payload of segments to
// or from port p to the MPA layer, for per-packet decoding with
// gopacket.NewPacket and DecodeOptions.DecodeStreamsAsDatagrams. It changes gopacket's global port table, so only a
// main package or a test may call it; library code never does (iWARP has
// no well-known port).
//
// Per-packet decoding assumes that each TCP segment holds whole FPDUs and
// knows nothing of what the MPA handshake negotiated (CRC, markers); the
// StreamDecoder has neither limit.
func RegisterPort(p gplayers.TCPPort) {
	gplayers.RegisterTCPPortLayerType(p, LayerTypeMPA)
}
