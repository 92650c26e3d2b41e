package mpa_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestCRC32cRFC3720 checks UpdateCRC against the CRC32c examples of
// RFC 3720 appendix B.4. The RFC lists the CRC as the bytes that go on the
// wire ("aa 36 91 8a" for 32 zero bytes), which is the little-endian order
// PutCRC writes and Linux siw sends.
func TestCRC32cRFC3720(t *testing.T) {
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	for i := range 32 {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
	}
	// An iSCSI - SCSI Read (10) Command PDU.
	read10 := []byte{
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
		0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	tests := []struct {
		name string
		data []byte
		want uint32
		wire string // CRC bytes as RFC 3720 prints them
	}{
		{"32 bytes of zeroes", make([]byte, 32), 0x8a9136aa, "aa36918a"},
		{"32 bytes of ones", bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43, "43aba862"},
		{"32 bytes of incrementing 00..1f", inc, 0x46dd794e, "4e79dd46"},
		{"32 bytes of decrementing 1f..00", dec, 0x113fdb5c, "5cdb3f11"},
		{"iSCSI Read (10) command PDU", read10, 0xd9963a56, "563a96d9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mpa.UpdateCRC(0, tc.data); got != tc.want {
				t.Errorf("UpdateCRC = %#08x, want %#08x", got, tc.want)
			}
			if got := crc32.Checksum(tc.data, crc32.MakeTable(crc32.Castagnoli)); got != tc.want {
				t.Errorf("hash/crc32 Castagnoli = %#08x, want %#08x", got, tc.want)
			}
			var field [4]byte
			mpa.PutCRC(field[:], tc.want)
			if !bytes.Equal(field[:], hexBytes(t, tc.wire)) {
				t.Errorf("PutCRC wrote %x, RFC 3720 shows %s", field, tc.wire)
			}
			if mpa.GetCRC(field[:]) != tc.want {
				t.Errorf("GetCRC(PutCRC(x)) != x")
			}
			if mpa.WireCRC(field[:]) != binary.BigEndian.Uint32(hexBytes(t, tc.wire)) {
				t.Errorf("WireCRC mismatch")
			}
		})
	}
}

// TestUpdateCRCSplits: the CRC over a split buffer equals the one-shot CRC
// for every split point and for random multi-way splits.
func TestUpdateCRCSplits(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 777)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := mpa.UpdateCRC(0, data)
	for i := range len(data) + 1 {
		if got := mpa.UpdateCRC(mpa.UpdateCRC(0, data[:i]), data[i:]); got != want {
			t.Fatalf("split at %d: %#x, want %#x", i, got, want)
		}
	}
	for range 200 {
		crc, rest := uint32(0), data
		for len(rest) > 0 {
			n := r.IntN(len(rest) + 1)
			crc = mpa.UpdateCRC(crc, rest[:n])
			rest = rest[n:]
		}
		if crc != want {
			t.Fatalf("random split: %#x, want %#x", crc, want)
		}
	}
}

// Real FPDUs from a Linux siw 6.1 capture with CRC on (rping, one TCP
// segment each).
const (
	// rping's first Send: the client's rping_rdma_info (buf, rkey, size).
	siwSendFPDU = "0022414300000000000000000000000100000000000056402cd8bb80bf38840000000040180dc2b4"
	// The server's RDMA Read Request for that buffer.
	siwReadReqFPDU = "002e4141000000000000000100000001000000008ad0ef000000556e5a37e53000000040bf388400000056402cd8bb80b43286a6"
	// The Read Response carrying "rdma-ping-0: ABC...qr\x00" (64 bytes).
	siwReadRespFPDU = "004ec1428ad0ef000000556e5a37e53072646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071720082a71542"
)

