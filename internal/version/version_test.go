package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/gosiw/gosiw", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	got := fromBuildInfo(bi)
	want := Info{Version: "v0.3.0", Revision: "abc123", Modified: true, GoVersion: "go1.26.0"}
	if got != want {
		t.Fatalf("fromBuildInfo = %+v, want %+v", got, want)
	}
	if s, w := got.String(), "v0.3.0 (revision abc123, modified) go1.26.0"; s != w {
		t.Fatalf("String = %q, want %q", s, w)
	}
	got = fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.0"})
	if got.Version != "unknown" || got.Revision != "unknown" || got.Modified {
		t.Fatalf("no settings: %+v", got)
	}
	if s, w := got.String(), "unknown (revision unknown) go1.26.0"; s != w {
		t.Fatalf("String = %q, want %q", s, w)
	}
}
