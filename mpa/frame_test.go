package mpa_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gosiw/gosiw/mpa"
)

// TestGoldenSiwFrames parses the MPA Request and Reply frames Linux siw 6.1
// sent in the interop lab (testdata/siw-mpa-*.bin, cut from its
// captures) and re-encodes them.
func TestGoldenSiwFrames(t *testing.T) {
	tests := []struct {
		file string
		// hex of bytes 16.. (after the key), for the reader of this test
		tail string
		want mpa.Frame
	}{
		{
			// rping as initiator: "MPA ID Req Frame" 10 02 0004 0001 0001.
			file: "siw-mpa-request.bin",
			tail: "10020004" + "00010001",
			want: mpa.Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PDLength: 4},
		},
		{
			file: "siw-mpa-request2.bin",
			tail: "10020004" + "00010001",
			want: mpa.Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PDLength: 4},
		},
		{
			// siw as responder to a rev 2 + H request with IRD/ORD 1/1.
			file: "siw-mpa-reply.bin",
			tail: "10020004" + "00010001",
			want: mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PDLength: 4},
		},
		{
			file: "siw-mpa-reply-v2.bin",
			tail: "10020004" + "00010001",
			want: mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PDLength: 4},
		},
		{
			// The request carried ULP private data; siw's reply has none.
			file: "siw-mpa-reply-v2-pd.bin",
			tail: "10020004" + "00010001",
			want: mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PDLength: 4},
		},
		{
			// C requested: echoed, H kept.
			file: "siw-mpa-reply-v2-crc.bin",
			tail: "50020004" + "00010001",
			want: mpa.Frame{Reply: true, CRC: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PDLength: 4},
		},
		{
			// M requested in rev 2: rejected, M cleared, IRD/ORD 0/0.
			file: "siw-mpa-reply-v2-markers.bin",
			tail: "30020004" + "00000000",
			want: mpa.Frame{Reply: true, Reject: true, Rev: 2, Enhanced: true, PDLength: 4},
		},
		{
			// Rev 2 request without H: rev 2 reply, no IRD/ORD block.
			file: "siw-mpa-reply-v2-noH.bin",
			tail: "00020000",
			want: mpa.Frame{Reply: true, Rev: 2},
		},
		{
			// P2P with every RTR offered: A echoed, IRD 16; C (Write RTR)
			// chosen, ORD 16; B (zero-length Send) dropped.
			file: "siw-mpa-reply-v2-p2p-rtr.bin",
			tail: "10020004" + "80108010",
			want: mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 16, ORD: 16, P2P: true, RTRWrite: true, PDLength: 4},
		},
		{
			// Rev 1 request: rev 1 reply, no private data.
			file: "siw-mpa-reply-v1.bin",
			tail: "00010000",
			want: mpa.Frame{Reply: true, Rev: 1},
		},
		{
			// M requested in rev 1: R=1, M=0.
			file: "siw-mpa-reply-v1-markers.bin",
			tail: "20010000",
			want: mpa.Frame{Reply: true, Reject: true, Rev: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data := readTestdata(t, tc.file)
			if got := hex.EncodeToString(data[mpa.KeyLen:]); got != tc.tail {
				t.Fatalf("file tail = %s, test expects %s", got, tc.tail)
			}
			var f mpa.Frame
			n, err := mpa.ParseFrame(data, &f)
			if err != nil {
				t.Fatalf("ParseFrame: %v", err)
			}
			if n != len(data) {
				t.Errorf("ParseFrame consumed %d of %d bytes", n, len(data))
			}
			if diff := cmp.Diff(tc.want, f, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParseFrame mismatch (-want +got):\n%s", diff)
			}
			if fl, err := mpa.FrameLen(data); err != nil || fl != len(data) {
				t.Errorf("FrameLen = %d, %v; want %d", fl, err, len(data))
			}
			if f.Length() != len(data) {
				t.Errorf("Length() = %d, want %d", f.Length(), len(data))
			}
			out, err := mpa.AppendFrame(nil, &f)
			if err != nil {
				t.Fatalf("AppendFrame: %v", err)
			}
			if !bytes.Equal(out, data) {
				t.Errorf("re-encoded\n%x\nwant\n%x", out, data)
			}
		})
	}
}

