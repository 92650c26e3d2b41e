package main

import (
	"bytes"
	"context"
	"encoding/json"
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
			c, err := req.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 4, ORD: 4})
			if err == nil {
				conns = append(conns, c)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln
}

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
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	want := map[string]any{
		"accepts_rev1": true, "accepts_rev2": true, "accepts_rev3": false, "enhanced": true,
		"crc_when_requested": true, "markers": "refused", "p2p": true, "rtr_chosen": "write",
		"ird": 128.0, "ord": 4.0, "max_private_data": 512.0, "reject": "mpa_reject",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if ms, ok := got["request_timeout_ms"].(float64); !ok || ms <= 0 {
		t.Errorf("request_timeout_ms = %v", got["request_timeout_ms"])
	}
	if got["rev3_refusal"] != "close" {
		t.Errorf("rev3_refusal = %v", got["rev3_refusal"])
	}
}

func TestProbeGosiwSiwLimits(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the listener's cleanup
	ln := gosiwListener(t, cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData, Markers: mpa.MarkersAccept,
		RTRs: mpa.RTRSetRead | mpa.RTRSetSend}})
	rep, err := runProbe(context.Background(), ln.Addr().String(), probeOptions{timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MaxPrivateData == nil || *rep.MaxPrivateData != 255 || rep.Markers != "accepted" || rep.Reject != nil ||
		rep.RTRChosen == nil || *rep.RTRChosen != "read" || rep.RequestTimeoutMS != nil {
		t.Errorf("report %+v", rep)
	}
	var text bytes.Buffer
	rep.writeText(&text)
	for _, s := range []string{"revision 2", "accepted, enhanced", "PD_Length up to 255", "RTR chosen: read"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
}

func TestProbeNotMPA(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	// A port that refuses connections (and that no other listener can
	// take meanwhile, as a closed listener's port could be).
	addr := testutil.RefusedAddr(t)
	if _, err := runProbe(context.Background(), addr, probeOptions{timeout: time.Second}); err == nil {
		t.Error("probe of a closed port succeeded")
	}
}
