// Package image holds the leader coordinator's in-process view of the
// metadata: a copy of the backend's tree, fed by the backend's watch stream
// (from a snapshot's revision) and by the coordinator's own writes, so that
// catalog reads cost a map lookup instead of a plugin hop.
//
// An Image implements core.Reader, so the catalog reads from it with the
// same code that reads from a backend. Reads are as fresh as the image:
// every change the image has applied, including the coordinator's own
// writes as soon as they return (read-your-writes). They are not
// linearizable with respect to other writers; a caller that needs that
// waits for a revision (WaitRevision) or reads the backend.
package image

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/retry"
)

// Options configure an Image.
type Options struct {
	// Prefix is the subtree the image follows; default "/".
	Prefix string
	// RetryBackoff is the pause before re-synchronising after a failed
	// watch or snapshot (other than ErrCompacted, which resyncs at once);
	// default 100ms, doubling up to 2s.
	RetryBackoff time.Duration
	// Logf, when set, receives one line per resync and failure.
	Logf func(format string, args ...any)
	// OnChange, when set, is called (without the image's lock held) after
	// each applied batch with the paths it touched. It must be fast.
	OnChange func(paths []string)
}

type ownWrite struct {
	rev     int64
	ops     []core.Op
	results []core.OpResult
}

// Image is the in-process copy of a backend's tree. Build it with New, feed
// it with Run. Every method is safe for concurrent use.
type Image struct {
	opts Options

	mu         sync.RWMutex
	nodes      *tree            // see tree
	tombstones map[string]int64 // path -> revision of a delete not yet seen on the stream
	watched    int64            // revision the watch stream has delivered everything up to
	own        []ownWrite       // own writes newer than watched, re-applied after a reset
	ready      bool
	resyncs    int64
	changed    chan struct{} // closed and replaced on every change of watched or ready
}

// New returns an empty image. It is not ready until Run has applied a first
// snapshot.
func New(opts Options) *Image {
	if opts.Prefix == "" {
		opts.Prefix = "/"
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = 100 * time.Millisecond
	}
	return &Image{opts: opts, nodes: newTree(opts.Prefix), tombstones: map[string]int64{}, changed: make(chan struct{})}
}

// ErrNotReady is returned by reads before the first snapshot is applied
// (wrapping core.ErrUnavailable).
var ErrNotReady = fmt.Errorf("%w: metadata image not loaded yet", core.ErrUnavailable)

