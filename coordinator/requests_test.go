package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
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

// lossyBackend commits a transaction that records a request id and then,
// while armed, loses its answer (the coordinator sees ErrUnavailable): the
// ambiguous failure between the commit and the answer.
type lossyBackend struct {
	*memory.Backend
	armed *atomic.Int32 // answers still to lose
	lost  *atomic.Int32 // answers lost
}

func (b lossyBackend) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	res, err := b.Backend.Txn(ctx, ops, opts)
	if err == nil && len(ops) > 0 && strings.HasPrefix(ops[len(ops)-1].Path, catalog.RequestsPath+"/") && b.armed.Add(-1) >= 0 {
		b.lost.Add(1)
		return core.TxnResult{}, core.ErrUnavailable
	}
	return res, err
}

func startLossy(t *testing.T, s *memory.Store, opts coordinator.Options) (*node, *atomic.Int32, *atomic.Int32) {
	t.Helper()
	armed, lost := &atomic.Int32{}, &atomic.Int32{}
	opts.Open = func(ctx context.Context) (core.MetadataBackend, error) {
		return lossyBackend{Backend: s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second}), armed: armed, lost: lost}, nil
	}
	n := harness.StartCoordinator(t, s, opts)
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", n.Srv.IsLeader)
	return n, armed, lost
}

func tableDescriptor() *adminv1.TableDescriptor {
	return &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "INT"}}, BucketCount: 1, ReplicationFactor: 1}
}

// A create whose answer is lost after its commit is retried by the client
// with the same request id and answered with the original table id; it is
// applied once (a fresh create of the same table is "already exists").
func TestLostAnswerRetryReturnsOriginalTableID(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n, armed, lost := startLossy(t, s, coordinator.Options{})
	c := newClient(t, n.Addr)
	c.RetryWait = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	armed.Store(1)
	var resp *adminv1.CreateTableResponse
	err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
		resp, err = a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "t", Descriptor_: tableDescriptor()})
		return err
	})
	if err != nil {
		t.Fatalf("create with a lost answer: %v (want the retry to answer with the original result)", err)
	}
	if lost.Load() != 1 {
		t.Fatalf("%d answers lost, want 1: the test did not provoke the ambiguous failure", lost.Load())
	}
	var info *adminv1.GetTableInfoResponse
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
		info, err = a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "db", Table: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !resp.Created || resp.Table.GetTableId() != info.Table.TableId {
		t.Fatalf("retried create answered created=%v table id %d; the table's id is %d", resp.Created, resp.Table.GetTableId(), info.Table.TableId)
	}
	// A new request (new id) for the same table is a second create.
	err = c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "t", Descriptor_: tableDescriptor()})
		return err
	})
	if !errors.Is(err, core.ErrNodeExists) && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second create with a new id: %v, want already exists", err)
	}
}

// The same request id with another body is refused with INVALID_ARGUMENT
// naming the id, and changes nothing.
func TestRequestIDReuseWithOtherBodyRefused(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n, _, _ := startLossy(t, s, coordinator.Options{})
	c := newClient(t, n.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rctx := adminclient.WithRequestID(ctx, "req-1")
	create := func(ctx context.Context, name string) error {
		return c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
			return err
		})
	}
	if err := create(rctx, "db1"); err != nil {
		t.Fatal(err)
	}
	if err := create(rctx, "db1"); err != nil {
		t.Fatalf("same id, same body: %v, want the original answer", err)
	}
	err := create(rctx, "db2")
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument && !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("same id, other body: %v, want INVALID_ARGUMENT", err)
	}
	if !strings.Contains(err.Error(), `"req-1"`) {
		t.Fatalf("refusal %q does not name the request id", err)
	}
	var names []string
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		names = r.GetNames()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == "db2" {
			t.Fatalf("the refused request created db2: %v", names)
		}
	}
}

