package migrate

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/zktest"
)

// countingSource counts the paths a source is asked to read with their
// data.
type countingSource struct {
	core.MetadataBackend
	dataReads atomic.Int64
}

func (c *countingSource) GetMany(ctx context.Context, paths []string, o core.ReadOptions) ([]core.GetResult, error) {
	if !o.NoData {
		c.dataReads.Add(int64(len(paths)))
	}
	return c.MetadataBackend.GetMany(ctx, paths, o)
}

// TestFinalScanReadsWhatChanged: unfenced writes of every kind after the
// fence (a set deep down, a create, a new subtree, a delete of a subtree,
// a node deleted and created again with other data and children, an
// ephemeral gone) are all on the target after the final scan, which
// reads the data of the changed nodes only (not of the tree), on the
// memory backend and on a real ZooKeeper server through its plugin.
func TestFinalScanReadsWhatChanged(t *testing.T) {
	ctx := context.Background()
	sources := map[string]func(t *testing.T) core.MetadataBackend{
		"memory": func(t *testing.T) core.MetadataBackend {
			b := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "src"})
			t.Cleanup(func() { b.Close() })
			return b
		},
		"zookeeper": func(t *testing.T) core.MetadataBackend {
			if testing.Short() {
				t.Skip("starts ZooKeeper and a plugin process")
			}
			srv := zktest.StartServer(t)
			_, b := launchPlugin(t, "zookeeper", map[string]string{"zookeeper.address": srv.ConnectString(), "zookeeper.path.root": "/diff-test"})
			return b
		},
	}
	for name, open := range sources {
		t.Run(name, func(t *testing.T) {
			base := open(t)
			const tables = 40
			var ops []core.Op
			for _, p := range []string{"/metadata", "/metadata/t", "/gone", "/gone/a", "/gone/a/b", "/again", "/again/old", "/eph"} {
				ops = append(ops, core.CreateOp(p, []byte(p), core.Persistent))
			}
			for i := 0; i < tables; i++ {
				p := fmt.Sprintf("/metadata/t/%03d", i)
				ops = append(ops, core.CreateOp(p, []byte(p), core.Persistent), core.CreateOp(p+"/leader", []byte("0"), core.Persistent))
			}
			if _, err := base.Txn(ctx, ops, core.TxnOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := core.Create(ctx, base, "/eph/member", nil, core.CreateOptions{Mode: core.Ephemeral}); err != nil {
				t.Fatal(err)
			}
			src := &countingSource{MetadataBackend: base}
			dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
			defer dst.Close()
			var final int64
			var progress bytes.Buffer
			o := LiveOptions{FenceWait: 10 * time.Second, Progress: &progress, BeforeFinal: func(ctx context.Context) error {
				late := []core.Op{
					core.SetOp("/metadata/t/007/leader", []byte("7"), core.AnyVersion),
					core.CreateOp("/metadata/t/040", []byte("new"), core.Persistent),
					core.CreateOp("/metadata/t/040/leader", []byte("1"), core.Persistent),
					core.DeleteOp("/gone/a/b", core.AnyVersion),
					core.DeleteOp("/gone/a", core.AnyVersion),
					core.DeleteOp("/again/old", core.AnyVersion),
					core.DeleteOp("/again", core.AnyVersion),
					core.CreateOp("/again", []byte("recreated"), core.Persistent),
					core.CreateOp("/again/new", []byte("n"), core.Persistent),
					core.CreateOp("/late", []byte("after the fence"), core.Persistent),
				}
				if _, err := base.Txn(ctx, late, core.TxnOptions{}); err != nil {
					return err
				}
				if err := core.Delete(ctx, base, "/eph/member", core.AnyVersion, core.Fence{}); err != nil {
					return err
				}
				final = src.dataReads.Load()
				return nil
			}}
			res, err := Live(ctx, src, dst, o)
			if err != nil {
				t.Fatalf("live: %v\n%s", err, progress.String())
			}
			final = src.dataReads.Load() - final
			t.Log(progress.String())
			if res.FinalUnchanged {
				t.Fatal("the final scan read nothing after writes past the fence")
			}
			// The changed nodes (4 new, 2 recreated, 1 set, the epoch
			// bumped by the fence) and a few reads of the epoch: not the
			// tree's 2*tables nodes.
			if final > 20 {
				t.Errorf("the final scan read the data of %d nodes, for 10 changed in a tree of %d", final, res.Nodes)
			}
			want, err := base.Snapshot(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			got, err := dst.Snapshot(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]string{}
			for _, n := range got.Nodes {
				if !isMarker(n.Path) {
					have[n.Path] = string(n.Data)
				}
			}
			for _, n := range want.Nodes {
				if isMarker(n.Path) || n.Stat.EphemeralOwner != 0 {
					continue
				}
				d, ok := have[n.Path]
				if !ok || d != string(n.Data) {
					t.Errorf("%s: %q on the source, %q (present %v) on the target", n.Path, n.Data, d, ok)
				}
				delete(have, n.Path)
			}
			for p := range have {
				if p == catalog.CoordinatorsPath || p == catalog.CoordinatorEpochPath {
					continue // the epoch continued above the source's
				}
				t.Errorf("%s on the target, not on the source", p)
			}
		})
	}
}
