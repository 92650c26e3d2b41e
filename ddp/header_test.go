package ddp_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/gosiw/gosiw/ddp"
)

func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// DDP headers from Linux siw 6.1 captures (the ULPDU after ULPDU_Length).
func TestGoldenSiwHeaders(t *testing.T) {
	t.Run("untagged send", func(t *testing.T) {
		// rping's first Send: DDP 0x41 (L, DV 1), RDMAP 0x43 (Send), QN 0,
		// MSN 1, MO 0.
		b := hexBytes(t, "4143"+"00000000"+"00000000"+"00000001"+"00000000")
		h, err := ddp.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Len() != ddp.UntaggedHeaderLen || h.Tagged() || !h.Last() || h.Version() != 1 || h.Reserved() != 0 ||
			h.RsvdULP() != 0x43 || h.RsvdULP32() != 0 || h.QN() != 0 || h.MSN() != 1 || h.MO() != 0 {
			t.Errorf("header %x decoded wrong", []byte(h))
		}
		out := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true, RsvdULP: 0x43, MSN: 1})
		if !bytes.Equal(out, b) {
			t.Errorf("AppendUntagged = %x, want %x", out, b)
		}
	})
	t.Run("untagged read request", func(t *testing.T) {
		b := hexBytes(t, "4141"+"00000000"+"00000001"+"00000001"+"00000000")
		h, err := ddp.Parse(b)
		if err != nil || h.QN() != 1 || h.MSN() != 1 || h.RsvdULP() != 0x41 {
			t.Fatalf("%v %x", err, []byte(h))
		}
	})
	t.Run("tagged RTR", func(t *testing.T) {
		// p2p-rping-default.pcap: the initiator's RTR, a zero-length RDMA
		// Write to STag 1, TO 0 (FPDU 000e c140 00000001 0000000000000000
		// 0000 00000000).
		b := hexBytes(t, "c140"+"00000001"+"0000000000000000")
		h, err := ddp.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Len() != ddp.TaggedHeaderLen || !h.Tagged() || !h.Last() || h.RsvdULP() != 0x40 || h.STag() != 1 || h.TO() != 0 {
			t.Errorf("header %x decoded wrong", []byte(h))
		}
		if out := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: 0x40, STag: 1}); !bytes.Equal(out, b) {
			t.Errorf("AppendTagged = %x, want %x", out, b)
		}
	})
	t.Run("tagged write middle segment", func(t *testing.T) {
		// ib_write_bw.pcap: a 32762-byte RDMA Write segment without L.
		b := hexBytes(t, "8140"+"fa038c00"+"00007f0fc9fc0000")
		h, err := ddp.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Tagged() || h.Last() || h.STag() != 0xfa038c00 || h.TO() != 0x00007f0fc9fc0000 {
			t.Errorf("header %x decoded wrong", []byte(h))
		}
		if out := ddp.AppendTagged(nil, &ddp.TaggedFields{RsvdULP: 0x40, STag: 0xfa038c00, TO: 0x00007f0fc9fc0000}); !bytes.Equal(out, b) {
			t.Errorf("AppendTagged = %x, want %x", out, b)
		}
	})
	t.Run("tagged read response", func(t *testing.T) {
		b := hexBytes(t, "c142"+"8ad0ef00"+"0000556e5a37e530")
		h, err := ddp.Parse(b)
		if err != nil || h.STag() != 0x8ad0ef00 || h.TO() != 0x0000556e5a37e530 || h.RsvdULP() != 0x42 {
			t.Fatalf("%v %x", err, []byte(h))
		}
	})
}

func taggedCases() []ddp.TaggedFields {
	var out []ddp.TaggedFields
	for _, last := range []bool{false, true} {
		for _, ulp := range []uint8{0, 0x40, 0x42, 0xff} {
			for _, stag := range []ddp.STag{0, 1, 0x12345678, 0xffffffff} {
				for _, to := range []uint64{0, 1, 0x0102030405060708, 1<<64 - 1} {
					out = append(out, ddp.TaggedFields{Last: last, Version: ddp.Version1, RsvdULP: ulp, STag: stag, TO: to})
				}
			}
		}
	}
	return out
}

