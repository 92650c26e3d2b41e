package cm

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/mpa"
)

// Defaults, as Linux siw and iw_cm have them.
const (
	// DefaultRequestTimeout is how long a responder waits for the MPA
	// Request after TCP accept (siw_cm.h MPAREP_TIMEOUT).
	DefaultRequestTimeout = 5 * time.Second
	// DefaultReplyTimeout is how long an initiator waits for the MPA
	// Reply (siw_cm.h MPAREQ_TIMEOUT).
	DefaultReplyTimeout = 10 * time.Second
	// DefaultBacklog is the backlog of a listen with backlog 0 (iw_cm's
	// net/iw_cm/default_backlog).
	DefaultBacklog = 256
	// DefaultMaxHandshakes bounds the inbound handshakes a listener runs
	// at once.
	DefaultMaxHandshakes = 1024
	// DefaultMaxUntrustedHandshakes bounds the inbound handshakes of
	// connections that Config.Admit marked Untrusted a listener runs at
	// once.
	DefaultMaxUntrustedHandshakes = 64
)

// Admission is what Config.Admit decides about an inbound TCP connection
// the moment it is accepted, before a byte of it is read. The zero value
// admits the connection as any other.
type Admission struct {
	// Close closes the connection at once: nothing is read or sent, no
	// ConnectRequest is made (OnRefused reason "admission").
	Close bool
	// Untrusted marks a connection from a source the ULP is expected to
	// refuse once it sees the Request (an address outside its access
	// rules, a client at its connection limit). Its handshake takes a
	// slot of a pool of its own (Config.MaxUntrustedHandshakes) instead
	// of one of MaxHandshakes, so that such connections, however many
	// and however slow, never make another connection wait; when that
	// pool is full the connection is closed at once (OnRefused reason
	// "busy"). A Request that comes in time still makes a ConnectRequest,
	// so the ULP can reject it with its reason.
	Untrusted bool
	// RequestTimeout, when positive, bounds this connection's wait for
	// its Request instead of Config.RequestTimeout (a short one for
	// untrusted sources).
	RequestTimeout time.Duration
}

