// Package version reports what build of gosiw is running, from the build
// information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo): the main module's version, the VCS
// revision and whether the work tree had uncommitted changes.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is the build of the running binary. Fields the toolchain did not
// record (a test binary, a build without VCS stamping) read "unknown".
type Info struct {
	Version   string // module version: "v1.2.3", or "(devel)" for a build from a work tree
	Revision  string // VCS revision (commit hash), or "unknown"
	Modified  bool   // the work tree had uncommitted changes at build time
	GoVersion string // the toolchain that built the binary, e.g. "go1.26.0"
}

// Get reads the build information of the running binary. It never fails:
// without build information every field but GoVersion is "unknown".
func Get() Info {
	in := Info{Version: "unknown", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, Revision: "unknown", GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "unknown"
	}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form that --version prints:
// "v1.2.3 (revision 0123abcd..., modified) go1.26.0".
func (in Info) String() string {
	rev := in.Revision
	if in.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("%s (revision %s) %s", in.Version, rev, in.GoVersion)
}
