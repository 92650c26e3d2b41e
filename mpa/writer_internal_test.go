package mpa

import (
	"io"
	"testing"
)

// TestWriterIdleHoldsNothing: a Writer configured without Scratch
// borrows its scratch arena and (without CRC) its iovec array when a
// batch gets its first FPDU, and holds neither once the batch is
// flushed or reset; a Writer given Scratch keeps using it.
func TestWriterIdleHoldsNothing(t *testing.T) {
	for _, crc := range []bool{false, true} {
		var w Writer
		w.Init(WriterConfig{CRC: crc})
		idle := func(when string) {
			t.Helper()
			if w.scratch != nil || w.scratchp != nil || w.iov != nil || w.iovp != nil || w.buf != nil {
				t.Fatalf("crc %v, %s: the Writer holds scratch %v, iovecs %v, batch buffer %v", crc, when, w.scratchp != nil, w.iovp != nil, w.buf != nil)
			}
		}
		idle("after Init")
		if !w.Room(100, 1) {
			t.Fatal("no room in an empty batch")
		}
		idle("after Room")
		w.Begin(make([]byte, 18), 100)
		if w.scratchp == nil || (!crc && w.iovp == nil) {
			t.Fatalf("crc %v: Begin borrowed scratch %v, iovecs %v", crc, w.scratchp != nil, w.iovp != nil)
		}
		w.Payload(make([]byte, 82))
		w.End()
		if _, err := w.Flush(io.Discard); err != nil {
			t.Fatal(err)
		}
		idle("after Flush")
		w.Begin(make([]byte, 18), 18)
		w.End()
		w.Reset()
		idle("after Reset")
	}
	own := make([]byte, 0, WriterScratchLen)
	var w Writer
	w.Init(WriterConfig{Scratch: own})
	w.Begin(make([]byte, 18), 18)
	w.End()
	if w.scratchp != nil || &w.scratch[:1][0] != &own[:1][0] {
		t.Fatal("a Writer given Scratch borrowed another")
	}
	w.Reset()
	if w.scratch == nil {
		t.Fatal("Reset dropped the caller's Scratch")
	}
}
