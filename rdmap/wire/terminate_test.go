package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestTerminateSiwControlWords checks the control words Linux siw 6.1 sent
// in the Linux siw interop lab (test/interop). siw builds the word from little-endian C
// bitfields: byte 0 is EType<<4 | Layer, M/D/R are bits 0/1/2 of byte 2.
func TestTerminateSiwControlWords(t *testing.T) {
	tests := []struct {
		name   string
		word   string
		layout wire.Layout
		layer  wire.Layer
		etype  uint8
		code   uint8
		m, d   bool
		str    string
	}{
		// Unambiguous: siw's flag bits are set and the RFC ones clear.
		{"siw DDP/tagged/invalid STag, M D", "11000300", wire.LayoutSiw, wire.LayerDDP, 1, 0, true, true, "DDP/tagged buffer: invalid STag"},
		// Unambiguous twice over: the RFC reading (layer 2, type 1) is no
		// valid pair either.
		{"siw DDP/untagged/invalid QN, M D", "21010300", wire.LayoutSiw, wire.LayerDDP, 2, 1, true, true, "DDP/untagged buffer: invalid QN"},
		// An RFC-correct RDMAP/remote operation/unexpected opcode. siw reads
		// it as LLP(2)/MPA(0)/6; that reading is valid too, and 06 is a
		// defined code both ways, so it is ambiguous and taken as RFC.
		{"RFC RDMAP/remote op/unexpected opcode", "02060000", wire.LayoutRFC, wire.LayerRDMAP, 2, 6, false, false, "RDMAP/remote operation: unexpected opcode"},
		// siw's MPA CRC error carries no headers. Both pairs are valid,
		// but RDMAP/remote operation has no code 02: siw's.
		{"siw LLP/MPA/CRC error", "02020000", wire.LayoutSiw, wire.LayerLLP, 0, 2, false, false, "LLP/MPA: MPA CRC error"},
		{"siw LLP/MPA/marker mismatch", "02030000", wire.LayoutSiw, wire.LayerLLP, 0, 3, false, false, "LLP/MPA: MPA marker and ULPDU length mismatch"},
		// siw's answer to an unknown RDMAP opcode, without headers: valid
		// both ways with a defined code both ways. Read the RFC way it is
		// LLP/MPA/insufficient IRD; this is the known misreading.
		{"ambiguous: siw RDMAP/remote op/unexpected opcode", "20060000", wire.LayoutRFC, wire.LayerLLP, 0, 6, false, false, "LLP/MPA: insufficient IRD resources"},
		// RFC words with their own flags are never taken as siw's.
		// No flags and the same reading both ways.
		{"DDP/tagged/base bounds, no flags", "11010000", wire.LayoutRFC, wire.LayerDDP, 1, 1, false, false, "DDP/tagged buffer: base or bounds violation"},
		{"RFC DDP/untagged/invalid MO, M D", "1204c000", wire.LayoutRFC, wire.LayerDDP, 2, 4, true, true, "DDP/untagged buffer: invalid MO"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := wHex(t, tc.word)
			if got := wire.DetectLayout(w); got != tc.layout {
				t.Fatalf("DetectLayout(%s) = %v, want %v", tc.word, got, tc.layout)
			}
			// Build a body around the word so that M/D parse.
			body := bytes.Clone(w)
			var term wire.Terminate
			if tc.m || tc.d {
				body = append(body, 0, 0)
				if tc.etype == 1 {
					body = ddp.AppendTagged(body, &ddp.TaggedFields{Last: true, RsvdULP: 0x40, STag: 0xdead})
				} else {
					body = ddp.AppendUntagged(body, &ddp.UntaggedFields{Last: true, RsvdULP: 0x43, QN: 5, MSN: 1})
				}
			}
			if err := wire.ParseTerminate(body, &term); err != nil {
				t.Fatal(err)
			}
			if term.Layout != tc.layout || term.Layer != tc.layer || term.EType != tc.etype || term.Code != tc.code ||
				term.M != tc.m || term.D != tc.d || term.R || term.Reserved != 0 {
				t.Errorf("parsed %+v", term)
			}
			if term.String() != tc.str {
				t.Errorf("String() = %q, want %q", term.String(), tc.str)
			}
			// Written back in the layout it was read in: the same bytes.
			if out := wire.AppendTerminate(nil, &term); !bytes.Equal(out, body) {
				t.Errorf("AppendTerminate = %x, want %x", out, body)
			}
		})
	}
	// A receiver that knows the peer is siw reads the ambiguous word right.
	var term wire.Terminate
	if err := wire.ParseTerminateLayout(wHex(t, "20060000"), wire.LayoutSiw, &term); err != nil ||
		term.String() != "RDMAP/remote operation: unexpected opcode" || term.Layout != wire.LayoutSiw {
		t.Errorf("ParseTerminateLayout(siw) = %+v %v", term, err)
	}
}

