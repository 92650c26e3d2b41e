package mpa

import "time"

// RTR is the ready-to-receive message chosen in peer-to-peer mode
// (RFC 6581 §3): the zero-length message the initiator sends first.
type RTR uint8

const (
	RTRNone  RTR = iota // no RTR negotiated
	RTRWrite            // zero-length RDMA Write (siw: to STag 1, TO 0)
	RTRRead             // zero-length RDMA Read (siw: sink STag 0, source STag 1)
	RTRSend             // zero-length Send
)

func (r RTR) String() string {
	switch r {
	case RTRNone:
		return "none"
	case RTRWrite:
		return "write"
	case RTRRead:
		return "read"
	case RTRSend:
		return "send"
	}
	return "unknown"
}

// Params is what an MPA handshake settled for one connection. The
// connection manager fills it and hands it, with the TCP connection, to
// the QP that takes the stream over.
type Params struct {
	// Initiator: this side sent the MPA Request. RFC 5044 has the
	// initiator send the first FPDU; a responder sends nothing until it
	// has received one (Linux siw drops a connection that gets bytes
	// right after its Request's Reply).
	Initiator bool
	Rev       uint8
	Enhanced  bool // RFC 6581 enhanced connection setup in use
	// SMBD: IRD and ORD were negotiated with the [MS-SMBD] IRD/ORD
	// Negotiate Header in revision 1 (Policy.SMBD).
	SMBD bool
	// CRC is in use in both directions.
	CRC bool
	// MarkersTx: this side inserts markers (the peer asked for them);
	// MarkersRx: the peer inserts markers (this side asked). Marker
	// positions count from the first FPDU byte of each direction.
	MarkersTx, MarkersRx bool
	// IRD is how many incoming RDMA Read Requests this side serves at
	// once; ORD how many it may have outstanding toward the peer.
	IRD, ORD int
	// P2P mode and the RTR the initiator sends first.
	P2P bool
	RTR RTR
	// FirstSendDelay holds the initiator's first FPDU this long after the
	// Reply (Linux siw 6.1 may lose an FPDU that arrives within about a
	// millisecond of its Reply).
	FirstSendDelay time.Duration
	// TerminateLayoutSiw: write Terminate control words in Linux siw's
	// byte order.
	TerminateLayoutSiw bool
	// Leftover holds bytes the handshake read past its frame: the start of
	// the peer's FPDU stream. The QP consumes them before reading the
	// connection.
	Leftover []byte
}
