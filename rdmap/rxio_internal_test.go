package rdmap

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosiw/gosiw/mpa"
)

// TestReadVecDeadlineNoStaleCount: a ReadVec interrupted by a deadline
// before its readv runs (a fence's poke, or the stall timer firing) must
// not report the previous readv's byte count as bytes read: it re-arms,
// retries, and returns what the peer sent.
func TestReadVecDeadlineNoStaleCount(t *testing.T) {
	peer, conn := tcpPair(t)

	mem := make([]byte, 64)
	qp, _, mr := engineQP(t, 4, QPConfig{}, mem)
	qp.p = mpa.Params{}
	rx := &qp.rx
	rx.init(qp, conn)
	defer rx.release()
	if rx.rawConn == nil {
		t.Fatal("a TCP connection without a raw conn")
	}
	rx.place.mr, rx.place.want = mr, mr.st.Load()
	defer func() { rx.place.mr = nil }()
	c := rxConn{rx}

	if _, err := peer.Write(bytes.Repeat([]byte{1}, 10)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ReadVec(mem[:10], nil); n != 10 || err != nil {
		t.Fatalf("first ReadVec = %d, %v", n, err)
	}
	// The deadline fires: the next readv is not even tried at first.
	if err := conn.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	want := []byte("abcdef")
	if _, err := peer.Write(want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, len(want))
	for len(got) < len(want) {
		dst := mem[:len(want)-len(got)]
		clear(dst)
		n, err := c.ReadVec(dst, nil)
		if err != nil {
			t.Fatalf("ReadVec after the deadline: %v", err)
		}
		if n > len(dst) {
			t.Fatalf("ReadVec returned %d bytes into %d", n, len(dst))
		}
		got = append(got, dst[:n]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ReadVec after the deadline read %q, want %q (a stale count)", got, want)
	}
}
