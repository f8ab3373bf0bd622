package fsm

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// The queries Lookup answers. They run against the store after Dragonboat
// has established the read's consistency (ReadIndex) or directly (stale).
type (
	GetManyQuery struct {
		Paths  []string
		NoData bool
	}
	GetManyAnswer struct {
		Results  []core.GetResult
		revision int64
	}
	ChildrenQuery  struct{ Path string }
	ChildrenAnswer struct {
		Names []string
		Stat  core.Stat
		Err   error
	}
	SnapshotQuery struct{ Prefix string }
	LeaderQuery   struct{}
	sessionQuery  struct{ id int64 }
	SessionsQuery struct{}
	// changesQuery reads the change log from index from (inclusive) on, at
	// most max events (a batch is never split).
	ChangesQuery struct {
		From   int64
		Prefix string
		Max    int
	}
	ChangesAnswer struct {
		Events  []core.WatchEvent
		UpTo    int64 // everything up to upTo has been read
		Floor   int64 // oldest index still in the change log
		Applied int64
	}
	AppliedQuery struct{}
)

func runQuery(db *pebble.DB, q interface{}) (interface{}, error) {
	switch q := q.(type) {
	case GetManyQuery:
		var r reader = db
		if len(q.Paths) > 1 {
			s := db.NewSnapshot()
			defer s.Close()
			r = s
		}
		return getMany(r, q)
	case ChildrenQuery:
		return children(db, q.Path)
	case SnapshotQuery:
		s := db.NewSnapshot()
		defer s.Close()
		return readSnapshot(s, q.Prefix)
	case LeaderQuery:
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
	case SessionsQuery:
		return allSessions(db)
	case ChangesQuery:
		s := db.NewSnapshot()
		defer s.Close()
		return readChanges(s, q)
	case AppliedQuery:
		a, err := readApplied(db)
		return int64(a), err
	}
	return nil, fmt.Errorf("raft state machine: unknown query %T", q)
}

func readNode(r reader, p string) (*raftv1.NodeRecord, error) {
	var n raftv1.NodeRecord
	ok, err := readProto(r, NodeKey(p), &n)
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

func getMany(r reader, q GetManyQuery) (*GetManyAnswer, error) {
	applied, err := readApplied(r)
	if err != nil {
		return nil, err
	}
	ans := &GetManyAnswer{Results: make([]core.GetResult, len(q.Paths)), revision: int64(applied)}
	for i, p := range q.Paths {
		if err := core.ValidatePath(p); err != nil {
			ans.Results[i].Err = err
			continue
		}
		n, err := readNode(r, p)
		if err != nil {
			return nil, err
		}
		if n == nil {
			ans.Results[i].Err = fmt.Errorf("%w: %s", core.ErrNotFound, p)
			continue
		}
		ans.Results[i].Node = core.Node{Path: p, Stat: CoreStat(StatOf(n))}
		if !q.NoData {
			ans.Results[i].Node.Data = n.GetData()
		}
	}
	return ans, nil
}

func children(db *pebble.DB, p string) (*ChildrenAnswer, error) {
	if err := core.ValidatePath(p); err != nil {
		return &ChildrenAnswer{Err: err}, nil
	}
	s := db.NewSnapshot()
	defer s.Close()
	n, err := readNode(s, p)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return &ChildrenAnswer{Err: fmt.Errorf("%w: %s", core.ErrNotFound, p)}, nil
	}
	pfx := childPrefix(p)
	it, err := s.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: PrefixEnd(pfx)})
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
	return &ChildrenAnswer{Names: names, Stat: CoreStat(StatOf(n))}, nil
}

func readSnapshot(r reader, prefix string) (core.Snapshot, error) {
	applied, err := readApplied(r)
	if err != nil {
		return core.Snapshot{}, err
	}
	snap := core.Snapshot{Revision: int64(applied), Nodes: []core.Node{}}
	lo := NodeKey(prefix)
	if prefix == "/" {
		lo = NodeKey("/")
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: PrefixEnd(lo)})
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
		if err := Unmarshal(it.Value(), &n); err != nil {
			return core.Snapshot{}, err
		}
		snap.Nodes = append(snap.Nodes, core.Node{Path: p, Data: n.GetData(), Stat: CoreStat(StatOf(&n))})
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
		if err := Unmarshal(it.Value(), &s); err != nil {
			return nil, err
		}
		out = append(out, &s)
	}
	return out, it.Error()
}

func readChanges(r reader, q ChangesQuery) (*ChangesAnswer, error) {
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
	ans := &ChangesAnswer{Floor: floor, Applied: int64(applied), UpTo: int64(applied)}
	if q.From > int64(applied) {
		ans.UpTo = q.From - 1
		return ans, nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: logKey(q.From), UpperBound: logKey(int64(applied) + 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		idx := int64(be64(it.Key()[1:]))
		if q.Max > 0 && len(ans.Events) >= q.Max {
			ans.UpTo = idx - 1
			break
		}
		var e raftv1.ChangeLogEntry
		if err := Unmarshal(it.Value(), &e); err != nil {
			return nil, err
		}
		for _, ev := range e.GetEvents() {
			if !core.HasPrefixPath(ev.GetPath(), q.Prefix) {
				continue
			}
			ans.Events = append(ans.Events, core.WatchEvent{
				Type: core.EventType(ev.GetType()), Path: ev.GetPath(), Data: ev.GetData(),
				Stat: CoreStat(ev.GetStat()), Revision: idx,
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
