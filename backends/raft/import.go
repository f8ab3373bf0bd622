package raft

import (
	"context"
	"fmt"

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
	return codeError(res)
}

// importNodes applies an Import: every node new, its parent present (or
// earlier in the batch) and persistent.
func (a *applier) importNodes(x *raftv1.Import) (*raftv1.CommandResult, *opFailure) {
	if len(x.GetNodes()) == 0 {
		return nil, fail(raftv1.Code_CODE_INVALID_ARGUMENT, -1, "empty import")
	}
	if f := a.checkFence(x.GetFence()); f != nil {
		return nil, f
	}
	t := newTxnState(a)
	for i, n := range x.GetNodes() {
		p := n.GetPath()
		if err := core.ValidatePath(p); err != nil {
			return nil, badPath(i, p, err)
		}
		if p == "/" {
			return nil, fail(raftv1.Code_CODE_NODE_EXISTS, i, "import /: the root always exists")
		}
		if n.GetVersion() < 0 || n.GetNextSequence() < 0 {
			return nil, fail(raftv1.Code_CODE_INVALID_ARGUMENT, i, "import %s: version %d, next sequence %d: must not be negative", p, n.GetVersion(), n.GetNextSequence())
		}
		parent := core.ParentPath(p)
		pn := t.get(parent)
		if pn == nil {
			return nil, fail(raftv1.Code_CODE_NO_PARENT, i, "import %s: parent %s does not exist", p, parent)
		}
		if pn.GetEphemeralOwner() != 0 {
			return nil, fail(raftv1.Code_CODE_NO_PARENT, i, "import %s: parent %s is ephemeral", p, parent)
		}
		if t.get(p) != nil {
			return nil, fail(raftv1.Code_CODE_NODE_EXISTS, i, "import %s: node exists", p)
		}
		ctime, mtime := n.GetCreateTime(), n.GetModifyTime()
		if ctime == 0 {
			ctime = a.timeMs
		}
		if mtime == 0 {
			mtime = a.timeMs
		}
		rec := &raftv1.NodeRecord{
			Data: append([]byte(nil), n.GetData()...), Version: n.GetVersion(),
			CreateRevision: a.index, ModifyRevision: a.index, CreateTime: ctime, ModifyTime: mtime,
			Cversion: n.GetNextSequence(),
		}
		t.addChild(parent, pn, p, rec)
	}
	t.flush()
	return &raftv1.CommandResult{}, nil
}
