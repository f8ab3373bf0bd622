package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// countingBackend counts the backend calls made on behalf of an admin RPC
// (by the gRPC method in the call's ctx), so that background work (the
// image's watch, cleanups, sessions) does not count.
type countingBackend struct {
	*memory.Backend
	mu    sync.Mutex
	calls map[string][]string // full gRPC method -> backend calls, in order
}

func (b *countingBackend) count(ctx context.Context, call string) {
	m, ok := grpc.Method(ctx)
	if !ok {
		return
	}
	b.mu.Lock()
	b.calls[m] = append(b.calls[m], call)
	b.mu.Unlock()
}

func (b *countingBackend) take(method string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls[method]
	delete(b.calls, method)
	return c
}

func (b *countingBackend) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	b.count(ctx, fmt.Sprintf("GetMany%v", paths))
	return b.Backend.GetMany(ctx, paths, opts)
}

func (b *countingBackend) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	b.count(ctx, "Children "+path)
	return b.Backend.Children(ctx, path, opts)
}

func (b *countingBackend) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	b.count(ctx, "Snapshot "+prefix)
	return b.Backend.Snapshot(ctx, prefix)
}

func (b *countingBackend) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	b.count(ctx, fmt.Sprintf("Txn of %d ops", len(ops)))
	return b.Backend.Txn(ctx, ops, opts)
}

// A createTable with a request id (every adminclient write carries one)
// costs the leader one backend round trip: its fenced transaction, which
// also commits the request record. It reads nothing from the backend (the
// tablet servers, the existing table and the assignment come from the
// image), and the caller reads its write at once: GetTableInfo right after
// it sees the table without a backend call. A repetition of the same id is
// answered from the record and creates nothing.
func TestCreateTableRoundTrips(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	cb := &countingBackend{calls: map[string][]string{}}
	n := harness.StartCoordinator(t, s, coordinator.Options{Open: func(ctx context.Context) (core.MetadataBackend, error) {
		cb.Backend = s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second})
		return cb, nil
	}})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", n.Srv.IsLeader)
	c := newClient(t, n.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := func(ctx context.Context, f func(ctx context.Context, a adminv1.AdminServiceClient) error) {
		t.Helper()
		if err := c.Admin(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	})
	desc := &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "INT"}}, BucketCount: 3}
	create := func(ctx context.Context, table string) *adminv1.CreateTableResponse {
		t.Helper()
		var r *adminv1.CreateTableResponse
		admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
			r, err = a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: table, Descriptor_: desc})
			return err
		})
		return r
	}
	// The first create reserves the leadership's block of table ids.
	create(ctx, "warm")
	cb.take(adminv1.AdminService_CreateTable_FullMethodName)

	const creates = 5
	for i := 0; i < creates; i++ {
		table := fmt.Sprintf("t%d", i)
		r := create(ctx, table)
		if calls := cb.take(adminv1.AdminService_CreateTable_FullMethodName); len(calls) != 1 {
			t.Fatalf("createTable %s made %d backend calls %q, want 1 (its transaction)", table, len(calls), calls)
		}
		var info *adminv1.GetTableInfoResponse
		admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
			info, err = a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "db", Table: table})
			return err
		})
		if info.Table.GetTableId() != r.Table.GetTableId() || len(info.Table.GetBuckets()) != 3 {
			t.Fatalf("getTableInfo right after createTable: table id %d with %d buckets, want %d with 3",
				info.Table.GetTableId(), len(info.Table.GetBuckets()), r.Table.GetTableId())
		}
		if calls := cb.take(adminv1.AdminService_GetTableInfo_FullMethodName); len(calls) != 0 {
			t.Fatalf("getTableInfo made backend calls %q, want none (the image serves it)", calls)
		}
	}

	// The same id again: one transaction refused by the record's create,
	// one read of the record, the original answer.
	rctx := adminclient.WithRequestID(ctx, "again-1")
	first := create(rctx, "again")
	cb.take(adminv1.AdminService_CreateTable_FullMethodName)
	again := create(rctx, "again")
	if !again.Created || again.Table.GetTableId() != first.Table.GetTableId() {
		t.Fatalf("repetition answered created=%v table id %d, want created with the original id %d",
			again.Created, again.Table.GetTableId(), first.Table.GetTableId())
	}
	if calls := cb.take(adminv1.AdminService_CreateTable_FullMethodName); len(calls) > 2 {
		t.Fatalf("repetition made backend calls %q, want at most a refused transaction and a read of the record", calls)
	}

	// createPartition: its transaction (after the partition id block's
	// first reservation); dropTable: the snapshots of the table's and its
	// assignment's subtrees, then its transaction.
	admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "parted", Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "d", Type: "STRING"}, {Name: "id", Type: "INT"}}, PartitionKeys: []string{"d"}, BucketCount: 3}})
		return err
	})
	for i := 0; i < 3; i++ {
		admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreatePartition(ctx, &adminv1.CreatePartitionRequest{Database: "db", Table: "parted", Partition: fmt.Sprintf("p%d", i)})
			return err
		})
		if calls := cb.take(adminv1.AdminService_CreatePartition_FullMethodName); i > 0 && len(calls) != 1 {
			t.Fatalf("createPartition made %d backend calls %q, want 1 (its transaction)", len(calls), calls)
		}
	}
	admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.DropTable(ctx, &adminv1.DropTableRequest{Database: "db", Table: "t0"})
		return err
	})
	if calls := cb.take(adminv1.AdminService_DropTable_FullMethodName); len(calls) != 3 {
		t.Fatalf("dropTable made %d backend calls %q, want 3 (two snapshots, its transaction)", len(calls), calls)
	}
}
