package bench

import (
	"strings"
	"testing"
	"time"
)

// TestScaleRows: each scale. row has a result for each of its backends
// the run has: measured, with the ZooKeeper/Raft ratio where both are;
// or not measured with the reason, the failover row with its own (a
// ZooKeeper step past its bound names the step); Raft-only rows get no
// ZooKeeper result.
func TestScaleRows(t *testing.T) {
	results := map[string]map[string]Result{
		"scale.cold-start": {
			Raft:      fixedResult(Raft, 2*time.Second, 1000),
			ZooKeeper: fixedResult(ZooKeeper, 10*time.Second, 1000),
		},
		"scale.import":        {Raft: fixedResult(Raft, time.Second, 1000)},
		"scale.snapshot-save": {Raft: fixedResult(Raft, time.Second, 1000)},
		"scale.failover":      {Raft: fixedResult(Raft, 300*time.Millisecond, 1000)},
	}
	why := map[string]string{ZooKeeper: "at 1000 nodes: migrate import did not finish within 10m0s: bound reached"}
	failWhy := map[string]string{ZooKeeper: "at 1000 nodes: no coordinator led within 10m0s: bound reached"}
	rows := scaleRows(scaleSpecs(), []string{ZooKeeper, Raft}, 1000, results, why, failWhy)
	byID := map[string]*Row{}
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}
	cold := byID["scale.cold-start"]
	if len(cold.Results) != 2 || cold.Ratio == nil || *cold.Ratio < 4.9 || *cold.Ratio > 5.1 {
		t.Fatalf("scale.cold-start: %d results, ratio %v, want both backends and 5x", len(cold.Results), cold.Ratio)
	}
	imp := byID["scale.import"]
	if zk, ok := imp.result(ZooKeeper); !ok || zk.Available() || !strings.Contains(zk.Unavailable, "migrate import did not finish") {
		t.Fatalf("scale.import on ZooKeeper: %+v, want not measured naming the step past the bound", zk)
	}
	if imp.Ratio != nil {
		t.Fatalf("scale.import: a ratio without a ZooKeeper figure")
	}
	if zk, ok := byID["scale.failover"].result(ZooKeeper); !ok || !strings.Contains(zk.Unavailable, "no coordinator led") {
		t.Fatalf("scale.failover on ZooKeeper: %+v, want the failover's own reason", zk)
	}
	for _, id := range []string{"scale.snapshot-save", "scale.restore", "scale.add-voter"} {
		r := byID[id]
		if _, ok := r.result(ZooKeeper); ok || len(r.Results) != 1 {
			t.Fatalf("%s: %d results, a ZooKeeper one: %v; want Raft's alone", id, len(r.Results), ok)
		}
	}
	if res, _ := byID["scale.restore"].result(Raft); res.Available() || res.Unavailable != "not measured" {
		t.Fatalf("scale.restore on Raft: %+v, want not measured (no reason given)", res)
	}
	// A run without ZooKeeper: Raft's results alone.
	raftOnly := scaleRows(scaleSpecs(), []string{Raft}, 1000, results, nil, nil)
	for i := range raftOnly {
		if _, ok := raftOnly[i].result(ZooKeeper); ok {
			t.Fatalf("%s: a ZooKeeper result in a Raft-only run", raftOnly[i].ID)
		}
	}
}
