package cm

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// TestOnRefused checks that inbound connections the listener answers
// itself are reported with their reason.
func TestOnRefused(t *testing.T) {
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	got := make(chan string, 8)
	cfg := &Config{RequestTimeout: 300 * time.Millisecond, OnRefused: func(_ net.Addr, reason string) { got <- reason }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen(ctx, "127.0.0.1:0", dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	send := func(b []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(b)
		if b != nil {
			c.(*net.TCPConn).CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var buf [64]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
		}
	}
	req := func(rev uint8, markers bool) []byte {
		b, _ := mpa.AppendFrame(nil, &mpa.Frame{Rev: rev, Markers: markers})
		return b
	}
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{[]byte("GET / HTTP/1.0\r\nHost: x\r\n\r\n"), "bad_key"},
		{req(3, false), "revision"},
		{req(1, true), "markers"},
		{req(2, false)[:10], "truncated"},
		{nil, "timeout"},
	} {
		send(c.in)
		select {
		case r := <-got:
			if r != c.want {
				t.Errorf("input %q: reason %q, want %q", c.in, r, c.want)
			}
		case <-ctx.Done():
			t.Fatalf("input %q: no OnRefused call", c.in)
		}
	}
}
