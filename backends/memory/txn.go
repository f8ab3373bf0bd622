package memory

import (
	"fmt"
	"sort"

	"github.com/metaplane/metaplane/core"
)

// undoRec is one change made by a transaction in progress, to roll back on
// failure: either a node replaced (prev, nil when the node was absent) or a
// child name added to or removed from its parent's set.
type undoRec struct {
	child  bool
	path   string // the node, or the parent for a child record
	prev   *node
	name   string
	added  bool
	hadKey bool
}

type ownerPath struct {
	owner int64
	path  string
}

// txnState is a transaction being applied to the tree in place.
type txnState struct {
	s       *Store
	rev     int64
	now     int64
	owner   int64 // the session of the client (0 for internal deletions)
	undo    []undoRec
	events  []core.WatchEvent
	ephAdd  []ownerPath
	ephDel  []ownerPath
	results []core.OpResult
}

func (t *txnState) putNode(path string, n *node) {
	prev, ok := t.s.nodes[path]
	t.undo = append(t.undo, undoRec{path: path, prev: prev, hadKey: ok})
	if n == nil {
		delete(t.s.nodes, path)
	} else {
		t.s.nodes[path] = n
	}
}

func (t *txnState) setChild(parent, name string, add bool) {
	m := t.s.children[parent]
	if m == nil {
		m = map[string]struct{}{}
		t.s.children[parent] = m
	}
	if add {
		m[name] = struct{}{}
	} else {
		delete(m, name)
		if len(m) == 0 {
			delete(t.s.children, parent)
		}
	}
	t.undo = append(t.undo, undoRec{child: true, path: parent, name: name, added: add})
}

func (t *txnState) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		if u.child {
			m := t.s.children[u.path]
			if u.added {
				delete(m, u.name)
				if len(m) == 0 {
					delete(t.s.children, u.path)
				}
			} else {
				if m == nil {
					m = map[string]struct{}{}
					t.s.children[u.path] = m
				}
				m[u.name] = struct{}{}
			}
			continue
		}
		if u.hadKey {
			t.s.nodes[u.path] = u.prev
		} else {
			delete(t.s.nodes, u.path)
		}
	}
}

// bumpCversion replaces parent with a copy whose child counter is one
// higher, returning the counter's value before.
func (t *txnState) bumpCversion(parent string) int64 {
	p := t.s.nodes[parent]
	cp := *p
	cp.cversion++
	cp.childRev = t.rev
	t.putNode(parent, &cp)
	return p.cversion
}

// create makes one node whose parent exists and is not ephemeral.
func (t *txnState) create(path string, data []byte, owner int64, seqBase bool) (string, error) {
	parent := core.ParentPath(path)
	pn := t.s.nodes[parent]
	if pn == nil {
		return "", fmt.Errorf("%w: create %s: parent %s does not exist", core.ErrNoParent, path, parent)
	}
	if pn.owner != 0 {
		return "", fmt.Errorf("%w: create %s: parent %s is ephemeral and cannot have children", core.ErrNoParent, path, parent)
	}
	if seqBase {
		// path is the base; the suffix comes from the parent's counter.
		path = path + core.SequentialSuffix(t.s.nodes[parent].cversion)
	}
	if _, ok := t.s.nodes[path]; ok {
		return "", fmt.Errorf("%w: %s", core.ErrNodeExists, path)
	}
	t.bumpCversion(parent)
	n := &node{
		data:      cloneBytes(data),
		createRev: t.rev,
		modRev:    t.rev,
		ctime:     t.now,
		mtime:     t.now,
		owner:     owner,
	}
	if n.data == nil {
		n.data = []byte{}
	}
	t.putNode(path, n)
	t.setChild(parent, core.BaseName(path), true)
	if owner != 0 {
		t.ephAdd = append(t.ephAdd, ownerPath{owner, path})
	}
	t.events = append(t.events, core.WatchEvent{
		Type: core.EventCreated, Path: path, Data: n.data,
		Stat: t.s.statLocked(path, n), Revision: t.rev,
	})
	return path, nil
}

