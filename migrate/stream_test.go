package migrate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"

	"github.com/metaplane/metaplane/core"
)

// TestExportFileStreamsWhatExportReads: the streaming export writes the
// nodes one snapshot of the source reads (snapshotTree) (same paths in the same order, data, versions, next
// sequences, the epoch raised), and the file reads back whole.
func TestExportFileStreamsWhatExportReads(t *testing.T) {
	ctx := context.Background()
	src := source(t)
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
	if res.Passes != 1 || res.Nodes != len(want.Nodes) || res.Ephemerals != want.Ephemerals {
		t.Fatalf("result %+v, want 1 pass, %d nodes, %d ephemerals", res, len(want.Nodes), want.Ephemerals)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got.Nodes, func(i, j int) bool { return pathLess(got.Nodes[i].Path, got.Nodes[j].Path) })
	if !reflect.DeepEqual(got.Nodes, want.Nodes) {
		t.Fatalf("streamed nodes\n%+v\nExport's\n%+v", got.Nodes, want.Nodes)
	}
}

// churning creates a node on every listing of the root: a source that
// changes during every pass.
type churning struct {
	core.MetadataBackend
	t *testing.T
}

func (c churning) Children(ctx context.Context, p string, o core.ReadOptions) ([]string, core.Stat, error) {
	if p == "/" {
		if _, _, err := core.Create(ctx, c.MetadataBackend, "/churn/n", nil, core.CreateOptions{Mode: core.PersistentSequential, MakeParents: true}); err != nil {
			c.t.Error(err)
		}
	}
	return c.MetadataBackend.Children(ctx, p, o)
}

// TestExportFileGivesUpOnAChangingSource: a source that changes during
// every pass is read ExportPasses times and refused with ErrUnavailable.
func TestExportFileGivesUpOnAChangingSource(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "tree.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := ExportFile(context.Background(), churning{source(t), t}, f, nil)
	if !errors.Is(err, core.ErrUnavailable) || res.Passes != ExportPasses {
		t.Fatalf("err %v after %d passes, want ErrUnavailable after %d", err, res.Passes, ExportPasses)
	}
}

// TestLiveFinalScanReadsOnlyWhenTheSourceMoved: on a source quiet since
// the consistent round the final scan reads nothing (FinalUnchanged);
// a write after the fence (here an unfenced one, from BeforeFinal) makes
// it read the source again, and the write is on the target.
func TestLiveFinalScanReadsOnlyWhenTheSourceMoved(t *testing.T) {
	ctx := context.Background()
	for _, late := range []bool{false, true} {
		src := source(t)
		dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
		o := LiveOptions{FenceWait: 5 * time.Second}
		if late {
			o.BeforeFinal = func(ctx context.Context) error {
				_, _, err := core.Create(ctx, src, "/late", []byte("after the fence"), core.CreateOptions{})
				return err
			}
		}
		res, err := Live(ctx, src, dst, o)
		if err != nil {
			t.Fatalf("late write %v: %v", late, err)
		}
		if res.FinalUnchanged == late {
			t.Fatalf("late write %v: final_unchanged %v", late, res.FinalUnchanged)
		}
		rs, err := dst.GetMany(ctx, []string{"/late", "/metadata/databases/db1"}, core.ReadOptions{})
		dst.Close()
		if err != nil || rs[1].Err != nil {
			t.Fatalf("read the target: %v %v", err, rs[1].Err)
		}
		if late && rs[0].Err != nil {
			t.Fatalf("the write after the fence is not on the target: %v", rs[0].Err)
		}
	}
}

// export exports src with ExportFile and reads the file back.
func export(t *testing.T, src core.MetadataBackend) *Tree {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "export.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := ExportFile(context.Background(), src, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	tr, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	tr.Ephemerals = res.Ephemerals
	return tr
}

// TestImportAndValidateStreamTheFile: ImportFile and ValidateFile work
// from the file (read again from its start, whatever its offset): the
// import is validated equal; an extra subtree, a changed node and a
// missing one are named; a corrupted file is refused before anything is
// written.
func TestImportAndValidateStreamTheFile(t *testing.T) {
	ctx := context.Background()
	f, err := os.Create(filepath.Join(t.TempDir(), "tree.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := ExportFile(ctx, source(t), f, nil); err != nil {
		t.Fatal(err)
	}
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	ir, err := ImportFile(ctx, dst, f, Options{})
	if err != nil || ir.Nodes == 0 {
		t.Fatalf("import: %+v, %v", ir, err)
	}
	v, err := ValidateFile(ctx, dst, f, true)
	if err != nil || len(v.Differences) != 0 || v.Nodes != ir.Nodes {
		t.Fatalf("validate after the import: %+v, %v", v, err)
	}
	// An ephemeral on the target is not a difference.
	if _, _, err := core.Create(ctx, dst, "/metadata/member", nil, core.CreateOptions{Mode: core.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	if v, err := ValidateFile(ctx, dst, f, true); err != nil || len(v.Differences) != 0 {
		t.Fatalf("validate with an ephemeral on the target: %+v, %v", v, err)
	}
	for _, p := range []string{"/extra", "/extra/child", "/metadata/databases/db1/tables/t1/more"} {
		if _, _, err := core.Create(ctx, dst, p, nil, core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := core.Set(ctx, dst, "/metadata/databases/db1", []byte("other"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	if err := core.Delete(ctx, dst, "/changes/acl_0000000001", core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	v, err = ValidateFile(ctx, dst, f, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range v.Differences {
		got[d.Path] = d.What
	}
	want := map[string]string{"/changes/acl_0000000001": "missing", "/extra": "extra", "/extra/child": "extra", "/metadata/databases/db1/tables/t1/more": "extra", "/metadata/databases/db1": "data"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("differences %v, want %v", got, want)
	}
	// A corrupted copy of the file: refused, nothing written.
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	bf, err := os.Open(bad)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	empty := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "empty"})
	defer empty.Close()
	if _, err := ImportFile(ctx, empty, bf, Options{}); !errors.Is(err, ErrBadFile) {
		t.Errorf("import of a corrupted file: %v, want ErrBadFile", err)
	}
	if s, _ := empty.Snapshot(ctx, "/"); len(s.Nodes) != 1 {
		t.Errorf("the refused import wrote %d nodes", len(s.Nodes)-1)
	}
}
