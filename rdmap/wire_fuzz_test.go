package rdmap_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
)

func FuzzParseReadRequest(f *testing.F) {
	f.Add(wHex(f, wSiwReadRequest))
	f.Add(make([]byte, rdmap.ReadRequestLen-1))
	f.Fuzz(func(t *testing.T, data []byte) {
		rr, err := rdmap.ParseReadRequest(data)
		if err != nil {
			if !errors.Is(err, rdmap.ErrShortHeader) || len(data) >= rdmap.ReadRequestLen {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			return
		}
		fields := rdmap.ReadRequestFields{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(), SrcSTag: rr.SrcSTag(), SrcTO: rr.SrcTO()}
		if out := rdmap.AppendReadRequest(nil, &fields); !bytes.Equal(out, data[:rdmap.ReadRequestLen]) || !bytes.Equal(rr, out) {
			t.Fatalf("re-encoded %x, want %x", out, data[:rdmap.ReadRequestLen])
		}
	})
}

func FuzzParseAtomicRequest(f *testing.F) {
	for _, a := range wAtomicRequests() {
		f.Add(rdmap.AppendAtomicRequest(nil, &a))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a rdmap.AtomicRequest
		if err := rdmap.ParseAtomicRequest(data, &a); err != nil {
			if !errors.Is(err, rdmap.ErrShortHeader) || len(data) >= rdmap.AtomicRequestLen {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			return
		}
		if a.Op > 0xf || a.Reserved&0xf != 0 {
			t.Fatalf("op %d reserved %#x", a.Op, a.Reserved)
		}
		out := rdmap.AppendAtomicRequest(nil, &a)
		if !bytes.Equal(out, data[:rdmap.AtomicRequestLen]) {
			t.Fatalf("re-encoded %x, want %x", out, data[:rdmap.AtomicRequestLen])
		}
		var b rdmap.AtomicRequest
		if err := rdmap.ParseAtomicRequest(out, &b); err != nil || b != a {
			t.Fatalf("second parse %+v, %v", b, err)
		}
	})
}

func FuzzParseAtomicResponse(f *testing.F) {
	f.Add(rdmap.AppendAtomicResponse(nil, &rdmap.AtomicResponse{ReqID: 1, OriginalValue: 42}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a rdmap.AtomicResponse
		if err := rdmap.ParseAtomicResponse(data, &a); err != nil {
			if !errors.Is(err, rdmap.ErrShortHeader) || len(data) >= rdmap.AtomicResponseLen {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			return
		}
		if out := rdmap.AppendAtomicResponse(nil, &a); !bytes.Equal(out, data[:rdmap.AtomicResponseLen]) {
			t.Fatalf("re-encoded %x, want %x", out, data[:rdmap.AtomicResponseLen])
		}
	})
}

func FuzzParseTerminate(f *testing.F) {
	for _, term := range wTerminates() {
		if term.Reserved == 0 {
			f.Add(rdmap.AppendTerminate(nil, &term))
		}
	}
	for _, w := range []string{"11000300", "21010300", "02060000", "02020000", "20060000"} {
		f.Add(wHex(f, w))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var term rdmap.Terminate
		if err := rdmap.ParseTerminate(data, &term); err != nil {
			if !errors.Is(err, rdmap.ErrTerminateShort) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if term.Layout != rdmap.DetectLayout(data) {
			t.Fatalf("layout %v, DetectLayout %v", term.Layout, rdmap.DetectLayout(data))
		}
		n := term.Len()
		if n > len(data) {
			t.Fatalf("Len() %d of %d bytes", n, len(data))
		}
		if term.D && (len(term.DDPHeader) == 0 || !bytes.Equal(term.DDPHeader, data[rdmap.TermCtrlLen+rdmap.TermSegLenLen:][:len(term.DDPHeader)])) {
			t.Fatalf("DDP header %x", term.DDPHeader)
		}
		if term.R && len(term.RDMAHeader) != rdmap.ReadRequestLen {
			t.Fatalf("RDMA header %x", term.RDMAHeader)
		}
		out := rdmap.AppendTerminate(nil, &term)
		if !bytes.Equal(out, data[:n]) {
			t.Fatalf("re-encoded %x, want %x", out, data[:n])
		}
		var again rdmap.Terminate
		if err := rdmap.ParseTerminateLayout(out, term.Layout, &again); err != nil || again.String() != term.String() ||
			again.Layer != term.Layer || again.EType != term.EType || again.Code != term.Code || again.M != term.M ||
			again.D != term.D || again.R != term.R || again.Reserved != term.Reserved || again.SegLen != term.SegLen ||
			!bytes.Equal(again.DDPHeader, term.DDPHeader) || !bytes.Equal(again.RDMAHeader, term.RDMAHeader) {
			t.Fatalf("second parse %+v, %v; first %+v", again, err, term)
		}
		_ = term.String()
	})
}
