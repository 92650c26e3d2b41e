package perf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gosiw/gosiw/rdmap"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, p := range []Params{
		{Op: OpWrite, Size: 65536, Depth: 16},
		{Op: OpRead, Size: 1, Depth: MaxReadDepth},
		{Op: OpWrite, Size: 1, Depth: MaxDepth},
		{Op: OpSend, Size: MaxSize, Depth: 1},
		{Op: OpPingPong, Size: 64, Depth: 1},
	} {
		b := AppendRequest(nil, &p)
		if len(b) > MaxPrivateData {
			t.Errorf("%q: %d bytes", b, len(b))
		}
		got, err := ParseRequest(b)
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if diff := cmp.Diff(p, got); diff != "" {
			t.Errorf("%q: (-want +got)\n%s", b, diff)
		}
	}
	if got := string(AppendRequest(nil, &Params{Op: OpWrite, Size: 65536, Depth: 16})); got != "gosiw-perf/1 op=write size=65536 depth=16" {
		t.Errorf("request text %q", got)
	}
}

func TestParseRequestErrors(t *testing.T) {
	for pd, want := range map[string]string{
		"gosiw-perf/1 op=foo size=1":              `unknown op "foo"`,
		"gosiw-perf/1 size=1":                     "no op=",
		"gosiw-perf/1 op=write":                   "no size=",
		"gosiw-perf/1 op=write size=x":            "bad size=",
		"gosiw-perf/1 op=write size=0":            "size 0 out of range",
		"gosiw-perf/1 op=write size=67108865":     "size 67108865 out of range",
		"gosiw-perf/1 op=read size=8 depth=129":   "read depth 129 over the ORD limit of 128",
		"gosiw-perf/1 op=send size=8 depth=8193":  "depth 8193 out of range",
		"gosiw-perf/1 op=pingpong size=8 depth=2": "pingpong takes depth 1",
		"gosiw-perf/10 op=write size=8":           "not a gosiw-perf/1 message",
		"gosiw-perf/1 op=write size=8 junk":       `bad field "junk"`,
		"":                                        "not a gosiw-perf/1 message",
	} {
		_, err := ParseRequest([]byte(pd))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", pd, err, want)
		}
	}
	// Unknown keys are ignored; depth defaults to 1.
	p, err := ParseRequest([]byte("gosiw-perf/1 op=send size=100 future=yes"))
	if err != nil || p != (Params{Op: OpSend, Size: 100, Depth: 1}) {
		t.Errorf("%+v %v", p, err)
	}
}

