package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Describer is implemented by a harness's Store that knows the descriptor
// of the backend under test (a plugin's, as the host read it before
// starting it). Without it the properties comparing the descriptor with
// the backend's capabilities are skipped.
type Describer interface {
	Descriptor() core.BackendDescriptor
}

// txn applies ops through c and fails the property on an error.
func (e *env) txn(c core.MetadataBackend, what string, ops ...core.Op) core.TxnResult {
	e.t.Helper()
	res, err := c.Txn(e.ctx, ops, core.TxnOptions{})
	e.ok(err, "%s", what)
	if len(res.Results) != len(ops) {
		e.t.Fatalf("%s: %d results for %d ops", what, len(res.Results), len(ops))
	}
	return res
}

// stat reads path's stat through c.
func (e *env) stat(c core.MetadataBackend, path string) core.Stat {
	e.t.Helper()
	return e.get(c, path).Stat
}

// sameStat fails the property unless a read of path through c returns
// exactly want (the stat a write returned).
func (e *env) sameStat(c core.MetadataBackend, path string, want core.Stat, what string) {
	e.t.Helper()
	if got := e.stat(c, path); got != want {
		e.t.Fatalf("%s: %s reads back with stat %+v, but the write returned %+v", what, path, got, want)
	}
}

// clockPasses waits until the local clock has moved d past now, so that
// a later write's wall-clock time must be later than an earlier one's on
// any backend whose clock runs forward. It is a wait for time itself, not
// for another party.
func clockPasses(d time.Duration) {
	for until := time.Now().Add(d); time.Now().Before(until); {
		time.Sleep(time.Until(until))
	}
}

