// Package wire is RDMAP's codec (RFC 5040, with the RFC 7306 extensions):
// the encoders and decoders of the bytes RDMAP adds to a DDP segment, and
// nothing else. It keeps no state, starts no goroutine and imports only
// the standard library, ddp and mpa, so a capture decoder (package layers)
// or a probe links none of the engine in package rdmap.
//
// RDMAP's control byte (RV, opcode; RFC 5040 §4.2) and, for Send with
// Invalidate, the Invalidate STag live in the DDP header's RsvdULP field;
// ControlByte and Control encode and split the byte. The headers that
// follow a DDP header are views or small structs with Parse/Append pairs
// that do not allocate:
//
//	Read Request (RFC 5040 §4.4, QN 1)       ReadRequest, AppendReadRequest
//	Terminate (RFC 5040 §4.8, QN 2)          Terminate, ParseTerminate, AppendTerminate
//	Atomic Request/Response (RFC 7306 §5)    AtomicRequest, AtomicResponse
//	P2P ready-to-receive (RFC 6581 §3)       AppendRTR
//
// Linux siw writes the Terminate control word from C bitfields, so on x86
// its bytes are not in RFC order (drivers/infiniband/sw/siw/iwarp.h,
// struct iwarp_terminate). ParseTerminate detects that layout where the
// bytes allow it (DetectLayout lists the words that stay ambiguous) and
// reports which one it read; AppendTerminate writes either.
//
// Parse functions return views that alias their input (ReadRequest,
// Terminate.DDPHeader, Terminate.RDMAHeader) or fill a caller's struct;
// Append functions append to the caller's slice. Every function is safe
// for concurrent use.
package wire
