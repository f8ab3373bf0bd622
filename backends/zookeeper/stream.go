package zookeeper

import (
	"bufio"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
)

// A streamed snapshot (core.SnapshotStreamer) on ZooKeeper, which has no
// read of many nodes at one zxid and keeps no history.
//
// The snapshot opens a connection of its own (its own session, closed at
// the end) and registers a persistent recursive watch on the prefix
// (addWatch, ZooKeeper 3.6 and later; go-zookeeper has no call for it, so
// the request is written on the connection between the library's packets
// and its reply read off the tap). From then on the server sends an event
// for every node created, changed or deleted at or below the prefix, on
// the same connection as the replies and in order with them: a reply
// processed after a change comes after the change's event.
//
//  1. Pass 1 reads every node (data, stat, children names), in path
//     order, batches of siblings and cousins at once, and appends each to
//     a spill file (the tree is on disk, not in memory).
//  2. Every node whose event arrived is marked changed (a created or
//     deleted node's parent too: its children count and pzxid moved).
//     Rounds re-read the changed nodes (data and stat; gone: a deletion)
//     into an in-memory set of overrides, until a round ends with no
//     event since it began. Then every node read is unchanged since its
//     latest read, at the zxid of the round's last reply: the spill plus
//     the overrides are the state of the prefix at one zxid.
//  3. The connection closes (its watch with it) and the nodes are handed
//     out in pages: the spill file merged with the overrides.
//
// Memory: the pending paths of pass 1's traversal (the widest fan-out of
// the tree, not its size), one batch of nodes read, the overrides (the
// nodes changed while pass 1 and the rounds ran: the writes of those
// seconds, not the tree) and one page. The spill file holds the tree once
// (path, data and a stat per node).
//
// The revision is the highest zxid (czxid, mzxid, pzxid) of the nodes read
// (the state did not change between it and the last reply), or, when no
// node is left, the zxid of the connection's last reply.
//
// Termination: a round re-reads only what changed during the round before
// (a few nodes, one round trip), so rounds end as soon as one round trip
// passes without a write below the prefix; at most snapshotRounds rounds
// (ErrUnavailable after).
//
// Servers before 3.6 have no addWatch: 3.5 answers it with ZUNIMPLEMENTED
// and closes the connection, an older one may not answer at all. The
// snapshot then opens a fresh connection and reads the same way (pass 1
// into the spill file, rounds, pages of the spill merged with the
// overrides) with ZooKeeper's ordinary one-shot watches instead (oneShot):
// every read sets them.
//
//   - getData with watch: a data watch, fired (once) by a set of the node
//     (NodeDataChanged) or its deletion (NodeDeleted);
//   - getChildren2 with watch: a child watch, fired (once) by the create
//     or delete of a child (NodeChildrenChanged) or the node's deletion
//     (NodeDeleted); read for every node, a leaf too (a child may come);
//   - the prefix, when it is missing: exists with watch, fired by its
//     create (NodeCreated).
//
// The backend writes those requests itself on the connection (wire.call)
// and decodes their replies: go-zookeeper's GetW and ChildrenW would keep a
// channel per node in the library until its watch fires (most never do:
// memory per node of the tree). The one exception is a reply over
// maxCallReply, which wire.call does not keep (a child list that long, or
// data on a server whose jute.maxbuffer allows it): that node is read with
// ChildrenW or GetW (one channel, for that node).
//
// A fired watch is gone until its node is read again with a watch, so a
// round re-reads (with watches) every node with an event: its data and
// stat after NodeDataChanged; after NodeChildrenChanged, NodeDeleted or
// NodeCreated also its children, and then every child that is not known
// and its whole subtree, in the same round. A node is known when it is in
// the result: in the overrides (not deleted), or spilled by pass 1 and not
// overridden (looked up in the spill file through an index of one path per
// spillIndexBytes of it). A child that vanished needs no diff against an
// older list: its own data or child watch fires NodeDeleted, and a later
// round reads it gone. The events are taken off the byte stream by the
// tap (wireState.events), not from the library's callback: the tap hands
// a reply to wire.call as soon as it is read, before the library has
// handled the events ahead of it, and an event must be taken before any
// reply after it.
//
// Why a round that takes no event ends at one zxid's state. Round k takes
// the events that arrived so far, then reads (every request's reply in);
// let B be the point at which the server handled the request whose reply
// came last (a server handles a session's requests in order and answers
// them in order: every read of the round was handled at or before B). The
// next round takes no event. ZooKeeper sends an event to a watching
// session before the reply to any request it handles after the change, on
// the same connection, and the tap takes it before that reply is handed
// over.
//
//  1. Every node in the result is its state at B. Take its latest data
//     read and its latest children read (each set its watch, or found one
//     set and not fired). A change after them and before B fires one of
//     those watches (a set: the data watch; a child's create or delete:
//     the child watch; the node's delete: both), and the event arrives
//     after the read was sent and before the last reply. The read was sent
//     in round j <= k (pass 1 is round 0), after round j took its events;
//     no event came after round k took its own, so round i, j < i <= k,
//     took it and read that part of the node again: not the latest read.
//     A contradiction: no change. The stat's data fields (version,
//     mzxid, mtime, length) move only with a set, its children fields
//     (count, pzxid) only with a child's create or delete, the rest only
//     with a new node (after a delete); a read of data only keeps the
//     stat of that read, whose children fields have not moved since the
//     latest children read, before it.
//  2. Every node present at B is in the result. The prefix: when the
//     result lacks it, its latest read found it missing and set an exists
//     watch, which a create would have fired. A node below: by induction
//     its parent is in the result, and by 1 the parent's children at B
//     are those of its latest children read. Every child of that
//     list was known then, or was read in the same round (a round reads
//     unknown children until none is left). It is still in the result: it
//     would leave it only by a later read that found it missing, after a
//     delete after the parent's list, which fires the parent's child
//     watch (by 1, none did). And a child of the list that its read found
//     missing was deleted after the list: the same.
//  3. Nothing else is: every node in the result exists at B (by 1).
//
// So the result is the prefix's state at B, and, as on the main path, at
// its highest zxid (or, when no node is left, the last reply's zxid).
//
// Memory: as on the main path (pass 1's pending paths, a batch, the
// overrides: the nodes created, changed or deleted while the snapshot
// read, with the subtrees created meanwhile, and one page), plus the spill
// file's index and, during a round, the child names of the nodes whose
// children changed. The server holds a data and a child watch per node of
// the subtree for the snapshot's session (its memory, per node) until the
// session closes at the end. Termination: as on the main path, with
// rounds of a few round trips (the reads of changed nodes, then one per
// level of the subtrees created meanwhile), within snapshotRounds.

