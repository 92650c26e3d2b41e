package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/proto"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "1K": 1024, "64MiB": 64 << 20, "1G": 1 << 30, "2gb": 2 << 30, " 3 M": 3 << 20} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "1X", "G", "99999999999T"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func TestRegionFlag(t *testing.T) {
	rs, err := ParseRegionFlag("name=scratch,size=1G,access=rw")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rs.Build()
	if err != nil || r.Name != "scratch" || r.Size != 1<<30 || r.Access != proto.AccessRead|proto.AccessWrite || r.File != "" {
		t.Fatalf("%+v %v", r, err)
	}
	rs, _ = ParseRegionFlag("name=ro,size=4096,file=/tmp/x,access=r")
	if r, err := rs.Build(); err != nil || r.Access != proto.AccessRead || r.File != "/tmp/x" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"name=a,size=1K,access=x", "name=,size=1K", "name=a", "size=1K,name=a,bogus=1", "name=a size"} {
		rs, err := ParseRegionFlag(bad)
		if err == nil {
			_, err = rs.Build()
		}
		if err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLoadSpec(t *testing.T) {
	p := filepath.Join(t.TempDir(), "siwd.toml")
	os.WriteFile(p, []byte(`
listen = "127.0.0.1:17174"
allow = ["127.0.0.0/8", "::1"]
max_conns = 10
max_conns_per_client = 2
metrics = ""
log_format = "json"
shutdown_timeout = "3s"
[[region]]
name = "scratch"
size = "1M"
access = "rw"
`), 0o644)
	s, err := LoadSpec(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:17174" || len(c.Allow) != 2 || c.Allow[1].Bits() != 128 || c.MaxConns != 10 ||
		c.MaxConnsPerClient != 2 || c.Metrics != "" || c.LogFormat != "json" || c.ShutdownTimeout != 3*time.Second ||
		len(c.Regions) != 1 || c.Regions[0].Size != 1<<20 {
		t.Fatalf("%+v", c)
	}
	os.WriteFile(p, []byte("listen = 1\n"), 0o644)
	if _, err := LoadSpec(p); err == nil {
		t.Fatal("bad type accepted")
	}
	os.WriteFile(p, []byte("lisen = \"x\"\n"), 0o644)
	if _, err := LoadSpec(p); err == nil {
		t.Fatal("unknown key accepted")
	}
	dup := &ConfigSpec{Regions: []RegionSpec{{Name: "a", Size: "1K"}, {Name: "a", Size: "1K"}}}
	if _, err := dup.Build(); err == nil {
		t.Fatal("duplicate region accepted")
	}
	if c, err := (&ConfigSpec{}).Build(); err != nil || c.Listen != DefaultListen || c.Metrics != DefaultMetrics || c.LogFormat != "console" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

// TestDistConfigLoads: the example config in dist/ is valid and sets what
// it says.
func TestDistConfigLoads(t *testing.T) {
	s, err := LoadSpec(filepath.Join("..", "..", "dist", "siwd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	if c.RefusedRequestTimeout != time.Second || c.MaxHandshakes != 1024 || c.MaxHandshakesPerClient != 16 {
		t.Errorf("admission settings %v %d %d", c.RefusedRequestTimeout, c.MaxHandshakes, c.MaxHandshakesPerClient)
	}
	if c.MemoryBudget != 256<<20 || c.MemoryPerConn != 128<<20 {
		t.Errorf("memory budget %d, per connection %d", c.MemoryBudget, c.MemoryPerConn)
	}
}
