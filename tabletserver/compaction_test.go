package tabletserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// heldWatches is the coordinator's memory client with a switch that holds
// the watches FETCH_METADATA opens: while held, such a watch delivers
// nothing until its long poll ends, so a tablet server keeps polling from
// the same offset (it falls behind without failing). The coordinator's own
// image watch is opened without a deadline and is never held; FetchMetadata
// always bounds its watch by the long poll's deadline. Every watch error
// is recorded with the revision it was opened from.
type heldWatches struct {
	*memory.Backend

	mu      sync.Mutex
	hold    bool
	held    chan int64 // receives the from-revision of each held watch
	errs    []watchErr
	snapsAt []int64 // the store revision at each Snapshot call
}

type watchErr struct {
	from int64
	err  error
}

func (h *heldWatches) setHold(on bool) {
	h.mu.Lock()
	h.hold = on
	h.mu.Unlock()
}

func (h *heldWatches) record(from int64, err error) {
	h.mu.Lock()
	h.errs = append(h.errs, watchErr{from, err})
	h.mu.Unlock()
}

func (h *heldWatches) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	h.mu.Lock()
	h.snapsAt = append(h.snapsAt, h.Store().Revision())
	h.mu.Unlock()
	return h.Backend.Snapshot(ctx, prefix)
}

// StreamSnapshot records a streamed snapshot as Snapshot does (the
// coordinator's FETCH_METADATA_SNAPSHOT_STREAM takes one).
func (h *heldWatches) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(int64, []core.Node) error) error {
	h.mu.Lock()
	h.snapsAt = append(h.snapsAt, h.Store().Revision())
	h.mu.Unlock()
	return h.Backend.StreamSnapshot(ctx, prefix, pageBytes, fn)
}

func (h *heldWatches) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	_, fetch := ctx.Deadline()
	h.mu.Lock()
	hold := h.hold && fetch
	h.mu.Unlock()
	if hold {
		select {
		case h.held <- from:
		default:
		}
		ch := make(chan core.WatchResponse)
		go func() { <-ctx.Done(); close(ch) }()
		return ch, nil
	}
	ch, err := h.Backend.Watch(ctx, prefix, from)
	if err != nil {
		h.record(from, err)
		return nil, err
	}
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		for r := range ch {
			if r.Err != nil {
				h.record(from, r.Err)
			}
			select {
			case out <- r:
			case <-ctx.Done():
				for range ch {
				}
				return
			}
		}
	}()
	return out, nil
}