func statProperties() []Property {
	return []Property{
		{
			Name:        "Stat/Create/Complete",
			Description: "a create in every mode returns the full stat (version 0, create and modify revision equal to the transaction's, equal times not going backwards, data length, no children, the session as owner exactly when ephemeral) and reads back with exactly that stat; the parent gains a child and keeps its version and modify revision",
			run: func(e *env) {
				parent := p("m")
				e.create(e.c0, parent, []byte("parent"), core.Persistent)
				other := e.client()
				var lastTime, lastRev int64
				for i, mode := range []core.CreateMode{core.Persistent, core.Ephemeral, core.PersistentSequential, core.EphemeralSequential} {
					before := e.stat(e.c0, parent)
					data := bytes.Repeat([]byte{'d'}, 3+i)
					res := e.txn(e.c0, fmt.Sprintf("create in mode %v", mode), core.CreateOp(core.JoinPath(parent, fmt.Sprintf("n%d-", i)), data, mode))
					path, st := res.Results[0].Path, res.Results[0].Stat
					var owner int64
					if mode.IsEphemeral() {
						owner = e.c0.Session().ID
					}
					if st.Version != 0 || st.DataLength != int32(len(data)) || st.NumChildren != 0 || st.EphemeralOwner != owner {
						e.t.Fatalf("%v create of %s: stat %+v; want version 0, data length %d, no children, owner %d", mode, path, st, len(data), owner)
					}
					if st.CreateRevision != res.Revision || st.ModifyRevision != res.Revision {
						e.t.Fatalf("%v create of %s at revision %d: stat %+v; want create and modify revision %d", mode, path, res.Revision, st, res.Revision)
					}
					if res.Revision <= lastRev {
						e.t.Fatalf("%v create at revision %d after one at %d", mode, res.Revision, lastRev)
					}
					if st.CreateTime <= 0 || st.ModifyTime != st.CreateTime || st.CreateTime < lastTime {
						e.t.Fatalf("%v create of %s: times %d/%d; want equal, positive and not before the previous create's %d", mode, path, st.CreateTime, st.ModifyTime, lastTime)
					}
					lastTime, lastRev = st.CreateTime, res.Revision
					e.sameStat(other, path, st, fmt.Sprintf("%v create", mode))
					after := e.stat(other, parent)
					if after.NumChildren != before.NumChildren+1 || after.Version != before.Version || after.ModifyRevision != before.ModifyRevision || after.DataLength != before.DataLength {
						e.t.Fatalf("parent after a %v create of a child: stat %+v, before %+v; want one more child, the same version, modify revision and data length", mode, after, before)
					}
				}
			},
		},
		{
			Name:        "Stat/Set/Complete",
			Description: "a set returns the full stat (version +1, the same create revision and time, modify revision equal to the transaction's, a later modify time, the new data length, children and owner unchanged) and reads back with exactly that stat",
			run: func(e *env) {
				for _, mode := range []core.CreateMode{core.Persistent, core.Ephemeral} {
					path := p("s-" + mode.String())
					e.create(e.c0, path, []byte("x"), mode)
					if mode == core.Persistent {
						e.create(e.c0, core.JoinPath(path, "child"), nil, core.Persistent)
					}
					prev := e.stat(e.c0, path)
					for i, data := range [][]byte{[]byte("longer data"), nil, []byte("abc")} {
						// The clock moves on between writes, so the modify
						// time must too.
						clockPasses(20 * time.Millisecond)
						res := e.txn(e.c0, fmt.Sprintf("set %d of %s", i+1, path), core.SetOp(path, data, prev.Version))
						st := res.Results[0].Stat
						if st.Version != prev.Version+1 || st.CreateRevision != prev.CreateRevision || st.CreateTime != prev.CreateTime ||
							st.NumChildren != prev.NumChildren || st.EphemeralOwner != prev.EphemeralOwner || st.DataLength != int32(len(data)) {
							e.t.Fatalf("set %d of %s: stat %+v after %+v; want version +1, the same create revision, create time, children and owner, data length %d", i+1, path, st, prev, len(data))
						}
						if st.ModifyRevision != res.Revision || st.ModifyRevision <= prev.ModifyRevision {
							e.t.Fatalf("set %d of %s at revision %d: modify revision %d after %d; want the transaction's, later", i+1, path, res.Revision, st.ModifyRevision, prev.ModifyRevision)
						}
						if st.ModifyTime <= prev.ModifyTime {
							e.t.Fatalf("set %d of %s 20ms after the previous write: modify time %d, previous %d; want it later", i+1, path, st.ModifyTime, prev.ModifyTime)
						}
						e.sameStat(e.client(), path, st, fmt.Sprintf("set %d", i+1))
						prev = st
					}
				}
			},
		},
		{
			Name:        "Stat/ChildrenRevision",
			Description: "where a backend records a node's children revision (core.Stat.ChildrenRevision non-zero), it is at least the create revision, becomes the transaction's revision when a child is created or deleted, and stays on a child's set and on a grandchild's create; a backend that does not record it leaves it 0 everywhere",
			run: func(e *env) {
				parent := p("cr")
				e.create(e.c0, parent, nil, core.Persistent)
				st := e.stat(e.c0, parent)
				if st.ChildrenRevision == 0 {
					child := e.create(e.c0, core.JoinPath(parent, "c"), nil, core.Persistent)
					if got := e.stat(e.c0, parent).ChildrenRevision; got != 0 {
						e.t.Fatalf("%s: children revision 0 at creation, %d after a child's create: recorded for some nodes only", parent, got)
					}
					if got := e.stat(e.c0, child).ChildrenRevision; got != 0 {
						e.t.Fatalf("%s: children revision %d while its parent's is 0", child, got)
					}
					return
				}
				if st.ChildrenRevision < st.CreateRevision {
					e.t.Fatalf("%s: children revision %d below its create revision %d", parent, st.ChildrenRevision, st.CreateRevision)
				}
				child := core.JoinPath(parent, "c")
				res := e.txn(e.c0, "create a child", core.CreateOp(child, nil, core.Persistent))
				if got := e.stat(e.c0, parent).ChildrenRevision; got != res.Revision {
					e.t.Fatalf("%s after a child's create at revision %d: children revision %d", parent, res.Revision, got)
				}
				e.txn(e.c0, "set the child", core.SetOp(child, []byte("x"), core.AnyVersion))
				e.txn(e.c0, "create a grandchild", core.CreateOp(core.JoinPath(child, "g"), nil, core.Persistent))
				if got := e.stat(e.c0, parent).ChildrenRevision; got != res.Revision {
					e.t.Fatalf("%s: children revision %d after a child's set and a grandchild's create, want %d (its child's create)", parent, got, res.Revision)
				}
				e.txn(e.c0, "delete the grandchild", core.DeleteOp(core.JoinPath(child, "g"), core.AnyVersion))
				del := e.txn(e.c0, "delete the child", core.DeleteOp(child, core.AnyVersion))
				if got := e.stat(e.c0, parent).ChildrenRevision; got != del.Revision {
					e.t.Fatalf("%s after a child's delete at revision %d: children revision %d", parent, del.Revision, got)
				}
			},
		},
		{
			Name:        "Stat/ChildChange",
			Description: "creating and deleting a child changes only its parent's number of children (and children revision, Stat/ChildrenRevision): the parent's version, data length, create and modify revisions and times stay",
			run: func(e *env) {
				parent := p("parent")
				e.create(e.c0, parent, []byte("data"), core.Persistent)
				orig := e.stat(e.c0, parent)
				same := func(st core.Stat, children int32, what string) {
					e.t.Helper()
					want := orig
					want.NumChildren = children
					want.ChildrenRevision = st.ChildrenRevision // Stat/ChildrenRevision
					if st != want {
						e.t.Fatalf("parent after %s: stat %+v; want %+v", what, st, want)
					}
				}
				clockPasses(20 * time.Millisecond)
				e.create(e.c0, core.JoinPath(parent, "a"), nil, core.Persistent)
				same(e.stat(e.c0, parent), 1, "a child's create")
				_, err := e.c0.Txn(e.ctx, []core.Op{core.CreateOp(core.JoinPath(parent, "b"), nil, core.Ephemeral), core.CreateOp(core.JoinPath(parent, "c-"), nil, core.PersistentSequential)}, core.TxnOptions{})
				e.ok(err, "create two children in one transaction")
				same(e.stat(e.client(), parent), 3, "two more children's create")
				e.ok(core.Delete(e.ctx, e.c0, core.JoinPath(parent, "a"), core.AnyVersion, core.Fence{}), "delete a child")
				same(e.stat(e.client(), parent), 2, "a child's delete")
			},
		},
		{
			Name:        "Stat/Txn/Results",
			Description: "in a transaction, each create's and set's result holds the node's stat after that op (versions counting within the transaction, create and modify revisions equal to the transaction's, data length), a delete's result is the zero stat, and the last stat of each node reads back",
			run: func(e *env) {
				e.create(e.c0, p("old"), []byte("old"), core.Persistent)
				e.create(e.c0, p("gone"), nil, core.Persistent)
				old := e.stat(e.c0, p("old"))
				res := e.txn(e.c0, "a mixed transaction",
					core.CreateOp(p("a"), []byte("1"), core.Persistent),
					core.SetOp(p("a"), []byte("22"), 0),
					core.CreateOp(p("a", "b"), []byte("333"), core.Persistent),
					core.SetOp(p("old"), []byte("4444"), old.Version),
					core.DeleteOp(p("gone"), core.AnyVersion),
				)
				rev := res.Revision
				r := res.Results
				check := func(i int, path string, version int64, createRev int64, length int32) {
					e.t.Helper()
					st := r[i].Stat
					if r[i].Path != path || st.Version != version || st.CreateRevision != createRev || st.ModifyRevision != rev || st.DataLength != length {
						e.t.Fatalf("result %d (%v): %s %+v; want %s at version %d, create revision %d, modify revision %d (the transaction's), data length %d", i, r[i].Type, r[i].Path, st, path, version, createRev, rev, length)
					}
				}
				check(0, p("a"), 0, rev, 1)
				check(1, p("a"), 1, rev, 2)
				check(2, p("a", "b"), 0, rev, 3)
				check(3, p("old"), old.Version+1, old.CreateRevision, 4)
				if r[4].Stat != (core.Stat{}) {
					e.t.Fatalf("delete result stat %+v; want the zero stat", r[4].Stat)
				}
				c := e.client()
				a := e.stat(c, p("a"))
				if want := r[1].Stat; a.Version != want.Version || a.CreateRevision != want.CreateRevision || a.ModifyRevision != want.ModifyRevision || a.DataLength != want.DataLength || a.NumChildren != 1 {
					e.t.Fatalf("%s reads back %+v after the transaction; want the set's %+v with one child", p("a"), a, want)
				}
				e.sameStat(c, p("a", "b"), r[2].Stat, "create in a transaction")
				e.sameStat(c, p("old"), r[3].Stat, "set in a transaction")
			},
		},
	}
}

