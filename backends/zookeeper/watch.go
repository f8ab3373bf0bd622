package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
)

// maxPendingEvents is how many undelivered events a watch holds for a slow
// consumer before it replaces them all with one Reset of the current state.
const maxPendingEvents = 4096

// Watch delivers the changes at or below prefix.
//
// On ZooKeeper 3.6 and later it is a streamed watch (watchstream.go): a
// connection of its own with a persistent recursive watch, no copy of the
// tree, a Reset in pages. A server that refuses persistent recursive
// watches (before 3.6) gets the watch described here (watchOneShot).
//
// ZooKeeper before 3.6 has no change feed, only one-shot watches, so that
// watch keeps a copy of the subtree: it reads every node with a data watch
// and a child watch, re-reads a node (re-arming) when its watch fires, and
// reports the difference. What is promised (by both; the streamed watch
// differs where watchstream.go says):
//
//   - Convergence: after the last change to a path, the consumer receives
//     an event (or a Reset) carrying that path's latest state (or its
//     deletion). Every path's events arrive in the order its states were
//     observed.
//   - Coalescing: several changes to a node between two reads are seen as
//     one event with the latest data; a node created and deleted between
//     two reads may not be seen at all. There is no exact history
//     (Capabilities.ExactHistory is false).
//   - fromRevision > 0 is answered with a first Reset response: the whole
//     current state of the prefix, one EventCreated per node; 0 starts with
//     the next change.
//   - After the session expires (watches are lost with it) the watch
//     re-reads everything in the new session and sends a Reset. After a
//     disconnection within the session the library re-registers the
//     watches and the server reports what changed meanwhile.
//   - Revisions: an event's Stat is the node's true stat; its Revision is
//     the zxid of the state it carries: for a create or update the node's
//     czxid or mzxid; for a delete the pzxid of a read of the parent's
//     children that no longer lists the node (at or after the delete, and
//     before any later create of the path), or the czxid of the path's next
//     incarnation when that was read instead. Revisions are never raised:
//     a consumer that also applies its own writes (image.ApplyWrite)
//     compares them with its writes' revisions. Events are delivered in the
//     order observed; a batch whose events are not in revision order goes
//     out as several responses, each in revision order, the last carrying
//     the batch's highest revision and the others the revision already
//     delivered; responses' revisions never decrease. A consumer that falls
//     more than 4096 events behind gets one Reset instead.
//
// The channel is closed when ctx ends or the backend closes. Errors:
// ErrInvalidPath, ErrUnavailable (no connection or watch could be opened;
// before 3.6, the first read failed), ErrClosed.
func (b *Backend) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	if b.isClosed() {
		return nil, core.ErrClosed
	}
	if err := core.ValidatePath(prefix); err != nil {
		return nil, err
	}
	// The streamed watch's connection syncs its own server (openSnapConn).
	ch, err := b.openStreamWatch(ctx, prefix, fromRevision)
	if err == nil {
		return ch, nil
	}
	if !errors.Is(err, errNoRecursiveWatch) {
		return nil, b.closedErr(err)
	}
	b.oneShotWarned.Do(func() {
		b.warnf("zookeeper: the server has no persistent recursive watches (ZooKeeper before 3.6): the watch of %s falls back to one-shot watches, "+
			"keeps a copy of the subtree in this process and sends a Reset as one response; ZooKeeper 3.6 or later streams both (docs/zookeeper.md, Watches)", prefix)
	})
	return b.watchOneShot(ctx, prefix, fromRevision)
}

// watchOneShot is Watch on a server without persistent recursive watches
// (before 3.6): the model described above.
func (b *Backend) watchOneShot(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{
		b: b, prefix: prefix, ctx: wctx, cancel: cancel,
		out:   make(chan core.WatchResponse, 16),
		kick:  make(chan struct{}, 1),
		model: map[string]core.Node{},
		kids:  map[string]map[string]bool{},
	}
	// Registered before the first read, so no event of a watch it arms
	// can be missed.
	b.addWatcher(w)
	if err := b.syncRevision(wctx); err != nil {
		b.removeWatcher(w)
		cancel()
		return nil, err
	}
	if err := w.load(); err != nil {
		b.removeWatcher(w)
		cancel()
		return nil, b.closedErr(err)
	}
	if fromRevision > 0 {
		w.queue(w.resetResponse())
	}
	go w.run()
	return w.out, nil
}

