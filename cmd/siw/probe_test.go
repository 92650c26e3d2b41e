package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// The cmd/siw test binary is shared with the dump command's tests, so
// these check for leaked goroutines one by one.

// gosiwListener is a gosiw listener that accepts everything with IRD/ORD
// 4/4 (relaxed negotiation grants a 128/128 asker IRD 128, ORD 4).
func gosiwListener(t *testing.T, cfg cm.Config) *cm.Listener {
	return gosiwULP(t, cfg, nil)
}

// gosiwULP is a gosiw listener whose upper layer rejects every Request
// with reason as private data (nil: accepts; empty: rejects without any).
func gosiwULP(t *testing.T, cfg cm.Config, reason []byte) *cm.Listener {
	t.Helper()
	return gosiwULPFunc(t, cfg, func([]byte) []byte { return reason })
}

// gosiwULPFunc is gosiwULP with the answer chosen by the request's
// private data: reason(pd) nil accepts.
func gosiwULPFunc(t *testing.T, cfg cm.Config, reason func(pd []byte) []byte) *cm.Listener {
	t.Helper()
	dev, _ := rdmap.NewDevice(nil)
	ln, err := cm.Listen(context.Background(), "127.0.0.1:0", dev, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []*cm.Conn
		defer func() {
			for _, c := range conns {
				c.Abort()
			}
		}()
		for {
			req, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			if r := reason(req.PrivateData); r != nil {
				req.Reject(r)
				continue
			}
			c, err := req.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 4, ORD: 4})
			if err == nil {
				conns = append(conns, c)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; dev.Close() })
	return ln
}

// probeValues runs the probe and returns each fact's value (nil: unknown)
// and the report.
func probeValues(t *testing.T, addr string, o probeOptions) (map[string]any, *probeReport) {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 2 * time.Second
	}
	rep, err := runProbe(context.Background(), addr, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for k, v := range doc {
		if f, ok := v.(map[string]any); ok {
			got[k] = f["value"]
			if from, _ := f["from"].(string); from == "" {
				t.Errorf("%s: no source (from) for %v", k, f["value"])
			}
		}
	}
	return got, rep
}

func checkFacts(t *testing.T, got map[string]any, want map[string]any, rep *probeReport) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if t.Failed() {
		var text bytes.Buffer
		rep.writeText(&text)
		t.Logf("report:\n%s", text.String())
	}
}

// unknownFact stands for a fact the probe must report as unknown.
var unknownFact any = nil

