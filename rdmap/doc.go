// Package rdmap implements the Remote Direct Memory Access Protocol
// (RDMAP, RFC 5040, with the RFC 7306 extensions) and the verbs of a
// software RNIC: devices, protection domains, memory regions and their
// STags, completion queues, shared receive queues and reliable connected
// queue pairs, with the per-QP engines that move data over DDP (RFC 5041,
// package ddp) and MPA (RFC 5044, package mpa) on a TCP connection.
//
//	Device ── PD ── MR (STag = 24-bit index << 8 | 8-bit key, as siw)
//	   │       ├── MW (memory window over part of an MR; own STag)
//	   │       └── QP ── SendCQ, RecvCQ (CQ), SRQ
//	   └── Memory (AllocMemory: mmap outside the Go heap, guard pages)
//
// # Verbs
//
// PostSend and PostRecv copy the work request into a ring under a short
// mutex and ring the send engine's doorbell; they never block and take no
// context. PostSends and PostRecvs (and SRQ.PostRecvs) post a list of
// work requests, as verbs' linked lists, under one lock and with one
// doorbell, and say how many of it were posted. CQ.Poll never blocks; CQ.Wait blocks for a completion. A QP is
// created IDLE, takes receives (and queues sends) at once, and moves to
// RTS when the connection manager calls Start with the negotiated TCP
// connection (the cm.QP interface). Completions of send work requests
// come in SQ order; Sends, Writes, Local Invalidates, fast registrations
// and window binds complete when written to the socket (the last three
// write nothing: when every earlier work request's bytes are), Reads and
// atomics when their response has been placed. Every work request completes exactly once: with success, an
// error status, or WCWRFlushErr when the QP leaves RTS before it could;
// a CQ that overruns fails with its QPs but keeps every completion (see
// CQ).
//
// # Memory registration
//
// PD.RegisterMemory registers memory at once. For FRWR-based ULPs,
// PD.AllocMR reserves an invalid fast-register region and a WRRegMR work
// request maps it (memory, rights, a new key) in SQ order, so a Send
// posted after it may advertise the STag without waiting; a Local
// Invalidate or a received Send with Invalidate unmaps it, and the next
// WRRegMR must use another key. Memory windows (PD.AllocMW) grant a peer
// part of a region with AccessMWBind: type 1 bound by MW.Bind, type 2 by
// a WRBindMW work request and tied to its QP. A remote access through a
// window is checked against the window, then its region. Every mapping
// is an immutable binding replaced atomically under a new STag word; a
// check returns the bytes of the binding it checked, and placement
// rechecks the STag word (below), so a re-registration never lets a byte
// land through an old STag.
//
// # Engines and concurrency
//
// Each started QP runs a receive goroutine, and a send goroutine while
// it has something to send: idle, the send goroutine parks (exits) and
// the doorbell starts it again (tx.go), and neither engine holds a data
// buffer (the reader borrows its buffer while bytes move, the writer its
// scratch, iovecs and batch buffer per batch, but for a batch of one
// small FPDU, which stays in an array of its own), so an idle connected QP
// costs its structures and one goroutine. The send goroutine owns
// the FPDU writer (mpa.Writer), the SQ cursor and the outgoing Read and
// Atomic Responses: it takes Responses from the IRQ and work requests
// from the SQ in order, cuts messages into DDP segments no larger than
// the MULPDU (from the connection's TCP_MAXSEG, as siw does), and hands
// the headers and the payload slices to the writer, which frames them as
// FPDUs and writes many at once. Without CRC32c the payload is a slice of
// registered memory (a piece of at most mpa.WriterCopyLen bytes is copied
// beside its header) and a batch is one writev (net.Buffers over reused
// arrays); with CRC32c the writer copies the payload into a pooled batch
// buffer and computes the CRC over the copy, so that it covers exactly
// the bytes sent even if the memory changes meanwhile. The receive
// goroutine (rx.go) owns the reassembly and placement state and reads
// every FPDU with an mpa.Reader, header first: it checks the DDP and
// RDMAP headers as soon as they are in (DDP's placement rules in package
// ddp, RDMAP's own here), then has the reader place the payload straight
// into the target memory (readv); with CRC32c the payload goes through
// the reader's buffer instead, folded into the CRC there before it is
// copied into the target, so that the CRC checks the bytes that arrived
// even when the target changes meanwhile (QPConfig.CRCInPlace places it
// straight and computes the CRC over the target, as Linux siw does for
// kernel QPs: no copy, for memory nothing else writes). With markers or
// QPConfig.BufferedRx the whole FPDU is read and checked before anything
// is placed. An FPDU that is already all in the reader's buffer (small
// FPDUs read many at a time) is taken in one step (mpa.Reader.Whole): its
// CRC checked first, then the same header checks, then its payload copied
// from the buffer. Every error the reader or DDP's rules report becomes its
// Terminate in one function (term.go, termFor). No data moves through
// channels; the engines share only the SQ, ORQ and IRQ under QP.sqMu.
// Posts of send work requests are ordered by QP.postMu: a list of the
// common requests (Sends and Writes of one SGE) is written into the SQ's
// free slots and published (QP.sqTail) under postMu alone, without
// sqMu, so that a poster streaming lists and the send engine taking them
// do not wait for each other (qp.go, QP.postMu).
// Every queue (SQ, RQ, SRQ, ORQ, IRQ, a CQ's completions) is the same
// ring (ring.go): a power-of-two array indexed by free-running counters,
// allocated when the queue is created. In steady state a work request
// allocates nothing. The receive engine takes receives from its QP's own
// RQ without the RQ lock and pushes its receive completions into the CQ
// a few at a time, under one lock and with one wake-up, the last of them
// before it reads the socket again (rx.go: takeRecv, flushRecvs): a
// receive leaves the RQ before its completion can be polled.
//
// Two paths skip a goroutine handoff. A send posted to an idle QP (the
// send goroutine parked, nothing else queued, one FPDU) is built and
// written on the poster's goroutine with one non-blocking writev (the
// direct send, txdirect.go); what the socket does not take is the send
// goroutine's, which writes it first. With QPConfig.PollRx the goroutine
// waiting on the QP's receive CQ runs the receive engine itself
// (rxpoll.go): the engine belongs to whoever holds it (the receive
// goroutine, a waiter, or nobody), handed over at FPDU boundaries only,
// so a message for a waiting application costs one wakeup, the poller's.
//
// Lock order: QP.mu -> QP.postMu -> QP.sqMu -> QP.rqMu -> SRQ.mu -> CQ.mu -> Device.mu;
// QP.sqMu -> a window's MR.mu -> its region's MR.mu -> Memory.mu,
// Device.mu (binds and fast registrations run under sqMu).
//
// # Memory fences
//
// Once MR.Deregister or MR.Invalidate has returned, a Local Invalidate
// has completed, a Send with Invalidate has been received, or QP.Close or
// Device.Close has returned, no peer byte lands in that memory again, on
// any receive path (and the same holds for a memory window once
// MW.Unbind, MW.Dealloc or a rebind has returned, a Local Invalidate or
// Send with Invalidate of it has completed, or its region is invalid): a segment being placed at that moment is cut (the
// wait is bounded by one read syscall), the rest of its FPDU discarded,
// and its QP ends with the Terminate for an invalid STag. Memory.Close
// refuses (ErrBusy) while a region is registered over the memory. A
// partial FPDU that makes no progress for QPConfig.RxStallTimeout ends
// its QP; nothing waits on a peer without an end.
//
// # Errors
//
// Every protocol error ends in the Terminate RFC 5040/5041/5044 prescribe,
// with the codes Linux siw uses (siw_qp_rx.c, siw_qp.c; see TerminateError
// and the tests in hostile_test.go), the offending DDP header (and Read
// Request) copied in as siw does, then a FIN, the QP in ERROR and every
// outstanding work request flushed. A received Terminate does the same
// without answering, and QP.Err reports its layer, type and code.
//
// # Wire code
//
// The RDMAP codec (control byte, Read Request, atomics, Terminate and the
// P2P RTR) is package rdmap/wire, which imports only the standard library,
// ddp and mpa, so that a decoder such as package layers links none of the
// engine. The engines use it; rdmap re-exports none of it: TerminateError
// reports a wire.Layer and a wire.Layout.
//
// The system calls (readv, SO_ERROR, TCP_MAXSEG, guarded mappings) go
// through rdmap/internal/sys and the data path's buffers come from
// rdmap/internal/bufpool; nothing outside rdmap imports either.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package rdmap
