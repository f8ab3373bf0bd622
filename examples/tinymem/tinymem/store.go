package tinymem

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metaplane/metaplane/core"
)

// node is one node of the tree. Nodes are never changed in place: a
// transaction copies the nodes it changes and the store swaps them in at
// commit, so a refused transaction changes nothing.
type node struct {
	data              []byte
	version           int64
	createRev, modRev int64
	ctime, mtime      int64 // Unix milliseconds
	owner             int64 // session id, 0 for persistent
	seq               int64 // the next sequential suffix for a child
	kids              map[string]bool
}

func (n *node) stat() core.Stat {
	return core.Stat{
		Version: n.version, CreateRevision: n.createRev, ModifyRevision: n.modRev,
		CreateTime: n.ctime, ModifyTime: n.mtime, EphemeralOwner: n.owner,
		NumChildren: int32(len(n.kids)), DataLength: int32(len(n.data)),
	}
}

func (n *node) clone() *node {
	cp := *n
	cp.kids = make(map[string]bool, len(n.kids))
	for k := range n.kids {
		cp.kids[k] = true
	}
	return &cp
}

// store is the tree shared by every client of one plugin process. One
// mutex serializes it, which makes every read and write linearizable.
type store struct {
	mu           sync.Mutex
	maxNodes     int
	maxBytes     int64
	maxHistory   int
	nodes        map[string]*node
	bytes        int64 // the data bytes of nodes
	rev          int64
	history      []core.WatchEvent // the last changes, in revision order
	historyBytes int64             // their data bytes
	compacted    int64             // the newest revision no longer in history
	changed      chan struct{}     // closed and replaced at every commit
	closed       bool

	nextSession int64
	clients     map[*client]bool

	// The election: candidates in campaign order; the first one leads.
	queue    []*candidacy
	leader   *candidacy
	epoch    int64
	watchers map[chan core.LeaderInfo]bool
}

func newStore(maxNodes int, maxBytes int64, maxHistory int) *store {
	now := time.Now().UnixMilli()
	return &store{
		maxNodes: maxNodes, maxBytes: maxBytes, maxHistory: maxHistory,
		nodes:    map[string]*node{"/": {data: []byte{}, ctime: now, mtime: now, kids: map[string]bool{}}},
		changed:  make(chan struct{}),
		clients:  map[*client]bool{},
		watchers: map[chan core.LeaderInfo]bool{},
	}
}

// txn is a transaction in progress: the nodes it changed (nil: deleted).
type txn struct {
	s      *store
	rev    int64
	now    int64
	owner  int64
	over   map[string]*node
	added  int   // nodes created minus nodes deleted
	bytes  int64 // data bytes added minus data bytes removed
	events []core.WatchEvent
}

// grow accounts for delta more data bytes, refusing to pass
// tinymem.max-bytes.
func (t *txn) grow(path string, delta int64) error {
	if delta > 0 && t.s.bytes+t.bytes+delta > t.s.maxBytes {
		return fmt.Errorf("%w: %s: the tree holds tinymem.max-bytes=%d data bytes", core.ErrTooLarge, path, t.s.maxBytes)
	}
	t.bytes += delta
	return nil
}

func (t *txn) get(path string) *node {
	if n, ok := t.over[path]; ok {
		return n
	}
	return t.s.nodes[path]
}

// mut returns a copy of path's node owned by the transaction.
func (t *txn) mut(path string) *node {
	n, ok := t.over[path]
	if !ok {
		n = t.s.nodes[path].clone()
		t.over[path] = n
	}
	return n
}

func (t *txn) create(path string, data []byte, owner int64) (*node, error) {
	if t.get(path) != nil {
		return nil, fmt.Errorf("%w: %s", core.ErrNodeExists, path)
	}
	if len(t.s.nodes)+t.added >= t.s.maxNodes {
		return nil, fmt.Errorf("%w: create %s: the tree holds tinymem.max-nodes=%d nodes", core.ErrTooLarge, path, t.s.maxNodes)
	}
	if err := t.grow(path, int64(len(data))); err != nil {
		return nil, err
	}
	if t.get(core.ParentPath(path)).owner != 0 {
		return nil, fmt.Errorf("%w: create %s: parent %s is ephemeral", core.ErrNoParent, path, core.ParentPath(path))
	}
	parent := t.mut(core.ParentPath(path))
	parent.kids[core.BaseName(path)] = true
	n := &node{data: append([]byte{}, data...), createRev: t.rev, modRev: t.rev, ctime: t.now, mtime: t.now, owner: owner, kids: map[string]bool{}}
	t.over[path] = n
	t.added++
	t.events = append(t.events, core.WatchEvent{Type: core.EventCreated, Path: path, Data: n.data, Stat: n.stat(), Revision: t.rev})
	return n, nil
}

