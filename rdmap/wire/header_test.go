package wire_test

// Tests of the RDMAP wire code (header.go, terminate.go). Helpers here
// start with "w" so they do not collide with the engine tests' helpers.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap/wire"
)

func wHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpcodes(t *testing.T) {
	names := []string{"rdma_write", "read_request", "read_response", "send", "send_inv", "send_se", "send_se_inv",
		"terminate", "imm_data", "imm_data_se", "atomic_request", "atomic_response"}
	for op := wire.Opcode(0); op < 16; op++ {
		known := int(op) < len(names)
		want := fmt.Sprintf("unknown(%d)", op)
		if known {
			want = names[op]
		}
		if op.String() != want || op.Known() != known {
			t.Errorf("opcode %d: %q known %v", op, op.String(), op.Known())
		}
		if op.Tagged() != (op == wire.OpWrite || op == wire.OpReadResponse) {
			t.Errorf("opcode %v: Tagged %v", op, op.Tagged())
		}
		if op.HasInvalidateSTag() != (op == wire.OpSendInv || op == wire.OpSendSEInv) {
			t.Errorf("opcode %v: HasInvalidateSTag %v", op, op.HasInvalidateSTag())
		}
	}
	// The values on the wire (RFC 5040 §4.2, RFC 7306 §9).
	for op, v := range map[wire.Opcode]uint8{wire.OpWrite: 0, wire.OpReadRequest: 1, wire.OpReadResponse: 2, wire.OpSend: 3,
		wire.OpSendInv: 4, wire.OpSendSE: 5, wire.OpSendSEInv: 6, wire.OpTerminate: 7, wire.OpImmData: 8,
		wire.OpImmDataSE: 9, wire.OpAtomicRequest: 0xa, wire.OpAtomicResponse: 0xb} {
		if uint8(op) != v {
			t.Errorf("%v = %d, want %d", op, op, v)
		}
	}
}

func TestControlByte(t *testing.T) {
	for v := uint8(0); v < 4; v++ {
		for op := wire.Opcode(0); op < 16; op++ {
			c := wire.ControlByte(v, op)
			gv, rsv, gop := wire.Control(c)
			if gv != v || rsv != 0 || gop != op {
				t.Fatalf("Control(ControlByte(%d, %d) = %#x) = %d, %d, %d", v, op, c, gv, rsv, gop)
			}
			_, rsv, gop = wire.Control(c | 0x30)
			if rsv != 0x30 || gop != op {
				t.Fatalf("reserved bits: %#x %v", rsv, gop)
			}
		}
	}
	// Linux siw: 0x43 Send, 0x41 Read Request, 0x42 Read Response, 0x40
	// Write, 0x47 Terminate.
	for c, op := range map[byte]wire.Opcode{0x43: wire.OpSend, 0x41: wire.OpReadRequest, 0x42: wire.OpReadResponse, 0x40: wire.OpWrite, 0x47: wire.OpTerminate} {
		if got := wire.ControlByte(wire.Version1, op); got != c {
			t.Errorf("ControlByte(1, %v) = %#x, want %#x", op, got, c)
		}
	}
}

// siw's Read Request from crc-rping-default (after the 18-byte DDP header).
const wSiwReadRequest = "8ad0ef00" + "0000556e5a37e530" + "00000040" + "bf388400" + "000056402cd8bb80"