// Run follows b until ctx ends: it takes a Snapshot of the prefix, applies
// it, then watches from the snapshot's revision on (without exact history:
// it watches from revision 1, and the watch's first Reset is the load; see
// open). On ErrCompacted (the
// image fell behind an exact-history backend's retention) it takes a new
// snapshot and resumes; on a Reset response (backends without exact
// history) it replaces its state; on other failures it retries with
// backoff. It returns ctx's error, or ErrClosed when the backend closes.
func (im *Image) Run(ctx context.Context, b core.MetadataBackend) error {
	wait := retry.New(im.opts.RetryBackoff, 2*time.Second)
	for {
		err := im.follow(ctx, b)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, core.ErrClosed) {
			return err
		}
		im.mu.Lock()
		im.resyncs++
		im.mu.Unlock()
		if errors.Is(err, core.ErrCompacted) {
			im.logf("metadata image: %v; taking a new snapshot", err)
			wait.Reset()
			continue
		}
		d := wait.Next()
		im.logf("metadata image: %v; resynchronising in %v", err, d)
		if !retry.Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

func (im *Image) follow(ctx context.Context, b core.MetadataBackend) error {
	ch, err := im.open(ctx, b)
	if err != nil {
		return err
	}
	// pages holds a Reset that comes in pages (core.WatchResponse.Partial)
	// until its last page: the state it replaces stays in place until then.
	var pages *tree
	for resp := range ch {
		if resp.Err != nil {
			return fmt.Errorf("watch %s: %w", im.opts.Prefix, resp.Err)
		}
		if resp.Reset {
			if pages == nil {
				pages = newTree(im.opts.Prefix)
			}
			for _, ev := range resp.Events {
				if ev.Type != core.EventDeleted {
					put(im, pages, core.Node{Path: ev.Path, Data: ev.Data, Stat: ev.Stat})
				}
			}
			if !resp.Partial {
				im.install(pages, resp.Revision)
				pages = nil
			}
			continue
		}
		im.applyEvents(resp.Events, resp.Revision)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: watch %s ended", core.ErrUnavailable, im.opts.Prefix)
}

// open loads the image and returns the watch that follows it. On a
// backend with exact history: a snapshot of the prefix (in pages, on a
// backend that streams: no whole copy of the tree is held beside the
// image), then a watch from its revision on. On a backend without (no
// history to resume from): a watch from revision 1, whose first response,
// a Reset (in pages on a large tree), is the load: the tree is read once.
func (im *Image) open(ctx context.Context, b core.MetadataBackend) (<-chan core.WatchResponse, error) {
	if !b.Capabilities().ExactHistory {
		ch, err := b.Watch(ctx, im.opts.Prefix, 1)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", im.opts.Prefix, err)
		}
		return ch, nil
	}
	nodes := newTree(im.opts.Prefix)
	rev := int64(0)
	err := core.StreamSnapshot(ctx, b, im.opts.Prefix, 0, func(r int64, page []core.Node) error {
		rev = r
		for _, n := range page {
			put(im, nodes, core.Node{Path: n.Path, Data: nilIfEmpty(n.Data), Stat: n.Stat}) // put copies the data
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", im.opts.Prefix, err)
	}
	im.install(nodes, rev)
	ch, err := b.Watch(ctx, im.opts.Prefix, rev+1)
	if err != nil {
		return nil, fmt.Errorf("watch %s from %d: %w", im.opts.Prefix, rev+1, err)
	}
	return ch, nil
}

func (im *Image) logf(format string, args ...any) {
	if im.opts.Logf != nil {
		im.opts.Logf(format, args...)
	}
}

// put records node n in the node tree t (with its missing parents, empty
// at revision 0).
func put(im *Image, t *tree, n core.Node) {
	t.set(n.Path, n.Data, n.Stat, maxRev(n.Stat.ModifyRevision, n.Stat.CreateRevision), 0)
}

// nilIfEmpty returns b, nil when empty.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// install makes t, the nodes at revision rev, the image's state, then
// re-applies the own writes newer than rev.
func (im *Image) install(t *tree, rev int64) {
	im.mu.Lock()
	im.nodes = t
	im.tombstones = map[string]int64{}
	im.setWatchedLocked(rev)
	for _, w := range im.own {
		im.applyOwnLocked(w, false)
	}
	im.ready = true
	im.signalLocked()
	im.mu.Unlock()
	if im.opts.OnChange != nil {
		im.opts.OnChange([]string{im.opts.Prefix})
	}
}

func maxRev(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// deleteLocked deletes path and its subtree, with a tombstone at rev for
// each node deleted.
func (im *Image) deleteLocked(path string, rev int64) {
	im.nodes.remove(path, func(p string) { im.tombstones[p] = rev })
}

func (im *Image) applyEvents(events []core.WatchEvent, rev int64) {
	var touched []string
	im.mu.Lock()
	for _, ev := range events {
		if !core.HasPrefixPath(ev.Path, im.opts.Prefix) {
			continue
		}
		if r, ok := im.nodes.rev(ev.Path); ok && r >= ev.Revision && ev.Type != core.EventDeleted {
			continue // an own write already applied a newer state
		}
		// A delete at a later revision than the event wins. One at the
		// event's own revision does not: it is an earlier op of the same
		// transaction (a delete then a create of the path), and the
		// later event is the path's state after it.
		if t, ok := im.tombstones[ev.Path]; ok && t > ev.Revision {
			continue
		}
		switch ev.Type {
		case core.EventDeleted:
			if r, ok := im.nodes.rev(ev.Path); ok && r > ev.Revision {
				continue
			}
			im.deleteLocked(ev.Path, ev.Revision)
		default:
			im.nodes.set(ev.Path, ev.Data, ev.Stat, ev.Revision, ev.Revision)
			delete(im.tombstones, ev.Path)
		}
		if im.opts.OnChange != nil {
			touched = append(touched, ev.Path)
		}
	}
	if rev < im.watched {
		rev = im.watched
	}
	im.setWatchedLocked(rev)
	im.signalLocked()
	im.mu.Unlock()
	if len(touched) > 0 {
		im.opts.OnChange(touched)
	}
}

func (im *Image) setWatchedLocked(rev int64) {
	im.watched = rev
	kept := im.own[:0]
	for _, w := range im.own {
		if w.rev > rev {
			kept = append(kept, w)
		}
	}
	im.own = kept
	for p, t := range im.tombstones {
		if t <= rev {
			delete(im.tombstones, p)
		}
	}
}

func (im *Image) signalLocked() {
	close(im.changed)
	im.changed = make(chan struct{})
}

// ApplyWrite applies the writer's own successful transaction (ops and the
// backend's result) at once, so that the writer reads its writes before the
// watch stream delivers them. The stream's later events for the same
// changes are recognised by revision and not applied twice. Pass it as
// catalog.Options.OnWrite. ops is not retained.
func (im *Image) ApplyWrite(ops []core.Op, res core.TxnResult) {
	w := ownWrite{rev: res.Revision, ops: make([]core.Op, len(ops)), results: res.Results}
	copy(w.ops, ops)
	var touched []string
	im.mu.Lock()
	// At the watched revision too: a backend whose watch delivers one
	// revision's changes in several steps (ZooKeeper: a multi's deletes
	// come as separate notifications, each read back) may have applied
	// part of it; the rest must not wait for the watch. Re-applying what
	// the watch already applied changes nothing (the per-node revisions
	// and tombstones decide).
	if res.Revision >= im.watched {
		im.own = append(im.own, w)
		im.applyOwnLocked(w, false)
		if im.opts.OnChange != nil {
			for i := range ops {
				touched = append(touched, pathOf(w, i))
			}
		}
	} else if im.applyOwnLocked(w, true) && im.opts.OnChange != nil {
		// Below the watched revision the watch has delivered the write's
		// effects on every node it knows of, but a node this image holds
		// from an own create that the watch never saw (created and
		// deleted between two of its looks, by this writer's drop) gets
		// no delete from the watch: the write's deletes are applied
		// anyway. A node created again since the delete keeps its newer
		// state (revisions decide).
		for i, op := range ops {
			if op.Type == core.OpDelete {
				touched = append(touched, pathOf(w, i))
			}
		}
	}
	im.mu.Unlock()
	if len(touched) > 0 {
		im.opts.OnChange(touched)
	}
}

func pathOf(w ownWrite, i int) string {
	if i < len(w.results) && w.results[i].Path != "" {
		return w.results[i].Path
	}
	return w.ops[i].Path
}

// applyOwnLocked applies own write w (only its deletes with deletesOnly)
// and reports whether it changed the image.
func (im *Image) applyOwnLocked(w ownWrite, deletesOnly bool) bool {
	changed := false
	for i, op := range w.ops {
		path := pathOf(w, i)
		if !core.HasPrefixPath(path, im.opts.Prefix) || (deletesOnly && op.Type != core.OpDelete) {
			continue
		}
		var stat core.Stat
		if i < len(w.results) {
			stat = w.results[i].Stat
		}
		switch op.Type {
		case core.OpCreate, core.OpSet:
			if r, ok := im.nodes.rev(path); ok && r > w.rev {
				continue
			}
			if t, ok := im.tombstones[path]; ok && t > w.rev {
				continue
			}
			if stat.ModifyRevision == 0 && stat.CreateRevision == 0 {
				stat.CreateRevision, stat.ModifyRevision = w.rev, w.rev
			}
			im.nodes.set(path, nilIfEmpty(op.Data), stat, w.rev, w.rev)
			delete(im.tombstones, path)
		case core.OpDelete:
			r, ok := im.nodes.rev(path)
			if !ok {
				// Not in the image yet: its create (an own write still
				// on its way back, or a watch event to come) must not
				// show it after this delete.
				if t, had := im.tombstones[path]; !had || t < w.rev {
					im.tombstones[path] = w.rev
				}
				continue
			}
			if r > w.rev {
				continue
			}
			im.deleteLocked(path, w.rev)
		}
		changed = true
	}
	return changed
}

// Revision returns the revision the watch stream has delivered everything
// up to.
func (im *Image) Revision() int64 {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.watched
}

// Resyncs returns how many times the image re-synchronised (after
// ErrCompacted, a failed watch or a failed snapshot).
func (im *Image) Resyncs() int64 {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.resyncs
}

// Ready reports whether a first snapshot has been applied.
func (im *Image) Ready() bool {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.ready
}

// WaitReady blocks until a first snapshot is applied or ctx ends (its
// error is returned).
func (im *Image) WaitReady(ctx context.Context) error {
	return im.wait(ctx, func() bool { return im.ready })
}

// WaitRevision blocks until the watch stream has delivered every change up
// to rev, or ctx ends (its error is returned). On backends without exact
// history the stream's revision may jump; it never goes back.
func (im *Image) WaitRevision(ctx context.Context, rev int64) error {
	return im.wait(ctx, func() bool { return im.ready && im.watched >= rev })
}

func (im *Image) wait(ctx context.Context, cond func() bool) error {
	for {
		im.mu.RLock()
		ok, ch := cond(), im.changed
		im.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Changed returns a channel closed at the next change of the image.
func (im *Image) Changed() <-chan struct{} {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.changed
}

// GetMany implements core.Reader from the image. It fails with ErrNotReady
// before the first snapshot; per-path errors are ErrNotFound and
// ErrInvalidPath. Returned data is a copy.
func (im *Image) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	return im.getMany(ctx, paths, opts, true)
}

// GetManyShared is GetMany without the copy: the data returned is the
// image's own and must not be modified (the catalog only decodes it). It
// saves an allocation and a copy per node on the catalog's hot reads. The
// image never writes to it again (a later change of the node writes a new
// record); as long as the caller holds it, it keeps the arena chunk it
// lies in alive (up to 128 KiB), so it is for decoding, not for keeping.
func (im *Image) GetManyShared(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	return im.getMany(ctx, paths, opts, false)
}

func (im *Image) getMany(ctx context.Context, paths []string, opts core.ReadOptions, copyData bool) ([]core.GetResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]core.GetResult, len(paths))
	im.mu.RLock()
	defer im.mu.RUnlock()
	if !im.ready {
		return nil, ErrNotReady
	}
	for i, p := range paths {
		out[i].Node.Path = p
		id, rec, ok := im.nodes.find(p)
		if !ok {
			if err := core.ValidatePath(p); err != nil {
				out[i].Err = err
			} else {
				out[i].Err = fmt.Errorf("%w: %s", core.ErrNotFound, p)
			}
			continue
		}
		r := decode(rec)
		r.stat.NumChildren = int32(im.nodes.numChildren(id))
		out[i].Node.Stat = r.stat
		switch {
		case opts.NoData || r.data == nil:
		case copyData:
			out[i].Node.Data = append([]byte(nil), r.data...)
		default:
			out[i].Node.Data = r.data
		}
	}
	return out, nil
}

// Children implements core.Reader from the image. Errors: ErrNotReady,
// ErrNotFound, ErrInvalidPath.
func (im *Image) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	if err := ctx.Err(); err != nil {
		return nil, core.Stat{}, err
	}
	im.mu.RLock()
	defer im.mu.RUnlock()
	if !im.ready {
		return nil, core.Stat{}, ErrNotReady
	}
	t := im.nodes
	id, rec, ok := t.find(path)
	if !ok {
		if err := core.ValidatePath(path); err != nil {
			return nil, core.Stat{}, err
		}
		return nil, core.Stat{}, fmt.Errorf("%w: %s", core.ErrNotFound, path)
	}
	// The names are copied out of the arena into one string (of their
	// exact size), so that a caller that keeps a name keeps that
	// listing's bytes alive, not a chunk of the image.
	kids := t.children(id)
	var bufs [512]byte
	var ends0 [64]int32
	buf, ends := bufs[:0], ends0[:0]
	if len(kids) > len(ends0) {
		buf, ends = make([]byte, 0, 8*len(kids)), make([]int32, 0, len(kids))
	}
	for _, c := range kids {
		buf = append(buf, t.name(c)...)
		ends = append(ends, int32(len(buf)))
	}
	all := string(buf)
	names := make([]string, len(kids))
	at := int32(0)
	for i, end := range ends {
		names[i] = all[at:end]
		at = end
	}
	st := decode(rec).stat
	st.NumChildren = int32(len(kids))
	return names, st, nil
}

// Snapshot implements core.Reader from the image: every node at or below
// prefix, sorted by path, at the image's watched revision. Errors:
// ErrNotReady, ErrInvalidPath. Returned data is a copy.
func (im *Image) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	snap, err := im.snapshot(ctx, prefix)
	for i := range snap.Nodes {
		snap.Nodes[i].Data = append([]byte(nil), snap.Nodes[i].Data...)
	}
	return snap, err
}

// SnapshotShared is Snapshot without the copies: the data returned is the
// image's own and must not be modified (the coordinator's bucket states
// only decode it). On a large subtree it saves a copy of every node's
// data. As with GetManyShared, the data keeps its arena chunks alive
// while it is held. The paths are the snapshot's own.
func (im *Image) SnapshotShared(ctx context.Context, prefix string) (core.Snapshot, error) {
	return im.snapshot(ctx, prefix)
}

// snapshot collects the subtree under the read lock, with the nodes' data
// shared (the image never changes a node's data in place: a change
// appends a new record to the arena, see tree), and copies and sorts
// nothing while it holds the lock, so that a large subtree holds the
// image's writers back only for the walk.
func (im *Image) snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	if err := core.ValidatePath(prefix); err != nil {
		return core.Snapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return core.Snapshot{}, err
	}
	im.mu.RLock()
	if !im.ready {
		im.mu.RUnlock()
		return core.Snapshot{}, ErrNotReady
	}
	// Under the lock, no allocation per node and no decoding: a node is
	// recorded by its record's bytes (in the arena, immutable, kept alive
	// by the slice) and its number of children, in the walk's order (a
	// parent, then its children's subtrees in name order); the records
	// are decoded after.
	type item struct {
		rec []byte
		nk  int32
	}
	t := im.nodes
	var items []item
	var walk func(id uint32)
	walk = func(id uint32) {
		items = append(items, item{t.record(id), int32(t.numChildren(id))})
		for _, c := range t.children(id) {
			walk(c)
		}
	}
	if id, ok := t.lookup(prefix); ok {
		walk(id)
	}
	rev := im.watched
	im.mu.RUnlock()
	nodes := make([]core.Node, len(items))
	for i, it := range items {
		r := decode(it.rec)
		r.stat.NumChildren = it.nk
		nodes[i] = core.Node{Path: string(r.path), Data: r.data, Stat: r.stat}
	}
	// The walk's order is the paths' order unless a name holds a byte
	// below '/' ("a-b" sorts before "a/c").
	byPath := func(a, b core.Node) int { return strings.Compare(a.Path, b.Path) }
	if !slices.IsSortedFunc(nodes, byPath) {
		slices.SortFunc(nodes, byPath)
	}
	return core.Snapshot{Revision: rev, Nodes: nodes}, nil
}

// Len returns the number of nodes in the image.
func (im *Image) Len() int {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.nodes.n
}

// CountChildren returns the number of children of path (0 when missing).
func (im *Image) CountChildren(path string) int {
	im.mu.RLock()
	defer im.mu.RUnlock()
	if id, ok := im.nodes.lookup(path); ok {
		return im.nodes.numChildren(id)
	}
	return 0
}

var _ core.Reader = (*Image)(nil)

// String describes the image for logs.
func (im *Image) String() string {
	im.mu.RLock()
	defer im.mu.RUnlock()
	var b strings.Builder
	fmt.Fprintf(&b, "image{prefix %s, %d nodes, revision %d, ready %v}", im.opts.Prefix, im.nodes.n, im.watched, im.ready)
	return b.String()
}
