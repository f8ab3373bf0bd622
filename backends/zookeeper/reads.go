package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
)

// sync makes the connected server catch up with the ensemble's leader, so
// that the reads this client sends next see every write committed before.
// A standalone server is always caught up: no request.
func (b *Backend) sync(ctx context.Context) error {
	if b.standalone {
		return b.closedErr(ctx.Err())
	}
	err := b.read(ctx, func() error {
		_, err := b.conn.Sync(b.root)
		return err
	})
	if err != nil {
		return b.closedErr(mapErr(err, "sync", false))
	}
	return nil
}

// syncRevision is sync, and also brings the client's latest zxid up to the
// server's current one: on a standalone server (no sync needed) it sends a
// read, whose answer carries the server's zxid.
func (b *Backend) syncRevision(ctx context.Context) error {
	if !b.standalone {
		return b.sync(ctx)
	}
	err := b.read(ctx, func() error {
		_, _, err := b.conn.Exists(b.root)
		return err
	})
	if err != nil {
		return b.closedErr(mapErr(err, "/", false))
	}
	return nil
}

// GetMany reads many paths concurrently (at most max-inflight-requests in
// flight). Unless opts.Stale it first syncs the connected server with the
// ensemble leader, so the reads see every write committed before the call
// (ZooKeeper's sync-then-read; not needed, and skipped, when the only
// configured server runs standalone). Per-path errors: ErrNotFound,
// ErrInvalidPath. Call errors: ErrUnavailable (after the configured
// retries), ErrClosed, context errors.
func (b *Backend) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	if b.isClosed() {
		return nil, core.ErrClosed
	}
	out := make([]core.GetResult, len(paths))
	if len(paths) == 0 {
		return out, nil
	}
	if !opts.Stale {
		if err := b.sync(ctx); err != nil {
			return nil, err
		}
	}
	err := parallel(len(paths), func(i int) error {
		p := paths[i]
		out[i].Node.Path = p
		if err := core.ValidatePath(p); err != nil {
			out[i].Err = err
			return nil
		}
		zp := b.zpath(p)
		var data []byte
		var st *zk.Stat
		err := b.read(ctx, func() error {
			var err error
			if opts.NoData {
				var ok bool
				ok, st, err = b.conn.Exists(zp)
				if err == nil && !ok {
					err = zk.ErrNoNode
				}
				return err
			}
			data, st, err = b.conn.Get(zp)
			return err
		})
		switch {
		case err == nil:
			out[i].Node.Data = data
			out[i].Node.Stat = convStat(st)
			if len(data) == 0 {
				out[i].Node.Data = nil
			}
		case errors.Is(err, zk.ErrNoNode):
			out[i].Err = fmt.Errorf("%w: %s", core.ErrNotFound, p)
		default:
			return b.closedErr(mapErr(err, p, false))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Children returns path's children, sorted, and path's stat. Unless
// opts.Stale it syncs first (see GetMany). Errors: ErrNotFound,
// ErrInvalidPath, ErrUnavailable, ErrClosed, context errors.
func (b *Backend) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	if b.isClosed() {
		return nil, core.Stat{}, core.ErrClosed
	}
	if err := core.ValidatePath(path); err != nil {
		return nil, core.Stat{}, err
	}
	if !opts.Stale {
		if err := b.sync(ctx); err != nil {
			return nil, core.Stat{}, err
		}
	}
	var names []string
	var st *zk.Stat
	err := b.read(ctx, func() error {
		var err error
		names, st, err = b.conn.Children(b.zpath(path))
		return err
	})
	if err != nil {
		return nil, core.Stat{}, b.closedErr(mapErr(err, path, false))
	}
	sort.Strings(names)
	return names, convStat(st), nil
}

// snapNode is one node of a tree read.
type snapNode struct {
	path     string // contract path
	data     []byte
	stat     zk.Stat
	children []string
	unstable bool // data changed between the data and the children read
}

// readTree reads every node at or below prefix: data, stat and children,
// one level at a time, each level's reads concurrent. A node deleted while
// being read is left out. A missing prefix gives no nodes.
func (b *Backend) readTree(ctx context.Context, prefix string) ([]*snapNode, error) {
	var all []*snapNode
	level := []string{prefix}
	for len(level) > 0 {
		nodes := make([]*snapNode, len(level))
		err := parallel(len(level), func(i int) error {
			p := level[i]
			zp := b.zpath(p)
			var n snapNode
			n.path = p
			err := b.read(ctx, func() error {
				data, st, err := b.conn.Get(zp)
				if err != nil {
					return err
				}
				n.data, n.stat = data, *st
				return nil
			})
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return mapErr(err, p, false)
			}
			if n.stat.NumChildren > 0 {
				err = b.read(ctx, func() error {
					names, st, err := b.conn.Children(zp)
					if err != nil {
						return err
					}
					n.children = names
					if st.Mzxid != n.stat.Mzxid {
						n.unstable = true
					}
					n.stat.Pzxid, n.stat.NumChildren, n.stat.Cversion = st.Pzxid, st.NumChildren, st.Cversion
					return nil
				})
				if errors.Is(err, zk.ErrNoNode) {
					return nil
				}
				if err != nil {
					return mapErr(err, p, false)
				}
			}
			nodes[i] = &n
			return nil
		})
		if err != nil {
			return nil, b.closedErr(err)
		}
		var next []string
		for _, n := range nodes {
			if n == nil {
				continue
			}
			all = append(all, n)
			for _, c := range n.children {
				next = append(next, core.JoinPath(n.path, c))
			}
		}
		level = next
	}
	return all, nil
}

// maxSnapshotPasses bounds snapshotPasses's read-and-verify passes.
const maxSnapshotPasses = 8

// snapshotPasses reads every node at or below prefix, sorted by path: the
// snapshot of a server without persistent recursive watches (before
// ZooKeeper 3.6; StreamSnapshot uses them).
//
// ZooKeeper has no multi-node read at one zxid, so the backend syncs, reads
// the subtree, then re-reads every node's stat: when no node changed
// (same czxid, mzxid, pzxid) the first read is the state of the subtree at
// one instant (the end of the first pass); otherwise it reads again, at
// most 8 times, and then fails with ErrUnavailable (the prefix changes
// faster than it can be read). Revision is the highest zxid of the
// snapshot's nodes or of the sync, whichever is higher: every change the
// snapshot reflects has a zxid at or below it. Errors: ErrInvalidPath,
// ErrUnavailable, ErrClosed, context errors.
func (b *Backend) snapshotPasses(ctx context.Context, prefix string) (core.Snapshot, error) {
	if b.isClosed() {
		return core.Snapshot{}, core.ErrClosed
	}
	if err := core.ValidatePath(prefix); err != nil {
		return core.Snapshot{}, err
	}
	if err := b.syncRevision(ctx); err != nil {
		return core.Snapshot{}, err
	}
	rev := b.wire.lastZxid.Load()
	for pass := 0; pass < maxSnapshotPasses; pass++ {
		nodes, err := b.readTree(ctx, prefix)
		if err != nil {
			return core.Snapshot{}, err
		}
		var changed atomic.Bool
		for _, n := range nodes {
			if n.unstable {
				changed.Store(true)
			}
		}
		err = parallel(len(nodes), func(i int) error {
			n := nodes[i]
			var st *zk.Stat
			var ok bool
			err := b.read(ctx, func() error {
				var err error
				ok, st, err = b.conn.Exists(b.zpath(n.path))
				return err
			})
			if err != nil {
				return mapErr(err, n.path, false)
			}
			if !ok || st.Czxid != n.stat.Czxid || st.Mzxid != n.stat.Mzxid || st.Pzxid != n.stat.Pzxid {
				changed.Store(true)
			}
			return nil
		})
		if err != nil {
			return core.Snapshot{}, b.closedErr(err)
		}
		if changed.Load() {
			continue
		}
		snap := core.Snapshot{Revision: rev, Nodes: make([]core.Node, 0, len(nodes))}
		for _, n := range nodes {
			snap.Revision = max(snap.Revision, n.stat.Czxid, n.stat.Mzxid, n.stat.Pzxid)
			data := n.data
			if len(data) == 0 {
				data = nil
			}
			snap.Nodes = append(snap.Nodes, core.Node{Path: n.path, Data: data, Stat: convStat(&n.stat)})
		}
		sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].Path < snap.Nodes[j].Path })
		return snap, nil
	}
	return core.Snapshot{}, fmt.Errorf("%w: snapshot of %s: the subtree kept changing during %d read passes", core.ErrUnavailable, prefix, maxSnapshotPasses)
}
