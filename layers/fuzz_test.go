package layers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// Fuzz targets: one per layer's DecodeFromBytes, one for the stream
// decoder fed arbitrary streams cut and reordered arbitrarily, and one for
// DecodeCapture fed arbitrary files. `go test` runs the seeds; run one
// with e.g. go test ./layers -run '^$' -fuzz '^FuzzMPA$' -fuzztime 2m.
// Inputs the fuzzer found once are kept in testdata/fuzz.

// reserialize serializes l with its payload and returns the octets.
func reserialize(t *testing.T, l gopacket.SerializableLayer, payload []byte) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, l, gopacket.Payload(payload)); err != nil {
		t.Fatalf("serializing a decoded %v: %v", l.LayerType(), err)
	}
	return buf.Bytes()
}

// validFPDUs returns FPDUs of every opcode as seeds.
func validFPDUs(tb testing.TB) [][]byte {
	return allOpcodeFPDUs(tb, MPAFraming{CRC: true, FullOperation: true})
}

func FuzzMPAStartup(f *testing.F) {
	f.Add(mustHex(f, siwRequestHex))
	f.Add(mpaFrame(f, mpa.Frame{Reply: true, Rev: 2, Enhanced: true, P2P: true, RTRWrite: true, IRD: 16, ORD: 16, PrivateData: []byte("x")}))
	f.Add(mpaFrame(f, mpa.Frame{Rev: 1, Markers: true, Reserved: 0x08}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s MPAStartup
		if err := s.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		n := len(s.Contents) + len(s.Payload())
		if n != mpa.HeaderLen+int(s.PDLength) || n > len(data) {
			t.Fatalf("frame of %d octets, PD_Length %d, data %d", n, s.PDLength, len(data))
		}
		if got := reserialize(t, &s, s.Payload()); !bytes.Equal(got, data[:n]) {
			t.Fatalf("reserialized\n%x\nwant\n%x", got, data[:n])
		}
	})
}

func FuzzMPA(f *testing.F) {
	for _, b := range validFPDUs(f) {
		f.Add(b, uint8(1), uint16(0))
	}
	f.Add(mustHex(f, siwNonZeroPadHex), uint8(0), uint16(0))
	fr := mpa.Framer{CRC: true, Markers: true, Pos: 496}
	f.Add(fr.AppendFPDU(nil, mustHex(f, siwSendHex)[2:20], pattern(1200, 1)), uint8(3), uint16(496/4))
	f.Add(mustHex(f, siwRequestHex), uint8(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, flags uint8, off uint16) {
		fr := MPAFraming{CRC: flags&1 != 0, Markers: flags&2 != 0, StreamOffset: uint64(off) * 4, FullOperation: flags&4 == 0}
		m := MPA{Framing: fr}
		if err := m.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			if !errors.Is(err, mpa.ErrFPDUTruncated) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if m.Startup {
			if fr.FullOperation || !IsStartupFrame(data) {
				t.Fatal("Startup set wrongly")
			}
			return
		}
		if m.WireLen > len(data) || len(m.Payload) != int(m.ULPDULength) || len(m.Padding) != mpa.PadLen(int(m.ULPDULength)) {
			t.Fatalf("%+v", m)
		}
		// Differential: the deframer, the engine's framing, sees the same
		// FPDU in the same octets.
		d := mpa.NewDeframer(bytes.NewReader(data[:m.WireLen]), mpa.DeframerConfig{CRC: fr.CRC, Markers: fr.Markers, StreamOffset: fr.StreamOffset})
		df, err := d.Next()
		if err != nil && !errors.Is(err, mpa.ErrBadCRC) {
			t.Fatalf("deframer: %v", err)
		}
		if df.WireLen != m.WireLen || !bytes.Equal(df.ULPDU, m.Payload) || df.CRC != m.CRC || df.CRCOK != m.CRCValid || df.Markers != m.MarkerCount {
			t.Fatalf("layer %+v\ndeframer %+v", m, df)
		}
		if _, err := d.Next(); err != io.EOF {
			t.Fatalf("deframer after the FPDU: %v", err)
		}
		// Octets with valid markers reserialize exactly (markers are
		// written afresh, so invalid ones cannot).
		if !fr.Markers || m.MarkersValid {
			if got := reserialize(t, &m, bytes.Clone(m.Payload)); !bytes.Equal(got, data[:m.WireLen]) {
				t.Fatalf("reserialized\n%x\nwant\n%x", got, data[:m.WireLen])
			}
		}
	})
}