// AllocateIDs whose answer is lost is retried and answered with the range
// it reserved; the same id again returns that range; a new id gets a
// range after it.
func TestAllocateIDsRetryReturnsSameRange(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n, armed, lost := startLossy(t, s, coordinator.Options{})
	c := newClient(t, n.Addr)
	c.RetryWait = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alloc := func(ctx context.Context) *adminv1.AllocateIDsResponse {
		t.Helper()
		var r *adminv1.AllocateIDsResponse
		if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
			r, err = a.AllocateIDs(ctx, &adminv1.AllocateIDsRequest{Counter: "writer", Count: 10})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	armed.Store(1)
	rctx := adminclient.WithRequestID(ctx, "alloc-1")
	first := alloc(rctx)
	if lost.Load() != 1 {
		t.Fatalf("%d answers lost, want 1", lost.Load())
	}
	again := alloc(rctx)
	if again.First != first.First || again.Count != first.Count {
		t.Fatalf("same id again: [%d,+%d), first answer [%d,+%d)", again.First, again.Count, first.First, first.Count)
	}
	next := alloc(ctx)
	if next.First < first.First+first.Count {
		t.Fatalf("a new id got [%d,+%d), overlapping [%d,+%d)", next.First, next.Count, first.First, first.Count)
	}
}

// The leader removes request records past their retention.
func TestRequestRecordsExpire(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n, _, _ := startLossy(t, s, coordinator.Options{RequestRetention: 300 * time.Millisecond, RequestCleanupInterval: 20 * time.Millisecond})
	c := newClient(t, n.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Admin(adminclient.WithRequestID(ctx, "old-1"), func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b := s.NewClient(core.ClientOptions{})
	defer b.Close()
	if _, err := core.Get(ctx, b, catalog.RequestPath("old-1")); err != nil {
		t.Fatalf("request record after the create: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the expired request record is removed", func() bool {
		_, err := core.Get(ctx, b, catalog.RequestPath("old-1"))
		return errors.Is(err, core.ErrNotFound)
	})
	if _, err := core.Get(ctx, b, catalog.DatabasePath("db")); err != nil {
		t.Fatalf("cleanup touched the database: %v", err)
	}
}

// DropTable and AddACLs whose answers are lost
// are answered, on their repetition, as their first application was: the
// drop says dropped (not "does not exist"), the ACL add counts the entry
// it added (not 0).
func TestLostAnswerRetryOfDropAndACL(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n, armed, lost := startLossy(t, s, coordinator.Options{})
	c := newClient(t, n.Addr)
	c.RetryWait = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := func(f func(a adminv1.AdminServiceClient) error) {
		t.Helper()
		if err := c.Admin(ctx, func(_ context.Context, a adminv1.AdminServiceClient) error { return f(a) }); err != nil {
			t.Fatal(err)
		}
	}
	admin(func(a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	})
	admin(func(a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "t", Descriptor_: tableDescriptor()})
		return err
	})

	armed.Store(1)
	var drop *adminv1.DropTableResponse
	err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
		drop, err = a.DropTable(ctx, &adminv1.DropTableRequest{Database: "db", Table: "t"})
		return err
	})
	if err != nil || !drop.Dropped || lost.Load() != 1 {
		t.Fatalf("drop with a lost answer: %v, dropped=%v, %d answers lost: want dropped after 1 lost answer", err, drop.GetDropped(), lost.Load())
	}

	armed.Store(1)
	var add *adminv1.AddACLsResponse
	err = c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
		add, err = a.AddACLs(ctx, &adminv1.AddACLsRequest{ResourceType: "DATABASE", ResourceName: "db",
			Acls: []*adminv1.ACLEntry{{PrincipalType: "USER", PrincipalName: "alice", PermissionType: "ALLOW", Host: "*", Operation: "READ"}}})
		return err
	})
	if err != nil || add.Added != 1 || lost.Load() != 2 {
		t.Fatalf("add-acl with a lost answer: %v, added %d, %d answers lost: want 1 added after the second lost answer", err, add.GetAdded(), lost.Load())
	}
	var acls *adminv1.ListACLsResponse
	admin(func(a adminv1.AdminServiceClient) (err error) {
		acls, err = a.ListACLs(ctx, &adminv1.ListACLsRequest{})
		return err
	})
	if len(acls.Resources) != 1 || len(acls.Resources[0].Acls) != 1 {
		t.Fatalf("ACLs after the repeated add: %v, want the one entry once", acls.Resources)
	}
}