func (t *txn) remove(path string) {
	t.bytes -= int64(len(t.get(path).data))
	delete(t.mut(core.ParentPath(path)).kids, core.BaseName(path))
	t.over[path] = nil
	t.added--
	t.events = append(t.events, core.WatchEvent{Type: core.EventDeleted, Path: path, Revision: t.rev})
}

func checkVersion(what, path string, want, have int64) error {
	if want < core.AnyVersion {
		return fmt.Errorf("%w: %s %s: version %d", core.ErrInvalidArgument, what, path, want)
	}
	if want != core.AnyVersion && want != have {
		return fmt.Errorf("%w: %s %s: version is %d, expected %d", core.ErrBadVersion, what, path, have, want)
	}
	return nil
}

func (t *txn) apply(op core.Op) (core.OpResult, error) {
	res := core.OpResult{Type: op.Type, Path: op.Path}
	if op.Type < core.OpCheck || op.Type > core.OpDelete {
		return res, fmt.Errorf("%w: unknown op type %d", core.ErrInvalidArgument, int32(op.Type))
	}
	check := op.Path
	if op.Type == core.OpCreate && op.Mode.IsSequential() {
		check += core.SequentialSuffix(0)
	}
	if err := core.ValidatePath(check); err != nil {
		return res, err
	}
	if (op.Type == core.OpCreate || op.Type == core.OpSet) && len(op.Data) > core.DefaultMaxValueSize {
		return res, fmt.Errorf("%w: %s %s: %d bytes, limit %d", core.ErrTooLarge, op.Type, op.Path, len(op.Data), core.DefaultMaxValueSize)
	}
	n := t.get(op.Path)
	switch op.Type {
	case core.OpCheck, core.OpSet, core.OpDelete:
		if n == nil {
			return res, fmt.Errorf("%w: %s %s", core.ErrNotFound, op.Type, op.Path)
		}
		if err := checkVersion(op.Type.String(), op.Path, op.Version, n.version); err != nil {
			return res, err
		}
	}
	switch op.Type {
	case core.OpCheck:
		res.Stat = n.stat()
	case core.OpSet:
		if err := t.grow(op.Path, int64(len(op.Data)-len(n.data))); err != nil {
			return res, err
		}
		m := t.mut(op.Path)
		m.data, m.version, m.modRev, m.mtime = append([]byte{}, op.Data...), m.version+1, t.rev, t.now
		res.Stat = m.stat()
		t.events = append(t.events, core.WatchEvent{Type: core.EventUpdated, Path: op.Path, Data: m.data, Stat: res.Stat, Revision: t.rev})
	case core.OpDelete:
		if op.Path == "/" {
			return res, fmt.Errorf("%w: the root / cannot be deleted", core.ErrInvalidArgument)
		}
		if k := len(n.kids); k > 0 {
			return res, fmt.Errorf("%w: delete %s: it has %d children", core.ErrNotEmpty, op.Path, k)
		}
		t.remove(op.Path)
	case core.OpCreate:
		if !op.Mode.Valid() {
			return res, fmt.Errorf("%w: create %s: unknown create mode %d", core.ErrInvalidArgument, op.Path, int32(op.Mode))
		}
		if op.Lease != 0 {
			return res, fmt.Errorf("%w: create %s: tinymem grants no leases", core.ErrInvalidArgument, op.Path)
		}
		if op.Path == "/" {
			return res, fmt.Errorf("%w: /", core.ErrNodeExists)
		}
		parentPath := core.ParentPath(op.Path)
		if t.get(parentPath) == nil && op.MakeParents {
			var missing []string
			for p := parentPath; t.get(p) == nil; p = core.ParentPath(p) {
				missing = append(missing, p)
			}
			for i := len(missing) - 1; i >= 0; i-- {
				if _, err := t.create(missing[i], nil, 0); err != nil {
					return res, err
				}
			}
		}
		parent := t.get(parentPath)
		if parent == nil {
			return res, fmt.Errorf("%w: create %s: parent %s does not exist", core.ErrNoParent, op.Path, parentPath)
		}
		path := op.Path
		if op.Mode.IsSequential() {
			p := t.mut(parentPath)
			path += core.SequentialSuffix(p.seq)
			p.seq++
		}
		owner := int64(0)
		if op.Mode.IsEphemeral() {
			owner = t.owner
		}
		created, err := t.create(path, op.Data, owner)
		if err != nil {
			return res, err
		}
		res.Path, res.Stat = path, created.stat()
	}
	return res, nil
}

