// Package cm is the connection manager: Linux iw_cm's API
// (include/rdma/iw_cm.h, drivers/infiniband/core/iwcm.c) in Go, over real
// TCP, with the MPA connection setup of RFC 5044 §7.1 and RFC 6581 done
// the way Linux siw does it (drivers/infiniband/sw/siw/siw_cm.c).
//
// # Layering
//
//	ULP (handler, or the net-style Listen/Accept/Dial)
//	 |  NewID, Listen, Connect, Accept, Reject, Disconnect, Destroy
//	 v                                           ^ events, one goroutine per ID
//	cm: IDs, state machine, event queues, TCP listen/dial
//	 |  mpa.ReadRequest / Responder.Accept / Reject, mpa.Initiator.Handshake
//	 v
//	mpa: the two halves of the handshake (straight-line code)
//	 |  QP.Start(conn, *mpa.Params) once the handshake is done
//	 v
//	QP (rdmap.QP): owns the TCP connection from then on; sends the RTR
//	(initiator, P2P) or nothing before the initiator's first FPDU
//	(responder); Done/Err tell the cm when the connection has ended.
//
// The cm owns TCP until the handshake is done, then hands the connection
// and what was negotiated (mpa.Params) to the QP. The initiator's RTR in
// peer-to-peer mode is the QP's job, not the cm's: a zero-length Read RTR
// takes an ORD slot and a Read MSN, and a Send RTR a Send MSN, which only
// the QP tracks. The cm sends nothing after the handshake itself except the
// LLP Terminates of the MPA phase (AppendLLPTerminate).
//
// # States
//
// An ID moves through iw_cm's states (iwcm.c enum iw_cm_state); every
// change goes through one function that checks the transition:
//
//	           NewID
//	             |
//	             v          Listen
//	+--------- IDLE -------------------> LISTEN
//	|          |  ^ ConnectReply failed     |  a valid MPA Request makes
//	|  Connect |  | (rejected, reset,       |  a child ID in CONN_RECV
//	|          v  |  timeout, refused ...)  v  and a ConnectRequest event
//	|       CONN_SENT                   CONN_RECV ---------------+
//	|          |                            |                    | Reject,
//	|          | ConnectReply OK            | Accept (Reply      | failed Accept
//	|          | + Established              | sent, QP started)  | (no events)
//	|          v                            v  + Established     v
//	|       ESTABLISHED <-------------------+                   IDLE
//	|          |
//	|          | Disconnect(abrupt) or the QP ends (peer FIN/RST,
//	|          | Terminate, error): Disconnect event
//	|          v
//	|       CLOSING
//	|          | the QP is done: Close event (the last one)
//	|          v
//	|        IDLE
//	|
//	+-- Destroy from any state --> DESTROYING (no more events)
//
// IDs are single-use: an ID that has left IDLE cannot Listen or Connect
// again, so Close really is the last event it sees.
//
// An ID's state is not its QP's: the QP has its own (rdmap.QPState), which
// InitQPAttr speaks of and QP.Start moves to RTS.
//
// What each call does in each state (others return a *StateError, which
// matches ErrInvalidState):
//
//	              IDLE(fresh) LISTEN CONN_RECV CONN_SENT ESTABLISHED CLOSING DESTROYING
//	Listen        yes         -      -         -         -           -       -
//	Connect       yes         -      -         -         -           -       -
//	Accept        -           -      yes       -         -           -       -
//	Reject        -           -      yes       -         -           -       -
//	Disconnect    no-op       -      no-op     -         yes         abrupt  -
//	InitQPAttr    yes         -      yes       yes       yes         -       -
//	Destroy       yes         yes    rejects   cancels   aborts      aborts  no-op
//
// # Events and handlers
//
// Each ID delivers its events to its Handler in order, one at a time, on
// its own event goroutine (started when an event is queued, gone when the
// queue is empty). A ConnectRequest is an event of the listener: it runs on
// the listener's goroutine, one request after the other, with the new
// child ID as the handler's id; the child's own events (Established,
// Disconnect, Close) follow on the child's goroutine, never before its
// ConnectRequest handler has returned. So a handler that calls Accept sees
// Established after it returns.
//
// A handler may call Accept, Reject and Disconnect on its own ID: these
// calls never wait for a handler. Destroy waits until no handler runs with
// the ID, so a handler does not call it on an ID it runs with (its own; in
// a ConnectRequest handler, the child and the listener). It destroys them
// instead in one of two ways, neither of which waits for itself:
//
//   - by returning a non-nil error, as a non-zero return of an iw_cm
//     handler does: ErrDestroy (quietly) or any other error (logged as a
//     failure). The ID is destroyed once the handler has returned, before
//     any other event of it; a ConnectRequest child in CONN_RECV is then
//     rejected. This destroys the handler's own ID only.
//   - with id.DestroyFrom(ev), ev being the event the handler got: the
//     event is the token of that handler call, so DestroyFrom skips the
//     wait for that call and for nothing else. It returns with the ID
//     destroyed, while the handler carries on. ev.Listener.DestroyFrom(ev)
//     stops the listener from inside its ConnectRequest handler; the
//     child lives on.
//
// A handler of ID A may Destroy (or DestroyFrom) another ID B: that waits
// for B's handler in progress, so A's handler must not be what B's waits
// for, or both wait forever; the package cannot see such a cycle.
// Destroying a listener rejects and destroys the requests it has not yet
// delivered (no handler has run with them); children already delivered
// are the ULP's, and outlive the listener. Handlers should not block for
// long: later events of the ID (and, for a listener, later requests)
// wait.
//
// Each Event is a fresh value: its PrivateData and Peer are copies, which
// the handler may keep.
//
// After Reject returns, or after Destroy returns, no event is delivered to
// that ID ("The client can assume that no events will be delivered to the
// specified IW CM identifier following the return of this function",
// iw_cm.h). Reject moves the ID to IDLE before it answers the peer, as
// iw_cm_reject does.
//
// # Negotiation
//
// Config.MPA (an mpa.Policy) is the policy; its zero value is siw's
// defaults. Per ID, SetConfig overrides it; a listener's requests inherit
// the listener's. Revision 2 with the RFC 6581 block is sent by default;
// a responder answers revision 1 with revision 1, revision 2 without H
// without the block, and closes on any other revision. IRD/ORD follow
// RFC 6581 with siw's relaxed negotiation, within the policy's limits and
// the QP's own (IRDORDLimiter), so that neither the Request nor the Reply
// advertises more than the QP serves; P2P is echoed and the RTR chosen
// Write, then Read, then Send. With MPA.SMBD (off by default) a revision
// 1 connection negotiates IRD/ORD the same way from the [MS-SMBD] section
// 6.1 header, the first 8 bytes of the private data: sent by both sides,
// hidden from the handler's Event.PrivateData, its values in a
// ConnectRequest's Event.IRD/ORD, its result applied to the QP as an RFC
// 6581 result is (mpa.Params.SMBD set). Both sides must agree on it out of
// band, as SMB Direct does; a revision 1 Request without a valid header is
// answered with a Reply with R set (OnRefused "smbd_header"), a Reply
// without one with an LLP Terminate (StatusProtocolError). See
// mpa.Policy.SMBD for every rule. A responder's request limits: a Request
// whose PD_Length exceeds MPA.MaxPrivateData is dropped without a word, as
// siw does; toward siw, set MPA.MaxPrivateData to mpa.SiwMaxPrivateData.
// What this side sends is held to the same policy by mpa, before a byte
// goes out: Connect, Accept and Reject refuse IRD/ORD or private data over
// the limits (mpa.ErrIRDORDLimit, mpa.ErrPrivateDataLimit) with nothing
// sent and the ID as it was.
//
// # Bad input
//
// Every malformed, refused or stalled handshake gets the answer RFC
// 5044/6581 and siw give (a Reply with R set, an LLP Terminate, or a
// close; mpa sends it, see mpa.HandshakeError), is logged at Debug
// (responder) or reported in ConnectReply (initiator), and touches no
// other connection. One table classifies the failure for both sides: the
// initiator's ConnectReply Status (its Err is the cause: the
// *mpa.RejectedError of a reject, the *mpa.HandshakeError of any other
// failed handshake) and the reason the responder's Config.OnRefused gets.
// A responder's handshake has RequestTimeout in all, however slowly the
// bytes come; a listener runs at most MaxHandshakes of them at once, and
// holds at most its backlog of requests waiting for an answer (more are
// rejected). Config.Admit decides about each TCP connection at accept, by
// its source address, before a byte is read: close it, or run it as
// untrusted (a shorter deadline and a pool of handshake slots of its own,
// so that strangers never make an allowed client wait);
// MaxHandshakesPerSource bounds the handshakes of one address.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package cm