func TestReadRequestGolden(t *testing.T) {
	b := wHex(t, wSiwReadRequest)
	rr, err := wire.ParseReadRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := wire.ReadRequestFields{SinkSTag: 0x8ad0ef00, SinkTO: 0x0000556e5a37e530, Size: 64, SrcSTag: 0xbf388400, SrcTO: 0x000056402cd8bb80}
	got := wire.ReadRequestFields{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(), SrcSTag: rr.SrcSTag(), SrcTO: rr.SrcTO()}
	if got != want {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	if out := wire.AppendReadRequest(nil, &want); !bytes.Equal(out, b) {
		t.Errorf("AppendReadRequest = %x, want %x", out, b)
	}
}

func TestReadRequestRoundTrip(t *testing.T) {
	vals := []uint64{0, 1, 0x8000000000000000, 1<<64 - 1, 0x0102030405060708}
	for i, v := range vals {
		f := wire.ReadRequestFields{SinkSTag: ddp.STag(v), SinkTO: v, Size: uint32(v >> 8), SrcSTag: ddp.STag(^v), SrcTO: vals[(i+1)%len(vals)]}
		b := wire.AppendReadRequest([]byte{0xee}, &f)
		if b[0] != 0xee || len(b) != 1+wire.ReadRequestLen {
			t.Fatalf("AppendReadRequest wrote %d bytes", len(b)-1)
		}
		rr, err := wire.ParseReadRequest(append(b[1:], 1, 2))
		if err != nil || len(rr) != wire.ReadRequestLen {
			t.Fatal(err)
		}
		got := wire.ReadRequestFields{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(), SrcSTag: rr.SrcSTag(), SrcTO: rr.SrcTO()}
		if got != f {
			t.Fatalf("round trip %+v -> %+v", f, got)
		}
		for n := range b[1:] {
			if rr, err := wire.ParseReadRequest(b[1 : 1+n]); !errors.Is(err, wire.ErrShortHeader) || rr != nil {
				t.Fatalf("ParseReadRequest(%d bytes) = %v", n, err)
			}
		}
	}
}

func wAtomicRequests() []wire.AtomicRequest {
	return []wire.AtomicRequest{
		{},
		{Op: wire.AtomicFetchAdd, ReqID: 1, STag: 0x100, TO: 0x1000, AddSwap: 5, AddSwapMask: 0},
		{Op: wire.AtomicCmpSwap, ReqID: 0xffffffff, STag: 0xfa038c00, TO: 1<<64 - 8, AddSwap: 0x1111, AddSwapMask: 1<<64 - 1, Compare: 0x2222, CompareMask: 0xff00},
		{Op: 0xf, Reserved: 0xfffffff0, ReqID: 7, STag: 9, TO: 11, AddSwap: 13, AddSwapMask: 15, Compare: 17, CompareMask: 19},
	}
}

func TestAtomicRoundTrip(t *testing.T) {
	for _, a := range wAtomicRequests() {
		b := wire.AppendAtomicRequest(nil, &a)
		if len(b) != wire.AtomicRequestLen {
			t.Fatalf("AppendAtomicRequest wrote %d bytes", len(b))
		}
		var got wire.AtomicRequest
		got.ReqID = 12345 // must be overwritten
		if err := wire.ParseAtomicRequest(append(b, 0xff), &got); err != nil || got != a {
			t.Fatalf("round trip %+v -> %+v, %v", a, got, err)
		}
		for n := range b {
			if err := wire.ParseAtomicRequest(b[:n], &got); !errors.Is(err, wire.ErrShortHeader) {
				t.Fatalf("ParseAtomicRequest(%d bytes) = %v", n, err)
			}
		}
	}
	// The op is the low 4 bits of the first word (RFC 7306 §5.2.1; the
	// Wireshark dissector agrees: 0 FetchAdd, 2 CmpSwap).
	b := wire.AppendAtomicRequest(nil, &wire.AtomicRequest{Op: wire.AtomicCmpSwap, ReqID: 0x01020304, STag: 0x05060708, TO: 0x1112131415161718})
	if want := "00000002" + "01020304" + "05060708" + "1112131415161718"; hex.EncodeToString(b[:20]) != want {
		t.Errorf("atomic request starts %x, want %s", b[:20], want)
	}
	if wire.AtomicFetchAdd.String() != "fetch_add" || wire.AtomicCmpSwap.String() != "cmp_swap" || wire.AtomicOp(1).String() != "unknown(1)" {
		t.Error("AtomicOp names")
	}

	for _, r := range []wire.AtomicResponse{{}, {ReqID: 1, OriginalValue: 2}, {ReqID: 0xffffffff, OriginalValue: 1<<64 - 1}} {
		b := wire.AppendAtomicResponse(nil, &r)
		if len(b) != wire.AtomicResponseLen {
			t.Fatalf("AppendAtomicResponse wrote %d bytes", len(b))
		}
		var got wire.AtomicResponse
		if err := wire.ParseAtomicResponse(b, &got); err != nil || got != r {
			t.Fatalf("round trip %+v -> %+v, %v", r, got, err)
		}
		for n := range b {
			if err := wire.ParseAtomicResponse(b[:n], &got); !errors.Is(err, wire.ErrShortHeader) {
				t.Fatalf("ParseAtomicResponse(%d bytes) = %v", n, err)
			}
		}
	}
}

func TestHeaderAllocs(t *testing.T) {
	b := wHex(t, wSiwReadRequest)
	if a := testing.AllocsPerRun(100, func() {
		rr, err := wire.ParseReadRequest(b)
		if err != nil || rr.Size() != 64 {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("ParseReadRequest: %v allocs", a)
	}
	buf := make([]byte, 0, 64)
	f := wire.ReadRequestFields{Size: 1}
	if a := testing.AllocsPerRun(100, func() { _ = wire.AppendReadRequest(buf[:0], &f) }); a != 0 {
		t.Errorf("AppendReadRequest: %v allocs", a)
	}
	ar := wAtomicRequests()[2]
	ab := wire.AppendAtomicRequest(nil, &ar)
	var got wire.AtomicRequest
	if a := testing.AllocsPerRun(100, func() {
		_ = wire.AppendAtomicRequest(buf[:0], &ar)
		_ = wire.ParseAtomicRequest(ab, &got)
	}); a != 0 {
		t.Errorf("atomic request: %v allocs", a)
	}
}
