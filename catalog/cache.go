package catalog

import (
	"context"
	"sync"

	"github.com/metaplane/metaplane/core"
)

// decodeCache keeps decoded records by path, valid for the exact
// (revision, version) they were decoded at: a node's modify revision
// changes with every change of its data, so a hit is always current. It is
// bounded: past maxCached entries it starts over.
type decodeCache struct {
	mu sync.RWMutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	rev, version int64
	val          any
}

const maxCached = 200000

// cached decodes n.Data with dec, or returns the value decoded earlier for
// the same path at the same revision and version. Values returned from the
// cache share their maps and slices with it: callers treat catalog records
// as read-only.
func cached[T any](c *decodeCache, n core.Node, dec func([]byte) (T, error)) (T, error) {
	rev := n.Stat.ModifyRevision
	if rev == 0 {
		return dec(n.Data)
	}
	c.mu.RLock()
	e, ok := c.m[n.Path]
	c.mu.RUnlock()
	if ok && e.rev == rev && e.version == n.Stat.Version {
		if v, ok := e.val.(T); ok {
			return v, nil
		}
	}
	v, err := dec(n.Data)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCached {
		c.m = map[string]cacheEntry{}
	}
	c.m[n.Path] = cacheEntry{rev: rev, version: n.Stat.Version, val: v}
	c.mu.Unlock()
	return v, nil
}

// Decode decodes n.Data with dec through c's decode cache (see cached): a
// reader of the catalog's records from the image (the coordinator's tablet
// notifier) decodes only the nodes that changed since it last read them.
func Decode[T any](c *Catalog, n core.Node, dec func([]byte) (T, error)) (T, error) {
	return cached(&c.cache, n, dec)
}

// sharedReader is a reader that can hand out the data it holds without a
// copy (image.Image's GetManyShared); the data must not be modified.
type sharedReader interface {
	GetManyShared(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error)
}

// readShared reads paths (with their data), without copying the data
// when the reader allows it: for reads whose data is only decoded
// (through the decode cache), never modified or kept.
func (c *Catalog) readShared(ctx context.Context, paths []string) ([]core.GetResult, error) {
	if r, ok := c.r.(sharedReader); ok {
		return r.GetManyShared(ctx, paths, core.ReadOptions{})
	}
	return c.r.GetMany(ctx, paths, core.ReadOptions{})
}