func TestSiwFPDUs(t *testing.T) {
	t.Run("send", func(t *testing.T) {
		raw := hexBytes(t, siwSendFPDU)
		f := parseSiwFPDU(t, raw, 0x22, 0x180dc2b4)
		h, err := ddp.Parse(f.ULPDU)
		if err != nil {
			t.Fatal(err)
		}
		// DDP control 0x41: untagged, last, DV 1; RDMAP control 0x43: RV 1,
		// Send; QN 0, MSN 1 (siw starts at 1), MO 0.
		if h.Tagged() || !h.Last() || h.Version() != ddp.Version1 || h.Reserved() != 0 || h.Len() != ddp.UntaggedHeaderLen {
			t.Errorf("DDP control %#x", f.ULPDU[0])
		}
		rv, rsv, op := wire.Control(h.RsvdULP())
		if rv != wire.Version1 || rsv != 0 || op != wire.OpSend {
			t.Errorf("RDMAP control: v%d rsv %d %v", rv, rsv, op)
		}
		if h.RsvdULP32() != 0 || h.QN() != wire.QNSend || h.MSN() != 1 || h.MO() != 0 {
			t.Errorf("untagged header: inv %#x QN %d MSN %d MO %d", h.RsvdULP32(), h.QN(), h.MSN(), h.MO())
		}
		// struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }
		p := f.ULPDU[h.Len():]
		if len(p) != 16 {
			t.Fatalf("payload %d bytes, want 16", len(p))
		}
		buf, rkey, size := binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:]), binary.BigEndian.Uint32(p[12:])
		if buf != 0x000056402cd8bb80 || rkey != 0xbf388400 || size != 64 {
			t.Errorf("rping info: buf %#x rkey %#x size %d", buf, rkey, size)
		}
		rebuild(t, raw, f.ULPDU[:h.Len()], p)
		// Rebuilt from fields: same bytes.
		hdr := ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true, RsvdULP: wire.ControlByte(1, wire.OpSend), QN: 0, MSN: 1})
		rebuild(t, raw, hdr, p)
	})
	t.Run("read request", func(t *testing.T) {
		raw := hexBytes(t, siwReadReqFPDU)
		f := parseSiwFPDU(t, raw, 0x2e, 0xb43286a6)
		h, err := ddp.Parse(f.ULPDU)
		if err != nil {
			t.Fatal(err)
		}
		_, _, op := wire.Control(h.RsvdULP())
		if h.Tagged() || !h.Last() || op != wire.OpReadRequest || h.QN() != wire.QNReadRequest || h.MSN() != 1 || h.MO() != 0 {
			t.Errorf("header: tagged %v last %v op %v QN %d MSN %d MO %d", h.Tagged(), h.Last(), op, h.QN(), h.MSN(), h.MO())
		}
		rr, err := wire.ParseReadRequest(f.ULPDU[h.Len():])
		if err != nil {
			t.Fatal(err)
		}
		// The sink is the server's buffer; the source the client's, as
		// advertised in the Send above.
		if rr.SinkSTag() != 0x8ad0ef00 || rr.SinkTO() != 0x0000556e5a37e530 || rr.Size() != 64 ||
			rr.SrcSTag() != 0xbf388400 || rr.SrcTO() != 0x000056402cd8bb80 {
			t.Errorf("read request: sink %#x@%#x size %d src %#x@%#x", rr.SinkSTag(), rr.SinkTO(), rr.Size(), rr.SrcSTag(), rr.SrcTO())
		}
		if len(f.ULPDU) != h.Len()+wire.ReadRequestLen {
			t.Errorf("ULPDU %d bytes, want %d", len(f.ULPDU), h.Len()+wire.ReadRequestLen)
		}
		rebuild(t, raw, f.ULPDU, nil)
	})
	t.Run("read response", func(t *testing.T) {
		raw := hexBytes(t, siwReadRespFPDU)
		f := parseSiwFPDU(t, raw, 0x4e, 0x82a71542)
		h, err := ddp.Parse(f.ULPDU)
		if err != nil {
			t.Fatal(err)
		}
		_, _, op := wire.Control(h.RsvdULP())
		if !h.Tagged() || !h.Last() || op != wire.OpReadResponse || h.Len() != ddp.TaggedHeaderLen {
			t.Errorf("header: tagged %v last %v op %v", h.Tagged(), h.Last(), op)
		}
		// Placed at the Read Request's sink.
		if h.STag() != 0x8ad0ef00 || h.TO() != 0x0000556e5a37e530 {
			t.Errorf("STag %#x TO %#x", h.STag(), h.TO())
		}
		want := append([]byte("rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"), 0)
		if p := f.ULPDU[h.Len():]; !bytes.Equal(p, want) {
			t.Errorf("payload %q, want %q", p, want)
		}
		hdr := ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: wire.ControlByte(1, wire.OpReadResponse), STag: 0x8ad0ef00, TO: 0x0000556e5a37e530})
		rebuild(t, raw, hdr, want)
	})
}

