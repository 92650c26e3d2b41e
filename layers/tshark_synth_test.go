package layers

import (
	"flag"
	"os"
	"testing"

	"github.com/gosiw/gosiw/mpa"
)

// synthTsharkCapture is the synthetic capture the tshark test feeds to
// tshark: three connections on 127.0.0.1.
//
//   - 40001->7174: rev 2, RFC 6581 IRD/ORD, Request without C and Reply
//     with C (so CRC is in use), private data; every RDMAP opcode i2r, one
//     FPDU per segment, in several sizes (pad 0 to 3, 0 to 4000 octets),
//     and a few r2i.
//   - 40002->7175: rev 1, no CRC, no private data; Send, Write, Read
//     Request and Read Response.
//   - 40003->7176: rev 2 with CRC; FPDUs split across segments and several
//     FPDUs in one segment.
func synthTsharkCapture(tb testing.TB) *synthCapture {
	tb.Helper()
	c := &synthCapture{}

	a := c.conn(40001, 7174)
	a.open()
	a.send(0, mpaFrame(tb, mpa.Frame{Rev: 2, Enhanced: true, IRD: 4, ORD: 4, PrivateData: []byte("hello")}))
	a.send(1, mpaFrame(tb, mpa.Frame{Reply: true, Rev: 2, CRC: true, Enhanced: true, IRD: 4, ORD: 4}))
	crc := MPAFraming{CRC: true, FullOperation: true}
	for _, f := range allOpcodeFPDUs(tb, crc) {
		a.send(0, f)
	}
	a.send(0, siwTerminate(tb, crc, 5))
	a.send(1, fpdu(tb, crc, untagged(OpSend, 0, 1, 0, true), nil, pattern(100, 20)))
	a.send(1, fpdu(tb, crc, untagged(OpReadRequest, 1, 1, 0, true), &RDMAPReadRequest{
		SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5}, nil))
	a.close()

	b := c.conn(40002, 7175)
	b.open()
	b.send(0, mpaFrame(tb, mpa.Frame{Rev: 1}))
	b.send(1, mpaFrame(tb, mpa.Frame{Reply: true, Rev: 1}))
	plain := MPAFraming{FullOperation: true}
	b.send(0, fpdu(tb, plain, untagged(OpSend, 0, 1, 0, true), nil, pattern(30, 30)))
	b.send(1, fpdu(tb, plain, tagged(OpWrite, 0xabcd0000, 0x10, true), nil, pattern(301, 31)))
	b.send(1, fpdu(tb, plain, untagged(OpReadRequest, 1, 1, 0, true), &RDMAPReadRequest{
		SinkSTag: 0x10, SinkTO: 0x20, Size: 64, SrcSTag: 0x30, SrcTO: 0x40}, nil))
	b.send(0, fpdu(tb, plain, tagged(OpReadResponse, 0x10, 0x20, true), nil, pattern(64, 32)))
	b.close()

	x := c.conn(40003, 7176)
	x.open()
	x.send(0, mpaFrame(tb, mpa.Frame{Rev: 2, CRC: true, Enhanced: true, IRD: 1, ORD: 1}))
	x.send(1, mpaFrame(tb, mpa.Frame{Reply: true, Rev: 2, CRC: true, Enhanced: true, IRD: 1, ORD: 1}))
	var three []byte
	for i := range 3 {
		three = append(three, fpdu(tb, crc, untagged(OpSend, 0, uint32(i+1), 0, true), nil, pattern(20+i, byte(40+i)))...)
	}
	x.send(0, three) // three FPDUs in one segment
	big := fpdu(tb, crc, tagged(OpWrite, 0x99, 0, true), nil, pattern(3000, 50))
	x.send(0, big, 1000) // one FPDU over three segments
	two := append(fpdu(tb, crc, untagged(OpSend, 0, 4, 0, true), nil, pattern(40, 60)),
		fpdu(tb, crc, untagged(OpSend, 0, 5, 0, true), nil, pattern(41, 61))...)
	x.send(0, two, 30, len(two)-30) // the first FPDU split, the second whole in the second segment
	x.close()
	return c
}

var synthOut = flag.String("synth-out", "", "TestWriteSyntheticCapture writes the synthetic tshark capture to this file")

// TestWriteSyntheticCapture writes the capture TestTsharkSynthetic feeds
// to tshark, for a look in Wireshark:
//
//	go test ./layers -run TestWriteSyntheticCapture -synth-out /tmp/synth.pcap
func TestWriteSyntheticCapture(t *testing.T) {
	if *synthOut == "" {
		t.Skip("no -synth-out file given")
	}
	if err := os.WriteFile(*synthOut, synthTsharkCapture(t).pcap(t), 0o644); err != nil {
		t.Fatal(err)
	}
}
