// Package mpa implements Marker PDU Aligned framing (MPA, RFC 5044, with
// the enhanced connection setup of RFC 6581): the framing that turns a TCP
// byte stream into the record stream DDP (RFC 5041, package ddp) needs.
//
// # Layering
//
//	ULP (RDMAP, package rdmap) ── DDP segments (package ddp)
//	        │ each DDP segment is one ULPDU
//	        ▼
//	MPA full operation (RFC 5044 §4):
//	        FPDU = ULPDU_Length(2) | ULPDU | pad(0-3) | CRC32c(4)
//	        plus a 4-byte marker at every 512th stream octet when the
//	        receiver asked for markers (RFC 5044 §4.3)
//	        ▲
//	MPA connection setup (RFC 5044 §7.1, RFC 6581 §5):
//	        "MPA ID Req Frame" / "MPA ID Rep Frame", flags M C R H, Rev,
//	        PD_Length, the RFC 6581 IRD/ORD block, private data
//	        │
//	        ▼
//	TCP
//
// # Wire code
//
// frame.go, fpdu.go and markers.go hold pure functions over byte slices:
// ParseFrame/AppendFrame for Request and Reply frames (a struct, since a
// frame is parsed once per connection), ParseFPDU/AppendFPDU, PadLen and
// the CRC helpers for FPDUs, InsertMarkers/RemoveMarkers/MarkedLen/
// MarkersValid for markers, MULPDU for the segment-size rule of RFC 5044 §4.5. They do
// not allocate (beyond growing a caller's too-small buffer), keep no
// state and are safe for concurrent use. Where markers fall and what
// they hold is computed in one place (markers.go), which InsertMarkers,
// RemoveMarkers, MarkedLen, MarkersValid, the Writer and the Reader
// share (and package layers through them). Every
// malformed Request/Reply case has its own error (ErrTruncated,
// ErrBadKey, *RevisionError matching ErrUnknownRevision, ErrPDTooLong,
// ErrEnhancedShort, ErrReservedBits; ErrSMBDShort and ErrSMBDZero for the
// [MS-SMBD] header) so that the handshake can answer each the way RFC 5044
// and Linux siw (drivers/infiniband/sw/siw/siw_cm.c) do.
//
// The CRC is CRC32c computed with hash/crc32's Castagnoli table over the
// whole FPDU before the CRC field, markers included, and is sent as the
// little-endian 32-bit value, byte for byte what Linux siw sends (and the
// byte order RFC 3720 appendix B.4 prints its examples in).
//
// # Stream code
//
// Reader (reader.go) is the one FPDU reader: it reads the FPDUs of one
// direction header first. Next reads ULPDU_Length, Header returns the
// ULPDU's first bytes as soon as they have arrived, so the caller can
// check the DDP and RDMAP headers before the payload comes; then Place
// reads the payload into the caller's memory (each write fenced by the
// caller's Placer; without CRC or markers, large remainders go straight
// from a VectorReader, readv, into that memory) or Discard drops it, and
// Trailer reads the pad and checks the CRC over the bytes as they were
// read, never re-read from the caller's memory (unless
// ReaderConfig.CRCInPlace asks for large remainders with CRC to go
// straight too, their CRC computed over that memory right after each
// read, inside the placement). Markers are removed and
// covered by the CRC. In Buffered mode the whole FPDU is read and its CRC
// checked before Place writes anything. Its errors are mpa's
// (ErrBadCRC, ErrULPDUTooLong, io.ErrUnexpectedEOF inside an FPDU) or the
// source's and the Placer's; it builds no Terminate. An rdmap QP's
// receive goroutine reads every FPDU with it, on every path (direct,
// BufferedRx, markers; CRC on or off).
//
// Deframer is the Reader in Buffered mode handing out whole FPDUs, for a
// reassembled capture, tools and raw test peers; it is resumable after
// any reader error. Writer frames FPDUs into batches written with one
// system call: without CRC a writev of iovecs that point into the caller's
// memory (zero copy; small payload pieces copied beside their headers so
// that small FPDUs share iovecs), with CRC one write of a pooled buffer into which
// every byte was copied and over which the CRC was computed, so that it
// covers exactly the bytes sent; an rdmap QP's send goroutine frames with
// a Writer. Framer builds single FPDUs into a byte slice and keeps the
// marker position, for tools and tests (siw probe, testutil, raw peers).
// Each must be used from one goroutine.
// The handshake (handshake.go) is straight-line code
// on top of the frame functions.
//
// # Connection setup
//
// handshake.go holds the two halves of the MPA connection setup
// (RFC 5044 §7.1, RFC 6581) as straight-line code on the frame functions:
// Initiator.Handshake, and ReadRequest then Responder.Accept or Reject.
// Each failure is answered the way RFC 5044/6581 and Linux siw answer it
// (a Reply with R set, an LLP Terminate framed by this package, or
// nothing) and returned as a *HandshakeError saying which, or as a
// *RejectedError when the peer rejected; neither half closes the
// connection. handshake_policy.go holds the Policy (revision, CRC,
// markers, P2P and RTR types, IRD/ORD and private-data limits) and the one
// check of the IRD/ORD and private data this side sends, which the
// Request, the accepting Reply and the reject share; a caller can run it
// without I/O (Initiator.Request, Responder.Negotiate, CheckReject).
// termcode.go holds the MPA error codes of an LLP Terminate (TermCode).
//
// # MPA revision 1 with the [MS-SMBD] IRD/ORD header
//
// Revision 1 has no RFC 6581 block. SMB Direct ([MS-SMBD] section 6.1,
// "IRD/ORD Negotiate Header") has each side put its IRD and ORD, two
// big-endian 32-bit values greater than zero, as the first 8 bytes of the
// private data instead, as Windows SMB Direct does over revision 1 RNICs
// such as the Chelsio T4. smbd.go holds the codec (AppendSMBDHeader,
// ParseSMBDHeader, Frame.SplitSMBD; Frame.SMBD, SMBDIRD and SMBDORD carry
// it in a Frame, and AppendFrame writes it). Policy.SMBD, off by default,
// turns it on for connections whose Request is revision 1: the handshake
// sends the header, hides it from the ULP's private data as it hides the
// RFC 6581 block, negotiates from it with the same relaxed rules and
// limits, and answers a missing or zero header as it answers a missing
// block (a Reply with R set; an LLP Terminate with TermInvalidReqRep).
// Nothing on the wire marks the header, so ParseFrame never sets
// Frame.SMBD and both sides must agree on the option out of band; the
// rules, mismatches included, are on Policy.SMBD.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package mpa