func parseSiwFPDU(t *testing.T, wire []byte, ulpduLen int, wireCRC uint32) mpa.FPDU {
	t.Helper()
	if got := int(binary.BigEndian.Uint16(wire)); got != ulpduLen {
		t.Fatalf("test data: ULPDU_Length %#x, want %#x", got, ulpduLen)
	}
	f, err := mpa.ParseFPDU(wire, true)
	if err != nil {
		t.Fatalf("ParseFPDU: %v", err)
	}
	if len(f.ULPDU) != ulpduLen || f.WireLen != len(wire) || !f.CRCChecked || !f.CRCOK || f.CRC != wireCRC || f.Markers != 0 {
		t.Fatalf("ParseFPDU = %+v", f)
	}
	if mpa.FPDULen(ulpduLen) != len(wire) {
		t.Errorf("FPDULen(%d) = %d, want %d", ulpduLen, mpa.FPDULen(ulpduLen), len(wire))
	}
	// The CRC field is the little-endian CRC32c of everything before it.
	if mpa.GetCRC(wire[len(wire)-4:]) != mpa.UpdateCRC(0, wire[:len(wire)-4]) {
		t.Errorf("CRC field does not hold the LE CRC32c")
	}
	// Any flipped bit is caught.
	for i := range wire {
		bad := bytes.Clone(wire)
		bad[i] ^= 0x10
		if g, err := mpa.ParseFPDU(bad, true); err == nil {
			t.Fatalf("bit flip at %d not detected: %+v", i, g)
		}
	}
	// With CRC off the field is not checked.
	g, err := mpa.ParseFPDU(wire, false)
	if err != nil || g.CRCChecked || !bytes.Equal(g.ULPDU, f.ULPDU) {
		t.Errorf("ParseFPDU(crc=false) = %+v, %v", g, err)
	}
	return f
}

// rebuild checks that AppendFPDU, and the Writer given the header and
// the payload as separate pieces, reproduce siw's FPDU byte for byte, CRC
// included.
func rebuild(t *testing.T, wire, hdr, payload []byte) {
	t.Helper()
	if got := mpa.AppendFPDU(nil, hdr, payload, true); !bytes.Equal(got, wire) {
		t.Errorf("AppendFPDU =\n%x\nwant\n%x", got, wire)
	}
	var w mpa.Writer
	w.Init(mpa.WriterConfig{CRC: true})
	n := len(hdr) + len(payload)
	w.Begin(hdr, n)
	w.Payload(payload[:len(payload)/2])
	w.Payload(payload[len(payload)/2:])
	w.End()
	var got bytes.Buffer
	if _, err := w.Flush(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), wire) {
		t.Errorf("Writer =\n%x\nwant\n%x", got.Bytes(), wire)
	}
}