func (t *txnState) delete(path string) {
	n := t.s.nodes[path]
	parent := core.ParentPath(path)
	t.putNode(path, nil)
	t.setChild(parent, core.BaseName(path), false)
	t.bumpCversion(parent)
	if n.owner != 0 {
		t.ephDel = append(t.ephDel, ownerPath{n.owner, path})
	}
	t.events = append(t.events, core.WatchEvent{Type: core.EventDeleted, Path: path, Revision: t.rev})
}

func versionOK(want, have int64) bool { return want == core.AnyVersion || want == have }

// applyOp applies one op, or returns its error (wrapping a sentinel).
func (t *txnState) applyOp(op core.Op) error {
	s := t.s
	switch op.Type {
	case core.OpCheck:
		if err := core.ValidatePath(op.Path); err != nil {
			return err
		}
		if op.Version < core.AnyVersion {
			return fmt.Errorf("%w: check %s: version %d", core.ErrInvalidArgument, op.Path, op.Version)
		}
		n := s.nodes[op.Path]
		if n == nil {
			return fmt.Errorf("%w: check %s", core.ErrNotFound, op.Path)
		}
		if !versionOK(op.Version, n.version) {
			return fmt.Errorf("%w: check %s: version is %d, expected %d", core.ErrBadVersion, op.Path, n.version, op.Version)
		}
		t.results = append(t.results, core.OpResult{Type: op.Type, Path: op.Path, Stat: s.statLocked(op.Path, n)})
		return nil

	case core.OpCreate:
		if !op.Mode.Valid() {
			return fmt.Errorf("%w: create %s: unknown create mode %d", core.ErrInvalidArgument, op.Path, int32(op.Mode))
		}
		checkPath := op.Path
		if op.Mode.IsSequential() {
			checkPath = op.Path + core.SequentialSuffix(0)
		}
		if err := core.ValidatePath(checkPath); err != nil {
			return err
		}
		if op.Path == "/" {
			return fmt.Errorf("%w: /", core.ErrNodeExists)
		}
		if len(op.Data) > s.opts.MaxValueSize {
			return fmt.Errorf("%w: create %s: %d bytes, limit %d", core.ErrTooLarge, op.Path, len(op.Data), s.opts.MaxValueSize)
		}
		owner := int64(0)
		if op.Lease != 0 {
			if !op.Mode.IsEphemeral() {
				return fmt.Errorf("%w: create %s: a lease is only for ephemeral nodes", core.ErrInvalidArgument, op.Path)
			}
			if _, ok := s.leases[op.Lease]; !ok {
				return fmt.Errorf("%w: create %s: lease %d is gone", core.ErrSessionExpired, op.Path, op.Lease)
			}
			owner = op.Lease
		} else if op.Mode.IsEphemeral() {
			if t.owner == 0 {
				return fmt.Errorf("%w: create %s: no session", core.ErrSessionExpired, op.Path)
			}
			owner = t.owner
		}
		parent := core.ParentPath(checkPath)
		if s.nodes[parent] == nil && op.MakeParents {
			// Create the missing ancestors, outermost first.
			var missing []string
			for p := parent; s.nodes[p] == nil; p = core.ParentPath(p) {
				missing = append(missing, p)
			}
			for i := len(missing) - 1; i >= 0; i-- {
				if _, err := t.create(missing[i], nil, 0, false); err != nil {
					return err
				}
			}
		}
		var (
			path string
			err  error
		)
		if op.Mode.IsSequential() {
			path, err = t.create(op.Path, op.Data, owner, true)
		} else {
			path, err = t.create(op.Path, op.Data, owner, false)
		}
		if err != nil {
			return err
		}
		t.results = append(t.results, core.OpResult{Type: op.Type, Path: path, Stat: s.statLocked(path, s.nodes[path])})
		return nil

	case core.OpSet:
		if err := core.ValidatePath(op.Path); err != nil {
			return err
		}
		if op.Version < core.AnyVersion {
			return fmt.Errorf("%w: set %s: version %d", core.ErrInvalidArgument, op.Path, op.Version)
		}
		if len(op.Data) > s.opts.MaxValueSize {
			return fmt.Errorf("%w: set %s: %d bytes, limit %d", core.ErrTooLarge, op.Path, len(op.Data), s.opts.MaxValueSize)
		}
		n := s.nodes[op.Path]
		if n == nil {
			return fmt.Errorf("%w: set %s", core.ErrNotFound, op.Path)
		}
		if !versionOK(op.Version, n.version) {
			return fmt.Errorf("%w: set %s: version is %d, expected %d", core.ErrBadVersion, op.Path, n.version, op.Version)
		}
		cp := *n
		cp.data = cloneBytes(op.Data)
		if cp.data == nil {
			cp.data = []byte{}
		}
		cp.version++
		cp.modRev = t.rev
		cp.mtime = t.now
		t.putNode(op.Path, &cp)
		st := s.statLocked(op.Path, &cp)
		t.events = append(t.events, core.WatchEvent{Type: core.EventUpdated, Path: op.Path, Data: cp.data, Stat: st, Revision: t.rev})
		t.results = append(t.results, core.OpResult{Type: op.Type, Path: op.Path, Stat: st})
		return nil

	case core.OpDelete:
		if err := core.ValidatePath(op.Path); err != nil {
			return err
		}
		if op.Version < core.AnyVersion {
			return fmt.Errorf("%w: delete %s: version %d", core.ErrInvalidArgument, op.Path, op.Version)
		}
		if op.Path == "/" {
			return fmt.Errorf("%w: the root / cannot be deleted", core.ErrInvalidArgument)
		}
		n := s.nodes[op.Path]
		if n == nil {
			return fmt.Errorf("%w: delete %s", core.ErrNotFound, op.Path)
		}
		if !versionOK(op.Version, n.version) {
			return fmt.Errorf("%w: delete %s: version is %d, expected %d", core.ErrBadVersion, op.Path, n.version, op.Version)
		}
		if k := len(s.children[op.Path]); k > 0 {
			return fmt.Errorf("%w: delete %s: it has %d children", core.ErrNotEmpty, op.Path, k)
		}
		t.delete(op.Path)
		t.results = append(t.results, core.OpResult{Type: op.Type, Path: op.Path})
		return nil
	}
	return fmt.Errorf("%w: unknown op type %d", core.ErrInvalidArgument, int32(op.Type))
}