const (
	// snapWatchXid is the xid of the injected addWatch request.
	snapWatchXid = -106
	// opAddWatch is ZooKeeper's addWatch opcode (3.6 and later);
	// addWatchRecursive its persistent recursive mode.
	opAddWatch        = 106
	addWatchRecursive = 1
	// snapshotBatch is how many nodes pass 1 reads at once.
	snapshotBatch = 256
	// snapshotRounds bounds the rounds that re-read changed nodes.
	snapshotRounds = 10000
	// The reads of the one-shot fallback: ZooKeeper's opcodes.
	opExists       = 3
	opGetData      = 4
	opGetChildren2 = 12
	// zkNoNode is ZooKeeper's NoNode error code.
	zkNoNode = -101
	// spillIndexBytes: the one-shot fallback indexes the spill file with
	// one path per this many bytes of it.
	spillIndexBytes = 64 << 10
)

// What an event asks the one-shot fallback's next round to read again:
// the node's data and stat (evData), and also its children (evKids).
const (
	evData uint8 = 1 << iota
	evKids
	// What a streamed watch (watchstream.go) reports of a path: an event
	// of its own (not only a child's) created, deleted or changed it.
	evCreated
	evDeleted
	evChanged
)

// snapshotDone, when set (tests), is told what each streamed snapshot
// read: the rounds after pass 1, the nodes read again (overrides) and the
// nodes spilled by pass 1.
var snapshotDone func(rounds, overrides, spilled int)

// errNoRecursiveWatch: the server refused addWatch (ZooKeeper before 3.6).
var errNoRecursiveWatch = errors.New("zookeeper: the server has no persistent recursive watches (ZooKeeper 3.6 or later)")

var _ core.SnapshotStreamer = (*Backend)(nil)

// StreamSnapshot calls fn with the nodes at or below prefix as of one zxid,
// in path order, a page of about pageBytes at a time (see the comment
// above for how). A missing prefix is one call with no nodes, at the
// current revision. On a server without persistent recursive watches
// (before 3.6) it reads the same way with one-shot watches, on a second
// connection. It is safe for concurrent use; fn is called on the caller's
// goroutine, and the nodes it gets are valid only during the call.
// Cancelling ctx stops the reads (fn is no longer called once they end).
// Errors: ErrInvalidPath, ErrUnavailable (among others, when the prefix
// changes during each of snapshotRounds rounds), ErrClosed, fn's, context
// errors.
func (b *Backend) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	if b.isClosed() {
		return core.ErrClosed
	}
	if err := core.ValidatePath(prefix); err != nil {
		return err
	}
	if pageBytes <= 0 {
		pageBytes = core.DefaultSnapshotPageBytes
	}
	if err := b.syncRevision(ctx); err != nil {
		return err
	}
	var ok bool
	err := b.read(ctx, func() error {
		var err error
		ok, _, err = b.conn.Exists(b.zpath(prefix))
		return err
	})
	if err != nil {
		return b.closedErr(mapErr(err, prefix, false))
	}
	if !ok {
		return fn(b.wire.lastZxid.Load(), nil)
	}
	sc, err := b.openSnapConn(ctx, prefix, true, nil)
	if errors.Is(err, errNoRecursiveWatch) {
		// A 3.5 server closes the connection that asked: a fresh one.
		sc, err = b.openSnapConn(ctx, prefix, false, nil)
	}
	if err != nil {
		return err
	}
	defer sc.close()
	if err := sc.read(ctx); err != nil {
		return b.closedErr(err)
	}
	sc.conn.Close() // the watches end with the session
	return sc.emit(pageBytes, fn)
}

