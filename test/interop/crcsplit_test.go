//go:build interop

package interop

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gosiw/gosiw/mpa"
)

// Linux siw (since the 2022 fix that makes its receive path consume every
// skb it is handed, in 6.1 and later) reassembles an FPDU's trailer (pad and
// CRC) wrongly when the trailer is split across two skbs: siw_get_trailer
// copies each piece to the start of the trailer buffer instead of after the
// bytes it already has. A CRC whose first k bytes come in one skb and the
// rest in the next is read as bytes k..3 followed by what the buffer held
// (for k = 3: C3 C1 C2 stale), so siw reports "crc error. in: X, own Y"
// with Y the right CRC. Whether a trailer is split depends only on how the
// TCP stream reaches the guest in segments (qemu's slirp re-segments it),
// not on the sender; the helpers here find such FPDUs in a capture and
// predict what siw reads, so that a logged error can be matched to one.

// trailerSplit is an FPDU of a capture whose trailer straddles a TCP
// segment boundary.
type trailerSplit struct {
	Offset int    // of the FPDU in the direction's byte stream (after the MPA Reply)
	ULPDU  int    // ULPDU_Length
	Pad    int    // pad bytes before the CRC
	K      int    // trailer bytes in the first segment
	CRC    uint32 // the CRC field as siw prints it (mpa.GetCRC)
	// In is what siw reads as CRC (mpa.GetCRC of its trailer buffer), with
	// InMask marking the bytes that come from this FPDU (the others are left
	// over from an earlier one).
	In, InMask uint32
	// Own is the CRC siw computes: CRC when there is no pad, else the CRC
	// over the misplaced pad bytes (OwnKnown false when some are stale).
	Own      uint32
	OwnKnown bool
}

// fpduScan is the result of checking one direction of a capture.
type fpduScan struct {
	FPDUs, BadCRC int
	Splits        []trailerSplit
}

// scanResponderStream reassembles, from a pcap, the TCP stream sent from
// source port srcPort (the MPA responder's side of one or more connections:
// the first connection with data is used), walks its MPA Reply and FPDUs
// (no markers, CRC on), checks every CRC and lists the FPDUs whose trailer
// is split between two segments as captured.
func scanResponderStream(path string, srcPort uint16) (fpduScan, error) {
	var res fpduScan
	f, err := os.Open(path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return res, err
	}
	type seg struct {
		seq  uint32
		data []byte
	}
	type conn struct {
		isn  uint32
		segs []seg
	}
	conns := map[uint16]*conn{} // by destination port
	var order []uint16
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.NoCopy)
		tl, ok := p.Layer(gplayers.LayerTypeTCP).(*gplayers.TCP)
		if !ok || uint16(tl.SrcPort) != srcPort {
			continue
		}
		dp := uint16(tl.DstPort)
		if tl.SYN {
			if conns[dp] == nil {
				order = append(order, dp)
			}
			conns[dp] = &conn{isn: tl.Seq + 1} // a reused port starts over
			continue
		}
		c := conns[dp]
		if c == nil || len(tl.Payload) == 0 {
			continue
		}
		c.segs = append(c.segs, seg{tl.Seq - c.isn, append([]byte(nil), tl.Payload...)})
	}
	if len(order) == 0 {
		return res, fmt.Errorf("no SYN from port %d in %s", srcPort, path)
	}
	for _, dp := range order {
		c := conns[dp]
		sort.SliceStable(c.segs, func(i, j int) bool { return c.segs[i].seq < c.segs[j].seq })
		var stream []byte
		bounds := map[int]bool{} // stream offsets where a captured segment starts
		for _, s := range c.segs {
			at := int(s.seq)
			if at > len(stream) {
				break // a gap (the capture dropped a packet): stop here
			}
			if at+len(s.data) <= len(stream) {
				continue // a retransmission of bytes we have
			}
			if at == len(stream) {
				bounds[at] = true
			}
			stream = append(stream, s.data[len(stream)-at:]...)
		}
		scanFPDUs(stream, bounds, &res)
	}
	return res, nil
}

