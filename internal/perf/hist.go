package perf

import (
	"math/bits"
	"time"
)

// histogram records latencies in nanoseconds in log-linear buckets (the
// HdrHistogram layout): exact below 128 ns, then 128 buckets per power of
// two, so a percentile is within 1% of the true value. It is a fixed
// ~36 KB whatever the number of samples, and not safe for concurrent use.
type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      uint64 // ns
	min, max uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histMaxBits = 40 // values above 2^40 ns (18 minutes) are clamped
	histBuckets = histSub + (histMaxBits-histSubBits)*histSub
)

func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits - 1 // v>>e is in [histSub, 2*histSub)
	return histSub + e*histSub + int(v>>e) - histSub
}

// histValue returns the midpoint of bucket i.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := (i - histSub) / histSub
	m := uint64(i-histSub-e*histSub) + histSub
	lo := m << e
	return lo + (uint64(1)<<e)/2
}

func (h *histogram) add(d time.Duration) {
	v := uint64(max(d, 0))
	if v >= 1<<histMaxBits {
		v = 1<<histMaxBits - 1
	}
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the value at quantile q (0..1) in ns.
func (h *histogram) quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(histValue(i), h.min), h.max)
		}
	}
	return h.max
}

// Latency summarizes round-trip times in microseconds.
type Latency struct {
	Samples uint64  `json:"samples"`
	MeanUS  float64 `json:"mean_us"`
	P50US   float64 `json:"p50_us,omitempty"`
	P99US   float64 `json:"p99_us,omitempty"`
	MinUS   float64 `json:"min_us,omitempty"`
	MaxUS   float64 `json:"max_us,omitempty"`
}

func (h *histogram) latency() *Latency {
	if h.n == 0 {
		return nil
	}
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	return &Latency{
		Samples: h.n,
		MeanUS:  float64(h.sum) / float64(h.n) / 1e3,
		P50US:   us(h.quantile(0.50)),
		P99US:   us(h.quantile(0.99)),
		MinUS:   us(h.min),
		MaxUS:   us(h.max),
	}
}