func sequentialReuseProperties() []Property {
	return []Property{
		{
			Name:        "Create/Sequential/NotReusedAfterDelete",
			Description: "a sequential suffix is never given out again: after the newest children, and then all of them, are deleted, the next suffix is still greater than every earlier one",
			run: func(e *env) {
				parent := p("q")
				e.create(e.c0, parent, nil, core.Persistent)
				prefix := core.JoinPath(parent, "n-")
				var paths, sufs []string
				next := func() string {
					e.t.Helper()
					path := e.create(e.c0, prefix, nil, core.PersistentSequential)
					suf := seqSuffix(e, prefix, path)
					for _, s := range sufs {
						if suf <= s {
							e.t.Fatalf("suffix %s given out after %s (earlier suffixes %v): want greater than every earlier one", suf, s, sufs)
						}
					}
					paths, sufs = append(paths, path), append(sufs, suf)
					return path
				}
				for i := 0; i < 3; i++ {
					next()
				}
				// Delete the two newest: a suffix counted from the children
				// left, or from the largest left, would repeat one.
				for _, path := range paths[1:] {
					e.ok(core.Delete(e.ctx, e.c0, path, core.AnyVersion, core.Fence{}), "delete %s", path)
				}
				next()
				e.ok(core.Delete(e.ctx, e.c0, paths[0], core.AnyVersion, core.Fence{}), "delete %s", paths[0])
				e.ok(core.Delete(e.ctx, e.c0, paths[3], core.AnyVersion, core.Fence{}), "delete %s", paths[3])
				next()
			},
		},
	}
}

