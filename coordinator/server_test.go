package coordinator_test

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// node is a coordinator the tests started (internal/harness).
type node = harness.Coordinator

func newClient(t *testing.T, addrs ...string) *adminclient.Client {
	c, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestLeaderServesStandbyRedirects(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "first coordinator leads", a.Srv.IsLeader)
	b := harness.StartCoordinator(t, s, coordinator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Straight to the standby: NOT_LEADER naming the leader.
	cc, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var nl *core.NotLeaderError
	testutil.WaitFor(t, 5*time.Second, "standby names the leader", func() bool {
		_, err = adminv1.NewAdminServiceClient(cc).ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		err = adminapi.FromStatus(err)
		return errors.As(err, &nl) && adminapi.HostPort(nl.LeaderAddress) == a.Addr
	})
	if d := adminapi.DetailOf(func() error {
		_, err := adminv1.NewAdminServiceClient(cc).CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "x"})
		return err
	}()); d == nil || d.Code != adminapi.CodeNotLeader || d.FlussErrorCode != 65 {
		t.Fatalf("standby write: detail %+v", d)
	}

	// Through the standby's address, the client follows the redirect.
	c := newClient(t, b.Addr)
	if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db1"})
		return err
	}); err != nil {
		t.Fatalf("create database through the standby: %v", err)
	}
	if c.Leader() != a.Addr {
		t.Fatalf("client's leader: got %s, want %s", c.Leader(), a.Addr)
	}
	err = c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db1"})
		return err
	})
	var ex *catalog.ExistsError
	if !errors.As(err, &ex) || ex.Name != "db1" || !errors.Is(err, core.ErrNodeExists) {
		t.Fatalf("duplicate database: got %v", err)
	}
	var created *adminv1.TableInfo
	if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		r, err := ac.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db1", Table: "orders", Descriptor_: &adminv1.TableDescriptor{
			Columns:    []*adminv1.Column{{Name: "id", Type: "BIGINT"}, {Name: "v", Type: "STRING"}},
			PrimaryKey: []string{"id"}, BucketCount: 3}})
		if err == nil {
			created = r.Table
		}
		return err
	}); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if len(created.Buckets) != 3 || created.Descriptor_.Columns[0].Type != "BIGINT NOT NULL" {
		t.Fatalf("created table: %+v", created)
	}
	err = c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		_, err := ac.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db1", Table: "bad", Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "id", Type: "WIDGET"}}}})
		return err
	})
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("bad type: got %v, want ErrInvalidArgument", err)
	}

	// Kill the leader: the standby takes over with the catalog intact.
	a.Stop()
	testutil.WaitFor(t, 10*time.Second, "standby takes over", b.Srv.IsLeader)
	c2 := newClient(t, a.Addr, b.Addr)
	var info *adminv1.TableInfo
	if err := c2.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
		r, err := ac.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "db1", Table: "orders"})
		if err == nil {
			info = r.Table
		}
		return err
	}); err != nil {
		t.Fatalf("get table after failover: %v", err)
	}
	if info.TableId != created.TableId || string(info.SchemaJson) != string(created.SchemaJson) {
		t.Fatalf("table after failover: got %+v, want %+v", info, created)
	}
	lr, err := c2.GetLeader(ctx)
	if err != nil || lr.LeaderAddress != b.Addr {
		t.Fatalf("leader after failover: %+v, %v", lr, err)
	}
}

