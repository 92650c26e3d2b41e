// Package proto holds the private-data protocols of gosiw's own services,
// the bytes a client and siwd exchange in the MPA Request and Reply
// (RFC 5044 §7.1) before any RDMA traffic: the service prefixes that
// route a Request, and the region protocol (a client asks for an exported
// region by name; the Reply names its STag, size and access). It imports
// only the standard library and ddp, so a client (cmd/siw) parses a
// Reply without linking the daemon.
//
// The perf protocol's Request and Reply fields are package perf's
// (internal/perf, proto.go): perf is their only reader and writer on both
// sides. Its prefix is here, because siwd routes by it.
package proto

import (
	"fmt"

	"github.com/gosiw/gosiw/ddp"
)

// Service prefixes in a Request's private data. siwd routes a Request
// with none (empty private data) to rping.
const (
	// RegionPrefix, then the region's name, asks for an exported region.
	RegionPrefix = "gosiw-region/1 "
	// PerfPrefix starts the private data of every perf Request and
	// Reply.
	PerfPrefix = "gosiw-perf/1"
)

// Access is what clients may do to an exported region.
type Access uint8

// Access bits.
const (
	AccessRead  Access = 1 << iota // remote read
	AccessWrite                    // remote write
)

// String returns "r", "w", "rw" or "none".
func (a Access) String() string {
	switch a {
	case AccessRead:
		return "r"
	case AccessWrite:
		return "w"
	case AccessRead | AccessWrite:
		return "rw"
	}
	return "none"
}

// ParseAccess parses "r", "w" or "rw".
func ParseAccess(s string) (Access, error) {
	switch s {
	case "r":
		return AccessRead, nil
	case "w":
		return AccessWrite, nil
	case "rw", "wr":
		return AccessRead | AccessWrite, nil
	}
	return 0, fmt.Errorf("access %q: want r, w or rw", s)
}

// RegionReply is the private data of siwd's Reply to a region request:
// "gosiw-region/1" then the STag, the size in bytes and the access, as
// text for readability: "gosiw-region/1 stag=0x12345601 size=1073741824
// access=rw".
func RegionReply(stag ddp.STag, size int64, acc Access) string {
	return fmt.Sprintf("gosiw-region/1 stag=%#08x size=%d access=%s", uint32(stag), size, acc)
}

// ParseRegionReply decodes RegionReply's text.
func ParseRegionReply(pd []byte) (stag ddp.STag, size int64, acc Access, err error) {
	var st uint32
	var a string
	if _, err = fmt.Sscanf(string(pd), "gosiw-region/1 stag=0x%x size=%d access=%s", &st, &size, &a); err != nil {
		return 0, 0, 0, fmt.Errorf("siwd: bad region reply %q: %w", pd, err)
	}
	if size < 0 {
		return 0, 0, 0, fmt.Errorf("siwd: bad region reply %q: negative size", pd)
	}
	acc, err = ParseAccess(a)
	return ddp.STag(st), size, acc, err
}
