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
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/core/catalog"
	"github.com/metaplane/metaplane/core/image"
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

// TestBucketStatesFollowTheImage: bucket states kept from the image's
// changed paths equal a full build from the image's snapshot after every
// step of random writes (leader records set, created and deleted, whole
// tables and partitions deleted, partitions moved between tables,
// undecodable records, registrations); writes outside /tabletservers do
// not wake the notifier, writes inside do.
func TestBucketStatesFollowTheImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := memory.NewStore(memory.StoreOptions{})
	defer st.Close()
	b := st.NewClient(core.ClientOptions{})
	defer b.Close()
	states := newBucketStates()
	// reported gets every batch's paths once the states have seen them
	// (OnChange runs after the image's revision moved).
	reported := make(chan []string, 1024)
	img := image.New(image.Options{Prefix: "/", OnChange: func(paths []string) {
		states.onChange(paths)
		reported <- paths
	}})
	done := make(chan struct{})
	go func() { defer close(done); img.Run(ctx, b) }()
	defer func() { cancel(); <-done }()
	if err := img.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
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
			last := res.Results[len(res.Results)-1].Path
			for seen := false; !seen; {
				select {
				case paths := <-reported:
					seen = slices.Contains(paths, last)
				case <-ctx.Done():
					t.Fatalf("the image never reported %s", last)
				}
			}
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
	st := memory.NewStore(memory.StoreOptions{})
	defer st.Close()
	b := st.NewClient(core.ClientOptions{})
	defer b.Close()
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

// BenchmarkNotifierRound times one notifier round's build (refresh and
// grouping by server) on a catalog of 1000 tables of 3 buckets after one
// bucket's leader record changed: mode=changed takes the changed path,
// mode=full rebuilds from the whole /tabletservers subtree, as every
// round did before bucketStates.
func BenchmarkNotifierRound(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := memory.NewStore(memory.StoreOptions{})
	defer st.Close()
	c := st.NewClient(core.ClientOptions{})
	defer c.Close()
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
