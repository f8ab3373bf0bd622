package bench

import (
	"math"
	"sort"
	"time"
)

// Summary condenses the samples of one row on one backend.
type Summary struct {
	// N is the number of samples (timed calls).
	N int
	// P50, P90, P99 are nearest-rank percentiles of the per-call latency.
	P50, P90, P99 time.Duration
	// Mean is the mean cost of one operation: the sum of the per-call
	// latencies divided by the number of operations (a call may stand for
	// several operations, e.g. a batch of ids).
	Mean time.Duration
	// Min and Max are the extremes of the per-call latency.
	Min, Max time.Duration
	// OpsPerSec is operations divided by the wall time spent measuring
	// (for concurrent rows, their throughput). Zero when wall is zero.
	OpsPerSec float64
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted in increasing order: the smallest sample
// such that at least p% of the samples are less than or equal to it. It
// returns 0 for an empty slice; p is clamped to (0, 100].
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Summarize computes a Summary of samples (per-call latencies; the slice is
// sorted in place). ops is the number of operations the samples stand for
// (at least len(samples) for one operation per call); wall is the wall time
// spent measuring them.
func Summarize(samples []time.Duration, ops int64, wall time.Duration) Summary {
	s := Summary{N: len(samples)}
	if len(samples) == 0 {
		return s
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	s.P50 = Percentile(samples, 50)
	s.P90 = Percentile(samples, 90)
	s.P99 = Percentile(samples, 99)
	s.Min = samples[0]
	s.Max = samples[len(samples)-1]
	if ops < int64(len(samples)) {
		ops = int64(len(samples))
	}
	var sum time.Duration
	for _, d := range samples {
		sum += d
	}
	s.Mean = time.Duration(int64(sum) / ops)
	if wall > 0 {
		s.OpsPerSec = float64(ops) / wall.Seconds()
	}
	return s
}

// Speedup returns how many times better b is than a for a metric where
// lower is better (latency): a/b. It reports false when either value is
// not positive (a missing or unmeasured figure), so that no ratio is made
// up.
func Speedup(a, b float64) (float64, bool) {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0, false
	}
	return a / b, true
}
