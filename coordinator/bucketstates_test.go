package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// fullBuild is what every notifier round built before bucketStates: every
// bucket of the whole /tabletservers subtree, decoded from one snapshot,
// grouped by replica (here in bucketStates' order, to compare).
func fullBuild(t *testing.T, ctx context.Context, cat *catalog.Catalog, img *image.Image) map[int32][]*adminv1.NotifyLeaderAndIsrRequest_BucketState {
	t.Helper()
	snap, err := img.Snapshot(ctx, catalog.TabletServersRoot)
	if err != nil {
		t.Fatal(err)
	}
	partitionTable := map[int64]int64{}
	for _, n := range snap.Nodes {
		if k, pid := classifyPath(n.Path); k == pathPartition {
			if a, err := catalog.UnmarshalPartitionAssignment(n.Data); err == nil {
				partitionTable[pid] = a.TableID
			}
		}
	}
	per := map[int32][]*adminv1.NotifyLeaderAndIsrRequest_BucketState{}
	for _, n := range snap.Nodes {
		tableID, partitionID, bucket, ok := parseLeaderIsrPath(n.Path)
		if !ok {
			continue
		}
		lai, err := catalog.UnmarshalLeaderAndIsr(n.Data)
		if err != nil {
			continue
		}
		if t, ok := partitionTable[partitionID]; ok && partitionID >= 0 {
			tableID = t
		}
		st := &adminv1.NotifyLeaderAndIsrRequest_BucketState{TableId: tableID, PartitionId: partitionID, Bucket: bucket,
			Leader: lai.Leader, LeaderEpoch: lai.LeaderEpoch, Isr: lai.ISR, BucketEpoch: lai.BucketEpoch}
		for _, r := range lai.ISR {
			per[r] = append(per[r], st)
		}
	}
	for _, l := range per {
		slices.SortFunc(l, func(a, b *adminv1.NotifyLeaderAndIsrRequest_BucketState) int {
			return cmpBucket(a, b)
		})
	}
	return per
}

func samePerServer(a, b map[int32][]*adminv1.NotifyLeaderAndIsrRequest_BucketState) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d servers against %d", len(a), len(b))
	}
	for id, la := range a {
		lb := b[id]
		if len(la) != len(lb) {
			return fmt.Errorf("server %d: %d buckets against %d", id, len(la), len(lb))
		}
		for i := range la {
			if !proto.Equal(la[i], lb[i]) {
				return fmt.Errorf("server %d, bucket %d: %v against %v", id, i, la[i], lb[i])
			}
		}
	}
	return nil
}

// memoryBackend is a client of a new memory store, both closed when tb
// ends.
func memoryBackend(tb testing.TB) core.MetadataBackend {
	st := memory.NewStore(memory.StoreOptions{})
	tb.Cleanup(func() { st.Close() })
	c := st.NewClient(core.ClientOptions{})
	tb.Cleanup(func() { c.Close() })
	return c
}

// followedStates starts an image of b whose applied batches feed a new
// bucketStates and are then reported on the returned channel, and waits
// until the image is ready.
func followedStates(tb testing.TB, ctx context.Context, b core.MetadataBackend) (*bucketStates, *image.Image, <-chan []string) {
	tb.Helper()
	states := newBucketStates()
	// OnChange runs after the image's revision moved: a write's paths
	// reported here are the sign that the states have seen it.
	reported := make(chan []string, 4096)
	img := image.New(image.Options{Prefix: "/", OnChange: func(paths []string) {
		states.onChange(paths)
		reported <- paths
	}})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); img.Run(ctx, b) }()
	tb.Cleanup(func() { cancel(); <-done })
	if err := img.WaitReady(ctx); err != nil {
		tb.Fatal(err)
	}
	return states, img, reported
}

// awaitReported takes the reports until one holds path.
func awaitReported(tb testing.TB, ctx context.Context, reported <-chan []string, path string) {
	tb.Helper()
	for {
		select {
		case paths := <-reported:
			if slices.Contains(paths, path) {
				return
			}
		case <-ctx.Done():
			tb.Fatalf("the image never reported %s", path)
		}
	}
}

