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
// nodes Export reads (same paths in the same order, data, versions, next
// sequences, the epoch raised), and the file reads back whole.
func TestExportFileStreamsWhatExportReads(t *testing.T) {
	ctx := context.Background()
	src := source(t)
	want, err := Export(ctx, src)
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