// snapTxn is one committed transaction of Snapshot/ConcurrentWriters.
type snapTxn struct {
	rev int64
	ops []core.Op
}

// snapNode is a node's expected data and version.
type snapNode struct {
	data    string
	version int64
}

// replay returns the state under the prefix after applying the
// transactions at or below rev, in revision order.
func replay(txns []snapTxn, rev int64) map[string]snapNode {
	state := map[string]snapNode{}
	for _, t := range txns {
		if t.rev > rev {
			break
		}
		for _, op := range t.ops {
			switch op.Type {
			case core.OpCreate:
				state[op.Path] = snapNode{data: string(op.Data)}
			case core.OpSet:
				state[op.Path] = snapNode{data: string(op.Data), version: state[op.Path].version + 1}
			case core.OpDelete:
				delete(state, op.Path)
			}
		}
	}
	return state
}

func snapshotWriterProperties() []Property {
	return []Property{
		{
			Name:        "Snapshot/ConcurrentWriters",
			Description: "snapshots taken while several clients commit transactions over shared and private nodes are each exactly the state at their revision: every transaction at or below it whole, none above it, none that had returned before the snapshot began missing (one failing with ErrUnavailable must succeed when taken again with the writers paused)",
			run: func(e *env) {
				snapshotsUnderWriters(e, func(c core.MetadataBackend, prefix string, _ func()) (core.Snapshot, error) {
					return c.Snapshot(e.ctx, prefix)
				})
			},
		},
		{
			Name:        "Snapshot/Streamed/ConcurrentWriters",
			Needs:       NeedsStreamedSnapshots,
			Description: "streamed snapshots (SnapshotStreamer) in pages of one node, taken while several clients commit transactions over shared and private nodes, are each exactly the state of one revision: every page at the same revision, every transaction at or below it whole, none above it, none that had returned before the stream began missing",
			run: func(e *env) {
				snapshotsUnderWriters(e, func(c core.MetadataBackend, prefix string, between func()) (core.Snapshot, error) {
					return streamedSnapshot(e.ctx, c, prefix, 1, between)
				})
			},
		},
		{
			Name:        "Snapshot/Streamed/SameAsWhole",
			Needs:       NeedsStreamedSnapshots,
			Description: "a streamed snapshot, in small pages or one large, holds exactly the nodes, data and stats of a whole snapshot at the same revision, in the same order; an empty prefix is one page with no nodes",
			run: func(e *env) {
				e.create(e.c0, p("a"), []byte("a"), core.Persistent)
				for i := 0; i < 20; i++ {
					e.create(e.c0, p("a", fmt.Sprintf("n%02d", i)), []byte(fmt.Sprintf("value-%d", i)), core.Persistent)
				}
				whole, err := e.c0.Snapshot(e.ctx, base)
				e.ok(err, "snapshot")
				for _, page := range []int{1, 64, 1 << 20} {
					var pages int
					got, err := streamedSnapshotPages(e.ctx, e.c0, base, page, &pages)
					e.ok(err, "streamed snapshot in pages of %d bytes", page)
					if got.Revision != whole.Revision {
						e.t.Fatalf("streamed snapshot (pages of %d bytes) at revision %d, the whole one at %d with no write between", page, got.Revision, whole.Revision)
					}
					if fmt.Sprint(got.Nodes) != fmt.Sprint(whole.Nodes) {
						e.t.Fatalf("streamed snapshot (pages of %d bytes) differs from the whole one:\n got %v\nwant %v", page, got.Nodes, whole.Nodes)
					}
					if page == 1 && pages != len(whole.Nodes) {
						e.t.Fatalf("pages of 1 byte: %d pages for %d nodes, want one node a page", pages, len(whole.Nodes))
					}
				}
				var pages int
				empty, err := streamedSnapshotPages(e.ctx, e.c0, p("missing"), 1, &pages)
				e.ok(err, "streamed snapshot of a missing prefix")
				if len(empty.Nodes) != 0 || pages != 1 {
					e.t.Fatalf("streamed snapshot of a missing prefix: %d nodes in %d pages, want one page with none", len(empty.Nodes), pages)
				}
			},
		},
	}
}

