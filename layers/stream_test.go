package layers

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
)

var cmpRecs = cmp.Options{
	cmpopts.IgnoreUnexported(MPA{}),
	cmp.Comparer(bytes.Equal), // nil equals empty; and fast on large payloads
}

var ignorePacket = cmpopts.IgnoreFields(rec{}, "Packet")

// byDirection compares records per direction: reordering segments of the
// two directions may interleave their frames differently.
var byDirection = cmpopts.SortSlices(func(a, b rec) bool {
	return a.Dir < b.Dir || a.Dir == b.Dir && a.Index < b.Index
})

// TestCapturesDecodeCompletely runs every Linux siw capture through the
// stream decoder: every frame decodes, every CRC checks where CRC was
// negotiated, and the only other records are the ones the captures call
// for (guest-server-for-host.pcap holds two rejected connections and ten
// rev 3 Requests, which siw answers by closing).
func TestCapturesDecodeCompletely(t *testing.T) {
	for _, name := range captureNames(t) {
		t.Run(name, func(t *testing.T) {
			recs := decodeAll(t, readCapture(t, name))
			counts := map[string]int{}
			for _, r := range recs {
				switch {
				case r.Err != "":
					counts["malformed: "+r.Err]++
				case r.Kind == KindFPDU:
					counts["fpdu"]++
					if r.MPA.Framing.CRC {
						counts["crc"]++
						if !r.MPA.CRCValid {
							t.Errorf("packet %d: bad CRC", r.Packet)
						}
					} else if r.MPA.CRC != 0 {
						t.Errorf("packet %d: CRC field %#x without CRC", r.Packet, r.MPA.CRC)
					}
					if r.DDP == nil || r.DDP.Version != 1 || r.DDP.RDMAPVersion != 1 {
						t.Errorf("packet %d: DDP %+v", r.Packet, r.DDP)
					}
				case r.Kind == KindMPARequest || r.Kind == KindMPAReply:
					counts[r.Kind.String()]++
				default:
					counts[r.Kind.String()+": "+r.Note]++
				}
			}
			want := map[string]map[string]int{
				"crc-rping-default":            {"mpa_request": 1, "mpa_reply": 1, "fpdu": 21, "crc": 21},
				"rping-default":                {"mpa_request": 1, "mpa_reply": 1, "fpdu": 21},
				"p2p-rping-default":            {"mpa_request": 1, "mpa_reply": 1, "fpdu": 22},
				"ucmatose":                     {"mpa_request": 1, "mpa_reply": 1, "fpdu": 20},
				"ib_write_bw":                  {"mpa_request": 2, "mpa_reply": 2, "fpdu": 43},
				"guest-client-to-host-replied": {"mpa_request": 1, "mpa_reply": 1, "fpdu": 1},
				"guest-server-for-host": {"mpa_request": 8, "mpa_reply": 8,
					"rejected: MPA Reply has R set: connection rejected, no FPDUs follow": 2,
					"malformed: mpa: unknown revision 3":                                  10},
			}[name]
			if d := cmp.Diff(want, counts); d != "" {
				t.Errorf("record counts (-want +got):\n%s", d)
			}
		})
	}
}

// convStreams is one synthetic connection as the two byte streams it
// carries: handshake frames and FPDUs of each direction.
type convStreams struct {
	req, rep   []byte
	i2r, r2i   []byte // FPDUs
	i2rN, r2iN int    // how many
}

func crcConv(tb testing.TB) convStreams {
	crc := MPAFraming{CRC: true, FullOperation: true}
	var s convStreams
	s.req = mpaFrame(tb, mpa.Frame{Rev: 2, Enhanced: true, IRD: 4, ORD: 4, PrivateData: []byte("private")})
	s.rep = mpaFrame(tb, mpa.Frame{Reply: true, Rev: 2, CRC: true, Enhanced: true, IRD: 4, ORD: 4})
	for _, f := range allOpcodeFPDUs(tb, crc) {
		s.i2r = append(s.i2r, f...)
		s.i2rN++
	}
	// Enough octets r2i that the responder's sequence numbers wrap.
	for i, f := range allOpcodeFPDUs(tb, crc) {
		if i%2 == 0 {
			s.r2i = append(s.r2i, f...)
			s.r2iN++
		}
	}
	return s
}

