package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/internal/protocodec"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// applyNote tells the member what an applied batch changed that it tracks
// outside the store (session clocks, leadership, watchers).
type ApplyNote struct {
	Kind       noteKind
	Session    int64
	TtlMs      int64
	RenewIndex int64
	Leader     *raftv1.LeaderState
	// replica and reported: a renewal's proposer and its applied index.
	Replica  uint64
	Reported uint64
}

type noteKind int

const (
	NoteSessionGranted noteKind = iota + 1
	NoteSessionRenewed
	NoteSessionExpired
	NoteLeader
)

// applyHook receives, after each committed batch, the applied index and
// what changed. It must not block.
type applyHook func(applied uint64, notes []ApplyNote)

// recoveredState is what the member tracks outside the store, read back
// after the store's content was replaced by a snapshot.
type RecoveredState struct {
	Applied  uint64
	Leader   *raftv1.LeaderState
	Sessions []*raftv1.SessionRecord
}

// recoverHook receives the store's state after a snapshot replaced its
// content: no entries were applied one by one, so no applyHook notes tell
// what changed. It must not block.
type recoverHook func(st RecoveredState)

// fsm is the on-disk state machine: a Pebble store changed only by applying
// committed entries. Each Update applies its entries, their change-log
// records and the applied index in one synced Pebble batch.
type FSM struct {
	dir       string
	retention int64
	hook      applyHook
	Recovered recoverHook // optional; set before the replica starts
	Fs        vfs.FS      // the store's filesystem; nil: the OS's (Options.storage)
	// observe, optional and set before the replica starts, is told when
	// each Update began and ended, with the indexes it applied (the
	// serial-write breakdown benchmark times the apply with it).
	Observe func(first, last uint64, start, end time.Time)

	mu     sync.RWMutex // guards db against Close/Recover swapping it
	db     *pebble.DB
	closed bool
	// streams are the open streamed snapshots (stream.go).
	streams streams
	// cache, logFloor and leader are Update's (see nodeCache,
	// trimChangeLog and leaderSlot), forgotten when db's content is
	// replaced other than by Update.
	cache    *nodeCache
	logFloor int64
	Leader   leaderSlot
	// noLeaderSlot makes every read of the leader record go to the store
	// (tests compare the two).
	noLeaderSlot bool
	// noFreshParents makes txnState look up the children of a node the
	// same command created in the store too (tests compare the two).
	noFreshParents bool
}

var _ sm.IOnDiskStateMachine = (*FSM)(nil)

func New(dir string, retention int64, hook applyHook) *FSM {
	return &FSM{dir: dir, retention: retention, hook: hook, cache: newNodeCache()}
}

// pebbleOptions are the state machine store's: a 4 MiB memtable and a
// 32 MiB block cache (Pebble's default of 8 MiB halved the speed of an
// apply whose nodes were no longer in the memtable: BenchmarkApply
// keys=20000). The cache is filled only as blocks are read.
func pebbleOptions() *pebble.Options {
	return &pebble.Options{
		MemTableSize: 4 << 20,
		CacheSize:    32 << 20,
		Logger:       quietPebbleLogger{},
	}
}

type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any)  {}
func (quietPebbleLogger) Errorf(string, ...any) {}
func (quietPebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("raft state machine store: "+format, args...))
}

// Open opens (or creates) the store and returns the applied index.
func (f *FSM) Open(stopc <-chan struct{}) (uint64, error) {
	if err := os.MkdirAll(f.dir, 0o750); err != nil {
		return 0, fmt.Errorf("raft state machine: %w", err)
	}
	opts := pebbleOptions()
	if f.Fs != nil {
		opts.FS = f.Fs
	}
	db, err := pebble.Open(f.dir, opts)
	if err != nil {
		return 0, fmt.Errorf("raft state machine: open %s: %w", f.dir, err)
	}
	f.mu.Lock()
	// A replica paused for a full disk reopens its store on resume.
	f.db, f.closed = db, false
	f.streams.Stop.Store(false)
	f.forget()
	f.mu.Unlock()
	return readApplied(db)
}

type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

func readApplied(r reader) (uint64, error) {
	v, c, err := r.Get(keyApplied)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("raft state machine: applied index has %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func readUint(r reader, key []byte) (int64, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("raft state machine: key %q has %d bytes", key, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func readProto(r reader, key []byte, m proto.Message) (bool, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer c.Close()
	if err := protocodec.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("raft state machine: decode %q: %w", key, err)
	}
	return true, nil
}