// A whole Terminate the way siw sends one for an RDMA Write to an unknown
// STag (observed in the interop lab: DDP control 0x41, RDMAP 0x47, QN 2, MSN 1, MO 0;
// control word 11 00 03 00; DDP Segment Length = the payload length; the
// offending tagged header). Assembled from those facts, not a capture.
func TestTerminateSiwMessage(t *testing.T) {
	ulpdu := wHex(t, "4147"+"00000000"+"00000002"+"00000001"+"00000000"+ // untagged DDP, QN 2, MSN 1
		"11000300"+"0040"+ // DDP/tagged/invalid STag, M D; 64 payload bytes
		"c140"+"00abcd01"+"0000000000001000") // the Write's header
	h, err := ddp.Parse(ulpdu)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, op := wire.Control(h.RsvdULP()); op != wire.OpTerminate || h.QN() != wire.QNTerminate {
		t.Fatalf("opcode %v QN %d", op, h.QN())
	}
	var term wire.Terminate
	if err := wire.ParseTerminate(ulpdu[h.Len():], &term); err != nil {
		t.Fatal(err)
	}
	want := wire.Terminate{Layer: wire.LayerDDP, EType: 1, Code: 0, M: true, D: true, SegLen: 64,
		DDPHeader: wHex(t, "c140"+"00abcd01"+"0000000000001000"), Layout: wire.LayoutSiw}
	if diff := cmp.Diff(want, term, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	th, err := ddp.Parse(term.DDPHeader)
	if err != nil || !th.Tagged() || th.STag() != 0xabcd01 || th.TO() != 0x1000 {
		t.Errorf("terminated header %x: %v", term.DDPHeader, err)
	}
	// Our RFC-layout answer to the same error.
	term.Layout = wire.LayoutRFC
	b := wire.AppendTerminate(nil, &term)
	if !bytes.Equal(b[:4], []byte{0x11, 0x00, 0xc0, 0x00}) {
		t.Errorf("RFC control word %x, want 1100c000", b[:4])
	}
}

// TestDetectLayoutExhaustive checks DetectLayout over every byte 0 and
// code with a spread of byte-2 values: valid RFC words are never taken as
// siw's, words with RFC flags never, and a siw verdict always names a
// valid siw pair. It also pins the set of siw words without flags that are
// read the RFC way (the ambiguous set in DetectLayout's comment).
func TestDetectLayoutExhaustive(t *testing.T) {
	// The defined (layer, type, code) triples, restated from RFC 5040
	// §7.2, RFC 5041 §7.2 and the MPA codes of RFC 5044 and RFC 6581.
	valid := func(layer, etype, code uint8) bool {
		in := func(lo, hi uint8) bool { return code >= lo && code <= hi }
		switch {
		case layer == 0 && etype == 0:
			return code == 0
		case layer == 0 && etype == 1:
			return in(0, 4) || code == 9 || code == 0xff
		case layer == 0 && etype == 2:
			return in(5, 9) || code == 0xff
		case layer == 1 && etype == 0:
			return code == 0
		case layer == 1 && etype == 1:
			return in(0, 4)
		case layer == 1 && etype == 2:
			return in(1, 6)
		case layer == 1 && etype == 3:
			return true
		case layer == 2 && etype == 0:
			return in(1, 7)
		}
		return false
	}
	for b0 := range 256 {
		for code := range 256 {
			for _, b2 := range []byte{0, 1, 2, 4, 7, 8, 0x18, 0x20, 0x40, 0x80, 0xe0, 0xe7} {
				w := []byte{byte(b0), byte(code), b2, 0}
				got := wire.DetectLayout(w)
				rl, re := uint8(b0>>4), uint8(b0&0xf)
				sl, se := uint8(b0&0xf), uint8(b0>>4)
				if b2&0xe0 != 0 && got != wire.LayoutRFC {
					t.Fatalf("%x: RFC flags set, detected %v", w, got)
				}
				if got == wire.LayoutSiw && wire.ETypeName(wire.Layer(sl), se) == fmt.Sprintf("unknown(%d)", se) {
					t.Fatalf("%x: siw verdict for an invalid siw pair", w)
				}
				if b2 == 0 && valid(rl, re, uint8(code)) && got != wire.LayoutRFC {
					t.Fatalf("%x: a valid RFC word detected as %v", w, got)
				}
			}
		}
	}
	// siw words without flags, for every valid siw triple: which are read
	// the RFC way, and do they read differently?
	var misread []string
	for layer := uint8(0); layer < 3; layer++ {
		for etype := uint8(0); etype < 4; etype++ {
			for code := range 256 {
				if !valid(layer, etype, uint8(code)) {
					continue
				}
				w := []byte{etype<<4 | layer, uint8(code), 0, 0}
				if wire.DetectLayout(w) == wire.LayoutSiw {
					continue
				}
				if w[0]>>4 != w[0]&0xf { // 00 and 11 read the same both ways
					misread = append(misread, fmt.Sprintf("%02x %02x", w[0], code))
				}
			}
		}
	}
	sort.Strings(misread)
	want := []string{"01 00", "02 05", "02 06", "02 07", "10 00", "20 05", "20 06", "20 07"}
	if fmt.Sprint(misread) != fmt.Sprint(want) {
		t.Errorf("ambiguous siw words read the RFC way: %v, want %v", misread, want)
	}
	// Too short: no panic, RFC.
	for n := range wire.TermCtrlLen {
		if wire.DetectLayout(make([]byte, n)) != wire.LayoutRFC {
			t.Errorf("DetectLayout(%d bytes) not RFC", n)
		}
	}
}

// wTerminates returns Terminates in both layouts with every M/D/R
// combination, tagged and untagged terminated headers and reserved bits.
func wTerminates() []wire.Terminate {
	tagged := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: 0x40, STag: 0x1234, TO: 0x5678})
	untagged := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true, RsvdULP: 0x41, QN: 1, MSN: 7})
	rr := wire.AppendReadRequest(nil, &wire.ReadRequestFields{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5})
	words := []struct {
		layer     wire.Layer
		etype     uint8
		code      uint8
		ddpHeader []byte
	}{
		{wire.LayerRDMAP, wire.ETypeRemoteProtection, wire.CodeInvalidSTag, untagged},
		{wire.LayerRDMAP, wire.ETypeRemoteOperation, wire.CodeCannotInvalidate, untagged},
		{wire.LayerRDMAP, wire.ETypeLocalCatastrophic, 0, untagged},
		{wire.LayerDDP, uint8(ddp.ErrTypeTagged), uint8(ddp.CodeBaseBounds), tagged},
		{wire.LayerDDP, uint8(ddp.ErrTypeUntagged), uint8(ddp.CodeMSNRange), untagged},
		{wire.LayerDDP, uint8(ddp.ErrTypeLocalCatastrophic), 0, tagged},
		{wire.LayerLLP, mpa.TermTypeMPA, uint8(mpa.TermCRC), untagged},
	}
	var out []wire.Terminate
	for _, layout := range []wire.Layout{wire.LayoutRFC, wire.LayoutSiw} {
		for _, w := range words {
			for flags := range 8 {
				for _, res := range []uint16{0, 0x0001, 0x1f00} {
					term := wire.Terminate{Layer: w.layer, EType: w.etype, Code: w.code,
						M: flags&1 != 0, D: flags&2 != 0, R: flags&4 != 0, Layout: layout, Reserved: res}
					if layout == wire.LayoutSiw {
						term.Reserved = res &^ 0x0700 // siw's flags live there
					}
					if term.M || term.D || term.R {
						term.SegLen = uint16(100 * flags)
					}
					if term.D {
						term.DDPHeader = w.ddpHeader
					}
					if term.R {
						term.RDMAHeader = rr
					}
					out = append(out, term)
				}
			}
		}
	}
	return out
}