type watcher struct {
	b      *Backend
	prefix string
	ctx    context.Context
	cancel context.CancelFunc
	out    chan core.WatchResponse

	qmu   sync.Mutex
	fired []zk.Event
	kick  chan struct{}

	model   map[string]core.Node       // every node at or below prefix
	kids    map[string]map[string]bool // children names per node
	lastRev int64                      // last revision delivered or queued
	pending []core.WatchResponse
	npend   int
	// prefixGone: the prefix was deleted; an exists watch must be armed.
	prefixGone bool
}

// forward is where a one-shot watch's channel would be read. The events
// reach the watcher through the connection's event callback instead (see
// Backend.onEvent, push), so that a watch over a large subtree costs no
// goroutine per armed watch; the library's channel has room for its one
// event and is dropped.
func (w *watcher) forward(<-chan zk.Event) {}

// push queues a node event for the watcher; it is called from the
// library's receive goroutine and must not block.
func (w *watcher) push(ev zk.Event) {
	w.qmu.Lock()
	w.fired = append(w.fired, ev)
	w.qmu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// concerns reports whether a node event at znode path zp may matter to the
// watcher: at or below the prefix.
func (w *watcher) concerns(zp string) bool {
	if zp != w.b.root && !strings.HasPrefix(zp, w.b.root+"/") {
		return false
	}
	return core.HasPrefixPath(w.b.rel(zp), w.prefix)
}

// arm reads node p with a data and a child watch. found is false when the
// node does not exist (then an exists watch is armed if p is the prefix).
// pzxid is the children list's: a child deleted at or before it is not in
// the list, and none created after it is.
func (w *watcher) arm(p string) (n core.Node, kids []string, pzxid int64, found bool, err error) {
	// The closures below write only their own locals' copies: a request
	// abandoned by a cancelled context may still complete in the
	// background, so nothing it writes may be touched by the caller.
	b := w.b
	zp := b.zpath(p)
	type dataRes struct {
		data []byte
		st   *zk.Stat
		ch   <-chan zk.Event
	}
	var dr dataRes
	err = b.read(w.ctx, func() error {
		data, st, ch, err := b.conn.GetW(zp)
		if err == nil {
			dr = dataRes{data, st, ch}
		}
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		if p == w.prefix {
			var ok bool
			var ech <-chan zk.Event
			err = b.read(w.ctx, func() error {
				found, _, ch, err := b.conn.ExistsW(zp)
				if err == nil {
					ok, ech = found, ch
				}
				return err
			})
			if err != nil {
				return core.Node{}, nil, 0, false, err
			}
			w.forward(ech)
			if ok { // created in between: read it again
				return w.arm(p)
			}
		}
		return core.Node{}, nil, 0, false, nil
	}
	if err != nil {
		return core.Node{}, nil, 0, false, err
	}
	w.forward(dr.ch)
	var cst *zk.Stat
	var cch <-chan zk.Event
	err = b.read(w.ctx, func() error {
		k, st, ch, err := b.conn.ChildrenW(zp)
		if err == nil {
			kids, cst, cch = k, st, ch
		}
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return core.Node{}, nil, 0, false, nil // deleted in between: its data watch reports it
	}
	if err != nil {
		return core.Node{}, nil, 0, false, err
	}
	w.forward(cch)
	st := dr.st
	if cst.Mzxid == st.Mzxid {
		st = cst // the later stat
	}
	data := dr.data
	if len(data) == 0 {
		data = nil
	}
	return core.Node{Path: p, Data: data, Stat: convStat(st)}, kids, cst.Pzxid, true, nil
}

// listedGone marks, in loadTree's pzxids, a node its parent listed that
// was gone when it was read.
const listedGone = -1

// loadTree arms and reads every node at or below p, level by level. pz
// holds each node's children list pzxid (arm), and listedGone for a node
// listed by its parent but gone when read.
func (w *watcher) loadTree(p string) (nodes map[string]core.Node, pz map[string]int64, err error) {
	nodes = map[string]core.Node{}
	pz = map[string]int64{}
	level := []string{p}
	for len(level) > 0 {
		type res struct {
			n     core.Node
			k     []string
			pzxid int64
			found bool
		}
		rs := make([]res, len(level))
		err := parallel(len(level), func(i int) error {
			n, k, pzxid, found, err := w.arm(level[i])
			rs[i] = res{n, k, pzxid, found}
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		var next []string
		for i, r := range rs {
			if !r.found {
				pz[level[i]] = listedGone
				continue
			}
			nodes[r.n.Path] = r.n
			pz[r.n.Path] = r.pzxid
			for _, c := range r.k {
				next = append(next, core.JoinPath(r.n.Path, c))
			}
		}
		level = next
	}
	return nodes, pz, nil
}

// load reads the whole prefix into the model.
func (w *watcher) load() error {
	nodes, _, err := w.loadTree(w.prefix)
	if err != nil {
		return mapErr(err, w.prefix, false)
	}
	w.setModel(nodes)
	w.lastRev = w.b.wire.lastZxid.Load()
	return nil
}

// setModel replaces the model; kids is derived from it: kids[p] holds the
// names of p's children that are in the model, nothing else.
func (w *watcher) setModel(nodes map[string]core.Node) {
	w.model = nodes
	w.kids = map[string]map[string]bool{}
	for q := range nodes {
		if q != w.prefix {
			w.addKid(q)
		}
	}
}

func (w *watcher) addKid(q string) {
	parent := core.ParentPath(q)
	if w.kids[parent] == nil {
		w.kids[parent] = map[string]bool{}
	}
	w.kids[parent][core.BaseName(q)] = true
}

func (w *watcher) resetResponse() core.WatchResponse {
	paths := make([]string, 0, len(w.model))
	for p := range w.model {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	r := core.WatchResponse{Reset: true, Events: make([]core.WatchEvent, 0, len(paths))}
	// The model is the state as far as this watcher has read it: stamped
	// with what it has read, not with the client's last zxid, which may
	// count writes made through the same client that the model has not
	// seen yet (a consumer that applied its own writes would drop them).
	rev := w.lastRev
	for _, p := range paths {
		n := w.model[p]
		rev = max(rev, n.Stat.ModifyRevision, n.Stat.CreateRevision)
		r.Events = append(r.Events, core.WatchEvent{Type: core.EventCreated, Path: p, Data: n.Data, Stat: n.Stat})
	}
	for i := range r.Events {
		r.Events[i].Revision = rev
	}
	r.Revision = rev
	return r
}

// queue adds a response for the consumer, collapsing the backlog into a
// Reset when it grows too long.
func (w *watcher) queue(r core.WatchResponse) {
	if r.Reset {
		w.pending = w.pending[:0]
		w.npend = 0
	}
	w.lastRev = max(w.lastRev, r.Revision)
	w.pending = append(w.pending, r)
	w.npend += len(r.Events)
	if w.npend > maxPendingEvents {
		w.pending = []core.WatchResponse{w.resetResponse()}
		w.npend = len(w.pending[0].Events)
	}
}

func (w *watcher) run() {
	defer close(w.out)
	defer w.cancel()
	defer w.b.removeWatcher(w)
	resync := false // re-read everything and diff
	reset := false  // ... and send it as a Reset
	var retry <-chan time.Time
	for {
		var send chan core.WatchResponse
		var head core.WatchResponse
		if len(w.pending) > 0 {
			send, head = w.out, w.pending[0]
		}
		select {
		case send <- head:
			w.pending = w.pending[1:]
			w.npend -= len(head.Events)
			continue
		case <-w.kick:
		case <-retry:
			retry = nil
		case <-w.ctx.Done():
			return
		case <-w.b.closeCh:
			return
		}
		// Handle every notification queued, then those that came in
		// while they were handled, until none is left, before emitting:
		// a read made while handling (its answer's zxid stamps the
		// events) may be newer than a notification queued behind it, and
		// the stream's revision must not pass a change it has not
		// delivered (a writer's image skips its own write at or below
		// it). ZooKeeper sends a session the notifications of a change
		// before any answer with a later zxid, and the library's receive
		// goroutine queues them in that order. Under writes that never
		// pause this could go on: after maxDrainRounds rounds the events
		// go out as they are.
		var out []core.WatchEvent
		for round := 0; round < maxDrainRounds; round++ {
			w.qmu.Lock()
			evs := w.fired
			w.fired = nil
			w.qmu.Unlock()
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if ev.Type == zk.EventNotWatching {
					if errors.Is(ev.Err, zk.ErrClosing) {
						return
					}
					resync, reset = true, true
					continue
				}
				if resync {
					continue // the re-read covers it
				}
				got, err := w.handle(ev)
				if err == nil && w.prefixGone {
					// The prefix itself went: watch for its return.
					w.prefixGone = false
					var more []core.WatchEvent
					more, err = w.added(w.prefix)
					got = append(got, more...)
				}
				// Events returned with an error are already in the model: they
				// must reach the consumer, the resync only diffs from there.
				out = append(out, got...)
				if err != nil {
					resync = true
				}
			}
		}
		if len(out) > 0 {
			w.emit(out)
		}
		if resync && retry == nil {
			if err := w.b.waitConnected(w.ctx); err != nil {
				if w.ctx.Err() != nil || w.b.isClosed() {
					return
				}
			}
			if err := w.resync(reset); err != nil {
				if w.ctx.Err() != nil || w.b.isClosed() {
					return
				}
				retry = time.After(100 * time.Millisecond)
				continue
			}
			resync, reset = false, false
		}
	}
}

// maxDrainRounds bounds how many times a watcher takes the notifications
// that came in while it handled the previous ones before it emits.
const maxDrainRounds = 16

// emit queues events in the order they were observed, each with its own
// revision (the zxid of the state it carries; for a delete, one at or after
// the delete and before any later create of the path, see removed). Events
// of different paths observed out of revision order are split into
// responses whose events are in revision order; every response but the
// last carries the revision already delivered, and the last the highest
// revision of the batch: a consumer learns the batch is complete only once
// it has all of it. A revision is never raised to keep the order: a state
// stamped later than it is would win over a newer write the consumer
// applied itself (an image re-showing a table after its drop).
func (w *watcher) emit(evs []core.WatchEvent) {
	rev := w.lastRev
	for _, ev := range evs {
		rev = max(rev, ev.Revision)
	}
	start := 0
	for i := 1; i <= len(evs); i++ {
		if i < len(evs) && evs[i].Revision >= evs[i-1].Revision {
			continue
		}
		r := core.WatchResponse{Events: evs[start:i:i], Revision: w.lastRev}
		if i == len(evs) {
			r.Revision = rev
		}
		w.queue(r)
		start = i
	}
}

// resync re-reads the prefix and reports the difference to the model (or
// the whole state as a Reset).
func (w *watcher) resync(reset bool) error {
	nodes, pz, err := w.loadTree(w.prefix)
	if err != nil {
		return err
	}
	if reset {
		w.setModel(nodes)
		w.queue(w.resetResponse())
		return nil
	}
	var out []core.WatchEvent
	fallback := w.b.wire.lastZxid.Load()
	var gone []string
	for p := range w.model {
		if _, ok := nodes[p]; !ok {
			gone = append(gone, p)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(gone)))
	for _, p := range gone {
		out = append(out, core.WatchEvent{Type: core.EventDeleted, Path: p, Revision: goneRevision(p, w.prefix, nodes, pz, fallback)})
	}
	var paths []string
	for p := range nodes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		n := nodes[p]
		old, ok := w.model[p]
		switch {
		case !ok || old.Stat.CreateRevision != n.Stat.CreateRevision:
			if ok {
				out = append(out, core.WatchEvent{Type: core.EventDeleted, Path: p, Revision: n.Stat.CreateRevision})
			}
			out = append(out, core.WatchEvent{Type: core.EventCreated, Path: p, Data: n.Data, Stat: n.Stat, Revision: n.Stat.CreateRevision})
		case old.Stat.ModifyRevision != n.Stat.ModifyRevision:
			out = append(out, core.WatchEvent{Type: core.EventUpdated, Path: p, Data: n.Data, Stat: n.Stat, Revision: n.Stat.ModifyRevision})
		}
	}
	w.setModel(nodes)
	if len(out) > 0 {
		w.emit(out)
	}
	return nil
}

// goneRevision stamps the delete of p, which a reload (nodes, pz) did not
// find: the pzxid of the children list of its nearest ancestor that was
// found, which lacked the branch to p (p was deleted at or before it, and
// not created again by then). When that ancestor listed the branch but the
// branch was gone when read, or p is the prefix, there is no such list: the
// latest zxid the client had seen (fallback) stands in.
func goneRevision(p, prefix string, nodes map[string]core.Node, pz map[string]int64, fallback int64) int64 {
	child := p
	for child != prefix {
		a := core.ParentPath(child)
		if _, ok := nodes[a]; ok {
			if pz[child] == listedGone || pz[a] <= 0 {
				return fallback
			}
			return pz[a]
		}
		child = a
	}
	return fallback
}

// handle processes one fired watch and returns the events it reveals.
func (w *watcher) handle(ev zk.Event) ([]core.WatchEvent, error) {
	p := w.b.rel(ev.Path)
	if !core.HasPrefixPath(p, w.prefix) {
		return nil, nil
	}
	switch ev.Type {
	case zk.EventNodeCreated, zk.EventNodeDataChanged:
		old, known := w.model[p]
		if !known && p != w.prefix {
			return nil, nil // its parent's child watch reports it
		}
		if !known {
			return w.added(p)
		}
		n, found, err := w.armData(p)
		if err != nil {
			return nil, err
		}
		if !found {
			return w.vanished(p)
		}
		if n.Stat.CreateRevision != old.Stat.CreateRevision {
			// Deleted and created again between two looks.
			out := w.removed(p, n.Stat.CreateRevision)
			more, err := w.added(p)
			return append(out, more...), err
		}
		if n.Stat.ModifyRevision == old.Stat.ModifyRevision {
			return nil, nil
		}
		n.Stat.NumChildren = old.Stat.NumChildren
		w.model[p] = n
		return []core.WatchEvent{{Type: core.EventUpdated, Path: p, Data: n.Data, Stat: n.Stat, Revision: n.Stat.ModifyRevision}}, nil
	case zk.EventNodeDeleted:
		old, known := w.model[p]
		if !known {
			return nil, nil
		}
		// The notification may be older than what this watcher has already
		// seen (watches fire on separate channels): look before believing
		// it. A node created again since is replaced and re-armed.
		n, found, err := w.armData(p)
		if err != nil {
			return nil, err
		}
		if !found {
			return w.vanished(p)
		}
		if n.Stat.CreateRevision == old.Stat.CreateRevision {
			return nil, nil
		}
		out := w.removed(p, n.Stat.CreateRevision)
		more, err := w.added(p)
		return append(out, more...), err
	case zk.EventNodeChildrenChanged:
		if _, known := w.model[p]; !known {
			return nil, nil
		}
		return w.children(p)
	}
	return nil, nil
}

// vanished handles a known node p found gone by a read. Its delete is
// stamped with the pzxid of its parent's children list read after it
// (children), which no longer lists it; if the parent lists it again (it
// was created again since), p is read again as a new node.
func (w *watcher) vanished(p string) ([]core.WatchEvent, error) {
	if p == w.prefix {
		// No parent in the model to read: the latest zxid seen stands in.
		return w.removed(p, w.b.wire.lastZxid.Load()), nil
	}
	out, err := w.children(core.ParentPath(p))
	if err != nil {
		return out, err
	}
	if _, still := w.model[p]; still {
		more, err := w.added(p)
		return append(out, more...), err
	}
	return out, nil
}

// children re-reads known node p's children list (re-arming its child
// watch) and reports the children gone (stamped with the list's pzxid)
// and the new ones (read whole).
func (w *watcher) children(p string) ([]core.WatchEvent, error) {
	var names []string
	var st *zk.Stat
	var ch <-chan zk.Event
	err := w.b.read(w.ctx, func() error {
		var err error
		names, st, ch, err = w.b.conn.ChildrenW(w.b.zpath(p))
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return w.vanished(p)
	}
	if err != nil {
		return nil, err
	}
	w.forward(ch)
	n := w.model[p]
	n.Stat.NumChildren = st.NumChildren
	w.model[p] = n
	now := map[string]bool{}
	for _, c := range names {
		now[c] = true
	}
	var out []core.WatchEvent
	var gone, added []string
	for c := range w.kids[p] {
		if !now[c] {
			gone = append(gone, c)
		}
	}
	for c := range now {
		if !w.kids[p][c] {
			added = append(added, c)
		}
	}
	sort.Strings(gone)
	sort.Strings(added)
	for _, c := range gone {
		out = append(out, w.removed(core.JoinPath(p, c), st.Pzxid)...)
	}
	for _, c := range added {
		more, err := w.added(core.JoinPath(p, c))
		if err != nil {
			return out, err
		}
		out = append(out, more...)
	}
	return out, nil
}

// armData re-reads a known node's data with a new data watch.
func (w *watcher) armData(p string) (core.Node, bool, error) {
	var data []byte
	var st *zk.Stat
	var ch <-chan zk.Event
	err := w.b.read(w.ctx, func() error {
		var err error
		data, st, ch, err = w.b.conn.GetW(w.b.zpath(p))
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return core.Node{}, false, nil
	}
	if err != nil {
		return core.Node{}, false, err
	}
	w.forward(ch)
	if len(data) == 0 {
		data = nil
	}
	return core.Node{Path: p, Data: data, Stat: convStat(st)}, true, nil
}

// added loads a new subtree at p into the model and returns its creates,
// parents first.
func (w *watcher) added(p string) ([]core.WatchEvent, error) {
	nodes, _, err := w.loadTree(p)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(nodes))
	for q := range nodes {
		paths = append(paths, q)
	}
	sort.Strings(paths)
	var out []core.WatchEvent
	for _, q := range paths {
		n := nodes[q]
		old, ok := w.model[q]
		switch {
		case !ok:
			out = append(out, core.WatchEvent{Type: core.EventCreated, Path: q, Data: n.Data, Stat: n.Stat, Revision: n.Stat.CreateRevision})
		case old.Stat.CreateRevision != n.Stat.CreateRevision:
			out = append(out,
				core.WatchEvent{Type: core.EventDeleted, Path: q, Revision: n.Stat.CreateRevision},
				core.WatchEvent{Type: core.EventCreated, Path: q, Data: n.Data, Stat: n.Stat, Revision: n.Stat.CreateRevision})
		case old.Stat.ModifyRevision != n.Stat.ModifyRevision:
			out = append(out, core.WatchEvent{Type: core.EventUpdated, Path: q, Data: n.Data, Stat: n.Stat, Revision: n.Stat.ModifyRevision})
		}
		w.model[q] = n
		if q != w.prefix {
			w.addKid(q)
		}
	}
	return out, nil
}

// removed drops p and its descendants from the model and returns their
// deletes, children first, stamped rev: a zxid at or after p's delete and
// before any later create of p (the pzxid of a children list that lacks p,
// or the czxid of p's next incarnation).
func (w *watcher) removed(p string, rev int64) []core.WatchEvent {
	var paths []string
	for q := range w.model {
		if core.HasPrefixPath(q, p) {
			paths = append(paths, q)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	out := make([]core.WatchEvent, 0, len(paths))
	for _, q := range paths {
		delete(w.model, q)
		delete(w.kids, q)
		if set := w.kids[core.ParentPath(q)]; set != nil && q != w.prefix {
			delete(set, core.BaseName(q))
		}
		out = append(out, core.WatchEvent{Type: core.EventDeleted, Path: q, Revision: rev})
	}
	if p == w.prefix && len(paths) > 0 {
		w.prefixGone = true
	}
	return out
}

// warnf logs a warning of the backend's own: to Options.Logf when set,
// else to slog's default logger (in a plugin process, the host's log).
func (b *Backend) warnf(format string, args ...any) {
	if b.opts.Logf != nil {
		b.opts.Logf(format, args...)
		return
	}
	slog.Warn(fmt.Sprintf(format, args...))
}
