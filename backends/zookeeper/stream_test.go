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
	fixed := counterTree(t, ctx, b, writers, nodes)

	commits, errs, stopWriters := counterWriters(t, ctx, o, writers)
	defer stopWriters()
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

// TestWatchUnderWritesAtScale: a watch from a revision over a tree of
// tens of thousands of nodes, opened while writers commit transactions
// that each move a counter and create a child the counter counts, is a
// streamed watch (its own connection, no copy of the tree): its Reset
// comes in several pages at one revision and is the state of one zxid
// (every counter equals its children's count); the events after it, applied
// to the Reset, end equal to a snapshot taken once the writers stop.
func TestWatchUnderWritesAtScale(t *testing.T) {
	nodes := 20_000
	if testing.Short() {
		nodes = 5_000
	}
	o := testOptions(t)
	b := open(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const writers = 2
	counterTree(t, ctx, b, writers, nodes)
	var opened atomic.Int32
	streamWatchConn = func(*snapConn) { opened.Add(1) }
	defer func() { streamWatchConn = nil }()

	commits, errs, stopWriters := counterWriters(t, ctx, o, writers)
	defer stopWriters()
	// invariant checks that every counter equals its children's count.
	invariant := func(state map[string]string, what string) {
		t.Helper()
		counters, children := map[string]int{}, map[string]int{}
		for p, d := range state {
			switch {
			case strings.HasPrefix(p, "/t/a-counter-"):
				v, err := strconv.Atoi(d)
				if err != nil {
					t.Fatal(err)
				}
				counters[strings.TrimPrefix(p, "/t/a-counter-")] = v
			case strings.HasPrefix(p, "/t/z-") && strings.Count(p, "/") == 3:
				children[strings.TrimPrefix(core.ParentPath(p), "/t/z-")]++
			}
		}
		for w := 0; w < writers; w++ {
			k := strconv.Itoa(w)
			if counters[k] != children[k] {
				t.Fatalf("%s: writer %d's counter is %d but %d of its children are there: not one zxid's state", what, w, counters[k], children[k])
			}
		}
	}
	for commits.Load() < 10 {
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("%d transactions committed: %v", commits.Load(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	ch, err := b.Watch(ctx, "/t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Load() != 1 {
		t.Fatalf("the watch opened %d connections of its own, want 1 (a streamed watch)", opened.Load())
	}
	next := func(what string) core.WatchResponse {
		t.Helper()
		select {
		case r, ok := <-ch:
			if !ok || r.Err != nil {
				t.Fatalf("watch ended (%v) waiting for %s", r.Err, what)
			}
			return r
		case <-ctx.Done():
			t.Fatalf("no %s: %v", what, ctx.Err())
		}
		return core.WatchResponse{}
	}
	state := map[string]string{}
	before := commits.Load()
	pages := 0
	var rev int64
	for {
		r := next("a page of the Reset")
		if !r.Reset {
			t.Fatalf("response %d is not a page of the Reset", pages+1)
		}
		if pages > 0 && r.Revision != rev {
			t.Fatalf("page %d at revision %d, the first at %d", pages+1, r.Revision, rev)
		}
		rev = r.Revision
		pages++
		for _, ev := range r.Events {
			state[ev.Path] = string(ev.Data)
		}
		if !r.Partial {
			break
		}
	}
	if pages < 2 {
		t.Fatalf("the Reset of %d nodes came in %d page, want several", len(state), pages)
	}
	invariant(state, fmt.Sprintf("the Reset at revision %d", rev))
	if commits.Load() == before {
		t.Fatal("no transaction committed while the Reset was read (the test proves nothing)")
	}
	t.Logf("Reset: %d nodes in %d pages at zxid %d; %d transactions committed meanwhile", len(state), pages, rev, commits.Load()-before)
	// Follow while the writers go on, then until equal to a snapshot.
	for commits.Load() < before+200 {
		r := next("an event")
		for _, ev := range r.Events {
			if ev.Type == core.EventDeleted {
				delete(state, ev.Path)
			} else {
				state[ev.Path] = string(ev.Data)
			}
		}
	}
	stopWriters()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	snap, err := b.Snapshot(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range snap.Nodes {
		want[n.Path] = string(n.Data)
	}
	equal := func() bool {
		if len(state) != len(want) {
			return false
		}
		for k, v := range want {
			if s, ok := state[k]; !ok || s != v {
				return false
			}
		}
		return true
	}
	for !equal() {
		r := next(fmt.Sprintf("the events up to the final snapshot (%d nodes; the watch's copy has %d)", len(want), len(state)))
		for _, ev := range r.Events {
			if ev.Type == core.EventDeleted {
				delete(state, ev.Path)
			} else {
				state[ev.Path] = string(ev.Data)
			}
		}
	}
	invariant(state, "the copy the events built")
}

// counterWriters starts writers that each commit, until stopped,
// transactions moving their counter (/t/a-counter-W) and creating a child
// it counts (/t/z-W/cNNNNNN). stop ends them and waits (it may be called
// more than once); a writer's error goes to errs.
func counterWriters(t *testing.T, ctx context.Context, o Options, writers int) (commits *atomic.Int64, errs chan error, stop func()) {
	var halt atomic.Bool
	var wg sync.WaitGroup
	commits = new(atomic.Int64)
	errs = make(chan error, writers)
	for w := 0; w < writers; w++ {
		c := open(t, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 1; !halt.Load(); j++ {
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
	return commits, errs, func() {
		halt.Store(true)
		wg.Wait()
	}
}

// counterTree creates the tree the counter writers write to, nodes nodes
// in all, and returns how many: /t, the writers' counters (/t/a-counter-W,
// early in path order) and families (/t/z-W, late), and a fixed part,
// /t/m/dNNNN/nNNN, 100 leaves per directory.
func counterTree(t *testing.T, ctx context.Context, b *Backend, writers, nodes int) int {
	t.Helper()
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
	return fixed
}