func TestProbeGosiwDefaults(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the listener's cleanup
	ln := gosiwListener(t, cm.Config{RequestTimeout: 300 * time.Millisecond})
	var out bytes.Buffer
	cmd := newProbeCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--json", "--timeout", "2s", "--request-timeout-wait", "5s", ln.Addr().String()})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Peer    string    `json:"peer"`
		Markers probeFact `json:"markers"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Peer != ln.Addr().String() {
		t.Fatalf("%v: %s", err, out.String())
	}
	got, rep := probeValues(t, ln.Addr().String(), probeOptions{waitRequest: 5 * time.Second})
	checkFacts(t, got, map[string]any{
		"ulp": "accepts", "rev1": "accepted", "rev2": "accepted", "rev3": "refused", "enhanced": true,
		"crc_when_requested": "on", "crc_when_not_requested": "off", "markers": "refused", "markers_refusal": "reply_r_set",
		"p2p": true, "rtr_chosen": "write", "ird": 128.0, "ord": 4.0, "max_private_data": 512.0,
	}, rep)
	if ms, ok := got["request_timeout_ms"].(float64); !ok || ms <= 0 {
		t.Errorf("request_timeout_ms = %v", got["request_timeout_ms"])
	}
	if doc.Markers.Value != "refused" || !strings.Contains(doc.Markers.From, "a Reply with R set and no private data answered a revision 2 enhanced Request with M set") ||
		!strings.Contains(doc.Markers.From, "an MPA-level refusal") {
		t.Errorf("--json markers %+v", doc.Markers)
	}
}

func TestProbeGosiwSiwLimits(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the listener's cleanup
	ln := gosiwListener(t, cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData, Markers: mpa.MarkersAccept,
		RTRs: mpa.RTRSetRead | mpa.RTRSetSend}})
	got, rep := probeValues(t, ln.Addr().String(), probeOptions{})
	checkFacts(t, got, map[string]any{
		"max_private_data": float64(mpa.SiwMaxPrivateData), "markers": "accepted", "rtr_chosen": "read",
		"markers_refusal": unknownFact, "request_timeout_ms": unknownFact,
	}, rep)
	var text bytes.Buffer
	rep.writeText(&text)
	for _, s := range []string{"revision 2           accepted", "max PD_Length        255", "RTR chosen           read",
		"from: bisection: PD_Length 255 taken, 256 refused", "request timeout      unknown"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
}

// Each policy shows in the facts it governs.
func TestProbeGosiwPolicies(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	for _, c := range []struct {
		name string
		p    mpa.Policy
		want map[string]any
	}{
		{"CRCOn", mpa.Policy{CRC: mpa.CRCOn}, map[string]any{"crc_when_requested": "on", "crc_when_not_requested": "on"}},
		{"CRCRequired", mpa.Policy{CRC: mpa.CRCRequired}, map[string]any{"crc_when_requested": "on", "crc_when_not_requested": "on"}},
		{"CRCStrict", mpa.Policy{CRC: mpa.CRCStrict}, map[string]any{"crc_when_requested": "refused", "crc_when_not_requested": "off"}},
		{"MarkersRequest", mpa.Policy{Markers: mpa.MarkersRequest}, map[string]any{"markers": "accepted"}},
		{"Rev1", mpa.Policy{Rev: mpa.Rev1}, map[string]any{"rev1": "accepted", "rev2": "answered with revision 1", "enhanced": false,
			"ird": unknownFact, "max_private_data": unknownFact, "p2p": unknownFact}},
		{"RTRSend", mpa.Policy{RTRs: mpa.RTRSetSend}, map[string]any{"p2p": true, "rtr_chosen": "send"}},
		{"MaxIRD", mpa.Policy{MaxIRD: 8, MaxORD: 8}, map[string]any{"ird": 8.0, "ord": 4.0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln := gosiwListener(t, cm.Config{MPA: c.p})
			got, rep := probeValues(t, ln.Addr().String(), probeOptions{})
			checkFacts(t, got, c.want, rep)
		})
	}
}

// An upper layer that rejects the probe's private data with a reason:
// the MPA layer's answers still show (it took the Requests), and what only
// an accept says is unknown, not "refused".
func TestProbeULPRejects(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ln := gosiwULP(t, cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}, []byte("no such service"))
	got, rep := probeValues(t, ln.Addr().String(), probeOptions{})
	checkFacts(t, got, map[string]any{
		"ulp": `rejects: "no such service"`, "rev1": "accepted", "rev2": "accepted", "rev3": "refused", "enhanced": true,
		"markers": "refused", "markers_refusal": "reply_r_set", "max_private_data": float64(mpa.SiwMaxPrivateData),
		"ird": unknownFact, "ord": unknownFact, "crc_when_requested": unknownFact, "p2p": unknownFact, "rtr_chosen": unknownFact,
	}, rep)
	if !strings.Contains(rep.Rev2.From, `the MPA layer took it, its upper layer refused`) || !strings.Contains(rep.IRD.From, "only an accepting Reply carries") {
		t.Errorf("sources: rev2 %q, ird %q", rep.Rev2.From, rep.IRD.From)
	}
}

// An upper layer that rejects without a word looks like the MPA layer
// refusing: the probe says it cannot tell.
func TestProbeULPRejectsBare(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ln := gosiwULP(t, cm.Config{}, []byte{})
	got, rep := probeValues(t, ln.Addr().String(), probeOptions{})
	checkFacts(t, got, map[string]any{
		"ulp": unknownFact, "rev1": unknownFact, "rev2": unknownFact, "markers": unknownFact, "max_private_data": unknownFact,
		"rev3": "refused", "markers_refusal": unknownFact,
	}, rep)
	if !strings.Contains(rep.Rev2.From, "look the same") {
		t.Errorf("rev2 source %q", rep.Rev2.From)
	}
}

// siw perf -s rejects Requests without its own private data: the probe
// reports the MPA layer's answers from those rejects, and with
// --private-data set to a perf request the accepting facts too.
func TestProbePerfResponder(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	addr, _ := perfResponder(t)
	got, rep := probeValues(t, addr, probeOptions{})
	checkFacts(t, got, map[string]any{"rev1": "accepted", "rev2": "accepted", "enhanced": true, "ird": unknownFact, "markers": "refused"}, rep)
	if s, _ := got["ulp"].(string); !strings.HasPrefix(s, `rejects: "gosiw-perf/1 error: `) {
		t.Errorf("ulp = %v", got["ulp"])
	}
}