// TestFetchMetadataAfterCompaction compacts the store's history past the
// offsets a FETCH_METADATA client and a running tablet server are at: the
// RPC answers OFFSET_COMPACTED (core.ErrCompacted), the client
// re-snapshots with FETCH_METADATA_SNAPSHOT and follows on from there, and
// the tablet server does the same by itself and converges to the current
// catalog.
func TestFetchMetadataAfterCompaction(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	var hw *heldWatches
	opened := make(chan struct{})
	l := harness.Listen(t)
	// No in-memory feed: every FETCH_METADATA opens its own watch, which
	// the test holds (a feed would serve the held-back tablet server from
	// memory, past the compaction).
	srv, err := coordinator.New(coordinator.Options{Listener: l, Logger: testutil.Logger(t), TabletServerSessionTimeout: 2 * time.Second,
		MetadataStreamMaxWait: 200 * time.Millisecond, MetadataStreamFeed: -1,
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			if hw != nil {
				return nil, errors.New("the test's coordinator opens one client only")
			}
			hw = &heldWatches{Backend: s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second}), held: make(chan int64, 1)}
			close(opened)
			return hw, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, srv.Serve)
	<-opened
	testutil.WaitFor(t, 5*time.Second, "the coordinator leads", srv.IsLeader)
	addr := l.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := adminclient.NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin := func(call func(ctx context.Context, a adminv1.AdminServiceClient) error) {
		t.Helper()
		if err := client.Admin(ctx, call); err != nil {
			t.Fatal(err)
		}
	}
	createDB := func(name string) {
		t.Helper()
		admin(func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
			return err
		})
	}
	reader := s.NewClient(core.ClientOptions{})
	defer reader.Close()

	// A FETCH_METADATA client.
	var snap *adminv1.FetchMetadataSnapshotResponse
	fetchSnapshot := func() {
		t.Helper()
		if err := client.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
			snap, err = tc.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// fetch returns the RPC's status error as received (the client's Do
	// converts it with FromStatus).
	fetch := func(from int64) (*adminv1.FetchMetadataResponse, error, error) {
		var r *adminv1.FetchMetadataResponse
		var raw error
		err := client.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
			r, err = tc.FetchMetadata(ctx, &adminv1.FetchMetadataRequest{FromOffset: from})
			raw = err
			return err
		})
		return r, raw, err
	}
	fetchSnapshot()
	from := snap.Offset + 1
	createDB("a")
	createDB("b")
	s.Compact(s.Revision())
	_, raw, err := fetch(from)
	if d := adminapi.DetailOf(raw); d == nil || d.Code != adminapi.CodeOffsetCompacted {
		t.Fatalf("fetch from %d after compaction to %d: got %v, want OFFSET_COMPACTED", from, s.CompactedRevision(), raw)
	}
	if !errors.Is(err, core.ErrCompacted) {
		t.Fatalf("the client's error %v is not core.ErrCompacted", err)
	}
	fetchSnapshot()
	if snap.Offset < s.CompactedRevision() {
		t.Fatalf("new snapshot at offset %d, behind the compacted revision %d", snap.Offset, s.CompactedRevision())
	}
	want, err := reader.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Offset == want.Revision {
		var got []core.Node
		for _, n := range snap.Nodes {
			got = append(got, core.Node{Path: n.Path, Data: n.Data, Stat: core.Stat{Version: n.Version}})
		}
		if d := diffNodes(got, want.Nodes); d != "" {
			t.Fatalf("snapshot after compaction differs from the store at the same revision %d:%s", want.Revision, d)
		}
	}
	createDB("c")
	r, _, err := fetch(snap.Offset + 1)
	if err != nil {
		t.Fatalf("fetch from the new snapshot's offset: %v", err)
	}
	if !hasRecord(r, "/metadata/databases/c", adminv1.MetadataRecord_CREATED) {
		t.Fatalf("the stream after the new snapshot lacks database c: %v", r.Records)
	}

	// A running tablet server.
	ts, err := tabletserver.New(tabletserver.Options{ID: 1, Listener: harness.Listen(t), Logger: testutil.Logger(t), Seeds: []string{addr},
		HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, ts.Serve)
	testutil.WaitFor(t, 10*time.Second, "the tablet server registers and follows", func() bool {
		return ts.Registered() && converged(ctx, ts, reader) == ""
	})
	// Hold its fetches: once a held fetch arrives, the previous one has
	// returned, and the server keeps polling from that offset.
	hw.setHold(true)
	var at int64
	select {
	case at = <-hw.held:
	case <-ctx.Done():
		t.Fatal("no FETCH_METADATA arrived while held")
	}
	resyncs := ts.View().Resyncs()
	createDB("d")
	admin(func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "d", Table: "t", Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "k", Type: "INT"}}, BucketCount: 2, ReplicationFactor: 1}})
		return err
	})
	admin(func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.DropDatabase(ctx, &adminv1.DropDatabaseRequest{Name: "a"})
		return err
	})
	compacted := s.Revision()
	if compacted < at {
		t.Fatalf("the store's revision %d is below the held offset %d", compacted, at)
	}
	s.Compact(compacted)
	hw.setHold(false)

	testutil.WaitFor(t, 10*time.Second, "the tablet server converges to the current catalog", func() bool {
		return converged(ctx, ts, reader) == ""
	})
	if d := converged(ctx, ts, reader); d != "" {
		t.Fatal(d)
	}
	// It got there by the compacted signal and a new snapshot, not by
	// replaying the dropped history.
	hw.mu.Lock()
	var signalled bool
	for _, e := range hw.errs {
		if e.from == at && errors.Is(e.err, core.ErrCompacted) {
			signalled = true
		}
	}
	var resnapped bool
	for _, rev := range hw.snapsAt {
		if rev >= compacted {
			resnapped = true
		}
	}
	errs := fmt.Sprint(hw.errs)
	hw.mu.Unlock()
	if !signalled {
		t.Fatalf("no FETCH_METADATA from %d failed with ErrCompacted; watch errors: %s", at, errs)
	}
	if !resnapped {
		t.Fatal("no FETCH_METADATA_SNAPSHOT after the compaction")
	}
	if ts.View().Resyncs() <= resyncs {
		t.Fatalf("the tablet server's view did not resynchronise (resyncs %d, before %d)", ts.View().Resyncs(), resyncs)
	}
	tc := tabletClient(t, ts.Address())
	st, err := tc.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
	if err != nil || strings.Join(st.Tables, ",") != "d.t" {
		t.Fatalf("tablet server's tables: %v, %v; want [d.t]", st, err)
	}
}

// converged compares the tablet server's view with the store: "" when
// they hold the same nodes (path, data, version), else the difference.
func converged(ctx context.Context, ts *tabletserver.Server, reader core.MetadataBackend) string {
	want, err := reader.Snapshot(ctx, "/")
	if err != nil {
		return err.Error()
	}
	got, err := ts.View().Snapshot(ctx, "/")
	if err != nil {
		return err.Error()
	}
	return diffNodes(got.Nodes, want.Nodes)
}

func diffNodes(got, want []core.Node) string {
	g := map[string]core.Node{}
	for _, n := range got {
		g[n.Path] = n
	}
	var d strings.Builder
	for _, w := range want {
		n, ok := g[w.Path]
		switch {
		case !ok:
			fmt.Fprintf(&d, "\n  missing %s", w.Path)
		case !bytes.Equal(n.Data, w.Data) || n.Stat.Version != w.Stat.Version:
			fmt.Fprintf(&d, "\n  %s: got v%d %q, want v%d %q", w.Path, n.Stat.Version, n.Data, w.Stat.Version, w.Data)
		}
		delete(g, w.Path)
	}
	for p := range g {
		fmt.Fprintf(&d, "\n  extra %s", p)
	}
	return d.String()
}

func hasRecord(r *adminv1.FetchMetadataResponse, path string, typ adminv1.MetadataRecord_Type) bool {
	for _, rec := range r.Records {
		if rec.Path == path && rec.Type == typ {
			return true
		}
	}
	return false
}
