package testutil

import (
	"io"
	"net"
	"testing"
)

// ForeignServer starts a TCP server on 127.0.0.1 that speaks another
// protocol: it answers every connection with banner at once. With hangUp
// it then closes the connection (a server that hangs up); otherwise it
// keeps it open, reading and discarding what the peer sends, until the
// peer closes (a server waiting for its peer's turn, as SSH does). It
// returns the server's address. Connections are served one at a time, in
// order. tb.Cleanup closes the listener and waits for the server to stop,
// so the test's own connections must be closed by then.
func ForeignServer(tb testing.TB, banner []byte, hangUp bool) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testutil: listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write(banner)
			if !hangUp {
				_, _ = io.Copy(io.Discard, c)
			}
			c.Close()
		}
	}()
	tb.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}
