package coordinator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// treeReadCounter counts the tree reads its client makes: a whole-tree
// load is a Snapshot, a node by node one many reads.
type treeReadCounter struct {
	core.MetadataBackend
	snapshots, reads *atomic.Int64
}

func (c treeReadCounter) Unwrap() core.MetadataBackend { return c.MetadataBackend }

func (c treeReadCounter) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	c.snapshots.Add(1)
	return c.MetadataBackend.Snapshot(ctx, prefix)
}

// Watch counts a watch from a revision on a backend without exact history
// as a snapshot: its first response is a Reset of the whole tree.
func (c treeReadCounter) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	if from > 0 && !c.Capabilities().ExactHistory {
		c.snapshots.Add(1)
	}
	return c.MetadataBackend.Watch(ctx, prefix, from)
}

// StreamSnapshot counts a streamed snapshot as a snapshot (it is one).
func (c treeReadCounter) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(int64, []core.Node) error) error {
	c.snapshots.Add(1)
	ss, _ := core.Optional[core.SnapshotStreamer](c.MetadataBackend)
	return ss.StreamSnapshot(ctx, prefix, pageBytes, fn)
}

func (c treeReadCounter) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	c.reads.Add(int64(len(paths)))
	return c.MetadataBackend.GetMany(ctx, paths, opts)
}

func (c treeReadCounter) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	c.reads.Add(1)
	return c.MetadataBackend.Children(ctx, path, opts)
}

// TestWarmStandbyFailover: a standby keeps its metadata image current, so
// the leader elected after a failover reads no tree: no snapshot (nor, on
// ZooKeeper, a watch from a revision, whose Reset is the tree), a handful
// of reads whatever the tree's size, and it serves every table created
// before. On the memory backend, Raft (two coordinators on one voter) and
// ZooKeeper.
func TestWarmStandbyFailover(t *testing.T) {
	for _, st := range fenceBackends() {
		t.Run(st.name, func(t *testing.T) { warmStandbyFailover(t, st.start(t)) })
	}
}

func warmStandbyFailover(t *testing.T, openStore fenceStore) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	var snapshots, reads atomic.Int64
	open := func(ctx context.Context) (core.MetadataBackend, error) {
		b, err := openStore(ctx)
		if err != nil {
			return nil, err
		}
		return treeReadCounter{MetadataBackend: b, snapshots: &snapshots, reads: &reads}, nil
	}
	a := harness.StartCoordinator(t, s, coordinator.Options{Open: open})
	testutil.WaitFor(t, 5*time.Second, "a leads", a.Srv.IsLeader)
	b := harness.StartCoordinator(t, s, coordinator.Options{Open: open})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, a.Addr, b.Addr)
	// A tree of some size: 200 tables of 20 buckets, about 9000 nodes.
	const tables = 200
	if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < tables; i++ {
		if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			_, err := ac.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: fmt.Sprintf("t%03d", i), Descriptor_: &adminv1.TableDescriptor{
				Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}, BucketCount: 20}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The last table is created just before the failover: the new
	// leader must serve it (it catches up to the leadership's start).
	// b's bucket states are built while it stands by (once, from its
	// image), so that as leader it does not rebuild them.
	testutil.WaitFor(t, 10*time.Second, "b's bucket states current", func() bool { return b.Srv.BucketRebuilds() >= 1 && b.Srv.BucketStatesCurrent() })
	rebuilds := b.Srv.BucketRebuilds()
	snapshots.Store(0)
	reads.Store(0)
	a.Stop()
	testutil.WaitFor(t, 10*time.Second, "b leads", b.Srv.IsLeader)
	c2 := newClient(t, b.Addr)
	var names []string
	if err := c2.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		r, err := ac.ListTables(ctx, &adminv1.ListTablesRequest{Database: "db"})
		if err == nil {
			names = r.Names
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(names) != tables {
		t.Fatalf("the new leader lists %d tables, want %d", len(names), tables)
	}
	if n := snapshots.Load(); n != 0 {
		t.Errorf("the new leader took %d snapshots: a warm standby reads no tree", n)
	}
	if n := reads.Load(); n > 50 {
		t.Errorf("the new leader read %d nodes through its client after the failover: a warm standby serves from its image", n)
	}
	if n := b.Srv.BucketRebuilds(); n != rebuilds {
		t.Errorf("the new leader rebuilt its bucket states from the whole subtree (%d rebuilds, %d before): a warm standby's are current", n, rebuilds)
	}
	// Its image holds the whole tree (200 tables of 20 buckets: each a
	// bucket node and its LeaderAndIsr) without having read it now.
	if n := b.Srv.ImageNodes(); n < tables*20*2 {
		t.Errorf("the new leader's image holds %d nodes, want at least %d", n, tables*20*2)
	}
	t.Logf("after the failover: %d snapshots, %d node reads through the client, %d nodes in the image", snapshots.Load(), reads.Load(), b.Srv.ImageNodes())
}

// gaugeValue is the value of the unlabelled metric name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestStandbyMetrics: a standby reports itself warm
// (metaplane_coordinator_warm) once its image is loaded and its bucket
// states built, and its image's revision (metaplane_image_revision)
// follows the leader's writes, so that an operator reads how far it lags.
func TestStandbyMetrics(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	open := func(ctx context.Context) (core.MetadataBackend, error) {
		return s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second}), nil
	}
	ra, rb := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := harness.StartCoordinator(t, s, coordinator.Options{Open: open, Registerer: ra})
	testutil.WaitFor(t, 5*time.Second, "a leads", a.Srv.IsLeader)
	b := harness.StartCoordinator(t, s, coordinator.Options{Open: open, Registerer: rb})
	testutil.WaitFor(t, 10*time.Second, "the standby reports itself warm", func() bool { return gaugeValue(t, rb, "metaplane_coordinator_warm") == 1 })
	if !b.Srv.Warm() {
		t.Fatal("metaplane_coordinator_warm is 1 on a standby that is not warm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, a.Addr, b.Addr)
	for i := 0; i < 5; i++ {
		if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: fmt.Sprintf("db%d", i)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	leader := gaugeValue(t, ra, "metaplane_image_revision")
	if leader <= 0 {
		t.Fatalf("the leader's metaplane_image_revision is %v after five writes", leader)
	}
	testutil.WaitFor(t, 10*time.Second, "the standby's image revision reaches the leader's", func() bool {
		return gaugeValue(t, rb, "metaplane_image_revision") >= leader
	})
	if v := gaugeValue(t, ra, "metaplane_coordinator_warm"); v != 1 {
		t.Errorf("the leader's metaplane_coordinator_warm is %v, want 1", v)
	}
}
