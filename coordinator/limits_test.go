package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// limitsFixture is a leading coordinator on a memory store with two
// registered tablet servers, a database "shop", a partitioned table
// "shop.events" holding maxPartitions partitions (the limit), and a direct
// admin client.
type limitsFixture struct {
	store *memory.Store
	b     core.MetadataBackend // a plain client of the store, for snapshots
	admin adminv1.AdminServiceClient
	addr  string
}

const maxPartitions = 2

func newLimitsFixture(t *testing.T, storeOpts memory.StoreOptions, opts coordinator.Options) *limitsFixture {
	t.Helper()
	s := memory.NewStore(storeOpts)
	t.Cleanup(func() { s.Close() })
	if opts.MaxPartitionNum == 0 {
		opts.MaxPartitionNum = maxPartitions
	}
	n := harness.StartCoordinator(t, s, opts)
	testutil.WaitFor(t, 10*time.Second, "coordinator leads", n.Srv.IsLeader)

	b := s.NewClient(core.ClientOptions{Name: "tablets"})
	t.Cleanup(func() { b.Close() })
	bg := context.Background()
	for _, id := range []int32{1, 2} {
		reg := catalog.TabletServerRegistration{Listeners: "CLIENT://127.0.0.1:1", RegisterTimestamp: 1}
		if _, _, err := core.Create(bg, b, catalog.TabletServerPath(id), reg.Marshal(),
			core.CreateOptions{Mode: core.Ephemeral, MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	cc, err := grpc.NewClient(n.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	f := &limitsFixture{store: s, b: b, admin: adminv1.NewAdminServiceClient(cc), addr: n.Addr}
	testutil.WaitFor(t, 10*time.Second, "the leader sees both tablet servers", func() bool {
		r, err := f.admin.ListTabletServers(bg, &adminv1.ListTabletServersRequest{})
		return err == nil && len(r.Servers) == 2
	})
	if _, err := f.admin.CreateDatabase(bg, &adminv1.CreateDatabaseRequest{Name: "shop"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTable(bg, &adminv1.CreateTableRequest{Database: "shop", Table: "events", Descriptor_: &adminv1.TableDescriptor{
		Columns:    []*adminv1.Column{{Name: "day", Type: "STRING"}, {Name: "id", Type: "BIGINT"}},
		PrimaryKey: []string{"day", "id"}, PartitionKeys: []string{"day"}, BucketCount: 2, ReplicationFactor: 2,
	}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < opts.MaxPartitionNum; i++ {
		if _, err := f.admin.CreatePartition(bg, &adminv1.CreatePartitionRequest{Database: "shop", Table: "events",
			Partition: fmt.Sprintf("2026-12-0%d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *limitsFixture) snapshot(t *testing.T) core.Snapshot {
	t.Helper()
	snap, err := f.b.Snapshot(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func cols(spec ...string) []*adminv1.Column {
	var out []*adminv1.Column
	for _, s := range spec {
		name, typ, _ := strings.Cut(s, ":")
		out = append(out, &adminv1.Column{Name: name, Type: typ})
	}
	return out
}

func createTable(table string, d *adminv1.TableDescriptor) func(ctx context.Context, a adminv1.AdminServiceClient) error {
	return func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: table, Descriptor_: d})
		return err
	}
}

func addACL(typ, name string, e *adminv1.ACLEntry) func(ctx context.Context, a adminv1.AdminServiceClient) error {
	return func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.AddACLs(ctx, &adminv1.AddACLsRequest{ResourceType: typ, ResourceName: name, Acls: []*adminv1.ACLEntry{e}})
		return err
	}
}

func allocate(counter string, n int64) func(ctx context.Context, a adminv1.AdminServiceClient) error {
	return func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.AllocateIDs(ctx, &adminv1.AllocateIDsRequest{Counter: counter, Count: n})
		return err
	}
}

func aclEntry(op, perm string) *adminv1.ACLEntry {
	return &adminv1.ACLEntry{PrincipalType: "USER", PrincipalName: "alice", PermissionType: perm, Host: "*", Operation: op}
}

// TestAdminRefusesBadInput: every bad input of the admin API is refused
// with INVALID_ARGUMENT (or the code given) naming the request field and
// the limit, and leaves the tree exactly as it was.
func TestAdminRefusesBadInput(t *testing.T) {
	f := newLimitsFixture(t, memory.StoreOptions{}, coordinator.Options{})
	long := strings.Repeat("x", 201)
	tests := []struct {
		name  string
		call  func(ctx context.Context, a adminv1.AdminServiceClient) error
		code  codes.Code
		field string
		want  []string // substrings of the message
	}{
		{"negative buckets", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT"), BucketCount: -1}),
			codes.InvalidArgument, "descriptor.bucket_count", []string{"bucket count -1", "1 to 20000", "max.bucket.num"}},
		{"buckets over max.bucket.num", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT"), BucketCount: 20001}),
			codes.InvalidArgument, "descriptor.bucket_count", []string{"bucket count 20001", "1 to 20000"}},
		{"buckets max int32", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT"), BucketCount: math.MaxInt32}),
			codes.InvalidArgument, "descriptor.bucket_count", []string{"2147483647", "1 to 20000"}},
		{"replication factor over the servers", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT"), ReplicationFactor: 3}),
			codes.InvalidArgument, "descriptor.replication_factor", []string{"replication factor 3", "1 to 2", "registered tablet servers"}},
		{"replication factor property over the servers", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT"),
			Properties: map[string]string{catalog.ReplicationFactorProperty: "5"}},
		), codes.InvalidArgument, "descriptor.replication_factor", []string{"replication factor 5", "1 to 2"}},
		{"negative replication factor", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT"), ReplicationFactor: -1}),
			codes.InvalidArgument, "descriptor.replication_factor", []string{"replication factor -1", "at least 1"}},
		{"columns differing in case", createTable("t", &adminv1.TableDescriptor{Columns: cols("id:INT", "ID:BIGINT")}),
			codes.InvalidArgument, "descriptor.columns", []string{`"id" and "ID"`, "ignoring case"}},
		{"empty column name", createTable("t", &adminv1.TableDescriptor{Columns: cols(":INT")}),
			codes.InvalidArgument, "descriptor.columns", []string{"column 0 has no name"}},
		{"no columns", createTable("t", &adminv1.TableDescriptor{}),
			codes.InvalidArgument, "descriptor.columns", []string{"no columns"}},
		{"CHAR(0)", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:CHAR(0)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"CHAR length 0", "1 to 2147483647"}},
		{"BINARY(0)", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:BINARY(0)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"BINARY length 0"}},
		{"CHAR over int32", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:CHAR(2147483648)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"2147483648"}},
		{"DECIMAL(39)", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:DECIMAL(39, 2)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"precision 39", "1 to 38"}},
		{"DECIMAL(0)", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:DECIMAL(0, 0)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"precision 0", "1 to 38"}},
		{"DECIMAL scale over precision", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:DECIMAL(5, 6)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"scale 6", "0 to the precision, 5"}},
		{"TIMESTAMP(10)", createTable("t", &adminv1.TableDescriptor{Columns: cols("c:TIMESTAMP(10)")}),
			codes.InvalidArgument, "descriptor.columns", []string{"precision 10", "0 to 9"}},
		{"table name too long", createTable(long, &adminv1.TableDescriptor{Columns: cols("id:INT")}),
			codes.InvalidArgument, "table", []string{"longer than 200"}},
		{"table name with a slash", createTable("a/b", &adminv1.TableDescriptor{Columns: cols("id:INT")}),
			codes.InvalidArgument, "table", []string{"letters, digits, '_' and '-'"}},
		{"database name with a dot", func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "a.b"})
			return err
		}, codes.InvalidArgument, "name", []string{`"a.b"`, "letters, digits"}},
		{"database name too long", func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: long})
			return err
		}, codes.InvalidArgument, "name", []string{"longer than 200"}},
		{"partition over max.partition.num", func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreatePartition(ctx, &adminv1.CreatePartitionRequest{Database: "shop", Table: "events", Partition: "2027-01-01"})
			return err
		}, codes.InvalidArgument, "partition", []string{"has 2 partitions", "at most 2", "max.partition.num"}},
		{"acl operation FLY", addACL("TABLE", "shop.events", aclEntry("FLY", "ALLOW")),
			codes.InvalidArgument, "acls.operation", []string{`"FLY"`, "ALL, READ, WRITE"}},
		{"acl permission MAYBE", addACL("TABLE", "shop.events", aclEntry("READ", "MAYBE")),
			codes.InvalidArgument, "acls.permission_type", []string{`"MAYBE"`, "ALLOW, DENY"}},
		{"acl principal type", addACL("TABLE", "shop.events", &adminv1.ACLEntry{PrincipalType: "ROBOT", PrincipalName: "r2",
			PermissionType: "ALLOW", Operation: "READ"}), codes.InvalidArgument, "acls.principal_type", []string{`"ROBOT"`, "USER"}},
		{"acl resource type", addACL("WIDGET", "w", aclEntry("READ", "ALLOW")),
			codes.InvalidArgument, "resource_type", []string{`"WIDGET"`, "CLUSTER, DATABASE, TABLE"}},
		{"acl table resource without a database", addACL("TABLE", "events", aclEntry("READ", "ALLOW")),
			codes.InvalidArgument, "resource_name", []string{`"events"`, "<db>.<table>"}},
		{"acl entry incomplete", addACL("TABLE", "shop.events", &adminv1.ACLEntry{PrincipalType: "USER", Operation: "READ"}),
			codes.InvalidArgument, "acls", []string{"required"}},
		{"remove-acl filter operation FLY", func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.RemoveACLs(ctx, &adminv1.RemoveACLsRequest{ResourceType: "TABLE", ResourceName: "shop.events",
				Filter: &adminv1.ACLEntry{Operation: "FLY"}})
			return err
		}, codes.InvalidArgument, "filter.operation", []string{`"FLY"`}},
		{"allocate 0 ids", allocate("writer", 0), codes.InvalidArgument, "count", []string{"1 to 1000000"}},
		{"allocate too many ids", allocate("writer", 1_000_001), codes.InvalidArgument, "count", []string{"1000001", "1 to 1000000"}},
		{"allocate max int64 ids", allocate("writer", math.MaxInt64), codes.InvalidArgument, "count", []string{"9223372036854775807", "1 to 1000000"}},
		{"allocate from an unknown counter", allocate("nope", 1), codes.InvalidArgument, "counter", []string{`"nope"`, "table, partition or writer"}},
		{"tag a server that does not exist", func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.SetServerTags(ctx, &adminv1.SetServerTagsRequest{ServerIds: []int32{1, 99}, Tag: 0})
			return err
		}, codes.NotFound, "server_ids", []string{"tablet server 99 does not exist"}},
		{"unknown server tag", func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.SetServerTags(ctx, &adminv1.SetServerTagsRequest{ServerIds: []int32{1}, Tag: 7})
			return err
		}, codes.InvalidArgument, "tag", []string{"server tag 7", "0 (permanent offline), 1 (temporary offline)"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot(t)
			err := tt.call(ctx, f.admin)
			st, _ := status.FromError(err)
			if err == nil || st.Code() != tt.code {
				t.Fatalf("got %v, want %v", err, tt.code)
			}
			d := adminapi.DetailOf(err)
			if d == nil || d.Field != tt.field {
				t.Errorf("detail %v: want field %q", d, tt.field)
			}
			for _, w := range tt.want {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("message %q does not say %q", st.Message(), w)
				}
			}
			if after := f.snapshot(t); !reflect.DeepEqual(before, after) {
				t.Errorf("the refused call changed the tree: revision %d -> %d", before.Revision, after.Revision)
			}
		})
	}
}