func FuzzDDP(f *testing.F) {
	for _, b := range validFPDUs(f) {
		f.Add(b[2:])
	}
	f.Add(mustHex(f, siwTerminateHex))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d DDP
		err := d.DecodeFromBytes(data, gopacket.NilDecodeFeedback)
		h, perr := ddp.Parse(data)
		var ve *ddp.VersionError
		if (err == nil) != (perr == nil) || (err != nil && !errors.As(err, &ve) && h != nil) {
			t.Fatalf("layer %v, ddp.Parse %v", err, perr)
		}
		if len(d.Contents) == 0 {
			return
		}
		if d.Tagged != h.Tagged() || d.Last != h.Last() || len(d.Contents) != h.Len() {
			t.Fatalf("%+v vs %x", d, h)
		}
		if got := reserialize(t, &d, d.Payload()); !bytes.Equal(got, data) {
			t.Fatalf("reserialized\n%x\nwant\n%x", got, data)
		}
		if d.NextLayerType() != d.Opcode.LayerType() {
			t.Fatal("next layer")
		}
	})
}

func FuzzRDMAPReadRequest(f *testing.F) {
	f.Add(mustHex(f, siwReadRequestHex)[20:48])
	f.Fuzz(func(t *testing.T, data []byte) {
		var r RDMAPReadRequest
		if err := r.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			if len(data) >= wire.ReadRequestLen {
				t.Fatal(err)
			}
			return
		}
		if got := reserialize(t, &r, r.Payload); !bytes.Equal(got, data) {
			t.Fatalf("reserialized\n%x\nwant\n%x", got, data)
		}
	})
}

func FuzzRDMAPTerminate(f *testing.F) {
	f.Add(mustHex(f, siwTerminateHex)[18:])
	for _, b := range validFPDUs(f) {
		if len(b) > 20 && b[3]&0x0f == byte(wire.OpTerminate) {
			f.Add(b[20:])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var term RDMAPTerminate
		if err := term.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		if len(term.Contents) != term.Len() {
			t.Fatalf("contents %d, Len %d", len(term.Contents), term.Len())
		}
		if got := reserialize(t, &term, term.Payload); !bytes.Equal(got, data) {
			t.Fatalf("reserialized (%s layout)\n%x\nwant\n%x", term.Layout, got, data)
		}
	})
}

func FuzzRDMAPAtomicRequest(f *testing.F) {
	for _, b := range validFPDUs(f) {
		if len(b) > 20 && b[3]&0x0f == byte(wire.OpAtomicRequest) {
			f.Add(b[20:])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a RDMAPAtomicRequest
		if err := a.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		if got := reserialize(t, &a, a.Payload); !bytes.Equal(got, data) {
			t.Fatalf("reserialized\n%x\nwant\n%x", got, data)
		}
	})
}

func FuzzRDMAPAtomicResponse(f *testing.F) {
	for _, b := range validFPDUs(f) {
		if len(b) > 20 && b[3]&0x0f == byte(wire.OpAtomicResponse) {
			f.Add(b[20:])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a RDMAPAtomicResponse
		if err := a.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		if got := reserialize(t, &a, a.Payload); !bytes.Equal(got, data) {
			t.Fatalf("reserialized\n%x\nwant\n%x", got, data)
		}
	})
}