func MustMarshal(m proto.Message) []byte {
	b, err := protocodec.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("raft: marshal %T: %v", m, err))
	}
	return b
}

// Update applies a batch of committed entries.
func (f *FSM) Update(entries []sm.Entry) ([]sm.Entry, error) {
	var start time.Time
	if f.Observe != nil {
		start = time.Now()
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return nil, errors.New("raft state machine: not open")
	}
	b := f.db.NewIndexedBatch()
	defer b.Close()
	var notes []ApplyNote
	var last uint64
	written := map[string]*raftv1.NodeRecord{}
	var read map[string]*raftv1.NodeRecord
	if f.cache != nil {
		read = map[string]*raftv1.NodeRecord{}
	}
	leader := f.Leader
	for i := range entries {
		e := &entries[i]
		a := &applier{b: b, index: int64(e.Index), written: written, read: read, cache: f.cache,
			freshParents: !f.noFreshParents}
		if !f.noLeaderSlot {
			a.lead = &leader
		}
		res := a.applyEntry(e.Cmd)
		if len(a.Events) > 0 {
			if err := b.Set(logKey(int64(e.Index)), MustMarshal(&raftv1.ChangeLogEntry{Events: a.Events}), nil); err != nil {
				return nil, err
			}
		}
		if a.Err != nil {
			return nil, fmt.Errorf("raft state machine: apply index %d: %w", e.Index, a.Err)
		}
		notes = append(notes, a.notes...)
		e.Result = sm.Result{Value: uint64(res.Code), Data: MustMarshal(res)}
		last = e.Index
	}
	floor, err := f.trimChangeLog(b, int64(last))
	if err != nil {
		return nil, err
	}
	if err := b.Set(keyApplied, u64(last), nil); err != nil {
		return nil, err
	}
	// One atomic batch per Update, written to Pebble's WAL without waiting
	// for an fsync: every entry applied here is already in the fsynced Raft
	// log, so a crash can only lose a suffix of applied batches (the WAL is
	// written in order and each batch is atomic, applied index included),
	// which Dragonboat re-applies from its log after the restart. Dragonboat
	// calls Sync before it relies on the applied state being on disk (log
	// compaction after a snapshot). This keeps one fsync per write (the Raft
	// log's), not two, without weakening durability.
	if err := b.Commit(pebble.NoSync); err != nil {
		return nil, fmt.Errorf("raft state machine: commit: %w", err)
	}
	f.logFloor = floor
	f.Leader = leader
	if f.cache != nil {
		// Records read before those written: a node read and then written
		// by this batch is kept as written.
		for p, n := range read {
			if _, ok := written[p]; !ok {
				f.cache.put(p, n)
			}
		}
		for p, n := range written {
			f.cache.put(p, n)
		}
	}
	if f.hook != nil {
		f.hook(last, notes)
	}
	if f.Observe != nil && len(entries) > 0 {
		f.Observe(entries[0].Index, last, start, time.Now())
	}
	return entries, nil
}

// trimChangeLog drops change-log records older than the retention window
// ending at applied, and returns the floor the store holds once b is
// committed. The floor is a function of the applied index alone, so every
// member keeps the same history. It moves in steps (logTrimStep), not with
// every batch: each move is a Pebble range deletion, and a memtable holding
// one per batch made every read of the apply slower (Pebble fragments a
// memtable's range deletions again when one is added).
//
// The floor the last committed Update left is kept in f.logFloor (0: not
// known, read from the store): reading it back from Pebble with every
// batch was a quarter of the apply's CPU (the key, once unchanged, sits in
// an sstable).
func (f *FSM) trimChangeLog(b *pebble.Batch, applied int64) (int64, error) {
	floor := f.logFloor
	if floor == 0 {
		var err error
		if floor, err = readUint(b, keyLogFloor); err != nil {
			return 0, err
		}
	}
	recorded := floor != 0
	if !recorded {
		floor = 1
	}
	newFloor := applied - f.retention + 1
	if step := logTrimStep(f.retention); newFloor > 0 {
		newFloor -= newFloor % step
	}
	if newFloor <= floor {
		if recorded {
			return floor, nil // unchanged: not rewritten with every batch
		}
		return floor, b.Set(keyLogFloor, u64(uint64(floor)), nil)
	}
	if err := b.DeleteRange(logKey(floor), logKey(newFloor), nil); err != nil {
		return 0, err
	}
	return newFloor, b.Set(keyLogFloor, u64(uint64(newFloor)), nil)
}