// TestAdminLimitsBoundaries: a table at max.bucket.num is created, one
// bucket more is refused; the replication factor may equal the registered
// tablet servers.
func TestAdminLimitsBoundaries(t *testing.T) {
	f := newLimitsFixture(t, memory.StoreOptions{}, coordinator.Options{MaxBucketNum: 8})
	ctx := context.Background()
	r, err := f.admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: "full", Descriptor_: &adminv1.TableDescriptor{
		Columns: cols("id:INT"), BucketCount: 8, ReplicationFactor: 2}})
	if err != nil || len(r.Table.Buckets) != 8 || len(r.Table.Buckets[0].Replicas) != 2 {
		t.Fatalf("create at the limit: %v, %v", r, err)
	}
	_, err = f.admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: "over", Descriptor_: &adminv1.TableDescriptor{
		Columns: cols("id:INT"), BucketCount: 9}})
	if d := adminapi.DetailOf(err); d == nil || d.Field != "descriptor.bucket_count" || !strings.Contains(err.Error(), "1 to 8") {
		t.Fatalf("one bucket over: %v", err)
	}
}

// TestAdminHugeBucketCountBuildsNothing: a create-table asking for
// 2147483647 buckets is refused before anything is built: the heap does
// not grow by more than a generous bound (building the buckets took GBs).
func TestAdminHugeBucketCountBuildsNothing(t *testing.T) {
	f := newLimitsFixture(t, memory.StoreOptions{}, coordinator.Options{})
	ctx := context.Background()
	before := f.snapshot(t)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0, total0 := ms.HeapAlloc, ms.TotalAlloc
	_, err := f.admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: "huge", Descriptor_: &adminv1.TableDescriptor{
		Columns: cols("id:INT"), BucketCount: math.MaxInt32}})
	runtime.ReadMemStats(&ms)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want INVALID_ARGUMENT", err)
	}
	const bound = 64 << 20
	if grown := ms.TotalAlloc - total0; grown > bound {
		t.Errorf("the refused call allocated %d MiB (heap %d -> %d MiB): want under %d MiB",
			grown>>20, heap0>>20, ms.HeapAlloc>>20, bound>>20)
	}
	if after := f.snapshot(t); !reflect.DeepEqual(before, after) {
		t.Error("the refused call changed the tree")
	}
}

