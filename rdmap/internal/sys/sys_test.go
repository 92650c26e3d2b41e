//go:build linux

package sys

import (
	"net"
	"testing"
)

func TestTCPMaxSeg(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- nil
			return
		}
		done <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := <-done; s != nil {
		defer s.Close()
	}
	mss, err := TCPMaxSeg(c.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	if mss < 500 || mss > 65535 {
		t.Fatalf("TCP_MAXSEG %d out of range", mss)
	}
}

func TestMapGuarded(t *testing.T) {
	for _, n := range []int{1, 7, 8, 4095, 4096, 4097, 1 << 20} {
		m, err := MapGuarded(n, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Data) != n || cap(m.Data) != n {
			t.Fatalf("n=%d: len %d cap %d", n, len(m.Data), cap(m.Data))
		}
		for i := range m.Data {
			if m.Data[i] != 0 {
				t.Fatalf("n=%d: byte %d not zero", n, i)
			}
			m.Data[i] = byte(i)
		}
		if err := m.Unmap(); err != nil {
			t.Fatal(err)
		}
		if err := m.Unmap(); err != nil {
			t.Fatal("second Unmap:", err)
		}
	}
}
