package logstore

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname: Dragonboat's Pebble LogDB constructor

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// NewPebbleLogDB is Dragonboat's default LogDB constructor, the one its
// NodeHost calls when no LogDB factory is configured. Dragonboat exports
// no factory for it outside its internal packages, so it is reached by
// name; TestPebbleLogDBLinkedVersion pins the Dragonboat version whose
// signature this declaration matches.
//
//go:linkname NewPebbleLogDB github.com/lni/dragonboat/v4/internal/logdb.NewDefaultLogDB
func NewPebbleLogDB(cfg dbconfig.NodeHostConfig, cb dbconfig.LogDBCallback, dirs, lldirs []string) (raftio.ILogDB, error)

// errLogDBSelfCheck is the refusal of a LogDB whose self check failed
// (Dragonboat's own check, which its NodeHost runs on the unwrapped LogDB).
var ErrSelfCheck = errors.New("raft: the Raft log store failed Dragonboat's self check (a directory written by an incompatible Dragonboat version)")

// lazyCommitPebble creates Dragonboat's default Pebble LogDB wrapped in
// lazyCommit. Its name is the default LogDB's: the directory is the same
// store, readable by an unwrapped LogDB and by every earlier metaplane.
type LazyCommitPebble struct {
	unflushed bool // logDBUnflushed: see lazyCommit.unflushed
	// made, when set, is handed each LogDB created (the member keeps it to
	// see a write that never returns, diskfull.go).
	Made func(*LazyCommit)
}

func (f LazyCommitPebble) Create(cfg dbconfig.NodeHostConfig, cb dbconfig.LogDBCallback, dirs, wals []string) (raftio.ILogDB, error) {
	db, err := NewPebbleLogDB(cfg, cb, dirs, wals)
	if err != nil {
		return nil, err
	}
	if c, ok := db.(interface{ SelfCheckFailed() (bool, error) }); ok {
		failed, err := c.SelfCheckFailed()
		if err == nil && failed {
			err = ErrSelfCheck
		}
		if err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	c := NewLazyCommit(db)
	c.unflushed = f.unflushed
	if f.Made != nil {
		f.Made(c)
	}
	return c, nil
}

func (LazyCommitPebble) Name() string { return KindPlain }

// lazyCommit is a LogDB that does not write hard states whose only change
// is the commit index.
//
// Dragonboat's engine hands SaveRaftState an update per replica with the
// entries to append and, when any of term, vote or commit index changed,
// the new hard state; the Pebble LogDB writes it all in one fsynced batch,
// and writes nothing for an update that carries nothing. The commit index
// changes with every write, on every voter, so a write costs each voter
// two fsyncs: its entry, then the commit index. lazyCommit passes on every
// update that carries entries, a snapshot, or a new term or vote, and
// keeps a commit-only change in memory instead; the kept index rides along
// with the replica's next update that is written anyway (the same batch,
// no extra fsync), so on disk it trails by about one write. A kept index
// is also written on its own keptFlushDelay after it was kept (at most one
// such write per replica and period, so an idle member's recorded index is
// at most that old), before a snapshot record, and at Close. Etcd's Raft
// makes the same choice: it does not fsync hard states whose only change
// is the commit index.
//
// Why that is safe: Raft needs term and vote durable before a message
// depends on them (never delayed here) and the entries durable before they
// are acknowledged (never delayed). The commit index is not part of what
// Raft must remember: an entry is committed because a majority holds it,
// and a restarted replica learns the index from the leader. After a crash
// the replica replays its log up to the recorded index and applies the
// rest once the leader tells it; entries its state machine already holds
// (Pebble, which records its own applied index) are skipped by Dragonboat,
// as they are after any crash that follows its fast apply.
//
// One bound Dragonboat does check on restart: the recorded commit index
// must not be below the replica's latest snapshot, which marks the start of
// its log. So before a snapshot's record is saved (SaveSnapshots),
// lazyCommit writes the replica's hard state with a commit index of at
// least the snapshot's. A snapshot received from the leader comes in an
// update with its hard state, which is passed on.
type LazyCommit struct {
	// Its mutex is held across the writes: term and vote never go back.
	perReplica[*replicaState]

	armed  bool          // a timed write of the kept indexes is due
	Delay  time.Duration // of the timed write: keptFlushDelay (tests change it)
	closed bool

	// unflushed: kept indexes are written only along with entries and
	// before snapshot records, never on their own (a closed member's log is
	// what a crash right after its last write leaves; tests).
	unflushed bool

	// writing is when the hard-state write in flight began (Unix
	// nanoseconds), 0 when none is: read without c.mu, which the write
	// holds. See writingSince.
	writing atomic.Int64
}

// keptFlushDelay is how long a kept commit index waits for an update to
// ride along with before it is written on its own.
const keptFlushDelay = 100 * time.Millisecond

// replicaState is what lazyCommit knows of one replica's hard state.
type replicaState struct {
	saved  pb.State // the last hard state written
	commit uint64   // the latest commit index handed to it (>= saved.Commit)
}

func NewLazyCommit(db raftio.ILogDB) *LazyCommit {
	return &LazyCommit{perReplica: newPerReplica[*replicaState](db), Delay: keptFlushDelay}
}

// SaveRaftState saves updates. See lazyCommit. worker is the engine's
// step worker (1-based), whose buffers the LogDB uses for the write.
func (c *LazyCommit) SaveRaftState(updates []pb.Update, worker uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := updates[:0:0]
	for _, ud := range updates {
		ni := raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}
		r := c.reps[ni]
		carries := len(ud.EntriesToSave) > 0 || !pb.IsEmptySnapshot(ud.Snapshot)
		switch {
		case pb.IsEmptyState(ud.State):
			if !carries {
				continue // nothing to save: the LogDB would write nothing either
			}
			if r != nil && r.commit > r.saved.Commit {
				ud.State = pb.State{Term: r.saved.Term, Vote: r.saved.Vote, Commit: r.commit} // rides along
			}
		case !carries && r != nil && ud.State.Term == r.saved.Term && ud.State.Vote == r.saved.Vote:
			r.commit = max(r.commit, ud.State.Commit) // commit-only: kept
			if !c.armed && !c.unflushed {
				c.armed = true
				time.AfterFunc(c.Delay, c.flushKept)
			}
			continue
		}
		out = append(out, ud)
	}
	if len(out) == 0 {
		return nil
	}
	if err := c.save(out, worker); err != nil {
		return err
	}
	for _, ud := range out {
		if !pb.IsEmptyState(ud.State) {
			c.saved(raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}, ud.State)
		}
	}
	return nil
}