func TestPadLen(t *testing.T) {
	for n := range mpa.MaxULPDU + 8 {
		p := mpa.PadLen(n)
		if p != (4-(n+2)%4)%4 || (n+2+p)%4 != 0 {
			t.Errorf("PadLen(%d) = %d", n, p)
		}
		if got := mpa.FPDULen(n); got != 2+n+p+4 || got%4 != 0 {
			t.Errorf("FPDULen(%d) = %d", n, got)
		}
	}
	if mpa.FPDULen(0) != mpa.MinFPDULen {
		t.Errorf("FPDULen(0) = %d, MinFPDULen = %d", mpa.FPDULen(0), mpa.MinFPDULen)
	}
}

func fpduSizes() []int {
	var s []int
	for n := 0; n <= 70; n++ {
		s = append(s, n)
	}
	return append(s, 511, 512, 1024, 1442, 4093, 16384, 65531, mpa.MaxULPDU)
}

func TestFPDURoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range fpduSizes() {
		ulpdu := make([]byte, n)
		for i := range ulpdu {
			ulpdu[i] = byte(r.Uint32())
		}
		for _, crc := range []bool{false, true} {
			// Every split of the ULPDU into hdr and payload gives the same
			// bytes (spot-check the splits for the big ones).
			var first []byte
			for _, cut := range cuts(n) {
				b := mpa.AppendFPDU([]byte{0xee}, ulpdu[:cut], ulpdu[cut:], crc)
				if b[0] != 0xee {
					t.Fatal("AppendFPDU overwrote b")
				}
				b = b[1:]
				if first == nil {
					first = b
				} else if !bytes.Equal(b, first) {
					t.Fatalf("n=%d cut=%d: different bytes", n, cut)
				}
			}
			b := first
			if len(b) != mpa.FPDULen(n) {
				t.Fatalf("n=%d: len %d, FPDULen %d", n, len(b), mpa.FPDULen(n))
			}
			if pad := b[2+n : len(b)-4]; !bytes.Equal(pad, make([]byte, mpa.PadLen(n))) {
				t.Fatalf("n=%d: pad %x", n, pad)
			}
			if !crc && !bytes.Equal(b[len(b)-4:], []byte{0, 0, 0, 0}) {
				t.Fatalf("n=%d: CRC field %x with CRC off", n, b[len(b)-4:])
			}
			f, err := mpa.ParseFPDU(append(b, 9, 9, 9), crc) // trailing bytes are the next FPDU
			if err != nil {
				t.Fatalf("n=%d crc=%v: %v", n, crc, err)
			}
			if !bytes.Equal(f.ULPDU, ulpdu) || f.WireLen != len(b) || f.CRCChecked != crc || f.CRCOK != crc {
				t.Fatalf("n=%d crc=%v: parsed %+v", n, crc, f)
			}
			if crc && f.CRC != mpa.WireCRC(b[len(b)-4:]) {
				t.Fatalf("CRC field")
			}
		}
	}
}

func cuts(n int) []int {
	if n <= 70 {
		c := make([]int, n+1)
		for i := range c {
			c[i] = i
		}
		return c
	}
	return []int{0, 1, 18, n / 2, n - 1, n}
}

func TestFPDUTruncations(t *testing.T) {
	for _, n := range fpduSizes() {
		if n > 2000 {
			continue
		}
		b := mpa.AppendFPDU(nil, nil, make([]byte, n), true)
		for i := range b {
			if _, err := mpa.ParseFPDU(b[:i], true); !errors.Is(err, mpa.ErrFPDUTruncated) {
				t.Fatalf("n=%d: ParseFPDU(%d of %d bytes) = %v, want ErrFPDUTruncated", n, i, len(b), err)
			}
		}
	}
}

