package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gosiw/gosiw/internal/version"
)

// vmLocked reads VmLck (bytes) from /proc/self/status.
func vmLocked(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmLck:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmLck %q: %v", v, err)
			}
			return n << 10
		}
	}
	t.Skip("no VmLck line")
	return 0
}

// lock_memory really mlocks both kinds of region: VmLck grows by at least
// their sizes while the server lives, and falls back when it is closed.
func TestLockMemoryLocksRegions(t *testing.T) {
	spec, err := LoadSpec(writeFile(t, "siwd.toml", `
lock_memory = true
[[region]]
name = "anon"
size = "64K"
[[region]]
name = "file"
size = "64K"
file = "`+filepath.Join(t.TempDir(), "r.img")+`"
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.LockMemory {
		t.Fatal("lock_memory = true did not set Config.LockMemory")
	}
	before := vmLocked(t)
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Skipf("cannot mlock 128 KiB here (RLIMIT_MEMLOCK): %v", err)
	}
	during := vmLocked(t)
	s.closeRegions()
	s.dev.Close()
	if during-before < 128<<10 {
		t.Fatalf("VmLck grew by %d bytes, want >= %d", during-before, 128<<10)
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics()
	in := version.Get()
	rev := in.Revision
	if in.Modified {
		rev += "-modified"
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gosiw_build_info" {
			continue
		}
		if len(mf.Metric) != 1 || mf.Metric[0].GetGauge().GetValue() != 1 {
			t.Fatalf("gosiw_build_info: %v", mf)
		}
		got := map[string]string{}
		for _, l := range mf.Metric[0].Label {
			got[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": in.Version, "revision": rev, "goversion": in.GoVersion}
		if len(got) != len(want) {
			t.Fatalf("labels %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("labels %v, want %v", got, want)
			}
		}
		return
	}
	t.Fatal("no gosiw_build_info metric")
}