// Config configures IDs. The zero value is valid and behaves as Linux siw
// with its built-in defaults: MPA revision 2 enhanced, CRC only when the
// peer asks, markers refused, no peer-to-peer mode as initiator (Write and
// Read RTRs accepted as responder), IRD/ORD at most 128, private data up
// to RFC 5044's 512 bytes, 5 s to receive a Request, 10 s to receive a
// Reply. A Config is copied when an ID takes it; changing it afterwards
// has no effect on that ID.
type Config struct {
	// MPA is the negotiation policy: revision, CRC, markers, P2P and RTR
	// types, IRD/ORD limits, the private-data limit (set
	// MPA.MaxPrivateData to mpa.SiwMaxPrivateData toward Linux siw), the
	// initiator's first-send delay, the Terminate layout, and MPA.SMBD:
	// IRD/ORD in revision 1 by the [MS-SMBD] section 6.1 header (off by
	// default; with Rev 1 for an initiator; for SMB Direct peers, Windows
	// over revision 1 RNICs such as the Chelsio T4; both sides must agree
	// on it out of band).
	// With MPA.SMBD, ConnParam.IRD/ORD go into the header,
	// Event.PrivateData and Conn.PrivateData never include it, Event.IRD
	// and ORD of a ConnectRequest are the header's, and mpa.Params.SMBD
	// says that it was used.
	MPA mpa.Policy
	// RequestTimeout bounds the time from TCP accept to a whole MPA
	// Request (a trickling peer does not extend it), and each write of a
	// Reply. 0 means DefaultRequestTimeout (5 s).
	RequestTimeout time.Duration
	// ReplyTimeout bounds the time from Connect to a whole MPA Reply, TCP
	// connection setup included. 0 means DefaultReplyTimeout (10 s).
	ReplyTimeout time.Duration
	// Backlog is the backlog of the net-style Listen. 0 means
	// DefaultBacklog (256).
	Backlog int
	// MaxHandshakes bounds the inbound handshakes (TCP accepted, Request
	// not yet complete) a listener runs at once; further connections wait
	// in the kernel's accept queue. 0 means DefaultMaxHandshakes (1024).
	MaxHandshakes int
	// MaxUntrustedHandshakes bounds the inbound handshakes of connections
	// marked Admission.Untrusted a listener runs at once; they never take
	// one of MaxHandshakes. 0 means DefaultMaxUntrustedHandshakes (64).
	MaxUntrustedHandshakes int
	// MaxHandshakesPerSource bounds the inbound handshakes in progress
	// (TCP accepted, Request not yet complete) from one source IP address
	// that take one of MaxHandshakes, so that one address cannot hold them
	// all. A connection over it runs as an untrusted one (a slot of
	// MaxUntrustedHandshakes, its own Request timeout), so a client that
	// opens many connections at once still gets them; when no untrusted
	// slot is free, or when the connection is untrusted already, it is
	// closed at once, nothing read (OnRefused reason "source_limit"). An
	// untrusted source also has at most this many untrusted handshakes.
	// 0 means no bound.
	MaxHandshakesPerSource int
	// KeepAlive configures TCP keepalive on the connections a listener
	// accepts (net.ListenConfig.KeepAliveConfig): the zero value keeps
	// Go's default, keepalive on (15 s idle, 15 s between probes, 9
	// probes), so that a peer that vanished is found; with Enable set, its
	// Idle, Interval and Count. NoKeepAlive turns keepalive off.
	KeepAlive   net.KeepAliveConfig
	NoKeepAlive bool
	// Admit, when set, is asked about every inbound TCP connection as
	// soon as it is accepted, before a byte is read, with the peer's
	// address (an IPv4-mapped address unmapped); see Admission. It runs
	// on the listener's accept goroutine, one call at a time, and must
	// return quickly: no I/O, no waiting.
	Admit func(remote netip.AddrPort) Admission
	// OnRefused, when set, is told about every inbound connection the
	// listener answered itself, without a ConnectRequest: a handshake that
	// failed (reason "timeout", "bad_key", "revision", "pd_length",
	// "truncated" (a FIN inside the Request), "enhanced_short",
	// "smbd_header" (MPA.SMBD: a revision 1 Request without a valid
	// [MS-SMBD] header), "extra_data", "markers", "crc", "closed" (a FIN
	// before its first byte, a reset, or the listener destroyed
	// meanwhile), or "protocol"; the same classification gives an
	// initiator its ConnectReply Status), a request over the backlog
	// ("backlog"), or a connection closed at accept ("admission",
	// "source_limit", "busy";
	// see Admit).
	// It runs on the listener's handshake goroutine and must not block.
	OnRefused func(remote net.Addr, reason string)
	// Logger receives lifecycle logs (Info: listen, established,
	// disconnect, close, refused requests; Debug: handshake details).
	// nil means zap.NewNop().
	Logger *zap.Logger
}

// Clone returns a copy of c (the Logger is shared).
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	d := *c
	return &d
}

// resolve returns a copy of c (nil means the zero Config) with defaults
// filled in, or an error for a field out of range.
func (c *Config) resolve() (Config, error) {
	var r Config
	if c != nil {
		r = *c
	}
	pol, err := r.MPA.Resolve()
	if err != nil {
		return r, fmt.Errorf("cm: config: %w", err)
	}
	r.MPA = pol
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
		n   string
	}{{&r.RequestTimeout, DefaultRequestTimeout, "RequestTimeout"}, {&r.ReplyTimeout, DefaultReplyTimeout, "ReplyTimeout"}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return r, fmt.Errorf("cm: config: negative %s %v", d.n, *d.v)
		}
	}
	for _, n := range []struct {
		v   *int
		def int // 0: none
		n   string
	}{{&r.Backlog, DefaultBacklog, "Backlog"}, {&r.MaxHandshakes, DefaultMaxHandshakes, "MaxHandshakes"},
		{&r.MaxUntrustedHandshakes, DefaultMaxUntrustedHandshakes, "MaxUntrustedHandshakes"},
		{&r.MaxHandshakesPerSource, 0, "MaxHandshakesPerSource"}} {
		if *n.v == 0 {
			*n.v = n.def
		}
		if *n.v < 0 {
			return r, fmt.Errorf("cm: config: negative %s %d", n.n, *n.v)
		}
	}
	if r.Logger == nil {
		r.Logger = zap.NewNop()
	}
	return r, nil
}