// streamedSnapshot assembles c's streamed snapshot of prefix (pages of
// pageBytes), failing when two pages name different revisions; between,
// when set, runs after each page (the writers commit meanwhile).
func streamedSnapshot(ctx context.Context, c core.MetadataBackend, prefix string, pageBytes int, between func()) (core.Snapshot, error) {
	var pages int
	return streamedPages(ctx, c, prefix, pageBytes, &pages, between)
}

func streamedSnapshotPages(ctx context.Context, c core.MetadataBackend, prefix string, pageBytes int, pages *int) (core.Snapshot, error) {
	return streamedPages(ctx, c, prefix, pageBytes, pages, nil)
}

func streamedPages(ctx context.Context, c core.MetadataBackend, prefix string, pageBytes int, pages *int, between func()) (core.Snapshot, error) {
	ss, ok := core.Optional[core.SnapshotStreamer](c)
	if !ok {
		return core.Snapshot{}, fmt.Errorf("the client declares StreamedSnapshots but is no core.SnapshotStreamer")
	}
	snap := core.Snapshot{Revision: -1}
	err := ss.StreamSnapshot(ctx, prefix, pageBytes, func(rev int64, nodes []core.Node) error {
		*pages++
		if snap.Revision >= 0 && rev != snap.Revision {
			return fmt.Errorf("page %d of a streamed snapshot is at revision %d, the pages before at %d: a snapshot mixes revisions", *pages, rev, snap.Revision)
		}
		snap.Revision = rev
		for _, n := range nodes {
			n.Data = append([]byte(nil), n.Data...)
			snap.Nodes = append(snap.Nodes, n)
		}
		if between != nil {
			between()
		}
		return nil
	})
	return snap, err
}

