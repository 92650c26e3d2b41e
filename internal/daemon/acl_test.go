package daemon

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func TestACLAllowAndCaps(t *testing.T) {
	a := NewACL([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/30")}, 3, 2)
	c1 := netip.MustParseAddr("127.0.0.1")
	c2 := netip.MustParseAddr("127.0.0.2")
	out := netip.MustParseAddr("127.0.0.9")

	if _, r := a.Admit(out); r == nil || r.Kind != "acl" || !strings.Contains(r.Reason, "127.0.0.9") {
		t.Fatalf("outside client admitted or wrong refusal: %+v", r)
	}
	rel1, r := a.Admit(c1)
	if r != nil {
		t.Fatal(r.Reason)
	}
	rel2, _ := a.Admit(c1)
	if _, r := a.Admit(c1); r == nil || r.Kind != "max_conns_per_client" {
		t.Fatalf("third conn from c1: %+v", r)
	}
	rel3, r := a.Admit(c2)
	if r != nil {
		t.Fatal(r.Reason)
	}
	if _, r := a.Admit(c2); r == nil || r.Kind != "max_conns" {
		t.Fatalf("fourth conn: %+v", r)
	}
	rel1()
	rel1() // idempotent
	if a.Conns() != 2 {
		t.Fatalf("conns = %d, want 2", a.Conns())
	}
	rel4, r := a.Admit(c2)
	if r != nil {
		t.Fatal(r.Reason)
	}
	rel2()
	rel3()
	rel4()
	if a.Conns() != 0 || len(a.perClient) != 0 {
		t.Fatalf("leftover counts: %d %v", a.Conns(), a.perClient)
	}
	// Reload: now everything is allowed; v4-mapped v6 addresses count as v4.
	a.SetAllow(nil)
	if !a.Allowed(netip.MustParseAddr("::ffff:10.1.2.3")) {
		t.Fatal("allow-all after reload")
	}
	a.SetAllow([]netip.Prefix{netip.MustParsePrefix("::1/128")})
	if a.Allowed(c1) || !a.Allowed(netip.MustParseAddr("::1")) {
		t.Fatal("v6 rule")
	}
}

func TestACLReasonLength(t *testing.T) {
	a := NewACL([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, 0, 0)
	_, r := a.Admit(netip.MustParseAddr("fd00:1234:5678:9abc:def0:1234:5678:9abc"))
	if r == nil || len(r.Reason) > MaxReasonLen {
		t.Fatalf("refusal %+v", r)
	}
}

func TestACLConcurrent(t *testing.T) {
	a := NewACL(nil, 50, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rel, r := a.Admit(netip.MustParseAddr("127.0.0.1")); r == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
				_ = rel
			}
		}()
	}
	wg.Wait()
	if admitted != 50 || a.Conns() != 50 {
		t.Fatalf("admitted %d, conns %d, want 50", admitted, a.Conns())
	}
}
