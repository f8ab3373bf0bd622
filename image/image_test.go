package image_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
)

func startImage(t testing.TB, b core.MetadataBackend) *image.Image {
	t.Helper()
	im := image.New(image.Options{Logf: t.Logf})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); im.Run(ctx, b) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := im.WaitReady(wctx); err != nil {
		t.Fatalf("image not ready: %v", err)
	}
	return im
}

func newStore(t testing.TB) *memory.Store {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestImageFollowsOtherWriters(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	w := s.NewClient(core.ClientOptions{})
	core.Create(ctx, w, "/metadata/databases/before", []byte("x"), core.CreateOptions{MakeParents: true})
	im := startImage(t, s.NewClient(core.ClientOptions{}))
	if n, err := core.Get(ctx, im, "/metadata/databases/before"); err != nil || string(n.Data) != "x" {
		t.Fatalf("snapshot content: %q, %v", n.Data, err)
	}
	_, st, err := core.Create(ctx, w, "/metadata/databases/after", []byte("y"), core.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := im.WaitRevision(wctx, st.CreateRevision); err != nil {
		t.Fatal(err)
	}
	names, _, err := im.Children(ctx, "/metadata/databases", core.ReadOptions{})
	if err != nil || fmt.Sprint(names) != "[after before]" {
		t.Fatalf("children: %v, %v", names, err)
	}
	if err := core.Delete(ctx, w, "/metadata/databases/before", core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	testWait(t, "delete seen", func() bool {
		_, ok, _ := core.Exists(ctx, im, "/metadata/databases/before")
		return !ok
	})
	// An ephemeral vanishes from the image when its session ends.
	ts := s.NewClient(core.ClientOptions{})
	core.Create(ctx, ts, "/tabletservers/ids/1", []byte("r"), core.CreateOptions{Mode: core.Ephemeral, MakeParents: true})
	testWait(t, "ephemeral seen", func() bool { return im.CountChildren("/tabletservers/ids") == 1 })
	ts.Close()
	testWait(t, "ephemeral gone", func() bool { return im.CountChildren("/tabletservers/ids") == 0 })
}

func testWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// slowWatch delays every watch response, so the test can read before the
// stream delivers.
type slowWatch struct {
	core.MetadataBackend
	hold chan struct{}
}

func (s *slowWatch) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	in, err := s.MetadataBackend.Watch(ctx, prefix, from)
	if err != nil {
		return nil, err
	}
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		for r := range in {
			select {
			case <-s.hold:
			case <-ctx.Done():
				return
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func TestReadYourWrites(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	b := s.NewClient(core.ClientOptions{})
	sw := &slowWatch{MetadataBackend: b, hold: make(chan struct{})}
	im := startImage(t, sw)
	cat := catalog.New(b, catalog.Options{Reader: im, OnWrite: im.ApplyWrite})
	if _, err := cat.CreateDatabase(ctx, "db1", catalog.DatabaseRegistration{}, false); err != nil {
		t.Fatal(err)
	}
	spec := catalog.TableSpec{Schema: catalog.Schema{Columns: []catalog.Column{{Name: "a", Type: catalog.DataType{Type: "INT"}}}}}
	if _, err := cat.CreateTable(ctx, "db1", "t", spec, false); err != nil {
		t.Fatal(err)
	}
	// The watch stream is held: the reads below see the writer's own
	// writes only.
	if rev := im.Revision(); rev >= 3 {
		t.Fatalf("watch was not held: revision %d", rev)
	}
	info, err := cat.GetTable(ctx, "db1", "t")
	if err != nil || info.Schema.Columns[0].Name != "a" {
		t.Fatalf("read own table: %+v, %v", info, err)
	}
	if _, err := cat.DropTable(ctx, "db1", "t", false); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.GetTable(ctx, "db1", "t"); err == nil {
		t.Fatal("dropped table still visible")
	}
	// Release the stream: older events must not resurrect the table.
	close(sw.hold)
	n, _ := b.Snapshot(ctx, "/")
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := im.WaitRevision(wctx, n.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.GetTable(ctx, "db1", "t"); err == nil {
		t.Fatal("dropped table resurrected by the stream")
	}
	tables, err := cat.ListTables(ctx, "db1")
	if err != nil || len(tables) != 0 {
		t.Fatalf("tables: %v, %v", tables, err)
	}
	snapB, _ := b.Snapshot(ctx, "/metadata")
	snapI, _ := im.Snapshot(ctx, "/metadata")
	if len(snapB.Nodes) != len(snapI.Nodes) {
		t.Fatalf("image diverged: backend %d nodes, image %d", len(snapB.Nodes), len(snapI.Nodes))
	}
}

// faultyWatch fails its first watches with a given error or answers with a
// Reset, to exercise resynchronisation.
type faultyWatch struct {
	core.MetadataBackend
	calls    atomic.Int32
	failWith error
	reset    bool
}

func (f *faultyWatch) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	n := f.calls.Add(1)
	if n == 1 && f.failWith != nil {
		ch := make(chan core.WatchResponse, 1)
		ch <- core.WatchResponse{Err: f.failWith}
		close(ch)
		return ch, nil
	}
	if !f.reset {
		return f.MetadataBackend.Watch(ctx, prefix, from)
	}
	in, err := f.MetadataBackend.Watch(ctx, prefix, 0)
	if err != nil {
		return nil, err
	}
	snap, err := f.MetadataBackend.Snapshot(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make(chan core.WatchResponse, 1)
	go func() {
		defer close(out)
		var evs []core.WatchEvent
		for _, n := range snap.Nodes {
			evs = append(evs, core.WatchEvent{Type: core.EventCreated, Path: n.Path, Data: n.Data, Stat: n.Stat, Revision: n.Stat.ModifyRevision})
		}
		// In pages of one node: the image replaces its state only at
		// the last.
		for i := range evs {
			out <- core.WatchResponse{Reset: true, Partial: i < len(evs)-1, Events: evs[i : i+1], Revision: snap.Revision}
		}
		for r := range in {
			out <- r
		}
	}()
	return out, nil
}

func TestResyncAfterCompactedAndReset(t *testing.T) {
	for _, tt := range []struct {
		name string
		fw   *faultyWatch
	}{
		{"compacted", &faultyWatch{failWith: core.ErrCompacted}},
		{"reset", &faultyWatch{reset: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			w := s.NewClient(core.ClientOptions{})
			core.Create(ctx, w, "/metadata/a", []byte("1"), core.CreateOptions{MakeParents: true})
			tt.fw.MetadataBackend = s.NewClient(core.ClientOptions{})
			im := startImage(t, tt.fw)
			_, st, err := core.Create(ctx, w, "/metadata/b", []byte("2"), core.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := im.WaitRevision(wctx, st.CreateRevision); err != nil {
				t.Fatal(err)
			}
			testWait(t, "both nodes", func() bool { return im.CountChildren("/metadata") == 2 })
			if tt.fw.failWith != nil && im.Resyncs() != 1 {
				t.Fatalf("resyncs: got %d, want 1", im.Resyncs())
			}
		})
	}
}

// noHistory is a backend without exact history: its watch from a revision
// answers with the state as a Reset in pages (one node each), the last held
// until release is closed; Snapshot is counted (it must not be called).
type noHistory struct {
	core.MetadataBackend
	snapshots atomic.Int32
	release   chan struct{}
}

func (n *noHistory) Capabilities() core.Capabilities {
	c := n.MetadataBackend.Capabilities()
	c.ExactHistory = false
	return c
}

func (n *noHistory) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	n.snapshots.Add(1)
	return n.MetadataBackend.Snapshot(ctx, prefix)
}

func (n *noHistory) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(int64, []core.Node) error) error {
	n.snapshots.Add(1)
	return core.StreamSnapshot(ctx, n.MetadataBackend, prefix, pageBytes, fn)
}

func (n *noHistory) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	if from == 0 {
		return n.MetadataBackend.Watch(ctx, prefix, 0)
	}
	in, err := n.MetadataBackend.Watch(ctx, prefix, 0)
	if err != nil {
		return nil, err
	}
	snap, err := n.MetadataBackend.Snapshot(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		for i, nd := range snap.Nodes {
			if i == len(snap.Nodes)-1 {
				<-n.release
			}
			out <- core.WatchResponse{Reset: true, Partial: i < len(snap.Nodes)-1, Revision: snap.Revision,
				Events: []core.WatchEvent{{Type: core.EventCreated, Path: nd.Path, Data: nd.Data, Stat: nd.Stat, Revision: snap.Revision}}}
		}
		for r := range in {
			out <- r
		}
	}()
	return out, nil
}

// TestLoadWithoutHistoryReadsOnce: on a backend without exact history the
// image loads from its watch's first Reset, taken in pages, and takes no
// snapshot (the tree is read once); it is not ready before the last page.
func TestLoadWithoutHistoryReadsOnce(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	w := s.NewClient(core.ClientOptions{})
	for _, p := range []string{"/metadata/a", "/metadata/b", "/metadata/c"} {
		if _, _, err := core.Create(ctx, w, p, []byte(p), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	nh := &noHistory{MetadataBackend: s.NewClient(core.ClientOptions{}), release: make(chan struct{})}
	im := image.New(image.Options{Prefix: "/metadata"})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); im.Run(rctx, nh) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := im.WaitReady(wctx)
	wcancel()
	if err == nil {
		t.Fatal("the image is ready before the Reset's last page")
	}
	close(nh.release)
	wctx, wcancel = context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := im.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if got := im.CountChildren("/metadata"); got != 3 {
		t.Fatalf("children of /metadata: %d, want 3", got)
	}
	_, st, err := core.Create(ctx, w, "/metadata/d", nil, core.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := im.WaitRevision(wctx, st.CreateRevision); err != nil {
		t.Fatal(err)
	}
	testWait(t, "the change after the load", func() bool { return im.CountChildren("/metadata") == 4 })
	if n := nh.snapshots.Load(); n != 0 {
		t.Fatalf("the image took %d snapshots on a backend without exact history, want 0", n)
	}
}

func TestNotReady(t *testing.T) {
	im := image.New(image.Options{})
	if _, err := core.Get(context.Background(), im, "/x"); err == nil {
		t.Fatal("read before ready succeeded")
	}
}

func setupBench(b *testing.B, partitions int) (*catalog.Catalog, *catalog.Catalog) {
	s := newStore(b)
	ctx := context.Background()
	c := s.NewClient(core.ClientOptions{})
	im := startImage(b, c)
	direct := catalog.New(c, catalog.Options{})
	viaImage := catalog.New(c, catalog.Options{Reader: im, OnWrite: im.ApplyWrite})
	viaImage.CreateDatabase(ctx, "db", catalog.DatabaseRegistration{}, false)
	spec := catalog.TableSpec{Schema: catalog.Schema{Columns: []catalog.Column{
		{Name: "a", Type: catalog.DataType{Type: "INT"}}, {Name: "b", Type: catalog.DataType{Type: "STRING", Nullable: true}}},
		PrimaryKey: []string{"a"}}, PartitionKeys: []string{"a"}, BucketCount: 4}
	if _, err := viaImage.CreateTable(ctx, "db", "t", spec, false); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < partitions; i++ {
		if _, _, err := viaImage.CreatePartition(ctx, "db", "t", fmt.Sprintf("p%d", i), false); err != nil {
			b.Fatal(err)
		}
	}
	return direct, viaImage
}

// BenchmarkGetTableInfo compares getTableInfo from the image with the same
// read from the (in-process memory) backend.
func BenchmarkGetTableInfo(b *testing.B) {
	direct, viaImage := setupBench(b, 0)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		c    *catalog.Catalog
	}{{"image", viaImage}, {"backend", direct}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := bc.c.GetTable(ctx, "db", "t"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListPartitions lists 1000 partitions (the seeds' listPartitionInfos).
func BenchmarkListPartitions(b *testing.B) {
	_, viaImage := setupBench(b, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ps, err := viaImage.ListPartitions(ctx, "db", "t")
		if err != nil || len(ps) != 1000 {
			b.Fatal(len(ps), err)
		}
	}
}

// BenchmarkListTables lists the tables of a database from the image.
func BenchmarkListTables(b *testing.B) {
	_, viaImage := setupBench(b, 0)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := viaImage.ListTables(ctx, "db"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDeleteAndCreateInOneTransaction: a transaction that deletes a node
// and creates it again (a tablet server's registration replaced under a
// new lease) leaves the node in the image, whether the image learns it
// from the stream or from its own write first.
func TestDeleteAndCreateInOneTransaction(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("own=%v", own), func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			w := s.NewClient(core.ClientOptions{})
			const p = "/tabletservers/ids/1"
			_, st, err := core.Create(ctx, w, p, []byte("old"), core.CreateOptions{MakeParents: true})
			if err != nil {
				t.Fatal(err)
			}
			im := startImage(t, s.NewClient(core.ClientOptions{}))
			ops := []core.Op{core.DeleteOp(p, st.Version), core.CreateOp(p, []byte("new"), core.Persistent)}
			res, err := w.Txn(ctx, ops, core.TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if own {
				im.ApplyWrite(ops, res)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := im.WaitRevision(wctx, res.Revision); err != nil {
				t.Fatal(err)
			}
			if n, err := core.Get(ctx, im, p); err != nil || string(n.Data) != "new" {
				t.Fatalf("after delete and create in one transaction: %q, %v; want the new node", n.Data, err)
			}
		})
	}
}

// TestImageChildrenStaySorted: the children index is a sorted list, kept
// so through creations out of order (from the stream and the image's own
// writes), deletions of single nodes and of subtrees, and a listing
// answers the children in order with the count in the stat.
func TestImageChildrenStaySorted(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	w := s.NewClient(core.ClientOptions{})
	for _, n := range []string{"m", "c", "x"} {
		if _, _, err := core.Create(ctx, w, "/p/"+n+"/leaf", nil, core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	im := startImage(t, s.NewClient(core.ClientOptions{}))
	list := func(want string, rev int64) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := im.WaitRevision(wctx, rev); err != nil {
			t.Fatal(err)
		}
		names, st, err := im.Children(ctx, "/p", core.ReadOptions{})
		if err != nil || fmt.Sprint(names) != want || int(st.NumChildren) != len(names) {
			t.Fatalf("children of /p: %v (stat %d), %v; want %s", names, st.NumChildren, err, want)
		}
	}
	list("[c m x]", 0)
	var rev int64
	for _, n := range []string{"a", "n", "b", "z"} {
		_, st, err := core.Create(ctx, w, "/p/"+n, []byte(n), core.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rev = st.CreateRevision
	}
	list("[a b c m n x z]", rev)
	// An own write, applied before the stream delivers it.
	res, err := w.Txn(ctx, []core.Op{core.CreateOp("/p/d", nil, core.Persistent)}, core.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	im.ApplyWrite([]core.Op{core.CreateOp("/p/d", nil, core.Persistent)}, res)
	list("[a b c d m n x z]", 0)
	res, err = w.Txn(ctx, []core.Op{core.DeleteOp("/p/m/leaf", core.AnyVersion), core.DeleteOp("/p/m", core.AnyVersion), core.DeleteOp("/p/a", core.AnyVersion)}, core.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list("[b c d n x z]", res.Revision)
	if n := im.CountChildren("/p/c"); n != 1 {
		t.Fatalf("/p/c has %d children, want 1", n)
	}
	if _, err := core.Get(ctx, im, "/p/m/leaf"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("/p/m/leaf after its delete: %v", err)
	}
}

// TestSnapshotSharedAndCopied: Snapshot and SnapshotShared answer the same
// nodes, sorted, at the same revision; Snapshot's data is a copy (changing
// it leaves the image as it was).
func TestSnapshotSharedAndCopied(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	w := s.NewClient(core.ClientOptions{})
	for _, p := range []string{"/s/b/x", "/s/a", "/s/a-b", "/s/a/y"} {
		if _, _, err := core.Create(ctx, w, p, []byte(p), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	im := startImage(t, s.NewClient(core.ClientOptions{}))
	copied, err := im.Snapshot(ctx, "/s")
	if err != nil {
		t.Fatal(err)
	}
	shared, err := im.SnapshotShared(ctx, "/s")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i, n := range copied.Nodes {
		paths = append(paths, n.Path)
		if sn := shared.Nodes[i]; sn.Path != n.Path || string(sn.Data) != string(n.Data) || sn.Stat != n.Stat {
			t.Fatalf("node %d: shared %+v, copied %+v", i, sn, n)
		}
	}
	if fmt.Sprint(paths) != "[/s /s/a /s/a-b /s/a/y /s/b /s/b/x]" || copied.Revision != shared.Revision || len(shared.Nodes) != len(copied.Nodes) {
		t.Fatalf("snapshot %v at %d, shared at %d (%d nodes)", paths, copied.Revision, shared.Revision, len(shared.Nodes))
	}
	copied.Nodes[1].Data[0] = 'X'
	if n, err := core.Get(ctx, im, "/s/a"); err != nil || string(n.Data) != "/s/a" {
		t.Fatalf("/s/a after its snapshot's copy changed: %q, %v", n.Data, err)
	}
}