// scanFPDUs walks one responder stream: the MPA Reply, then FPDUs.
func scanFPDUs(stream []byte, bounds map[int]bool, res *fpduScan) {
	// The MPA Reply: 16-byte key, flags, revision, PD_Length, private data.
	if len(stream) < 20 {
		return
	}
	off := 20 + (int(stream[18])<<8 | int(stream[19]))
	for off+mpa.MinFPDULen <= len(stream) {
		n := int(stream[off])<<8 | int(stream[off+1])
		total := mpa.FPDULen(n)
		if off+total > len(stream) {
			break
		}
		res.FPDUs++
		tstart := off + mpa.LengthFieldLen + n // pad, then CRC
		pad := mpa.PadLen(n)
		crcAt := tstart + pad
		want := mpa.UpdateCRC(0, stream[off:crcAt])
		got := mpa.GetCRC(stream[crcAt : crcAt+mpa.CRCLen])
		if want != got {
			res.BadCRC++
		}
		for k := 1; k < pad+mpa.CRCLen; k++ {
			if !bounds[tstart+k] {
				continue
			}
			// siw's buffer: the trailer starts pad bytes before the CRC
			// field; the first k bytes land at 0, the rest at 0 again.
			tl := pad + mpa.CRCLen
			var buf [8]byte
			var known [8]bool
			copy(buf[:], stream[tstart:tstart+k])
			for i := 0; i < k; i++ {
				known[i] = true
			}
			copy(buf[:], stream[tstart+k:tstart+tl])
			for i := 0; i < tl-k; i++ {
				known[i] = true
			}
			var in, mask uint32
			for i := 0; i < mpa.CRCLen; i++ {
				if known[pad+i] {
					in |= uint32(buf[pad+i]) << (8 * i)
					mask |= 0xff << (8 * i)
				}
			}
			own, ownKnown := got, true
			if pad > 0 {
				own = mpa.UpdateCRC(mpa.UpdateCRC(0, stream[off:tstart]), buf[:pad])
				for i := 0; i < pad; i++ {
					ownKnown = ownKnown && known[i]
				}
			}
			res.Splits = append(res.Splits, trailerSplit{Offset: off, ULPDU: n, Pad: pad, K: k, CRC: got, In: in, InMask: mask, Own: own, OwnKnown: ownKnown})
		}
		off += total
	}
}

var siwCRCErrRE = regexp.MustCompile(`siw: crc error\. in: ([0-9a-f]{8}), own ([0-9a-f]{8})`)

// siwCRCErrors returns the (in, own) pairs of the siw CRC errors in a log.
func siwCRCErrors(log string) [][2]uint32 {
	var out [][2]uint32
	for _, m := range siwCRCErrRE.FindAllStringSubmatch(log, -1) {
		in, _ := strconv.ParseUint(m[1], 16, 32)
		own, _ := strconv.ParseUint(m[2], 16, 32)
		out = append(out, [2]uint32{uint32(in), uint32(own)})
	}
	return out
}

// explainCRCErrors matches every logged siw CRC error to a split trailer
// of the scan whose CRC is siw's own value and whose predicted reading is
// siw's "in"; it returns a description of each match and the errors left
// unexplained.
func explainCRCErrors(errs [][2]uint32, sc fpduScan) (matched []string, unexplained [][2]uint32) {
	for _, e := range errs {
		found := false
		for _, s := range sc.Splits {
			if (!s.OwnKnown || s.Own == e[1]) && s.In&s.InMask == e[0]&s.InMask && s.InMask != 0 {
				matched = append(matched, fmt.Sprintf("in %08x own %08x: FPDU at stream offset %d, ULPDU %d, pad %d, trailer split %d|%d",
					e[0], e[1], s.Offset, s.ULPDU, s.Pad, s.K, s.Pad+mpa.CRCLen-s.K))
				found = true
				break
			}
		}
		if !found {
			unexplained = append(unexplained, e)
		}
	}
	return matched, unexplained
}