// TestAdminTooLargeNamesTheObject: a write whose records exceed the
// backend's value size is refused as RESOURCE_EXHAUSTED naming the user's
// object, never an internal path, and nothing is written.
func TestAdminTooLargeNamesTheObject(t *testing.T) {
	f := newLimitsFixture(t, memory.StoreOptions{MaxValueSize: 4096}, coordinator.Options{})
	ctx := context.Background()
	big := strings.Repeat("x", 5000)
	tests := []struct {
		name string
		call func() error
		want []string
	}{
		{"a table with many buckets", func() error {
			_, err := f.admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: "wide",
				Descriptor_: &adminv1.TableDescriptor{Columns: cols("id:INT"), BucketCount: 2000}})
			return err
		}, []string{"table shop.wide is too large", "2000 buckets", "nothing was written"}},
		{"a database with a long comment", func() error {
			_, err := f.admin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "talk", Comment: big})
			return err
		}, []string{"database talk is too large"}},
		{"a long config value", func() error {
			_, err := f.admin.AlterConfigs(ctx, &adminv1.AlterConfigsRequest{Set: map[string]string{"k": big}})
			return err
		}, []string{"the dynamic configuration is too large"}},
		{"a long acl principal list", func() error {
			var acls []*adminv1.ACLEntry
			for i := 0; i < 100; i++ {
				acls = append(acls, &adminv1.ACLEntry{PrincipalType: "USER", PrincipalName: fmt.Sprintf("user-%03d", i), PermissionType: "ALLOW", Operation: "READ"})
			}
			_, err := f.admin.AddACLs(ctx, &adminv1.AddACLsRequest{ResourceType: "TABLE", ResourceName: "shop.events", Acls: acls})
			return err
		}, []string{"acl of TABLE:shop.events is too large"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot(t)
			err := tt.call()
			st, _ := status.FromError(err)
			if st.Code() != codes.ResourceExhausted || adminapi.DetailOf(err).GetCode() != adminapi.CodeTooLarge {
				t.Fatalf("got %v, want RESOURCE_EXHAUSTED TOO_LARGE", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("message %q does not say %q", st.Message(), w)
				}
			}
			for _, internal := range []string{"/tabletservers", "/metadata", "/config", "/fluss-acls"} {
				if strings.Contains(st.Message(), internal) {
					t.Errorf("message %q names an internal path", st.Message())
				}
			}
			if after := f.snapshot(t); !reflect.DeepEqual(before, after) {
				t.Error("the refused call changed the tree")
			}
		})
	}
}

