package migrate

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

// lateWrites changes src behind the migration's back (no fence: as a
// writer that landed between the checked round and the fence would), from
// four goroutines at once: new subtrees, updates (several per node),
// leaf deletes, a subtree delete, a delete and create again. It returns
// how many operations it applied.
func lateWrites(ctx context.Context, src core.MetadataBackend) (int, error) {
	if _, err := src.Txn(ctx, []core.Op{core.CreateOp("/late", nil, core.Persistent)}, core.TxnOptions{}); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	counts := make([]int, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := func(ops ...core.Op) {
				if errs[g] != nil {
					return
				}
				if _, err := src.Txn(ctx, ops, core.TxnOptions{}); err != nil {
					errs[g] = fmt.Errorf("late write %s: %w", ops[0].Path, err)
					return
				}
				counts[g] += len(ops)
			}
			base := fmt.Sprintf("/late/g%d", g)
			do(core.CreateOp(base, []byte(base), core.Persistent))
			for i := 0; i < 10; i++ {
				p := fmt.Sprintf("%s/n%d", base, i)
				do(core.CreateOp(p, []byte(p), core.Persistent), core.CreateOp(p+"/leaf", []byte("leaf"), core.Persistent))
			}
			for i := 0; i < 10; i++ {
				p := fmt.Sprintf("/tree/g%d/n%d", g, i)
				for k := 0; k < 3; k++ {
					do(core.SetOp(p, []byte(fmt.Sprintf("late-%d", k)), core.AnyVersion))
				}
			}
			do(core.DeleteOp(fmt.Sprintf("/tree/g%d/n10/leaf", g), core.AnyVersion))
			do(core.DeleteOp(fmt.Sprintf("/tree/g%d/n11/leaf", g), core.AnyVersion), core.DeleteOp(fmt.Sprintf("/tree/g%d/n11", g), core.AnyVersion))
			p := fmt.Sprintf("/tree/g%d/n12", g)
			do(core.DeleteOp(p+"/leaf", core.AnyVersion), core.DeleteOp(p, core.AnyVersion))
			do(core.CreateOp(p, []byte("again"), core.Persistent))
		}()
	}
	wg.Wait()
	n := 1
	for g := range errs {
		if errs[g] != nil {
			return 0, errs[g]
		}
		n += counts[g]
	}
	return n, nil
}

// treeNodes is how many nodes buildTree writes.
const treeNodes = 1 + 4*(1+2*60)

