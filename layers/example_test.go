package layers_test

import (
	"fmt"
	"log"
	"os"

	"github.com/gosiw/gosiw/layers"
)

// DecodeCapture follows every TCP connection of a pcap or pcapng capture
// from its MPA handshake and hands over one Record per handshake frame,
// FPDU or note, in capture order. Here: a real Linux siw rping capture.
func ExampleDecodeCapture() {
	f, err := os.Open("../testdata/captures/rping-default.pcap")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	counts := map[layers.Kind]int{}
	err = layers.DecodeCapture(f, func(r *layers.Record) {
		counts[r.Kind]++
		if counts[r.Kind] > 2 {
			return
		}
		switch {
		case r.Startup != nil:
			fmt.Printf("packet %d %v %v: rev %d, enhanced %v, IRD/ORD %d/%d\n",
				r.Packet, r.Dir, r.Kind, r.Startup.Rev, r.Startup.Enhanced, r.Startup.IRD, r.Startup.ORD)
		case r.DDP != nil:
			fmt.Printf("packet %d %v %v: %v, %d payload bytes\n", r.Packet, r.Dir, r.Kind, r.DDP.Opcode, len(r.Payload))
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(counts[layers.KindFPDU], "FPDUs")
	// Output:
	// packet 4 i2r mpa_request: rev 2, enhanced true, IRD/ORD 1/1
	// packet 6 r2i mpa_reply: rev 2, enhanced true, IRD/ORD 1/1
	// packet 8 i2r fpdu: send, 16 payload bytes
	// packet 9 r2i fpdu: read_request, 0 payload bytes
	// 21 FPDUs
}
