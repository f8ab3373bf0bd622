package raft

import (
	"context"
	"fmt"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

var _ core.Importer = (*Client)(nil)

// Import creates nodes in bulk in one replicated entry, atomically,
// keeping each node's version, times and next sequential suffix (the
// store revision of every node is the entry's index). See core.Importer.
func (c *Client) Import(ctx context.Context, nodes []core.ImportNode, fence core.Fence) error {
	if err := c.check(); err != nil {
		return err
	}
	if len(nodes) == 0 || len(nodes) > core.MaxImportBatch {
		return fmt.Errorf("%w: import of %d nodes: want 1 to %d per call", core.ErrInvalidArgument, len(nodes), core.MaxImportBatch)
	}
	x := &raftv1.Import{Fence: fenceProto(fence), Nodes: make([]*raftv1.ImportNode, len(nodes))}
	for i, n := range nodes {
		if err := core.ValidatePath(n.Path); err != nil {
			return &core.TxnError{Index: i, Err: err}
		}
		if len(n.Data) > core.DefaultMaxValueSize {
			return &core.TxnError{Index: i, Err: fmt.Errorf("%w: import %s: %d bytes, limit %d", core.ErrTooLarge, n.Path, len(n.Data), core.DefaultMaxValueSize)}
		}
		x.Nodes[i] = &raftv1.ImportNode{Path: n.Path, Data: n.Data, Version: n.Version,
			CreateTime: n.CreateTime, ModifyTime: n.ModifyTime, NextSequence: n.NextSequence}
	}
	res, err := c.m.propose(ctx, &raftv1.Command{Body: &raftv1.Command_Import{Import: x}})
	if err != nil {
		return err
	}
	return fsm.CodeError(res)
}
