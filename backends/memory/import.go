package memory

import (
	"context"
	"fmt"

	"github.com/metaplane/metaplane/core"
)

var (
	_ core.Importer         = (*Backend)(nil)
	_ core.SnapshotStreamer = (*Backend)(nil)
)

// Import creates nodes in bulk, atomically, keeping each node's version,
// times and next sequential suffix. See core.Importer.
func (b *Backend) Import(ctx context.Context, nodes []core.ImportNode, fence core.Fence) error {
	if len(nodes) == 0 || len(nodes) > core.MaxImportBatch {
		return fmt.Errorf("%w: import of %d nodes: want 1 to %d per call", core.ErrInvalidArgument, len(nodes), core.MaxImportBatch)
	}
	if err := b.begin(ctx); err != nil {
		return err
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.s.mu.Unlock()
	if err := b.failNext; err != nil {
		b.failNext = nil
		return err
	}
	s := b.s
	if !s.fenceCurrentLocked(fence) {
		return fmt.Errorf("%w: fence epoch %d, current epoch %d", core.ErrFenced, fence.Epoch, s.currentEpochLocked())
	}
	t := &txnState{s: s, rev: s.rev + 1, now: s.opts.Now().UnixMilli()}
	for i, n := range nodes {
		if err := t.importNode(n); err != nil {
			t.rollback()
			return &core.TxnError{Index: i, Err: err}
		}
	}
	s.commitLocked(t)
	return nil
}

// importNode creates one imported node and gives it the source's version,
// times and sequence.
func (t *txnState) importNode(n core.ImportNode) error {
	if err := core.ValidatePath(n.Path); err != nil {
		return err
	}
	if n.Path == "/" {
		return fmt.Errorf("%w: import /: the root always exists", core.ErrNodeExists)
	}
	if n.Version < 0 || n.NextSequence < 0 {
		return fmt.Errorf("%w: import %s: version %d, next sequence %d: must not be negative", core.ErrInvalidArgument, n.Path, n.Version, n.NextSequence)
	}
	if len(n.Data) > t.s.opts.MaxValueSize {
		return fmt.Errorf("%w: import %s: %d bytes, limit %d", core.ErrTooLarge, n.Path, len(n.Data), t.s.opts.MaxValueSize)
	}
	path, err := t.create(n.Path, n.Data, 0, false)
	if err != nil {
		return err
	}
	nd := *t.s.nodes[path]
	nd.version = n.Version
	if n.CreateTime > 0 {
		nd.ctime = n.CreateTime
	}
	if n.ModifyTime > 0 {
		nd.mtime = n.ModifyTime
	}
	nd.cversion = max(nd.cversion, n.NextSequence)
	t.putNode(path, &nd)
	ev := &t.events[len(t.events)-1]
	ev.Stat = t.s.statLocked(path, &nd)
	return nil
}
