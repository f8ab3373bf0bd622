package raft

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// observeWait bounds how long an observer may take to report a leader the
// member already knows (several election timeouts of the test options).
const observeWait = 10 * time.Second

// nextLeader reads ch until it delivers a leader accepted by want, or
// fails the test after observeWait.
func nextLeader(t *testing.T, ch <-chan core.LeaderInfo, what string, want func(core.LeaderInfo) bool) core.LeaderInfo {
	t.Helper()
	timer := time.NewTimer(observeWait)
	defer timer.Stop()
	var seen []core.LeaderInfo
	for {
		select {
		case info, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the observer closed; saw %+v", what, seen)
			}
			if want(info) {
				return info
			}
			seen = append(seen, info)
		case <-timer.C:
			t.Fatalf("%s: nothing within %v; saw %+v", what, observeWait, seen)
		}
	}
}

// waitLeaderInfo waits until cl.Leader answers with a leader accepted by
// want and returns it.
func waitLeaderInfo(t *testing.T, cl *Client, what string, want func(core.LeaderInfo) bool) core.LeaderInfo {
	t.Helper()
	var info core.LeaderInfo
	testutil.WaitFor(t, observeWait, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		info, err = cl.Leader(ctx)
		return err == nil && want(info)
	})
	return info
}

// TestObserveLeaderAfterFollowerRestart: a follower restarted from its
// directory delivers, through ObserveLeader, the coordinator leader that
// Leader() names (same id, address and epoch), then the next leader once
// the first resigns.
func TestObserveLeaderAfterFollowerRestart(t *testing.T) {
	c := startCluster(t, 3, nil)
	lead := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(lead)
	l1, err := cl.Campaign(ctx, core.Candidate{ID: "a", Address: "CLIENT://a:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	f := (lead + 1) % 3
	c.stop(f)
	if err := c.start(f); err != nil {
		t.Fatalf("restart member %d: %v", f+1, err)
	}
	cf := c.client(f)
	// Linearizable reads on the just restarted member answer: a ReadIndex
	// request lost while its connections come up is retried.
	for i := 0; i < 20; i++ {
		if _, err := cf.Leader(ctx); err != nil {
			t.Fatalf("Leader() call %d on the restarted member: %v", i, err)
		}
	}
	want := waitLeaderInfo(t, cf, "Leader() on the restarted member", func(i core.LeaderInfo) bool { return i.ID == "a" })
	if want.Address != "CLIENT://a:1" || want.Epoch != l1.Epoch() {
		t.Fatalf("Leader() on the restarted member: %+v, want a at epoch %d", want, l1.Epoch())
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := cf.ObserveLeader(octx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	got := nextLeader(t, ch, "first delivery on the restarted member", func(core.LeaderInfo) bool { return true })
	if got != want {
		t.Fatalf("first delivery on the restarted member: %+v, Leader() says %+v", got, want)
	}

	if err := l1.Resign(ctx); err != nil {
		t.Fatalf("resign: %v", err)
	}
	l2, err := cl.Campaign(ctx, core.Candidate{ID: "b", Address: "CLIENT://b:1"})
	if err != nil {
		t.Fatalf("campaign after resign: %v", err)
	}
	got = nextLeader(t, ch, "the change on the restarted member", func(i core.LeaderInfo) bool { return i.ID == "b" })
	if got.Address != "CLIENT://b:1" || got.Epoch != l2.Epoch() || got.Epoch <= want.Epoch {
		t.Fatalf("change on the restarted member: %+v, want b at epoch %d (> %d)", got, l2.Epoch(), want.Epoch)
	}
}

// TestObserveLeaderAfterSingleVoterRestart: `metaplane coordinator`
// restarted on its directory as the only voter. The pre-restart leadership
// ended with the restart; an observer opened before the new campaign and one
// opened after it both deliver the new leader as Leader() names it.
func TestObserveLeaderAfterSingleVoterRestart(t *testing.T) {
	c := startCluster(t, 1, nil)
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(0)
	l1, err := cl.Campaign(ctx, core.Candidate{ID: "a", Address: "CLIENT://a:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	c.stop(0)
	if err := c.start(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	cl2 := c.client(0)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	early, err := cl2.ObserveLeader(octx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	l2, err := cl2.Campaign(ctx, core.Candidate{ID: "b", Address: "CLIENT://b:1"})
	if err != nil {
		t.Fatalf("campaign after restart: %v", err)
	}
	if l2.Epoch() <= l1.Epoch() {
		t.Fatalf("epoch after restart %d, before %d", l2.Epoch(), l1.Epoch())
	}
	want := waitLeaderInfo(t, cl2, "Leader() after the restart", func(i core.LeaderInfo) bool { return i.ID == "b" })
	if want.Address != "CLIENT://b:1" || want.Epoch != l2.Epoch() {
		t.Fatalf("Leader() after the restart: %+v, want b at epoch %d", want, l2.Epoch())
	}
	got := nextLeader(t, early, "observer opened before the campaign", func(i core.LeaderInfo) bool { return i.ID == "b" })
	if got != want {
		t.Fatalf("observer opened before the campaign: %+v, Leader() says %+v", got, want)
	}
	late, err := cl2.ObserveLeader(octx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	got = nextLeader(t, late, "observer opened after the campaign", func(core.LeaderInfo) bool { return true })
	if got != want {
		t.Fatalf("observer opened after the campaign: %+v, Leader() says %+v", got, want)
	}
}

// TestObserveLeaderAfterOldLeaderRestart: the member whose coordinator led
// stops, another member's candidate takes over, and the old member restarts
// from its directory with a waiting candidate (as a restarted coordinator
// does): its observer delivers the new leader as Leader() names it.
func TestObserveLeaderAfterOldLeaderRestart(t *testing.T) {
	c := startCluster(t, 3, nil)
	lead := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(lead)
	if _, err := cl.Campaign(ctx, core.Candidate{ID: "a", Address: "CLIENT://a:1"}); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	other := (lead + 1) % 3
	co := c.client(other)
	c.stop(lead)
	l2, err := co.Campaign(ctx, core.Candidate{ID: "b", Address: "CLIENT://b:1"})
	if err != nil {
		t.Fatalf("campaign after the leader stopped: %v", err)
	}
	if err := c.start(lead); err != nil {
		t.Fatalf("restart member %d: %v", lead+1, err)
	}
	cr := c.client(lead)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := cr.ObserveLeader(octx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	go cr.Campaign(octx, core.Candidate{ID: "a", Address: "CLIENT://a:1"})
	want := waitLeaderInfo(t, cr, "Leader() on the restarted member", func(i core.LeaderInfo) bool { return i.ID == "b" })
	if want.Epoch != l2.Epoch() {
		t.Fatalf("Leader() on the restarted member: %+v, want b at epoch %d", want, l2.Epoch())
	}
	got := nextLeader(t, ch, "delivery on the restarted member", func(core.LeaderInfo) bool { return true })
	if got != want {
		t.Fatalf("delivery on the restarted member: %+v, Leader() says %+v", got, want)
	}
}

// TestProcessObserveLeaderAfterKillRestart: the HA sequence with real
// plugin processes. The leader's process is frozen, another voter's
// candidate takes over, the old process is thawed, killed and restarted on
// its directory; a client of the restarted voter observes the new leader
// as Leader() names it, while its own candidate waits.
func TestProcessObserveLeaderAfterKillRestart(t *testing.T) {
	v := startProcs(t, 3)
	clients := []core.MetadataBackend{v.client(0), v.client(1), v.client(2)}
	ctx := testutil.Context(t, 20*time.Second)
	var old int
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { old = v.leader(clients); return old >= 0 })
	if _, err := clients[old].Campaign(ctx, core.Candidate{ID: "old", Address: "CLIENT://old:1"}); err != nil {
		t.Fatalf("campaign on the leader: %v", err)
	}
	v.signal(old, syscall.SIGSTOP)
	others := []core.MetadataBackend{nil, nil, nil}
	for i := range clients {
		if i != old {
			others[i] = clients[i]
		}
	}
	var nl int
	testutil.WaitFor(t, 20*time.Second, "a new leader in the majority", func() bool { nl = v.leader(others); return nl >= 0 })
	l2, err := others[nl].Campaign(ctx, core.Candidate{ID: "new", Address: "CLIENT://new:1"})
	if err != nil {
		t.Fatalf("campaign on the new leader: %v", err)
	}
	v.signal(old, syscall.SIGCONT)
	// The thawed voter catches up (it applies the new leader record) before
	// it is killed, as in the coordinator's HA sequence.
	testutil.WaitFor(t, 20*time.Second, "the thawed voter to know the new leader", func() bool {
		lctx, lcancel := context.WithTimeout(ctx, time.Second)
		defer lcancel()
		li, err := clients[old].Leader(lctx)
		return err == nil && li.ID == "new"
	})
	pid := v.signal(old, syscall.SIGKILL)
	v.waitRestarted(old, pid)
	cr := v.client(old)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := cr.ObserveLeader(octx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	go cr.Campaign(octx, core.Candidate{ID: "old", Address: "CLIENT://old:1"})
	got := nextLeader(t, ch, "delivery on the restarted voter", func(core.LeaderInfo) bool { return true })
	// Every linearizable read on the restarted voter answers (a ReadIndex
	// request lost while its connections come up is retried, not waited
	// out until the proposal timeout).
	for i := 0; i < 20; i++ {
		want, err := cr.Leader(ctx)
		if err != nil || got != want || want.ID != "new" || want.Epoch != l2.Epoch() {
			t.Fatalf("delivery on the restarted voter: %+v; Leader() (call %d) says %+v, %v; want new at epoch %d", got, i, want, err, l2.Epoch())
		}
	}
}

// TestObserveLeaderAfterSnapshotCatchUp: a follower is down while a new
// coordinator leader is elected and the log moves far past its position
// (compacted behind snapshots); restarted from its directory, it catches up
// from a snapshot, and its observer delivers the leader Leader() names,
// then the next change.
func TestObserveLeaderAfterSnapshotCatchUp(t *testing.T) {
	c := startCluster(t, 3, func(i int, o *Options) { o.SnapshotThreshold = 20 })
	lead := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(lead)
	f := (lead + 1) % 3
	c.stop(f)
	l1, err := cl.Campaign(ctx, core.Candidate{ID: "a", Address: "CLIENT://a:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	for i := 0; i < 120; i++ {
		if _, _, err := core.Create(ctx, cl, fmt.Sprintf("/fill/%03d", i), nil, core.CreateOptions{MakeParents: true, Fence: l1.Fence()}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := c.start(f); err != nil {
		t.Fatalf("restart member %d: %v", f+1, err)
	}
	cf := c.client(f)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := cf.ObserveLeader(octx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	got := nextLeader(t, ch, "first delivery on the member caught up by snapshot", func(core.LeaderInfo) bool { return true })
	want := waitLeaderInfo(t, cf, "Leader() on the member caught up by snapshot", func(i core.LeaderInfo) bool { return i.ID == "a" })
	if got != want || want.Epoch != l1.Epoch() {
		t.Fatalf("first delivery on the member caught up by snapshot: %+v, Leader() says %+v (epoch %d)", got, want, l1.Epoch())
	}
	if err := l1.Resign(ctx); err != nil {
		t.Fatalf("resign: %v", err)
	}
	l2, err := cl.Campaign(ctx, core.Candidate{ID: "b", Address: "CLIENT://b:1"})
	if err != nil {
		t.Fatalf("campaign after resign: %v", err)
	}
	got = nextLeader(t, ch, "the change on the member caught up by snapshot", func(i core.LeaderInfo) bool { return i.ID == "b" })
	if got.Epoch != l2.Epoch() {
		t.Fatalf("change on the member caught up by snapshot: %+v, want epoch %d", got, l2.Epoch())
	}
}
