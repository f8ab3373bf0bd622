package fsm

import (
	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

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
