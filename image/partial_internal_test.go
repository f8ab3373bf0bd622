package image

import (
	"testing"

	"github.com/metaplane/metaplane/core"
)

// TestOwnWriteAtTheWatchedRevision: a watch that has delivered part of a
// revision (ZooKeeper's notifications of one multi's deletes come one by
// one) has the image at that revision; the writer's own write of the same
// revision still applies the rest at once, and re-applies what the watch
// applied without changing it.
func TestOwnWriteAtTheWatchedRevision(t *testing.T) {
	im := New(Options{})
	m := newTree(im.opts.Prefix)
	for _, p := range []string{"/t", "/t/a", "/t/b", "/t/c"} {
		put(im, m, core.Node{Path: p, Data: []byte(p), Stat: core.Stat{CreateRevision: 5, ModifyRevision: 5}})
	}
	im.install(m, 5)
	// Revision 10 deleted /t/a and /t/b and set /t/c; the watch has
	// delivered the delete of /t/a only.
	im.applyEvents([]core.WatchEvent{{Type: core.EventDeleted, Path: "/t/a", Revision: 10}}, 10)
	ops := []core.Op{core.DeleteOp("/t/a", core.AnyVersion), core.DeleteOp("/t/b", core.AnyVersion), core.SetOp("/t/c", []byte("new"), core.AnyVersion)}
	res := core.TxnResult{Revision: 10, Results: []core.OpResult{
		{Type: core.OpDelete, Path: "/t/a"}, {Type: core.OpDelete, Path: "/t/b"},
		{Type: core.OpSet, Path: "/t/c", Stat: core.Stat{CreateRevision: 5, ModifyRevision: 10, Version: 1}},
	}}
	im.ApplyWrite(ops, res)
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, p := range []string{"/t/a", "/t/b"} {
		if _, ok := im.nodes.lookup(p); ok {
			t.Errorf("%s still in the image after its own delete at the watched revision", p)
		}
	}
	if e, ok := nodeAt(im, "/t/c"); !ok || string(e.data) != "new" || e.rev != 10 {
		t.Errorf("/t/c after its own set at the watched revision: %+v", e)
	}
	if im.watched != 10 {
		t.Errorf("watched %d, want 10", im.watched)
	}
}

// TestOwnDeleteBelowTheWatchedRevision: an own create the watch never saw
// (created and deleted between two of its looks) is in the image only by
// the writer's own write; when the writer's drop of it returns after the
// watch's revision passed the drop, the drop still removes it (the watch
// sends no delete for a node it never knew). A node created again after
// the delete keeps its newer state.
func TestOwnDeleteBelowTheWatchedRevision(t *testing.T) {
	im := New(Options{})
	im.install(newTree(im.opts.Prefix), 5)
	create := func(p string, rev int64) {
		im.ApplyWrite([]core.Op{core.CreateOp(p, []byte("v"), core.Persistent)},
			core.TxnResult{Revision: rev, Results: []core.OpResult{{Type: core.OpCreate, Path: p}}})
	}
	create("/t", 10)
	create("/u", 11)
	// The watch passes revision 20 without an event for /t or /u; /u was
	// created again at 15 (its event arrives).
	im.applyEvents([]core.WatchEvent{{Type: core.EventCreated, Path: "/u", Data: []byte("again"),
		Stat: core.Stat{CreateRevision: 15, ModifyRevision: 15}, Revision: 15}}, 20)
	for _, p := range []string{"/t", "/u"} {
		im.ApplyWrite([]core.Op{core.DeleteOp(p, core.AnyVersion)},
			core.TxnResult{Revision: 12, Results: []core.OpResult{{Type: core.OpDelete, Path: p}}})
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if _, ok := im.nodes.lookup("/t"); ok {
		t.Errorf("/t still in the image after its own delete at 12, below the watched revision %d", im.watched)
	}
	if e, ok := nodeAt(im, "/u"); !ok || string(e.data) != "again" {
		t.Errorf("/u, created again at 15, lost to a delete at 12: %+v", e)
	}
}

// TestOwnDeleteBeforeItsCreate: a writer's drop of a node another of its
// requests created can come back before that create does (the create's
// answer waits on a read-back); the image, which did not hold the node
// yet, must not show it when the create's own write arrives after the
// delete.
func TestOwnDeleteBeforeItsCreate(t *testing.T) {
	im := New(Options{})
	im.install(newTree(im.opts.Prefix), 5)
	im.ApplyWrite([]core.Op{core.DeleteOp("/t", core.AnyVersion)},
		core.TxnResult{Revision: 12, Results: []core.OpResult{{Type: core.OpDelete, Path: "/t"}}})
	im.ApplyWrite([]core.Op{core.CreateOp("/t", []byte("v"), core.Persistent)},
		core.TxnResult{Revision: 10, Results: []core.OpResult{{Type: core.OpCreate, Path: "/t"}}})
	// The watch's event for the create, read before the delete, arrives too.
	im.applyEvents([]core.WatchEvent{{Type: core.EventCreated, Path: "/t", Data: []byte("v"),
		Stat: core.Stat{CreateRevision: 10, ModifyRevision: 10}, Revision: 10}}, 10)
	im.mu.Lock()
	defer im.mu.Unlock()
	if e, ok := nodeAt(im, "/t"); ok {
		t.Fatalf("/t shown after its delete at 12: %+v", e)
	}
}

// nodeAt returns path's record in im (under im's lock).
func nodeAt(im *Image, path string) (record, bool) {
	id, ok := im.nodes.lookup(path)
	if !ok {
		return record{}, false
	}
	return im.nodes.get(id), true
}
