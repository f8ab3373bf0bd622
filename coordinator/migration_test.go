package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestMigrationFence: a leader resigns when the migration fence appears,
// no coordinator leads while it exists (a restarted one does not
// campaign), and one leads again once it is removed.
func TestMigrationFence(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "the coordinator leads", a.Srv.IsLeader)
	ctx := context.Background()
	tool := s.NewClient(core.ClientOptions{Name: "tool"})
	defer tool.Close()
	if _, _, err := core.Create(ctx, tool, catalog.MigrationFencePath, []byte("{}"), core.CreateOptions{MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the leader resigns on the fence", func() bool {
		_, err := tool.Leader(ctx)
		return !a.Srv.IsLeader() && err != nil
	})
	// A second coordinator, started while the fence exists, does not
	// lead either (checked over several of its campaign checks).
	b := harness.StartCoordinator(t, s, coordinator.Options{})
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if a.Srv.IsLeader() || b.Srv.IsLeader() {
			t.Fatal("a coordinator leads while the migration fence exists")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := core.Delete(ctx, tool, catalog.MigrationFencePath, core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a coordinator leads once the fence is gone", func() bool {
		return a.Srv.IsLeader() || b.Srv.IsLeader()
	})
}
