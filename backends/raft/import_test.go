package raft

import (
	"errors"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestImportKeepsVersionsAndIsAtomic: on a real voter, an import batch
// creates its nodes in one entry with the source's versions, times and
// child sequence; a batch with one bad node (existing, no parent) changes
// nothing and names the node; the capabilities declare the part.
func TestImportKeepsVersionsAndIsAtomic(t *testing.T) {
	c := startCluster(t, 1, nil)
	cl := c.client(c.waitLeader())
	ctx := testutil.Context(t, 20*time.Second)
	im, ok := core.Optional[core.Importer](cl)
	if !ok || !cl.Capabilities().ImportKeepsVersions {
		t.Fatal("the Raft client offers no Importer keeping versions")
	}
	nodes := []core.ImportNode{
		{Path: "/metadata", Version: 0, CreateTime: 1000, ModifyTime: 1000},
		{Path: "/metadata/databases", Data: []byte("dbs"), Version: 7, CreateTime: 1000, ModifyTime: 2000},
		{Path: "/changes", NextSequence: 42},
		{Path: "/changes/acl_0000000041", Data: []byte("a"), Version: 1},
	}
	if err := im.Import(ctx, nodes, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	n, err := core.Get(ctx, cl, "/metadata/databases")
	if err != nil {
		t.Fatal(err)
	}
	if string(n.Data) != "dbs" || n.Stat.Version != 7 || n.Stat.CreateTime != 1000 || n.Stat.ModifyTime != 2000 {
		t.Errorf("imported node %+v, want data dbs, version 7, times 1000/2000", n)
	}
	m, _ := core.Get(ctx, cl, "/metadata")
	if m.Stat.CreateRevision != n.Stat.CreateRevision || m.Stat.NumChildren != 1 {
		t.Errorf("the batch spans revisions %d and %d (want one entry), /metadata has %d children", m.Stat.CreateRevision, n.Stat.CreateRevision, m.Stat.NumChildren)
	}
	seq, _, err := core.Create(ctx, cl, "/changes/acl_", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || seq <= "/changes/acl_0000000041" {
		t.Errorf("sequential create after import: %s, %v; want a suffix above the source's 41", seq, err)
	}

	before, _ := cl.Snapshot(ctx, "/")
	for name, batch := range map[string][]core.ImportNode{
		"existing": {{Path: "/fresh"}, {Path: "/metadata/databases"}},
		"orphan":   {{Path: "/fresh"}, {Path: "/nowhere/child"}},
	} {
		err := im.Import(ctx, batch, core.Fence{})
		if core.FailedOpIndex(err) != 1 || !(errors.Is(err, core.ErrNodeExists) || errors.Is(err, core.ErrNoParent)) {
			t.Errorf("%s: %v, want node 1 refused with ErrNodeExists or ErrNoParent", name, err)
		}
	}
	if err := im.Import(ctx, nil, core.Fence{}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("empty import: %v, want ErrInvalidArgument", err)
	}
	after, _ := cl.Snapshot(ctx, "/")
	if len(after.Nodes) != len(before.Nodes) {
		t.Errorf("refused imports changed the tree: %d nodes, then %d", len(before.Nodes), len(after.Nodes))
	}
}

// TestEpochContinuesAboveImportedEpochNode: a store imported from another
// backend carries its epoch node; the next leader's epoch is above it
// (tablet servers refuse a lower coordinator epoch), and epochs keep
// increasing after it.
func TestEpochContinuesAboveImportedEpochNode(t *testing.T) {
	c := startCluster(t, 1, nil)
	cl := c.client(c.waitLeader())
	ctx := testutil.Context(t, 20*time.Second)
	first, err := cl.Campaign(ctx, core.Candidate{ID: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Epoch() >= 40 {
		t.Fatalf("a fresh store's epoch is %d already", first.Epoch())
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	im, _ := core.Optional[core.Importer](cl)
	if err := im.Import(ctx, []core.ImportNode{{Path: "/coordinators"}, {Path: "/coordinators/epoch", Data: []byte("41"), Version: 41}}, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	l, err := cl.Campaign(ctx, core.Candidate{ID: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Epoch() != 42 {
		t.Errorf("epoch after importing epoch 41: %d, want 42", l.Epoch())
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := cl.Campaign(ctx, core.Candidate{ID: "next"})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Epoch() <= l.Epoch() {
		t.Errorf("the next epoch %d is not above %d", l2.Epoch(), l.Epoch())
	}
	// A fenced write with the new leader's fence succeeds.
	if _, _, err := core.Create(ctx, cl, "/x", nil, core.CreateOptions{Fence: l2.Fence()}); err != nil {
		t.Errorf("a fenced write of the leader at epoch %d: %v", l2.Epoch(), err)
	}
}