// build lays the streams out as one connection with i2r and r2i FPDUs cut
// into segments of the given sizes (the last repeating).
func (s convStreams) build(c *synthCapture, port uint16, i2rSizes, r2iSizes []int) {
	x := c.conn(port, 7174)
	x.open()
	x.send(0, s.req)
	x.send(1, s.rep)
	x.send(0, s.i2r, i2rSizes...)
	x.send(1, s.r2i, r2iSizes...)
	x.close()
}

// checkCompletion checks, for an in-order capture, that every frame record
// names the packet that holds its last octet.
func checkCompletion(t *testing.T, c *synthCapture, recs []rec) {
	t.Helper()
	// Stream offsets of each direction's frames, from their lengths.
	end := map[string]uint64{}
	for _, r := range recs {
		if r.Kind != KindMPARequest && r.Kind != KindMPAReply && r.Kind != KindFPDU {
			continue
		}
		key := r.Conn + r.Dir.String()
		end[key] += uint64(len(r.Wire))
		last := end[key] - 1
		want := -1
		for i, p := range c.pkts {
			ep := fmt.Sprintf("%s-%s", p.src, p.dst)
			if r.Dir == DirR2I {
				ep = fmt.Sprintf("%s-%s", p.dst, p.src)
			}
			if ep != r.Conn || len(p.payload) == 0 {
				continue
			}
			// Offset of this segment in its stream: from the SYN.
			off := streamOffset(c, i)
			if last >= off && last < off+uint64(len(p.payload)) {
				want = i + 1
				break
			}
		}
		if r.Packet != want {
			t.Errorf("%s %s #%d completes in packet %d, want %d", r.Conn, r.Dir, r.Index, r.Packet, want)
		}
	}
}

// streamOffset returns the stream offset of packet i's payload.
func streamOffset(c *synthCapture, i int) uint64 {
	p := c.pkts[i]
	for _, q := range c.pkts[:i+1] {
		if q.src == p.src && q.dst == p.dst && q.syn {
			return uint64(p.seq - q.seq - 1)
		}
	}
	panic("no SYN")
}

func TestStreamSegmentation(t *testing.T) {
	s := crcConv(t)
	ref := &synthCapture{}
	s.build(ref, 40000, nil, nil)
	want := decodeAll(t, ref.pcap(t))
	if n := len(want); n != 2+s.i2rN+s.r2iN {
		t.Fatalf("%d records, want %d", n, 2+s.i2rN+s.r2iN)
	}
	for _, r := range want {
		if r.Err != "" || (r.MPA != nil && !r.MPA.CRCValid) {
			t.Fatalf("reference: %+v", r)
		}
	}
	checkCompletion(t, ref, want)
	for _, sizes := range [][]int{{1}, {2}, {3}, {7}, {13, 1}, {64}, {999}, {1460}, {4, 4000}, {1 << 20}} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			c := &synthCapture{}
			s.build(c, 40000, sizes, sizes)
			got := decodeAll(t, c.pcap(t))
			if d := cmp.Diff(want, got, cmpRecs, ignorePacket); d != "" {
				t.Errorf("records differ from one FPDU per segment (-want +got):\n%s", d)
			}
			checkCompletion(t, c, got)
		})
	}
	// Handshake and FPDUs of a direction all in one segment.
	t.Run("coalesced", func(t *testing.T) {
		c := &synthCapture{}
		x := c.conn(40000, 7174)
		x.open()
		x.send(1, s.rep) // the Reply first: the decoder must wait for the Request
		x.send(0, append(bytes.Clone(s.req), s.i2r...))
		x.send(1, s.r2i)
		x.close()
		got := decodeAll(t, c.pcap(t))
		if d := cmp.Diff(want, got, cmpRecs, ignorePacket, byDirection); d != "" {
			t.Errorf("records differ (-want +got):\n%s", d)
		}
	})
}

// TestStreamReorderRetransmit shuffles, duplicates and re-cuts segments:
// out-of-order delivery, retransmissions and overlapping retransmissions
// must not change what is decoded.
func TestStreamReorderRetransmit(t *testing.T) {
	s := crcConv(t)
	ref := &synthCapture{}
	s.build(ref, 40000, []int{100}, []int{100})
	want := decodeAll(t, ref.pcap(t))
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			c := &synthCapture{pkts: mangle(rng, ref.pkts)}
			got := decodeAll(t, c.pcap(t))
			if d := cmp.Diff(want, got, cmpRecs, ignorePacket, byDirection); d != "" {
				t.Errorf("records differ (-want +got):\n%s", d)
			}
		})
	}
}

