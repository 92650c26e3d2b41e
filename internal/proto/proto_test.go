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
	for _, bad := range []string{"", "gosiw-region/1", "gosiw-region/1 stag=0x1 size=2 access=x", "gosiw-perf/1 stag=0x1 size=2 access=r"} {
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
