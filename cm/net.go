package cm

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// The net-style API: Listen/Accept/Dial on top of IDs, for programs that
// would rather block than handle events.

// Listener is a listening ID whose requests are taken with Accept. It is
// safe for concurrent use.
type Listener struct {
	id      *ID
	reqs    chan *Request
	done    chan struct{}
	closing sync.Once
}

// Listen listens on the TCP address addr with cfg (nil means the zero
// Config; cfg.Backlog bounds the requests not yet answered). ctx bounds
// setting up the socket only.
func Listen(ctx context.Context, addr string, dev *rdmap.Device, cfg *Config) (*Listener, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	l := &Listener{reqs: make(chan *Request, c.Backlog), done: make(chan struct{})}
	l.id = NewID(dev, l.handle)
	if err := l.id.SetConfig(cfg); err != nil {
		return nil, err
	}
	if err := l.id.listen(ctx, addr, c.Backlog); err != nil {
		l.id.Destroy()
		return nil, err
	}
	return l, nil
}

// handle is the listener's handler, and its accepted connections'.
func (l *Listener) handle(id *ID, ev *Event) error {
	if ev.Type == EventConnectRequest {
		r := &Request{
			id:          id,
			PrivateData: ev.PrivateData,
			IRD:         ev.IRD,
			ORD:         ev.ORD,
			Peer:        *ev.Peer,
			LocalAddr:   ev.LocalAddr,
			RemoteAddr:  ev.RemoteAddr,
		}
		// The channel holds Backlog requests and the ID never has more
		// than Backlog requests unanswered, so this does not block.
		select {
		case l.reqs <- r:
			return nil
		default:
			return errBacklogFull
		}
	}
	if c, ok := id.Context().(*Conn); ok {
		c.handle(ev)
	}
	return nil
}

var errBacklogFull = &StateError{Op: "listen", State: StateListen, Reason: "backlog full"}

// Accept waits for the next request. It returns net.ErrClosed after Close.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.id.LocalAddr() }

// ID returns the listening ID.
func (l *Listener) ID() *ID { return l.id }

// Close stops listening and rejects the requests not yet taken. The
// connections already accepted stay. Close is idempotent.
func (l *Listener) Close() error {
	l.closing.Do(func() {
		close(l.done)
		l.id.Destroy()
		for {
			select {
			case r := <-l.reqs:
				r.id.Destroy()
			default:
				return
			}
		}
	})
	return nil
}

// Request is a connection request taken from a Listener. Answer it with
// Accept or Reject.
type Request struct {
	id *ID
	// PrivateData is the initiator's ULP private data.
	PrivateData []byte
	// IRD and ORD are what the initiator asked for.
	IRD, ORD int
	// Peer is the MPA Request as received.
	Peer mpa.Frame
	// LocalAddr and RemoteAddr are the connection's TCP addresses.
	LocalAddr, RemoteAddr net.Addr
}

// ID returns the request's ID (in StateConnRecv until answered).
func (r *Request) ID() *ID { return r.id }

// Accept accepts the request with p and returns the connection. On error
// the request is gone (rejected if nothing was sent yet).
func (r *Request) Accept(p ConnParam) (*Conn, error) {
	c := &Conn{id: r.id, qp: p.QP, done: make(chan struct{}), PrivateData: r.PrivateData,
		LocalAddr: r.LocalAddr, RemoteAddr: r.RemoteAddr}
	r.id.SetContext(c)
	if err := r.id.Accept(p); err != nil {
		r.id.Destroy()
		return nil, err
	}
	c.Params = *r.id.Params()
	return c, nil
}

// Reject refuses the request with privateData (see ID.Reject) and
// releases it.
func (r *Request) Reject(privateData []byte) error {
	err := r.id.Reject(privateData)
	r.id.Destroy()
	return err
}

// Conn is an established connection: its QP moves the data; Conn tells
// when it ends. It is safe for concurrent use.
type Conn struct {
	id *ID
	qp QP
	// Params is what the handshake settled.
	Params mpa.Params
	// PrivateData is the peer's private data (from its Request or Reply).
	PrivateData []byte
	// LocalAddr and RemoteAddr are the TCP addresses.
	LocalAddr, RemoteAddr net.Addr

	done    chan struct{}
	err     error
	closing sync.Once
	ended   sync.Once

	mu        sync.Mutex
	isDone    bool     // done is closed; +checklocks:mu
	afterDone []func() // AfterDone's functions, until then; +checklocks:mu
}