// splitCapture writes a synthetic capture of one responder stream (source
// port 4420): an MPA Reply and three FPDUs a (ULPDU 26, pad 0, trailer cut
// 3|1), b (ULPDU 27, pad 3, trailer cut 5|2) and c (a bad CRC if bad), with a
// retransmission and a segment of the other direction.
func splitCapture(t *testing.T, bad bool) (string, []byte, []byte, []byte) {
	t.Helper()
	reply := make([]byte, 20)                                                  // key, flags, rev, PD_Length 0
	a := mpa.AppendFPDU(nil, make([]byte, 26), nil, true)                      // pad 0
	b := mpa.AppendFPDU(nil, []byte("twenty-seven bytes of ULPDU"), nil, true) // pad 3
	c := mpa.AppendFPDU(nil, make([]byte, 10), nil, true)
	if bad {
		c[len(c)-1] ^= 1
	}
	stream := append(append(append(append([]byte(nil), reply...), a...), b...), c...)
	aTrailer := len(reply) + len(a) - 4
	bTrailer := len(reply) + len(a) + len(b) - 7
	cuts := []int{0, aTrailer + 3, bTrailer + 5, len(stream)}
	const port = 4420
	var pkts [][]byte
	pkts = append(pkts, synthTCP(t, port, 40000, 999, true, nil))
	for i := 0; i+1 < len(cuts); i++ {
		pkts = append(pkts, synthTCP(t, port, 40000, uint32(1000+cuts[i]), false, stream[cuts[i]:cuts[i+1]]))
		if i == 1 { // a retransmission of the first segment
			pkts = append(pkts, synthTCP(t, port, 40000, 1000, false, stream[:cuts[1]]))
		}
	}
	pkts = append(pkts, synthTCP(t, 40000, port, 5000, false, []byte("other direction")))
	return writeCapture(t, "split.pcap", pkts), reply, a, b
}