func TestTabletServerRPCs(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := newClient(t, a.Addr)

	var snap *adminv1.FetchMetadataSnapshotResponse
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		snap, err = tc.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var reg *adminv1.RegisterTabletServerResponse
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		reg, err = tc.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: 7, Listeners: "CLIENT://127.0.0.1:7000"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The registration appears on the metadata stream from the snapshot.
	var fetched *adminv1.FetchMetadataResponse
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		fetched, err = tc.FetchMetadata(ctx, &adminv1.FetchMetadataRequest{FromOffset: snap.Offset + 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range fetched.Records {
		if r.Path == catalog.TabletServerPath(7) && r.Type == adminv1.MetadataRecord_CREATED {
			found = true
		}
	}
	if !found || fetched.NextOffset <= snap.Offset+1 {
		t.Fatalf("registration not on the stream: %+v", fetched)
	}
	// A fetch at the head waits (long poll) and returns empty.
	start := time.Now()
	if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		fetched, err = tc.FetchMetadata(ctx, &adminv1.FetchMetadataRequest{FromOffset: fetched.NextOffset})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(fetched.Records) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("long poll: %d records after %v", len(fetched.Records), time.Since(start))
	}
	// Heartbeats keep the registration beyond the lease's timeout.
	for i := 0; i < 6; i++ {
		if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
			_, err := tc.TabletServerHeartbeat(ctx, &adminv1.TabletServerHeartbeatRequest{ServerId: 7, LeaseId: reg.LeaseId})
			return err
		}); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
		time.Sleep(300 * time.Millisecond) // the lease is 1s: this is the heartbeat cadence, not a synchronisation
	}
	listServers := func() int {
		var n int
		c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			r, err := ac.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
			if err == nil {
				n = len(r.Servers)
			}
			return err
		})
		return n
	}
	if n := listServers(); n != 1 {
		t.Fatalf("registered servers: got %d, want 1", n)
	}
	// Without heartbeats the lease expires and the registration goes.
	testutil.WaitFor(t, 10*time.Second, "registration expires", func() bool { return listServers() == 0 })
	err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
		_, err := tc.TabletServerHeartbeat(ctx, &adminv1.TabletServerHeartbeatRequest{ServerId: 7, LeaseId: reg.LeaseId})
		return err
	})
	if !errors.Is(err, core.ErrSessionExpired) {
		t.Fatalf("heartbeat on an expired lease: got %v, want ErrSessionExpired", err)
	}
}

// TestLosingLeadershipStopsServing expires the leader's session: it stops
// serving at once (NOT_LEADER), the standby takes over, and the old
// leader's catalog writes are fenced.
func TestLosingLeadershipStopsServing(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	clients := make(chan *memory.Backend, 10)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := coordinator.New(coordinator.Options{Listener: l, Logger: testutil.Logger(t), Open: func(ctx context.Context) (core.MetadataBackend, error) {
		c := s.NewClient(core.ClientOptions{})
		clients <- c
		return c, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.WaitFor(t, 5*time.Second, "a leads", a.IsLeader)
	b := harness.StartCoordinator(t, s, coordinator.Options{})
	// b must be queued before a's session ends, or a's next session could
	// campaign first and win again.
	testutil.WaitFor(t, 5*time.Second, "b's candidacy", func() bool { return s.Waiting() >= 1 })
	aClient := <-clients
	changed := a.RoleChanged()
	if err := aClient.ExpireSession(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("leadership loss not noticed")
	}
	if a.IsLeader() {
		t.Fatal("still serving after losing leadership")
	}
	testutil.WaitFor(t, 5*time.Second, "b leads", b.Srv.IsLeader)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = adminv1.NewAdminServiceClient(cc).CreateDatabase(context.Background(), &adminv1.CreateDatabaseRequest{Name: "x"})
	if _, ok := adminapi.NotLeaderAddress(err); !ok {
		t.Fatalf("old leader's answer: %v, want NOT_LEADER", err)
	}
	if b.Srv.Epoch() <= 0 {
		t.Fatalf("new leader's epoch %d", b.Srv.Epoch())
	}
}

// TestStandbyRefusesEveryAdminMethod calls every method of the admin
// service on a standby, found by reflection over the generated client and
// checked against the service descriptor (so a method added to the proto
// is covered without editing the test). Each answers NOT_LEADER (the
// original's error 65) naming the leader, even with an empty request (the
// role is checked before the arguments). GetLeader is the one method a
// standby answers: it is how clients find the leader, so it must name it.
func TestStandbyRefusesEveryAdminMethod(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "first coordinator leads", a.Srv.IsLeader)
	b := harness.StartCoordinator(t, s, coordinator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	standby := dialAdmin(t, b.Addr)
	testutil.WaitFor(t, 5*time.Second, "the standby knows the leader", func() bool {
		r, err := standby.GetLeader(ctx, &adminv1.GetLeaderRequest{})
		return err == nil && r.LeaderAddress == a.Addr
	})

	clientType := reflect.TypeOf((*adminv1.AdminServiceClient)(nil)).Elem()
	sd := adminv1.File_metaplane_admin_v1_admin_proto.Services().ByName("AdminService")
	if sd == nil {
		t.Fatal("no AdminService in the admin proto's descriptor")
	}
	var described []string
	for i := 0; i < sd.Methods().Len(); i++ {
		described = append(described, string(sd.Methods().Get(i).Name()))
	}
	var called []string
	for i := 0; i < clientType.NumMethod(); i++ {
		called = append(called, clientType.Method(i).Name)
	}
	sort.Strings(described)
	sort.Strings(called)
	if !reflect.DeepEqual(described, called) {
		t.Fatalf("the client's methods %v differ from the service's %v", called, described)
	}

	cv := reflect.ValueOf(standby)
	for i := 0; i < clientType.NumMethod(); i++ {
		m := clientType.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			req := reflect.New(m.Type.In(1).Elem())
			out := cv.MethodByName(m.Name).Call([]reflect.Value{reflect.ValueOf(ctx), req})
			err, _ := out[1].Interface().(error)
			if m.Name == "GetLeader" {
				r, _ := out[0].Interface().(*adminv1.GetLeaderResponse)
				if err != nil || r.IsLeader || r.LeaderAddress != a.Addr || r.ThisAddress != b.Addr {
					t.Fatalf("GetLeader on the standby: %+v, %v; want not leader, leader %s", r, err, a.Addr)
				}
				return
			}
			if m.Name == "GetCoordinatorRaftStatus" {
				// Answered by every coordinator; the memory backend does
				// not declare ConsensusStatus.
				if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), `"memory" backend`) {
					t.Fatalf("GetCoordinatorRaftStatus on memory: %v, want UNIMPLEMENTED naming the memory backend", err)
				}
				return
			}
			if recv := out[0].MethodByName("Recv"); err == nil && recv.IsValid() {
				// A server stream's answer comes with its first message.
				err, _ = recv.Call(nil)[1].Interface().(error)
			}
			d := adminapi.DetailOf(err)
			if d == nil || d.Code != adminapi.CodeNotLeader || d.FlussErrorCode != adminapi.FlussNotCoordinatorLeader {
				t.Fatalf("got %v (detail %+v), want NOT_LEADER (65)", err, d)
			}
			if adminapi.HostPort(d.LeaderAddress) != a.Addr {
				t.Fatalf("NOT_LEADER names %q, want the leader %s", d.LeaderAddress, a.Addr)
			}
		})
	}
}

