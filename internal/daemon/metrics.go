package daemon

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gosiw/gosiw/internal/version"
)

// Metrics are siwd's Prometheus metrics, on a registry of their own (no
// process-global registration).
type Metrics struct {
	Registry    *prometheus.Registry
	Connections prometheus.Gauge
	Handshakes  *prometheus.CounterVec // result=accepted|rejected|failed, reason
	Admissions  *prometheus.CounterVec // class=allowed|refused, decided at TCP accept
	Bytes       *prometheus.CounterVec // dir=rx|tx, opcode
	Ops         *prometheus.CounterVec // dir=rx|tx, opcode
	Terminates  *prometheus.CounterVec // dir=sent|received, layer, etype, ecode
	QPs         prometheus.Gauge
	Memory      prometheus.Gauge // bytes of the memory budget reserved
	// IdleDisconnects counts connections the idle limit disconnected.
	IdleDisconnects prometheus.Counter
	CQs             prometheus.Gauge
	OpLatency       *prometheus.HistogramVec // op
}

// OpCounters returns the Ops and Bytes counters of direction dir and
// opcode (package perf's Metrics).
func (m *Metrics) OpCounters(dir, opcode string) (ops, bytes prometheus.Counter) {
	return m.Ops.WithLabelValues(dir, opcode), m.Bytes.WithLabelValues(dir, opcode)
}

// LatencyObserver returns the OpLatency histogram of op (package perf's
// Metrics).
func (m *Metrics) LatencyObserver(op string) prometheus.Observer {
	return m.OpLatency.WithLabelValues(op)
}

// HandshakeCounter returns the Handshakes counter of result and reason
// (package perf's Metrics).
func (m *Metrics) HandshakeCounter(result, reason string) prometheus.Counter {
	return m.Handshakes.WithLabelValues(result, reason)
}

// NewMetrics creates the metrics on a new registry (with Go and process
// collectors).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "siwd_connections", Help: "Established iWARP connections.",
		}),
		Handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siwd_handshakes_total", Help: "MPA handshakes by result (accepted, rejected, failed) and reason.",
		}, []string{"result", "reason"}),
		Admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siwd_admissions_total",
			Help: "TCP connections by the class given at accept from the source address: allowed, or refused (short deadline, apart from the allowed).",
		}, []string{"class"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siwd_bytes_total", Help: "Payload bytes by direction and RDMAP opcode.",
		}, []string{"dir", "opcode"}),
		Ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siwd_operations_total", Help: "RDMAP operations by direction and opcode.",
		}, []string{"dir", "opcode"}),
		Terminates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siwd_terminates_total", Help: "Terminate messages sent and received by layer, error type and code.",
		}, []string{"dir", "layer", "etype", "ecode"}),
		QPs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "siwd_qps", Help: "Queue pairs in use."}),
		Memory: prometheus.NewGauge(prometheus.GaugeOpts{Name: "siwd_memory_reserved_bytes",
			Help: "Bytes of the memory budget that connections hold for their buffers."}),
		IdleDisconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "siwd_idle_disconnects_total",
			Help: "Established connections disconnected after the idle timeout without traffic."}),
		CQs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "siwd_cqs", Help: "Completion queues in use."}),
		OpLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "siwd_operation_latency_seconds",
			Help:    "Latency of operations served, from request to completion.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 20),
		}, []string{"op"}),
	}
	r.MustRegister(m.Connections, m.Handshakes, m.Admissions, m.Bytes, m.Ops, m.Terminates, m.QPs, m.Memory, m.IdleDisconnects, m.CQs, m.OpLatency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.MustRegister(newBuildInfo(version.Get()))
	return m
}

// Handler serves /metrics and /healthz.
func (m *Metrics) Handler(healthy func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}
