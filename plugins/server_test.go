package plugins

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// wireServer serves the memory provider's Backend service on a gRPC
// server of its own, as the plugin registers it, and returns a client of
// it.
func wireServer(t *testing.T, opts ...grpc.ServerOption) pb.BackendClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(opts...)
	// The provider alone, without the memory provider's test hooks.
	p := memory.NewProvider(memory.StoreOptions{})
	srv := newServer(struct{ core.Provider }{p})
	registerBackend(g, srv)
	go func() { _ = g.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		g.Stop()
		srv.closeAll()
		_ = p.Close()
	})
	return pb.NewBackendClient(cc)
}

// sameStatus fails unless got is the status want is, to the letter: code,
// message and details.
func sameStatus(t *testing.T, what string, got, want error) {
	t.Helper()
	g, w := status.Convert(got).Proto(), status.Convert(want).Proto()
	if !proto.Equal(g, w) {
		t.Errorf("%s: status %v, want %v", what, g, w)
	}
}

// TestServerErrorsOnTheWire holds the Backend service's errors on the
// wire: a method's own errors become ToStatus's status, a stream's own
// failures and the statuses the server makes itself go back as they are.
func TestServerErrorsOnTheWire(t *testing.T) {
	rpc := wireServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := rpc.NewClient(ctx, &pb.NewClientRequest{})
	sameStatus(t, "NewClient before Start", err, ToStatus(fmt.Errorf("%w: NewClient before Start", core.ErrInvalidArgument)))
	if _, err := rpc.Start(ctx, &pb.StartRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = rpc.Start(ctx, &pb.StartRequest{})
	sameStatus(t, "second Start", err, ToStatus(fmt.Errorf("%w: the plugin was already started", core.ErrInvalidArgument)))
	_, err = rpc.CompactHistory(ctx, &pb.CompactHistoryRequest{})
	sameStatus(t, "CompactHistory", err, ToStatus(fmt.Errorf("%w: backend does not support %s", core.ErrInvalidArgument, "compacting the change history on demand (core.HistoryCompactor)")))

	notOpen := ToStatus(fmt.Errorf("%w: plugin client %d is not open", core.ErrClosed, 99))
	_, err = rpc.GetMany(ctx, &pb.GetManyRequest{ClientId: 99})
	sameStatus(t, "GetMany of no client", err, notOpen)
	_, err = rpc.GrantLease(ctx, &pb.GrantLeaseRequest{ClientId: 99})
	sameStatus(t, "GrantLease of no client", err, notOpen)
	w, err := rpc.Watch(ctx, &pb.WatchRequest{ClientId: 99})
	if err == nil {
		_, err = w.Recv()
	}
	sameStatus(t, "Watch of no client", err, notOpen)
	ss, err := rpc.SnapshotStream(ctx)
	if err == nil {
		err = ss.Send(&pb.SnapshotStreamRequest{ClientId: 99})
	}
	if err == nil {
		_, err = ss.Recv()
	}
	sameStatus(t, "SnapshotStream of no client", err, notOpen)

	nc, err := rpc.NewClient(ctx, &pb.NewClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := nc.ClientId
	membership := ToStatus(fmt.Errorf("%w: backend does not support %s", core.ErrInvalidArgument, "membership changes (MembershipManager)"))
	_, err = rpc.AddVoter(ctx, &pb.AddVoterRequest{ClientId: id, Id: "a"})
	sameStatus(t, "AddVoter without the part", err, membership)
	_, err = rpc.RemoveVoter(ctx, &pb.RemoveVoterRequest{ClientId: id, Id: "a", Force: true})
	sameStatus(t, "forced RemoveVoter without the part", err, membership)

	// A backend's error, with its details.
	_, err = rpc.Txn(ctx, &pb.TxnRequest{ClientId: id, Ops: opsToProto([]core.Op{core.CheckOp("/missing", 3)})})
	d := ErrorFromProto(errorDetail(t, err))
	var te *core.TxnError
	if status.Code(err) != codes.NotFound || !errors.Is(d, core.ErrNotFound) || !errors.As(d, &te) || te.Index != 0 {
		t.Errorf("Txn of a missing node: %v (detail %v)", err, d)
	}

	// A status the server makes itself goes as it is.
	defer SetPluginTxnStreamUnimplemented(true)()
	ts, err := rpc.TxnStream(ctx)
	if err == nil {
		_, err = ts.Recv()
	}
	sameStatus(t, "TxnStream switched off", err, status.Error(codes.Unimplemented, "method TxnStream not implemented"))
}

// errorDetail is the Error detail of a status error.
func errorDetail(t *testing.T, err error) *pb.Error {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if e, ok := d.(*pb.Error); ok {
			return e
		}
	}
	t.Fatalf("%v has no Error detail", err)
	return nil
}

// TestServerErrorsUnderInterceptors: a server's own interceptors see the
// methods' errors as the wire's statuses (statusUnary runs innermost).
func TestServerErrorsUnderInterceptors(t *testing.T) {
	var seen error
	rpc := wireServer(t, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		seen = err
		return resp, err
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := rpc.NewClient(ctx, &pb.NewClientRequest{})
	want := ToStatus(fmt.Errorf("%w: NewClient before Start", core.ErrInvalidArgument))
	sameStatus(t, "NewClient before Start", err, want)
	if _, ok := seen.(interface{ GRPCStatus() *status.Status }); !ok {
		t.Fatalf("the interceptor saw %T %v, not a status", seen, seen)
	}
	sameStatus(t, "what the interceptor saw", seen, want)
}