// TestSnapshotsWaitForASlot: with coordinator.metadata-stream.max-
// concurrent-snapshots = 1 and that slot taken, a metadata snapshot (in
// parts or in one message) waits for it and fails at its deadline without
// reading the tree; once the slot is free, it is served.
func TestSnapshotsWaitForASlot(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n := harness.StartCoordinator(t, s, coordinator.Options{MaxConcurrentSnapshots: 1})
	testutil.WaitFor(t, 5*time.Second, "the coordinator leads", n.Srv.IsLeader)
	c := newClient(t, n.Addr)
	inParts := func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
		st, err := tc.FetchMetadataSnapshotStream(ctx, &adminv1.FetchMetadataSnapshotRequest{})
		for err == nil {
			if _, err = st.Recv(); errors.Is(err, io.EOF) {
				return nil
			}
		}
		return err
	}
	whole := func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
		_, err := tc.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
		return err
	}
	fetch := func(timeout time.Duration, call func(context.Context, adminv1.TabletServerServiceClient) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.TabletsAt(ctx, n.Addr, call)
	}
	release := n.Srv.HoldSnapshotSlot()
	for name, call := range map[string]func(context.Context, adminv1.TabletServerServiceClient) error{"in parts": inParts, "whole": whole} {
		if err := fetch(300*time.Millisecond, call); status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("snapshot %s with the only slot taken: %v, want the deadline exceeded", name, err)
		}
	}
	release()
	for name, call := range map[string]func(context.Context, adminv1.TabletServerServiceClient) error{"in parts": inParts, "whole": whole} {
		if err := fetch(10*time.Second, call); err != nil {
			t.Fatalf("snapshot %s with the slot free: %v", name, err)
		}
	}
}
