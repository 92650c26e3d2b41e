package mpa_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

func FuzzParseFrame(f *testing.F) {
	for _, fr := range allFrames()[:200] {
		b, _ := mpa.AppendFrame(nil, &fr)
		f.Add(b)
	}
	// Revision 1 frames whose private data starts with the [MS-SMBD]
	// header (ParseFrame sees private data; the handshake splits it).
	for _, fr := range []mpa.Frame{
		{Rev: mpa.Rev1, SMBD: true, SMBDIRD: 16, SMBDORD: 4},
		{Rev: mpa.Rev1, Reply: true, SMBD: true, SMBDIRD: 1, SMBDORD: 0, PrivateData: []byte("ulp")},
		{Rev: mpa.Rev1, Reply: true, Reject: true, SMBD: true, SMBDIRD: 0x20000000, SMBDORD: 0x01000000},
		{Rev: mpa.Rev1, PrivateData: []byte("1234567")},
	} {
		b, _ := mpa.AppendFrame(nil, &fr)
		f.Add(b)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "siw-mpa-*.bin"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr mpa.Frame
		n, err := mpa.ParseFrame(data, &fr)
		if err != nil && !errors.Is(err, mpa.ErrReservedBits) {
			if n != 0 {
				t.Fatalf("error %v with n = %d", err, n)
			}
			return
		}
		if n < mpa.HeaderLen || n > len(data) || n > mpa.HeaderLen+mpa.MaxPrivateData {
			t.Fatalf("n = %d of %d", n, len(data))
		}
		if fl, err := mpa.FrameLen(data); err != nil || fl != n {
			t.Fatalf("FrameLen = %d, %v; ParseFrame n = %d", fl, err, n)
		}
		if fr.IRD > mpa.MaxIRDORD || fr.ORD > mpa.MaxIRDORD {
			t.Fatalf("IRD/ORD out of range: %+v", fr)
		}
		if fr.Length() != n {
			t.Fatalf("Length() = %d, n = %d", fr.Length(), n)
		}
		out, aerr := mpa.AppendFrame(nil, &fr)
		if aerr != nil {
			t.Fatalf("AppendFrame: %v", aerr)
		}
		if !bytes.Equal(out, data[:n]) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", out, data[:n])
		}
		var again mpa.Frame
		n2, err2 := mpa.ParseFrame(out, &again)
		if n2 != n || (err2 == nil) != (err == nil) {
			t.Fatalf("second parse: %d, %v; first %d, %v", n2, err2, n, err)
		}
		if fr.Reply != again.Reply || fr.Rev != again.Rev || fr.Reserved != again.Reserved || fr.IRD != again.IRD ||
			fr.ORD != again.ORD || fr.P2P != again.P2P || fr.RTRSend != again.RTRSend || fr.RTRWrite != again.RTRWrite ||
			fr.RTRRead != again.RTRRead || fr.Markers != again.Markers || fr.CRC != again.CRC || fr.Reject != again.Reject ||
			fr.Enhanced != again.Enhanced || !bytes.Equal(fr.PrivateData, again.PrivateData) || fr.PDLength != again.PDLength {
			t.Fatalf("second parse differs:\n%+v\n%+v", fr, again)
		}
	})
}

