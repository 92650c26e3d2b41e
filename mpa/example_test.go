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

// A revision 1 Request carrying the [MS-SMBD] IRD/ORD Negotiate Header
// (what an Initiator with Policy{Rev: 1, SMBD: true} sends), and the
// responder's side: ParseFrame sees 8 bytes of private data more; only
// SplitSMBD, called because both sides agreed on the header, takes it off.
func ExampleFrame_SplitSMBD() {
	req := mpa.Frame{Rev: mpa.Rev1, SMBD: true, SMBDIRD: 16, SMBDORD: 4, PrivateData: []byte("hi")}
	b, err := mpa.AppendFrame(nil, &req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("% x\n", b[mpa.KeyLen:])

	var got mpa.Frame
	if _, err := mpa.ParseFrame(b, &got); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("parsed: %d bytes of private data\n", len(got.PrivateData))
	if err := got.SplitSMBD(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("split: IRD %d ORD %d, ULP private data %q\n", got.SMBDIRD, got.SMBDORD, got.PrivateData)
	// Output:
	// 00 01 00 0a 00 00 00 10 00 00 00 04 68 69
	// parsed: 10 bytes of private data
	// split: IRD 16 ORD 4, ULP private data "hi"
}