// Snapshot reads every node at or below prefix at one zxid, sorted by
// path: StreamSnapshot's nodes gathered. Revision is the zxid they are the
// state at. Errors: ErrInvalidPath, ErrUnavailable, ErrClosed, context
// errors.
func (b *Backend) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	snap := core.Snapshot{}
	err := b.StreamSnapshot(ctx, prefix, 1<<30, func(rev int64, nodes []core.Node) error {
		snap.Revision = rev
		for _, n := range nodes {
			n.Data = append([]byte(nil), n.Data...)
			if len(n.Data) == 0 {
				n.Data = nil
			}
			snap.Nodes = append(snap.Nodes, n)
		}
		return nil
	})
	if err != nil {
		return core.Snapshot{}, err
	}
	return snap, nil
}

// snapConn is one streamed snapshot's connection and what it read.
type snapConn struct {
	b      *Backend
	prefix string
	conn   *zk.Conn
	wire   *wireState

	connected chan struct{} // closed once the session is established
	onceConn  sync.Once
	watchErr  chan int32 // the addWatch reply's error code

	// oneShot: the server has no addWatch; every read sets one-shot
	// watches (see the comment above).
	oneShot bool

	mu      sync.Mutex
	dirty   map[string]uint8 // paths with an event since they were taken: what to read again
	broken  error            // the connection was lost: the watches with it
	hadConn bool

	// A streamed watch's connection (watchstream.go): kick is told of
	// every event; dirty holds at most maxDirty paths, and overflow is set
	// when an event found it full (the event is not kept).
	kick     chan struct{}
	maxDirty int
	overflow bool

	spill   *os.File
	spillW  *bufio.Writer
	nspill  int
	over    map[string]*core.Node // re-read nodes; nil: deleted
	maxZxid int64
	lastRev int64 // the zxid of the last reply when the reads ended

	// The spill file's size and index (oneShot only): a path and its
	// record's offset, every spillIndexBytes, in path order.
	spillOff   int64
	spillIndex []spillMark
}

// spillMark is one entry of the spill file's index.
type spillMark struct {
	path string
	off  int64
}

// openSnapConn opens the snapshot's own connection, registers the
// recursive watch on prefix (when recursive; else the reads will set
// one-shot watches) and syncs the server (its reads then see every write
// committed before). A streamed watch passes kick (see snapConn.kick);
// a snapshot nil. Errors: errNoRecursiveWatch, ErrUnavailable, context
// errors.
func (b *Backend) openSnapConn(ctx context.Context, prefix string, recursive bool, kick chan struct{}) (*snapConn, error) {
	sc := &snapConn{
		b: b, prefix: prefix, wire: &wireState{},
		connected: make(chan struct{}),
		watchErr:  make(chan int32, 1),
		oneShot:   !recursive,
		dirty:     map[string]uint8{},
		over:      map[string]*core.Node{},
		kick:      kick,
	}

	sc.wire.replies = func(r reply) {
		if r.xid == snapWatchXid {
			select {
			case sc.watchErr <- r.err:
			default:
			}
		}
	}
	if sc.oneShot {
		sc.wire.events = sc.noteEvent
	}
	conn, _, err := zk.Connect(b.servers, b.timeout,
		zk.WithDialer(sc.wire.dialer()),
		zk.WithEventCallback(sc.onEvent),
		zk.WithLogger(discardLogger{}),
		zk.WithLogInfo(false),
		zk.WithMaxBufferSize(b.opts.MaxBufferSize),
		zk.WithMaxConnBufferSize(maxRequestSize+64<<10),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot connection: %v", core.ErrUnavailable, err)
	}
	sc.conn = conn
	fail := func(err error) (*snapConn, error) {
		sc.close()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, b.opts.ConnectionTimeout)
	defer cancel()
	select {
	case <-sc.connected:
	case <-wctx.Done():
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(fmt.Errorf("%w: no session for a snapshot within zookeeper.client.connection-timeout (%v)", core.ErrUnavailable, b.opts.ConnectionTimeout))
	}
	zp := b.zpath(prefix)
	if !recursive {
		return sc.synced(zp)
	}
	xid := int32(snapWatchXid)
	body := binary.BigEndian.AppendUint32(nil, uint32(xid))
	body = binary.BigEndian.AppendUint32(body, opAddWatch)
	body = binary.BigEndian.AppendUint32(body, uint32(len(zp)))
	body = append(body, zp...)
	body = binary.BigEndian.AppendUint32(body, addWatchRecursive)
	if err := sc.wire.inject(body); err != nil {
		return fail(fmt.Errorf("%w: snapshot connection: %v", core.ErrUnavailable, err))
	}
	select {
	case code := <-sc.watchErr:
		if code != 0 {
			return fail(fmt.Errorf("%w (error %d)", errNoRecursiveWatch, code))
		}
	case <-wctx.Done():
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		// A server that does not know the opcode may drop the request or
		// the connection: no reply.
		return fail(errNoRecursiveWatch)
	}
	return sc.synced(zp)
}

