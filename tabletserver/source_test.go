package tabletserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	itest "github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// follow watches src from the revision after its snapshot until want
// databases have been created, and returns their paths in order.
func follow(t *testing.T, ctx context.Context, src *tabletserver.MetadataSource, create func(string), want int) []string {
	t.Helper()
	snap, err := src.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := src.Watch(wctx, "/", snap.Revision+1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < want; i++ {
		create(fmt.Sprintf("fdb%d", i))
	}
	var got []string
	for len(got) < want {
		select {
		case r, ok := <-ch:
			if !ok || r.Err != nil {
				t.Fatalf("watch ended (%v) after %v", r.Err, got)
			}
			for _, ev := range r.Events {
				if ev.Type == core.EventCreated && strings.HasPrefix(ev.Path, "/metadata/databases/fdb") {
					got = append(got, ev.Path)
				}
			}
		case <-ctx.Done():
			t.Fatalf("databases seen: %v, want %d", got, want)
		}
	}
	return got
}

// leadingCoordinator starts a coordinator on s, its metrics in reg and
// its long polls bounded by maxWait (0: the default), waits until it
// leads and returns its address.
func leadingCoordinator(t *testing.T, s *memory.Store, reg prometheus.Registerer, maxWait time.Duration) string {
	t.Helper()
	l := harness.Listen(t)
	srv, err := coordinator.New(coordinator.Options{Listener: l, Logger: testutil.Logger(t), Registerer: reg,
		MetadataStreamMaxWait: maxWait,
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			return s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, srv.Serve)
	itest.WaitFor(t, 5*time.Second, "the coordinator leads", srv.IsLeader)
	return l.Addr().String()
}

// newSource is a client of the coordinator at addr (closed with the test)
// and a metadata source through it.
func newSource(t *testing.T, addr string) (*adminclient.Client, *tabletserver.MetadataSource) {
	t.Helper()
	c, err := adminclient.NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	src, err := tabletserver.NewMetadataSource(c, tabletserver.SourceOptions{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c, src
}

// TestSourceFetchesOverOneStream: a tablet server's metadata source makes
// its fetches over one FetchMetadataStream (the coordinator's gRPC
// metrics count one stream and no FetchMetadata call) and receives every
// change in order.
func TestSourceFetchesOverOneStream(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	reg := prometheus.NewRegistry()
	addr := leadingCoordinator(t, s, reg, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, src := newSource(t, addr)
	create := func(name string) {
		if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := follow(t, ctx, src, create, 10)
	for i, p := range got {
		if want := fmt.Sprintf("/metadata/databases/fdb%d", i); p != want {
			t.Fatalf("database %d is %s, want %s (all: %v)", i, p, want, got)
		}
	}
	started := func(method, typ string) float64 {
		return counterValue(t, reg, "grpc_server_started_total", map[string]string{
			"grpc_method": method, "grpc_service": "metaplane.admin.v1.TabletServerService", "grpc_type": typ})
	}
	if n := started("FetchMetadataStream", "bidi_stream"); n != 1 {
		t.Errorf("%v FetchMetadataStream streams opened, want 1", n)
	}
	if n := started("FetchMetadata", "unary"); n != 0 {
		t.Errorf("%v FetchMetadata calls, want none (every fetch over the stream)", n)
	}
}

// counterValue is the value of counter name with the labels in reg (0
// when there is none).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// oldCoordinator is a tablet service of a version without
// FetchMetadataStream: it serves snapshots and FetchMetadata calls from a
// memory client, counting the calls.
type oldCoordinator struct {
	adminv1.UnimplementedTabletServerServiceServer
	b         core.MetadataBackend
	calls     chan struct{}
	snapshots atomic.Int32
}

func (o *oldCoordinator) FetchMetadataSnapshot(ctx context.Context, _ *adminv1.FetchMetadataSnapshotRequest) (*adminv1.FetchMetadataSnapshotResponse, error) {
	o.snapshots.Add(1)
	snap, err := o.b.Snapshot(ctx, "/")
	if err != nil {
		return nil, err
	}
	return &adminv1.FetchMetadataSnapshotResponse{Offset: snap.Revision}, nil
}

func (o *oldCoordinator) FetchMetadata(ctx context.Context, r *adminv1.FetchMetadataRequest) (*adminv1.FetchMetadataResponse, error) {
	select {
	case o.calls <- struct{}{}:
	default:
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	ch, err := o.b.Watch(wctx, "/", r.FromOffset)
	if err != nil {
		return nil, err
	}
	out := &adminv1.FetchMetadataResponse{NextOffset: r.FromOffset, Leader: true}
	select {
	case resp, ok := <-ch:
		if ok && resp.Err == nil {
			for _, ev := range resp.Events {
				out.Records = append(out.Records, &adminv1.MetadataRecord{Type: adminv1.MetadataRecord_Type(ev.Type), Path: ev.Path, Offset: ev.Revision})
			}
			out.NextOffset = resp.Revision + 1
		}
	case <-wctx.Done():
	}
	return out, nil
}

// TestSourceFallsBackToCalls: against a coordinator without
// FetchMetadataStream and FetchMetadataSnapshotStream (it answers
// UNIMPLEMENTED) the source takes its snapshot with FetchMetadataSnapshot,
// fetches with FetchMetadata calls and still receives every change.
func TestSourceFallsBackToCalls(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	b := s.NewClient(core.ClientOptions{})
	defer b.Close()
	old := &oldCoordinator{b: b, calls: make(chan struct{}, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	adminv1.RegisterTabletServerServiceServer(g, old)
	go g.Serve(l)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, src := newSource(t, l.Addr().String())
	create := func(name string) {
		if _, err := b.Txn(ctx, []core.Op{core.CreateOp("/metadata/databases/"+name, nil, core.Persistent).WithParents()}, core.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := follow(t, ctx, src, create, 5)
	if len(got) != 5 {
		t.Fatalf("got %v", got)
	}
	select {
	case <-old.calls:
	default:
		t.Fatal("no FetchMetadata call reached the older coordinator")
	}
	if old.snapshots.Load() == 0 {
		t.Fatal("no FetchMetadataSnapshot call reached the older coordinator")
	}
}

// TestSourceSnapshotInParts: a tree larger than gRPC's default 4 MiB
// message reaches the tablet server whole, in parts of about 1 MiB
// (FetchMetadataSnapshotStream), at one offset.
func TestSourceSnapshotInParts(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fill := s.NewClient(core.ClientOptions{})
	defer fill.Close()
	for i := range 60 {
		data := bytes.Repeat([]byte{byte(i)}, 100<<10)
		if _, _, err := core.Create(ctx, fill, fmt.Sprintf("/big/n%02d", i), data, core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := fill.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	_, src := newSource(t, leadingCoordinator(t, s, reg, 0))
	got, err := src.Snapshot(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision < want.Revision {
		t.Fatalf("snapshot at offset %d, older than the %d written", got.Revision, want.Revision)
	}
	var wantBig []core.Node
	for _, n := range want.Nodes {
		if core.HasPrefixPath(n.Path, "/big") {
			wantBig = append(wantBig, n)
		}
	}
	if len(got.Nodes) != len(wantBig) || len(got.Nodes) != 61 {
		t.Fatalf("%d nodes under /big, want %d (the 60 written and /big)", len(got.Nodes), len(wantBig))
	}
	for i, n := range got.Nodes {
		if n.Path != wantBig[i].Path || !bytes.Equal(n.Data, wantBig[i].Data) || n.Stat.Version != wantBig[i].Stat.Version {
			t.Fatalf("node %d is %s (%d bytes), want %s (%d bytes)", i, n.Path, len(n.Data), wantBig[i].Path, len(wantBig[i].Data))
		}
	}
	sent := counterValue(t, reg, "grpc_server_msg_sent_total", map[string]string{
		"grpc_method": "FetchMetadataSnapshotStream", "grpc_service": "metaplane.admin.v1.TabletServerService"})
	if sent < 6 {
		t.Fatalf("the 6 MB snapshot went in %v messages, want at least 6 of about 1 MiB", sent)
	}
}