// mangle reorders data segments within a window of 8, and adds exact and
// overlapping retransmissions (a retransmission may cover two original
// segments, cut at a different place). SYNs stay first.
func mangle(rng *rand.Rand, in []synthPkt) []synthPkt {
	var out []synthPkt
	var data []synthPkt
	flush := func() {
		rng.Shuffle(len(data), func(i, j int) {
			if d := i - j; d < 8 && d > -8 {
				data[i], data[j] = data[j], data[i]
			}
		})
		out = append(out, data...)
		data = nil
	}
	for i, p := range in {
		if p.syn || len(p.payload) == 0 {
			flush()
			out = append(out, p)
			continue
		}
		data = append(data, p)
		switch rng.IntN(4) {
		case 0: // exact retransmission, later
			data = append(data, p)
		case 1: // overlapping retransmission of this and the next segment
			if i+1 < len(in) && in[i+1].src == p.src && len(in[i+1].payload) > 0 {
				both := append(bytes.Clone(p.payload), in[i+1].payload...)
				cut := 1 + rng.IntN(len(both)-1)
				q := p
				q.seq += uint32(cut)
				q.payload = both[cut:]
				data = append(data, q)
			}
		}
	}
	flush()
	return out
}

func TestStreamNoHandshake(t *testing.T) {
	s := crcConv(t)
	full := &synthCapture{}
	s.build(full, 40000, []int{500}, []int{500})
	// The capture starts after the Reply.
	var start int
	for i, p := range full.pkts {
		if bytes.Equal(p.payload, s.rep) {
			start = i + 1
		}
	}
	c := &synthCapture{pkts: full.pkts[start:]}
	got := decodeAll(t, c.pcap(t))
	if len(got) != 1 || got[0].Kind != KindNoHandshake || got[0].Conn != "127.0.0.1:40000-127.0.0.1:7174" ||
		!strings.Contains(got[0].Note, "handshake is not in the capture") {
		t.Fatalf("records %+v", got)
	}
	// A responder's segment seen first puts the responder first: nothing
	// is guessed.
	c = &synthCapture{}
	for _, p := range full.pkts[start:] {
		if p.src.Port() == 7174 {
			c.pkts = append(c.pkts, p)
		}
	}
	got = decodeAll(t, c.pcap(t))
	if len(got) != 1 || got[0].Kind != KindNoHandshake || got[0].Conn != "127.0.0.1:7174-127.0.0.1:40000" {
		t.Fatalf("records %+v", got)
	}
	// A connection that never carries data.
	c = &synthCapture{}
	x := c.conn(40001, 7175)
	x.open()
	x.close()
	got = decodeAll(t, c.pcap(t))
	if len(got) != 1 || got[0].Kind != KindNoHandshake || got[0].Note != "no MPA Request in the capture (no TCP payload)" ||
		got[0].Conn != "127.0.0.1:40001-127.0.0.1:7175" {
		t.Fatalf("records %+v", got)
	}
}

// TestStreamMarkers decodes connections with markers negotiated, built by
// the mpa package's Framer: both directions (both sides set M), and only
// initiator to responder (only the Reply sets M).
func TestStreamMarkers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		reqM, repM     bool
		wantI2R, wantR bool
	}{
		{"both", true, true, true, true},
		{"i2r only", false, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &synthCapture{}
			x := c.conn(40000, 7174)
			x.open()
			x.send(0, mpaFrame(t, mpa.Frame{Rev: 1, Markers: tc.reqM, CRC: true}))
			x.send(1, mpaFrame(t, mpa.Frame{Reply: true, Rev: 1, Markers: tc.repM, CRC: true}))
			// Each side frames as the peer asked: the initiator inserts
			// markers when the Reply has M, the responder when the Request
			// has M.
			i2r := mpa.Framer{CRC: true, Markers: tc.repM}
			r2i := mpa.Framer{CRC: true, Markers: tc.reqM}
			var a, b []byte
			var payloads [][]byte
			for i, n := range []int{0, 1, 100, 490, 491, 492, 1500, 3000, 65000 - 18, 7} {
				p := pattern(n, byte(i))
				payloads = append(payloads, p)
				h := untagged(OpSend, 0, uint32(i+1), 0, true)
				a = i2r.AppendFPDU(a, ddpHeader(t, h), p)
				b = r2i.AppendFPDU(b, ddpHeader(t, h), p)
			}
			x.send(0, a, 333, 1, 1460)
			x.send(1, b, 1000)
			x.close()
			recs := decodeAll(t, c.pcap(t))
			seen := map[Dir]int{}
			for _, r := range recs {
				if r.Kind != KindFPDU {
					continue
				}
				want := tc.wantI2R
				if r.Dir == DirR2I {
					want = tc.wantR
				}
				m := r.MPA
				if r.Err != "" || !m.CRCValid || m.Framing.Markers != want || (want && !m.MarkersValid) {
					t.Errorf("%s #%d: err %q %+v", r.Dir, r.Index, r.Err, m)
				}
				if !bytes.Equal(r.Payload, payloads[r.Index-1]) {
					t.Errorf("%s #%d: payload differs", r.Dir, r.Index)
				}
				if want && len(r.Payload) > 1000 && m.MarkerCount == 0 {
					t.Errorf("%s #%d: no markers in %d octets", r.Dir, r.Index, m.WireLen)
				}
				seen[r.Dir]++
			}
			if seen[DirI2R] != len(payloads) || seen[DirR2I] != len(payloads) {
				t.Errorf("FPDUs seen %v", seen)
			}
		})
	}
}

