package rdmap_test

// Tests of the RDMAP wire code (header.go, terminate.go). Helpers here
// start with "w" so they do not collide with the engine tests' helpers.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/rdmap"
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
	for op := rdmap.Opcode(0); op < 16; op++ {
		known := int(op) < len(names)
		want := fmt.Sprintf("unknown(%d)", op)
		if known {
			want = names[op]
		}
		if op.String() != want || op.Known() != known {
			t.Errorf("opcode %d: %q known %v", op, op.String(), op.Known())
		}
		if op.Tagged() != (op == rdmap.OpWrite || op == rdmap.OpReadResponse) {
			t.Errorf("opcode %v: Tagged %v", op, op.Tagged())
		}
		if op.HasInvalidateSTag() != (op == rdmap.OpSendInv || op == rdmap.OpSendSEInv) {
			t.Errorf("opcode %v: HasInvalidateSTag %v", op, op.HasInvalidateSTag())
		}
	}
	// The values on the wire (RFC 5040 §4.2, RFC 7306 §9).
	for op, v := range map[rdmap.Opcode]uint8{rdmap.OpWrite: 0, rdmap.OpReadRequest: 1, rdmap.OpReadResponse: 2, rdmap.OpSend: 3,
		rdmap.OpSendInv: 4, rdmap.OpSendSE: 5, rdmap.OpSendSEInv: 6, rdmap.OpTerminate: 7, rdmap.OpImmData: 8,
		rdmap.OpImmDataSE: 9, rdmap.OpAtomicRequest: 0xa, rdmap.OpAtomicResponse: 0xb} {
		if uint8(op) != v {
			t.Errorf("%v = %d, want %d", op, op, v)
		}
	}
}

func TestControlByte(t *testing.T) {
	for v := uint8(0); v < 4; v++ {
		for op := rdmap.Opcode(0); op < 16; op++ {
			c := rdmap.ControlByte(v, op)
			gv, rsv, gop := rdmap.Control(c)
			if gv != v || rsv != 0 || gop != op {
				t.Fatalf("Control(ControlByte(%d, %d) = %#x) = %d, %d, %d", v, op, c, gv, rsv, gop)
			}
			_, rsv, gop = rdmap.Control(c | 0x30)
			if rsv != 0x30 || gop != op {
				t.Fatalf("reserved bits: %#x %v", rsv, gop)
			}
		}
	}
	// Linux siw: 0x43 Send, 0x41 Read Request, 0x42 Read Response, 0x40
	// Write, 0x47 Terminate.
	for c, op := range map[byte]rdmap.Opcode{0x43: rdmap.OpSend, 0x41: rdmap.OpReadRequest, 0x42: rdmap.OpReadResponse, 0x40: rdmap.OpWrite, 0x47: rdmap.OpTerminate} {
		if got := rdmap.ControlByte(rdmap.Version1, op); got != c {
			t.Errorf("ControlByte(1, %v) = %#x, want %#x", op, got, c)
		}
	}
}

// siw's Read Request from crc-rping-default (after the 18-byte DDP header).
const wSiwReadRequest = "8ad0ef00" + "0000556e5a37e530" + "00000040" + "bf388400" + "000056402cd8bb80"

