package fsm

import (
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

type smEntry = sm.Entry

func commandTxn(path, data string) *raftv1.Command {
	return &raftv1.Command{TimeMs: 1, Body: &raftv1.Command_Txn{Txn: &raftv1.Txn{Ops: []*raftv1.Op{{
		Type: int32(core.OpCreate), Path: path, Data: []byte(data), Version: core.AnyVersion, MakeParents: true}}}}}
}
