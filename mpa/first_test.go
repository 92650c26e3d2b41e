package mpa_test

import (
	"bytes"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// TestReaderFirst: First shows the first byte of the current ULPDU only
// while it is buffered and no header byte has been taken, and consumes
// nothing (Header then returns the same bytes); it never reads from the
// source, and says no on a marked stream and on an empty ULPDU.
func TestReaderFirst(t *testing.T) {
	ul := []byte("\x41second-ulpdu-bytes")
	var stream []byte
	stream = mpa.AppendFPDU(stream, []byte("\x80first-ulpdu"), nil, false)
	stream = mpa.AppendFPDU(stream, nil, nil, false)
	stream = mpa.AppendFPDU(stream, ul, nil, false)

	rd := mpa.NewReader(bytes.NewReader(stream), nil, mpa.ReaderConfig{})
	if _, ok := rd.First(); ok {
		t.Fatal("First before Next: ok")
	}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if b, ok := rd.First(); !ok || b != 0x80 {
		t.Fatalf("First = %#x, %v; want 0x80, true", b, ok)
	}
	if b, ok := rd.First(); !ok || b != 0x80 {
		t.Fatalf("First again = %#x, %v; want 0x80, true (nothing consumed)", b, ok)
	}
	h, err := rd.Header(5)
	if err != nil || string(h) != "\x80firs" {
		t.Fatalf("Header(5) after First = %q, %v", h, err)
	}
	if _, ok := rd.First(); ok {
		t.Fatal("First after Header: ok")
	}
	if _, err := rd.Rest(); err != nil {
		t.Fatal(err)
	}
	if n, err := rd.Next(); err != nil || n != 0 {
		t.Fatalf("Next = %d, %v; want the empty ULPDU", n, err)
	}
	if _, ok := rd.First(); ok {
		t.Fatal("First on an empty ULPDU: ok")
	}
	if err := rd.Trailer(); err != nil {
		t.Fatal(err)
	}

	// Only the length field is in: First says no and reads nothing.
	src := &blockReader{data: append([]byte(nil), stream[len(stream)-mpa.FPDULen(len(ul)):][:mpa.LengthFieldLen]...)}
	rd = mpa.NewReader(src, nil, mpa.ReaderConfig{})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if _, ok := rd.First(); ok {
		t.Fatal("First with nothing of the ULPDU buffered: ok")
	}
	src.data = stream[len(stream)-mpa.FPDULen(len(ul))+mpa.LengthFieldLen:]
	if h, err := rd.Header(len(ul)); err != nil || !bytes.Equal(h, ul) {
		t.Fatalf("Header = %q, %v; want %q", h, err, ul)
	}

	// Markers: the next byte may be one; First says no.
	f := &mpa.Framer{Markers: true}
	marked := f.AppendFPDU(nil, ul, nil)
	rd = mpa.NewReader(bytes.NewReader(marked), nil, mpa.ReaderConfig{Markers: true})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if _, ok := rd.First(); ok {
		t.Fatal("First on a marked stream: ok")
	}
	if got, err := rd.Rest(); err != nil || !bytes.Equal(got, ul) {
		t.Fatalf("Rest = %q, %v; want %q", got, err, ul)
	}
}