// buildTree writes /tree/g<0-3>/n<0-59>/leaf.
func buildTree(t *testing.T, ctx context.Context, b core.MetadataBackend) {
	t.Helper()
	if _, _, err := core.Create(ctx, b, "/tree", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 4; g++ {
		if _, _, err := core.Create(ctx, b, fmt.Sprintf("/tree/g%d", g), nil, core.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for lo := 0; lo < 60; lo += 20 {
			var ops []core.Op
			for i := lo; i < lo+20; i++ {
				p := fmt.Sprintf("/tree/g%d/n%d", g, i)
				ops = append(ops, core.CreateOp(p, []byte(p), core.Persistent), core.CreateOp(p+"/leaf", []byte("leaf"), core.Persistent))
			}
			if _, err := b.Txn(ctx, ops, core.TxnOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sameTree fails unless dst holds src's persistent nodes (the markers and
// the epoch node aside) with the same data, and nothing else.
func sameTree(t *testing.T, ctx context.Context, src, dst core.MetadataBackend) {
	t.Helper()
	nodes := func(b core.MetadataBackend) map[string]string {
		s, err := b.Snapshot(ctx, "/")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, n := range s.Nodes {
			if n.Path == "/" || isMarker(n.Path) || n.Stat.EphemeralOwner != 0 || strings.HasPrefix(n.Path, "/coordinators") {
				continue
			}
			m[n.Path] = string(n.Data)
		}
		return m
	}
	want, got := nodes(src), nodes(dst)
	for p, d := range want {
		if g, ok := got[p]; !ok || g != d {
			t.Errorf("%s: %q on the source, %q (present %v) on the target", p, d, g, ok)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s on the target only", p)
		}
	}
	if len(want) < treeNodes {
		t.Errorf("the source holds %d nodes: the test's tree is missing", len(want))
	}
}

// TestLiveFinalScanByWatch: writes that land on the source after the
// checked round (here: after the fence, from writers that ignore it)
// reach the target through the final scan by the source's watch, which
// reads only the paths the watch reported (far fewer than the tree), on
// the memory backend, a real ZooKeeper behind its plugin process and a
// real Raft plugin process; with NoWatch the same writes reach the target
// through one stat per node.
func TestLiveFinalScanByWatch(t *testing.T) {
	sources := map[string]func(t *testing.T) core.MetadataBackend{
		"memory": func(t *testing.T) core.MetadataBackend {
			b := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "src"})
			t.Cleanup(func() { b.Close() })
			return b
		},
		"zookeeper": func(t *testing.T) core.MetadataBackend {
			srv := zktest.StartServer(t)
			_, b := launchPlugin(t, "zookeeper", map[string]string{
				"zookeeper.address": srv.ConnectString(), "zookeeper.path.root": "/watched", "zookeeper.client.session-timeout": "10s"})
			return b
		},
		"raft": func(t *testing.T) core.MetadataBackend {
			_, b := launchPlugin(t, "raft", map[string]string{
				"coordinator.raft.dir": filepath.Join(t.TempDir(), "raft"), "coordinator.raft.port": strconv.Itoa(testutil.FreePort(t)),
				"coordinator.raft.logdb.profile": "tiny"})
			return b
		},
	}
	// One stat per node (NoWatch) on Raft is TestLiveFromRealRaft's.
	for _, tc := range []struct {
		name    string
		noWatch bool
	}{{"memory", false}, {"memory", true}, {"zookeeper", false}, {"zookeeper", true}, {"raft", false}} {
		name, noWatch := tc.name, tc.noWatch
		t.Run(fmt.Sprintf("%s/nowatch=%v", name, noWatch), func(t *testing.T) {
			if name != "memory" && testing.Short() {
				t.Skip("starts plugin processes")
			}
			ctx := context.Background()
			src := sources[name](t)
			buildTree(t, ctx, src)
			dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
			defer dst.Close()
			var progress strings.Builder
			late := 0
			res, err := Live(ctx, src, dst, LiveOptions{Progress: &progress, MaxRounds: 2, FenceWait: 20 * time.Second, NoWatch: noWatch,
				BeforeFinal: func(ctx context.Context) error {
					n, err := lateWrites(ctx, src)
					late = n
					return err
				}})
			if err != nil {
				t.Fatalf("live: %v\n%s", err, progress.String())
			}
			t.Log(progress.String())
			sameTree(t, ctx, src, dst)
			if late < 100 {
				t.Errorf("%d late operations, want at least 100", late)
			}
			if res.FinalUnchanged || res.Final.Changed == 0 {
				t.Errorf("final scan %+v (unchanged %v): the late writes were not seen", res.Final, res.FinalUnchanged)
			}
			switch {
			case noWatch:
				if res.FinalWatched || !strings.Contains(res.FinalWhy, "NoWatch") {
					t.Errorf("NoWatch: watched %v, why %q", res.FinalWatched, res.FinalWhy)
				}
			default:
				// 84 new nodes, 40 updated, 20 deleted (4 created
				// again): 144 paths, a third of the tree.
				if !res.FinalWatched || res.FinalPaths == 0 || res.FinalPaths > 150 || res.FinalWhy != "" {
					t.Errorf("watched %v, %d paths (want 1 to 150 of %d nodes), why %q", res.FinalWatched, res.FinalPaths, treeNodes, res.FinalWhy)
				}
			}
		})
	}
}

// lossyWatch is a backend whose watches send a Reset once lose is closed.
type lossyWatch struct {
	core.MetadataBackend
	lose chan struct{}
}

func (l lossyWatch) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	in, err := l.MetadataBackend.Watch(ctx, prefix, from)
	if err != nil {
		return nil, err
	}
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		for {
			select {
			case r, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			case <-l.lose:
				select {
				case out <- core.WatchResponse{Reset: true}:
				case <-ctx.Done():
				}
				<-ctx.Done()
				return
			}
		}
	}()
	return out, nil
}

// TestLiveWatchLostFallsBack: a watch reset after the fence (a ZooKeeper
// session that expired) is not trusted: the final scan reads every
// node's stat instead, says why, and the late writes still reach the
// target.
func TestLiveWatchLostFallsBack(t *testing.T) {
	ctx := context.Background()
	inner := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "src"})
	defer inner.Close()
	src := lossyWatch{MetadataBackend: inner, lose: make(chan struct{})}
	buildTree(t, ctx, src)
	dst := memory.NewStore(memory.StoreOptions{}).NewClient(core.ClientOptions{Name: "dst"})
	defer dst.Close()
	var progress strings.Builder
	res, err := Live(ctx, src, dst, LiveOptions{Progress: &progress, MaxRounds: 2, FenceWait: 10 * time.Second,
		BeforeFinal: func(ctx context.Context) error {
			_, err := lateWrites(ctx, src)
			close(src.lose)
			return err
		}})
	if err != nil {
		t.Fatalf("live: %v\n%s", err, progress.String())
	}
	t.Log(progress.String())
	sameTree(t, ctx, src, dst)
	if res.FinalWatched || !strings.Contains(res.FinalWhy, "reset") || !strings.Contains(progress.String(), "reading every node's stat") {
		t.Errorf("watched %v, why %q; progress %q", res.FinalWatched, res.FinalWhy, progress.String())
	}
	if res.Final.Changed == 0 {
		t.Errorf("final scan %+v: the late writes were not seen", res.Final)
	}
	// The source stays fenced.
	rs, _ := src.GetMany(ctx, []string{catalog.MigrationFencePath}, core.ReadOptions{})
	if rs[0].Err != nil {
		t.Errorf("the source's fence: %v", rs[0].Err)
	}
}