func TestTerminateRoundTrip(t *testing.T) {
	for _, term := range wTerminates() {
		b := wire.AppendTerminate([]byte{0xee}, &term)
		if b[0] != 0xee {
			t.Fatal("AppendTerminate overwrote b")
		}
		b = b[1:]
		if len(b) != term.Len() {
			t.Fatalf("Len() = %d, len(AppendTerminate) = %d for %+v", term.Len(), len(b), term)
		}
		var got wire.Terminate
		if err := wire.ParseTerminateLayout(append(b, 0xaa), term.Layout, &got); err != nil {
			t.Fatalf("%+v: %v", term, err)
		}
		if diff := cmp.Diff(term, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
		// With a flag set and no reserved bits the layout is detected.
		if (term.M || term.D || term.R) && term.Reserved == 0 {
			if err := wire.ParseTerminate(b, &got); err != nil || got.Layout != term.Layout {
				t.Fatalf("%x: detected %v (%v), wrote %v", b, got.Layout, err, term.Layout)
			}
			if diff := cmp.Diff(term, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("detected round trip (-want +got):\n%s", diff)
			}
		}
	}
}

func TestTerminateTruncations(t *testing.T) {
	for _, term := range wTerminates() {
		b := wire.AppendTerminate(nil, &term)
		for n := range b {
			var got wire.Terminate
			if err := wire.ParseTerminate(b[:n], &got); !errors.Is(err, wire.ErrTerminateShort) {
				t.Fatalf("ParseTerminate(%d of %d bytes of %x) = %v", n, len(b), b, err)
			}
			if err := wire.ParseTerminateLayout(b[:n], term.Layout, &got); !errors.Is(err, wire.ErrTerminateShort) {
				t.Fatalf("ParseTerminateLayout(%d of %d bytes) = %v", n, len(b), err)
			}
		}
	}
}

func TestTerminateAllocs(t *testing.T) {
	term := wTerminates()[len(wTerminates())/2]
	term.M, term.D, term.R = true, true, true
	term.DDPHeader = ddp.AppendUntagged(nil, &ddp.UntaggedFields{QN: 1})
	term.RDMAHeader = make([]byte, wire.ReadRequestLen)
	buf := make([]byte, 0, 128)
	var b []byte
	if a := testing.AllocsPerRun(100, func() { b = wire.AppendTerminate(buf[:0], &term) }); a != 0 {
		t.Errorf("AppendTerminate: %v allocs", a)
	}
	var got wire.Terminate
	if a := testing.AllocsPerRun(100, func() {
		if err := wire.ParseTerminate(b, &got); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("ParseTerminate: %v allocs", a)
	}
}

func TestTerminateNames(t *testing.T) {
	tests := []struct {
		layer wire.Layer
		etype uint8
		code  uint8
		want  string
	}{
		{wire.LayerRDMAP, 0, 0, "RDMAP/local catastrophic: unspecified"},
		{wire.LayerRDMAP, 0, 5, "RDMAP/local catastrophic: unknown(5)"},
		{wire.LayerRDMAP, 1, 2, "RDMAP/remote protection: access rights violation"},
		{wire.LayerRDMAP, 2, 0xff, "RDMAP/remote operation: unspecified error"},
		{wire.LayerRDMAP, 3, 0, "RDMAP/unknown(3): invalid STag"},
		{wire.LayerDDP, 2, 5, "DDP/untagged buffer: DDP message too long for available buffer"},
		{wire.LayerDDP, 3, 5, "DDP/reserved for LLP: unknown(5)"},
		{wire.LayerLLP, 0, 7, "LLP/MPA: no matching RTR option"},
		{wire.LayerLLP, 1, 7, "LLP/unknown(1): unknown(7)"},
		{7, 0, 0, "unknown(7)/unknown(0): unknown(0)"},
	}
	for _, tc := range tests {
		term := wire.Terminate{Layer: tc.layer, EType: tc.etype, Code: tc.code}
		if got := term.String(); got != tc.want {
			t.Errorf("%d/%d/%d: %q, want %q", tc.layer, tc.etype, tc.code, got, tc.want)
		}
	}
	if wire.LayoutRFC.String() != "rfc" || wire.LayoutSiw.String() != "siw" {
		t.Error("Layout names")
	}
}
