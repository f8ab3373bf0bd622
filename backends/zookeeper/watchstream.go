package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/retry"
)

// A streamed watch: Watch on a server with persistent recursive watches
// (ZooKeeper 3.6 and later). It holds no copy of the tree.
//
// The watch opens a connection of its own, as a streamed snapshot does
// (snapConn: its own session, a persistent recursive watch on the prefix,
// a sync). From then on every create, change and delete at or below the
// prefix is an event on that connection; the watch records the path and
// what happened to it (created, deleted, changed) in a set, and reads each
// path in the set again, without a watch, to report its state:
//
//   - found: EventCreated when an event created it, else EventUpdated,
//     stamped with the node's mzxid (the state it carries); an event that
//     deleted it too (it is back) first reports its delete, stamped with
//     the new incarnation's czxid;
//   - missing: EventDeleted, stamped with the zxid of the read's reply
//     (the state at that zxid has no node: the delete is at or before it,
//     and any later create after it).
//
// The paths are read a batch at a time and their events sent in revision
// order, a response of about watchPageBytes or 4096 events at most (see
// report for the revisions the responses carry).
//
// Several changes to a path between two reads are one event with the
// latest state; a node created and deleted between two reads is reported
// as deleted (a consumer that never knew it has nothing to drop). A parent
// whose children changed is not reported (its data did not change).
//
// A watch from a revision (fromRevision > 0) first reads the prefix as a
// streamed snapshot does (pass 1 into a spill file, rounds until quiet)
// and hands it out as a Reset in pages (core.WatchResponse.Partial), each
// about watchPageBytes; the events that come meanwhile are in the set, and
// follow the Reset. A watch from 0 starts with the set empty: the first
// change after Watch returns is reported.
//
// The set holds at most maxWatchDirty paths: a consumer that does not
// take what was read, under writes to more paths than that, makes the
// watch read the prefix again and send a Reset (the same happens when the
// connection is lost: its watch went with it; the watch opens another,
// with backoff, until it succeeds, ctx ends or the backend closes). Any
// other failure (a permission refused, the spill file's disk full) ends
// the watch with a response whose Err says it.
//
// Memory: the set (the paths changed and not yet read), one batch of
// reads, and during a Reset what a streamed snapshot holds (see stream.go)
// and one page. The tree is never held.

// watchPageBytes is the size of a Reset's pages.
const watchPageBytes = core.DefaultSnapshotPageBytes

// maxWatchDirty bounds the paths a streamed watch holds as changed and not
// yet read (a variable for tests).
var maxWatchDirty = 1 << 16

// streamWatchConn, when set (tests), is told of every connection a
// streamed watch opens.
var streamWatchConn func(*snapConn)

// errWatchOverflow: the set of changed paths filled (see maxWatchDirty).
var errWatchOverflow = errors.New("zookeeper: more paths changed than a watch holds unread")

type streamWatch struct {
	b       *Backend
	prefix  string
	ctx     context.Context
	cancel  context.CancelFunc
	out     chan core.WatchResponse
	kick    chan struct{}
	sc      *snapConn
	lastRev int64 // the revision of the last response sent
}

// openStreamWatch opens a streamed watch of prefix. Errors:
// errNoRecursiveWatch (the caller falls back to the one-shot watcher),
// ErrUnavailable, context errors.
func (b *Backend) openStreamWatch(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	wctx, cancel := context.WithCancel(ctx)
	w := &streamWatch{b: b, prefix: prefix, ctx: wctx, cancel: cancel,
		out: make(chan core.WatchResponse), kick: make(chan struct{}, 1)}
	if err := w.open(); err != nil {
		cancel()
		return nil, err
	}
	w.lastRev = w.sc.wire.lastZxid.Load() // the sync's
	go w.run(fromRevision > 0)
	return w.out, nil
}

// open opens the watch's connection (w.sc): its own session, the
// persistent recursive watch, a sync.
func (w *streamWatch) open() error {
	sc, err := w.b.openSnapConn(w.ctx, w.prefix, true, w.kick)
	if err != nil {
		return err
	}
	w.sc = sc
	if streamWatchConn != nil {
		streamWatchConn(sc)
	}
	return nil
}

// done reports whether the watch is over: ctx ended or the backend closed.
func (w *streamWatch) done() bool {
	return w.ctx.Err() != nil || w.b.isClosed()
}

func (w *streamWatch) run(reset bool) {
	defer close(w.out)
	defer w.cancel()
	defer func() {
		if w.sc != nil {
			w.sc.close()
		}
	}()
	wait := retry.New(100*time.Millisecond, 2*time.Second)
	for {
		var err error
		if reset {
			err = w.reset()
		}
		if err == nil {
			reset = false
			err = w.follow()
		}
		if w.done() {
			return
		}
		if !errors.Is(err, core.ErrUnavailable) && !errors.Is(err, core.ErrSessionExpired) && !errors.Is(err, errWatchOverflow) {
			// Not the connection (a permission refused, the spill file's
			// disk full): the watch ends with it, and its consumer decides.
			w.send(core.WatchResponse{Err: fmt.Errorf("watch %s: %w", w.prefix, err)})
			return
		}
		// The connection was lost (its watch with it), or the set
		// overflowed: read everything again on a new connection.
		w.sc.close()
		w.sc, reset = nil, true
		for w.sc == nil {
			if !retry.Sleep(w.ctx, wait.Next(), w.b.closeCh) {
				return
			}
			if err := w.open(); errors.Is(err, errNoRecursiveWatch) {
				w.send(core.WatchResponse{Err: fmt.Errorf("%w: watch %s: %v", core.ErrUnavailable, w.prefix, err)})
				return
			}
		}
		wait.Reset()
	}
}