func ddpHeader(tb testing.TB, d DDP) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := d.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
		tb.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func TestStreamPcapng(t *testing.T) {
	s := crcConv(t)
	c := &synthCapture{}
	s.build(c, 40000, []int{77}, []int{1460})
	want := decodeAll(t, c.pcap(t))
	got := decodeAll(t, c.pcapng(t))
	if d := cmp.Diff(want, got, cmpRecs); d != "" {
		t.Errorf("pcapng records differ from pcap (-pcap +pcapng):\n%s", d)
	}
}

func TestStreamIPv6(t *testing.T) {
	s := crcConv(t)
	c := &synthCapture{}
	s.build(c, 40000, []int{500}, nil)
	want := decodeAll(t, c.pcap(t))
	lo6 := netip.MustParseAddr("::1")
	for i := range c.pkts {
		c.pkts[i].src = netip.AddrPortFrom(lo6, c.pkts[i].src.Port())
		c.pkts[i].dst = netip.AddrPortFrom(lo6, c.pkts[i].dst.Port())
	}
	got := decodeAll(t, c.pcap(t))
	for i := range want {
		want[i].Conn = "[::1]:40000-[::1]:7174"
	}
	if d := cmp.Diff(want, got, cmpRecs); d != "" {
		t.Errorf("IPv6 records differ (-want +got):\n%s", d)
	}
}

func TestStreamRejected(t *testing.T) {
	c := &synthCapture{}
	x := c.conn(40000, 7174)
	x.open()
	x.send(0, mpaFrame(t, mpa.Frame{Rev: 2, Markers: true, Enhanced: true, IRD: 1, ORD: 1}))
	x.send(1, mpaFrame(t, mpa.Frame{Reply: true, Rev: 2, Reject: true, Enhanced: true}))
	x.send(0, []byte("octets after the reject"))
	x.close()
	got := decodeAll(t, c.pcap(t))
	var kinds []string
	for _, r := range got {
		kinds = append(kinds, fmt.Sprintf("%s %s %s", r.Kind, r.Dir, r.Note))
	}
	want := []string{
		"mpa_request i2r ",
		"mpa_reply r2i ",
		"rejected  MPA Reply has R set: connection rejected, no FPDUs follow",
		"note i2r 23 octets after the rejecting Reply not decoded",
	}
	if d := cmp.Diff(want, kinds); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
	if !got[1].Startup.Reject {
		t.Errorf("reply %+v", got[1].Startup)
	}
}

