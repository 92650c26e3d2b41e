package cm

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// TestAdmission checks the accept-time hook: a connection Admit closes is
// closed unread; untrusted connections take slots of their own pool (the
// one over it is closed) and never a slot of MaxHandshakes, so a trusted
// client's handshake runs while they stall; the per-source bound closes an
// untrusted connection over it and moves a trusted one to the untrusted
// pool (closed when that is full); a Request that comes in time on an
// untrusted or moved connection still reaches the ULP; each closure is
// reported with its reason.
func TestAdmission(t *testing.T) {
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	got := make(chan string, 16)
	untrusted := netip.MustParsePrefix("127.0.3.0/24")
	cfg := &Config{
		MaxHandshakes: 2, MaxUntrustedHandshakes: 2, MaxHandshakesPerSource: 1, RequestTimeout: time.Hour,
		Admit: func(remote netip.AddrPort) Admission {
			switch {
			case remote.Addr() == netip.MustParseAddr("127.0.4.1"):
				return Admission{Close: true}
			case untrusted.Contains(remote.Addr()):
				return Admission{Untrusted: true}
			}
			return Admission{}
		},
		OnRefused: func(_ net.Addr, reason string) { got <- reason },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := Listen(ctx, "127.0.0.1:0", dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	expect := func(want string) {
		t.Helper()
		select {
		case r := <-got:
			if r != want {
				t.Fatalf("OnRefused %q, want %q", r, want)
			}
		case <-ctx.Done():
			t.Fatalf("no OnRefused %q", want)
		}
	}
	closedUnread := func(c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
		}
	}

	// handshake sends a Request on c; the ULP rejects it with reason.
	handshake := func(c net.Conn, reason string) {
		t.Helper()
		res := make(chan error, 1)
		go func() {
			_, err := (&mpa.Initiator{IRD: 1, ORD: 1}).Handshake(ctx, c)
			res <- err
		}()
		req, err := ln.Accept(ctx)
		if err != nil {
			t.Fatalf("no ConnectRequest: %v", err)
		}
		if err := req.Reject([]byte(reason)); err != nil {
			t.Fatal(err)
		}
		var rej *mpa.RejectedError
		if err := <-res; !errors.As(err, &rej) || string(rej.Reply.PrivateData) != reason {
			t.Fatalf("handshake: %v, want the reject %q", err, reason)
		}
	}

	closedUnread(dial("127.0.4.1"))
	expect("admission")
	// Two untrusted handshakes stall in their pool; a second one from the
	// same source is over the per-source bound, and one from a third
	// source finds the pool full.
	u1 := dial("127.0.3.1")
	dial("127.0.3.2")
	closedUnread(dial("127.0.3.1"))
	expect("source_limit")
	closedUnread(dial("127.0.3.3"))
	expect("busy")
	// They hold no slot of MaxHandshakes: a trusted client's handshake
	// runs at once, twice over (its slots come back).
	handshake(dial("127.0.0.1"), "trusted 1")
	handshake(dial("127.0.0.1"), "trusted 2")
	// A stalled untrusted peer that sends its Request in time is heard,
	// and gives its slot back.
	handshake(u1, "untrusted")
	// A trusted source at its bound: its next connection moves to the
	// untrusted pool (now full again), the one after is closed.
	dial("127.0.6.1")
	moved := dial("127.0.6.1")
	closedUnread(dial("127.0.6.1"))
	expect("source_limit")
	// Another trusted client still has a slot of MaxHandshakes, and the
	// moved connection is heard.
	handshake(dial("127.0.0.1"), "trusted 3")
	handshake(moved, "moved")
	select {
	case r := <-got:
		t.Fatalf("unexpected OnRefused %q", r)
	default:
	}
}

// TestHandshakeDoneBeforeRequest checks when a handshake stops counting
// against the listener's bounds (MaxHandshakes, MaxHandshakesPerSource):
// before its ConnectRequest is queued, so a ULP that has seen the request
// (and rejected it, say) and connects again from the same source finds the
// slot free. Given back after the request instead, the next connection
// could find the source still at its bound and be moved or closed.
func TestHandshakeDoneBeforeRequest(t *testing.T) {
	req, err := os.ReadFile(filepath.Join("testdata", "siw-mpa-request.bin"))
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	cfg, err := (&Config{}).resolve()
	if err != nil {
		t.Fatal(err)
	}
	delivered := make(chan *Event, 1)
	id := NewID(dev, func(_ *ID, ev *Event) error {
		delivered <- ev
		return nil
	})
	defer id.Destroy()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // only for Destroy to close
	if err != nil {
		t.Fatal(err)
	}
	id.mu.Lock()
	id.state, id.backlog, id.ln, id.lnCancel = StateListen, 1, ln, func() {}
	id.mu.Unlock()
	local, peer := net.Pipe()
	defer peer.Close()
	go func() { _, _ = peer.Write(req) }()
	calls, queuedAtDone := 0, -1
	id.serveConn(context.Background(), local, &cfg, zap.NewNop(), cfg.RequestTimeout, func() {
		calls++
		queuedAtDone = len(id.queue) // serveConn holds id.mu
	})
	if calls != 1 {
		t.Fatalf("done called %d times, want once", calls)
	}
	if queuedAtDone != 0 {
		t.Errorf("done called with %d requests queued, want 0: it must come before the ConnectRequest", queuedAtDone)
	}
	ev := <-delivered
	if ev.Type != EventConnectRequest {
		t.Fatalf("event %v, want a ConnectRequest", ev.Type)
	}
	go func() { _, _ = io.Copy(io.Discard, peer) }()
	if err := ev.child.Reject(nil); err != nil {
		t.Fatal(err)
	}
}