func (c *Conn) handle(ev *Event) {
	if ev.Type == EventClose {
		c.ended.Do(func() {
			c.err = ev.Err
			close(c.done)
			c.mu.Lock()
			c.isDone = true
			fns := c.afterDone
			c.afterDone = nil
			c.mu.Unlock()
			for _, f := range fns {
				go f()
			}
		})
	}
}

// AfterDone arranges for f to run in its own goroutine once Done is
// closed, or at once (in its own goroutine too) if it already is: as
// context.AfterFunc does, without a goroutine parked on Done meanwhile
// (a server's idle connection then costs no waiting stack). Each call
// runs its f exactly once.
func (c *Conn) AfterDone(f func()) {
	c.mu.Lock()
	if c.isDone {
		c.mu.Unlock()
		go f()
		return
	}
	c.afterDone = append(c.afterDone, f)
	c.mu.Unlock()
}

// ID returns the connection's ID.
func (c *Conn) ID() *ID { return c.id }

// QP returns the QP bound to the connection.
func (c *Conn) QP() QP { return c.qp }

// Done is closed when the connection has ended (Close event).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended, once Done is closed (nil for a
// graceful close).
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close disconnects gracefully, waits for the connection to end, and
// releases the ID. It is idempotent.
func (c *Conn) Close() error { return c.end(false) }

// Abort disconnects abruptly (RST), waits for the connection to end, and
// releases the ID.
func (c *Conn) Abort() error { return c.end(true) }

func (c *Conn) end(abrupt bool) error {
	c.closing.Do(func() {
		if err := c.id.Disconnect(abrupt); err == nil {
			<-c.done
		}
		c.id.Destroy()
	})
	return nil
}

// Dialer connects with a Config. The zero Dialer uses the zero Config.
type Dialer struct {
	// Config configures the connection's ID; nil means the zero Config.
	Config *Config
}

// Dial connects to addr with the zero Config (see Dialer.Dial).
func Dial(ctx context.Context, addr string, dev *rdmap.Device, p ConnParam) (*Conn, error) {
	return (&Dialer{}).Dial(ctx, addr, dev, p)
}

// Dial connects to the TCP address addr, runs the MPA handshake and
// starts p.QP on the connection. ctx bounds the whole setup (as does the
// Config's ReplyTimeout). A reject comes back as the *mpa.RejectedError
// of the handshake (the peer's private data in Reply.PrivateData); other
// failures as a *ConnectError.
func (d *Dialer) Dial(ctx context.Context, addr string, dev *rdmap.Device, p ConnParam) (*Conn, error) {
	c := &Conn{qp: p.QP, done: make(chan struct{})}
	reply := make(chan *Event, 1)
	id := NewID(dev, func(id *ID, ev *Event) error {
		switch ev.Type {
		case EventConnectReply:
			reply <- ev
		case EventClose:
			c.handle(ev)
		}
		return nil
	})
	c.id = id
	if err := id.SetConfig(d.Config); err != nil {
		return nil, err
	}
	if err := id.connect(ctx, addr, p); err != nil {
		id.Destroy()
		return nil, err
	}
	select {
	case ev := <-reply:
		if ev.Status != StatusOK {
			id.Destroy()
			var rej *mpa.RejectedError
			if errors.As(ev.Err, &rej) {
				return nil, rej
			}
			return nil, &ConnectError{Status: ev.Status, Err: ev.Err}
		}
		c.Params, c.PrivateData = *ev.Params, ev.PrivateData
		c.LocalAddr, c.RemoteAddr = ev.LocalAddr, ev.RemoteAddr
		return c, nil
	case <-ctx.Done():
		id.Destroy()
		st := StatusReset
		if ctx.Err() == context.DeadlineExceeded {
			st = StatusTimeout
		}
		return nil, &ConnectError{Status: st, Err: ctx.Err()}
	}
}
