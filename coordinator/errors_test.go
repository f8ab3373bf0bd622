package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/coordinator"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestErrorDetailsFromTheServer: a leader's refusals carry the detail the
// table promises (code, gRPC code, the request field, the catalog object)
// and come back through FromStatus as the typed errors.
func TestErrorDetailsFromTheServer(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(a.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	admin := adminv1.NewAdminServiceClient(cc)
	tablets := adminv1.NewTabletServerServiceClient(cc)

	want := func(name string, err error, grpcCode codes.Code, code, field string) *adminv1.ErrorDetail {
		t.Helper()
		d := adminapi.DetailOf(err)
		if status.Code(err) != grpcCode || d == nil || d.Code != code || d.Field != field {
			t.Fatalf("%s: got %v (detail %v), want %v %s field %q", name, err, d, grpcCode, code, field)
		}
		return d
	}

	_, err = tablets.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: -1, Listeners: "CLIENT://127.0.0.1:1"})
	want("negative server id", err, codes.InvalidArgument, adminapi.CodeInvalidArgument, "server_id")
	var fe *adminapi.FieldError
	if out := adminapi.FromStatus(err); !errors.As(out, &fe) || fe.Field != "server_id" || !errors.Is(out, core.ErrInvalidArgument) {
		t.Fatalf("negative server id: FromStatus gave %v", out)
	}
	_, err = tablets.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: 1})
	want("no listeners", err, codes.InvalidArgument, adminapi.CodeInvalidArgument, "listeners")
	_, err = admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db1", Table: "t"})
	want("no descriptor", err, codes.InvalidArgument, adminapi.CodeInvalidArgument, "descriptor")

	// A bad name: INVALID_ARGUMENT naming the request field.
	_, err = admin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "no/slash"})
	want("bad name", err, codes.InvalidArgument, adminapi.CodeInvalidArgument, "name")

	if _, err := admin.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "db1", Table: "t", Descriptor_: &adminv1.TableDescriptor{
		Columns: []*adminv1.Column{{Name: "id", Type: "BIGINT"}}, BucketCount: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.DropDatabase(ctx, &adminv1.DropDatabaseRequest{Name: "db1"})
	d := want("drop a database with a table", err, codes.FailedPrecondition, adminapi.CodeNotEmpty, "")
	if d.Kind != catalog.KindDatabase || d.Name != "db1" || d.Contents != "1 table" {
		t.Fatalf("NOT_EMPTY detail %v, want database db1 holding 1 table", d)
	}
	var ne *catalog.NotEmptyError
	if out := adminapi.FromStatus(err); !errors.As(out, &ne) || ne.Detail != "1 table" || out.Error() != status.Convert(err).Message() {
		t.Fatalf("NOT_EMPTY: FromStatus gave %v (%#v)", out, ne)
	}
	_, err = admin.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "db1", Table: "missing"})
	d = want("missing table", err, codes.NotFound, adminapi.CodeNotFound, "")
	if d.Kind != catalog.KindTable || d.Name != "db1.missing" {
		t.Fatalf("NOT_FOUND detail %v, want table db1.missing", d)
	}
}