func untaggedCases() []ddp.UntaggedFields {
	var out []ddp.UntaggedFields
	vals := []uint32{0, 1, 0x80000000, 0xffffffff}
	for _, last := range []bool{false, true} {
		for _, ulp := range []uint8{0x43, 0x47, 0xc1} {
			for _, v := range vals {
				for _, qn := range []uint32{0, 1, 2, 3, 0xffffffff} {
					out = append(out, ddp.UntaggedFields{Last: last, Version: ddp.Version1, RsvdULP: ulp, RsvdULP32: v, QN: qn, MSN: v ^ 0x5a5a5a5a, MO: ^v})
				}
			}
		}
	}
	return out
}

func TestTaggedRoundTrip(t *testing.T) {
	for _, f := range taggedCases() {
		b := ddp.AppendTagged([]byte{0xee}, &f)
		if b[0] != 0xee || len(b) != 1+ddp.TaggedHeaderLen {
			t.Fatalf("AppendTagged wrote %d bytes", len(b)-1)
		}
		b = b[1:]
		if ddp.HeaderLen(b[0]) != len(b) {
			t.Fatalf("HeaderLen(%#x) = %d", b[0], ddp.HeaderLen(b[0]))
		}
		h, err := ddp.Parse(append(b, 1, 2, 3))
		if err != nil {
			t.Fatal(err)
		}
		got := ddp.TaggedFields{Last: h.Last(), Version: h.Version(), RsvdULP: h.RsvdULP(), STag: h.STag(), TO: h.TO()}
		if got != f || !h.Tagged() || h.Len() != ddp.TaggedHeaderLen || h.Reserved() != 0 {
			t.Fatalf("round trip %+v -> %+v", f, got)
		}
		put := make([]byte, ddp.TaggedHeaderLen)
		ddp.PutTagged(put, &f)
		if !bytes.Equal(put, b) {
			t.Fatalf("PutTagged = %x, AppendTagged = %x", put, b)
		}
	}
}

func TestUntaggedRoundTrip(t *testing.T) {
	for _, f := range untaggedCases() {
		b := ddp.AppendUntagged(nil, &f)
		if len(b) != ddp.UntaggedHeaderLen || ddp.HeaderLen(b[0]) != len(b) {
			t.Fatalf("AppendUntagged wrote %d bytes", len(b))
		}
		h, err := ddp.Parse(append(b, 9))
		if err != nil {
			t.Fatal(err)
		}
		got := ddp.UntaggedFields{Last: h.Last(), Version: h.Version(), RsvdULP: h.RsvdULP(), RsvdULP32: h.RsvdULP32(), QN: h.QN(), MSN: h.MSN(), MO: h.MO()}
		if got != f || h.Tagged() || h.Len() != ddp.UntaggedHeaderLen {
			t.Fatalf("round trip %+v -> %+v", f, got)
		}
		put := make([]byte, ddp.UntaggedHeaderLen)
		ddp.PutUntagged(put, &f)
		if !bytes.Equal(put, b) {
			t.Fatalf("PutUntagged = %x, AppendUntagged = %x", put, b)
		}
	}
}

// Version 0 in the Fields means Version1.
func TestDefaultVersion(t *testing.T) {
	if b := ddp.AppendTagged(nil, &ddp.TaggedFields{}); b[0] != ddp.FlagTagged|1 {
		t.Errorf("tagged control %#x", b[0])
	}
	if b := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true}); b[0] != ddp.FlagLast|1 {
		t.Errorf("untagged control %#x", b[0])
	}
	// Other versions are written as given, so tests can build bad ones.
	if b := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Version: 2}); b[0] != 2 {
		t.Errorf("version 2 control %#x", b[0])
	}
}

func TestVersionError(t *testing.T) {
	for _, tagged := range []bool{false, true} {
		for _, v := range []uint8{0, 2, 3} {
			var b []byte
			if tagged {
				b = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, STag: 7})
			} else {
				b = ddp.AppendUntagged(nil, &ddp.UntaggedFields{QN: 2})
			}
			b[0] = b[0]&^ddp.VersionMask | v
			h, err := ddp.Parse(b)
			var ve *ddp.VersionError
			if !errors.As(err, &ve) || ve.Version != v {
				t.Fatalf("tagged=%v version %d: err = %v", tagged, v, err)
			}
			// The view comes with the error, for the Terminate.
			if h == nil || h.Tagged() != tagged || h.Len() != len(b) || h.Version() != v {
				t.Fatalf("tagged=%v version %d: header %x", tagged, v, []byte(h))
			}
			if tagged && h.STag() != 7 || !tagged && h.QN() != 2 {
				t.Fatalf("fields lost")
			}
			if err.Error() == "" || errors.Is(err, ddp.ErrShortHeader) {
				t.Fatalf("error %q", err)
			}
		}
	}
}

