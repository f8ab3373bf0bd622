package raftoffline

import "github.com/metaplane/metaplane/cmd/metaplane/internal/cli"

func init() {
	cli.RegisterVerb("raft", raftUnsafeRecover)
	cli.RegisterVerb("raft", raftBootstrap)
	cli.RegisterVerb("raft snapshot", raftSnapshotRestore)
}
