package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/coordinator"

	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// fakeTablet is a tablet server reduced to what the coordinator sees of
// one: a lease kept alive by heartbeats while beating, and a tablet
// service that records the last NotifyLeaderAndIsr.
type fakeTablet struct {
	adminv1.UnimplementedTabletServiceServer
	id    int32
	addr  string
	lease int64

	mu       sync.Mutex
	notified *adminv1.NotifyLeaderAndIsrRequest
	stopBeat context.CancelFunc
}

func (f *fakeTablet) NotifyLeaderAndIsr(ctx context.Context, r *adminv1.NotifyLeaderAndIsrRequest) (*adminv1.NotifyLeaderAndIsrResponse, error) {
	f.mu.Lock()
	f.notified = r
	f.mu.Unlock()
	return &adminv1.NotifyLeaderAndIsrResponse{CoordinatorEpoch: r.CoordinatorEpoch}, nil
}

func (f *fakeTablet) lastNotified() *adminv1.NotifyLeaderAndIsrRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notified
}

func startFakeTablet(t *testing.T, id int32) *fakeTablet {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTablet{id: id, addr: l.Addr().String()}
	g := grpc.NewServer()
	adminv1.RegisterTabletServiceServer(g, f)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return f
}

// register registers f and heartbeats its lease until stopped.
func (f *fakeTablet) register(t *testing.T, ctx context.Context, c *adminclient.Client) {
	t.Helper()
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
		r, err := tc.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: f.id, Listeners: "CLIENT://" + f.addr})
		if err == nil {
			f.lease = r.LeaseId
		}
		return err
	}); err != nil {
		t.Fatalf("register tablet server %d: %v", f.id, err)
	}
	bctx, cancel := context.WithCancel(ctx)
	f.stopBeat = cancel
	lease := f.lease
	go func() {
		tick := time.NewTicker(200 * time.Millisecond) // the lease is 1s: the heartbeat cadence
		defer tick.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-tick.C:
			}
			c.Tablets(bctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
				_, err := tc.TabletServerHeartbeat(ctx, &adminv1.TabletServerHeartbeatRequest{ServerId: f.id, LeaseId: lease})
				return err
			})
		}
	}()
	t.Cleanup(cancel)
}

// listBuckets lists every bucket of db.table, in pages of 5 (so that a
// dozen buckets cross page boundaries).
// startBucketRig starts a coordinator on the memory backend and n fake
// tablet servers (ids 1 to n) registered with it; ctx ends with the test.
func startBucketRig(t *testing.T, n int32) (context.Context, *adminclient.Client, *node, map[int32]*fakeTablet) {
	t.Helper()
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c := newClient(t, a.Addr)
	tablets := map[int32]*fakeTablet{}
	for id := int32(1); id <= n; id++ {
		tablets[id] = startFakeTablet(t, id)
		tablets[id].register(t, ctx, c)
	}
	return ctx, c, a, tablets
}

// createBucketTable creates db.t with buckets buckets of rf replicas.
func createBucketTable(t *testing.T, ctx context.Context, c *adminclient.Client, buckets, rf int32) {
	t.Helper()
	if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		if _, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"}); err != nil {
			return err
		}
		_, err := ac.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "t", Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}, BucketCount: buckets, ReplicationFactor: rf}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func listBuckets(t *testing.T, ctx context.Context, c *adminclient.Client, db, table string) []*adminv1.ListedBucket {
	t.Helper()
	return listBucketPages(t, ctx, c, db, table, 5)
}

func listBucketPages(t *testing.T, ctx context.Context, c *adminclient.Client, db, table string, size int32) []*adminv1.ListedBucket {
	t.Helper()
	var out []*adminv1.ListedBucket
	req := &adminv1.ListBucketsRequest{Database: db, Table: table, PageSize: size}
	for {
		var page *adminv1.ListBucketsResponse
		if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) (err error) {
			page, err = ac.ListBuckets(ctx, req)
			return err
		}); err != nil {
			t.Fatalf("list buckets: %v", err)
		}
		out = append(out, page.Buckets...)
		if page.NextPageToken == "" {
			return out
		}
		req.PageToken = page.NextPageToken
	}
}

