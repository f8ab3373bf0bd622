package zookeeper

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

func cand(id string) core.Candidate {
	return core.Candidate{ID: id, Address: "CLIENT://127.0.0.1:" + map[string]string{"a": "9001", "b": "9002", "c": "9003"}[id]}
}

type campaignResult struct {
	l   core.Leadership
	err error
}

func campaignAsync(ctx context.Context, b *Backend, c core.Candidate) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := b.Campaign(ctx, c)
		ch <- campaignResult{l, err}
	}()
	return ch
}

func waitElected(t *testing.T, ch <-chan campaignResult, within time.Duration) core.Leadership {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("campaign: %v", r.err)
		}
		return r.l
	case <-time.After(within):
		t.Fatalf("not elected within %v", within)
	}
	return nil
}

func waitLost(t *testing.T, l core.Leadership, within time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("leadership not lost within %v after %s", within, what)
	}
}

func notLost(t *testing.T, l core.Leadership, what string) {
	t.Helper()
	select {
	case <-l.Lost():
		t.Fatalf("leadership lost: %s", what)
	default:
	}
}

// watchersOf returns the session ids watching zpath, from the server's
// `wchp` four-letter word.
func watchersOf(t *testing.T, addr, zpath string) []string {
	t.Helper()
	out, err := zktest.FourLetter(addr, "wchp", time.Second)
	if err != nil {
		t.Fatalf("wchp: %v", err)
	}
	var ids []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			in = strings.TrimSpace(line) == zpath
			continue
		}
		if in {
			ids = append(ids, strings.TrimSpace(line))
		}
	}
	return ids
}

// TestElection: the first leader gets epoch 0 at zkVersion 1 from an epoch
// node created as -1; participants hold CoordinatorAddress v2; each
// candidate watches only its predecessor; resign, Close and being
// superseded end a leadership; the next candidate continues the epoch.
func TestElection(t *testing.T) {
	o := testOptions(t)
	a, b, c := open(t, o), open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	la, err := a.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	if la.Epoch() != 0 || la.Fence() != (core.Fence{Epoch: 0, Token: 1, Valid: true}) {
		t.Fatalf("first leader: epoch %d fence %+v; want epoch 0, token 1", la.Epoch(), la.Fence())
	}
	en, _ := core.Get(ctx, a, epochPath)
	if string(en.Data) != "0" || en.Stat.Version != 1 {
		t.Fatalf("epoch node %q at version %d; want \"0\" at 1", en.Data, en.Stat.Version)
	}
	names, _, err := a.Children(ctx, electionPath, core.ReadOptions{})
	if err != nil || len(names) != 1 {
		t.Fatalf("participants: %v %v", names, err)
	}
	pn, _ := core.Get(ctx, a, electionPath+"/"+names[0])
	if string(pn.Data) != `{"version":2,"id":"a","listeners":"CLIENT://127.0.0.1:9001"}` || pn.Stat.EphemeralOwner != a.Session().ID {
		t.Fatalf("participant %s: %s owner %x", names[0], pn.Data, pn.Stat.EphemeralOwner)
	}
	li, err := b.Leader(ctx)
	if err != nil || li != (core.LeaderInfo{ID: "a", Address: "CLIENT://127.0.0.1:9001", Epoch: 0}) {
		t.Fatalf("Leader: %+v %v", li, err)
	}
	obs, err := c.ObserveLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-obs; got.ID != "a" {
		t.Fatalf("observed %+v, want a", got)
	}

	chB := campaignAsync(ctx, b, cand("b"))
	testWaitChildren(t, a, electionPath, 2)
	chC := campaignAsync(ctx, c, cand("c"))
	names = testWaitChildren(t, a, electionPath, 3)
	sortBySeq(names)
	// No herd: each participant is watched by its successor only.
	addr := o.Address
	owners := []*Backend{a, b}
	for i, succ := range []*Backend{b, c} {
		zp := a.zpath(electionPath + "/" + names[i])
		want, self := hexID(succ.Session().ID), hexID(owners[i].Session().ID)
		testWaitFor(t, "predecessor watch on "+names[i], func() bool {
			var others []string
			for _, w := range watchersOf(t, addr, zp) {
				if w != self { // a leader watches its own participant
					others = append(others, w)
				}
			}
			return len(others) == 1 && others[0] == want
		})
	}
	if w := watchersOf(t, addr, a.zpath(electionPath)); len(w) != 0 {
		t.Fatalf("the election parent is watched by %v (herd)", w)
	}

	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitLost(t, la, time.Second, "resign")
	lb := waitElected(t, chB, 10*time.Second)
	if lb.Epoch() != 1 || lb.Fence().Token != 2 {
		t.Fatalf("second leader: epoch %d fence %+v", lb.Epoch(), lb.Fence())
	}
	if got := <-obs; got.ID != "b" || got.Epoch != 1 {
		t.Fatalf("observed %+v, want b at epoch 1", got)
	}
	if _, _, err := core.Create(ctx, a, "/x", nil, core.CreateOptions{Fence: la.Fence()}); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("write with a resigned fence: %v, want ErrFenced", err)
	}
	select {
	case r := <-chC:
		t.Fatalf("c elected while b leads: %+v", r)
	default:
	}
	b.Close()
	waitLost(t, lb, time.Second, "Close")
	lc := waitElected(t, chC, 10*time.Second)
	if lc.Epoch() != 2 {
		t.Fatalf("third leader epoch %d", lc.Epoch())
	}
	// Superseded: someone else bumps the epoch node.
	notLost(t, lc, "nothing happened yet")
	if _, err := core.Set(ctx, a, epochPath, []byte("3"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	waitLost(t, lc, 5*time.Second, "the epoch moved on")
	// A superseded leader steps aside: its participant goes, so it cannot
	// block the next election.
	testWaitChildren(t, a, electionPath, 0)
	if _, err := a.Leader(ctx); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("leader after the superseded one stepped aside: %v", err)
	}
}

