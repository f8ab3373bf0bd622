package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

type fixture struct {
	store *memory.Store
	b     core.MetadataBackend
	lead  core.Leadership
	cat   *catalog.Catalog
}

func newFixture(t *testing.T, servers ...int32) *fixture {
	t.Helper()
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	b := s.NewClient(core.ClientOptions{Name: "coordinator"})
	ctx := context.Background()
	lead, err := b.Campaign(ctx, core.Candidate{ID: "c1", Address: "CLIENT://127.0.0.1:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	ts := s.NewClient(core.ClientOptions{Name: "tablets"})
	for _, id := range servers {
		reg := catalog.TabletServerRegistration{Listeners: "CLIENT://127.0.0.1:1", RegisterTimestamp: 1}
		if _, _, err := core.Create(ctx, ts, catalog.TabletServerPath(id), reg.Marshal(),
			core.CreateOptions{Mode: core.Ephemeral, MakeParents: true}); err != nil {
			t.Fatalf("register tablet server %d: %v", id, err)
		}
	}
	cat := catalog.New(b, catalog.Options{Fence: lead.Fence(), Epoch: lead.Epoch(), IDBlockSize: 10,
		Now: func() time.Time { return time.UnixMilli(1735538268000) }})
	return &fixture{store: s, b: b, lead: lead, cat: cat}
}

func ordersSpec() catalog.TableSpec {
	return catalog.TableSpec{
		Schema: catalog.Schema{Columns: []catalog.Column{
			{Name: "id", Type: catalog.DataType{Type: "BIGINT", Nullable: true}},
			{Name: "amount", Type: catalog.DataType{Type: "DOUBLE", Nullable: true}},
		}, PrimaryKey: []string{"id"}},
		BucketCount:       4,
		ReplicationFactor: 2,
	}
}

func mustExist(t *testing.T, b core.Reader, path string) core.Node {
	t.Helper()
	n, err := core.Get(context.Background(), b, path)
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	return n
}

func TestCreateTableWritesEverything(t *testing.T) {
	f := newFixture(t, 1, 2, 3)
	ctx := context.Background()
	if _, err := f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false); err != nil {
		t.Fatal(err)
	}
	info, err := f.cat.CreateTable(ctx, "db1", "orders", ordersSpec(), false)
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	if info.Registration.TableID != 0 {
		t.Fatalf("first table id: got %d, want 0", info.Registration.TableID)
	}
	if got := info.Registration.BucketKeys; len(got) != 1 || got[0] != "id" {
		t.Fatalf("bucket keys default to the primary key: got %v", got)
	}
	mustExist(t, f.b, catalog.SchemaPath("db1", "orders", 1))
	a, err := catalog.UnmarshalTableAssignment(mustExist(t, f.b, catalog.TableAssignmentPath(0)).Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Buckets) != 4 {
		t.Fatalf("assignment buckets: got %d, want 4", len(a.Buckets))
	}
	leaders := map[int32]int{}
	for b := int32(0); b < 4; b++ {
		if len(a.Buckets[b]) != 2 {
			t.Fatalf("bucket %d replicas: got %v, want 2", b, a.Buckets[b])
		}
		l, err := catalog.UnmarshalLeaderAndIsr(mustExist(t, f.b, catalog.LeaderAndIsrPath(0, -1, b)).Data)
		if err != nil {
			t.Fatal(err)
		}
		if l.CoordinatorEpoch != int32(f.lead.Epoch()) || l.Leader != a.Buckets[b][0] || len(l.ISR) != 2 {
			t.Fatalf("bucket %d leader and isr: got %+v (epoch %d, replicas %v)", b, l, f.lead.Epoch(), a.Buckets[b])
		}
		leaders[l.Leader]++
	}
	if len(leaders) < 2 {
		t.Fatalf("leaders not spread over servers: %v", leaders)
	}
	got, err := f.cat.GetTable(ctx, "db1", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got.SchemaID != 1 || len(got.Schema.Columns) != 2 || got.Schema.Columns[0].Type.Nullable {
		t.Fatalf("get table: got %+v", got)
	}
	buckets, err := f.cat.Buckets(ctx, 0, -1)
	if err != nil || len(buckets) != 4 {
		t.Fatalf("buckets: %v, %v", buckets, err)
	}
	// Second table gets the next id from the same block.
	info2, err := f.cat.CreateTable(ctx, "db1", "t2", ordersSpec(), false)
	if err != nil || info2.Registration.TableID != 1 {
		t.Fatalf("second table: id %d, %v", info2.Registration.TableID, err)
	}
	tables, err := f.cat.ListTables(ctx, "db1")
	if err != nil || strings.Join(tables, ",") != "orders,t2" {
		t.Fatalf("list tables: %v, %v", tables, err)
	}
}

func TestCreateTableErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.cat.CreateTable(ctx, "nodb", "t", ordersSpec(), false)
	var nf *catalog.NotFoundError
	if !errors.As(err, &nf) || nf.Kind != catalog.KindDatabase || !errors.Is(err, core.ErrNotFound) ||
		!strings.Contains(err.Error(), "database nodb does not exist") {
		t.Fatalf("missing database: got %v", err)
	}
	if _, err := f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false); !errors.Is(err, core.ErrNodeExists) ||
		err.Error() != "database db1 already exists" {
		t.Fatalf("duplicate database: got %v", err)
	}
	if _, err := f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, true); err != nil {
		t.Fatalf("ignoreIfExists: %v", err)
	}
	// No tablet servers: the table is created with leaderless buckets.
	info, err := f.cat.CreateTable(ctx, "db1", "t", ordersSpec(), false)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := catalog.UnmarshalLeaderAndIsr(mustExist(t, f.b, catalog.LeaderAndIsrPath(info.Registration.TableID, -1, 0)).Data)
	if l.Leader != catalog.NoLeader {
		t.Fatalf("leader without tablet servers: got %d", l.Leader)
	}
	_, err = f.cat.CreateTable(ctx, "db1", "t", ordersSpec(), false)
	if !errors.Is(err, core.ErrNodeExists) || err.Error() != "table db1.t already exists" {
		t.Fatalf("duplicate table: got %v", err)
	}
	bad := []struct {
		name string
		mod  func(*catalog.TableSpec)
		want string
	}{
		{"no columns", func(s *catalog.TableSpec) { s.Schema.Columns = nil }, "no columns"},
		{"pk not a column", func(s *catalog.TableSpec) { s.Schema.PrimaryKey = []string{"x"} }, `primary key column "x"`},
		{"dup column", func(s *catalog.TableSpec) { s.Schema.Columns[1].Name = "id" }, `column "id" appears twice`},
		{"partition not in pk", func(s *catalog.TableSpec) { s.PartitionKeys = []string{"amount"} }, `partition key "amount"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			spec := ordersSpec()
			tt.mod(&spec)
			_, err := f.cat.CreateTable(ctx, "db1", "bad", spec, false)
			if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "db1.bad") {
				t.Fatalf("got %v, want ErrInvalidArgument mentioning %q and the table", err, tt.want)
			}
		})
	}
	if _, err := f.cat.GetTable(ctx, "db1", "bad"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("refused table must not exist: %v", err)
	}
}

func TestDropTableRemovesEverything(t *testing.T) {
	f := newFixture(t, 1, 2)
	ctx := context.Background()
	before, _ := f.b.Snapshot(ctx, "/tabletservers/tables")
	f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false)
	spec := ordersSpec()
	spec.PartitionKeys = []string{"id"}
	if _, err := f.cat.CreateTable(ctx, "db1", "p", spec, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.CreateTable(ctx, "db1", "plain", ordersSpec(), false); err != nil {
		t.Fatal(err)
	}
	p1, _, err := f.cat.CreatePartition(ctx, "db1", "p", "2024", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.cat.CreatePartition(ctx, "db1", "p", "2025", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.cat.CreatePartition(ctx, "db1", "p", "2024", false); !errors.Is(err, core.ErrNodeExists) {
		t.Fatalf("duplicate partition: %v", err)
	}
	if _, _, err := f.cat.CreatePartition(ctx, "db1", "plain", "x", false); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("partition of an unpartitioned table: %v", err)
	}
	parts, err := f.cat.ListPartitions(ctx, "db1", "p")
	if err != nil || len(parts) != 2 || parts[0].Name != "2024" {
		t.Fatalf("list partitions: %+v, %v", parts, err)
	}
	mustExist(t, f.b, catalog.LeaderAndIsrPath(p1.Registration.TableID, p1.Registration.PartitionID, 3))
	if _, err := f.cat.DropPartition(ctx, "db1", "p", "2024", false); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := core.Exists(ctx, f.b, catalog.PartitionAssignmentPath(p1.Registration.PartitionID)); ok {
		t.Fatal("partition assignment left after drop")
	}
	if _, err := f.cat.DropTable(ctx, "db1", "p", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.DropTable(ctx, "db1", "plain", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.DropTable(ctx, "db1", "plain", false); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("second drop: %v", err)
	}
	after, _ := f.b.Snapshot(ctx, "/tabletservers/tables")
	parts2, _ := f.b.Snapshot(ctx, "/tabletservers/partitions")
	if len(after.Nodes) > 1 || len(before.Nodes) != 0 || len(parts2.Nodes) > 1 {
		t.Fatalf("assignments left after drop: tables %v partitions %v", after.Nodes, parts2.Nodes)
	}
	tables, _ := f.b.Snapshot(ctx, catalog.TablesPath("db1"))
	if len(tables.Nodes) != 1 {
		t.Fatalf("table nodes left: %v", tables.Nodes)
	}
	if _, err := f.cat.DropDatabase(ctx, "db1", false, false); err != nil {
		t.Fatal(err)
	}
	dbs, _ := f.cat.ListDatabases(ctx)
	if len(dbs) != 0 {
		t.Fatalf("databases after drop: %v", dbs)
	}
}

func TestDropDatabaseNotEmptyAndCascade(t *testing.T) {
	f := newFixture(t, 1, 2)
	ctx := context.Background()
	f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false)
	f.cat.CreateTable(ctx, "db1", "a", ordersSpec(), false)
	var ne *catalog.NotEmptyError
	if _, err := f.cat.DropDatabase(ctx, "db1", false, false); !errors.As(err, &ne) || !errors.Is(err, core.ErrNotEmpty) {
		t.Fatalf("drop non-empty: %v", err)
	}
	mustExist(t, f.b, catalog.TablePath("db1", "a"))
	if _, err := f.cat.DropDatabase(ctx, "db1", false, true); err != nil {
		t.Fatalf("cascade: %v", err)
	}
	snap, _ := f.b.Snapshot(ctx, catalog.TableAssignmentPath(0))
	if len(snap.Nodes) != 0 {
		t.Fatalf("cascade left assignment: %v", snap.Nodes)
	}
}

func TestStaleFenceChangesNothing(t *testing.T) {
	f := newFixture(t, 1, 2)
	ctx := context.Background()
	f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false)
	// A second coordinator takes over; the first one's catalog is stale.
	other := f.store.NewClient(core.ClientOptions{})
	if err := f.lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lead2, err := other.Campaign(ctx, core.Candidate{ID: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	rev0, _ := f.b.Snapshot(ctx, "/")
	if _, err := f.cat.CreateTable(ctx, "db1", "t", ordersSpec(), false); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("stale create table: got %v, want ErrFenced", err)
	}
	if _, err := f.cat.AddACLs(ctx, catalog.ResourceKey{Type: "TABLE", Name: "db1.t"},
		[]catalog.ACLEntry{{PrincipalType: "USER", PrincipalName: "bob", PermissionType: "ALLOW", Operation: "READ"}}); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("stale acl: got %v, want ErrFenced", err)
	}
	rev1, _ := f.b.Snapshot(ctx, "/metadata/databases")
	for _, n := range rev1.Nodes {
		if strings.Contains(n.Path, "/tables") {
			t.Fatalf("fenced write left %s", n.Path)
		}
	}
	_ = rev0
	cat2 := catalog.New(other, catalog.Options{Fence: lead2.Fence(), Epoch: lead2.Epoch()})
	if _, err := cat2.CreateTable(ctx, "db1", "t", ordersSpec(), false); err != nil {
		t.Fatalf("new leader create table: %v", err)
	}
}

func TestACLsConfigTags(t *testing.T) {
	f := newFixture(t, 0, 1)
	ctx := context.Background()
	res := catalog.ResourceKey{Type: "TABLE", Name: "db1.t"}
	mike := catalog.ACLEntry{PrincipalType: "USER", PrincipalName: "Mike", PermissionType: "ALLOW", Host: "*", Operation: "ALL"}
	bob := catalog.ACLEntry{PrincipalType: "USER", PrincipalName: "bob", PermissionType: "ALLOW", Operation: "READ"}
	if _, err := f.cat.AddACLs(ctx, res, []catalog.ACLEntry{mike}); err != nil {
		t.Fatal(err)
	}
	n := mustExist(t, f.b, "/fluss-acls/TABLE/db1.t")
	if string(n.Data) != `{"version":1,"acls":[{"principal_type":"USER","principal_name":"Mike","permission_type":"ALLOW","host":"*","operation":"ALL"}]}` {
		t.Fatalf("acl bytes: %s", n.Data)
	}
	if _, err := f.cat.AddACLs(ctx, res, []catalog.ACLEntry{bob, mike}); err != nil {
		t.Fatal(err)
	}
	list, err := f.cat.ListACLs(ctx, "")
	if err != nil || len(list) != 1 || len(list[0].ACLs) != 2 {
		t.Fatalf("list acls: %+v, %v", list, err)
	}
	changes, _, err := f.b.Children(ctx, catalog.ACLChangesPath, core.ReadOptions{})
	if err != nil || len(changes) != 2 || !strings.HasPrefix(changes[0], "acl_changes_") {
		t.Fatalf("acl change nodes: %v, %v", changes, err)
	}
	if c := mustExist(t, f.b, catalog.ACLChangesPath+"/"+changes[0]); string(c.Data) != "TABLE:db1.t" {
		t.Fatalf("acl change data: %q", c.Data)
	}
	if _, err := f.cat.RemoveACLs(ctx, res, catalog.ACLEntry{PrincipalType: "USER"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := core.Exists(ctx, f.b, "/fluss-acls/TABLE/db1.t"); ok {
		t.Fatal("empty acl node not deleted")
	}

	if _, err := f.cat.AlterConfigs(ctx, map[string]string{"a": "1", "b": "2"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.AlterConfigs(ctx, nil, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if c := mustExist(t, f.b, catalog.ConfigGlobalPath); string(c.Data) != `{"version":1,"configs":{"b":"2"}}` {
		t.Fatalf("config bytes: %s", c.Data)
	}
	cc, _, _ := f.b.Children(ctx, catalog.ConfigChangesPath, core.ReadOptions{})
	if len(cc) != 2 || cc[1] != "config_change_0000000001" {
		t.Fatalf("config change nodes: %v", cc)
	}

	if _, err := f.cat.SetServerTags(ctx, []int32{1, 0}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.SetServerTags(ctx, []int32{0}, 0); err != nil {
		t.Fatal(err)
	}
	if c := mustExist(t, f.b, catalog.ServerTagsPath); string(c.Data) != `{"version":1,"server_tags":{"0":0,"1":1}}` {
		t.Fatalf("server tags bytes: %s", c.Data)
	}
}

func TestAllocateIDsFromBlocks(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first, err := f.cat.AllocateIDs(ctx, "writer", 3)
	if err != nil || first != 0 {
		t.Fatalf("first range: %d, %v", first, err)
	}
	second, err := f.cat.AllocateIDs(ctx, "writer", 3)
	if err != nil || second != 3 {
		t.Fatalf("second range: %d, %v", second, err)
	}
	n := mustExist(t, f.b, catalog.WriterIDPath)
	if v, _ := core.DecodeCounter(n.Data); v != 10 {
		t.Fatalf("counter after one block of 10: %d", v)
	}
	if _, err := f.cat.AllocateIDs(ctx, "nope", 1); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("unknown counter: %v", err)
	}
}

// TestConcurrentACLUpdatesAreRetried: concurrent version-checked updates of
// one resource's ACL lose no entry.
func TestConcurrentACLUpdatesAreRetried(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := catalog.ResourceKey{Type: "DATABASE", Name: "db1"}
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			c := catalog.New(f.b, catalog.Options{Fence: f.lead.Fence(), Epoch: f.lead.Epoch()})
			_, err := c.AddACLs(ctx, res, []catalog.ACLEntry{{PrincipalType: "USER", PrincipalName: fmt.Sprintf("u%d", i),
				PermissionType: "ALLOW", Operation: "READ"}})
			errs <- err
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent add: %v", err)
		}
	}
	list, err := f.cat.ListACLs(ctx, "DATABASE")
	if err != nil || len(list) != 1 || len(list[0].ACLs) != n {
		t.Fatalf("after %d concurrent adds: %+v, %v", n, list, err)
	}
	changes, _, _ := f.b.Children(ctx, catalog.ACLChangesPath, core.ReadOptions{})
	if len(changes) != n {
		t.Fatalf("change notifications: got %d, want %d", len(changes), n)
	}
}

// TestPartitionsKeepTheTableReplicationFactor: a partition's buckets get
// the replication factor the table was created with.
func TestPartitionsKeepTheTableReplicationFactor(t *testing.T) {
	f := newFixture(t, 1, 2, 3)
	ctx := context.Background()
	f.cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false)
	spec := ordersSpec() // replication factor 2
	spec.PartitionKeys = []string{"id"}
	info, err := f.cat.CreateTable(ctx, "db1", "p", spec, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Registration.Properties[catalog.ReplicationFactorProperty]; got != "2" {
		t.Fatalf("stored replication factor: %q", got)
	}
	p, _, err := f.cat.CreatePartition(ctx, "db1", "p", "x", false)
	if err != nil {
		t.Fatal(err)
	}
	buckets, err := f.cat.Buckets(ctx, p.Registration.TableID, p.Registration.PartitionID)
	if err != nil || len(buckets) != 4 {
		t.Fatalf("partition buckets: %v, %v", buckets, err)
	}
	for _, b := range buckets {
		if len(b.Replicas) != 2 {
			t.Fatalf("bucket %d replicas %v, want 2", b.Bucket, b.Replicas)
		}
	}
	bad := ordersSpec()
	bad.ReplicationFactor = 0
	bad.Properties = map[string]string{catalog.ReplicationFactorProperty: "zero"}
	if _, err := f.cat.CreateTable(ctx, "db1", "bad", bad, false); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("bad replication factor property: %v", err)
	}
}