// synced syncs the snapshot connection's server (not needed on a
// standalone one) and returns sc, or closes it and returns the error.
func (sc *snapConn) synced(zp string) (*snapConn, error) {
	err := sc.err()
	if err == nil && !sc.b.standalone {
		if _, serr := sc.conn.Sync(zp); serr != nil {
			err = mapErr(serr, sc.prefix, false)
		}
	}
	if err != nil {
		sc.close()
		return nil, err
	}
	return sc, nil
}

// onEvent is the snapshot connection's event callback (the library's
// receive loop: it must not block).
func (sc *snapConn) onEvent(ev zk.Event) {
	switch ev.Type {
	case zk.EventSession:
		switch ev.State {
		case zk.StateHasSession:
			sc.mu.Lock()
			sc.hadConn = true
			sc.mu.Unlock()
			sc.onceConn.Do(func() { close(sc.connected) })
		case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
			sc.mu.Lock()
			if sc.hadConn && sc.broken == nil {
				sc.broken = fmt.Errorf("%w: the snapshot's connection was lost (%v)", core.ErrUnavailable, ev.State)
			}
			sc.mu.Unlock()
			sc.wake()
		}
	case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged:
		if sc.oneShot {
			return // the tap took it off the byte stream (noteEvent)
		}
		p := sc.b.rel(ev.Path)
		what := evData | evChanged
		switch ev.Type {
		case zk.EventNodeCreated:
			what = evData | evCreated
		case zk.EventNodeDeleted:
			what = evData | evDeleted
		}
		sc.mu.Lock()
		sc.markLocked(p, what)
		if (ev.Type == zk.EventNodeCreated || ev.Type == zk.EventNodeDeleted) && p != sc.prefix {
			sc.markLocked(core.ParentPath(p), evData)
		}
		sc.mu.Unlock()
		sc.wake()
	case zk.EventNotWatching:
		sc.mu.Lock()
		if sc.broken == nil {
			sc.broken = fmt.Errorf("%w: the snapshot's watch ended", core.ErrUnavailable)
		}
		sc.mu.Unlock()
		sc.wake()
	}
}

// markLocked adds what to p's entry of dirty, unless dirty is full
// (maxDirty): then it sets overflow.
func (sc *snapConn) markLocked(p string, what uint8) {
	if _, ok := sc.dirty[p]; !ok && sc.maxDirty > 0 && len(sc.dirty) >= sc.maxDirty {
		sc.overflow = true
		return
	}
	sc.dirty[p] |= what
}

// wake tells a streamed watch that an event came (a snapshot has no kick).
func (sc *snapConn) wake() {
	if sc.kick == nil {
		return
	}
	select {
	case sc.kick <- struct{}{}:
	default:
	}
}

func (sc *snapConn) err() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.broken
}

// takeDirty returns the paths changed since the last take.
func (sc *snapConn) takeDirty() map[string]uint8 {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	d := sc.dirty
	sc.dirty = map[string]uint8{}
	return d
}

// markDirty asks the next round to read p again (what: evData, evKids).
func (sc *snapConn) markDirty(p string, what uint8) {
	sc.mu.Lock()
	sc.dirty[p] |= what
	sc.mu.Unlock()
}

func (sc *snapConn) close() {
	sc.conn.Close()
	sc.dropRead()
}

// dropRead removes the spill file and forgets the overrides: what a read
// held, once it was handed out.
func (sc *snapConn) dropRead() {
	if sc.spill != nil {
		sc.spill.Close()
		os.Remove(sc.spill.Name())
		sc.spill, sc.spillW = nil, nil
	}
	sc.over, sc.nspill, sc.spillIndex, sc.spillOff = map[string]*core.Node{}, 0, nil, 0
}

// read runs pass 1 and the rounds.
func (sc *snapConn) read(ctx context.Context) error {
	f, err := os.CreateTemp("", "metaplane-zk-snapshot-*")
	if err != nil {
		return fmt.Errorf("snapshot spill file: %w", err)
	}
	sc.spill, sc.spillW = f, bufio.NewWriterSize(f, 1<<20)
	if err := sc.pass1(ctx); err != nil {
		return err
	}
	if err := sc.spillW.Flush(); err != nil {
		return fmt.Errorf("snapshot spill file: %w", err)
	}
	for round := 0; round < snapshotRounds; round++ {
		last := sc.wire.lastZxid.Load()
		d := sc.takeDirty()
		if err := sc.err(); err != nil {
			return err
		}
		if len(d) == 0 {
			sc.lastRev = last
			if snapshotDone != nil {
				snapshotDone(round, len(sc.over), sc.nspill)
			}
			return nil
		}
		if sc.oneShot {
			if err := sc.reread(ctx, d); err != nil {
				return err
			}
			continue
		}
		paths := make([]string, 0, len(d))
		for p := range d {
			paths = append(paths, p)
		}
		nodes := make([]*core.Node, len(paths))
		err := parallel(len(paths), func(i int) error {
			n, _, err := sc.get(ctx, paths[i], false)
			nodes[i] = n
			return err
		})
		if err != nil {
			return err
		}
		for i, p := range paths {
			sc.over[p] = nodes[i]
			if n := nodes[i]; n != nil {
				sc.note(n.Stat)
			}
		}
	}
	return fmt.Errorf("%w: snapshot of %s: the subtree changed during each of %d rounds", core.ErrUnavailable, sc.prefix, snapshotRounds)
}