// markerSeen writes marker outside /tabletservers and waits for its
// report: the image applies and reports its batches in order, so the
// states have then seen every earlier write.
func markerSeen(tb testing.TB, ctx context.Context, b core.MetadataBackend, reported <-chan []string, marker string) {
	tb.Helper()
	if _, _, err := core.Create(ctx, b, marker, nil, core.CreateOptions{MakeParents: true}); err != nil {
		tb.Fatal(err)
	}
	awaitReported(tb, ctx, reported, marker)
}

// TestBucketStatesFollowTheImage: bucket states kept from the image's
// changed paths equal a full build from the image's snapshot after every
// step of random writes (leader records set, created and deleted, whole
// tables and partitions deleted, partitions moved between tables,
// undecodable records, registrations); writes outside /tabletservers do
// not wake the notifier, writes inside do.
func TestBucketStatesFollowTheImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := memoryBackend(t)
	states, img, reported := followedStates(t, ctx, b)
	cat := catalog.New(b, catalog.Options{})

	r := rand.New(rand.NewPCG(3, 4))
	applied := false
	write := func(ops ...core.Op) {
		t.Helper()
		applied = false
		res, err := b.Txn(ctx, ops, core.TxnOptions{})
		if err != nil && !errors.Is(err, core.ErrNodeExists) && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrNotEmpty) {
			t.Fatalf("write %v: %v", ops, err)
		}
		if err == nil {
			applied = true
			// Wait until the states were told of this write's last op.
			awaitReported(t, ctx, reported, res.Results[len(res.Results)-1].Path)
		}
	}
	upsert := func(p string, data []byte) {
		t.Helper()
		res, err := img.GetMany(ctx, []string{p}, core.ReadOptions{NoData: true})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err != nil {
			write(core.CreateOp(p, data, core.Persistent).WithParents())
		} else {
			write(core.SetOp(p, data, core.AnyVersion))
		}
	}
	drain := func() bool {
		select {
		case <-states.wake:
			return true
		default:
			return false
		}
	}
	isr := func() []int32 {
		var out []int32
		for id := int32(1); id <= 4; id++ {
			if r.IntN(2) == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	// Each owner is a table's or a partition's assignment node.
	owner := func() string {
		if r.IntN(2) == 0 {
			return catalog.TableAssignmentPath(int64(1 + r.IntN(3)))
		}
		return catalog.PartitionAssignmentPath(int64(10 + r.IntN(3)))
	}
	leaderIsr := func(o string, bucket int) string { return fmt.Sprintf("%s/buckets/%d/leader_isr", o, bucket) }
	for step := 0; step < 300; step++ {
		o := owner()
		switch k := r.IntN(10); {
		case k < 5: // a bucket's leader record, created or set
			p := leaderIsr(o, r.IntN(3))
			data := catalog.LeaderAndIsr{Leader: int32(1 + r.IntN(4)), LeaderEpoch: int32(step), ISR: isr(), BucketEpoch: int32(r.IntN(3))}.Marshal()
			if r.IntN(15) == 0 {
				data = []byte("not a record")
			}
			upsert(p, data)
		case k == 5: // one bucket's record deleted
			write(core.DeleteOp(leaderIsr(o, r.IntN(3)), core.AnyVersion))
		case k == 6: // a whole table or partition deleted, in one transaction
			snap, err := img.Snapshot(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			var ops []core.Op
			for i := len(snap.Nodes) - 1; i >= 0; i-- {
				ops = append(ops, core.DeleteOp(snap.Nodes[i].Path, core.AnyVersion))
			}
			applied = false
			if len(ops) > 0 {
				write(ops...)
			}
		case k == 7: // a partition's assignment names its table
			p := catalog.PartitionAssignmentPath(int64(10 + r.IntN(3)))
			data := catalog.PartitionAssignment{TableID: int64(1 + r.IntN(3))}.Marshal()
			upsert(p, data)
		case k == 8: // a registration
			write(core.CreateOp(catalog.TabletServerPath(int32(step)), []byte("{}"), core.Persistent).WithParents())
		default: // outside /tabletservers: no wake-up
			drain()
			write(core.CreateOp(fmt.Sprintf("/other/n%d", step), nil, core.Persistent).WithParents())
			if drain() {
				t.Fatalf("step %d: a write outside %s woke the notifier", step, catalog.TabletServersRoot)
			}
			continue
		}
		if woke := drain(); applied && !woke {
			t.Fatalf("step %d: a change under %s did not wake the notifier", step, catalog.TabletServersRoot)
		}
		if err := states.refresh(ctx, cat, img); err != nil {
			t.Fatal(err)
		}
		if err := samePerServer(states.perServer(), fullBuild(t, ctx, cat, img)); err != nil {
			t.Fatalf("step %d: kept states differ from a full build: %v", step, err)
		}
	}
	if len(states.buckets) == 0 || len(states.partTable) == 0 {
		t.Fatalf("the run ended with %d buckets and %d partitions kept: it did not exercise them", len(states.buckets), len(states.partTable))
	}
}

// TestBucketStatesDropBelowAChangedPath: told only that an owner's path
// changed (its table's records deleted below it), the states forget every
// bucket below it and keep the others.
func TestBucketStatesDropBelowAChangedPath(t *testing.T) {
	ctx := context.Background()
	b := memoryBackend(t)
	cat := catalog.New(b, catalog.Options{})
	rec := catalog.LeaderAndIsr{Leader: 1, ISR: []int32{1, 2}}.Marshal()
	for _, tid := range []int64{1, 2} {
		for bucket := 0; bucket < 3; bucket++ {
			p := fmt.Sprintf("%s/buckets/%d/leader_isr", catalog.TableAssignmentPath(tid), bucket)
			if _, _, err := core.Create(ctx, b, p, rec, core.CreateOptions{MakeParents: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	states := newBucketStates()
	if err := states.refresh(ctx, cat, b); err != nil {
		t.Fatal(err)
	}
	if n := len(states.buckets); n != 6 {
		t.Fatalf("%d buckets kept, want 6", n)
	}
	snap, err := b.Snapshot(ctx, catalog.TableAssignmentPath(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := len(snap.Nodes) - 1; i >= 0; i-- {
		if err := core.Delete(ctx, b, snap.Nodes[i].Path, core.AnyVersion, core.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	states.onChange([]string{catalog.TableAssignmentPath(1)})
	if err := states.refresh(ctx, cat, b); err != nil {
		t.Fatal(err)
	}
	per := states.perServer()
	for _, id := range []int32{1, 2} {
		if len(per[id]) != 3 {
			t.Fatalf("server %d has %d buckets after table 1 went, want table 2's 3: %v", id, len(per[id]), per[id])
		}
		for _, s := range per[id] {
			if s.TableId != 2 {
				t.Fatalf("server %d still has a bucket of table %d", id, s.TableId)
			}
		}
	}
}

// TestBucketStatesCreateTablesInOneRound: the tables and partitions that
// catalog DDL creates between two rounds are taken one by one (one pass
// each, not one per node below them) and the states then equal a full
// build; past 64 of them the round rebuilds from the whole subtree.
func TestBucketStatesCreateTablesInOneRound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := memoryBackend(t)
	states, img, reported := followedStates(t, ctx, b)
	cat := catalog.New(b, catalog.Options{})
	for id := int32(1); id <= 3; id++ {
		reg := catalog.TabletServerRegistration{Listeners: "CLIENT://127.0.0.1:1", RegisterTimestamp: 1}
		if _, _, err := core.Create(ctx, b, catalog.TabletServerPath(id), reg.Marshal(), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cat.CreateDatabase(ctx, "db", catalog.DatabaseRegistration{}, false); err != nil {
		t.Fatal(err)
	}
	spec := func(partitioned bool) catalog.TableSpec {
		s := catalog.TableSpec{Schema: catalog.Schema{Columns: []catalog.Column{
			{Name: "d", Type: catalog.DataType{Type: "STRING"}}, {Name: "k", Type: catalog.DataType{Type: "BIGINT", Nullable: true}}}},
			BucketCount: 3, ReplicationFactor: 2}
		if partitioned {
			s.PartitionKeys = []string{"d"}
		}
		return s
	}
	if _, err := cat.CreateTable(ctx, "db", "parted", spec(true), false); err != nil {
		t.Fatal(err)
	}
	markers := 0
	waitSeen := func() {
		t.Helper()
		markers++
		markerSeen(t, ctx, b, reported, fmt.Sprintf("/marker/%d", markers))
	}
	rounds := 0
	round := func(tables, partitions int) {
		t.Helper()
		rounds++
		for i := 0; i < tables; i++ {
			if _, err := cat.CreateTable(ctx, "db", fmt.Sprintf("t%d_%d", rounds, i), spec(false), false); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < partitions; i++ {
			if _, _, err := cat.CreatePartition(ctx, "db", "parted", fmt.Sprintf("p%d_%d", rounds, i), false); err != nil {
				t.Fatal(err)
			}
		}
		waitSeen()
		if err := states.refresh(ctx, cat, img); err != nil {
			t.Fatal(err)
		}
		if err := samePerServer(states.perServer(), fullBuild(t, ctx, cat, img)); err != nil {
			t.Fatalf("after %d tables and %d partitions: kept states differ from a full build: %v", tables, partitions, err)
		}
	}
	round(0, 0) // the first round builds from the whole subtree
	if states.rebuilds.Load() != 1 {
		t.Fatalf("%d rebuilds after the first round, want 1", states.rebuilds.Load())
	}
	round(40, 20)
	if states.rebuilds.Load() != 1 {
		t.Fatalf("40 createTables and 20 createPartitions in one round rebuilt from the whole subtree (%d rebuilds): each should be one pass", states.rebuilds.Load())
	}
	round(50, 20)
	if states.rebuilds.Load() != 2 {
		t.Fatalf("70 tables and partitions in one round: %d rebuilds, want the round to rebuild (past 64 passes)", states.rebuilds.Load())
	}
}

func TestOwnerOf(t *testing.T) {
	for p, want := range map[string]string{
		"/tabletservers/tables/7":                           "/tabletservers/tables/7",
		"/tabletservers/tables/7/buckets/2/leader_isr":      "/tabletservers/tables/7",
		"/tabletservers/partitions/12/buckets":              "/tabletservers/partitions/12",
		"/tabletservers/partitions/12/buckets/0/leader_isr": "/tabletservers/partitions/12",
		"/tabletservers/tables":                             "",
		"/tabletservers/tablesx/7":                          "",
		"/tabletservers/ids/1":                              "",
		"/tabletservers":                                    "",
		"/metadata/databases/db":                            "",
	} {
		got, ok := ownerOf(p)
		if got != want || ok != (want != "") {
			t.Errorf("ownerOf(%q) = %q, %v; want %q", p, got, ok, want)
		}
	}
}

// BenchmarkNotifierRound times one notifier round's build (refresh and
// grouping by server) on a catalog of 1000 tables of 3 buckets after one
// bucket's leader record changed: mode=changed takes the changed path,
// mode=full rebuilds from the whole /tabletservers subtree, as every
// round did before bucketStates.
func BenchmarkNotifierRound(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := memoryBackend(b)
	rec := func(epoch int) []byte {
		return catalog.LeaderAndIsr{Leader: 1, LeaderEpoch: int32(epoch), ISR: []int32{1, 2, 3}}.Marshal()
	}
	path := func(table, bucket int) string {
		return fmt.Sprintf("%s/buckets/%d/leader_isr", catalog.TableAssignmentPath(int64(table)), bucket)
	}
	for table := 1; table <= 1000; table++ {
		var ops []core.Op
		for bucket := 0; bucket < 3; bucket++ {
			ops = append(ops, core.CreateOp(path(table, bucket), rec(0), core.Persistent).WithParents())
		}
		if _, err := c.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"changed", "full"} {
		b.Run("mode="+mode, func(b *testing.B) {
			states := newBucketStates()
			img := image.New(image.Options{Prefix: "/", OnChange: states.onChange})
			ictx, icancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); img.Run(ictx, c) }()
			defer func() { icancel(); <-done }()
			if err := img.WaitReady(ctx); err != nil {
				b.Fatal(err)
			}
			cat := catalog.New(c, catalog.Options{})
			if err := states.refresh(ctx, cat, img); err != nil {
				b.Fatal(err)
			}
			var build time.Duration
			for i := 0; i < b.N; i++ {
				res, err := c.Txn(ctx, []core.Op{core.SetOp(path(1+i%1000, i%3), rec(i+1), core.AnyVersion)}, core.TxnOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := img.WaitRevision(ctx, res.Revision); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if mode == "full" {
					states.mu.Lock()
					states.all = true
					states.mu.Unlock()
				}
				if err := states.refresh(ctx, cat, img); err != nil {
					b.Fatal(err)
				}
				if len(states.perServer()[1]) != 3000 {
					b.Fatal("server 1 does not have every bucket")
				}
				build += time.Since(start)
			}
			b.ReportMetric(float64(build.Microseconds())/float64(b.N), "µs/round")
		})
	}
}

// BenchmarkNotifierRoundAfterDDL times the round that follows 30
// createTables (each its assignment node, buckets node, three buckets and
// their leader records, as the catalog writes them) on a catalog of 1000
// such tables and more: each table is one pass, not a rebuild of the whole
// subtree.
func BenchmarkNotifierRoundAfterDDL(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := memoryBackend(b)
	rec := catalog.LeaderAndIsr{Leader: 1, ISR: []int32{1, 2, 3}}.Marshal()
	tables := 0
	createTable := func() {
		tables++
		id := int64(tables)
		ops := []core.Op{core.CreateOp(catalog.TableAssignmentPath(id), []byte("{}"), core.Persistent).WithParents(),
			core.CreateOp(catalog.BucketsPath(id, -1), nil, core.Persistent)}
		for bucket := int32(0); bucket < 3; bucket++ {
			ops = append(ops, core.CreateOp(catalog.BucketPath(id, -1, bucket), nil, core.Persistent),
				core.CreateOp(catalog.LeaderAndIsrPath(id, -1, bucket), rec, core.Persistent))
		}
		if _, err := c.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for range 1000 {
		createTable()
	}
	states, img, reported := followedStates(b, ctx, c)
	markers := 0
	seen := func() {
		markers++
		markerSeen(b, ctx, c, reported, fmt.Sprintf("/marker/%d", markers))
	}
	seen()
	cat := catalog.New(c, catalog.Options{})
	if err := states.refresh(ctx, cat, img); err != nil {
		b.Fatal(err)
	}
	var build time.Duration
	for b.Loop() {
		for range 30 {
			createTable()
		}
		seen()
		start := time.Now()
		if err := states.refresh(ctx, cat, img); err != nil {
			b.Fatal(err)
		}
		if n := len(states.perServer()[1]); n != 3*tables {
			b.Fatalf("server 1 has %d buckets, want %d", n, 3*tables)
		}
		build += time.Since(start)
	}
	b.ReportMetric(float64(build.Microseconds())/float64(b.N), "µs/round")
}

// TestBucketStatesSignalRegistrations: a change to a tablet server's
// registration signals servers (the controller's round then skips its
// pause); a bucket's record, an assignment or a server tag does not.
func TestBucketStatesSignalRegistrations(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{catalog.TabletServerPath(3), true},
		{catalog.TabletServerIDsPath, true},
		{catalog.LeaderAndIsrPath(1, -1, 0), false},
		{catalog.TableAssignmentPath(1), false},
		{catalog.ServerTagsPath, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			states := newBucketStates()
			states.onChange([]string{tc.path})
			select {
			case <-states.wake:
			default:
				t.Fatalf("a change of %s did not wake the controller", tc.path)
			}
			got := false
			select {
			case <-states.servers:
				got = true
			default:
			}
			if got != tc.want {
				t.Errorf("a change of %s: servers signalled %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}