// txnLocked applies ops as one transaction for the session owner.
func (s *store) txnLocked(ops []core.Op, owner int64) (core.TxnResult, error) {
	if len(ops) == 0 {
		return core.TxnResult{}, fmt.Errorf("%w: empty transaction", core.ErrInvalidArgument)
	}
	t := s.begin(owner)
	results := make([]core.OpResult, 0, len(ops))
	for i, op := range ops {
		r, err := t.apply(op)
		if err != nil {
			return core.TxnResult{}, &core.TxnError{Index: i, Err: err}
		}
		results = append(results, r)
	}
	s.commitLocked(t)
	return core.TxnResult{Revision: t.rev, Results: results}, nil
}

func (s *store) begin(owner int64) *txn {
	return &txn{s: s, rev: s.rev + 1, now: time.Now().UnixMilli(), owner: owner, over: map[string]*node{}}
}

// commitLocked swaps the transaction's nodes in, records its events and
// wakes the watches.
func (s *store) commitLocked(t *txn) {
	for p, n := range t.over {
		if n == nil {
			delete(s.nodes, p)
		} else {
			s.nodes[p] = n
		}
	}
	s.rev = t.rev
	s.bytes += t.bytes
	s.history = append(s.history, t.events...)
	for _, e := range t.events {
		s.historyBytes += int64(len(e.Data))
	}
	// Keep at most tinymem.history events and tinymem.max-bytes of their
	// data, dropping the oldest whole revisions.
	drop := 0
	for len(s.history)-drop > s.maxHistory || s.historyBytes > s.maxBytes {
		cut := s.history[drop].Revision
		for drop < len(s.history) && s.history[drop].Revision == cut {
			s.historyBytes -= int64(len(s.history[drop].Data))
			drop++
		}
		s.compacted = max(s.compacted, cut)
	}
	if drop > 0 {
		s.history = append([]core.WatchEvent(nil), s.history[drop:]...)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// deleteEphemeralsLocked deletes every node session owns, in one revision.
func (s *store) deleteEphemeralsLocked(session int64) {
	var paths []string
	for p, n := range s.nodes {
		if n.owner == session {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return
	}
	sort.Strings(paths)
	t := s.begin(0)
	for _, p := range paths {
		t.remove(p) // ephemerals have no children
	}
	s.commitLocked(t)
}

func (s *store) compact(revision int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return core.ErrClosed
	}
	i := sort.Search(len(s.history), func(i int) bool { return s.history[i].Revision > revision })
	for _, e := range s.history[:i] {
		s.historyBytes -= int64(len(e.Data))
	}
	s.history = append([]core.WatchEvent(nil), s.history[i:]...)
	s.compacted = max(s.compacted, min(revision, s.rev))
	return nil
}

// eventsFrom returns the events of revision from on under prefix, grouped
// by revision.
func (s *store) eventsFromLocked(prefix string, from int64) [][]core.WatchEvent {
	i := sort.Search(len(s.history), func(i int) bool { return s.history[i].Revision >= from })
	var out [][]core.WatchEvent
	for ; i < len(s.history); i++ {
		e := s.history[i]
		if !under(e.Path, prefix) {
			continue
		}
		e.Data = append([]byte(nil), e.Data...)
		if k := len(out); k > 0 && out[k-1][0].Revision == e.Revision {
			out[k-1] = append(out[k-1], e)
		} else {
			out = append(out, []core.WatchEvent{e})
		}
	}
	return out
}

func under(path, prefix string) bool {
	return prefix == "/" || path == prefix || strings.HasPrefix(path, prefix+"/")
}

func (s *store) close() {
	s.mu.Lock()
	var cs []*client
	for c := range s.clients {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
		for ch := range s.watchers {
			close(ch)
		}
		s.watchers = nil
	}
}
