// Package layers decodes iWARP traffic with gopacket: layers for the MPA
// handshake frames (RFC 5044 §7.1 with RFC 6581 enhanced connection
// setup), MPA FPDUs (RFC 5044 §4), DDP (RFC 5041) and RDMAP (RFC 5040 Read
// Request and Terminate, RFC 7306 atomics), and a stream decoder that
// follows iWARP connections through pcap and pcapng captures. It is the
// only package of the module that imports gopacket; the wire formats come
// from the mpa, ddp and rdmap/wire packages (one set of offsets for the
// engine, these layers and the fuzzers); layers links none of the engine
// in package rdmap.
//
// # Layer types
//
// Registered in gopacket's 1000-1999 range for application layers. The
// numbers are fixed: never reuse or renumber them.
//
//	1500  LayerTypeMPA                  MPA    one FPDU: ULPDU_Length, ULPDU, pad, CRC (markers removed)
//	1501  LayerTypeMPAStartup           MPAStartup  MPA Request/Reply frame, RFC 6581 IRD/ORD
//	1502  LayerTypeDDP                  DDP    tagged or untagged DDP header with the RDMAP control fields
//	1503  LayerTypeRDMAPReadRequest     RDMAPReadRequest     RDMA Read Request header
//	1504  LayerTypeRDMAPTerminate       RDMAPTerminate       Terminate header (RFC or Linux siw layout)
//	1505  LayerTypeRDMAPAtomicRequest   RDMAPAtomicRequest   RFC 7306 Atomic Request header
//	1506  LayerTypeRDMAPAtomicResponse  RDMAPAtomicResponse  RFC 7306 Atomic Response header
//
// How they chain (NextLayerType):
//
//	MPA ──► MPAStartup ──► Payload (private data)      data begins with a Request/Reply key
//	MPA ──► DDP ──► RDMAPReadRequest | RDMAPTerminate |
//	                RDMAPAtomicRequest | RDMAPAtomicResponse ──► Payload
//	MPA ──► DDP ──► Payload                            Write, Read Response, Sends, Immediate Data
//
// RDMAP keeps its control byte and the Invalidate STag inside DDP's
// RsvdULP octets, so the DDP layer carries them (as Wireshark's combined
// DDP/RDMAP dissector does) and the RDMAP layers are the headers that
// follow DDP's.
//
// Every layer is a gopacket.DecodingLayer whose DecodeFromBytes does not
// allocate, and a gopacket.SerializableLayer whose SerializeTo honours
// FixLengths (ULPDU_Length, PD_Length) and ComputeChecksums (the CRC32c).
//
// # Per-packet decoding and ports
//
// iWARP has no well-known port, and this package never changes gopacket's
// global port table: a main package or a test may call RegisterPort, or
// feed TCP payloads to a gopacket.DecodingLayerParser starting at
// LayerTypeMPA. Per-packet decoding cannot know what the handshake
// negotiated: set MPA.Framing (CRC, markers and their stream offset) for
// that. It reads one FPDU from the start of the data; MPA.WireLen says
// where the next begins.
//
// # Stream decoding
//
// StreamDecoder (and DecodeCapture, which reads pcap or pcapng files with
// gopacket's pure-Go pcapgo) has none of those limits:
//
//	packet ─► link/IP/TCP headers ─► per-direction TCP reassembly (tcpHalf)
//	       ─► MPA Request, MPA Reply: learn revision, CRC, markers
//	       ─► mpa.Deframer, the framing the QP receive path uses
//	       ─► MPA, DDP, RDMAP layers ─► emit(*Record)
//
// TCP reassembly is this package's own, rather than gopacket/reassembly:
// it needs to know which capture packet completed each FPDU (to compare
// with Wireshark frame by frame), never skips over a missing segment
// (a gap stops the direction and is reported, since the FPDU boundaries
// after it would be a guess), and must leave global state alone
// (gopacket/reassembly registers command-line flags). It handles
// out-of-order segments, retransmissions with and without overlap,
// sequence number wrap, a SYN carrying data, and port reuse.
//
// A connection is decoded only from its MPA Request on: the side whose
// stream begins with "MPA ID Req Frame" is the initiator. A connection
// whose handshake is not in the capture gets a single KindNoHandshake
// record. A Reply with R set gets a KindRejected record. A malformed frame
// is a record with Err set; a malformed FPDU does not stop its direction,
// a malformed handshake frame stops its connection. Notes (KindNote) say
// what is left undecoded: a capture that ends inside a frame, gaps, data
// after a rejection.
//
// # Concurrency
//
// The package starts no goroutines. A layer value, a StreamDecoder and
// the Records it emits must each be used from one goroutine; Records and
// the layers they point to are valid only during the emit call.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package layers