func (sc *snapConn) note(st core.Stat) {
	sc.maxZxid = max(sc.maxZxid, st.CreateRevision, st.ModifyRevision, st.ChildrenRevision)
}

// get reads p's data and stat, and its children's names when kids and it
// has some (oneShot: when kids, a leaf's too; see getWatched). A missing
// node is nil.
func (sc *snapConn) get(ctx context.Context, p string, kids bool) (*core.Node, []string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if sc.oneShot {
		return sc.getWatched(ctx, p, kids)
	}
	zp := sc.b.zpath(p)
	data, st, err := sc.conn.Get(zp)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, mapErr(err, p, false)
	}
	n := &core.Node{Path: p, Data: data, Stat: convStat(st)}
	if len(n.Data) == 0 {
		n.Data = nil
	}
	if !kids || st.NumChildren == 0 {
		return n, nil, nil
	}
	names, cst, err := sc.conn.Children(zp)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil // deleted meanwhile: its event marks it
	}
	if err != nil {
		return nil, nil, mapErr(err, p, false)
	}
	if cst.Mzxid == st.Mzxid {
		n.Stat = convStat(cst) // the later stat, same data
	}
	return n, names, nil
}

// pass1 reads the tree in path order into the spill file. Pending paths
// wait in one heap, nodes read in another: a node read is written once it
// is below every pending path (each pending path's subtree sorts after
// the path itself), so the spill is in path order though batches are read
// at once.
func (sc *snapConn) pass1(ctx context.Context) error {
	pending := &pathHeap{sc.prefix}
	done := &nodeHeap{}
	for pending.Len() > 0 || done.Len() > 0 {
		for done.Len() > 0 && (pending.Len() == 0 || (*done)[0].Path < (*pending)[0]) {
			if err := sc.write(heap.Pop(done).(*core.Node)); err != nil {
				return err
			}
		}
		if pending.Len() == 0 {
			continue
		}
		batch := make([]string, 0, min(pending.Len(), snapshotBatch))
		for pending.Len() > 0 && len(batch) < snapshotBatch {
			batch = append(batch, heap.Pop(pending).(string))
		}
		nodes := make([]*core.Node, len(batch))
		kids := make([][]string, len(batch))
		err := parallel(len(batch), func(i int) error {
			var err error
			nodes[i], kids[i], err = sc.get(ctx, batch[i], true)
			return err
		})
		if err != nil {
			return err
		}
		if err := sc.err(); err != nil {
			return err
		}
		for i, n := range nodes {
			if n == nil {
				continue
			}
			heap.Push(done, n)
			for _, k := range kids[i] {
				heap.Push(pending, core.JoinPath(n.Path, k))
			}
		}
	}
	return nil
}

// write appends n to the spill file: path, data, then the stat's fields,
// as varints.
func (sc *snapConn) write(n *core.Node) error {
	sc.note(n.Stat)
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(n.Path)))
	b = append(b, n.Path...)
	b = binary.AppendUvarint(b, uint64(len(n.Data)))
	st := n.Stat
	for _, v := range []int64{st.Version, st.CreateRevision, st.ModifyRevision, st.CreateTime, st.ModifyTime, st.EphemeralOwner, int64(st.NumChildren), int64(st.DataLength), st.ChildrenRevision} {
		b = binary.AppendVarint(b, v)
	}
	if _, err := sc.spillW.Write(b); err != nil {
		return fmt.Errorf("snapshot spill file: %w", err)
	}
	if _, err := sc.spillW.Write(n.Data); err != nil {
		return fmt.Errorf("snapshot spill file: %w", err)
	}
	if sc.oneShot {
		if k := len(sc.spillIndex); k == 0 || sc.spillOff-sc.spillIndex[k-1].off >= spillIndexBytes {
			sc.spillIndex = append(sc.spillIndex, spillMark{path: n.Path, off: sc.spillOff})
		}
		sc.spillOff += int64(len(b) + len(n.Data))
	}
	sc.nspill++
	return nil
}

// readSpill reads the next node of the spill file; io.EOF at its end.
func readSpill(r *bufio.Reader) (core.Node, error) {
	return readSpillNode(r, true)
}

// readSpillNode is readSpill; without data, it skips the node's data.
func readSpillNode(r *bufio.Reader, data bool) (core.Node, error) {
	var n core.Node
	pl, err := binary.ReadUvarint(r)
	if err != nil {
		return n, err
	}
	pb := make([]byte, pl)
	if _, err := io.ReadFull(r, pb); err != nil {
		return n, io.ErrUnexpectedEOF
	}
	n.Path = string(pb)
	dl, err := binary.ReadUvarint(r)
	if err != nil {
		return n, io.ErrUnexpectedEOF
	}
	var v [9]int64
	for i := range v {
		if v[i], err = binary.ReadVarint(r); err != nil {
			return n, io.ErrUnexpectedEOF
		}
	}
	n.Stat = core.Stat{Version: v[0], CreateRevision: v[1], ModifyRevision: v[2], CreateTime: v[3], ModifyTime: v[4],
		EphemeralOwner: v[5], NumChildren: int32(v[6]), DataLength: int32(v[7]), ChildrenRevision: v[8]}
	if dl > 0 && !data {
		if _, err := r.Discard(int(dl)); err != nil {
			return n, io.ErrUnexpectedEOF
		}
	} else if dl > 0 {
		n.Data = make([]byte, dl)
		if _, err := io.ReadFull(r, n.Data); err != nil {
			return n, io.ErrUnexpectedEOF
		}
	}
	return n, nil
}

