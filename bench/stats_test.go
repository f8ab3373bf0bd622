package bench

import (
	"math"
	"os"
	"testing"
	"time"
)

func durs(vs ...int) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v) * time.Microsecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample p50", durs(7), 50, 7 * time.Microsecond},
		{"one sample p99", durs(7), 99, 7 * time.Microsecond},
		{"two samples p50 is the lower", durs(1, 2), 50, 1 * time.Microsecond},
		{"two samples p99 is the upper", durs(1, 2), 99, 2 * time.Microsecond},
		{"1..100 p50", hundred, 50, 50 * time.Microsecond},
		{"1..100 p99", hundred, 99, 99 * time.Microsecond},
		{"1..100 p100", hundred, 100, 100 * time.Microsecond},
		{"1..100 p0 clamps to min", hundred, 0, 1 * time.Microsecond},
		{"1..100 p1", hundred, 1, 1 * time.Microsecond},
		{"ten samples p99 is the max", durs(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Microsecond},
		{"ten samples p90", durs(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.samples, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	// Unsorted input; 4 calls standing for 8 operations over 1 s of wall.
	s := Summarize(durs(40, 10, 30, 20), 8, time.Second)
	if s.N != 4 {
		t.Errorf("N = %d, want 4", s.N)
	}
	if s.P50 != 20*time.Microsecond || s.P99 != 40*time.Microsecond {
		t.Errorf("p50, p99 = %v, %v, want 20µs, 40µs", s.P50, s.P99)
	}
	if s.Min != 10*time.Microsecond || s.Max != 40*time.Microsecond {
		t.Errorf("min, max = %v, %v, want 10µs, 40µs", s.Min, s.Max)
	}
	// Mean per operation: 100µs / 8 ops.
	if s.Mean != 12500*time.Nanosecond {
		t.Errorf("mean = %v, want 12.5µs", s.Mean)
	}
	if s.OpsPerSec != 8 {
		t.Errorf("ops/s = %v, want 8", s.OpsPerSec)
	}

	// ops below the sample count counts one per sample; no wall: no rate.
	s = Summarize(durs(10, 30), 0, 0)
	if s.Mean != 20*time.Microsecond || s.OpsPerSec != 0 {
		t.Errorf("mean, ops/s = %v, %v, want 20µs, 0", s.Mean, s.OpsPerSec)
	}
	if z := Summarize(nil, 0, time.Second); z.N != 0 || z.P50 != 0 || z.OpsPerSec != 0 {
		t.Errorf("empty summary = %+v, want zero", z)
	}
}

func TestSpeedup(t *testing.T) {
	tests := []struct {
		a, b float64
		want float64
		ok   bool
	}{
		{100, 10, 10, true},
		{10, 100, 0.1, true},
		{0, 10, 0, false},
		{10, 0, 0, false},
		{-1, 10, 0, false},
		{math.NaN(), 1, 0, false},
		{math.Inf(1), 1, 0, false},
	}
	for _, tt := range tests {
		got, ok := Speedup(tt.a, tt.b)
		if ok != tt.ok || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Speedup(%v, %v) = %v, %v, want %v, %v", tt.a, tt.b, got, ok, tt.want, tt.ok)
		}
	}
}

func TestRowRatio(t *testing.T) {
	lat := Row{Metric: MetricP50, Results: []Result{
		{Backend: ZooKeeper, N: 10, P50Micros: 400},
		{Backend: Raft, N: 10, P50Micros: 100},
	}}
	lat.computeRatio()
	if lat.Ratio == nil || *lat.Ratio != 4 {
		t.Fatalf("latency ratio = %v, want 4 (ZooKeeper p50 / Raft p50)", lat.Ratio)
	}
	mean := Row{Metric: MetricMean, Results: []Result{
		{Backend: ZooKeeper, N: 10, P50Micros: 1, MeanMicros: 5000},
		{Backend: Raft, N: 10, P50Micros: 1, MeanMicros: 10},
	}}
	mean.computeRatio()
	if mean.Ratio == nil || *mean.Ratio != 500 {
		t.Fatalf("mean ratio = %v, want 500 (uses the mean, not p50)", mean.Ratio)
	}
	tp := Row{Metric: MetricThroughput, Results: []Result{
		{Backend: ZooKeeper, N: 10, OpsPerSec: 2000},
		{Backend: Raft, N: 10, OpsPerSec: 8000},
	}}
	tp.computeRatio()
	if tp.Ratio == nil || *tp.Ratio != 4 {
		t.Fatalf("throughput ratio = %v, want 4 (Raft ops/s / ZooKeeper ops/s)", tp.Ratio)
	}
	missing := Row{Metric: MetricP50, Results: []Result{
		{Backend: ZooKeeper, N: 10, P50Micros: 400},
		{Backend: Raft, Unavailable: "no coordinator"},
	}}
	missing.computeRatio()
	if missing.Ratio != nil {
		t.Fatalf("ratio with Raft unavailable = %v, want none", *missing.Ratio)
	}
}

// TestProcessCPU: this process's CPU time reads, grows with work, and a
// process that does not exist is an error.
func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the counter moves (10 ms resolution), bounded.
	x := 0
	for i := 0; i < 1e10; i++ {
		x += i
		if i%1e6 == 0 {
			if now, err := ProcessCPU(os.Getpid()); err != nil || now > before {
				break
			}
		}
	}
	after, err := ProcessCPU(os.Getpid())
	if err != nil || after <= before {
		t.Fatalf("CPU time %v then %v (%v) after spinning (%d)", before, after, err, x)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Fatal("ProcessCPU of a process that does not exist: no error")
	}
}