// A peer that speaks another protocol is named as such, with what it said.
func TestProbeNotIWARP(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := testutil.ForeignServer(t, []byte("SSH-2.0-OpenSSH_9.2\r\n"), true)
	_, err := runProbe(context.Background(), addr, probeOptions{timeout: 2 * time.Second})
	want := `probe: not an iWARP peer: ` + addr + ` answered "SSH-2.0-OpenSSH_9.2" to an MPA Request`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

func TestProbeUnreachable(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	// A port that refuses connections (and that no other listener can
	// take meanwhile, as a closed listener's port could be).
	addr := testutil.RefusedAddr(t)
	_, err := runProbe(context.Background(), addr, probeOptions{timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "unreachable: "+addr+" refused the TCP connection") {
		t.Errorf("error %v", err)
	}
	if _, err := runProbe(context.Background(), "127.0.0.1:http", probeOptions{}); err == nil || !strings.Contains(err.Error(), `port "http": want a number`) {
		t.Errorf("bad port: %v", err)
	}
}

// FuzzProbeAnswer feeds the probe's reading and judging of an answer any
// bytes a peer may send: no panic, and a classification that holds.
func FuzzProbeAnswer(f *testing.F) {
	for _, fr := range []mpa.Frame{
		{Reply: true, Rev: mpa.Rev2, Enhanced: true, IRD: 128, ORD: 4},
		{Reply: true, Reject: true, Rev: mpa.Rev2, Enhanced: true, PrivateData: []byte("no such service")},
		{Reply: true, Reject: true, Rev: mpa.Rev1},
		{Reply: true, Rev: mpa.Rev2, Enhanced: true, P2P: true, RTRWrite: true},
	} {
		b, err := mpa.AppendFrame(nil, &fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
	f.Add([]byte{})
	req := request(enhancedRequest(128, 128))
	f.Fuzz(func(t *testing.T, answer []byte) {
		a, b := net.Pipe()
		go func() {
			buf := make([]byte, len(req))
			if _, err := io.ReadFull(b, buf); err == nil {
				b.Write(answer)
			}
			b.Close()
		}()
		p := &prober{o: probeOptions{timeout: time.Second}}
		o, err := p.exchange(a, req)
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		kinds := 0
		for _, k := range []bool{o.accepted(), o.ulpReject(), o.bareReject(), o.reply == nil} {
			if k {
				kinds++
			}
		}
		if kinds != 1 {
			t.Fatalf("%+v is not exactly one kind of answer", o)
		}
		_ = o.describe()
		for _, ulp := range []string{"accepts", "rejects", "bare", ""} {
			took, from := judge{ulp: ulp}.took(o, "a Request")
			if from == "" || (took == nil && !o.bareReject()) {
				t.Fatalf("took %v from %q for %+v", took, from, o)
			}
		}
		if o.reply == nil {
			if err := notIWARP("peer:1", o, time.Second); err == nil {
				t.Fatal("no error for a peer without a Reply")
			}
		}
	})
}

// With --private-data the probe speaks the ULP's language: a ULP that
// accepts only its own private data shows what only an accept tells.
func TestProbePrivateData(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ln := gosiwULPFunc(t, cm.Config{}, func(pd []byte) []byte {
		if string(pd) == "open sesame" {
			return nil
		}
		return []byte("say the word")
	})
	got, rep := probeValues(t, ln.Addr().String(), probeOptions{privateData: []byte("open sesame")})
	checkFacts(t, got, map[string]any{
		"ulp": "accepts", "rev2": "accepted", "ird": 128.0, "ord": 4.0, "crc_when_requested": "on", "p2p": true,
		"rtr_chosen": "write", "markers": "refused", "max_private_data": 512.0,
	}, rep)
	if !strings.Contains(rep.ULP.From, `private data "open sesame"`) {
		t.Errorf("ulp source %q", rep.ULP.From)
	}
	// The same ULP without it: the accept-only facts are unknown.
	got, rep = probeValues(t, ln.Addr().String(), probeOptions{})
	checkFacts(t, got, map[string]any{"ulp": `rejects: "say the word"`, "rev2": "accepted", "ird": unknownFact, "max_private_data": 512.0}, rep)
	if !strings.Contains(rep.ULP.From, "--private-data") {
		t.Errorf("ulp source %q does not suggest --private-data", rep.ULP.From)
	}
	// The flag takes hex after 0x.
	var out bytes.Buffer
	cmd := newProbeCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--json", "--request-timeout-wait", "0", "--private-data", "0x6f70656e20736573616d65", ln.Addr().String()})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"value": "accepts"`) {
		t.Errorf("--private-data 0x...: %s", out.String())
	}
	cmd = newProbeCmd()
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--private-data", "0xzz", ln.Addr().String()})
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "not hex") {
		t.Errorf("--private-data 0xzz: %v", err)
	}
}

// The [MS-SMBD] header question: a gosiw peer with mpa.Policy.SMBD
// answers it with the IRD/ORD it grants (relaxed negotiation: IRD raised
// to the asked ORD 128, ORD 4), refuses a plain revision 1 Request (no
// header) at the MPA level, and still puts a header before its upper
// layer's reason; without the option there is no header.
func TestProbeGosiwSMBD(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	for _, c := range []struct {
		name   string
		p      mpa.Policy
		reason []byte
		want   map[string]any
	}{
		{"on", mpa.Policy{SMBD: true}, nil, map[string]any{"smbd_header": "IRD 128 ORD 4", "rev1": "accepted only with the [MS-SMBD] header", "rev2": "accepted"}},
		{"on, limits", mpa.Policy{SMBD: true, MaxIRD: 16, MaxORD: 8}, nil, map[string]any{"smbd_header": "IRD 16 ORD 4"}},
		// The listener refuses Accept's ORD 4 over MaxORD 2: the reject
		// still carries a header, with the limits.
		{"on, accept refused", mpa.Policy{SMBD: true, MaxIRD: 16, MaxORD: 2}, nil, map[string]any{"smbd_header": "IRD 16 ORD 2"}},
		{"on, ULP rejects", mpa.Policy{SMBD: true}, []byte("go away"), map[string]any{"smbd_header": "IRD 128 ORD 128"}},
		{"off", mpa.Policy{}, nil, map[string]any{"smbd_header": smbdNone, "rev1": "accepted"}},
		{"off, ULP rejects", mpa.Policy{}, []byte("go away"), map[string]any{"smbd_header": smbdNone}},
		{"off, revision 1", mpa.Policy{Rev: mpa.Rev1}, nil, map[string]any{"smbd_header": smbdNone, "rev1": "accepted"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ln *cm.Listener
			if c.reason != nil {
				ln = gosiwULP(t, cm.Config{MPA: c.p}, c.reason)
			} else {
				ln = gosiwListener(t, cm.Config{MPA: c.p})
			}
			got, rep := probeValues(t, ln.Addr().String(), probeOptions{})
			checkFacts(t, got, c.want, rep)
			var text bytes.Buffer
			rep.writeText(&text)
			if !strings.Contains(text.String(), "MS-SMBD header") {
				t.Errorf("text lacks the MS-SMBD line:\n%s", text.String())
			}
		})
	}
}