// emit hands the spill file merged with the overrides to fn in pages.
func (sc *snapConn) emit(pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	keys := make([]string, 0, len(sc.over))
	live, deleted := 0, 0
	for p, n := range sc.over {
		keys = append(keys, p)
		if n != nil {
			live++
		} else {
			deleted++
		}
	}
	sort.Strings(keys)
	// The revision: the highest zxid read when some node is left (nothing
	// below the prefix changed between it and the last reply); else the
	// last reply's zxid. Both are states of the copy; the first does not
	// depend on this connection's own session, so two snapshots of a tree
	// that does not change name the same revision. (Some node is left when
	// an override is one, or when more nodes were spilled than the
	// deletions could remove.)
	rev := sc.maxZxid
	if live == 0 && sc.nspill <= deleted {
		rev = sc.lastRev
	}
	if _, err := sc.spill.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot spill file: %w", err)
	}
	r := bufio.NewReaderSize(sc.spill, 1<<20)
	var page []core.Node
	size, pages := 0, 0
	add := func(n core.Node) error {
		if len(page) > 0 && size+len(n.Path)+len(n.Data) > pageBytes {
			pages++
			if err := fn(rev, page); err != nil {
				return err
			}
			page, size = page[:0], 0
		}
		page = append(page, n)
		size += len(n.Path) + len(n.Data)
		return nil
	}
	oi := 0
	// flush adds the overrides below upTo (all of them when last).
	flush := func(upTo string, last bool) error {
		for ; oi < len(keys) && (last || keys[oi] < upTo); oi++ {
			if n := sc.over[keys[oi]]; n != nil {
				if err := add(*n); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := 0; i < sc.nspill; i++ {
		n, err := readSpill(r)
		if err != nil {
			return fmt.Errorf("snapshot spill file: %w", err)
		}
		if err := flush(n.Path, false); err != nil {
			return err
		}
		if oi < len(keys) && keys[oi] == n.Path {
			continue // overridden: added with the next flush
		}
		if err := add(n); err != nil {
			return err
		}
	}
	if err := flush("", true); err != nil {
		return err
	}
	if len(page) > 0 || pages == 0 {
		return fn(rev, page)
	}
	return nil
}

// noteEvent records a watch event of the one-shot fallback: what the next
// round reads again.
func (sc *snapConn) noteEvent(typ zk.EventType, zp string) {
	var what uint8
	switch typ {
	case zk.EventNodeDataChanged:
		what = evData
	case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeChildrenChanged:
		// The parent of a created or deleted node has its own event (its
		// child watch).
		what = evData | evKids
	default:
		return
	}
	sc.markDirty(sc.b.rel(zp), what)
}

// reread is a round of the one-shot fallback: it reads again, with
// watches, every path of d (its children too where d says evKids), then
// every child not known and its subtree, until none is left.
func (sc *snapConn) reread(ctx context.Context, d map[string]uint8) error {
	type job struct {
		path string
		kids bool
	}
	work := make([]job, 0, len(d))
	for p, what := range d {
		work = append(work, job{p, what&evKids != 0})
	}
	for len(work) > 0 {
		sort.Slice(work, func(i, j int) bool { return work[i].path < work[j].path })
		nodes := make([]*core.Node, len(work))
		kids := make([][]string, len(work))
		err := parallel(len(work), func(i int) error {
			var err error
			nodes[i], kids[i], err = sc.getWatched(ctx, work[i].path, work[i].kids)
			return err
		})
		if err != nil {
			return err
		}
		for i, j := range work {
			n := nodes[i]
			if _, had := sc.over[j.path]; n == nil && !had && d[j.path] == 0 {
				// A child not known, gone before its read: nothing to
				// override (it is not in the spill, see below).
				continue
			}
			sc.over[j.path] = n
			if n != nil {
				sc.note(n.Stat)
			}
		}
		// The children not known: not in the overrides, or deleted there,
		// and not in the spill file when not in the overrides.
		var unknown, lookup []string
		queued := map[string]bool{}
		for i, names := range kids {
			for _, k := range names {
				c := core.JoinPath(work[i].path, k)
				if queued[c] {
					continue
				}
				n, ok := sc.over[c]
				switch {
				case ok && n != nil:
					continue
				case ok:
					unknown = append(unknown, c)
				default:
					lookup = append(lookup, c)
				}
				queued[c] = true
			}
		}
		in, err := sc.inSpill(lookup)
		if err != nil {
			return err
		}
		for i, c := range lookup {
			if !in[i] {
				unknown = append(unknown, c)
			}
		}
		work = work[:0]
		for _, c := range unknown {
			work = append(work, job{c, true})
		}
		d = nil // the next batches are children found, not events
	}
	return nil
}

// getWatched reads p's data and stat with a data watch, and, when kids,
// its children's names with a child watch (a leaf's too: a child may be
// created), both at once. A missing node is nil; a missing prefix gets an
// exists watch (or, when it exists by then, is marked to be read again).
func (sc *snapConn) getWatched(ctx context.Context, p string, kids bool) (*core.Node, []string, error) {
	zp := sc.b.zpath(p)
	var names []string
	var cst *zk.Stat
	var cerr error
	var wg sync.WaitGroup
	if kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names, cst, cerr = sc.children(ctx, p, zp)
		}()
	}
	n, err := sc.data(ctx, p, zp)
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	if n == nil {
		if p == sc.prefix {
			return nil, nil, sc.watchPrefix(ctx, zp)
		}
		return nil, nil, nil
	}
	if !kids {
		return n, nil, nil
	}
	if cerr != nil || cst == nil {
		// Missing: deleted around the data read; a watch set on it fires
		// NodeDeleted (or the parent's child watch fires), and a later
		// round reads it again.
		return nil, nil, cerr
	}
	n.Stat.NumChildren, n.Stat.ChildrenRevision = cst.NumChildren, cst.Pzxid
	return n, names, nil
}

