package proto_test

import (
	"strings"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/internal/proto"
)

func TestRegionReplyRoundTrip(t *testing.T) {
	for _, acc := range []proto.Access{proto.AccessRead, proto.AccessWrite, proto.AccessRead | proto.AccessWrite} {
		pd := proto.RegionReply(0x12345601, 1<<30, acc)
		if !strings.HasPrefix(pd, strings.TrimSpace(proto.RegionPrefix)) {
			t.Errorf("%q does not start with the region prefix", pd)
		}
		stag, size, got, err := proto.ParseRegionReply([]byte(pd))
		if err != nil || stag != ddp.STag(0x12345601) || size != 1<<30 || got != acc {
			t.Errorf("%q: %#x %d %v %v", pd, stag, size, got, err)
		}
	}
	if want := "gosiw-region/1 stag=0x12345601 size=1073741824 access=rw"; proto.RegionReply(0x12345601, 1<<30, proto.AccessRead|proto.AccessWrite) != want {
		t.Errorf("reply text changed, want %q", want)
	}
	for _, bad := range []string{"", "gosiw-region/1", "gosiw-region/1 stag=0x1 size=2 access=x", "gosiw-perf/1 stag=0x1 size=2 access=r", "gosiw-region/1 stag=0x1 size=-2 access=r"} {
		if _, _, _, err := proto.ParseRegionReply([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestAccess(t *testing.T) {
	for s, want := range map[string]proto.Access{"r": proto.AccessRead, "w": proto.AccessWrite, "rw": proto.AccessRead | proto.AccessWrite, "wr": proto.AccessRead | proto.AccessWrite} {
		if got, err := proto.ParseAccess(s); err != nil || got != want {
			t.Errorf("ParseAccess(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := proto.ParseAccess("x"); err == nil {
		t.Error("ParseAccess(x) took it")
	}
	if proto.Access(0).String() != "none" {
		t.Error("zero access")
	}
}

// FuzzParseRegionReply: the Reply's private data comes from whatever
// answers at siwd's address; what ParseRegionReply accepts is a region
// of a size and rights RegionReply writes back the same.
func FuzzParseRegionReply(f *testing.F) {
	f.Add([]byte(proto.RegionReply(0x12345601, 1<<30, proto.AccessRead|proto.AccessWrite)))
	f.Add([]byte(proto.RegionReply(0xffffffff, 0, proto.AccessRead)))
	f.Add([]byte("gosiw-region/1 stag=0x1 size=-2 access=w"))
	f.Fuzz(func(t *testing.T, pd []byte) {
		stag, size, acc, err := proto.ParseRegionReply(pd)
		if err != nil {
			return
		}
		if size < 0 || acc&^(proto.AccessRead|proto.AccessWrite) != 0 || acc == 0 {
			t.Fatalf("%q parsed to size %d, access %v", pd, size, acc)
		}
		b := proto.RegionReply(stag, size, acc)
		if s2, z2, a2, err := proto.ParseRegionReply([]byte(b)); err != nil || s2 != stag || z2 != size || a2 != acc {
			t.Fatalf("%q parsed to %#x %d %v; its encoding %q to %#x %d %v, %v", pd, stag, size, acc, b, s2, z2, a2, err)
		}
	})
}
