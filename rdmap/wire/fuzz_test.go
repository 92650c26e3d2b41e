package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gosiw/gosiw/rdmap/wire"
)

func FuzzParseReadRequest(f *testing.F) {
	f.Add(wHex(f, wSiwReadRequest))
	f.Add(make([]byte, wire.ReadRequestLen-1))
	f.Fuzz(func(t *testing.T, data []byte) {
		rr, err := wire.ParseReadRequest(data)
		if err != nil {
			if !errors.Is(err, wire.ErrShortHeader) || len(data) >= wire.ReadRequestLen {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			return
		}
		fields := wire.ReadRequestFields{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(), SrcSTag: rr.SrcSTag(), SrcTO: rr.SrcTO()}
		if out := wire.AppendReadRequest(nil, &fields); !bytes.Equal(out, data[:wire.ReadRequestLen]) || !bytes.Equal(rr, out) {
			t.Fatalf("re-encoded %x, want %x", out, data[:wire.ReadRequestLen])
		}
	})
}

func FuzzParseAtomicRequest(f *testing.F) {
	for _, a := range wAtomicRequests() {
		f.Add(wire.AppendAtomicRequest(nil, &a))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a wire.AtomicRequest
		if err := wire.ParseAtomicRequest(data, &a); err != nil {
			if !errors.Is(err, wire.ErrShortHeader) || len(data) >= wire.AtomicRequestLen {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			return
		}
		if a.Op > 0xf || a.Reserved&0xf != 0 {
			t.Fatalf("op %d reserved %#x", a.Op, a.Reserved)
		}
		out := wire.AppendAtomicRequest(nil, &a)
		if !bytes.Equal(out, data[:wire.AtomicRequestLen]) {
			t.Fatalf("re-encoded %x, want %x", out, data[:wire.AtomicRequestLen])
		}
		var b wire.AtomicRequest
		if err := wire.ParseAtomicRequest(out, &b); err != nil || b != a {
			t.Fatalf("second parse %+v, %v", b, err)
		}
	})
}

func FuzzParseAtomicResponse(f *testing.F) {
	f.Add(wire.AppendAtomicResponse(nil, &wire.AtomicResponse{ReqID: 1, OriginalValue: 42}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a wire.AtomicResponse
		if err := wire.ParseAtomicResponse(data, &a); err != nil {
			if !errors.Is(err, wire.ErrShortHeader) || len(data) >= wire.AtomicResponseLen {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			return
		}
		if out := wire.AppendAtomicResponse(nil, &a); !bytes.Equal(out, data[:wire.AtomicResponseLen]) {
			t.Fatalf("re-encoded %x, want %x", out, data[:wire.AtomicResponseLen])
		}
	})
}

func FuzzParseTerminate(f *testing.F) {
	for _, term := range wTerminates() {
		if term.Reserved == 0 {
			f.Add(wire.AppendTerminate(nil, &term))
		}
	}
	for _, w := range []string{"11000300", "21010300", "02060000", "02020000", "20060000"} {
		f.Add(wHex(f, w))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var term wire.Terminate
		if err := wire.ParseTerminate(data, &term); err != nil {
			if !errors.Is(err, wire.ErrTerminateShort) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if term.Layout != wire.DetectLayout(data) {
			t.Fatalf("layout %v, DetectLayout %v", term.Layout, wire.DetectLayout(data))
		}
		n := term.Len()
		if n > len(data) {
			t.Fatalf("Len() %d of %d bytes", n, len(data))
		}
		if term.D && (len(term.DDPHeader) == 0 || !bytes.Equal(term.DDPHeader, data[wire.TermCtrlLen+wire.TermSegLenLen:][:len(term.DDPHeader)])) {
			t.Fatalf("DDP header %x", term.DDPHeader)
		}
		if term.R && len(term.RDMAHeader) != wire.ReadRequestLen {
			t.Fatalf("RDMA header %x", term.RDMAHeader)
		}
		out := wire.AppendTerminate(nil, &term)
		if !bytes.Equal(out, data[:n]) {
			t.Fatalf("re-encoded %x, want %x", out, data[:n])
		}
		var again wire.Terminate
		if err := wire.ParseTerminateLayout(out, term.Layout, &again); err != nil || again.String() != term.String() ||
			again.Layer != term.Layer || again.EType != term.EType || again.Code != term.Code || again.M != term.M ||
			again.D != term.D || again.R != term.R || again.Reserved != term.Reserved || again.SegLen != term.SegLen ||
			!bytes.Equal(again.DDPHeader, term.DDPHeader) || !bytes.Equal(again.RDMAHeader, term.RDMAHeader) {
			t.Fatalf("second parse %+v, %v; first %+v", again, err, term)
		}
		_ = term.String()
	})
}