// txnLocked applies ops atomically; owner is the session that owns
// ephemeral creates. Fencing is checked by the caller.
func (s *Store) txnLocked(ops []core.Op, owner int64) (core.TxnResult, error) {
	if len(ops) == 0 {
		return core.TxnResult{}, fmt.Errorf("%w: empty transaction", core.ErrInvalidArgument)
	}
	t := &txnState{s: s, rev: s.rev + 1, now: s.opts.Now().UnixMilli(), owner: owner}
	for i, op := range ops {
		if err := t.applyOp(op); err != nil {
			t.rollback()
			return core.TxnResult{}, &core.TxnError{Index: i, Err: err}
		}
	}
	s.commitLocked(t)
	return core.TxnResult{Revision: t.rev, Results: t.results}, nil
}

func (s *Store) commitLocked(t *txnState) {
	s.rev = t.rev
	for _, e := range t.ephAdd {
		m := s.ephemerals[e.owner]
		if m == nil {
			m = map[string]struct{}{}
			s.ephemerals[e.owner] = m
		}
		m[e.path] = struct{}{}
	}
	for _, e := range t.ephDel {
		if m := s.ephemerals[e.owner]; m != nil {
			delete(m, e.path)
			if len(m) == 0 {
				delete(s.ephemerals, e.owner)
			}
		}
	}
	s.appendHistoryLocked(t.rev, t.events)
}

// deleteOwnedLocked deletes every ephemeral of owner in one revision (none
// when it has none).
func (s *Store) deleteOwnedLocked(owner int64) {
	m := s.ephemerals[owner]
	if len(m) == 0 {
		return
	}
	paths := make([]string, 0, len(m))
	for p := range m {
		paths = append(paths, p)
	}
	// Ephemerals have no children, so any order works; sort for a
	// deterministic event order.
	sort.Strings(paths)
	t := &txnState{s: s, rev: s.rev + 1, now: s.opts.Now().UnixMilli()}
	for _, p := range paths {
		if s.nodes[p] != nil {
			t.delete(p)
		}
	}
	s.commitLocked(t)
}
