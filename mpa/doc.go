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
// the CRC helpers for FPDUs, InsertMarkers/RemoveMarkers/MarkedLen for
// markers, MULPDU for the segment-size rule of RFC 5044 §4.5. They do
// not allocate (beyond growing a caller's too-small buffer), keep no
// state and are safe for concurrent use. Where markers fall and what
// they hold is computed in one place (markers.go), which InsertMarkers,
// RemoveMarkers, MarkedLen, the Writer and the Deframer share. Every
// malformed Request/Reply case has its own error (ErrTruncated,
// ErrBadKey, *RevisionError matching ErrUnknownRevision, ErrPDTooLong,
// ErrEnhancedShort, ErrReservedBits) so that the handshake can answer
// each the way RFC 5044 and Linux siw (drivers/infiniband/sw/siw/siw_cm.c)
// do.
//
// The CRC is CRC32c computed with hash/crc32's Castagnoli table over the
// whole FPDU before the CRC field, markers included, and is sent as the
// little-endian 32-bit value, byte for byte what Linux siw sends (and the
// byte order RFC 3720 appendix B.4 prints its examples in).
//
// # Stream code
//
// Deframer cuts a byte stream (a TCP connection, or a reassembled capture
// in the layers package) into FPDUs, removing markers and checking CRCs;
// it is resumable after any reader error. Writer frames FPDUs into
// batches written with one system call: without CRC a writev of iovecs
// that point into the caller's memory (zero copy), with CRC one write of
// a pooled buffer into which every byte was copied and over which the CRC
// was computed, so that it covers exactly the bytes sent. Framer builds
// single FPDUs into a byte slice and keeps the marker position, for tools
// and tests (siw probe, testutil, raw peers). Each must be used from one
// goroutine. In an rdmap QP the send goroutine frames with a Writer; the
// receive goroutine uses a Deframer when markers are negotiated or
// QPConfig.BufferedRx is set (its direct path parses the FPDU with this
// package's layout functions). The handshake (handshake.go) is
// straight-line code on top of the frame functions.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package mpa