// writeCapture writes frames as a pcap file named name in a temporary
// directory of t and returns its path.
func writeCapture(t *testing.T, name string, pkts [][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	w.WriteFileHeader(65536, gplayers.LinkTypeEthernet)
	for _, p := range pkts {
		w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(p), Length: len(p)}, p)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestInteropScanSplitTrailer checks the capture scan on a synthetic
// capture: a CRC trailer split 3|1 (read by siw as C3 C1 C2 and a stale
// byte), one with pad split 5|2, a retransmission, and a bad CRC. Like
// every test of this package that needs no guest, it is named so that
// make interop (-run TestInterop) runs it.
func TestInteropScanSplitTrailer(t *testing.T) {
	path, reply, a, b := splitCapture(t, true)
	const port = 4420
	sc, err := scanResponderStream(path, port)
	if err != nil {
		t.Fatal(err)
	}
	if sc.FPDUs != 3 || sc.BadCRC != 1 || len(sc.Splits) != 2 {
		t.Fatalf("scan %+v", sc)
	}
	ca := a[len(a)-4:]
	wantA := trailerSplit{Offset: len(reply), ULPDU: 26, Pad: 0, K: 3, CRC: mpa.GetCRC(ca),
		In: uint32(ca[3]) | uint32(ca[1])<<8 | uint32(ca[2])<<16, InMask: 0x00ffffff, Own: mpa.GetCRC(ca), OwnKnown: true}
	if sc.Splits[0] != wantA {
		t.Errorf("split 0 = %+v, want %+v", sc.Splits[0], wantA)
	}
	cb := b[len(b)-4:]
	// siw's buffer: P0 P1 P2 C0 C1, then C2 C3 over P0 P1.
	bOff := len(reply) + len(a)
	wantOwn := mpa.UpdateCRC(mpa.UpdateCRC(0, b[:2+27]), []byte{cb[2], cb[3], 0})
	wantB := trailerSplit{Offset: bOff, ULPDU: 27, Pad: 3, K: 5, CRC: mpa.GetCRC(cb),
		In: uint32(cb[0]) | uint32(cb[1])<<8, InMask: 0xffff, Own: wantOwn, OwnKnown: true}
	if sc.Splits[1] != wantB {
		t.Errorf("split 1 = %+v, want %+v", sc.Splits[1], wantB)
	}
	log := fmt.Sprintf("[ 1.0] siw: crc error. in: %08x, own %08x, op 0\n[ 2.0] siw: crc error. in: 12345678, own %08x, op 0\n",
		wantA.In|0xe8<<24, wantA.CRC, wantA.CRC)
	m, un := explainCRCErrors(siwCRCErrors(log), sc)
	if len(m) != 1 || len(un) != 1 || un[0] != [2]uint32{0x12345678, wantA.CRC} {
		t.Errorf("explained %q, unexplained %x", m, un)
	}
}

// synthTCP is an Ethernet/IPv4/TCP frame from 10.0.2.2:src to
// 10.0.2.15:dst.
func synthTCP(t *testing.T, src, dst uint16, seq uint32, syn bool, payload []byte) []byte {
	t.Helper()
	return frame(t, net.IPv4(10, 0, 2, 2), net.IPv4(10, 0, 2, 15), src, dst, seq, 0, syn, !syn, payload)
}

// frame is an Ethernet/IPv4/TCP frame (the MACs end in the IPs' last
// octets), with PSH set when it carries a payload.
func frame(t *testing.T, sip, dip net.IP, sp, dp uint16, seq, ack uint32, syn, isAck bool, payload []byte) []byte {
	t.Helper()
	eth := &gplayers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, sip[15]}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, dip[15]}, EthernetType: gplayers.EthernetTypeIPv4}
	ip := &gplayers.IPv4{Version: 4, TTL: 64, Protocol: gplayers.IPProtocolTCP, SrcIP: sip, DstIP: dip}
	tcp := &gplayers.TCP{SrcPort: gplayers.TCPPort(sp), DstPort: gplayers.TCPPort(dp), Seq: seq, Ack: ack, SYN: syn, ACK: isAck, PSH: len(payload) > 0, Window: 65535}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// TestInteropCheckSiwCRCErrors checks the verdict of a CRC-required
// session: siw errors that are split-trailer misreadings pass, anything
// else fails.
func TestInteropCheckSiwCRCErrors(t *testing.T) {
	good, _, a, _ := splitCapture(t, false)
	bad, _, _, _ := splitCapture(t, true)
	ca := a[len(a)-4:]
	crc := mpa.GetCRC(ca)
	misread := uint32(ca[3]) | uint32(ca[1])<<8 | uint32(ca[2])<<16 | 0x5a<<24
	line := func(in, own uint32) string {
		return fmt.Sprintf("[   86.5] siw: crc error. in: %08x, own %08x, op 0\n", in, own)
	}
	for _, c := range []struct {
		name, out, pcap string
		ok              bool
	}{
		{"clean", "recoveries: 0 siw crc errors: 0\n", good, true},
		{"misread", "recoveries: 1 siw crc errors: 1\n" + line(misread, crc), good, true},
		{"other error", "recoveries: 1 siw crc errors: 1\n" + line(0x12345678, crc), good, false},
		{"wrong own", "recoveries: 1 siw crc errors: 1\n" + line(misread, crc^1), good, false},
		{"recovery without error", "recoveries: 2 siw crc errors: 1\n" + line(misread, crc), good, false},
		{"count mismatch", "recoveries: 1 siw crc errors: 2\n" + line(misread, crc), good, false},
		{"bad CRC sent", "recoveries: 0 siw crc errors: 0\n", bad, false},
		{"no capture", "recoveries: 0 siw crc errors: 0\n", filepath.Join(t.TempDir(), "none.pcap"), false},
	} {
		note, err := checkSiwCRCErrors(c.out, c.pcap, 4420)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v (note %q), want ok %v", c.name, err, note, c.ok)
		}
	}
}
