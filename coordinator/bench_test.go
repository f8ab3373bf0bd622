package coordinator_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// benchCoordinator starts an in-process coordinator on the memory backend
// with db.t (100 partitions) and returns a client of it.
func benchCoordinator(b *testing.B) *adminclient.Client {
	s := memory.NewStore(memory.StoreOptions{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := coordinator.New(coordinator.Options{Listener: l,
		Open: func(ctx context.Context) (core.MetadataBackend, error) { return s.NewClient(core.ClientOptions{}), nil }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx) }()
	b.Cleanup(func() { cancel(); <-done; s.Close() })
	for deadline := time.Now().Add(10 * time.Second); !srv.IsLeader(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("no leader")
		}
	}
	c, err := adminclient.NewClient([]string{l.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	err = c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		if _, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"}); err != nil {
			return err
		}
		if _, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: "t", Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "d", Type: "STRING"}, {Name: "k", Type: "BIGINT"}}, PrimaryKey: []string{"d", "k"},
			PartitionKeys: []string{"d"}, BucketCount: 4}}); err != nil {
			return err
		}
		for i := 0; i < 100; i++ {
			if _, err := a.CreatePartition(ctx, &adminv1.CreatePartitionRequest{Database: "db", Table: "t", Partition: fmt.Sprintf("p%d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkAdminRPC measures admin reads over gRPC on loopback (the seeds'
// getTableInfo, listTables and listPartitionInfos rows), served from the
// leader's image.
func BenchmarkAdminRPC(b *testing.B) {
	c := benchCoordinator(b)
	ctx := context.Background()
	b.Run("GetTableInfo", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "db", Table: "t"})
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListTables", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.ListTables(ctx, &adminv1.ListTablesRequest{Database: "db"})
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListPartitions100", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.ListPartitions(ctx, &adminv1.ListPartitionsRequest{Database: "db", Table: "t"})
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCreateTable measures createTable over gRPC on loopback against
// an in-process coordinator on the memory backend: the coordinator's fixed
// cost per DDL, without a plugin or a quorum.
func BenchmarkCreateTable(b *testing.B) {
	c := benchCoordinator(b)
	ctx := context.Background()
	desc := &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "BIGINT"}, {Name: "name", Type: "STRING"}},
		BucketCount: 3, ReplicationFactor: 3}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db", Table: fmt.Sprintf("ct_%d", i), Descriptor_: desc})
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}