// watchPrefix sets an exists watch on the missing prefix: its create
// fires NodeCreated. If it exists by then, the next round reads it.
func (sc *snapConn) watchPrefix(ctx context.Context, zp string) error {
	r, err := sc.readCall(ctx, opExists, sc.prefix, zp)
	if err != nil {
		return err
	}
	if r.err != zkNoNode {
		sc.markDirty(sc.prefix, evData|evKids)
	}
	return nil
}

// data reads p's data and stat with a data watch; a missing node is nil.
// Data too large for wire.call (a server whose jute.maxbuffer allows it)
// is read with the library's GetW (a channel kept in the library for this
// node).
func (sc *snapConn) data(ctx context.Context, p, zp string) (*core.Node, error) {
	r, err := sc.readCall(ctx, opGetData, p, zp)
	if errors.Is(err, errReplyTooLarge) {
		data, st, _, err := sc.conn.GetW(zp)
		if err != nil {
			return nil, sc.libErr(err, p)
		}
		n := &core.Node{Path: p, Data: data, Stat: convStat(st)}
		if len(n.Data) == 0 {
			n.Data = nil
		}
		return n, nil
	}
	if err != nil || r.err == zkNoNode {
		return nil, err
	}
	return decodeGetData(p, r.body)
}

// children reads p's children's names and stat with a child watch; a
// missing node is a nil stat. A list too large for wire.call is read with
// the library's ChildrenW (a channel kept in the library for this node).
func (sc *snapConn) children(ctx context.Context, p, zp string) ([]string, *zk.Stat, error) {
	r, err := sc.readCall(ctx, opGetChildren2, p, zp)
	if errors.Is(err, errReplyTooLarge) {
		names, st, _, err := sc.conn.ChildrenW(zp)
		if err != nil {
			return nil, nil, sc.libErr(err, p)
		}
		return names, st, nil
	}
	if err != nil || r.err == zkNoNode {
		return nil, nil, err
	}
	return decodeChildren(p, r.body)
}

// libErr maps the error of a library read of p: nil for a missing node
// (the caller's result is then nil too), the lost connection's error, or
// mapErr's.
func (sc *snapConn) libErr(err error, p string) error {
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if berr := sc.err(); berr != nil {
		return berr
	}
	return mapErr(err, p, false)
}

// errReplyTooLarge: a reply over maxCallReply, which wire.call does not
// keep, on a connection still up.
var errReplyTooLarge = errors.New("zookeeper: reply too large to keep")

// readCall sends a read of zp with a watch (opcode: getData,
// getChildren2, exists) on the snapshot's connection and returns its
// reply: no error and r.err 0 or zkNoNode, or an error (ErrUnavailable,
// context errors, errReplyTooLarge).
func (sc *snapConn) readCall(ctx context.Context, opcode int32, p, zp string) (reply, error) {
	return sc.readCallWatch(ctx, opcode, p, zp, true)
}

// readCallWatch is readCall, the read setting a watch only when watch.
func (sc *snapConn) readCallWatch(ctx context.Context, opcode int32, p, zp string, watch bool) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, err
	}
	req := binary.BigEndian.AppendUint32(make([]byte, 0, 5+len(zp)), uint32(len(zp)))
	req = append(req, zp...)
	if watch {
		req = append(req, 1)
	} else {
		req = append(req, 0)
	}
	r, err := sc.wire.call(ctx, opcode, req)
	if err != nil {
		if ctx.Err() != nil {
			return reply{}, ctx.Err()
		}
		if berr := sc.err(); berr != nil {
			return reply{}, berr
		}
		if errors.Is(err, errReplyLost) && sc.connUp() {
			return reply{}, errReplyTooLarge
		}
		return reply{}, fmt.Errorf("%w: the snapshot's connection failed: %v", core.ErrUnavailable, err)
	}
	if r.err != 0 && r.err != zkNoNode {
		return reply{}, mapErr(zkCodeErr(r.err), p, false)
	}
	return r, nil
}

