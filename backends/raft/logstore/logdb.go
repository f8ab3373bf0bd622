package logstore

import (
	"sync"

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/plugin/tan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/vfs"
)

// The Raft log store (Dragonboat's LogDB).
//
// Every member keeps its Raft log in Dragonboat's default LogDB, a Pebble
// store, which writes (fsynced) every hard-state change: a write's log
// entry, and then again the commit index once a majority holds the entry
// (the leader on the acknowledgement, each follower when the leader tells
// it). With three voters that is two fsyncs per voter per write where one
// does: the commit index is recoverable (a restarted member learns it from
// the leader; an entry is committed because a majority holds it fsynced,
// not because anyone recorded the index). So members open that LogDB
// wrapped in lazyCommit (lazycommit.go), which does not write a hard state
// whose only change is the commit index; the store, its files and its
// format are Dragonboat's own, unchanged.
//
// Dragonboat's experimental tan LogDB (lazyCommitTan below) is kept for
// BenchmarkSerialWriteBreakdown only: with it a voter whose Raft log write
// failed on a full disk (TestProcessDiskFilledFasterThanTheGuard) did not
// catch up after its restart, and a directory is tied to the LogDB that
// created it.

// The LogDB kinds (Options.logDB).
const (
	KindDefault = "lazy-commit"    // Dragonboat's Pebble LogDB in lazyCommit
	KindPlain   = "sharded-pebble" // the same LogDB unwrapped (benchmarks)
	KindTan     = "tan"            // tan in commitState (benchmarks)
	// logDBUnflushed is logDBDefault without the write of kept commit
	// indexes at Close: a closed member's log is what a crash leaves (tests).
	KindUnflushed = "lazy-commit-unflushed"
)

// logDBFactory is the NodeHost's LogDB factory for LogDB kind ("":
// logDBDefault; nil: Dragonboat's own default).
func Factory(kind string) dbconfig.LogDBFactory {
	switch kind {
	case KindTan:
		return lazyCommitTan{}
	case KindPlain:
		return nil
	case KindUnflushed:
		return LazyCommitPebble{unflushed: true}
	}
	return LazyCommitPebble{}
}

// tanBufferSize is the size of tan's encoding buffers.
const tanBufferSize = 1 << 20

// noPrealloc is the filesystem tan sees: the NodeHost's, except that a
// created file is not an *os.File, so tan does not preallocate its log
// files. Tan reserves 64 MiB at once for each new log file (fallocate),
// which a small disk cannot give (and the disk guard, see diskfull.go,
// expects the Raft log to grow as it is written, not by 64 MiB steps);
// without it a log file grows as entries are appended, as Dragonboat's
// default LogDB's write-ahead log does.
type noPrealloc struct{ dbconfig.IFS }

func (fs noPrealloc) Create(name string) (vfs.File, error) {
	f, err := fs.IFS.Create(name)
	if err != nil {
		return nil, err
	}
	return plainFile{f}, nil
}

// plainFile hides the *os.File under a vfs.File.
type plainFile struct{ vfs.File }

// lazyCommitTan creates tan LogDBs wrapped in commitState.
type lazyCommitTan struct{}

func (lazyCommitTan) Create(cfg dbconfig.NodeHostConfig, cb dbconfig.LogDBCallback, dirs, wals []string) (raftio.ILogDB, error) {
	// Tan uses KVWriteBufferSize only for its encoding buffers, one per
	// engine worker (16), of which one shard uses one; an update larger
	// than the buffer gets its own. The profiles' sizes (Pebble memtables,
	// 4 to 128 MiB) would hold 16 such buffers live for nothing.
	cfg.Expert.LogDB.KVWriteBufferSize = tanBufferSize
	cfg.Expert.FS = noPrealloc{cfg.Expert.FS}
	db, err := tan.Factory.Create(cfg, cb, dirs, wals)
	if err != nil {
		return nil, err
	}
	return &commitState{newPerReplica[pb.State](db)}, nil
}

// Name is tan's own: the directory stays readable by an unwrapped tan.
func (lazyCommitTan) Name() string { return tan.Factory.Name() }

// commitState adapts what Dragonboat's engine hands SaveRaftState to what
// tan expects. Tan decides whether an update needs an fsync by comparing
// its hard state with the last one it wrote, and it records every update's
// state as the last one, an empty state included. The engine leaves the
// state empty when it did not change (an update with only entries, or with
// nothing to save at all), so without this adapter the next commit-only
// update compares against an empty state, sees a "new term" and fsyncs:
// about as many fsyncs as the default LogDB. commitState drops updates that
// carry nothing to save, and gives an update whose state is unchanged the
// replica's last saved state (the same values written again), so tan's
// comparison sees only real changes. An update's entries, snapshot and
// term or vote changes are passed on untouched and fsynced by tan as
// before.
type commitState struct {
	perReplica[pb.State] // last state saved per replica
}

// SaveRaftState saves updates. See commitState.
func (c *commitState) SaveRaftState(updates []pb.Update, shardID uint64) error {
	c.mu.Lock()
	out := c.prepare(updates)
	c.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	return c.ILogDB.SaveRaftState(out, shardID)
}

// perReplica is a LogDB with what a wrapper keeps per replica, forgotten
// when the replica's state is replaced (an imported snapshot, offline
// tools) or removed.
type perReplica[V any] struct {
	raftio.ILogDB

	mu   sync.Mutex
	reps map[raftio.NodeInfo]V
}

func newPerReplica[V any](db raftio.ILogDB) perReplica[V] {
	return perReplica[V]{ILogDB: db, reps: map[raftio.NodeInfo]V{}}
}

// ImportSnapshot replaces a replica's state: forget what was kept for it.
func (c *perReplica[V]) ImportSnapshot(ss pb.Snapshot, replicaID uint64) error {
	c.forget(ss.ShardID, replicaID)
	return c.ILogDB.ImportSnapshot(ss, replicaID)
}

// RemoveNodeData removes a replica's data: forget what was kept for it.
func (c *perReplica[V]) RemoveNodeData(shardID, replicaID uint64) error {
	c.forget(shardID, replicaID)
	return c.ILogDB.RemoveNodeData(shardID, replicaID)
}

func (c *perReplica[V]) forget(shardID, replicaID uint64) {
	c.mu.Lock()
	delete(c.reps, raftio.NodeInfo{ShardID: shardID, ReplicaID: replicaID})
	c.mu.Unlock()
}

// prepare returns the updates to pass to tan; c.mu is held.
func (c *commitState) prepare(updates []pb.Update) []pb.Update {
	out := updates[:0:0]
	for _, ud := range updates {
		if len(ud.EntriesToSave) == 0 && pb.IsEmptyState(ud.State) && pb.IsEmptySnapshot(ud.Snapshot) {
			continue // nothing to save: the default LogDB writes nothing either
		}
		ni := raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}
		if pb.IsEmptyState(ud.State) {
			// Unchanged since the last saved state (the engine reports
			// every change): write that again, when known. Unknown (the
			// first update after a restart), tan's one extra fsync is
			// harmless.
			if st, ok := c.reps[ni]; ok {
				ud.State = st
			}
		} else {
			c.reps[ni] = ud.State
		}
		out = append(out, ud)
	}
	return out
}
