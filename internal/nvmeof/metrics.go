package nvmeof

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the target's Prometheus metrics. Make them with NewMetrics
// and pass them in Config.Metrics; a nil *Metrics counts nothing.
type Metrics struct {
	// Commands counts completed commands by queue (admin, io), opcode
	// name and status name.
	Commands *prometheus.CounterVec
	// Bytes counts data moved by direction: "read" (to hosts), "write"
	// (from hosts).
	Bytes *prometheus.CounterVec
	// Queues is the number of connected queues by kind (admin, io).
	Queues *prometheus.GaugeVec
	// Controllers is the number of live controllers.
	Controllers prometheus.Gauge
	// Refused counts refused queues and hosts by reason.
	Refused *prometheus.CounterVec
	// Latency is the time from a command's arrival to its completion
	// being posted, by opcode name.
	Latency *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "siwd_nvme_commands_total",
			Help: "NVMe-oF commands completed, by queue kind, opcode and status."}, []string{"queue", "opcode", "status"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "siwd_nvme_bytes_total",
			Help: "NVMe-oF I/O data bytes: read (to hosts) and written (from hosts)."}, []string{"dir"}),
		Queues: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "siwd_nvme_queues",
			Help: "Connected NVMe-oF queues by kind (admin, io)."}, []string{"kind"}),
		Controllers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "siwd_nvme_controllers", Help: "Live NVMe-oF controllers."}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "siwd_nvme_refused_total",
			Help: "NVMe-oF queues and hosts refused or failed, by reason."}, []string{"reason"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "siwd_nvme_command_latency_seconds",
			Help:    "Time from a command's capsule to its completion being posted, by opcode.",
			Buckets: prometheus.ExponentialBuckets(2e-6, 2, 22)}, []string{"opcode"}),
	}
	if reg != nil {
		reg.MustRegister(m.Commands, m.Bytes, m.Queues, m.Controllers, m.Refused, m.Latency)
	}
	return m
}

var adminOps = map[uint8]string{AdminGetLogPage: "get_log_page", AdminIdentify: "identify", AdminAbort: "abort",
	AdminSetFeatures: "set_features", AdminGetFeatures: "get_features", AdminAsyncEvent: "async_event", AdminKeepAlive: "keep_alive"}
var ioOps = map[uint8]string{IOFlush: "flush", IOWrite: "write", IORead: "read", IOWriteZeroes: "write_zeroes", IODSM: "dsm"}
var fabricsOps = map[uint8]string{FabricsPropertySet: "property_set", FabricsConnect: "connect", FabricsPropertyGet: "property_get"}

// OpName names a command's opcode ("read", "identify", "connect", ...;
// "unknown" for any other).
func OpName(c *Command, io bool) string {
	var n string
	switch {
	case c.Opcode() == OpFabrics:
		n = fabricsOps[c.FCType()]
	case io:
		n = ioOps[c.Opcode()]
	default:
		n = adminOps[c.Opcode()]
	}
	if n == "" {
		return "unknown"
	}
	return n
}

// counters are the totals the SMART log reports.
type counters struct {
	readCmds, writeCmds, readUnits, writeUnits atomic.Uint64
}

func (t *Target) observe(s *slot, st Status) {
	if s.io && st == StatusSuccess {
		switch s.cmd.Opcode() {
		case IORead:
			t.cnt.readCmds.Add(1)
			t.cnt.readUnits.Add(uint64(s.bytes))
		case IOWrite:
			t.cnt.writeCmds.Add(1)
			t.cnt.writeUnits.Add(uint64(s.bytes))
		}
	}
	m := t.m
	if m == nil {
		return
	}
	kind := "admin"
	if s.io {
		kind = "io"
	}
	op := OpName(&s.cmd, s.io)
	m.Commands.WithLabelValues(kind, op, st.String()).Inc()
	m.Latency.WithLabelValues(op).Observe(time.Since(s.start).Seconds())
	if s.io && s.cmd.Opcode() != OpFabrics && s.bytes > 0 && st == StatusSuccess {
		dir := "read"
		if s.dir < 0 {
			dir = "write"
		}
		m.Bytes.WithLabelValues(dir).Add(float64(s.bytes))
	}
}

// smart returns the SMART / Health Information log page.
func (t *Target) smart() []byte {
	b := make([]byte, 512)
	le.PutUint16(b[1:], 273+40) // composite temperature, kelvin
	b[3], b[4] = 100, 10        // available spare, threshold
	// Data units are thousands of 512-byte units, rounded up.
	du := func(n uint64) uint64 { return (n/512 + 999) / 1000 }
	le.PutUint64(b[32:], du(t.cnt.readUnits.Load()))
	le.PutUint64(b[48:], du(t.cnt.writeUnits.Load()))
	le.PutUint64(b[64:], t.cnt.readCmds.Load())
	le.PutUint64(b[80:], t.cnt.writeCmds.Load())
	return b
}

func (m *Metrics) refused(why string) {
	if m != nil {
		m.Refused.WithLabelValues(why).Inc()
	}
}

func (m *Metrics) fatal(why string) { m.refused("fatal: " + why) }

func (m *Metrics) keepAliveTimeout() { m.refused("keep_alive_timeout") }

func kindOf(admin bool) string {
	if admin {
		return "admin"
	}
	return "io"
}

func (m *Metrics) queueUp(admin bool) {
	if m != nil {
		m.Queues.WithLabelValues(kindOf(admin)).Inc()
	}
}

func (m *Metrics) queueDown(admin bool) {
	if m != nil {
		m.Queues.WithLabelValues(kindOf(admin)).Dec()
	}
}

func (m *Metrics) ctrlUp() {
	if m != nil {
		m.Controllers.Inc()
	}
}

func (m *Metrics) ctrlDown() {
	if m != nil {
		m.Controllers.Dec()
	}
}
