package daemon

import (
	"fmt"
	"net/netip"
	"sync"
)

// MaxReasonLen bounds a refusal reason carried as MPA reject private data:
// Linux siw takes at most 256 bytes of private data and, in revision 2,
// wraps lengths of 252-255, so a reason stays at 251 bytes or less.
const MaxReasonLen = 251

// ACL decides which clients may connect: allowed networks, a cap on
// connections in total and per client address. It is safe for concurrent
// use; SetAllow swaps the rules at once (SIGHUP), leaving admitted
// connections alone.
type ACL struct {
	mu           sync.Mutex
	allow        []netip.Prefix // empty: allow all
	maxConns     int            // 0: no cap
	maxPerClient int            // 0: no cap
	total        int
	perClient    map[netip.Addr]int
}

// NewACL returns an ACL with the given rules.
func NewACL(allow []netip.Prefix, maxConns, maxPerClient int) *ACL {
	a := &ACL{maxConns: maxConns, maxPerClient: maxPerClient, perClient: make(map[netip.Addr]int)}
	a.SetAllow(allow)
	return a
}

// SetAllow replaces the allowed networks (nil or empty: allow all).
func (a *ACL) SetAllow(allow []netip.Prefix) {
	c := make([]netip.Prefix, len(allow))
	for i, p := range allow {
		c[i] = p.Masked()
	}
	a.mu.Lock()
	a.allow = c
	a.mu.Unlock()
}

// Allowed reports whether addr is in an allowed network.
func (a *ACL) Allowed(addr netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allowedLocked(addr.Unmap())
}

func (a *ACL) allowedLocked(addr netip.Addr) bool {
	if len(a.allow) == 0 {
		return true
	}
	for _, p := range a.allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Refusal is why a client was refused.
type Refusal struct {
	Kind   string // "acl", "max_conns", "max_conns_per_client"
	Reason string // readable, at most MaxReasonLen bytes
}

// Check reports why a connection from addr would be refused now, or nil;
// it counts nothing (Admit does). The listener asks it at TCP accept, to
// give the handshakes of sources that will be refused short shrift.
func (a *ACL) Check(addr netip.Addr) *Refusal {
	addr = addr.Unmap()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checkLocked(addr)
}

func (a *ACL) checkLocked(addr netip.Addr) *Refusal {
	switch {
	case !a.allowedLocked(addr):
		return refusal("acl", fmt.Sprintf("gosiw siwd: client %s is not allowed by the access rules", addr))
	case a.maxConns > 0 && a.total >= a.maxConns:
		return refusal("max_conns", fmt.Sprintf("gosiw siwd: server is at its connection limit (%d)", a.maxConns))
	case a.maxPerClient > 0 && a.perClient[addr] >= a.maxPerClient:
		return refusal("max_conns_per_client", fmt.Sprintf("gosiw siwd: client %s is at its connection limit (%d)", addr, a.maxPerClient))
	}
	return nil
}

// Admit counts a new connection from addr against the rules. On success it
// returns a release function that the caller must call exactly once when
// the connection ends; otherwise it returns why not.
func (a *ACL) Admit(addr netip.Addr) (release func(), refused *Refusal) {
	addr = addr.Unmap()
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.checkLocked(addr); r != nil {
		return nil, r
	}
	a.total++
	a.perClient[addr]++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.total--
			if a.perClient[addr]--; a.perClient[addr] <= 0 {
				delete(a.perClient, addr)
			}
		})
	}, nil
}

// Conns returns the number of admitted connections.
func (a *ACL) Conns() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

func refusal(kind, reason string) *Refusal {
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	return &Refusal{Kind: kind, Reason: reason}
}
