//go:build unix

package sys

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// socketPair returns the two ends of a connected Unix stream socket pair,
// closed by t.Cleanup.
func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fds[0]); _ = unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// TestReadv: Readv fills the buffers in order, skipping empty ones, and
// readFirst (Readv where x/sys has no readv) reads into the first
// non-empty buffer only.
func TestReadv(t *testing.T) {
	a, b := socketPair(t)
	msg := []byte("0123456789abcdefghij")
	if _, err := unix.Write(b, msg); err != nil {
		t.Fatal(err)
	}
	first, second := make([]byte, 4), make([]byte, 6)
	n, err := readFirst(uintptr(a), [][]byte{nil, first, second})
	if err != nil || n != len(first) {
		t.Fatalf("readFirst = %d, %v; want %d, nil", n, err, len(first))
	}
	if !bytes.Equal(first, msg[:4]) || !bytes.Equal(second, make([]byte, 6)) {
		t.Fatalf("readFirst filled %q %q, want %q and nothing", first, second, msg[:4])
	}
	if n, err := readFirst(uintptr(a), [][]byte{nil, {}}); n != 0 || err != nil {
		t.Fatalf("readFirst into empty buffers = %d, %v; want 0, nil", n, err)
	}
	// The 16 bytes left are all buffered: one readv(2) takes them across
	// both non-empty buffers (the system without readv takes 4).
	third := make([]byte, 12)
	n, err = Readv(uintptr(a), [][]byte{first, {}, third})
	if err != nil {
		t.Fatal(err)
	}
	got := append(append([]byte(nil), first...), third...)[:n]
	if !bytes.Equal(got, msg[4:4+n]) || n < len(first) {
		t.Fatalf("Readv = %d bytes %q, want a prefix of %q of at least %d", n, got, msg[4:], len(first))
	}
}