// TestGoldenSiwP2P: the Request and Reply of p2p-rping-default.pcap (siw
// 6.1 on both sides with its peer_to_peer knob on). The initiator offers
// Write and Read RTRs (ORD word c001); the responder picks Write (8001).
func TestGoldenSiwP2P(t *testing.T) {
	tests := []struct {
		hex  string
		want mpa.Frame
	}{
		{"4d504120494420526571204672616d65" + "10020004" + "8001c001",
			mpa.Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true, RTRWrite: true, RTRRead: true, PDLength: 4}},
		{"4d504120494420526570204672616d65" + "10020004" + "80018001",
			mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true, RTRWrite: true, PDLength: 4}},
	}
	for _, tc := range tests {
		data := hexBytes(t, tc.hex)
		var f mpa.Frame
		if n, err := mpa.ParseFrame(data, &f); err != nil || n != len(data) {
			t.Fatalf("ParseFrame = %d, %v", n, err)
		}
		if diff := cmp.Diff(tc.want, f, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if out, _ := mpa.AppendFrame(nil, &f); !bytes.Equal(out, data) {
			t.Errorf("re-encoded %x, want %x", out, data)
		}
	}
}

// siw answers a revision 3 request by closing without a reply: the capture
// holds zero bytes, which must not parse.
func TestGoldenSiwReplyV3Empty(t *testing.T) {
	data := readTestdata(t, "siw-mpa-reply-v3.bin")
	if len(data) != 0 {
		t.Fatalf("siw-mpa-reply-v3.bin has %d bytes, want 0", len(data))
	}
	var f mpa.Frame
	if _, err := mpa.ParseFrame(data, &f); !errors.Is(err, mpa.ErrTruncated) {
		t.Errorf("ParseFrame(empty) = %v, want ErrTruncated", err)
	}
	if _, err := mpa.FrameLen(data); !errors.Is(err, mpa.ErrTruncated) {
		t.Errorf("FrameLen(empty) = %v, want ErrTruncated", err)
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// allFrames returns Request/Reply frames covering every flag combination of
// revisions 1 and 2 (enhanced or not), with and without private data.
func allFrames() []mpa.Frame {
	var out []mpa.Frame
	pds := [][]byte{nil, []byte("x"), bytes.Repeat([]byte{0xa5}, 252), bytes.Repeat([]byte{7}, mpa.MaxPrivateData-mpa.EnhancedLen)}
	for bits := 0; bits < 1<<4; bits++ { // Reply, M, C, R
		for _, pd := range pds {
			base := mpa.Frame{
				Reply:       bits&1 != 0,
				Markers:     bits&2 != 0,
				CRC:         bits&4 != 0,
				Reject:      bits&8 != 0,
				PrivateData: pd,
			}
			for _, rev := range []uint8{mpa.Rev1, mpa.Rev2} {
				f := base
				f.Rev = rev
				out = append(out, f)
			}
			// Enhanced, with every RFC 6581 control bit combination.
			for ctl := 0; ctl < 1<<4; ctl++ {
				f := base
				f.Rev = mpa.Rev2
				f.Enhanced = true
				f.P2P = ctl&1 != 0
				f.RTRSend = ctl&2 != 0
				f.RTRWrite = ctl&4 != 0
				f.RTRRead = ctl&8 != 0
				f.IRD = uint16(ctl * 1000)
				f.ORD = mpa.MaxIRDORD - uint16(ctl)
				out = append(out, f)
			}
		}
	}
	return out
}

// frameEqual is cmp.Equal with EquateEmpty, fast enough for a thousand
// frames.
func frameEqual(a, b mpa.Frame) bool {
	if len(a.PrivateData) == 0 {
		a.PrivateData = nil
	}
	if len(b.PrivateData) == 0 {
		b.PrivateData = nil
	}
	return reflect.DeepEqual(a, b)
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range allFrames() {
		b, err := mpa.AppendFrame(nil, &f)
		if err != nil {
			t.Fatalf("AppendFrame(%+v): %v", f, err)
		}
		if len(b) != f.Length() {
			t.Fatalf("Length() = %d, len(AppendFrame) = %d for %+v", f.Length(), len(b), f)
		}
		var g mpa.Frame
		n, err := mpa.ParseFrame(b, &g)
		if err != nil || n != len(b) {
			t.Fatalf("ParseFrame = %d, %v; want %d, nil", n, err, len(b))
		}
		want := f
		want.PDLength = uint16(len(b) - mpa.HeaderLen)
		if !frameEqual(want, g) {
			t.Fatalf("round trip mismatch (-want +got):\n%s", cmp.Diff(want, g, cmpopts.EquateEmpty()))
		}
		// Trailing bytes (the peer's first FPDU) are not part of the frame.
		b2 := append(b, 0, 1, 2, 3)
		if n, err := mpa.ParseFrame(b2, &g); err != nil || n != len(b) {
			t.Fatalf("ParseFrame with trailing bytes = %d, %v; want %d, nil", n, err, len(b))
		}
	}
}

// TestFrameReservedBits: each reserved bit is reported with ErrReservedBits
// and the frame still decoded, and re-encodes to the same bytes.
func TestFrameReservedBits(t *testing.T) {
	for _, res := range []uint8{0x01, 0x02, 0x04, 0x08, 0x0f} {
		for _, rev := range []uint8{mpa.Rev1, mpa.Rev2} {
			f := mpa.Frame{Reply: true, CRC: true, Rev: rev, Reserved: res, PrivateData: []byte("pd")}
			if rev == mpa.Rev2 {
				f.Enhanced, f.IRD, f.ORD = true, 5, 6
			}
			b, err := mpa.AppendFrame(nil, &f)
			if err != nil {
				t.Fatal(err)
			}
			var g mpa.Frame
			n, err := mpa.ParseFrame(b, &g)
			if !errors.Is(err, mpa.ErrReservedBits) {
				t.Fatalf("rev %d res %#x: err = %v, want ErrReservedBits", rev, res, err)
			}
			if n != len(b) {
				t.Errorf("n = %d, want %d", n, len(b))
			}
			f.PDLength = uint16(len(b) - mpa.HeaderLen)
			if diff := cmp.Diff(f, g); diff != "" {
				t.Errorf("decoded frame with reserved bits (-want +got):\n%s", diff)
			}
			b2, _ := mpa.AppendFrame(nil, &g)
			if !bytes.Equal(b, b2) {
				t.Errorf("re-encoded %x, want %x", b2, b)
			}
		}
	}
	// siw's private GSO bit (MPA_RR_FLAG_GSO_EXP, 0x0800 of the bits word)
	// is reserved bit 0x08 of byte 16.
	siw := hexBytes(t, "4d504120494420526571204672616d65"+"18020004"+"00010001")
	var f mpa.Frame
	if _, err := mpa.ParseFrame(siw, &f); !errors.Is(err, mpa.ErrReservedBits) || f.Reserved != 0x08 || !f.Enhanced || f.IRD != 1 {
		t.Errorf("siw GSO bit: err %v, frame %+v", err, f)
	}
	// H in a revision 1 frame is a reserved bit: the 4 bytes stay private
	// data.
	h1 := hexBytes(t, "4d504120494420526571204672616d65"+"10010004"+"00010001")
	if _, err := mpa.ParseFrame(h1, &f); !errors.Is(err, mpa.ErrReservedBits) {
		t.Fatalf("H in rev 1: err = %v, want ErrReservedBits", err)
	}
	if f.Enhanced || f.Reserved != mpa.FlagEnhanced || !bytes.Equal(f.PrivateData, []byte{0, 1, 0, 1}) {
		t.Errorf("H in rev 1: frame %+v", f)
	}
	if b, _ := mpa.AppendFrame(nil, &f); !bytes.Equal(b, h1) {
		t.Errorf("H in rev 1 re-encoded %x, want %x", b, h1)
	}
	// Bits of Reserved outside the reserved positions are not written.
	g := mpa.Frame{Rev: 1, Reserved: 0xe0}
	if b, _ := mpa.AppendFrame(nil, &g); b[16] != 0 {
		t.Errorf("Reserved 0xe0 wrote flags %#x, want 0", b[16])
	}
}

func TestFrameMalformed(t *testing.T) {
	good := func() []byte {
		b, err := mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PrivateData: []byte("hello")})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name   string
		mangle func([]byte) []byte
		want   error
	}{
		{"bad key", func(b []byte) []byte { b[0] = 'm'; return b }, mpa.ErrBadKey},
		{"bad key byte 15", func(b []byte) []byte { b[15] = 'E'; return b }, mpa.ErrBadKey},
		{"key mixing req and rep", func(b []byte) []byte { b[9] = 'x'; return b }, mpa.ErrBadKey},
		{"revision 0", func(b []byte) []byte { b[17] = 0; return b }, mpa.ErrUnknownRevision},
		{"revision 3", func(b []byte) []byte { b[17] = 3; return b }, mpa.ErrUnknownRevision},
		{"revision 255", func(b []byte) []byte { b[17] = 255; return b }, mpa.ErrUnknownRevision},
		{"PD_Length 513", func(b []byte) []byte { b[18], b[19] = 0x02, 0x01; return append(b, make([]byte, 600)...) }, mpa.ErrPDTooLong},
		{"PD_Length 65535", func(b []byte) []byte { b[18], b[19] = 0xff, 0xff; return b }, mpa.ErrPDTooLong},
		{"PD_Length beyond data", func(b []byte) []byte { b[19]++; return b }, mpa.ErrTruncated},
		{"header cut", func(b []byte) []byte { return b[:mpa.HeaderLen-1] }, mpa.ErrTruncated},
		{"H with PD_Length 0", func(b []byte) []byte { b[18], b[19] = 0, 0; return b[:mpa.HeaderLen] }, mpa.ErrEnhancedShort},
		{"H with PD_Length 3", func(b []byte) []byte { b[18], b[19] = 0, 3; return b[:mpa.HeaderLen+3] }, mpa.ErrEnhancedShort},
		{"reserved bit", func(b []byte) []byte { b[16] |= 0x01; return b }, mpa.ErrReservedBits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f mpa.Frame
			_, err := mpa.ParseFrame(tc.mangle(good()), &f)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// Each malformed case has its own error.
	errs := []error{mpa.ErrBadKey, mpa.ErrUnknownRevision, mpa.ErrPDTooLong, mpa.ErrTruncated, mpa.ErrEnhancedShort, mpa.ErrReservedBits}
	for i, a := range errs {
		for j, b := range errs {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v matches %v", a, b)
			}
		}
	}
}

func TestRevisionError(t *testing.T) {
	b, _ := mpa.AppendFrame(nil, &mpa.Frame{Rev: 3})
	var f mpa.Frame
	_, err := mpa.ParseFrame(b, &f)
	var re *mpa.RevisionError
	if !errors.As(err, &re) || re.Rev != 3 {
		t.Fatalf("err = %#v, want *RevisionError{Rev: 3}", err)
	}
	if !errors.Is(err, mpa.ErrUnknownRevision) {
		t.Error("errors.Is(err, ErrUnknownRevision) = false")
	}
	if errors.Is(err, mpa.ErrTruncated) {
		t.Error("RevisionError matches ErrTruncated")
	}
	if got, want := err.Error(), "mpa: unknown revision 3"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestFrameTruncations(t *testing.T) {
	for _, f := range allFrames() {
		b, _ := mpa.AppendFrame(nil, &f)
		for i := range b {
			var g mpa.Frame
			n, err := mpa.ParseFrame(b[:i], &g)
			if err == nil {
				t.Fatalf("ParseFrame(%d of %d bytes) = %d, nil; want an error", i, len(b), n)
			}
			if !errors.Is(err, mpa.ErrTruncated) {
				t.Fatalf("ParseFrame(%d of %d bytes) = %v, want ErrTruncated", i, len(b), err)
			}
		}
	}
}

func TestAppendFrameErrors(t *testing.T) {
	if _, err := mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, IRD: mpa.MaxIRDORD + 1}); !errors.Is(err, mpa.ErrIRDORDRange) {
		t.Errorf("IRD 0x4000: %v", err)
	}
	if _, err := mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, ORD: 0xffff}); !errors.Is(err, mpa.ErrIRDORDRange) {
		t.Errorf("ORD 0xffff: %v", err)
	}
	if _, err := mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, PrivateData: make([]byte, 0xffff-3)}); !errors.Is(err, mpa.ErrPDEncode) {
		t.Errorf("PD 65532 + 4: %v", err)
	}
	// The largest encodable private data; a receiver refuses it.
	b, err := mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, PrivateData: make([]byte, 0xffff-4)})
	if err != nil || len(b) != mpa.HeaderLen+0xffff {
		t.Fatalf("PD 65531 + 4: len %d, %v", len(b), err)
	}
	var f mpa.Frame
	if _, err := mpa.ParseFrame(b, &f); !errors.Is(err, mpa.ErrPDTooLong) {
		t.Errorf("ParseFrame(PD_Length 65535) = %v", err)
	}
	// Largest valid private data.
	b, _ = mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, PrivateData: make([]byte, mpa.MaxPrivateData-4)})
	if _, err := mpa.ParseFrame(b, &f); err != nil || f.PDLength != mpa.MaxPrivateData {
		t.Errorf("ParseFrame(PD_Length 512) = %v, PDLength %d", err, f.PDLength)
	}
}

func TestFrameAllocs(t *testing.T) {
	f := mpa.Frame{Reply: true, CRC: true, Rev: 2, Enhanced: true, IRD: 3, ORD: 4, P2P: true, RTRRead: true, PrivateData: []byte("private")}
	buf := make([]byte, 0, 1024)
	var data []byte
	if a := testing.AllocsPerRun(100, func() {
		data, _ = mpa.AppendFrame(buf[:0], &f)
	}); a != 0 {
		t.Errorf("AppendFrame: %v allocs", a)
	}
	var g mpa.Frame
	if a := testing.AllocsPerRun(100, func() {
		if _, err := mpa.ParseFrame(data, &g); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("ParseFrame: %v allocs", a)
	}
	// The reserved-bits path returns a sentinel: no allocation either.
	data[16] |= 1
	if a := testing.AllocsPerRun(100, func() { mpa.ParseFrame(data, &g) }); a != 0 {
		t.Errorf("ParseFrame (reserved bits): %v allocs", a)
	}
}

func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
