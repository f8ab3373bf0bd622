package bench

import (
	"fmt"
	"strings"
)

// serialWriteFloorBound is how far above its machine floor (fsync + plugin
// hop + loopback round trip, measured in the same run) the three-voter
// serial write may be.
const serialWriteFloorBound = 2.5

// serialWriteTarget checks the single-key serial write with three voters:
// Raft at least as fast as ZooKeeper through the same plugin (ratio >= 1.0
// in the run) and within serialWriteFloorBound of the floor.
func serialWriteTarget(rep *Report, rows map[string]*Row) TargetResult {
	t := TargetResult{Target: fmt.Sprintf("single-key serial write, 3 voters: Raft at least as fast as ZooKeeper and within %.1fx of the floor (fsync + plugin hop + loopback round trip)", serialWriteFloorBound)}
	r, ok := rows["store.write-serial"]
	if !ok {
		t.Status, t.Detail = TargetNotMeasured, "store.write-serial did not run"
		return t
	}
	rf, okRaft := r.result(Raft)
	if !okRaft || !rf.Available() {
		t.Status, t.Detail = TargetNotMeasured, "store.write-serial not measured on Raft"
		return t
	}
	var parts, failed []string
	measured := true
	parts = append(parts, "Raft p50 "+FormatDuration(rf.P50Micros))
	if zk, ok := r.result(ZooKeeper); ok && zk.Available() && r.Ratio != nil {
		parts = append(parts, fmt.Sprintf("ZooKeeper p50 %s: %.2fx", FormatDuration(zk.P50Micros), *r.Ratio))
		if *r.Ratio < 1 {
			failed = append(failed, fmt.Sprintf("Raft slower than ZooKeeper (%.2fx, want >= 1.00x)", *r.Ratio))
		}
	} else {
		parts = append(parts, "ZooKeeper not measured")
		measured = false
	}
	if r.Floor != nil && rf.FloorRatio > 0 {
		parts = append(parts, fmt.Sprintf("%.1fx the floor (%s)", rf.FloorRatio, r.Floor.label()))
		if rf.FloorRatio > serialWriteFloorBound {
			failed = append(failed, fmt.Sprintf("%.1fx the floor, want at most %.1fx", rf.FloorRatio, serialWriteFloorBound))
		}
	} else {
		parts = append(parts, "floor not measured")
		measured = false
	}
	t.Detail = strings.Join(parts, ", ")
	switch {
	case rep.Options.Voters != 3:
		t.Status = TargetNotMeasured
		t.Detail = fmt.Sprintf("run had %d voter(s) (run with --voters 3); with that: %s", rep.Options.Voters, t.Detail)
	case len(failed) > 0:
		t.Status = TargetNotMet
		t.Detail += "; not met: " + strings.Join(failed, "; ")
	case !measured:
		t.Status = TargetNotMeasured
	default:
		t.Status = TargetMet
	}
	return t
}