// snapshotsUnderWriters takes snapshots with take while writers commit
// transactions, and checks each against the replayed history. A take
// that reads in parts calls between after each: it waits (briefly) for a
// transaction to commit, so that every multi-part read spans writes.
func snapshotsUnderWriters(e *env, take func(c core.MetadataBackend, prefix string, between func()) (core.Snapshot, error)) {
	// The writers write until the reader has taken its
	// snapshots (or maxRounds each), so that snapshots overlap
	// writes even on a fast backend. A snapshot failing with
	// ErrUnavailable (allowed: ZooKeeper gives up on a prefix
	// that keeps changing) is taken again with the writers
	// paused, and must then succeed.
	const writers, maxRounds, snapshots, shared = 3, 3000, 40, 4
	root := p("s")
	var keys []string
	init := []core.Op{core.CreateOp(root, nil, core.Persistent)}
	for k := 0; k < shared; k++ {
		keys = append(keys, core.JoinPath(root, fmt.Sprintf("k%d", k)))
		init = append(init, core.CreateOp(keys[k], []byte("init"), core.Persistent))
	}
	res := e.txn(e.c0, "create the shared nodes", init...)

	var mu sync.Mutex
	txns := []snapTxn{{rev: res.Revision, ops: init}}
	var doneRev atomic.Int64 // the highest revision of a returned transaction
	doneRev.Store(res.Revision)
	var running atomic.Int32
	running.Store(writers)
	var stop atomic.Bool
	// progress has a value after a commit: each snapshot waits
	// for one, so that writes go on between and during them.
	progress := make(chan struct{}, 1)
	between := func() {
		select {
		case <-progress:
		case <-time.After(100 * time.Millisecond): // the writers may be paused, or done
		}
	}
	var pause sync.RWMutex // writers hold it shared per transaction
	// begun is closed once every writer has committed once (or
	// given up), so that the snapshots overlap the writes.
	begun := make(chan struct{})
	var toBegin atomic.Int32
	toBegin.Store(writers)
	began := func(once *sync.Once) {
		once.Do(func() {
			if toBegin.Add(-1) == 0 {
				close(begun)
			}
		})
	}
	cs := e.clients(writers)
	errs := make(chan error, writers)
	go parallel(writers, func(w int) {
		var once sync.Once
		defer began(&once)
		defer func() {
			running.Add(-1)
			select {
			case progress <- struct{}{}: // the reader must not wait for a commit that will not come
			default:
			}
		}()
		for j := 0; j < maxRounds && !stop.Load(); j++ {
			v := []byte(fmt.Sprintf("w%d-%d", w, j))
			own := core.JoinPath(root, fmt.Sprintf("w%d-%d", w, j))
			ops := []core.Op{
				core.SetOp(keys[(w+j)%shared], v, core.AnyVersion),
				core.CreateOp(own, v, core.Persistent),
				core.SetOp(keys[(w+j+1)%shared], v, core.AnyVersion),
			}
			if j > 0 {
				ops = append(ops, core.DeleteOp(core.JoinPath(root, fmt.Sprintf("w%d-%d", w, j-1)), core.AnyVersion))
			}
			pause.RLock()
			r, err := cs[w].Txn(e.ctx, ops, core.TxnOptions{})
			pause.RUnlock()
			if err != nil {
				errs <- fmt.Errorf("writer %d, transaction %d: %w", w, j, err)
				return
			}
			mu.Lock()
			txns = append(txns, snapTxn{rev: r.Revision, ops: ops})
			mu.Unlock()
			began(&once)
			select {
			case progress <- struct{}{}:
			default:
			}
			for {
				d := doneRev.Load()
				if r.Revision <= d || doneRev.CompareAndSwap(d, r.Revision) {
					break
				}
			}
		}
	})

	type taken struct {
		snap    core.Snapshot
		minimum int64 // doneRev when the snapshot began
	}
	var snaps []taken
	retried := 0
	reader := e.client()
	select {
	case <-begun:
	case <-time.After(e.wait):
		e.t.Fatalf("the writers did not commit a first transaction each within %v", e.wait)
	}
	for i := 0; i < snapshots && running.Load() > 0; i++ {
		select {
		case <-progress:
		case <-time.After(e.wait):
			stop.Store(true)
			e.t.Fatalf("no transaction committed within %v before snapshot %d", e.wait, i)
		}
		minimum := doneRev.Load()
		snap, err := take(reader, root, between)
		if errors.Is(err, core.ErrUnavailable) {
			retried++
			pause.Lock()
			snap, err = take(reader, root, between)
			pause.Unlock()
		}
		if err != nil {
			stop.Store(true)
		}
		e.ok(err, "snapshot %d", i)
		snaps = append(snaps, taken{snap, minimum})
	}
	stop.Store(true)
	e.eventually("the writers to finish", func() bool { return running.Load() == 0 })
	select {
	case err := <-errs:
		e.t.Fatalf("%v", err)
	default:
	}
	snap, err := take(reader, root, between)
	e.ok(err, "final snapshot")
	snaps = append(snaps, taken{snap, doneRev.Load()})

	mu.Lock()
	sort.Slice(txns, func(i, j int) bool { return txns[i].rev < txns[j].rev })
	for i := 1; i < len(txns); i++ {
		if txns[i].rev == txns[i-1].rev {
			e.t.Fatalf("two transactions committed at revision %d", txns[i].rev)
		}
	}
	last := txns[len(txns)-1].rev
	mu.Unlock()
	spanning := 0
	for i, s := range snaps {
		if s.snap.Revision < s.minimum {
			e.t.Fatalf("snapshot %d at revision %d, but a transaction at revision %d had returned before it began", i, s.snap.Revision, s.minimum)
		}
		if s.snap.Revision > res.Revision && s.snap.Revision < last {
			spanning++
		}
		want := replay(txns, s.snap.Revision)
		var diffs []string
		for _, n := range s.snap.Nodes {
			w, ok := want[n.Path]
			switch {
			case !ok:
				diffs = append(diffs, "extra "+n.Path)
			case string(n.Data) != w.data || n.Stat.Version != w.version:
				diffs = append(diffs, fmt.Sprintf("%s holds %q at version %d, want %q at version %d", n.Path, n.Data, n.Stat.Version, w.data, w.version))
			}
			delete(want, n.Path)
		}
		for path := range want {
			diffs = append(diffs, "missing "+path)
		}
		if len(diffs) > 0 {
			sort.Strings(diffs)
			e.t.Fatalf("snapshot %d at revision %d is not the state at that revision: %v", i, s.snap.Revision, diffs)
		}
	}
	e.t.Logf("%d snapshots (%d taken again with the writers paused after ErrUnavailable), %d of them between the first and the last write, over %d transactions", len(snaps), retried, spanning, len(txns))
}

func descriptorProperties() []Property {
	return []Property{
		{
			Name:        "Capabilities/MatchDescriptor",
			Needs:       NeedsDescriptor,
			Description: "the backend's Capabilities agree with its descriptor: the same Name, the same TabletServers mode, and the descriptor's selector key (if any) as SelectorKey",
			run: func(e *env) {
				d := e.store.(Describer).Descriptor()
				if e.caps.Name != d.Name {
					e.t.Errorf("Capabilities().Name is %q but the descriptor names the backend %q", e.caps.Name, d.Name)
				}
				if e.caps.TabletServers != d.TabletServers {
					e.t.Errorf("Capabilities().TabletServers is %v but the descriptor says %v", e.caps.TabletServers, d.TabletServers)
				}
				if d.SelectorKey != "" && e.caps.SelectorKey != d.SelectorKey {
					e.t.Errorf("Capabilities().SelectorKey is %q but the descriptor's selector key is %q", e.caps.SelectorKey, d.SelectorKey)
				}
			},
		},
	}
}