// TestAdminCounterNeverWraps: a counter near the largest int64 refuses a
// range that would pass it with RESOURCE_EXHAUSTED, and stays where it was.
func TestAdminCounterNeverWraps(t *testing.T) {
	f := newLimitsFixture(t, memory.StoreOptions{}, coordinator.Options{IDBlockSize: 10})
	ctx := context.Background()
	start := int64(math.MaxInt64 - 15)
	if _, _, err := core.Create(ctx, f.b, catalog.WriterIDPath, core.EncodeCounter(start), core.CreateOptions{MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	// One block of 10 still fits.
	r, err := f.admin.AllocateIDs(ctx, &adminv1.AllocateIDsRequest{Counter: "writer", Count: 10})
	if err != nil || r.First != start {
		t.Fatalf("last block: %v, %v (want first %d)", r, err, start)
	}
	before := f.snapshot(t)
	_, err = f.admin.AllocateIDs(ctx, &adminv1.AllocateIDsRequest{Counter: "writer", Count: 10})
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "id counter writer is exhausted") ||
		strings.Contains(st.Message(), catalog.WriterIDPath) {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming the counter", err)
	}
	if after := f.snapshot(t); !reflect.DeepEqual(before, after) {
		t.Error("the refused allocation changed the tree")
	}
}

// TestAdminSaysWhatHappened: the if-(not-)exists verbs and the ACL verbs
// answer whether they did anything, and when they did nothing the tree is
// unchanged (no notification node either).
func TestAdminSaysWhatHappened(t *testing.T) {
	f := newLimitsFixture(t, memory.StoreOptions{}, coordinator.Options{})
	ctx := context.Background()
	acl := &adminv1.AddACLsRequest{ResourceType: "TABLE", ResourceName: "shop.events", Acls: []*adminv1.ACLEntry{aclEntry("READ", "ALLOW")}}
	if r, err := f.admin.AddACLs(ctx, acl); err != nil || r.Added != 1 {
		t.Fatalf("first add-acl: %v, %v", r, err)
	}
	noops := []struct {
		name string
		call func() (did bool, err error)
	}{
		{"create-database existing", func() (bool, error) {
			r, err := f.admin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "shop", IgnoreIfExists: true})
			return r.GetCreated(), err
		}},
		{"drop-database missing", func() (bool, error) {
			r, err := f.admin.DropDatabase(ctx, &adminv1.DropDatabaseRequest{Name: "nope", IgnoreIfNotExists: true})
			return r.GetDropped(), err
		}},
		{"create-table existing", func() (bool, error) {
			r, err := f.admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: "events", IgnoreIfExists: true,
				Descriptor_: &adminv1.TableDescriptor{Columns: cols("x:INT")}})
			if err == nil && r.Table.Table != "events" {
				t.Errorf("create-table existing answered %v, want the existing table", r.Table)
			}
			return r.GetCreated(), err
		}},
		{"drop-table missing", func() (bool, error) {
			r, err := f.admin.DropTable(ctx, &adminv1.DropTableRequest{Database: "shop", Table: "nope", IgnoreIfNotExists: true})
			return r.GetDropped(), err
		}},
		{"create-partition existing", func() (bool, error) {
			r, err := f.admin.CreatePartition(ctx, &adminv1.CreatePartitionRequest{Database: "shop", Table: "events", Partition: "2026-12-01", IgnoreIfExists: true})
			return r.GetCreated(), err
		}},
		{"drop-partition missing", func() (bool, error) {
			r, err := f.admin.DropPartition(ctx, &adminv1.DropPartitionRequest{Database: "shop", Table: "events", Partition: "1999-01-01", IgnoreIfNotExists: true})
			return r.GetDropped(), err
		}},
		{"add-acl present", func() (bool, error) {
			r, err := f.admin.AddACLs(ctx, acl)
			return r.GetAdded() > 0, err
		}},
		{"remove-acl no match", func() (bool, error) {
			r, err := f.admin.RemoveACLs(ctx, &adminv1.RemoveACLsRequest{ResourceType: "TABLE", ResourceName: "shop.events",
				Filter: &adminv1.ACLEntry{PrincipalType: "USER", PrincipalName: "bob"}})
			return r.GetRemoved() > 0, err
		}},
		{"remove-acl no resource", func() (bool, error) {
			r, err := f.admin.RemoveACLs(ctx, &adminv1.RemoveACLsRequest{ResourceType: "TABLE", ResourceName: "shop.none"})
			return r.GetRemoved() > 0, err
		}},
	}
	for _, tt := range noops {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot(t)
			did, err := tt.call()
			if err != nil || did {
				t.Fatalf("got did=%v, %v: want nothing done, no error", did, err)
			}
			if after := f.snapshot(t); !reflect.DeepEqual(before, after) {
				t.Errorf("a call that did nothing changed the tree: revision %d -> %d", before.Revision, after.Revision)
			}
		})
	}
	// And when they do something they say so.
	if r, err := f.admin.RemoveACLs(ctx, &adminv1.RemoveACLsRequest{ResourceType: "TABLE", ResourceName: "shop.events"}); err != nil || r.Removed != 1 {
		t.Errorf("remove-acl: %v, %v: want 1 removed", r, err)
	}
	if r, err := f.admin.DropTable(ctx, &adminv1.DropTableRequest{Database: "shop", Table: "events", IgnoreIfNotExists: true}); err != nil || !r.Dropped {
		t.Errorf("drop-table: %v, %v: want dropped", r, err)
	}
}
