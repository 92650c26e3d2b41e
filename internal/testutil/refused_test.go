package testutil

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
)

func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("a connection to %s was accepted", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	// The port stays taken: a listener cannot bind it.
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener took %s", addr)
	}
}

func TestForeignServer(t *testing.T) {
	banner := []byte("SSH-2.0-OpenSSH_9.2\r\n")
	for _, hangUp := range []bool{false, true} {
		addr := ForeignServer(t, banner, hangUp)
		for range 2 { // connections are served in turn
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("MPA ID Req Frame")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(banner))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, banner) {
				t.Fatalf("hangUp %v: read %q, %v; want %q", hangUp, got, err, banner)
			}
			if !hangUp {
				// The server reads to the end before it closes.
				if err := c.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			// Hanging up on unread bytes may reset the connection.
			if n, err := c.Read(got); n != 0 || err != io.EOF && !(hangUp && errors.Is(err, syscall.ECONNRESET)) {
				t.Fatalf("hangUp %v: after the banner: %d bytes, %v; want the end", hangUp, n, err)
			}
			c.Close()
		}
	}
}
