package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/metaplane/metaplane/core"
)

// TestFlussTree: at least the nodes asked for, every parent present and
// before its children, no duplicates.
func TestFlussTree(t *testing.T) {
	paths := flussTree(1000)
	if len(paths) < 1000 || len(paths) > 1100 {
		t.Fatalf("%d paths for 1000", len(paths))
	}
	seen := map[string]bool{"/": true}
	for _, p := range paths {
		if seen[p] {
			t.Fatalf("%s twice", p)
		}
		if !seen[core.ParentPath(p)] {
			t.Fatalf("%s before its parent", p)
		}
		seen[p] = true
	}
}

// TestMigrationTargets: each target met, not met or not measured from the
// figures.
func TestMigrationTargets(t *testing.T) {
	good := &Migration{Nodes: 100_011, ExportSec: 10, ImportSec: 5, ValidSec: 2, PauseMS: 900, LiveRounds: 3,
		Tool: []ToolMemory{{Nodes: 10_000, PeakRSSBytes: 40 << 20}, {Nodes: 100_000, PeakRSSBytes: 50 << 20}}}
	for i, tr := range migrationTargets(good) {
		if tr.Status != TargetMet {
			t.Errorf("target %d %q: %s (%s), want met", i, tr.Target, tr.Status, tr.Detail)
		}
	}
	bad := &Migration{Nodes: 100_011, ExportSec: 50, ImportSec: 10, ValidSec: 2, PauseMS: 2500, LiveRounds: 3,
		Tool: []ToolMemory{{Nodes: 10_000, PeakRSSBytes: 40 << 20}, {Nodes: 100_000, PeakRSSBytes: 200 << 20}}}
	for i, tr := range migrationTargets(bad) {
		if tr.Status != TargetNotMet {
			t.Errorf("target %d %q: %s (%s), want not met", i, tr.Target, tr.Status, tr.Detail)
		}
	}
	small := &Migration{Nodes: 2_000, PauseMS: 100, LiveRounds: 3}
	got := migrationTargets(small)
	if got[0].Status != TargetNotMeasured || got[2].Status != TargetNotMeasured || got[1].Status != TargetMet {
		t.Errorf("a small tree without memory figures: %+v", got)
	}
	// The live migration failed: its pause is not a measurement.
	if got := migrationTargets(&Migration{Nodes: 100_011}); got[1].Status != TargetNotMeasured {
		t.Errorf("no live migration: %+v", got[1])
	}
	for _, tr := range migrationTargets(nil) {
		if tr.Status != TargetNotMeasured {
			t.Errorf("no figures: %+v", tr)
		}
	}
}

func TestRunRejectsBadMigrateNodes(t *testing.T) {
	_, err := Run(context.Background(), Options{Backends: []string{"raft"}, MigrateNodes: 10})
	if err == nil || !strings.Contains(err.Error(), "migrate nodes: 10") {
		t.Errorf("MigrateNodes 10: %v", err)
	}
}
