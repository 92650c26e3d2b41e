package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gosiw/gosiw/internal/version"
)

// newBuildInfo is the gosiw_build_info gauge: always 1, with the running
// build in its labels (version, revision, goversion), so that a dashboard
// can tell which build each siwd runs. A revision from a modified work
// tree carries a "-modified" suffix.
func newBuildInfo(in version.Info) prometheus.Collector {
	rev := in.Revision
	if in.Modified {
		rev += "-modified"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gosiw_build_info",
		Help: "The gosiw build siwd runs: value 1, the build in the labels.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": rev, "goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}
