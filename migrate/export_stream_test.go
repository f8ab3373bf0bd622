package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
)

// trickySource is source's tree plus names whose byte order puts a
// node's siblings between it and its children ("/x" < "/x-y" < "/x/z"),
// and sequential families beside plain children.
func trickySource(t *testing.T) core.MetadataBackend {
	t.Helper()
	ctx := context.Background()
	b := source(t)
	for _, p := range []string{"/x", "/x-y", "/x-y/k", "/x.z", "/x/z", "/x/z-0000000007", "/x/z/w", "/seq/q-0000000003", "/seq/q-0000000011", "/seq/q-0000000012/in"} {
		if _, _, err := core.Create(ctx, b, p, []byte(p), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestExportStreamedSortedAndChecked: an export from a streaming source is
// in byte order (Header.Sorted), holds what one snapshot reads (next
// sequences and the raised epoch included: the oracle), and Scan checks
// its order without a hash per node: it reads back, and a copy with two
// lines swapped or a node before its parent is refused.
func TestExportStreamedSortedAndChecked(t *testing.T) {
	ctx := context.Background()
	src := trickySource(t)
	want, err := snapshotTree(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "tree.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := ExportFile(ctx, src, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Header.Sorted || res.Passes != 1 || res.Nodes != len(want.Nodes) || res.Ephemerals != want.Ephemerals {
		t.Fatalf("result %+v, want a sorted file, 1 pass, %d nodes, %d ephemerals", res, len(want.Nodes), want.Ephemerals)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if !sort.SliceIsSorted(got.Nodes, func(i, j int) bool { return got.Nodes[i].Path < got.Nodes[j].Path }) {
		t.Fatalf("a sorted file's nodes are not in byte order: %v", paths(got.Nodes))
	}
	sort.Slice(got.Nodes, func(i, j int) bool { return pathLess(got.Nodes[i].Path, got.Nodes[j].Path) })
	if !reflect.DeepEqual(got.Nodes, want.Nodes) {
		t.Fatalf("streamed export\n%+v\none snapshot's\n%+v", got.Nodes, want.Nodes)
	}
	for _, n := range got.Nodes {
		if n.Path == "/seq" && n.NextSequence != 13 {
			t.Fatalf("/seq next sequence %d, want 13", n.NextSequence)
		}
		if n.Path == "/x" && n.NextSequence != 0 {
			t.Fatalf("/x (plain and sequential children) next sequence %d, want 0", n.NextSequence)
		}
	}

	// Rewritten with the body out of order (a valid checksum): refused.
	bad := func(nodes []Node, what string) {
		t.Helper()
		var buf bytes.Buffer
		tw, err := NewWriter(&buf, got.Header)
		if err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			if err := tw.Node(&nodes[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := Scan(&buf, nil); !errors.Is(err, ErrBadFile) {
			t.Fatalf("a sorted file with %s: Scan %v, want ErrBadFile", what, err)
		}
	}
	sorted := append([]Node(nil), got.Nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	swapped := append([]Node(nil), sorted...)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	bad(swapped, "two lines swapped")
	var orphan []Node
	for _, n := range sorted {
		if n.Path != "/x" {
			orphan = append(orphan, n)
		}
	}
	bad(orphan, "a node without its parent")
}

func paths(nodes []Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Path)
	}
	return out
}

// TestStreamedRoundTripUnderWrites: a tree of a few thousand nodes is
// exported through the streamed path while writers keep changing it (each
// transaction moves a counter and creates a node together), imported
// into an empty store, and validated against the file with no difference;
// the copy holds the invariant (counter = nodes created), so it is one
// revision's state.
func TestStreamedRoundTripUnderWrites(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore(memory.StoreOptions{})
	src := store.NewClient(core.ClientOptions{Name: "src"})
	defer src.Close()
	var ops []core.Op
	ops = append(ops, core.CreateOp("/metadata", nil, core.Persistent), core.CreateOp("/w", []byte("0"), core.Persistent))
	for i := 0; i < 3000; i++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("/metadata/n%05d", i), []byte(strings.Repeat("v", i%50)), core.Persistent))
	}
	if _, err := src.Txn(ctx, ops, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var writes atomic.Int64
	begun := make(chan struct{}) // closed after the tenth transaction
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; !stop.Load(); i++ {
			_, err := src.Txn(ctx, []core.Op{
				core.SetOp("/w", []byte(fmt.Sprint(i)), core.AnyVersion),
				core.CreateOp(fmt.Sprintf("/w/c%06d", i), nil, core.Persistent),
			}, core.TxnOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			if writes.Add(1) == 10 {
				close(begun)
			}
		}
	}()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "tree.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	<-begun
	res, err := ExportFile(ctx, src, f, nil)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exported %d nodes at revision %d while %d transactions committed", res.Nodes, res.Header.Revision, writes.Load())
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	if _, err := ImportFile(ctx, dst, f, Options{}); err != nil {
		t.Fatal(err)
	}
	vr, err := ValidateFile(ctx, dst, f, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.Differences) != 0 || vr.Nodes != res.Nodes {
		t.Fatalf("validate: %d nodes, differences %+v; want %d nodes, none", vr.Nodes, vr.Differences, res.Nodes)
	}
	rs, err := dst.GetMany(ctx, []string{"/w"}, core.ReadOptions{})
	if err != nil || rs[0].Err != nil {
		t.Fatal(err, rs[0].Err)
	}
	kids, _, err := dst.Children(ctx, "/w", core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(rs[0].Node.Data) != fmt.Sprint(len(kids)) {
		t.Fatalf("the copy's counter is %s with %d children: not one revision's state", rs[0].Node.Data, len(kids))
	}
}
