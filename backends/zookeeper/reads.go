package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"

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
