package rdmap_test

import (
	"bytes"
	"encoding"
	"errors"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
)

var (
	_ encoding.BinaryAppender    = rdmap.BufferDesc{}
	_ encoding.BinaryMarshaler   = rdmap.BufferDesc{}
	_ encoding.BinaryUnmarshaler = (*rdmap.BufferDesc)(nil)
)

func TestBufferDescWire(t *testing.T) {
	d := rdmap.BufferDesc{STag: 0x12345601, Offset: 0x0102030405060708, Len: 4096}
	b, err := d.AppendBinary([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{'x', 0x12, 0x34, 0x56, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x10, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("AppendBinary = %x, want %x", b, want)
	}
	got, rest, err := rdmap.ParseBufferDesc(append(b[1:], "tail"...))
	if err != nil || got != d || string(rest) != "tail" {
		t.Fatalf("ParseBufferDesc = %v, %q, %v", got, rest, err)
	}
	var u rdmap.BufferDesc
	if err := u.UnmarshalBinary(b[1:]); err != nil || u != d {
		t.Fatalf("UnmarshalBinary = %v, %v", u, err)
	}
	if err := u.UnmarshalBinary(b); !errors.Is(err, rdmap.ErrBufferDesc) {
		t.Errorf("UnmarshalBinary of 17 bytes: %v", err)
	}
	if _, _, err := rdmap.ParseBufferDesc(b[1:16]); !errors.Is(err, rdmap.ErrBufferDesc) {
		t.Errorf("15 bytes: %v", err)
	}
	wrap := rdmap.BufferDesc{STag: 1, Offset: ^uint64(0), Len: 2}
	wb, _ := wrap.AppendBinary(nil)
	if _, _, err := rdmap.ParseBufferDesc(wb); !errors.Is(err, rdmap.ErrBufferDesc) {
		t.Errorf("wrapping offset: %v", err)
	}
	if r := d.Remote(); r.STag != d.STag || r.Offset != d.Offset {
		t.Errorf("Remote = %+v", r)
	}
	if s := d.String(); s != "stag 0x12345601 offset 72623859790382856 len 4096" {
		t.Errorf("String = %q", s)
	}
}

func FuzzParseBufferDesc(f *testing.F) {
	for _, d := range []rdmap.BufferDesc{{}, {STag: 0x12345601, Offset: 0, Len: 4096}, {STag: 0xffffffff, Offset: 1 << 40, Len: 1 << 31}} {
		b, _ := d.AppendBinary(nil)
		f.Add(b)
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, rest, err := rdmap.ParseBufferDesc(data)
		if err != nil {
			if !errors.Is(err, rdmap.ErrBufferDesc) {
				t.Fatalf("error %v is not ErrBufferDesc", err)
			}
			return
		}
		if len(rest) != len(data)-rdmap.BufferDescLen || d.Offset+uint64(d.Len) < d.Offset {
			t.Fatalf("%v, %d bytes left of %d", d, len(rest), len(data))
		}
		b, _ := d.AppendBinary(nil)
		if !bytes.Equal(b, data[:rdmap.BufferDescLen]) {
			t.Fatalf("round trip %x -> %v -> %x", data[:rdmap.BufferDescLen], d, b)
		}
	})
}
