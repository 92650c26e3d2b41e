package mpa_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/gosiw/gosiw/mpa"
)

// An MPA Request as an initiator sends it (revision 2 with the RFC 6581
// IRD/ORD block and private data), then parsed back.
func ExampleAppendFrame() {
	req := mpa.Frame{Rev: mpa.Rev2, Enhanced: true, CRC: true, IRD: 16, ORD: 16, PrivateData: []byte("hi")}
	b, err := mpa.AppendFrame(nil, &req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q % x\n", b[:mpa.KeyLen], b[mpa.KeyLen:])

	var got mpa.Frame
	n, err := mpa.ParseFrame(b, &got)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes: reply %v, rev %d, CRC %v, IRD/ORD %d/%d, PD_Length %d, private data %q\n",
		n, got.Reply, got.Rev, got.CRC, got.IRD, got.ORD, got.PDLength, got.PrivateData)
	// Output:
	// "MPA ID Req Frame" 50 02 00 06 00 10 00 10 68 69
	// 26 bytes: reply false, rev 2, CRC true, IRD/ORD 16/16, PD_Length 6, private data "hi"
}

// A Framer turns ULPDUs (DDP segments) into FPDUs on a stream, with the
// CRC32c and padding; a Deframer cuts the stream back into FPDUs and
// checks them.
func ExampleDeframer() {
	var stream bytes.Buffer
	fr := mpa.Framer{CRC: true}
	for _, ulpdu := range []string{"first DDP segment", "second"} {
		if err := fr.WriteFPDU(&stream, []byte(ulpdu), nil); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("stream bytes:", stream.Len())

	df := mpa.NewDeframer(&stream, mpa.DeframerConfig{CRC: true})
	for {
		f, err := df.Next()
		if err != nil {
			fmt.Println("end:", err)
			break
		}
		fmt.Printf("FPDU of %d bytes: %q, CRC ok %v\n", f.WireLen, f.ULPDU, f.CRCOK)
	}
	// Output:
	// stream bytes: 36
	// FPDU of 24 bytes: "first DDP segment", CRC ok true
	// FPDU of 12 bytes: "second", CRC ok true
	// end: EOF
}
