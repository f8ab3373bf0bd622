package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// barrierWait bounds how long the final scan waits for the source's watch
// to report one of its barrier writes before it reads every node's stat
// instead.
const barrierWait = 10 * time.Second

// Flags of a path the tracker holds.
const (
	// dirtyPersistent: a create or update of a persistent node.
	dirtyPersistent uint8 = 1 << iota
	// dirtyDeleted: a delete (of whatever node was there).
	dirtyDeleted
)

// tracker follows a watch of the source's whole tree and keeps the paths
// it reports changed: the final scan re-reads those paths only, instead
// of one stat per node.
//
// The watch is a list of paths to look at, never a change feed: what is
// copied is always read from the source after the change. What makes the
// list complete is the barrier: the tool writes a token into its own
// fence node (catalog.MigrationFencePath) and waits until the watch
// reports that write and its responses' revision reaches the write's.
// Every backend's watch reports a path's change before any later one's, or
// in the same batch (in revision order: exactly on Raft and on the memory
// backend; on ZooKeeper the server sends a session's notifications in zxid
// order, and the watch reads the nodes they name, a batch at a time; a
// large batch goes out in several responses by path, and only the last
// carries the batch's revision), so once both have arrived every change
// made before the barrier has been reported. A watch that sends a Reset, ends, or reports
// an error is lost: the final scan then reads every node's stat.
type tracker struct {
	mu      sync.Mutex
	dirty   map[string]uint8
	lost    error
	seen    int64 // highest barrier token reported
	rev     int64 // highest revision the watch's responses reached
	token   int64 // highest barrier token written
	kick    chan struct{}
	ready   chan struct{}
	cancel  context.CancelFunc
	stopped chan struct{}
}

// startTracker opens the watch in the background (on ZooKeeper before 3.6
// the watch reads the whole tree first: it overlaps the copy rounds).
func startTracker(ctx context.Context, src core.MetadataBackend) *tracker {
	tctx, cancel := context.WithCancel(ctx)
	t := &tracker{dirty: map[string]uint8{}, kick: make(chan struct{}, 1), ready: make(chan struct{}), cancel: cancel, stopped: make(chan struct{})}
	go t.run(tctx, src)
	return t
}

func (t *tracker) run(ctx context.Context, src core.MetadataBackend) {
	defer close(t.stopped)
	ch, err := src.Watch(ctx, "/", 0)
	if err != nil {
		t.fail(fmt.Errorf("open a watch of the source: %w", err))
	}
	close(t.ready)
	if err != nil {
		return
	}
	for r := range ch {
		t.add(r)
	}
	t.fail(errors.New("the source's watch ended"))
}

// add records one watch response.
func (t *tracker) add(r core.WatchResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.signal()
	switch {
	case r.Err != nil:
		t.setLost(fmt.Errorf("the source's watch failed: %w", r.Err))
		return
	case r.Reset:
		t.setLost(errors.New("the source's watch was reset (its session expired, its connection was lost, or it fell behind)"))
		return
	}
	t.rev = max(t.rev, r.Revision)
	for _, ev := range r.Events {
		switch {
		case ev.Path == catalog.MigrationFencePath && ev.Type != core.EventDeleted:
			var m Marker
			if json.Unmarshal(ev.Data, &m) == nil && m.Barrier > t.seen {
				t.seen = m.Barrier
			}
		case isMarker(ev.Path):
		case ev.Type == core.EventDeleted:
			t.dirty[ev.Path] |= dirtyDeleted
		case ev.Stat.EphemeralOwner != 0:
			// Never copied; its parent's listing is not copied either.
		default:
			t.dirty[ev.Path] |= dirtyPersistent
		}
	}
}

func (t *tracker) setLost(err error) {
	if t.lost == nil {
		t.lost = err
	}
}

func (t *tracker) fail(err error) {
	t.mu.Lock()
	t.setLost(err)
	t.signal()
	t.mu.Unlock()
}