func adjustIsr(t *testing.T, ctx context.Context, c *adminclient.Client, server int32, b *adminv1.ListedBucket, leaderEpoch, bucketEpoch int32, isr ...int32) *adminv1.AdjustIsrResponse_Result {
	t.Helper()
	var resp *adminv1.AdjustIsrResponse
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		resp, err = tc.AdjustIsr(ctx, &adminv1.AdjustIsrRequest{ServerId: server, Buckets: []*adminv1.AdjustIsrRequest_Bucket{{
			TableId: b.TableId, PartitionId: b.PartitionId, Bucket: b.Bucket.Bucket, LeaderEpoch: leaderEpoch, BucketEpoch: bucketEpoch, NewIsr: isr}}})
		return err
	}); err != nil {
		t.Fatalf("AdjustIsr: %v", err)
	}
	return resp.Results[0]
}

// TestBucketLeadership runs the controller on the memory backend with
// fake tablet servers: a server whose lease expires loses its leaderships
// and ISR places (the original's election rule and epochs), the others
// are notified; AdjustIsr's refusals; a server back in the ISRs gets its
// leaderships back by a preferred election; a controlled shutdown moves
// leaderships first; buckets with no live ISR member go offline and come
// back online with the first ISR member that registers, or by an unclean
// election.
func TestBucketLeadership(t *testing.T) {
	ctx, c, a, tablets := startBucketRig(t, 3)
	createBucketTable(t, ctx, c, 12, 3)
	before := listBuckets(t, ctx, c, "db", "t")
	if len(before) != 12 {
		t.Fatalf("%d buckets listed (pages of 5), want 12", len(before))
	}
	led2 := 0
	for _, b := range before {
		if b.Bucket.Leader == 2 {
			led2++
		}
		if b.Offline || b.Bucket.Leader != b.Bucket.Replicas[0] || len(b.Bucket.Isr) != 3 {
			t.Fatalf("new bucket %v: want led by its first replica, ISR of 3, online", b)
		}
	}
	if led2 == 0 {
		t.Fatal("server 2 leads no bucket: the assignment does not spread leaders")
	}

	// Server 2 stops heartbeating: its lease expires.
	tablets[2].stopBeat()
	epoch := a.Srv.Epoch()
	var after []*adminv1.ListedBucket
	testutil.WaitFor(t, 15*time.Second, "no bucket names server 2 as leader or ISR member", func() bool {
		after = listBuckets(t, ctx, c, "db", "t")
		for _, b := range after {
			if b.Bucket.Leader == 2 || slices.Contains(b.Bucket.Isr, 2) {
				return false
			}
		}
		return true
	})
	for i, b := range after {
		old := before[i].Bucket
		nb := b.Bucket
		want := old.Replicas[0]
		if want == 2 {
			want = old.Replicas[1]
		}
		if nb.Leader != want {
			t.Errorf("bucket %d: leader %d, want %d (the first live replica of %v in the ISR)", nb.Bucket, nb.Leader, want, old.Replicas)
		}
		if old.Leader == 2 && nb.LeaderEpoch != old.LeaderEpoch+1 {
			t.Errorf("bucket %d: leader epoch %d after its leader went, want %d", nb.Bucket, nb.LeaderEpoch, old.LeaderEpoch+1)
		}
		if old.Leader != 2 && nb.LeaderEpoch != old.LeaderEpoch {
			t.Errorf("bucket %d: leader epoch %d moved though its leader stayed", nb.Bucket, nb.LeaderEpoch)
		}
		if nb.BucketEpoch != old.BucketEpoch+1 || int64(nb.CoordinatorEpoch) != epoch || b.Offline {
			t.Errorf("bucket %d: bucket epoch %d (want %d), coordinator epoch %d (want %d), offline %v", nb.Bucket,
				nb.BucketEpoch, old.BucketEpoch+1, nb.CoordinatorEpoch, epoch, b.Offline)
		}
	}
	// The survivors are told what they lead and follow now.
	for _, id := range []int32{1, 3} {
		testutil.WaitFor(t, 10*time.Second, "a survivor is notified of the new records", func() bool {
			n := tablets[id].lastNotified()
			if n == nil || n.CoordinatorEpoch != epoch || len(n.Buckets) != 12 {
				return false
			}
			for _, nb := range n.Buckets {
				if nb.Leader == 2 || slices.Contains(nb.Isr, 2) {
					return false
				}
			}
			return true
		})
	}

	// AdjustIsr: a leader shrinks its ISR; a repetition is answered with
	// the record, not applied twice; stale epochs and wrong callers are
	// refused with their codes.
	b0 := after[0]
	leader := b0.Bucket.Leader
	var follower int32 = -1
	for _, r := range b0.Bucket.Isr {
		if r != leader {
			follower = r
		}
	}
	le, be := b0.Bucket.LeaderEpoch, b0.Bucket.BucketEpoch
	res := adjustIsr(t, ctx, c, leader, b0, le, be, leader)
	if res.ErrorCode != "" || res.BucketEpoch != be+1 || !slices.Equal(res.Isr, []int32{leader}) {
		t.Fatalf("shrink: %v, want ISR [%d] at bucket epoch %d", res, leader, be+1)
	}
	if res := adjustIsr(t, ctx, c, leader, b0, le, be, leader); res.ErrorCode != "" || res.BucketEpoch != be+1 {
		t.Fatalf("repeated shrink: %v, want the record at bucket epoch %d, unchanged", res, be+1)
	}
	for _, tc := range []struct {
		name   string
		server int32
		le, be int32
		isr    []int32
		code   string
	}{
		{"stale bucket epoch", leader, le, be, []int32{leader, follower}, adminapi.IsrInvalidUpdateVersion},
		{"stale leader epoch", leader, le - 1, be + 1, []int32{leader, follower}, adminapi.IsrFencedLeaderEpoch},
		{"not the leader", follower, le, be + 1, []int32{leader, follower}, adminapi.IsrNotLeader},
		{"leader left out", leader, le, be + 1, []int32{follower}, adminapi.IsrIneligibleReplica},
		{"a server gone", leader, le, be + 1, []int32{leader, 2}, adminapi.IsrIneligibleReplica},
	} {
		if res := adjustIsr(t, ctx, c, tc.server, b0, tc.le, tc.be, tc.isr...); res.ErrorCode != tc.code {
			t.Errorf("%s: code %q (%s), want %s", tc.name, res.ErrorCode, res.ErrorMessage, tc.code)
		}
	}
	if res := adjustIsr(t, ctx, c, leader, b0, le, be+1, leader, follower); res.ErrorCode != "" || res.BucketEpoch != be+2 {
		t.Fatalf("expand: %v, want bucket epoch %d", res, be+2)
	}

	// Server 2 registers again; its leaders take it back into their ISRs;
	// a preferred election gives it back the buckets it leads first.
	tablets[2].register(t, ctx, c)
	for _, b := range listBuckets(t, ctx, c, "db", "t") {
		if slices.Contains(b.Bucket.Replicas, 2) {
			isr := append(slices.Clone(b.Bucket.Isr), 2)
			if res := adjustIsr(t, ctx, c, b.Bucket.Leader, b, b.Bucket.LeaderEpoch, b.Bucket.BucketEpoch, isr...); res.ErrorCode != "" {
				t.Fatalf("expand bucket %d with server 2: %v", b.Bucket.Bucket, res)
			}
		}
	}
	var elected *adminv1.ElectLeadersResponse
	if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) (err error) {
		elected, err = ac.ElectLeaders(ctx, &adminv1.ElectLeadersRequest{Database: "db", Table: "t", Type: adminv1.ElectionType_ELECTION_TYPE_PREFERRED})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if int(elected.ElectedCount) != led2 || elected.NotEligible != 0 {
		t.Fatalf("preferred election: %v, want %d elected", elected, led2)
	}
	for _, b := range listBuckets(t, ctx, c, "db", "t") {
		if b.Bucket.Leader != b.Bucket.Replicas[0] {
			t.Errorf("bucket %d led by %d after the preferred election, want %d", b.Bucket.Bucket, b.Bucket.Leader, b.Bucket.Replicas[0])
		}
	}

	// A controlled shutdown of server 1 moves its leaderships first; it
	// cannot join an ISR again until it registers anew.
	var shut *adminv1.ControlledShutdownResponse
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		shut, err = tc.ControlledShutdown(ctx, &adminv1.ControlledShutdownRequest{ServerId: 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if shut.Moved == 0 || len(shut.Remaining) != 0 {
		t.Fatalf("controlled shutdown: %v, want leaderships moved and none remaining", shut)
	}
	for _, b := range listBuckets(t, ctx, c, "db", "t") {
		if b.Bucket.Leader == 1 || slices.Contains(b.Bucket.Isr, 1) || b.Offline {
			t.Fatalf("after server 1's controlled shutdown: %v", b)
		}
	}
	some := listBuckets(t, ctx, c, "db", "t")[0]
	if res := adjustIsr(t, ctx, c, some.Bucket.Leader, some, some.Bucket.LeaderEpoch, some.Bucket.BucketEpoch,
		append(slices.Clone(some.Bucket.Isr), 1)...); res.ErrorCode != adminapi.IsrIneligibleReplica {
		t.Fatalf("server 1 taken back into an ISR while shutting down: %v", res)
	}

	// The servers go one after the other: server 1 (shut down already),
	// then 3 (it leaves every ISR), then 2: every bucket is offline and
	// keeps its last ISR, [2].
	waitBuckets := func(what string, ok func(b *adminv1.ListedBucket) bool) {
		t.Helper()
		testutil.WaitFor(t, 15*time.Second, what, func() bool {
			for _, b := range listBuckets(t, ctx, c, "db", "t") {
				if !ok(b) {
					return false
				}
			}
			return true
		})
	}
	tablets[1].stopBeat()
	tablets[3].stopBeat()
	waitBuckets("servers 1 and 3 out of every ISR", func(b *adminv1.ListedBucket) bool {
		return slices.Equal(b.Bucket.Isr, []int32{2}) && b.Bucket.Leader == 2
	})
	tablets[2].stopBeat()
	waitBuckets("every bucket offline with its last ISR [2]", func(b *adminv1.ListedBucket) bool {
		return b.Bucket.Leader == catalog.NoLeader && b.Offline && slices.Equal(b.Bucket.Isr, []int32{2})
	})
	// Server 3 comes back: not in any ISR, it leads nothing by itself; an
	// unclean election gives it every bucket, with an ISR of itself.
	tablets[3].register(t, ctx, c)
	for _, b := range listBuckets(t, ctx, c, "db", "t") {
		if b.Bucket.Leader != catalog.NoLeader {
			t.Fatalf("bucket %d led by %d, outside its ISR %v, without an unclean election", b.Bucket.Bucket, b.Bucket.Leader, b.Bucket.Isr)
		}
	}
	if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) (err error) {
		elected, err = ac.ElectLeaders(ctx, &adminv1.ElectLeadersRequest{Type: adminv1.ElectionType_ELECTION_TYPE_UNCLEAN})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if elected.ElectedCount != 12 {
		t.Fatalf("unclean election: %v, want 12 elected", elected)
	}
	for _, b := range listBuckets(t, ctx, c, "db", "t") {
		if b.Bucket.Leader != 3 || b.Offline || !slices.Equal(b.Bucket.Isr, []int32{3}) {
			t.Errorf("bucket %d after the unclean election: leader %d, ISR %v, offline %v; want 3, [3]", b.Bucket.Bucket, b.Bucket.Leader, b.Bucket.Isr, b.Offline)
		}
	}
	// Server 3 goes and comes back: the first member of an offline
	// bucket's ISR to register leads it again.
	tablets[3].stopBeat()
	waitBuckets("every bucket offline with its last ISR [3]", func(b *adminv1.ListedBucket) bool {
		return b.Bucket.Leader == catalog.NoLeader && slices.Equal(b.Bucket.Isr, []int32{3})
	})
	tablets[3].register(t, ctx, c)
	waitBuckets("server 3 leads every bucket again", func(b *adminv1.ListedBucket) bool {
		return b.Bucket.Leader == 3 && !b.Offline
	})
}

// TestStaleCoordinatorWritesNoLeaderAndIsr: a catalog with the fence of a
// leadership that was lost writes no LeaderAndIsr record.
func TestStaleCoordinatorWritesNoLeaderAndIsr(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b1 := s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second})
	b2 := s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second})
	defer b1.Close()
	defer b2.Close()
	old, err := b1.Campaign(ctx, core.Candidate{ID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	oldCat := catalog.New(b1, catalog.Options{Fence: old.Fence(), Epoch: old.Epoch()})
	key := catalog.BucketKey{TableID: 1, PartitionID: -1, Bucket: 0}
	rec := catalog.LeaderAndIsr{Leader: 1, ISR: []int32{1, 2}}
	if _, _, err := core.Create(ctx, b1, key.Path(), rec.Marshal(), core.CreateOptions{MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	if err := old.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := b2.Campaign(ctx, core.Candidate{ID: "new"})
	if err != nil {
		t.Fatal(err)
	}
	moved := rec
	moved.Leader, moved.ISR, moved.LeaderEpoch = 2, []int32{2}, 1
	if n, err := oldCat.UpdateLeaderAndIsr(ctx, []catalog.LeaderAndIsrUpdate{{Key: key, Version: 0, Record: moved}}); !errors.Is(err, core.ErrFenced) || n != 0 {
		t.Fatalf("stale coordinator's LeaderAndIsr write: %d written, %v; want none, ErrFenced", n, err)
	}
	newCat := catalog.New(b2, catalog.Options{Fence: next.Fence(), Epoch: next.Epoch()})
	if _, err := newCat.UpdateLeaderAndIsr(ctx, []catalog.LeaderAndIsrUpdate{{Key: key, Version: 0, Record: moved}}); err != nil {
		t.Fatalf("current coordinator's write: %v", err)
	}
	n, err := core.Get(ctx, b2, key.Path())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := catalog.UnmarshalLeaderAndIsr(n.Data)
	if got.Leader != 2 || int64(got.CoordinatorEpoch) != next.Epoch() {
		t.Fatalf("record %+v: want leader 2 at coordinator epoch %d", got, next.Epoch())
	}
}

// TestBucketReassignment: a reassignment adds the new replicas, waits for
// them in the ISR, moves leadership into the target and removes the old
// replicas; a target naming an unregistered server is refused with
// nothing changed; a repetition is answered as unchanged; a cancel puts
// the original list back.
func TestBucketReassignment(t *testing.T) {
	ctx, c, _, _ := startBucketRig(t, 4)
	createBucketTable(t, ctx, c, 4, 2)
	reassign := func(req *adminv1.ReassignBucketsRequest) (*adminv1.ReassignBucketsResponse, error) {
		req.Database, req.Table = "db", "t"
		var resp *adminv1.ReassignBucketsResponse
		err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) (err error) {
			resp, err = ac.ReassignBuckets(ctx, req)
			return err
		})
		return resp, err
	}
	before := listBuckets(t, ctx, c, "db", "t")
	b0 := before[0].Bucket
	var target []int32
	for id := int32(1); id <= 4; id++ {
		if !slices.Contains(b0.Replicas, id) {
			target = append(target, id)
		}
	}
	if _, err := reassign(&adminv1.ReassignBucketsRequest{Targets: []*adminv1.ReassignBucketsRequest_Target{{Bucket: 0, Replicas: []int32{target[0], 99}}}}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("reassignment to an unregistered server: %v, want INVALID_ARGUMENT", err)
	}
	if got := listBuckets(t, ctx, c, "db", "t")[0]; !slices.Equal(got.Bucket.Replicas, b0.Replicas) || len(got.TargetReplicas) != 0 {
		t.Fatalf("a refused reassignment changed bucket 0: %v", got)
	}
	req := &adminv1.ReassignBucketsRequest{Targets: []*adminv1.ReassignBucketsRequest_Target{{Bucket: 0, Replicas: target}}}
	if resp, err := reassign(req); err != nil || resp.Started != 1 {
		t.Fatalf("start: %v, %v", resp, err)
	}
	if resp, err := reassign(req); err != nil || resp.Unchanged != 1 || resp.Started != 0 {
		t.Fatalf("repeated start: %v, %v; want unchanged", resp, err)
	}
	mid := listBuckets(t, ctx, c, "db", "t")[0]
	if want := append(slices.Clone(target), b0.Replicas...); !slices.Equal(mid.Bucket.Replicas, want) || !slices.Equal(mid.TargetReplicas, target) ||
		mid.Bucket.Leader != b0.Leader {
		t.Fatalf("in progress: %v; want replicas %v, target %v, leader %d", mid, want, target, b0.Leader)
	}
	// The leader takes the new replicas into the ISR: the reassignment
	// ends, led by the target's first replica.
	if res := adjustIsr(t, ctx, c, mid.Bucket.Leader, mid, mid.Bucket.LeaderEpoch, mid.Bucket.BucketEpoch, append(slices.Clone(mid.Bucket.Isr), target...)...); res.ErrorCode != "" {
		t.Fatalf("expand: %v", res)
	}
	var done *adminv1.ListedBucket
	testutil.WaitFor(t, 10*time.Second, "the reassignment of bucket 0 ends", func() bool {
		done = listBuckets(t, ctx, c, "db", "t")[0]
		return len(done.TargetReplicas) == 0 && slices.Equal(done.Bucket.Replicas, target)
	})
	if done.Bucket.Leader != target[0] || !catalog.SameReplicas(done.Bucket.Isr, target) || done.Bucket.LeaderEpoch != b0.LeaderEpoch+1 {
		t.Fatalf("after the reassignment: %v; want leader %d, ISR %v, leader epoch %d", done, target[0], target, b0.LeaderEpoch+1)
	}

	// Cancel: bucket 1 goes back to its original list.
	b1 := before[1].Bucket
	var other []int32
	for id := int32(1); id <= 4; id++ {
		if !slices.Contains(b1.Replicas, id) {
			other = append(other, id)
		}
	}
	if resp, err := reassign(&adminv1.ReassignBucketsRequest{Targets: []*adminv1.ReassignBucketsRequest_Target{{Bucket: 1, Replicas: other}}}); err != nil || resp.Started != 1 {
		t.Fatalf("start bucket 1: %v, %v", resp, err)
	}
	if resp, err := reassign(&adminv1.ReassignBucketsRequest{Cancel: true}); err != nil || resp.Cancelled != 1 {
		t.Fatalf("cancel: %v, %v", resp, err)
	}
	if got := listBuckets(t, ctx, c, "db", "t")[1]; !slices.Equal(got.Bucket.Replicas, b1.Replicas) || len(got.TargetReplicas) != 0 || got.Bucket.Leader != b1.Leader {
		t.Fatalf("after the cancel: %v; want replicas %v led by %d", got, b1.Replicas, b1.Leader)
	}
}

// TestPagedListUnderWrites: ListTables in pages of 7 while tables are
// created between the pages returns every table that existed throughout
// exactly once, in order.
func TestPagedListUnderWrites(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, a.Addr)
	admin := func(f func(ctx context.Context, ac adminv1.AdminServiceClient) error) {
		t.Helper()
		if err := c.Admin(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	create := func(name string) {
		admin(func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			_, err := ac.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: name, Descriptor_: &adminv1.TableDescriptor{
				Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}}})
			return err
		})
	}
	admin(func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	})
	var stable []string
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("t%02d", 2*i)
		create(name)
		stable = append(stable, name)
	}
	var got []string
	req := &adminv1.ListTablesRequest{Database: "db", PageSize: 7}
	for n := 0; ; n++ {
		var page *adminv1.ListTablesResponse
		admin(func(ctx context.Context, ac adminv1.AdminServiceClient) (err error) {
			page, err = ac.ListTables(ctx, req)
			return err
		})
		if len(page.Names) > 7 {
			t.Fatalf("page of %d names, want at most 7", len(page.Names))
		}
		got = append(got, page.Names...)
		if page.NextPageToken == "" {
			break
		}
		req.PageToken = page.NextPageToken
		// Between pages: a table created before the token (not listed)
		// and one after it (listed, or not: created under the listing).
		create(fmt.Sprintf("t%02d", 2*n+1))
		create(fmt.Sprintf("u%02d", n))
	}
	seen := map[string]int{}
	for _, n := range got {
		seen[n]++
	}
	for _, n := range stable {
		if seen[n] != 1 {
			t.Errorf("table %s listed %d times, want once", n, seen[n])
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("pages out of order: %v", got)
	}
}