func TestFPDUBadCRC(t *testing.T) {
	b := mpa.AppendFPDU(nil, []byte("header"), []byte("payload"), true)
	b[len(b)-1] ^= 1
	f, err := mpa.ParseFPDU(b, true)
	if !errors.Is(err, mpa.ErrBadCRC) {
		t.Fatalf("err = %v, want ErrBadCRC", err)
	}
	// The FPDU comes back with the error so the receiver can build its
	// Terminate.
	if string(f.ULPDU) != "headerpayload" || !f.CRCChecked || f.CRCOK || f.WireLen != len(b) {
		t.Errorf("FPDU with ErrBadCRC: %+v", f)
	}
	// A zero CRC field when CRC is in use is a mismatch, not "no CRC".
	b = mpa.AppendFPDU(nil, nil, []byte("abc"), false)
	if _, err := mpa.ParseFPDU(b, true); !errors.Is(err, mpa.ErrBadCRC) {
		t.Errorf("zero CRC field: %v", err)
	}
	// siw accepts a non-zero CRC field when CRC is off; so do we.
	b = mpa.AppendFPDU(nil, nil, []byte("abc"), true)
	if _, err := mpa.ParseFPDU(b, false); err != nil {
		t.Errorf("CRC off, field set: %v", err)
	}
}

func TestMULPDU(t *testing.T) {
	tests := []struct {
		emss    int
		markers bool
		want    int
	}{
		// EMSS - (6 + EMSS mod 4)
		{1448, false, 1442},
		{1460, false, 1454},
		{65483, false, 65483 - (6 + 3)},
		// EMSS - (6 + 4*ceil(EMSS/512) + EMSS mod 4)
		{1448, true, 1448 - (6 + 4*3)},
		{65483, true, 65483 - (6 + 4*128 + 3)},
		{512, true, 512 - (6 + 4)},
		{513, true, 513 - (6 + 8 + 1)},
		{0, false, 0},
		{6, false, 0},
		{7, false, 0},
		{10, true, 0},
		{11, false, 2},
	}
	for _, tc := range tests {
		if got := mpa.MULPDU(tc.emss, tc.markers); got != tc.want {
			t.Errorf("MULPDU(%d, %v) = %d, want %d", tc.emss, tc.markers, got, tc.want)
		}
	}
}

// TestMULPDUFits: an FPDU carrying MULPDU bytes fits one segment of EMSS
// bytes, without markers and, with markers, at every 4-aligned start
// offset (FPDUs start at multiples of 4 from the marker origin).
func TestMULPDUFits(t *testing.T) {
	emsses := []int{64, 100, 511, 512, 513, 536, 1024, 1220, 1448, 1460, 4052, 8948, 9000, 16384, 65483}
	for e := 16; e <= 2100; e++ {
		emsses = append(emsses, e)
	}
	for _, emss := range emsses {
		m := mpa.MULPDU(emss, false)
		if got := mpa.FPDULen(m); got > emss {
			t.Errorf("EMSS %d, no markers: MULPDU %d gives a %d-byte FPDU", emss, m, got)
		}
		if m > 0 && mpa.FPDULen(m+4) <= emss {
			t.Errorf("EMSS %d, no markers: MULPDU %d is not the largest that fits", emss, m)
		}
		m = mpa.MULPDU(emss, true)
		if m == 0 {
			continue
		}
		for off := uint64(0); off < mpa.MarkerInterval; off += 4 {
			if got, _ := mpa.MarkedLen(off, mpa.FPDULen(m)); got > emss {
				t.Errorf("EMSS %d, markers, offset %d: MULPDU %d gives a %d-byte FPDU", emss, off, m, got)
			}
		}
	}
}

func TestFPDUAllocs(t *testing.T) {
	hdr := make([]byte, 18)
	payload := make([]byte, 1000)
	buf := make([]byte, 0, 2048)
	var b []byte
	if a := testing.AllocsPerRun(100, func() {
		b = mpa.AppendFPDU(buf[:0], hdr, payload, true)
	}); a != 0 {
		t.Errorf("AppendFPDU: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := mpa.ParseFPDU(b, true); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("ParseFPDU: %v allocs", a)
	}
}