func TestReplyRoundTrip(t *testing.T) {
	r := Reply{STag: 0x12345600, Len: 65536, Recvs: 32}
	b := AppendReply(nil, &r)
	if string(b) != "gosiw-perf/1 stag=0x12345600 len=65536 recvs=32" {
		t.Errorf("reply text %q", b)
	}
	got, err := ParseReply(b)
	if err != nil || got != r {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"gosiw-perf/1 len=1 recvs=2", "gosiw-perf/1 stag=zz len=1 recvs=2",
		"gosiw-perf/1 stag=1 recvs=2", "gosiw-perf/1 stag=1 len=1 recvs=1", "hello"} {
		if _, err := ParseReply([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestRejectTextLimit(t *testing.T) {
	long := errors.New(strings.Repeat("x", 400))
	if b := RejectText(long); len(b) != MaxPrivateData || !strings.HasPrefix(string(b), Prefix+" error: ") {
		t.Errorf("%d bytes: %.40q", len(b), b)
	}
}

func TestCounts(t *testing.T) {
	b := appendCounts(nil, "fin", counts{Ops: 3, Bytes: 300, HasOps: true, HasBytes: true})
	if string(b) != "fin ops=3 bytes=300" {
		t.Fatalf("%q", b)
	}
	verb, rest := parseCtrl(b)
	c, err := parseCounts(rest)
	if verb != "fin" || err != nil || c != (counts{Ops: 3, Bytes: 300, HasOps: true, HasBytes: true}) {
		t.Fatalf("%q %+v %v", verb, c, err)
	}
	if verb, rest := parseCtrl([]byte("ok")); verb != "ok" || rest != "" {
		t.Fatalf("%q %q", verb, rest)
	}
	if _, err := parseCounts("ops=x"); err == nil {
		t.Fatal("bad count parsed")
	}
}

func TestCheckMsg(t *testing.T) {
	pat := make([]byte, 200)
	fillPattern(pat)
	msg := append([]byte(nil), pat...)
	msg[7] = 5 // sequence number 5
	copy(msg, []byte{0, 0, 0, 0, 0, 0, 0, 5})
	if err := checkMsg(msg, 5, pat); err != nil {
		t.Fatal(err)
	}
	if err := checkMsg(msg, 6, pat); err == nil || !strings.Contains(err.Error(), "sequence number 5") {
		t.Fatalf("wrong sequence: %v", err)
	}
	msg[190]++
	if err := checkMsg(msg, 5, pat); err == nil || !strings.Contains(err.Error(), "byte 190") {
		t.Fatalf("wrong tail: %v", err)
	}
	// Short messages carry no sequence number.
	if err := checkMsg(pat[:3], 9, pat); err != nil {
		t.Fatal(err)
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 10000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	l := h.latency()
	within := func(name string, got, want float64) {
		if got < want*0.99 || got > want*1.01 {
			t.Errorf("%s = %v, want %v ±1%%", name, got, want)
		}
	}
	within("mean", l.MeanUS, 5000.5)
	within("p50", l.P50US, 5000)
	within("p99", l.P99US, 9900)
	if l.MinUS != 1 || l.MaxUS != 10000 || l.Samples != 10000 {
		t.Errorf("%+v", l)
	}
	var small histogram
	small.add(50)
	small.add(-1)
	if small.quantile(1) != 50 || small.quantile(0) != 0 {
		t.Errorf("small values: %d %d", small.quantile(0), small.quantile(1))
	}
	var m histogram
	m.merge(&h)
	m.merge(&small)
	if m.n != 10002 || m.min != 0 {
		t.Errorf("merge: n %d min %d", m.n, m.min)
	}
	// Every bucket's midpoint maps back to it.
	for i := range histBuckets {
		if j := histIndex(histValue(i)); j != i {
			t.Fatalf("bucket %d: midpoint %d is in bucket %d", i, histValue(i), j)
		}
	}
}

// TestCreditBound: a responder may return at most the credits the client
// owes it (its receives less the one kept for "fin", less those the
// client still has); one more is a protocol error, before the client
// reposts anything or counts it.
func TestCreditBound(t *testing.T) {
	for _, c := range []struct {
		msg     string
		credits int
	}{
		{"credit 1", 7},                   // nothing owed
		{"credit 4", 4},                   // three owed
		{"credit 9223372036854775807", 0}, // would overflow the count
		{"credit 0", 0},
		{"fin ops=1", 0},
	} {
		s := &rdmaStream{recv: []byte(c.msg), nrecv: 1, recvLen: len(c.msg), peer: Reply{Recvs: 8}, credits: c.credits}
		if err := s.credit(rdmap.WC{ID: 0, ByteLen: uint32(len(c.msg))}); err == nil {
			t.Errorf("%q with %d credits left: taken", c.msg, c.credits)
		}
		if s.credits != c.credits {
			t.Errorf("%q: credits %d, want %d unchanged", c.msg, s.credits, c.credits)
		}
	}
}

// FuzzParseRequest: a Request's private data comes from any client; what
// ParseRequest accepts is valid and is what AppendRequest writes back.
func FuzzParseRequest(f *testing.F) {
	for _, p := range []Params{
		{Op: OpWrite, Size: 65536, Depth: 16},
		{Op: OpRead, Size: 1, Depth: MaxReadDepth},
		{Op: OpSend, Size: MaxSize, Depth: MaxDepth},
		{Op: OpPingPong, Size: 64, Depth: 1},
	} {
		f.Add(AppendRequest(nil, &p))
	}
	f.Add([]byte("gosiw-perf/1 op=send size=0x40 future=yes"))
	f.Fuzz(func(t *testing.T, pd []byte) {
		p, err := ParseRequest(pd)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q parsed to %+v, which is not valid: %v", pd, p, err)
		}
		b := AppendRequest(nil, &p)
		if len(b) > MaxPrivateData {
			t.Fatalf("%+v encodes to %d bytes", p, len(b))
		}
		if got, err := ParseRequest(b); err != nil || got != p {
			t.Fatalf("%q parsed to %+v; its encoding %q to %+v, %v", pd, p, b, got, err)
		}
	})
}

// FuzzParseReply: a Reply's private data comes from any responder.
func FuzzParseReply(f *testing.F) {
	f.Add(AppendReply(nil, &Reply{STag: 0x12345600, Len: 65536, Recvs: 32}))
	f.Add(AppendReply(nil, &Reply{STag: 0xffffffff, Len: 0, Recvs: 2}))
	f.Add([]byte("gosiw-perf/1 stag=1 len=1 recvs=1"))
	f.Fuzz(func(t *testing.T, pd []byte) {
		r, err := ParseReply(pd)
		if err != nil {
			return
		}
		if r.Recvs < 2 || r.Len < 0 {
			t.Fatalf("%q parsed to %+v", pd, r)
		}
		b := AppendReply(nil, &r)
		if got, err := ParseReply(b); err != nil || got != r {
			t.Fatalf("%q parsed to %+v; its encoding %q to %+v, %v", pd, r, b, got, err)
		}
	})
}

// FuzzControl: control messages come from the peer ("fin" from the
// client; "credit", "ok" and "error" from the responder).
func FuzzControl(f *testing.F) {
	f.Add(appendCounts(nil, "fin", counts{Ops: 3, Bytes: 300, HasOps: true, HasBytes: true}))
	f.Add(appendCounts(nil, "ok", counts{Bytes: 1 << 40, HasBytes: true}))
	f.Add([]byte("credit 16"))
	f.Add([]byte("error message 7 differs from the pattern at byte 9"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		verb, rest := parseCtrl(msg)
		if strings.Contains(verb, " ") || len(verb)+len(rest) > len(msg) {
			t.Fatalf("%q split into %q and %q", msg, verb, rest)
		}
		if c, err := parseCounts(rest); err == nil {
			b := appendCounts(nil, verb, c)
			v2, r2 := parseCtrl(b)
			if got, err := parseCounts(r2); v2 != verb || err != nil || got != c {
				t.Fatalf("%q: counts %+v; their encoding %q gives %q %+v, %v", msg, c, b, v2, got, err)
			}
		}
		if n, err := parseCredit(msg); err == nil {
			if n < 1 {
				t.Fatalf("%q: credit %d", msg, n)
			}
			if got, err := parseCredit(fmt.Appendf(nil, "credit %d", n)); err != nil || got != n {
				t.Fatalf("%q: credit %d does not round-trip: %d, %v", msg, n, got, err)
			}
		}
	})
}
