package raft

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// StreamSnapshot reads every node at or below prefix at one applied index
// (linearizable, as Snapshot), a page of about pageBytes at a time, from a
// snapshot of the store. See core.SnapshotStreamer.
func (c *Client) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := core.ValidatePath(prefix); err != nil {
		return err
	}
	if pageBytes <= 0 {
		pageBytes = core.DefaultSnapshotPageBytes
	}
	v, err := c.m.read(ctx, fsm.StreamQuery{}, false)
	if err != nil {
		return err
	}
	h := v.(*fsm.StreamHandle)
	defer h.Done()
	lo := fsm.NodeKey(prefix)
	it, err := h.Snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: fsm.PrefixEnd(lo)})
	if err != nil {
		return err
	}
	defer it.Close()
	var page []core.Node
	size, sent := 0, false
	flush := func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("raft: streamed snapshot: %w", err)
		}
		if h.Stop.Load() {
			return errClosed
		}
		sent = true
		err := fn(h.Rev, page)
		page, size = page[:0], 0
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		p := string(it.Key()[1:])
		if p == "/" || !core.HasPrefixPath(p, prefix) {
			continue // the root is left out, as Snapshot does
		}
		var n raftv1.NodeRecord
		if err := fsm.Unmarshal(it.Value(), &n); err != nil {
			return err
		}
		// The iterator's buffers are reused: copy what the page keeps.
		node := core.Node{Path: p, Data: append([]byte(nil), n.GetData()...), Stat: fsm.CoreStat(fsm.StatOf(&n))}
		if len(page) > 0 && size+len(node.Path)+len(node.Data) > pageBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		page = append(page, node)
		size += len(node.Path) + len(node.Data)
	}
	if err := it.Error(); err != nil {
		return err
	}
	if len(page) > 0 || !sent {
		return flush()
	}
	return nil
}