// captureStreams returns, for the first connection of a capture, the
// octets of each direction as our decoder consumed them.
func captureStreams(tb testing.TB, name string) (i2r, r2i []byte) {
	for _, r := range decodeAll(tb, readCapture(tb, name)) {
		if r.Conn != "" && r.Index >= 0 && len(r.Wire) > 0 {
			if r.Dir == DirI2R {
				i2r = append(i2r, r.Wire...)
			} else {
				r2i = append(r2i, r.Wire...)
			}
		}
		if r.Kind == KindRejected || r.Err != "" {
			break
		}
	}
	return i2r, r2i
}

// FuzzStreamDecoder feeds two arbitrary streams as one TCP connection,
// once as one segment per direction and once cut into random segments,
// reordered, retransmitted and overlapped (as the seed says). The frames
// and notes must be the same; nothing may panic.
func FuzzStreamDecoder(f *testing.F) {
	// Seeds stay small: the fuzzer minimizes every new input it keeps,
	// and that is slow for inputs of many kilobytes.
	crc := MPAFraming{CRC: true, FullOperation: true}
	var a, b []byte
	a = mpaFrame(f, mpa.Frame{Rev: 2, Enhanced: true, IRD: 4, ORD: 4, PrivateData: []byte("pd")})
	b = mpaFrame(f, mpa.Frame{Reply: true, Rev: 2, CRC: true, Enhanced: true, IRD: 4, ORD: 4})
	for i, fp := range allOpcodeFPDUs(f, crc) {
		if len(fp) < 200 {
			if i%2 == 0 {
				a = append(a, fp...)
			} else {
				b = append(b, fp...)
			}
		}
	}
	f.Add(a, b, uint64(1))
	fr := mpa.Framer{CRC: true, Markers: true}
	marked := fr.AppendFPDU(nil, mustHex(f, siwSendHex)[2:20], pattern(600, 1))
	f.Add(append(mpaFrame(f, mpa.Frame{Rev: 1, CRC: true}), marked...),
		append(mpaFrame(f, mpa.Frame{Reply: true, Rev: 1, Markers: true}), marked...), uint64(2))
	for _, name := range []string{"crc-rping-default", "p2p-rping-default", "ucmatose", "guest-server-for-host"} {
		i2r, r2i := captureStreams(f, name)
		f.Add(i2r, r2i, uint64(len(i2r)))
	}
	f.Fuzz(func(t *testing.T, i2r, r2i []byte, seed uint64) {
		if len(i2r)+len(r2i) > 1<<20 {
			return
		}
		want := streamRecords(t, i2r, r2i, nil)
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		got := streamRecords(t, i2r, r2i, rng)
		if startsLikeRequest(i2r) && startsLikeRequest(r2i) {
			// Both sides begin with the Request key: the Initiator is
			// whoever sends it first, so which side that is depends on the
			// order the segments arrive in. Only panics count.
			return
		}
		if len(want) != len(got) {
			t.Fatalf("%d records whole, %d cut:\n%v\n%v", len(want), len(got), want, got)
		}
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("record %d whole:\n%s\ncut:\n%s", i, want[i], got[i])
			}
		}
	})
}

// startsLikeRequest reports whether b is, as far as it goes, the start of
// an MPA Request key.
func startsLikeRequest(b []byte) bool {
	k := min(len(b), mpa.KeyLen)
	return bytes.Equal(b[:k], mpa.KeyRequest[:k])
}

