package bench

import (
	"strings"
	"testing"
)

// TestFailoverTarget: the failover target is met at 1,000,000 nodes
// within 1 s and 1.5x of a tenth of the nodes, not met past either bound,
// and not measured on a smaller tree unless it already grows too much.
func TestFailoverTarget(t *testing.T) {
	fig := func(small, big float64, nodes int) *Scale {
		return &Scale{Failover: []ScaleFailover{{Nodes: nodes / 10, P50Sec: small, MaxSec: small}, {Nodes: nodes, P50Sec: big, MaxSec: big}}}
	}
	for _, c := range []struct {
		name string
		s    *Scale
		want string
	}{
		{"not run", nil, TargetNotMeasured},
		{"met", fig(0.40, 0.50, 1_000_000), TargetMet},
		{"over 1 s", fig(0.90, 1.10, 1_000_000), TargetNotMet},
		{"grows", fig(0.20, 0.40, 1_000_000), TargetNotMet},
		{"small tree, flat", fig(0.30, 0.35, 100_000), TargetNotMeasured},
		{"small tree, grows", fig(0.10, 0.40, 100_000), TargetNotMet},
	} {
		got := failoverTarget(c.s)
		if got.Status != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got.Status, got.Detail, c.want)
		}
	}
	s := fig(0.40, 0.50, 1_000_000)
	s.Failover[1].TreeSnapshots, s.Failover[1].MaxNodesRead = 0, 3
	if d := failoverTarget(s).Detail; !strings.Contains(d, "0 snapshots, at most 3 nodes read") || !strings.Contains(d, "1.25x") {
		t.Errorf("detail %q: want what the new leaders read and the ratio", d)
	}
}
