package bench

import (
	"strings"
	"testing"
)

func TestSerialWriteTarget(t *testing.T) {
	run := func(voters int, zk, raft float64, floors bool) TargetResult {
		rep := &Report{Options: RunConfig{Voters: voters}, Rows: []Row{{ID: "store.write-serial", Metric: MetricP50,
			Results: []Result{{Backend: ZooKeeper, N: 5, P50Micros: zk}, {Backend: Raft, N: 5, P50Micros: raft}}}}}
		if floors {
			rep.Floors = []Floor{{ID: FloorFsync, N: 5, P50Micros: 120}, {ID: FloorPluginHop, N: 5, P50Micros: 140}, {ID: FloorLoopback, N: 5, P50Micros: 40}}
		}
		rep.Rows[0].computeRatio()
		applyFloors(rep)
		for _, tr := range EvaluateTargets(rep) {
			if strings.HasPrefix(tr.Target, "single-key serial write") {
				return tr
			}
		}
		t.Fatal("no serial-write target")
		return TargetResult{}
	}
	for _, c := range []struct {
		name     string
		voters   int
		zk, raft float64
		floors   bool
		status   string
		inDetail string
	}{
		{"met", 3, 800, 700, true, TargetMet, "2.3x the floor"},
		{"slower than ZooKeeper", 3, 600, 700, true, TargetNotMet, "Raft slower than ZooKeeper (0.86x"},
		{"too far above the floor", 3, 2000, 900, true, TargetNotMet, "3.0x the floor, want at most 2.5x"},
		{"one voter", 1, 800, 700, true, TargetNotMeasured, "run with --voters 3"},
		{"no floors", 3, 800, 700, false, TargetNotMeasured, "floor not measured"},
	} {
		tr := run(c.voters, c.zk, c.raft, c.floors)
		if tr.Status != c.status || !strings.Contains(tr.Detail, c.inDetail) {
			t.Errorf("%s: %q (%s), want %q with %q", c.name, tr.Status, tr.Detail, c.status, c.inDetail)
		}
	}
}