// connUp reports whether the snapshot's connection is established and
// not failed.
func (sc *snapConn) connUp() bool {
	sc.wire.mu.Lock()
	defer sc.wire.mu.Unlock()
	c, _ := sc.wire.cur.(*tapConn)
	return c != nil && c.ready && !c.dead
}

// decodeGetData decodes a getData reply: data (a buffer, length -1 for
// none), then the stat.
func decodeGetData(p string, b []byte) (*core.Node, error) {
	bad := fmt.Errorf("%w: %s: malformed getData reply (%d bytes)", core.ErrUnavailable, p, len(b))
	if len(b) < 4 {
		return nil, bad
	}
	dl := int(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	if dl < 0 {
		dl = 0
	}
	if len(b) < dl+zkStatSize {
		return nil, bad
	}
	n := &core.Node{Path: p, Stat: convStat(decodeStat(b[dl:]))}
	if dl > 0 {
		n.Data = b[:dl:dl]
	}
	return n, nil
}

// decodeChildren decodes a getChildren2 reply: a vector of names, then the
// stat.
func decodeChildren(p string, b []byte) ([]string, *zk.Stat, error) {
	bad := fmt.Errorf("%w: %s: malformed getChildren2 reply (%d bytes)", core.ErrUnavailable, p, len(b))
	if len(b) < 4 {
		return nil, nil, bad
	}
	cnt := int(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	if cnt < 0 {
		cnt = 0
	}
	if cnt > len(b)/4 {
		return nil, nil, bad
	}
	names := make([]string, 0, cnt)
	for i := 0; i < cnt; i++ {
		if len(b) < 4 {
			return nil, nil, bad
		}
		l := int(int32(binary.BigEndian.Uint32(b)))
		if l < 0 || len(b) < 4+l {
			return nil, nil, bad
		}
		names = append(names, string(b[4:4+l]))
		b = b[4+l:]
	}
	if len(b) < zkStatSize {
		return nil, nil, bad
	}
	return names, decodeStat(b), nil
}

// inSpill reports, for each path, whether pass 1 spilled it: a lookup in
// the spill file through its index, the paths in order, each read from
// the index entry at or before it (a scan of at most about
// spillIndexBytes, shared by the paths between two entries).
func (sc *snapConn) inSpill(paths []string) ([]bool, error) {
	in := make([]bool, len(paths))
	if len(paths) == 0 || len(sc.spillIndex) == 0 {
		return in, nil
	}
	order := make([]int, len(paths))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return paths[order[i]] < paths[order[j]] })
	var r *bufio.Reader
	block, cur, end := -1, "", false // the entry scanned from, the path last read, at the end
	for _, i := range order {
		q := paths[i]
		m := sort.Search(len(sc.spillIndex), func(k int) bool { return sc.spillIndex[k].path > q }) - 1
		if m < 0 {
			continue // before the first node spilled
		}
		if m != block || cur > q {
			block, end = m, false
			off := sc.spillIndex[m].off
			r = bufio.NewReaderSize(io.NewSectionReader(sc.spill, off, sc.spillOff-off), 64<<10)
			n, err := readSpillNode(r, false)
			if err != nil {
				return nil, fmt.Errorf("snapshot spill file: %w", err)
			}
			cur = n.Path
		}
		for !end && cur < q {
			n, err := readSpillNode(r, false)
			if err == io.EOF {
				end = true
				break
			}
			if err != nil {
				return nil, fmt.Errorf("snapshot spill file: %w", err)
			}
			cur = n.Path
		}
		in[i] = cur == q
	}
	return in, nil
}

// pathHeap is a min-heap of paths.
type pathHeap []string

func (h pathHeap) Len() int           { return len(h) }
func (h pathHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h pathHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pathHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *pathHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// nodeHeap is a min-heap of nodes by path.
type nodeHeap []*core.Node

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i].Path < h[j].Path }
func (h nodeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)        { *h = append(*h, x.(*core.Node)) }
func (h *nodeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// limitDirty bounds dirty at n paths from now on (see snapConn.kick).
func (sc *snapConn) limitDirty(n int) {
	sc.mu.Lock()
	sc.maxDirty = n
	sc.mu.Unlock()
}

// overflowed reports whether an event found dirty full.
func (sc *snapConn) overflowed() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.overflow
}

// peek reads p's data and stat without a watch (the recursive one reports
// its changes) and the zxid of the reply; a missing node is nil, and the
// zxid then one at which p did not exist. Data too large for wire.call is
// read with the library's Get (a node found: no zxid needed).
func (sc *snapConn) peek(ctx context.Context, p string) (*core.Node, int64, error) {
	zp := sc.b.zpath(p)
	r, err := sc.readCallWatch(ctx, opGetData, p, zp, false)
	if errors.Is(err, errReplyTooLarge) {
		n, _, err := sc.get(ctx, p, false)
		return n, 0, err
	}
	if err != nil {
		return nil, 0, err
	}
	if r.err == zkNoNode {
		return nil, r.zxid, nil
	}
	n, err := decodeGetData(p, r.body)
	return n, r.zxid, err
}
