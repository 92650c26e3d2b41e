// Package ddp implements the wire format of the Direct Data Placement
// protocol (DDP, RFC 5041): the tagged and untagged segment headers, the
// cutting of a message into segments that fit the MULPDU, and the DDP
// error types and codes carried in a Terminate.
//
// # Layering
//
// DDP segments travel as the ULPDUs of MPA FPDUs (RFC 5044, package mpa)
// and carry RDMAP (RFC 5040, package rdmap) messages. RDMAP keeps its own
// control byte, and for untagged messages its Invalidate STag, inside the
// DDP header's RsvdULP field, so one header holds both layers:
//
//	TCP byte stream
//	  └─ MPA FPDU       ULPDU_Length | ULPDU | pad | CRC32c     (mpa)
//	       └─ DDP segment header, 14 (tagged) or 18 (untagged)  (ddp)
//	            ├─ RsvdULP: RDMAP control (RV, opcode)          (rdmap)
//	            └─ payload: data, or a Read Request / Terminate
//	               / Atomic header                              (rdmap)
//
// Tagged segments (RFC 5041 §4.2) name a registered buffer by STag and
// tagged offset (TO) and are placed there directly: RDMA Write and Read
// Response. Untagged segments (RFC 5041 §4.3) name a queue (QN), message
// (MSN) and offset (MO): Send on QN 0, Read Request on QN 1, Terminate on
// QN 2, and the RFC 7306 atomics on QN 3.
//
// # Usage
//
// Parse validates a header once (length and DDP version, RFC 5041 §4.1)
// and returns a Header view whose accessors read the bytes in place;
// AppendTagged and AppendUntagged encode from TaggedFields and
// UntaggedFields. Neither allocates. A version other than 1 is returned as
// a *VersionError together with the view, so the receiver can still build
// the Terminate RFC 5041 §7.2 prescribes (tagged or untagged "invalid DDP
// version"). Reserved control bits are reported by Header.Reserved, not
// refused: Linux siw (drivers/infiniband/sw/siw/siw_qp_rx.c) ignores them
// too.
//
// # Placement rules
//
// place.go holds the Data Sink's rules (RFC 5041 §5.3, §5.4, §7.2), in
// the order Linux siw checks them: UntaggedSink checks an untagged
// segment's QN, MSN and MO against the message in progress or the
// queue's next MSN, takes the buffer for a new message through the ULP's
// Buffers and checks that the payload fits it; TaggedSink checks that a
// tagged message's segments name the same STag at consecutive TOs (or
// where an expected message, a Read Response, must land) and asks the
// ULP's Regions whether the region allows the write. What is invalid
// comes back as an *Error (type and code) for the ULP's Terminate. rdmap
// supplies the buffers and regions (posted receives, MRs, the ORQ) and
// keeps RDMAP's own checks (opcodes, Invalidate STags, access rights).
//
// Headers and codes have no state and are safe for concurrent use; an
// UntaggedSink or TaggedSink is the state of one stream direction and is
// used from one goroutine. Nothing in the package starts goroutines or
// does I/O.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package ddp