func (t *tracker) signal() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// open waits until the watch is open; it returns why it is not.
func (t *tracker) open(ctx context.Context) error {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// clear forgets the paths reported so far: called before a read that
// sees them.
func (t *tracker) clear() {
	t.mu.Lock()
	clear(t.dirty)
	t.mu.Unlock()
}

// barrier writes the next token into the fence (fence's content plus the
// token) and waits until the watch reports it. It then returns the paths
// reported since the last call and, of those, whether any is a change
// that matters to the copy (persistent, per the flags and known: a delete
// matters when known holds the path). An error means the tracker cannot
// be trusted (lost, or the token did not arrive within wait).
func (t *tracker) barrier(ctx context.Context, src core.MetadataBackend, fence Marker, known map[string]core.Node, wait time.Duration) ([]string, bool, error) {
	t.mu.Lock()
	t.token++
	fence.Barrier = t.token
	lost := t.lost
	t.mu.Unlock()
	if lost != nil {
		return nil, false, lost
	}
	st, err := core.Set(ctx, src, catalog.MigrationFencePath, markerData(fence), core.AnyVersion, core.Fence{})
	if err != nil {
		return nil, false, fmt.Errorf("write a barrier into the fence: %w", err)
	}
	// The token's event and the watch's revision at or past the token's
	// write: a watch may send one batch of changes in several responses
	// (the ZooKeeper watch, by path), the token in an early one, and only
	// the revision tells that the batch is whole.
	want := st.ModifyRevision
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		t.mu.Lock()
		reached := t.seen >= fence.Barrier && t.rev >= want
		lost := t.lost
		var paths []string
		relevant := false
		if lost == nil && reached {
			paths = make([]string, 0, len(t.dirty))
			for p, f := range t.dirty {
				paths = append(paths, p)
				if f&dirtyPersistent != 0 {
					relevant = true
				} else if _, ok := known[p]; ok {
					relevant = true
				}
			}
			clear(t.dirty)
		}
		t.mu.Unlock()
		if lost != nil {
			return nil, false, lost
		}
		if reached {
			sort.Slice(paths, func(i, j int) bool { return pathLess(paths[i], paths[j]) })
			return paths, relevant, nil
		}
		select {
		case <-t.kick:
		case <-timer.C:
			return nil, false, fmt.Errorf("the source's watch did not report the barrier written into %s within %v", catalog.MigrationFencePath, wait)
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// stop closes the watch.
func (t *tracker) stop() {
	t.cancel()
	<-t.stopped
}

// patch is the source's current state read by the tracker's paths: the
// last round's nodes (c.known) with every path in paths read again (with
// its data), a node gone taking what was known below it, and a node new
// (or created again) read with its whole subtree. The nodes not in paths
// are not read: the watch reported no change of them.
func (c *copier) patch(ctx context.Context, src core.MetadataBackend, paths []string) ([]core.Node, int64, error) {
	rs, err := readBatches(ctx, src, len(paths), func(i int) string { return paths[i] }, core.ReadOptions{})
	if err != nil {
		return nil, 0, err
	}
	idx := make(map[string]int, len(c.known))
	for i, k := range c.known {
		idx[k.Path] = i
	}
	gone := map[string]bool{}
	upd := map[string]core.Node{}
	var roots []string
	for i, p := range paths {
		r := &rs[i]
		k, known := idx[p]
		switch {
		case errors.Is(r.Err, core.ErrNotFound):
			if known {
				gone[p] = true
			}
		case r.Err != nil:
			return nil, 0, fmt.Errorf("read %s: %w", p, r.Err)
		case !known:
			roots = append(roots, p)
		case r.Node.Stat.CreateRevision != c.known[k].Stat.CreateRevision:
			gone[p] = true
			roots = append(roots, p)
		default:
			upd[p] = r.Node
		}
	}
	// A root below another root is read with it.
	isRoot := make(map[string]bool, len(roots))
	for _, p := range roots {
		isRoot[p] = true
	}
	top := roots[:0]
	for _, p := range roots {
		under := false
		for q := parentOf(p); q != "/"; q = parentOf(q) {
			if isRoot[q] {
				under = true
				break
			}
		}
		if !under {
			top = append(top, p)
		}
	}
	out := make([]core.Node, 0, len(c.known))
	for _, k := range c.known {
		if gone[k.Path] || (k.Path != "/" && gone[parentOf(k.Path)]) {
			gone[k.Path] = true
			continue
		}
		if n, ok := upd[k.Path]; ok {
			out = append(out, n)
		} else {
			out = append(out, k)
		}
	}
	if len(top) > 0 {
		fresh, _, err := scan(ctx, src, top...)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, fresh...)
		sort.Slice(out, func(i, j int) bool { return pathLess(out[i].Path, out[j].Path) })
	}
	var rev int64
	for _, n := range out {
		rev = max(rev, n.Stat.CreateRevision, n.Stat.ModifyRevision)
	}
	return out, rev, nil
}

// watchedScan is what a final scan by the tracker did.
type watchedScan struct {
	fin   Round
	eph   int
	read  bool // a pass read the source (eph is its count)
	paths int  // paths the watch reported, over every pass
}

// watchedFinal is the final scan by the tracker: a barrier, then a read
// of the paths the watch reported changed since the checked round (or
// the last pass), applied to the target as a round, until a barrier
// finds no change that matters. The source's state at that barrier is
// then the target's: a path never reported was not changed since the
// checked round read it, and a path read in the last pass was not
// changed between that read and the barrier.
//
// why (err nil) says the tracker could not be used (no tracker: both
// nil): the caller reads every node's stat instead; what a pass already
// applied stays applied (it was read from the source). err is a failure
// of the migration (a read of the source, a write to the target, a
// source that does not stop changing).
func (c *copier) watchedFinal(ctx context.Context, src core.MetadataBackend, trk *tracker, fence Marker, r int, now int64, say func(string, ...any)) (ws watchedScan, why, err error) {
	if trk == nil {
		return ws, nil, nil
	}
	ws.fin = Round{Round: r, Revision: now}
	changed := 0
	for pass := 1; pass <= finalPasses; pass++ {
		paths, relevant, berr := trk.barrier(ctx, src, fence, c.prev, barrierWait)
		if berr != nil {
			return ws, berr, nil
		}
		if !relevant {
			ws.fin.Changed = changed
			return ws, nil, nil
		}
		ws.paths += len(paths)
		fin, eph, _, rerr := c.round(ctx, src, r, readWatched, paths)
		if rerr != nil {
			return ws, nil, rerr
		}
		changed += fin.Changed
		ws.fin, ws.eph, ws.read = fin, eph, true
		say("final scan, pass %d: the watch reported %d paths; %d nodes changed", pass, len(paths), fin.Changed)
	}
	return ws, nil, fmt.Errorf("%w: the source kept changing after the fence during %d passes (a writer that does not honour %s?)", core.ErrUnavailable, finalPasses, catalog.MigrationFencePath)
}
