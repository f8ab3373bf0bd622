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
// current revision. On a server without persistent recursive watches it
// falls back to the read-and-verify passes (the whole tree in memory, and
// ErrUnavailable when the prefix changes during each of them). Errors:
// ErrInvalidPath, ErrUnavailable, ErrClosed, fn's, context errors.
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
	sc, err := b.openSnapConn(ctx, prefix)
	if errors.Is(err, errNoRecursiveWatch) {
		snap, err := b.snapshotPasses(ctx, prefix)
		if err != nil {
			return err
		}
		return core.PageNodes(snap.Nodes, pageBytes, func(nodes []core.Node) error { return fn(snap.Revision, nodes) })
	}
	if err != nil {
		return err
	}
	defer sc.close()
	if err := sc.read(ctx); err != nil {
		return b.closedErr(err)
	}
	sc.conn.Close() // the watch ends with the session
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

	mu      sync.Mutex
	dirty   map[string]struct{} // paths with an event since they were taken
	broken  error               // the connection was lost: the watch with it
	hadConn bool

	spill   *os.File
	spillW  *bufio.Writer
	nspill  int
	over    map[string]*core.Node // re-read nodes; nil: deleted
	maxZxid int64
	lastRev int64 // the zxid of the last reply when the reads ended
}

// openSnapConn opens the snapshot's own connection, registers the
// recursive watch on prefix and syncs the server (its reads then see
// every write committed before). Errors: errNoRecursiveWatch,
// ErrUnavailable, context errors.
func (b *Backend) openSnapConn(ctx context.Context, prefix string) (*snapConn, error) {
	sc := &snapConn{
		b: b, prefix: prefix, wire: &wireState{},
		connected: make(chan struct{}),
		watchErr:  make(chan int32, 1),
		dirty:     map[string]struct{}{},
		over:      map[string]*core.Node{},
	}
	sc.wire.replies = func(r reply) {
		if r.xid == snapWatchXid {
			select {
			case sc.watchErr <- r.err:
			default:
			}
		}
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
	if err := sc.err(); err != nil {
		return fail(err)
	}
	if !b.standalone {
		if _, err := conn.Sync(zp); err != nil {
			return fail(mapErr(err, prefix, false))
		}
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
		}
	case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged:
		p := sc.b.rel(ev.Path)
		sc.mu.Lock()
		sc.dirty[p] = struct{}{}
		if (ev.Type == zk.EventNodeCreated || ev.Type == zk.EventNodeDeleted) && p != sc.prefix {
			sc.dirty[core.ParentPath(p)] = struct{}{}
		}
		sc.mu.Unlock()
	case zk.EventNotWatching:
		sc.mu.Lock()
		if sc.broken == nil {
			sc.broken = fmt.Errorf("%w: the snapshot's watch ended", core.ErrUnavailable)
		}
		sc.mu.Unlock()
	}
}

func (sc *snapConn) err() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.broken
}

// takeDirty returns the paths changed since the last take.
func (sc *snapConn) takeDirty() map[string]struct{} {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	d := sc.dirty
	sc.dirty = map[string]struct{}{}
	return d
}

func (sc *snapConn) close() {
	sc.conn.Close()
	if sc.spill != nil {
		sc.spill.Close()
		os.Remove(sc.spill.Name())
	}
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
// has some. A missing node is nil.
func (sc *snapConn) get(ctx context.Context, p string, kids bool) (*core.Node, []string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
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
	sc.nspill++
	return nil
}

// readSpill reads the next node of the spill file; io.EOF at its end.
func readSpill(r *bufio.Reader) (core.Node, error) {
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
	if dl > 0 {
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