// TestStreamMalformed checks that malformed FPDUs are reported and do not
// stop the direction, and that a malformed handshake frame stops its
// connection and no other.
func TestStreamMalformed(t *testing.T) {
	crc := MPAFraming{CRC: true, FullOperation: true}
	good := fpdu(t, crc, untagged(OpSend, 0, 1, 0, true), nil, pattern(10, 1))
	badCRC := bytes.Clone(good)
	badCRC[20] ^= 0xff
	short := fpdu(t, crc, DDP{}, nil, nil)[:0]
	short = mpa.AppendFPDU(short, nil, []byte{0x41, 0x43, 0, 0}, true) // 4 octets: no DDP header
	v2 := ddpHeader(t, untagged(OpSend, 0, 2, 0, true))
	v2[0] = v2[0]&^ddp.VersionMask | 2
	badVersion := mpa.AppendFPDU(nil, v2, pattern(3, 2), true)
	rrShort := mpa.AppendFPDU(nil, ddpHeader(t, untagged(OpReadRequest, 1, 1, 0, true)), pattern(10, 3), true)
	last := fpdu(t, crc, untagged(OpSend, 0, 3, 0, true), nil, pattern(10, 4))

	c := &synthCapture{}
	x := c.conn(40000, 7174)
	x.open()
	x.send(0, mpaFrame(t, mpa.Frame{Rev: 1, CRC: true}))
	x.send(1, mpaFrame(t, mpa.Frame{Reply: true, Rev: 1}))
	for _, f := range [][]byte{good, badCRC, short, badVersion, rrShort, last} {
		x.send(0, f)
	}
	x.close()
	// A second connection whose responder answers with a Request key.
	y := c.conn(40001, 7175)
	y.open()
	y.send(0, mpaFrame(t, mpa.Frame{Rev: 1}))
	y.send(1, mpaFrame(t, mpa.Frame{Rev: 1}))
	y.send(1, good)
	y.close()
	got := decodeAll(t, c.pcap(t))
	var lines []string
	for _, r := range got {
		l := fmt.Sprintf("%d %s %s #%d", r.Packet, r.Kind, r.Dir, r.Index)
		if r.MPA != nil {
			l += fmt.Sprintf(" crc_ok=%v", r.MPA.CRCValid)
		}
		if r.DDP != nil {
			l += fmt.Sprintf(" ddp_v%d %s", r.DDP.Version, r.DDP.Opcode)
		}
		if r.RR != nil {
			l += " rr"
		}
		if r.Err != "" {
			l += " err=" + r.Err
		}
		if r.Note != "" {
			l += " note=" + r.Note
		}
		lines = append(lines, l)
	}
	want := []string{
		"4 mpa_request i2r #0",
		"5 mpa_reply r2i #0",
		"6 fpdu i2r #1 crc_ok=true ddp_v1 send",
		"7 fpdu i2r #2 crc_ok=false ddp_v1 send",
		"8 fpdu i2r #3 crc_ok=true err=ddp: short header",
		"9 fpdu i2r #4 crc_ok=true ddp_v2 send err=ddp: invalid version 2",
		"10 fpdu i2r #5 crc_ok=true ddp_v1 read_request err=rdmap: short header",
		"11 fpdu i2r #6 crc_ok=true ddp_v1 send",
		"18 mpa_request i2r #0",
		"19 mpa_reply r2i #0 err=layers: expected an MPA Reply frame, got a Request key",
		// Notes made when a connection ends carry the packet that ended it.
		"22 note r2i #-1 note=" + fmt.Sprint(len(good)) + " octets after the malformed handshake frame not decoded",
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
}

func TestStreamGapAndTruncation(t *testing.T) {
	s := crcConv(t)
	full := &synthCapture{}
	s.build(full, 40000, []int{400}, []int{400})
	want := decodeAll(t, full.pcap(t))
	// Drop the 5th i2r data segment.
	var c synthCapture
	n := 0
	for _, p := range full.pkts {
		if p.src.Port() == 40000 && len(p.payload) > 0 {
			n++
			if n == 6 { // the Request is the first
				continue
			}
		}
		c.pkts = append(c.pkts, p)
	}
	got := decodeAll(t, c.pcap(t))
	// Two notes: the octets before the gap that end inside an FPDU, and
	// the gap with what waits behind it.
	var i2r, r2i, notes int
	for _, r := range got {
		switch {
		case r.Kind == KindNote:
			notes++
			if r.Dir != DirI2R || !strings.HasPrefix(r.Note, "TCP stream gap at offset "+fmt.Sprint(len(s.req)+4*400)) &&
				!strings.HasPrefix(r.Note, "capture ends inside an FPDU") {
				t.Errorf("note %q", r.Note)
			}
		case r.Dir == DirI2R:
			i2r++
		case r.Dir == DirR2I:
			r2i++
		}
	}
	if i2r >= s.i2rN || r2i != s.r2iN+1 || notes != 2 {
		t.Errorf("i2r %d r2i %d notes %d", i2r, r2i, notes)
	}
	// Frames before the gap are as in the full capture.
	for i := range got[:5] {
		if d := cmp.Diff(want[i], got[i], cmpRecs, ignorePacket); d != "" {
			t.Errorf("record %d (-want +got):\n%s", i, d)
		}
	}

	// A capture that ends inside an FPDU (and without the FINs).
	c = synthCapture{pkts: full.pkts[:len(full.pkts)-3]}
	last := c.pkts[len(c.pkts)-1]
	last.payload = last.payload[:len(last.payload)-5]
	c.pkts[len(c.pkts)-1] = last
	got = decodeAll(t, c.pcap(t))
	end := got[len(got)-1]
	// The note is numbered with the packet it refers to: the last of
	// that direction, here the capture's last.
	if end.Kind != KindNote || end.Dir != DirR2I || !strings.HasPrefix(end.Note, "capture ends inside an FPDU: ") || end.Packet != len(c.pkts) {
		t.Errorf("last record %+v", end)
	}
}

func TestStreamNoReplyAndPortReuse(t *testing.T) {
	c := &synthCapture{}
	x := c.conn(40000, 7174)
	x.open()
	x.send(0, mpaFrame(t, mpa.Frame{Rev: 2, Enhanced: true}))
	x.close()
	// The same ports again, a new initial sequence number.
	y := c.conn(40000, 7174)
	y.seq = [2]uint32{12345, 67890}
	y.open()
	y.send(0, mpaFrame(t, mpa.Frame{Rev: 1}))
	y.send(1, mpaFrame(t, mpa.Frame{Reply: true, Rev: 1}))
	y.send(0, fpdu(t, MPAFraming{FullOperation: true}, untagged(OpSend, 0, 1, 0, true), nil, nil))
	got := decodeAll(t, c.pcap(t))
	var lines []string
	for _, r := range got {
		lines = append(lines, fmt.Sprintf("%d %s %s %s", r.Packet, r.Kind, r.Dir, r.Note))
	}
	want := []string{
		"4 mpa_request i2r ",
		"6 note r2i no MPA Reply in the capture", // when the connection ends
		"11 mpa_request i2r ",
		"12 mpa_reply r2i ",
		"13 fpdu i2r ",
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
}

func TestDecodeCaptureErrors(t *testing.T) {
	good := synthTsharkCapture(t).pcap(t)
	for name, tc := range map[string]struct {
		data []byte
		want error
	}{
		"empty":       {nil, ErrNotCapture},
		"short":       {[]byte{0xd4, 0xc3}, ErrNotCapture},
		"not capture": {[]byte("GET / HTTP/1.1\r\n\r\n"), ErrNotCapture},
		"bad header":  {good[:10], nil},
		"cut":         {good[:len(good)-7], nil},
	} {
		var n int
		err := DecodeCapture(bytes.NewReader(tc.data), func(*Record) { n++ })
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: err %v", name, err)
		}
		if name == "cut" && n < 30 {
			t.Errorf("cut: %d records before the error", n)
		}
	}
	// A link type the decoder cannot take apart.
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65536, gplayers.LinkType(147)); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: 4, Length: 4}, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := DecodeCapture(&buf, nil); !errors.Is(err, ErrUnsupportedLinkType) {
		t.Errorf("link type 147: %v", err)
	}
}

// TestStreamSnapLength treats a packet cut by the snap length as missing
// data, not as the whole segment.
func TestStreamSnapLength(t *testing.T) {
	s := crcConv(t)
	c := &synthCapture{}
	s.build(c, 40000, []int{1000}, nil)
	d := NewStreamDecoder(nil)
	var recs []rec
	d.emit = func(r *Record) { recs = append(recs, copyRecord(r)) }
	cut := 0
	for i, p := range c.pkts {
		f := p.frame(t)
		ci := c.ci(i, len(f))
		if p.src.Port() == 40000 && len(p.payload) == 1000 && cut == 0 {
			cut = i + 1
			ci.CaptureLength = 100
			f = f[:100]
		}
		if err := d.Packet(ci, f, gplayers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	var gaps int
	for _, r := range recs {
		if r.Err != "" {
			t.Errorf("packet %d: %s", r.Packet, r.Err)
		}
		if r.Kind == KindNote && strings.HasPrefix(r.Note, "TCP stream gap") {
			gaps++
		}
	}
	if gaps != 1 {
		t.Errorf("%d gap notes after cutting packet %d", gaps, cut)
	}
}