// streamRecords decodes one connection carrying i2r and r2i. With rng nil
// each direction is one segment; otherwise segments are cut at random,
// mangled and interleaved. It returns the records as sorted strings
// (direction, index, everything decoded).
func streamRecords(t *testing.T, i2r, r2i []byte, rng *rand.Rand) []string {
	c := &synthCapture{}
	x := c.conn(40000, 7174)
	x.open()
	cut := func(side int, b []byte) {
		if rng == nil {
			x.send(side, b)
			return
		}
		for len(b) > 0 {
			n := min(len(b), 1+rng.IntN(300))
			x.send(side, b[:n])
			b = b[n:]
		}
	}
	cut(0, i2r)
	cut(1, r2i)
	pkts := c.pkts
	if rng != nil {
		pkts = mangle(rng, pkts)
	}
	var out []string
	d := NewStreamDecoder(func(r *Record) {
		if r.Kind == KindFPDU && r.MPA != nil && r.MPA.WireLen != len(r.Wire) {
			t.Fatalf("WireLen %d, %d octets", r.MPA.WireLen, len(r.Wire))
		}
		out = append(out, recordString(r))
	})
	for _, p := range pkts {
		tcp := &gplayers.TCP{Seq: p.seq, Ack: p.ack, SYN: p.syn, FIN: p.fin, ACK: p.ackFlag}
		tcp.Payload = p.payload
		d.Segment(p.src, p.dst, tcp, false)
	}
	d.Close()
	slices.Sort(out)
	return out
}

// recordString renders everything a record says except its packet.
func recordString(r *Record) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %03d %s %s %q err=%v wire=%x payload=%x", r.Dir, r.Index, r.Conn, r.Kind, r.Note, r.Err, r.Wire, r.Payload)
	if s := r.Startup; s != nil {
		fmt.Fprintf(&b, " startup=%+v", s.Frame)
	}
	if m := r.MPA; m != nil {
		fmt.Fprintf(&b, " mpa=%d/%x/%v/%d/%v", m.ULPDULength, m.CRC, m.CRCValid, m.MarkerCount, m.MarkersValid)
	}
	if d := r.DDP; d != nil {
		fmt.Fprintf(&b, " ddp=%v/%v/%d/%d/%d/%d/%d/%d/%d/%d/%s/%d", d.Tagged, d.Last, d.Version, d.Reserved, d.STag, d.TO,
			d.QN, d.MSN, d.MO, d.RDMAPVersion, d.Opcode, d.InvalidateSTag)
	}
	if x := r.ReadRequest; x != nil {
		fmt.Fprintf(&b, " rr=%d/%d/%d/%d/%d", x.SinkSTag, x.SinkTO, x.Size, x.SrcSTag, x.SrcTO)
	}
	if x := r.Terminate; x != nil {
		fmt.Fprintf(&b, " term=%+v", x.Terminate)
	}
	if x := r.AtomicRequest; x != nil {
		fmt.Fprintf(&b, " areq=%+v", x.AtomicRequest)
	}
	if x := r.AtomicResponse; x != nil {
		fmt.Fprintf(&b, " aresp=%+v", x.AtomicResponse)
	}
	return b.String()
}

// FuzzDecodeCapture feeds arbitrary files to DecodeCapture: it may fail,
// but must not panic or hang.
func FuzzDecodeCapture(f *testing.F) {
	for _, name := range []string{"crc-rping-default", "guest-client-to-host-replied", "p2p-rping-default"} {
		f.Add(readCapture(f, name))
	}
	c := &synthCapture{}
	x := c.conn(40000, 7174)
	x.open()
	x.send(0, mpaFrame(f, mpa.Frame{Rev: 1, CRC: true}))
	x.send(1, mpaFrame(f, mpa.Frame{Reply: true, Rev: 1, Markers: true}))
	fr := mpa.Framer{CRC: true, Markers: true}
	x.send(0, fr.AppendFPDU(nil, mustHex(f, siwSendHex)[2:20], pattern(600, 1)), 100)
	f.Add(c.pcapng(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		_ = DecodeCapture(bytes.NewReader(data), func(r *Record) {
			n++
			if r.Conn.Initiator == (netip.AddrPort{}) {
				t.Fatalf("record without a connection: %+v", r)
			}
		})
	})
}
