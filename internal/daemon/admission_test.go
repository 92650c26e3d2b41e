package daemon

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/rping"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// waitCounter polls a counter until it reads want (ctx bounds the wait; no
// timing is asserted).
func waitCounter(ctx context.Context, t *testing.T, m *Metrics, series, want string) {
	t.Helper()
	for testCounter(t, m, series) != want {
		select {
		case <-ctx.Done():
			t.Fatalf("%s = %q, want %s", series, testCounter(t, m, series), want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestAdmissionBeforeWork: stalled connections from sources outside the
// access rules never make an allowed client wait. Four stranger addresses
// open ten connections each and send nothing, more than the listener's
// handshake slots; their Request deadline outlasts the test. An allowed
// client then completes its handshake and a ping while every stranger is
// still stalled (none has timed out), the per-address cap closed the
// strangers' extra connections at accept, and a stranger that does send a
// Request still gets the reject with its reason.
func TestAdmissionBeforeWork(t *testing.T) {
	s, m, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second,
		Allow:         []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		MaxHandshakes: 4, MaxHandshakesPerClient: 8, RefusedRequestTimeout: time.Hour})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := s.Addr().String()

	const sources, perSource = 4, 10
	var strangers []net.Conn
	defer func() {
		for _, c := range strangers {
			c.Close()
		}
	}()
	for i := range sources {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i))}}
		for range perSource {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			strangers = append(strangers, c)
		}
	}
	// Every stranger has been accepted and classed; the ones over the
	// per-address cap were closed at once.
	waitCounter(ctx, t, m, `siwd_admissions_total{class="refused"}`, strconv.Itoa(sources*perSource))
	waitCounter(ctx, t, m, `siwd_handshakes_total{reason="source_limit",result="failed"}`, strconv.Itoa(sources*(perSource-8)))

	// The allowed client gets in and pings.
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	e, err := rping.NewEndpoint(dev.AllocPD(), 64, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Arm()
	conn, err := cm.Dial(ctx, addr, dev, cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatalf("allowed client behind %d stalled strangers: %v", len(strangers), err)
	}
	if res, err := e.Client(ctx, 3, true, nil); err != nil || res.Pings != 3 {
		t.Fatalf("pings %v: %v", res, err)
	}
	conn.Close()
	// ...while the strangers are all still stalled.
	if v := testCounter(t, m, `siwd_handshakes_total{reason="timeout",result="failed"}`); v != "" {
		t.Fatalf("%s stranger handshakes timed out before the allowed client was done", v)
	}

	// A stranger that sends its Request in time gets the reason.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, 1)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = (&mpa.Initiator{Policy: &mpa.Policy{}, IRD: 1, ORD: 1}).Handshake(ctx, c)
	var rej *mpa.RejectedError
	if !errors.As(err, &rej) || !strings.Contains(string(rej.Reply.PrivateData), "127.0.2.1 is not allowed") {
		t.Fatalf("stranger's Request: %v, want a reject naming the access rules", err)
	}
}
