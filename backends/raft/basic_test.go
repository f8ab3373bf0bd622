package raft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

func TestSingleVoterBasics(t *testing.T) {
	c := startCluster(t, 1, nil)
	cl := c.client(0)
	ctx := testutil.Context(t, 20*time.Second)
	p, st, err := core.Create(ctx, cl, "/a/b", []byte("v1"), core.CreateOptions{MakeParents: true})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if p != "/a/b" || st.Version != 0 || st.CreateRevision == 0 {
		t.Fatalf("create: got %q %+v", p, st)
	}
	n, err := core.Get(ctx, cl, "/a/b")
	if err != nil || string(n.Data) != "v1" {
		t.Fatalf("get: %v %q", err, n.Data)
	}
	if _, _, err := core.Create(ctx, cl, "/a/b", nil, core.CreateOptions{}); !errors.Is(err, core.ErrNodeExists) {
		t.Fatalf("create twice: got %v, want ErrNodeExists", err)
	}
	if _, err := core.Set(ctx, cl, "/a/b", []byte("v2"), 5, core.Fence{}); !errors.Is(err, core.ErrBadVersion) {
		t.Fatalf("set bad version: got %v", err)
	}
	names, _, err := cl.Children(ctx, "/a", core.ReadOptions{})
	if err != nil || len(names) != 1 || names[0] != "b" {
		t.Fatalf("children: %v %v", names, err)
	}
	seq, _, err := core.Create(ctx, cl, "/a/s-", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || seq != "/a/s-0000000001" {
		t.Fatalf("sequential: %q %v", seq, err)
	}
	if err := core.Delete(ctx, cl, "/a", core.AnyVersion, core.Fence{}); !errors.Is(err, core.ErrNotEmpty) {
		t.Fatalf("delete parent: %v", err)
	}
	first, err := core.AllocateIDs(ctx, cl, "/metadata/table_seqid", 1000, core.Fence{})
	if err != nil || first != 0 {
		t.Fatalf("ids: %d %v", first, err)
	}
	first, err = core.AllocateIDs(ctx, cl, "/metadata/table_seqid", 10, core.Fence{})
	if err != nil || first != 1000 {
		t.Fatalf("ids 2: %d %v", first, err)
	}
	// The counter never wraps: a range past the largest int64 is refused
	// and the counter stays.
	if _, _, err := core.Create(ctx, cl, "/near-max", core.EncodeCounter(math.MaxInt64-5), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.AllocateIDs(ctx, cl, "/near-max", 10, core.Fence{}); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("ids past the largest int64: got %v, want ErrTooLarge", err)
	}
	if first, err := core.AllocateIDs(ctx, cl, "/near-max", 5, core.Fence{}); err != nil || first != math.MaxInt64-5 {
		t.Fatalf("last ids: %d %v", first, err)
	}
	if _, err := core.AllocateIDs(ctx, cl, "/near-max", 1, core.Fence{}); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("ids from the full counter: got %v, want ErrTooLarge", err)
	}
	if n, err := core.Get(ctx, cl, "/near-max"); err != nil || !bytes.Equal(n.Data, core.EncodeCounter(math.MaxInt64)) {
		t.Fatalf("counter after the refusals: %x %v", n.Data, err)
	}
	l, err := cl.Campaign(ctx, core.Candidate{ID: "c1", Address: "CLIENT://x:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	if _, err := core.Set(ctx, cl, "/a/b", []byte("v3"), core.AnyVersion, l.Fence()); err != nil {
		t.Fatalf("fenced set: %v", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatalf("resign: %v", err)
	}
	if _, err := core.Set(ctx, cl, "/a/b", []byte("v4"), core.AnyVersion, l.Fence()); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("stale fenced set: got %v, want ErrFenced", err)
	}
	l2, err := cl.Campaign(ctx, core.Candidate{ID: "c2", Address: "CLIENT://x:2"})
	if err != nil || l2.Epoch() <= l.Epoch() {
		t.Fatalf("campaign 2: %v epoch %d after %d", err, l2.Epoch(), l.Epoch())
	}
	info, err := cl.Leader(ctx)
	if err != nil || info.ID != "c2" {
		t.Fatalf("leader: %+v %v", info, err)
	}
}

// TestRestartFromDisk: a voter restarted from its directory keeps its data,
// its change history and its cluster id, and the next leader's epoch is
// above every earlier one.
func TestRestartFromDisk(t *testing.T) {
	c := startCluster(t, 1, nil)
	cl := c.client(0)
	ctx := testutil.Context(t, 20*time.Second)
	_, st, err := core.Create(ctx, cl, "/kept", []byte("v"), core.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l1, err := cl.Campaign(ctx, core.Candidate{ID: "a", Address: "CLIENT://a:1"})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := c.members[0].Status()
	c.stop(0)
	if err := c.start(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the applied index to be known after the restart", func() bool {
		s, err := c.members[0].Status()
		return err == nil && s.AppliedIndex >= before.AppliedIndex
	})
	after, _ := c.members[0].Status()
	if after.Details["clusterId"] != before.Details["clusterId"] {
		t.Fatalf("cluster id changed across a restart: %s -> %s", before.Details["clusterId"], after.Details["clusterId"])
	}
	cl2 := c.client(0)
	n, err := core.Get(ctx, cl2, "/kept")
	if err != nil || string(n.Data) != "v" {
		t.Fatalf("after restart: %q %v", n.Data, err)
	}
	ch, err := cl2.Watch(ctx, "/kept", st.CreateRevision)
	if err != nil {
		t.Fatalf("watch from before the restart: %v", err)
	}
	select {
	case r := <-ch:
		if r.Err != nil || len(r.Events) == 0 || r.Events[0].Type != core.EventCreated || r.Events[0].Revision != st.CreateRevision {
			t.Fatalf("history after restart: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no history after restart")
	}
	l2, err := cl2.Campaign(ctx, core.Candidate{ID: "b", Address: "CLIENT://b:1"})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Epoch() <= l1.Epoch() {
		t.Fatalf("epoch after restart %d, before %d", l2.Epoch(), l1.Epoch())
	}
	if _, err := core.Set(ctx, cl2, "/kept", nil, core.AnyVersion, l1.Fence()); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("the pre-restart leader's fence: got %v, want ErrFenced", err)
	}
}

// TestStatusReportsRaftState: the leader's status carries role, term,
// commit and applied index and, from the followers' renewal records, each
// follower's applied index and lag.
func TestStatusReportsRaftState(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(leader)
	c.client((leader + 1) % 3)
	c.client((leader + 2) % 3)
	if _, _, err := core.Create(ctx, cl, "/x", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var st core.Status
	testutil.WaitFor(t, 10*time.Second, "both followers' progress on the leader", func() bool {
		var err error
		st, err = cl.Status(ctx)
		if err != nil {
			return false
		}
		n := 0
		for _, m := range st.Members {
			if m.Role == core.RoleFollower && m.MatchIndex > 0 {
				n++
			}
		}
		return n == 2
	})
	if st.Role != core.RoleLeader || st.Epoch < 1 || st.AppliedIndex < 1 || st.CommitIndex < st.AppliedIndex || len(st.Members) != 3 {
		t.Fatalf("leader status: %+v", st)
	}
	for _, k := range []string{"raftRole", "raftTerm", "raftCommitIndex", "raftAppliedIndex", "raftApplyLag", "raftFollowerLag", "clusterId"} {
		if st.Details[k] == "" {
			t.Errorf("status detail %s missing: %v", k, st.Details)
		}
	}
	if st.Details["raftFollowerLag"] == "unknown" {
		t.Errorf("raftFollowerLag unknown with both followers reporting: %v", st.Details)
	}
	fst, err := c.members[(leader+1)%3].Status()
	if err != nil || fst.Role != core.RoleFollower || fst.LeaderID != st.MemberID {
		t.Fatalf("follower status: %+v %v", fst, err)
	}
	if st.ClusterID == "" || st.ClusterID != fst.ClusterID {
		t.Errorf("cluster ids: leader %q, follower %q; want one, not empty", st.ClusterID, fst.ClusterID)
	}
	for _, m := range st.Members {
		if m.Kind != core.MemberVoter || !m.Reachable || m.LastContact.IsZero() {
			t.Errorf("leader's view of %s: %+v, want a reachable voter with a last contact", m.ID, m)
		}
	}

	// A non-voting member is listed as such; one that never answers is
	// unreachable, with no contact.
	lm := c.members[leader].m
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := lm.nh.SyncRequestAddNonVoting(actx, shardID, 9, addr, 0); err != nil {
		t.Fatalf("add a non-voting member: %v", err)
	}
	st, err = cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range st.Members {
		if m.ID == "9" {
			found = true
			if m.Kind != core.MemberNonVoting || m.Address != addr || m.Reachable || !m.LastContact.IsZero() {
				t.Errorf("the non-voting member: %+v, want non-voting at %s, unreachable, no contact", m, addr)
			}
		}
	}
	if !found {
		t.Errorf("the non-voting member is not listed: %+v", st.Members)
	}
}