// save writes updates through the wrapped LogDB, recording when the write
// began while it is in flight; c.mu is held.
func (c *LazyCommit) save(updates []pb.Update, worker uint64) error {
	c.writing.Store(time.Now().UnixNano())
	defer c.writing.Store(0)
	return c.ILogDB.SaveRaftState(updates, worker)
}

// writingSince reports when the write in flight began, and whether one is.
// Dragonboat's Pebble LogDB can leave a write that never returns: after
// its log file failed a write with ENOSPC, a later write may wait forever
// for a buffer the failed one never gave back, freed space or not (the
// step worker that made it is then stuck, and its replica cannot be
// started again in this process; diskGuard.resume).
func (c *LazyCommit) WritingSince() (time.Time, bool) {
	n := c.writing.Load()
	if n == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// saved records st as the replica's last written hard state; c.mu is held.
func (c *LazyCommit) saved(ni raftio.NodeInfo, st pb.State) {
	r := c.reps[ni]
	if r == nil {
		r = &replicaState{}
		c.reps[ni] = r
	}
	r.saved = st
	r.commit = max(r.commit, st.Commit)
}

// SaveSnapshots saves snapshot records, after writing each replica's hard
// state with a commit index of at least its snapshot's (see lazyCommit).
func (c *LazyCommit) SaveSnapshots(updates []pb.Update) error {
	c.mu.Lock()
	for _, ud := range updates {
		if pb.IsEmptySnapshot(ud.Snapshot) {
			continue
		}
		// A snapshot is of applied, so committed, entries: its index is a
		// commit index. Nothing known of the replica (nothing kept since
		// the start): the recorded index is the engine's, as unwrapped.
		if r := c.reps[raftio.NodeInfo{ShardID: ud.ShardID, ReplicaID: ud.ReplicaID}]; r != nil {
			r.commit = max(r.commit, ud.Snapshot.Index)
		}
	}
	err := c.writeKept()
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("raft: before a snapshot record: %w", err)
	}
	return c.ILogDB.SaveSnapshots(updates)
}

// writeKept writes every replica's kept commit index; c.mu is held.
func (c *LazyCommit) writeKept() error {
	var errs []error
	for ni, r := range c.reps {
		if r.commit <= r.saved.Commit {
			continue
		}
		st := pb.State{Term: r.saved.Term, Vote: r.saved.Vote, Commit: r.commit}
		// The first step worker's buffers: every write through c holds
		// c.mu, so no step worker is using them now.
		if err := c.save([]pb.Update{{ShardID: ni.ShardID, ReplicaID: ni.ReplicaID, State: st}}, 1); err != nil {
			errs = append(errs, fmt.Errorf("raft: saving the commit index of replica %d: %w", ni.ReplicaID, err))
			continue
		}
		c.saved(ni, st)
	}
	return errors.Join(errs...)
}

// flushKept is the timed write of the kept commit indexes. A failed write
// keeps them kept: the next update, snapshot or Close writes them.
func (c *LazyCommit) flushKept() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if !c.closed {
		_ = c.writeKept()
	}
}

// Close writes every commit index still kept (a clean shutdown leaves the
// log's hard state current) and closes the LogDB.
func (c *LazyCommit) Close() error {
	c.mu.Lock()
	var err error
	if !c.unflushed {
		err = c.writeKept()
	}
	c.closed = true
	c.mu.Unlock()
	return errors.Join(err, c.ILogDB.Close())
}

// HoldForTest holds the store's lock, so that no real write sets or clears
// the write in flight meanwhile, and returns set, which makes WritingSince
// report a write begun at began (zero: none), and release, which clears it
// and lets go of the lock. For the tests of the member's disk guard.
func (c *LazyCommit) HoldForTest() (set func(began time.Time), release func()) {
	c.mu.Lock()
	set = func(began time.Time) {
		if began.IsZero() {
			c.writing.Store(0)
			return
		}
		c.writing.Store(began.UnixNano())
	}
	return set, func() { c.writing.Store(0); c.mu.Unlock() }
}
