package tabletserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

func tabletClient(t *testing.T, addr string) adminv1.TabletServiceClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminv1.NewTabletServiceClient(cc)
}

// TestCoordinatorEpochFencing: a lower epoch than seen is refused with
// INVALID_COORDINATOR (the original's code 23), a higher one adopted.
func TestCoordinatorEpochFencing(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	ts, err := tabletserver.New(tabletserver.Options{ID: 1, Listener: harness.Listen(t), Logger: testutil.Logger(t),
		Open: func(ctx context.Context) (core.MetadataBackend, error) { return s.NewClient(core.ClientOptions{}), nil }})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, ts.Serve)
	c := tabletClient(t, ts.Address())
	ctx := context.Background()
	notify := func(epoch int64) error {
		_, err := c.NotifyLeaderAndIsr(ctx, &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: epoch, CoordinatorId: "c"})
		return err
	}
	if err := notify(5); err != nil {
		t.Fatalf("epoch 5: %v", err)
	}
	err = notify(3)
	d := adminapi.DetailOf(err)
	if d == nil || d.Code != adminapi.CodeInvalidCoordinator || d.FlussErrorCode != 23 || d.CoordinatorEpoch != 5 {
		t.Fatalf("epoch 3 after 5: got %v (detail %+v), want INVALID_COORDINATOR naming 5", err, d)
	}
	if !errors.Is(adminapi.FromStatus(err), adminapi.ErrInvalidCoordinator) {
		t.Fatalf("FromStatus: %v", adminapi.FromStatus(err))
	}
	if ts.Epoch() != 5 {
		t.Fatalf("a refused request changed the epoch: %d", ts.Epoch())
	}
	if err := notify(5); err != nil {
		t.Fatalf("same epoch again: %v", err)
	}
	if err := notify(6); err != nil || ts.Epoch() != 6 {
		t.Fatalf("epoch 6: %v, epoch now %d", err, ts.Epoch())
	}
	// ZooKeeper mode (own session): the registration is an ephemeral of the
	// server's session; expiring it makes the server register again.
	testutil.WaitFor(t, 5*time.Second, "registered", ts.Registered)
	st, _ := c.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
	if !st.Registered || st.CoordinatorEpoch != 6 {
		t.Fatalf("state: %+v", st)
	}
	reader := s.NewClient(core.ClientOptions{})
	n, err := core.Get(ctx, reader, "/tabletservers/ids/1")
	if err != nil {
		t.Fatal(err)
	}
	if !s.ExpireSession(n.Stat.EphemeralOwner) {
		t.Fatal("no session to expire")
	}
	testutil.WaitFor(t, 10*time.Second, "re-registered under a new session", func() bool {
		m, err := core.Get(ctx, reader, "/tabletservers/ids/1")
		return err == nil && m.Stat.EphemeralOwner != n.Stat.EphemeralOwner
	})
}

// startCoordinator starts a coordinator on s with the tablet servers'
// session timeout these tests use.
func startCoordinator(t *testing.T, s *memory.Store) *harness.Coordinator {
	return harness.StartCoordinator(t, s, coordinator.Options{TabletServerSessionTimeout: 2 * time.Second})
}

// TestRaftModeFollowsAndSurvivesFailover: a tablet server registers through
// the coordinator RPCs, follows the metadata, adopts the new leader's
// epoch after a failover and keeps its registration.
func TestRaftModeFollowsAndSurvivesFailover(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := startCoordinator(t, s)
	testutil.WaitFor(t, 5*time.Second, "a leads", a.Srv.IsLeader)
	b := startCoordinator(t, s)
	ts, err := tabletserver.New(tabletserver.Options{ID: 3, Listener: harness.Listen(t), Logger: testutil.Logger(t), Seeds: []string{b.Addr, a.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, ts.Serve)
	testutil.WaitFor(t, 10*time.Second, "registered", ts.Registered)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, _ := adminclient.NewClient([]string{a.Addr, b.Addr})
	defer client.Close()
	if err := client.Admin(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		if _, err := c.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"}); err != nil {
			return err
		}
		_, err := c.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "t", Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "k", Type: "INT"}}, BucketCount: 2}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tc := tabletClient(t, ts.Address())
	state := func() *adminv1.GetTabletServerStateResponse {
		st, err := tc.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	testutil.WaitFor(t, 10*time.Second, "view has the table and leads its buckets", func() bool {
		st := state()
		return len(st.Tables) == 1 && st.Tables[0] == "db.t" && st.BucketsLed == 2
	})
	testutil.WaitFor(t, 10*time.Second, "epoch from the first leader", func() bool { return ts.Epoch() == a.Srv.Epoch() })
	first := ts.Epoch()

	a.Stop()
	testutil.WaitFor(t, 10*time.Second, "b leads", b.Srv.IsLeader)
	testutil.WaitFor(t, 10*time.Second, "tablet adopts the new epoch", func() bool { return ts.Epoch() == b.Srv.Epoch() && ts.Epoch() > first })
	testutil.WaitFor(t, 10*time.Second, "still registered on the new leader", func() bool {
		var n int
		client.Admin(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
			r, err := c.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
			if err == nil {
				n = len(r.Servers)
			}
			return err
		})
		return n == 1 && ts.Registered()
	})
	// The old leader's epoch is refused now.
	_, err = tc.NotifyLeaderAndIsr(ctx, &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: first})
	if d := adminapi.DetailOf(err); d == nil || d.Code != adminapi.CodeInvalidCoordinator {
		t.Fatalf("stale epoch after failover: %v", err)
	}
}
