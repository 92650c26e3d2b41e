package perf

import (
	"testing"
	"time"
)

// TestReportIgnoresTickTimes drives the reporter with ticks whose times go
// backwards, as a ticker's can on a busy machine (a tick's time is when it
// was meant to fire, not when the reporter takes it): every interval must
// start where the previous one ended, end no earlier than it starts, and
// follow the clock the reporter reads, not the tick's time.
func TestReportIgnoresTickTimes(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// The clock the reporter reads when it takes each tick: the second
	// tick is taken late (444 ms), the third is taken at 444 ms too (a
	// clock that does not advance), the fourth at 500 ms.
	clock := []time.Time{at(100), at(444), at(444), at(500)}
	// The times the ticks carry: the second was meant for 200 ms but its
	// value was made late (444 ms); the third says 300 ms.
	ticks := []time.Time{at(100), at(444), at(300), at(400)}

	stats := make([]streamStats, 2)
	tick := make(chan time.Time)
	measured := make(chan struct{})
	now := func() time.Time {
		c := clock[0]
		clock = clock[1:]
		return c
	}
	var got []Interval
	taken := make(chan struct{})
	o := &Options{Op: OpWrite, Interval: 100 * time.Millisecond, OnInterval: func(iv *Interval) {
		got = append(got, *iv)
		taken <- struct{}{}
	}}
	done := make(chan []Interval)
	go func() { done <- report(o, t0, now, tick, stats, measured) }()
	for i, v := range ticks {
		stats[0].bytes.Add(uint64(1000 * (i + 1)))
		stats[1].ops.Add(1)
		tick <- v
		<-taken
	}
	// The streams stopped at 530 ms and 560 ms.
	stats[0].end, stats[1].end = at(530), at(560)
	close(measured)
	<-taken
	out := <-done

	want := [][2]float64{{0, 0.1}, {0.1, 0.444}, {0.444, 0.444}, {0.444, 0.5}, {0.5, 0.56}}
	if len(out) != len(want) || len(got) != len(want) {
		t.Fatalf("%d intervals (%d reported), want %d: %+v", len(out), len(got), len(want), out)
	}
	const eps = 1e-9
	for i, iv := range out {
		s := iv.Sum
		if d := s.Start - want[i][0]; d > eps || d < -eps {
			t.Errorf("interval %d starts at %.4f, want %.4f", i, s.Start, want[i][0])
		}
		if d := s.End - want[i][1]; d > eps || d < -eps {
			t.Errorf("interval %d ends at %.4f, want %.4f", i, s.End, want[i][1])
		}
		if s.End < s.Start || s.Seconds < 0 {
			t.Errorf("interval %d ends before it starts: %+v", i, s)
		}
		for _, st := range iv.Streams {
			if st.Start != s.Start || st.End != s.End {
				t.Errorf("interval %d stream %d spans %.4f-%.4f, the sum %.4f-%.4f", i, st.ID, st.Start, st.End, s.Start, s.End)
			}
		}
	}
	if b := out[1].Streams[0].Bytes; b != 2000 {
		t.Errorf("interval 1 holds %d bytes of stream 1, want 2000", b)
	}
	if out[2].Sum.BitsPerSecond != 0 {
		t.Errorf("an empty interval has a rate: %+v", out[2].Sum)
	}
}