func hexID(id int64) string { return "0x" + strconv.FormatUint(uint64(id), 16) }

func testWaitChildren(t *testing.T, b *Backend, path string, n int) []string {
	t.Helper()
	var names []string
	testWaitFor(t, "children of "+path, func() bool {
		var err error
		names, _, err = b.Children(context.Background(), path, core.ReadOptions{})
		return err == nil && len(names) == n
	})
	return names
}

func testWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCampaignCancelWithdraws: a cancelled campaign removes its
// participant.
func TestCampaignCancelWithdraws(t *testing.T) {
	o := testOptions(t)
	a, b := open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	la, err := a.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Resign(ctx)
	cctx, cancel := context.WithCancel(ctx)
	ch := campaignAsync(cctx, b, cand("b"))
	testWaitChildren(t, a, electionPath, 2)
	cancel()
	r := <-ch
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled campaign: %v", r.err)
	}
	testWaitChildren(t, a, electionPath, 1)
}

// TestLeaderElectedNotRegistered: zero-length /coordinators/active (the
// original's "elected, not yet registered") is completed from the lowest
// participant; version 1 addresses are read too.
func TestLeaderElectedNotRegistered(t *testing.T) {
	b := open(t, testOptions(t))
	ctx := testutil.Context(t, 30*time.Second)
	mk := func(p string, data string, mode core.CreateMode) {
		t.Helper()
		if _, _, err := core.Create(ctx, b, p, []byte(data), core.CreateOptions{Mode: mode, MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	mk("/coordinators/epoch", "3", core.Persistent)
	mk("/coordinators/election/_c_1-latch-0000000007", `{"version":1,"id":"old","host":"localhost","port":1001}`, core.Ephemeral)
	mk("/coordinators/election/_c_2-latch-0000000009", `{"version":2,"id":"next","listeners":"CLIENT://h:1"}`, core.Ephemeral)
	mk("/coordinators/active", "", core.Ephemeral)
	li, err := b.Leader(ctx)
	if err != nil || li != (core.LeaderInfo{ID: "old", Address: "localhost:1001", Epoch: 3}) {
		t.Fatalf("Leader: %+v %v", li, err)
	}
	if err := core.Delete(ctx, b, "/coordinators/active", core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Leader(ctx); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Leader without an active node: %v", err)
	}
}

// TestLeaderActiveDeleted: deleting /coordinators/active under a leader
// (its fenced writes can no longer pass) ends the leadership.
func TestLeaderActiveDeleted(t *testing.T) {
	o := testOptions(t)
	a, op := open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	l, err := a.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	notLost(t, l, "just elected")
	if err := core.Delete(ctx, op, activePath, core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l, 5*time.Second, "the active node was deleted")
	if _, _, err := core.Create(ctx, a, "/x", nil, core.CreateOptions{Fence: l.Fence()}); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("fenced write without an active node: %v", err)
	}
	testWaitChildren(t, op, electionPath, 0) // stepped aside
}

// TestLeaderEpochPairsWithActive: an election bumps /coordinators/epoch and
// creates /coordinators/active in one multi, so the epoch node's last
// change is the active node's creation; Leader, a standby's Status and its
// ObserveLeader report the leader with that epoch. An active node beside
// an epoch node that holds no leader's epoch ("-1", as the node is created
// before the first election) is an error, never a leader at epoch -1.
func TestLeaderEpochPairsWithActive(t *testing.T) {
	o := testOptions(t)
	a, b := open(t, o), open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	for round, want := range []int64{0, 1} {
		l, err := a.Campaign(ctx, cand("a"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.GetMany(ctx, []string{activePath, epochPath}, core.ReadOptions{})
		if err != nil || res[0].Err != nil || res[1].Err != nil {
			t.Fatalf("read active and epoch: %v %+v", err, res)
		}
		if res[1].Node.Stat.ModifyRevision != res[0].Node.Stat.CreateRevision {
			t.Fatalf("round %d: epoch changed at zxid %d, active created at %d: not one multi", round, res[1].Node.Stat.ModifyRevision, res[0].Node.Stat.CreateRevision)
		}
		st, err := b.Status(ctx)
		if err != nil || st.Epoch != want || st.LeaderID != "a" || st.LeaderAddress != "CLIENT://127.0.0.1:9001" {
			t.Fatalf("round %d: standby status epoch %d leader %q at %q (%v); want epoch %d, a", round, st.Epoch, st.LeaderID, st.LeaderAddress, err, want)
		}
		octx, cancel := context.WithCancel(ctx)
		obs, err := b.ObserveLeader(octx)
		if err != nil {
			t.Fatal(err)
		}
		if got := <-obs; got.ID != "a" || got.Epoch != want {
			t.Fatalf("round %d: standby observed %+v, want a at epoch %d", round, got, want)
		}
		cancel()
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		waitLost(t, l, 5*time.Second, "resign")
	}

	c := open(t, testOptions(t)) // a tree of its own
	for _, n := range []struct{ p, data string }{{epochPath, "-1"}, {activePath, `{"version":2,"id":"x","listeners":"CLIENT://h:1"}`}} {
		if _, _, err := core.Create(ctx, c, n.p, []byte(n.data), core.CreateOptions{MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	if li, err := c.Leader(ctx); !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), epochPath) {
		t.Fatalf("Leader beside epoch -1: %+v, %v; want ErrUnavailable naming %s", li, err, epochPath)
	}
	if st, err := c.Status(ctx); err != nil || st.LeaderID != "" || !strings.Contains(st.Details["leader_error"], epochPath) {
		t.Fatalf("Status beside epoch -1: leader %q epoch %d details %v, %v", st.LeaderID, st.Epoch, st.Details, err)
	}
}
