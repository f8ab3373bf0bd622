package zookeeper

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

// TestStreamSnapshotUnderWritesAtScale: streamed snapshots of a tree of
// tens of thousands of nodes, taken while writers commit transactions
// that each move a counter (a node early in path order) and create a
// child under a node late in path order, are each the state of one zxid:
// every counter equals its family's children count (a read mixing zxids
// sees the counter before the children it counts), every node's zxids are
// at or below the snapshot's revision, and the tree's fixed nodes are all
// there. The writers commit during every snapshot (checked), so the rounds
// that re-read what changed are exercised; each snapshot finishes.
func TestStreamSnapshotUnderWritesAtScale(t *testing.T) {
	nodes := 50_000
	if testing.Short() {
		nodes = 10_000
	}
	o := testOptions(t)
	b := open(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const writers = 3
	// The fixed tree: /t/m/dNNN/nNNN, 100 leaves per directory.
	var ops []core.Op
	flush := func() {
		t.Helper()
		if len(ops) == 0 {
			return
		}
		if _, err := b.Txn(ctx, ops, core.TxnOptions{}); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	ops = append(ops, core.CreateOp("/t", nil, core.Persistent), core.CreateOp("/t/m", nil, core.Persistent))
	for w := 0; w < writers; w++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("/t/a-counter-%d", w), []byte("0"), core.Persistent),
			core.CreateOp(fmt.Sprintf("/t/z-%d", w), nil, core.Persistent))
	}
	fixed := 2 + 2*writers
	for d := 0; fixed < nodes; d++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("/t/m/d%04d", d), []byte(strings.Repeat("d", 100)), core.Persistent))
		fixed++
		for n := 0; n < 100 && fixed < nodes; n++ {
			ops = append(ops, core.CreateOp(fmt.Sprintf("/t/m/d%04d/n%03d", d, n), []byte(strings.Repeat("n", 150)), core.Persistent))
			fixed++
		}
		if len(ops) >= 500 {
			flush()
		}
	}
	flush()

	var stop atomic.Bool
	var commits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		c := open(t, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 1; !stop.Load(); j++ {
				_, err := c.Txn(ctx, []core.Op{
					core.SetOp(fmt.Sprintf("/t/a-counter-%d", w), []byte(strconv.Itoa(j)), core.AnyVersion),
					core.CreateOp(fmt.Sprintf("/t/z-%d/c%06d", w, j), nil, core.Persistent),
				}, core.TxnOptions{})
				if err != nil {
					errs <- err
					return
				}
				commits.Add(1)
			}
		}()
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	var rounds, overrides int
	snapshotDone = func(r, ov, _ int) { rounds, overrides = r, ov }
	defer func() { snapshotDone = nil }()

	for i := 0; i < 3; i++ {
		before := commits.Load()
		var rev int64 = -1
		counters := map[string]int{}
		children := map[string]int{}
		var got, pages int
		err := b.StreamSnapshot(ctx, "/t", 256<<10, func(r int64, page []core.Node) error {
			pages++
			if rev >= 0 && r != rev {
				return fmt.Errorf("page %d at revision %d, the pages before at %d", pages, r, rev)
			}
			rev = r
			for _, n := range page {
				got++
				if n.Stat.CreateRevision > r || n.Stat.ModifyRevision > r || n.Stat.ChildrenRevision > r {
					return fmt.Errorf("%s has zxids %+v above the snapshot's revision %d", n.Path, n.Stat, r)
				}
				switch {
				case strings.HasPrefix(n.Path, "/t/a-counter-"):
					v, err := strconv.Atoi(string(n.Data))
					if err != nil {
						return err
					}
					counters[strings.TrimPrefix(n.Path, "/t/a-counter-")] = v
				case strings.HasPrefix(n.Path, "/t/z-") && strings.Count(n.Path, "/") == 3:
					children[strings.TrimPrefix(core.ParentPath(n.Path), "/t/z-")]++
				}
			}
			return nil
		})
		during := commits.Load() - before
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		for w := 0; w < writers; w++ {
			k := strconv.Itoa(w)
			if counters[k] != children[k] {
				t.Fatalf("snapshot %d at revision %d: writer %d's counter is %d but %d of its children are there: not one zxid's state", i, rev, w, counters[k], children[k])
			}
		}
		dynamic := 0
		for _, c := range children {
			dynamic += c
		}
		if got != fixed+dynamic {
			t.Fatalf("snapshot %d: %d nodes, want the %d fixed ones and the %d children", i, got, fixed, dynamic)
		}
		if during == 0 {
			t.Fatalf("snapshot %d: no transaction committed while it read (the test proves nothing)", i)
		}
		t.Logf("snapshot %d: %d nodes in %d pages at zxid %d; %d transactions committed meanwhile; %d rounds read %d nodes again", i, got, pages, rev, during, rounds, overrides)
	}
}