func FuzzParseFPDU(f *testing.F) {
	for _, s := range []string{siwSendFPDU, siwReadReqFPDU, siwReadRespFPDU} {
		f.Add(hexBytes(f, s), true)
	}
	for n := range 9 {
		f.Add(mpa.AppendFPDU(nil, nil, bytes.Repeat([]byte{byte(n)}, n), true), true)
		f.Add(mpa.AppendFPDU(nil, nil, bytes.Repeat([]byte{byte(n)}, n), false), false)
	}
	f.Add([]byte{0xff, 0xff, 1, 2, 3}, false)
	f.Fuzz(func(t *testing.T, data []byte, crc bool) {
		fp, err := mpa.ParseFPDU(data, crc)
		if err != nil && !errors.Is(err, mpa.ErrBadCRC) {
			if !errors.Is(err, mpa.ErrFPDUTruncated) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if errors.Is(err, mpa.ErrBadCRC) != (crc && !fp.CRCOK) || fp.CRCChecked != crc {
			t.Fatalf("err %v with %+v", err, fp)
		}
		if fp.WireLen != mpa.FPDULen(len(fp.ULPDU)) || fp.WireLen > len(data) || fp.WireLen%4 != 0 {
			t.Fatalf("WireLen %d, ULPDU %d, data %d", fp.WireLen, len(fp.ULPDU), len(data))
		}
		if !bytes.Equal(fp.ULPDU, data[2:2+len(fp.ULPDU)]) {
			t.Fatal("ULPDU does not alias the input")
		}
		// Rebuild. The bytes match whenever the pad is zero and, with
		// CRC off, the CRC field too.
		out := mpa.AppendFPDU(nil, fp.ULPDU, nil, crc)
		g, err2 := mpa.ParseFPDU(out, crc)
		if err2 != nil || !bytes.Equal(g.ULPDU, fp.ULPDU) || g.WireLen != fp.WireLen {
			t.Fatalf("re-parse: %+v, %v", g, err2)
		}
		pad := data[2+len(fp.ULPDU) : fp.WireLen-4]
		zeroPad := bytes.Count(pad, []byte{0}) == len(pad)
		zeroCRC := bytes.Equal(data[fp.WireLen-4:fp.WireLen], []byte{0, 0, 0, 0})
		if zeroPad && ((crc && err == nil) || (!crc && zeroCRC)) && !bytes.Equal(out, data[:fp.WireLen]) {
			t.Fatalf("rebuilt\n%x\nwant\n%x", out, data[:fp.WireLen])
		}
	})
}

type deframed struct {
	ulpdu []byte
	err   error
	wire  int
}

func deframeAll(r io.Reader, cfg mpa.DeframerConfig) []deframed {
	d := mpa.NewDeframer(r, cfg)
	var out []deframed
	for {
		fp, err := d.Next()
		if err != nil && !errors.Is(err, mpa.ErrBadCRC) {
			return append(out, deframed{err: err})
		}
		out = append(out, deframed{ulpdu: bytes.Clone(fp.ULPDU), err: err, wire: fp.WireLen})
	}
}

// FuzzDeframer feeds arbitrary bytes, cut into chunks chosen by the fuzzer,
// to a Deframer with an arbitrary configuration. However the stream is
// cut, the FPDUs and errors are the same; re-framing what came out gives
// it back.
func FuzzDeframer(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			for _, off := range []uint64{0, 4, 508, 2, 1<<64 - 4} { // unaligned and wrapping offsets too
				fr := &mpa.Framer{CRC: crc, Markers: markers, Pos: off}
				stream := buildStream(r, fr, randULPDUs(r, 4, 700))
				f.Add(stream, crc, markers, off, uint16(0), uint64(off))
			}
		}
	}
	f.Add(hexBytes(f, siwSendFPDU+siwReadReqFPDU+siwReadRespFPDU), true, false, uint64(0), uint16(0), uint64(7))
	f.Add([]byte{0, 10, 1, 2}, true, true, uint64(511), uint16(3), uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, crc, markers bool, off uint64, max uint16, seed uint64) {
		cfg := mpa.DeframerConfig{CRC: crc, Markers: markers, StreamOffset: off, MaxULPDU: int(max)}
		whole := deframeAll(bytes.NewReader(data), cfg)
		rnd := rand.New(rand.NewPCG(seed, seed>>32))
		chunked := deframeAll(&chunkReader{data: data, r: rnd, max: 1 + int(seed%97)}, cfg)
		if len(whole) != len(chunked) {
			t.Fatalf("%d results whole, %d chunked", len(whole), len(chunked))
		}
		limit := int(max)
		if limit == 0 {
			limit = mpa.MaxULPDU
		}
		consumed := 0
		for i := range whole {
			a, b := whole[i], chunked[i]
			if !bytes.Equal(a.ulpdu, b.ulpdu) || a.err != b.err || a.wire != b.wire {
				t.Fatalf("result %d: whole %d bytes %v, chunked %d bytes %v", i, len(a.ulpdu), a.err, len(b.ulpdu), b.err)
			}
			if len(a.ulpdu) > limit {
				t.Fatalf("ULPDU of %d bytes over the limit %d", len(a.ulpdu), limit)
			}
			consumed += a.wire
		}
		if consumed > len(data) {
			t.Fatalf("consumed %d of %d bytes", consumed, len(data))
		}
		last := whole[len(whole)-1].err
		switch {
		case last == io.EOF:
			if consumed != len(data) {
				t.Fatalf("io.EOF after %d of %d bytes", consumed, len(data))
			}
		case last == io.ErrUnexpectedEOF, errors.Is(last, mpa.ErrULPDUTooLong):
		default:
			t.Fatalf("stream ended with %v", last)
		}
		// Re-frame the FPDUs that came out and read them again.
		var ulpdus [][]byte
		for _, d := range whole[:len(whole)-1] {
			ulpdus = append(ulpdus, d.ulpdu)
		}
		fr := &mpa.Framer{CRC: crc, Markers: markers, Pos: off}
		var stream []byte
		for _, u := range ulpdus {
			stream = fr.AppendFPDU(stream, u, nil)
		}
		again := deframeAll(bytes.NewReader(stream), cfg)
		if len(again) != len(ulpdus)+1 || again[len(again)-1].err != io.EOF {
			t.Fatalf("re-framed stream: %d results, last %v", len(again), again[len(again)-1].err)
		}
		for i, u := range ulpdus {
			if !bytes.Equal(again[i].ulpdu, u) || again[i].err != nil {
				t.Fatalf("re-framed FPDU %d: %v", i, again[i].err)
			}
		}
	})
}
