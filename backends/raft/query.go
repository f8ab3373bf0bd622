package raft

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// The queries Lookup answers. They run against the store after Dragonboat
// has established the read's consistency (ReadIndex) or directly (stale).
type (
	getManyQuery struct {
		paths  []string
		noData bool
	}
	getManyAnswer struct {
		results  []core.GetResult
		revision int64
	}
	childrenQuery  struct{ path string }
	childrenAnswer struct {
		names []string
		stat  core.Stat
		err   error
	}
	snapshotQuery struct{ prefix string }
	leaderQuery   struct{}
	sessionQuery  struct{ id int64 }
	sessionsQuery struct{}
	// changesQuery reads the change log from index from (inclusive) on, at
	// most max events (a batch is never split).
	changesQuery struct {
		from   int64
		prefix string
		max    int
	}
	changesAnswer struct {
		events  []core.WatchEvent
		upTo    int64 // everything up to upTo has been read
		floor   int64 // oldest index still in the change log
		applied int64
	}
	appliedQuery struct{}
)

func runQuery(db *pebble.DB, q interface{}) (interface{}, error) {
	switch q := q.(type) {
	case getManyQuery:
		var r reader = db
		if len(q.paths) > 1 {
			s := db.NewSnapshot()
			defer s.Close()
			r = s
		}
		return getMany(r, q)
	case childrenQuery:
		return children(db, q.path)
	case snapshotQuery:
		s := db.NewSnapshot()
		defer s.Close()
		return readSnapshot(s, q.prefix)
	case leaderQuery:
		var ls raftv1.LeaderState
		_, err := readProto(db, keyLeader, &ls)
		return &ls, err
	case sessionQuery:
		var s raftv1.SessionRecord
		ok, err := readProto(db, sessionKey(q.id), &s)
		if err != nil || !ok {
			return (*raftv1.SessionRecord)(nil), err
		}
		return &s, nil
	case sessionsQuery:
		return allSessions(db)
	case changesQuery:
		s := db.NewSnapshot()
		defer s.Close()
		return readChanges(s, q)
	case appliedQuery:
		a, err := readApplied(db)
		return int64(a), err
	}
	return nil, fmt.Errorf("raft state machine: unknown query %T", q)
}

func readNode(r reader, p string) (*raftv1.NodeRecord, error) {
	var n raftv1.NodeRecord
	ok, err := readProto(r, nodeKey(p), &n)
	if err != nil {
		return nil, err
	}
	if !ok {
		if p == "/" {
			return &raftv1.NodeRecord{}, nil
		}
		return nil, nil
	}
	return &n, nil
}

func getMany(r reader, q getManyQuery) (*getManyAnswer, error) {
	applied, err := readApplied(r)
	if err != nil {
		return nil, err
	}
	ans := &getManyAnswer{results: make([]core.GetResult, len(q.paths)), revision: int64(applied)}
	for i, p := range q.paths {
		if err := core.ValidatePath(p); err != nil {
			ans.results[i].Err = err
			continue
		}
		n, err := readNode(r, p)
		if err != nil {
			return nil, err
		}
		if n == nil {
			ans.results[i].Err = fmt.Errorf("%w: %s", core.ErrNotFound, p)
			continue
		}
		ans.results[i].Node = core.Node{Path: p, Stat: coreStat(statOf(n))}
		if !q.noData {
			ans.results[i].Node.Data = n.GetData()
		}
	}
	return ans, nil
}

func children(db *pebble.DB, p string) (*childrenAnswer, error) {
	if err := core.ValidatePath(p); err != nil {
		return &childrenAnswer{err: err}, nil
	}
	s := db.NewSnapshot()
	defer s.Close()
	n, err := readNode(s, p)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return &childrenAnswer{err: fmt.Errorf("%w: %s", core.ErrNotFound, p)}, nil
	}
	pfx := childPrefix(p)
	it, err := s.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	names := []string{}
	for it.First(); it.Valid(); it.Next() {
		names = append(names, string(it.Key()[len(pfx):]))
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return &childrenAnswer{names: names, stat: coreStat(statOf(n))}, nil
}

func readSnapshot(r reader, prefix string) (core.Snapshot, error) {
	applied, err := readApplied(r)
	if err != nil {
		return core.Snapshot{}, err
	}
	snap := core.Snapshot{Revision: int64(applied), Nodes: []core.Node{}}
	lo := nodeKey(prefix)
	if prefix == "/" {
		lo = nodeKey("/")
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return core.Snapshot{}, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		p := string(it.Key()[1:])
		if p == "/" || !core.HasPrefixPath(p, prefix) {
			continue
		}
		var n raftv1.NodeRecord
		if err := unmarshal(it.Value(), &n); err != nil {
			return core.Snapshot{}, err
		}
		snap.Nodes = append(snap.Nodes, core.Node{Path: p, Data: n.GetData(), Stat: coreStat(statOf(&n))})
	}
	return snap, it.Error()
}

func allSessions(db *pebble.DB) ([]*raftv1.SessionRecord, error) {
	lo := []byte{tagSession}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{tagSession + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []*raftv1.SessionRecord
	for it.First(); it.Valid(); it.Next() {
		var s raftv1.SessionRecord
		if err := unmarshal(it.Value(), &s); err != nil {
			return nil, err
		}
		out = append(out, &s)
	}
	return out, it.Error()
}

func readChanges(r reader, q changesQuery) (*changesAnswer, error) {
	applied, err := readApplied(r)
	if err != nil {
		return nil, err
	}
	floor, err := readUint(r, keyLogFloor)
	if err != nil {
		return nil, err
	}
	if floor == 0 {
		floor = 1
	}
	ans := &changesAnswer{floor: floor, applied: int64(applied), upTo: int64(applied)}
	if q.from > int64(applied) {
		ans.upTo = q.from - 1
		return ans, nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: logKey(q.from), UpperBound: logKey(int64(applied) + 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		idx := int64(be64(it.Key()[1:]))
		if q.max > 0 && len(ans.events) >= q.max {
			ans.upTo = idx - 1
			break
		}
		var e raftv1.ChangeLogEntry
		if err := unmarshal(it.Value(), &e); err != nil {
			return nil, err
		}
		for _, ev := range e.GetEvents() {
			if !core.HasPrefixPath(ev.GetPath(), q.prefix) {
				continue
			}
			ans.events = append(ans.events, core.WatchEvent{
				Type: core.EventType(ev.GetType()), Path: ev.GetPath(), Data: ev.GetData(),
				Stat: coreStat(ev.GetStat()), Revision: idx,
			})
		}
	}
	return ans, it.Error()
}

func be64(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}