// Reserved control bits are reported, not refused (siw accepts them too).
func TestReservedBits(t *testing.T) {
	b := ddp.AppendTagged(nil, &ddp.TaggedFields{})
	b[0] |= ddp.ReservedMask
	h, err := ddp.Parse(b)
	if err != nil || h.Reserved() != ddp.ReservedMask || h.Version() != 1 || !h.Tagged() || h.Last() {
		t.Fatalf("%v reserved %#x", err, h.Reserved())
	}
}

func TestTruncations(t *testing.T) {
	var frames [][]byte
	for _, f := range taggedCases()[:8] {
		frames = append(frames, ddp.AppendTagged(nil, &f))
	}
	for _, f := range untaggedCases()[:8] {
		frames = append(frames, ddp.AppendUntagged(nil, &f))
	}
	for _, b := range frames {
		for i := range b {
			h, err := ddp.Parse(b[:i])
			if !errors.Is(err, ddp.ErrShortHeader) || h != nil {
				t.Fatalf("Parse(%d of %d bytes) = %x, %v; want ErrShortHeader", i, len(b), []byte(h), err)
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	tf := ddp.TaggedFields{Last: true, RsvdULP: 0x40, STag: 1, TO: 2}
	uf := ddp.UntaggedFields{Last: true, RsvdULP: 0x43, QN: 0, MSN: 1}
	buf := make([]byte, 0, 64)
	var tb, ub []byte
	if a := testing.AllocsPerRun(100, func() { tb = ddp.AppendTagged(buf[:0], &tf) }); a != 0 {
		t.Errorf("AppendTagged: %v allocs", a)
	}
	tb = bytes.Clone(tb)
	if a := testing.AllocsPerRun(100, func() { ub = ddp.AppendUntagged(buf[:0], &uf) }); a != 0 {
		t.Errorf("AppendUntagged: %v allocs", a)
	}
	h := make([]byte, ddp.UntaggedHeaderLen)
	if a := testing.AllocsPerRun(100, func() { ddp.PutUntagged(h, &uf); ddp.PutTagged(h, &tf) }); a != 0 {
		t.Errorf("PutTagged/PutUntagged: %v allocs", a)
	}
	for _, b := range [][]byte{tb, ub} {
		if a := testing.AllocsPerRun(100, func() {
			h, err := ddp.Parse(b)
			if err != nil || h.Len() == 0 {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("Parse: %v allocs", a)
		}
	}
}

func TestSegments(t *testing.T) {
	for _, max := range []int{1, 2, 7, 1424, 65000} {
		for _, total := range []int{0, 1, 2, 6, 7, 8, 13, 14, 15, 1424, 1425, 100000} {
			var sizes []int
			off := 0
			for {
				n, last := ddp.NextSegment(off, total, max)
				if n < 0 || n > max {
					t.Fatalf("NextSegment(%d, %d, %d) = %d", off, total, max, n)
				}
				sizes = append(sizes, n)
				off += n
				if last {
					break
				}
				if n == 0 || len(sizes) > total+1 {
					t.Fatalf("no progress: total %d max %d", total, max)
				}
			}
			if off != total || len(sizes) != ddp.Segments(total, max) {
				t.Fatalf("total %d max %d: covered %d in %d segments, Segments = %d", total, max, off, len(sizes), ddp.Segments(total, max))
			}
			for _, n := range sizes[:len(sizes)-1] {
				if n != max {
					t.Fatalf("total %d max %d: non-final segment of %d", total, max, n)
				}
			}
		}
	}
}

func TestErrorNames(t *testing.T) {
	tests := []struct {
		typ  ddp.ErrorType
		code ddp.ErrorCode
		want string
	}{
		{ddp.ErrTypeLocalCatastrophic, ddp.CodeLocalCatastrophic, "unspecified"},
		{ddp.ErrTypeLocalCatastrophic, 1, "unknown(1)"},
		{ddp.ErrTypeTagged, ddp.CodeInvalidSTag, "invalid STag"},
		{ddp.ErrTypeTagged, ddp.CodeBaseBounds, "base or bounds violation"},
		{ddp.ErrTypeTagged, ddp.CodeSTagNotAssoc, "STag not associated with DDP stream"},
		{ddp.ErrTypeTagged, ddp.CodeTOWrap, "TO wrap"},
		{ddp.ErrTypeTagged, ddp.CodeTaggedVersion, "invalid DDP version"},
		{ddp.ErrTypeTagged, 5, "unknown(5)"},
		{ddp.ErrTypeUntagged, 0, "unknown(0)"},
		{ddp.ErrTypeUntagged, ddp.CodeInvalidQN, "invalid QN"},
		{ddp.ErrTypeUntagged, ddp.CodeNoBuffer, "invalid MSN - no buffer available"},
		{ddp.ErrTypeUntagged, ddp.CodeMSNRange, "invalid MSN - MSN range is not valid"},
		{ddp.ErrTypeUntagged, ddp.CodeInvalidMO, "invalid MO"},
		{ddp.ErrTypeUntagged, ddp.CodeTooLong, "DDP message too long for available buffer"},
		{ddp.ErrTypeUntagged, ddp.CodeUntaggedVersion, "invalid DDP version"},
		{ddp.ErrTypeLLP, 0, "unknown(0)"},
		{9, 0, "unknown(0)"},
	}
	for _, tc := range tests {
		if got := ddp.CodeName(tc.typ, tc.code); got != tc.want {
			t.Errorf("CodeName(%d, %d) = %q, want %q", tc.typ, tc.code, got, tc.want)
		}
	}
	for typ, want := range map[ddp.ErrorType]string{0: "local catastrophic", 1: "tagged buffer", 2: "untagged buffer", 3: "reserved for LLP", 4: "unknown(4)"} {
		if got := typ.String(); got != want {
			t.Errorf("ErrorType(%d) = %q, want %q", typ, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tf := range taggedCases()[:16] {
		f.Add(ddp.AppendTagged(nil, &tf))
	}
	for _, uf := range untaggedCases()[:16] {
		f.Add(ddp.AppendUntagged(nil, &uf))
	}
	f.Add([]byte{0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ddp.Parse(data)
		var ve *ddp.VersionError
		switch {
		case err == nil:
		case errors.As(err, &ve):
			if ve.Version == ddp.Version1 || ve.Version != h.Version() {
				t.Fatalf("VersionError %d for header version %d", ve.Version, h.Version())
			}
		case errors.Is(err, ddp.ErrShortHeader):
			if h != nil || (len(data) > 0 && len(data) >= ddp.HeaderLen(data[0])) {
				t.Fatalf("ErrShortHeader for %d bytes", len(data))
			}
			return
		default:
			t.Fatalf("unexpected error %v", err)
		}
		if h.Len() != ddp.HeaderLen(data[0]) || !bytes.Equal(h, data[:h.Len()]) {
			t.Fatalf("view %x of %x", []byte(h), data)
		}
		// Re-encode from the accessors. Version 0 and reserved control
		// bits have no field in *Fields; put them back by hand.
		var out []byte
		if h.Tagged() {
			out = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: h.Last(), Version: h.Version(), RsvdULP: h.RsvdULP(), STag: h.STag(), TO: h.TO()})
		} else {
			out = ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: h.Last(), Version: h.Version(), RsvdULP: h.RsvdULP(), RsvdULP32: h.RsvdULP32(), QN: h.QN(), MSN: h.MSN(), MO: h.MO()})
		}
		out[0] = out[0]&^(ddp.ReservedMask|ddp.VersionMask) | h.Reserved() | h.Version()
		if !bytes.Equal(out, h) {
			t.Fatalf("re-encoded %x, want %x", out, []byte(h))
		}
		h2, err2 := ddp.Parse(out)
		if !bytes.Equal(h2, h) || (err2 == nil) != (err == nil) {
			t.Fatalf("second parse %x, %v", []byte(h2), err2)
		}
	})
}