// logTrimStep is how far the change log's floor moves at once: an eighth
// of the retention, at least 1 and at most 1024 indexes, so the log holds
// between retention and retention + step - 1 indexes of history.
func logTrimStep(retention int64) int64 {
	return min(max(retention/8, 1), 1024)
}

// forget drops what Update keeps of the store's content (the node cache,
// the change log's floor), for when that content is replaced other than by
// Update; f.mu is held for writing.
func (f *FSM) forget() {
	if f.cache != nil {
		f.cache.reset()
	}
	f.logFloor = 0
	f.Leader = nil
}

// Lookup answers a query (see query.go) from the store.
func (f *FSM) Lookup(q interface{}) (interface{}, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil || f.closed {
		return nil, ErrStoreClosed
	}
	if _, ok := q.(StreamQuery); ok {
		return f.openStream(f.db)
	}
	return runQuery(f.db, q)
}

var ErrStoreClosed = errors.New("raft state machine: closed")

// Sync makes every batch Update has committed durable, by syncing Pebble's
// WAL. Dragonboat calls it before it relies on the applied state being on
// disk (see Update).
func (f *FSM) Sync() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil || f.closed {
		return ErrStoreClosed
	}
	if err := f.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("raft state machine: sync: %w", err)
	}
	return nil
}

// PrepareSnapshot captures a Pebble snapshot of the current state.
func (f *FSM) PrepareSnapshot() (interface{}, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return nil, ErrStoreClosed
	}
	return f.db.NewSnapshot(), nil
}

// SaveSnapshot writes the prepared snapshot (see snapshot.go).
func (f *FSM) SaveSnapshot(ctx interface{}, w io.Writer, stopc <-chan struct{}) error {
	snap := ctx.(*pebble.Snapshot)
	defer snap.Close()
	return writeSnapshot(snap, w, stopc)
}

// RecoverFromSnapshot verifies a snapshot's checksum and only then replaces
// the store's content with it, in one synced batch. A corrupt snapshot is
// refused with an error and the store is left as it was.
//
// Afterwards the recover hook (if any) gets the new applied index, leader
// record and sessions, outside the store's lock.
func (f *FSM) RecoverFromSnapshot(r io.Reader, stopc <-chan struct{}) error {
	st, err := f.recoverFromSnapshot(r, stopc)
	if err != nil {
		return err
	}
	if f.Recovered != nil {
		f.Recovered(st)
	}
	return nil
}

func (f *FSM) recoverFromSnapshot(r io.Reader, stopc <-chan struct{}) (RecoveredState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		return RecoveredState{}, ErrStoreClosed
	}
	// Whatever happens below, what the store held before is no longer
	// known to be what it holds.
	f.forget()
	if err := f.replaceFromSnapshot(r, stopc); err != nil {
		return RecoveredState{}, err
	}
	var st RecoveredState
	var err error
	if st.Applied, err = readApplied(f.db); err != nil {
		return RecoveredState{}, err
	}
	st.Leader = &raftv1.LeaderState{}
	if _, err := readProto(f.db, keyLeader, st.Leader); err != nil {
		return RecoveredState{}, err
	}
	if st.Sessions, err = allSessions(f.db); err != nil {
		return RecoveredState{}, err
	}
	return st, nil
}

// replaceFromSnapshot verifies the snapshot in r and loads it; f.mu is
// held for writing.
func (f *FSM) replaceFromSnapshot(r io.Reader, stopc <-chan struct{}) error {
	tmp, err := os.CreateTemp(filepath.Dir(f.dir), "snapshot-recover-*")
	if err != nil {
		return fmt.Errorf("raft state machine: recover: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	hdr, err := verifySnapshot(r, tmp)
	if err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return loadSnapshot(f.db, hdr, io.LimitReader(tmp, int64(hdr.GetBodyBytes())), stopc)
}

// Close closes the store.
func (f *FSM) Close() error {
	f.endStreams()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.db == nil {
		return nil
	}
	err := f.db.Close()
	f.db = nil
	return err
}

func Unmarshal(b []byte, m proto.Message) error {
	if err := protocodec.Unmarshal(b, m); err != nil {
		return fmt.Errorf("raft state machine: decode %T: %w", m, err)
	}
	return nil
}