func TestReadRequestGolden(t *testing.T) {
	b := wHex(t, wSiwReadRequest)
	rr, err := rdmap.ParseReadRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := rdmap.ReadRequestFields{SinkSTag: 0x8ad0ef00, SinkTO: 0x0000556e5a37e530, Size: 64, SrcSTag: 0xbf388400, SrcTO: 0x000056402cd8bb80}
	got := rdmap.ReadRequestFields{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(), SrcSTag: rr.SrcSTag(), SrcTO: rr.SrcTO()}
	if got != want {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	if out := rdmap.AppendReadRequest(nil, &want); !bytes.Equal(out, b) {
		t.Errorf("AppendReadRequest = %x, want %x", out, b)
	}
}

func TestReadRequestRoundTrip(t *testing.T) {
	vals := []uint64{0, 1, 0x8000000000000000, 1<<64 - 1, 0x0102030405060708}
	for i, v := range vals {
		f := rdmap.ReadRequestFields{SinkSTag: ddp.STag(v), SinkTO: v, Size: uint32(v >> 8), SrcSTag: ddp.STag(^v), SrcTO: vals[(i+1)%len(vals)]}
		b := rdmap.AppendReadRequest([]byte{0xee}, &f)
		if b[0] != 0xee || len(b) != 1+rdmap.ReadRequestLen {
			t.Fatalf("AppendReadRequest wrote %d bytes", len(b)-1)
		}
		rr, err := rdmap.ParseReadRequest(append(b[1:], 1, 2))
		if err != nil || len(rr) != rdmap.ReadRequestLen {
			t.Fatal(err)
		}
		got := rdmap.ReadRequestFields{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(), SrcSTag: rr.SrcSTag(), SrcTO: rr.SrcTO()}
		if got != f {
			t.Fatalf("round trip %+v -> %+v", f, got)
		}
		for n := range b[1:] {
			if rr, err := rdmap.ParseReadRequest(b[1 : 1+n]); !errors.Is(err, rdmap.ErrShortHeader) || rr != nil {
				t.Fatalf("ParseReadRequest(%d bytes) = %v", n, err)
			}
		}
	}
}

func wAtomicRequests() []rdmap.AtomicRequest {
	return []rdmap.AtomicRequest{
		{},
		{Op: rdmap.AtomicFetchAdd, ReqID: 1, STag: 0x100, TO: 0x1000, AddSwap: 5, AddSwapMask: 0},
		{Op: rdmap.AtomicCmpSwap, ReqID: 0xffffffff, STag: 0xfa038c00, TO: 1<<64 - 8, AddSwap: 0x1111, AddSwapMask: 1<<64 - 1, Compare: 0x2222, CompareMask: 0xff00},
		{Op: 0xf, Reserved: 0xfffffff0, ReqID: 7, STag: 9, TO: 11, AddSwap: 13, AddSwapMask: 15, Compare: 17, CompareMask: 19},
	}
}

func TestAtomicRoundTrip(t *testing.T) {
	for _, a := range wAtomicRequests() {
		b := rdmap.AppendAtomicRequest(nil, &a)
		if len(b) != rdmap.AtomicRequestLen {
			t.Fatalf("AppendAtomicRequest wrote %d bytes", len(b))
		}
		var got rdmap.AtomicRequest
		got.ReqID = 12345 // must be overwritten
		if err := rdmap.ParseAtomicRequest(append(b, 0xff), &got); err != nil || got != a {
			t.Fatalf("round trip %+v -> %+v, %v", a, got, err)
		}
		for n := range b {
			if err := rdmap.ParseAtomicRequest(b[:n], &got); !errors.Is(err, rdmap.ErrShortHeader) {
				t.Fatalf("ParseAtomicRequest(%d bytes) = %v", n, err)
			}
		}
	}
	// The op is the low 4 bits of the first word (RFC 7306 §5.2.1; the
	// Wireshark dissector agrees: 0 FetchAdd, 2 CmpSwap).
	b := rdmap.AppendAtomicRequest(nil, &rdmap.AtomicRequest{Op: rdmap.AtomicCmpSwap, ReqID: 0x01020304, STag: 0x05060708, TO: 0x1112131415161718})
	if want := "00000002" + "01020304" + "05060708" + "1112131415161718"; hex.EncodeToString(b[:20]) != want {
		t.Errorf("atomic request starts %x, want %s", b[:20], want)
	}
	if rdmap.AtomicFetchAdd.String() != "fetch_add" || rdmap.AtomicCmpSwap.String() != "cmp_swap" || rdmap.AtomicOp(1).String() != "unknown(1)" {
		t.Error("AtomicOp names")
	}

	for _, r := range []rdmap.AtomicResponse{{}, {ReqID: 1, OriginalValue: 2}, {ReqID: 0xffffffff, OriginalValue: 1<<64 - 1}} {
		b := rdmap.AppendAtomicResponse(nil, &r)
		if len(b) != rdmap.AtomicResponseLen {
			t.Fatalf("AppendAtomicResponse wrote %d bytes", len(b))
		}
		var got rdmap.AtomicResponse
		if err := rdmap.ParseAtomicResponse(b, &got); err != nil || got != r {
			t.Fatalf("round trip %+v -> %+v, %v", r, got, err)
		}
		for n := range b {
			if err := rdmap.ParseAtomicResponse(b[:n], &got); !errors.Is(err, rdmap.ErrShortHeader) {
				t.Fatalf("ParseAtomicResponse(%d bytes) = %v", n, err)
			}
		}
	}
}

func TestHeaderAllocs(t *testing.T) {
	b := wHex(t, wSiwReadRequest)
	if a := testing.AllocsPerRun(100, func() {
		rr, err := rdmap.ParseReadRequest(b)
		if err != nil || rr.Size() != 64 {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("ParseReadRequest: %v allocs", a)
	}
	buf := make([]byte, 0, 64)
	f := rdmap.ReadRequestFields{Size: 1}
	if a := testing.AllocsPerRun(100, func() { _ = rdmap.AppendReadRequest(buf[:0], &f) }); a != 0 {
		t.Errorf("AppendReadRequest: %v allocs", a)
	}
	ar := wAtomicRequests()[2]
	ab := rdmap.AppendAtomicRequest(nil, &ar)
	var got rdmap.AtomicRequest
	if a := testing.AllocsPerRun(100, func() {
		_ = rdmap.AppendAtomicRequest(buf[:0], &ar)
		_ = rdmap.ParseAtomicRequest(ab, &got)
	}); a != 0 {
		t.Errorf("atomic request: %v allocs", a)
	}
}