// ended is why a send found the watch over: its context's error, or
// ErrClosed (the backend closed).
func (w *streamWatch) ended() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	return core.ErrClosed
}

// send hands r to the consumer; false when the watch ended first.
func (w *streamWatch) send(r core.WatchResponse) bool {
	select {
	case w.out <- r:
		return true
	case <-w.ctx.Done():
		return false
	case <-w.b.closeCh:
		return false
	}
}

// reset reads the prefix and sends it as a Reset in pages.
func (w *streamWatch) reset() error {
	sc := w.sc
	if err := sc.read(w.ctx); err != nil {
		return err
	}
	sc.limitDirty(maxWatchDirty)
	defer sc.dropRead()
	// One page is held back until the next is read: the last goes out
	// without Partial.
	var held *core.WatchResponse
	err := sc.emit(watchPageBytes, func(rev int64, nodes []core.Node) error {
		rev = max(rev, w.lastRev) // nothing changed between them (see emit)
		if held != nil {
			held.Partial = true
			if !w.send(*held) {
				return w.ended()
			}
		}
		// The nodes' data is not reused by emit (each spilled node is read
		// into its own slice; the overrides are not written again).
		evs := make([]core.WatchEvent, len(nodes))
		for i, n := range nodes {
			evs[i] = core.WatchEvent{Type: core.EventCreated, Path: n.Path, Data: n.Data, Stat: n.Stat, Revision: rev}
		}
		held = &core.WatchResponse{Reset: true, Events: evs, Revision: rev}
		return nil
	})
	if err != nil {
		return err
	}
	if !w.send(*held) {
		return w.ended()
	}
	w.lastRev = held.Revision
	return nil
}

// follow reads again the paths that events name, and sends what it finds,
// until the connection is lost, the set overflows or the watch ends.
func (w *streamWatch) follow() error {
	sc := w.sc
	sc.limitDirty(maxWatchDirty)
	for {
		if err := sc.err(); err != nil {
			return err
		}
		if sc.overflowed() {
			return errWatchOverflow
		}
		d := sc.takeDirty()
		if len(d) == 0 {
			select {
			case <-w.kick:
				continue
			case <-w.ctx.Done():
				return w.ctx.Err()
			case <-w.b.closeCh:
				return core.ErrClosed
			}
		}
		if err := w.report(d); err != nil {
			return err
		}
	}
}

// report reads the paths of d that an event of their own named, a batch
// of snapshotBatch at a time, and sends what it finds: a response holds
// about watchPageBytes or 4096 events at most. Every response but the
// last carries the revision already delivered, and the last the highest
// revision read: a consumer learns that it has every change up to a
// revision only once it has all of them.
func (w *streamWatch) report(d map[string]uint8) error {
	paths := make([]string, 0, len(d))
	for p, what := range d {
		if what&(evCreated|evDeleted|evChanged) != 0 {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	rev := w.lastRev
	var evs []core.WatchEvent
	size := 0
	for start := 0; start < len(paths); start += snapshotBatch {
		batch := paths[start:min(start+snapshotBatch, len(paths))]
		got, err := w.readChanged(batch, d)
		if err != nil {
			return err
		}
		for _, ev := range got {
			rev = max(rev, ev.Revision)
			size += len(ev.Path) + len(ev.Data)
		}
		evs = append(evs, got...)
		last := start+snapshotBatch >= len(paths)
		if len(evs) == 0 || (!last && size < watchPageBytes && len(evs) < maxPendingEvents) {
			continue
		}
		sortEvents(evs)
		r := core.WatchResponse{Events: evs, Revision: w.lastRev}
		if last {
			r.Revision = rev
		}
		if !w.send(r) {
			return w.ended()
		}
		w.lastRev = r.Revision
		evs, size = nil, 0
	}
	return nil
}

// readChanged reads paths (their entries of d say what happened to them)
// and returns their events.
func (w *streamWatch) readChanged(paths []string, d map[string]uint8) ([]core.WatchEvent, error) {
	nodes := make([]*core.Node, len(paths))
	zxids := make([]int64, len(paths))
	err := parallel(len(paths), func(i int) error {
		var err error
		nodes[i], zxids[i], err = w.sc.peek(w.ctx, paths[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	evs := make([]core.WatchEvent, 0, len(paths))
	for i, p := range paths {
		n, what := nodes[i], d[p]
		if n == nil {
			evs = append(evs, core.WatchEvent{Type: core.EventDeleted, Path: p, Revision: zxids[i]})
			continue
		}
		typ := core.EventUpdated
		if what&(evCreated|evDeleted) != 0 {
			typ = core.EventCreated
		}
		if what&evDeleted != 0 {
			evs = append(evs, core.WatchEvent{Type: core.EventDeleted, Path: p, Revision: n.Stat.CreateRevision})
		}
		evs = append(evs, core.WatchEvent{Type: typ, Path: p, Data: n.Data, Stat: n.Stat, Revision: n.Stat.ModifyRevision})
	}
	return evs, nil
}

// sortEvents puts evs in revision order; at one revision (one
// transaction) deletes first, children before parents, then the rest,
// parents first.
func sortEvents(evs []core.WatchEvent) {
	sort.SliceStable(evs, func(i, j int) bool {
		a, b := evs[i], evs[j]
		if a.Revision != b.Revision {
			return a.Revision < b.Revision
		}
		ad, bd := a.Type == core.EventDeleted, b.Type == core.EventDeleted
		if ad != bd {
			return ad
		}
		if ad {
			return a.Path > b.Path
		}
		return a.Path < b.Path
	})
}
