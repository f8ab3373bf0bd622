package raft

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestMinorityCannotCommit: with two of three voters down, writes fail
// with ErrUnavailable and leave nothing; after recovery every acknowledged
// write is there.
func TestMinorityCannotCommit(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	survivor := (leader + 1) % 3
	other := (leader + 2) % 3
	cl := c.client(survivor)
	ctx := testutil.Context(t, 20*time.Second)
	var acked []string
	for i := 0; i < 20; i++ {
		p := fmt.Sprintf("/acked-%02d", i)
		if _, _, err := core.Create(ctx, cl, p, []byte(p), core.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
		acked = append(acked, p)
	}
	c.stop(leader)
	c.stop(other)
	start := time.Now()
	_, _, err := core.Create(ctx, cl, "/during-minority", nil, core.CreateOptions{})
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("write with 2 of 3 voters down: got %v, want ErrUnavailable", err)
	}
	t.Logf("minority write refused after %v: %v", time.Since(start), err)
	if _, err := cl.AllocateIDs(ctx, "/ids", 10, core.Fence{}); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("id reservation with 2 of 3 voters down: got %v, want ErrUnavailable", err)
	}
	for _, i := range []int{leader, other} {
		if err := c.start(i); err != nil {
			t.Fatalf("restart member %d: %v", i+1, err)
		}
	}
	c.waitLeader()
	reader := c.client(leader)
	res, err := reader.GetMany(ctx, append(append([]string(nil), acked...), "/during-minority", "/ids"), core.ReadOptions{})
	if err != nil {
		t.Fatalf("read after recovery: %v", err)
	}
	for i, p := range acked {
		if res[i].Err != nil || string(res[i].Node.Data) != p {
			t.Fatalf("acknowledged %s after recovery: %v %q", p, res[i].Err, res[i].Node.Data)
		}
	}
	for _, r := range res[len(acked):] {
		if !errors.Is(r.Err, core.ErrNotFound) {
			t.Fatalf("a write refused during the minority is there: %+v", r)
		}
	}
}

// startProxiedCluster starts three members, each behind a loopback proxy
// in front of its Raft port (the address the others reach it at), so that
// a test can cut one member off from every inbound message.
func startProxiedCluster(t *testing.T) (*cluster, []*proxy) {
	t.Helper()
	return startProxied(t, 3, 0, nil)
}

// startProxied starts n members behind proxies (as startProxiedCluster)
// that delay every message between the members by delay, without waiting
// for a leader.
func startProxied(t testing.TB, n int, delay time.Duration, mutate func(i int, o *Options)) (*cluster, []*proxy) {
	t.Helper()
	voters := newVoters(t, n)
	proxies := make([]*proxy, n)
	listen := make([]string, n)
	for i := range voters {
		listen[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		proxies[i] = newProxy(t, voters[i].Address, listen[i], delay)
	}
	c := launchCluster(t, voters, func(i int, o *Options) {
		o.ListenAddress = listen[i]
		if mutate != nil {
			mutate(i, o)
		}
	})
	return c, proxies
}

// TestPartitionedFollowerNeverReadsStale: a follower cut off from every
// inbound message (so from the leader) while the majority commits a new
// value refuses or blocks a linearizable read (LinearizableFollowerReads)
// rather than answer the old value; after the heal it reads the new one.
// Its stale read (ReadOptions.Stale) does answer the old value, and the
// porcupine register check of TestLinearizableRegister rejects that
// history: the check's negative control, on every run.
func TestPartitionedFollowerNeverReadsStale(t *testing.T) {
	c, proxies := startProxiedCluster(t)
	leader := c.waitLeader()
	follower := (leader + 1) % 3
	ctx := testutil.Context(t, 20*time.Second)
	lc, fc := c.client(leader), c.client(follower)
	if _, _, err := core.Create(ctx, lc, "/k", []byte("old"), core.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	testutil.WaitFor(t, 20*time.Second, "the follower to read the first value", func() bool {
		n, err := core.Get(ctx, fc, "/k")
		return err == nil && string(n.Data) == "old"
	})
	proxies[follower].setCut(true)
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }
	history := []porcupine.Operation{{ClientId: 0, Input: regInput{write: true, value: "old"}, Call: 0, Return: now()}}
	call := now()
	if _, err := core.Set(ctx, lc, "/k", []byte("new"), core.AnyVersion, core.Fence{}); err != nil {
		t.Fatalf("set on the majority: %v", err)
	}
	history = append(history, porcupine.Operation{ClientId: 0, Input: regInput{write: true, value: "new"}, Call: call, Return: now()})
	// The negative control of the linearizability check on a real
	// backend: a stale read (ReadOptions.Stale) of the cut-off follower
	// answers the old value, and the checker must reject the history.
	call = now()
	rs, err := fc.GetMany(ctx, []string{"/k"}, core.ReadOptions{Stale: true})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("stale read on the cut-off follower: %v %v", err, rs)
	}
	history = append(history, porcupine.Operation{ClientId: 1, Input: regInput{}, Output: string(rs[0].Node.Data), Call: call, Return: now()})
	if string(rs[0].Node.Data) != "old" {
		t.Fatalf("the cut-off follower's stale read answered %q, want the old value", rs[0].Node.Data)
	}
	if porcupine.CheckOperations(registerModel, history) {
		t.Fatalf("the linearizability check accepted a stale read after a completed write: %+v", history)
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	n, err := core.Get(rctx, fc, "/k")
	cancel()
	if err == nil {
		t.Fatalf("the cut-off follower answered a linearizable read with %q (version %d), want a refusal or a block", n.Data, n.Stat.Version)
	}
	t.Logf("the cut-off follower's read: %v", err)
	proxies[follower].setCut(false)
	testutil.WaitFor(t, 20*time.Second, "the healed follower to read the new value", func() bool {
		n, err := core.Get(ctx, fc, "/k")
		return err == nil && string(n.Data) == "new"
	})
}

// TestPartitionedLeaderFenced: a leader cut off from every inbound message
// (a loopback proxy in front of its Raft port) loses its leadership, its
// write fails with ErrUnavailable, the majority elects a leader with a
// higher epoch, and after the heal the old leader's fenced writes are
// refused with ErrFenced. (The cut is one-way, so the followers may still
// have received the old leader's entry: its outcome is unknown, as the
// contract says of ErrUnavailable. TestProcessStaleLeaderNeverCommits
// freezes the old leader with SIGSTOP for the stronger property.)
func TestPartitionedLeaderFenced(t *testing.T) {
	c, proxies := startProxiedCluster(t)
	old := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	oldClient := c.client(old)
	others := []*Client{c.client((old + 1) % 3), c.client((old + 2) % 3)}
	l1, err := oldClient.Campaign(ctx, core.Candidate{ID: "old", Address: "CLIENT://old:1"})
	if err != nil {
		t.Fatalf("campaign on the leader: %v", err)
	}
	if _, _, err := core.Create(ctx, oldClient, "/before", nil, core.CreateOptions{Fence: l1.Fence()}); err != nil {
		t.Fatalf("fenced write before the partition: %v", err)
	}

	proxies[old].setCut(true)
	// The partitioned leader's proposal cannot commit.
	_, _, err = core.Create(ctx, oldClient, "/partitioned", nil, core.CreateOptions{Fence: l1.Fence()})
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("write on the partitioned leader: got %v, want ErrUnavailable", err)
	}
	select {
	case <-l1.Lost():
	case <-time.After(10 * time.Second):
		t.Fatalf("the partitioned leader's leadership was not lost")
	}
	// The majority elects a new leader; a candidate there campaigns.
	var l2 core.Leadership
	done := make(chan error, 2)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, o := range others {
		o := o
		go func() {
			l, err := o.Campaign(cctx, core.Candidate{ID: "new", Address: "CLIENT://new:1"})
			if err == nil {
				l2 = l
				cancel()
			}
			done <- err
		}()
	}
	<-done
	<-done
	if l2 == nil {
		t.Fatalf("no new leader in the majority")
	}
	if l2.Epoch() <= l1.Epoch() {
		t.Fatalf("new epoch %d not above old %d", l2.Epoch(), l1.Epoch())
	}
	proxies[old].setCut(false)
	// After the heal the old leader's fenced writes are refused.
	testutil.WaitFor(t, 20*time.Second, "the old leader to rejoin", func() bool {
		_, _, err := core.Create(ctx, oldClient, "/after-heal", nil, core.CreateOptions{Fence: l1.Fence()})
		if err == nil {
			t.Fatalf("a stale leader's fenced write was accepted after the heal")
		}
		return errors.Is(err, core.ErrFenced)
	})
	res, err := others[0].GetMany(ctx, []string{"/before", "/after-heal"}, core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, core.ErrNotFound) {
		t.Fatalf("after the heal: /before %v, /after-heal %v; want present, absent", res[0].Err, res[1].Err)
	}
	if _, _, err := core.Create(ctx, others[0], "/new-leader", nil, core.CreateOptions{Fence: l2.Fence()}); err != nil {
		t.Fatalf("the new leader's fenced write: %v", err)
	}
}

// TestLeaseExpiryFencesTabletServer: a tablet server's lease that is not
// renewed expires by a replicated record that deletes its registration,
// and the server's later renewals and writes under the lease fail.
func TestLeaseExpiryFencesTabletServer(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	coord := c.client(leader)
	follower := c.client((leader + 1) % 3)
	ctx := testutil.Context(t, 20*time.Second)
	l, err := coord.Campaign(ctx, core.Candidate{ID: "coord", Address: "CLIENT://c:1"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := coord.GrantLease(ctx, "tablet-server-1", 1500*time.Millisecond, l.Fence())
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	reg := "/tabletservers/ids/1"
	if _, _, err := core.Create(ctx, coord, reg, []byte(`{"version":4}`), core.CreateOptions{Mode: core.Ephemeral, Lease: id, MakeParents: true, Fence: l.Fence()}); err != nil {
		t.Fatalf("register: %v", err)
	}
	// Heartbeats keep it alive past several ttls.
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		if err := coord.RenewLease(ctx, id); err != nil {
			t.Fatalf("renew: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok, err := core.Exists(ctx, follower, reg); err != nil || !ok {
		t.Fatalf("registration of a heartbeating server: %v %v", ok, err)
	}
	// Silence: the leader fences it.
	testutil.WaitFor(t, 10*time.Second, "the registration to be deleted", func() bool {
		_, ok, err := core.Exists(ctx, follower, reg)
		return err == nil && !ok
	})
	if err := coord.RenewLease(ctx, id); !errors.Is(err, core.ErrSessionExpired) {
		t.Fatalf("renew after expiry: got %v, want ErrSessionExpired", err)
	}
	if _, _, err := core.Create(ctx, coord, reg, nil, core.CreateOptions{Mode: core.Ephemeral, Lease: id}); !errors.Is(err, core.ErrSessionExpired) {
		t.Fatalf("register under the expired lease: got %v, want ErrSessionExpired", err)
	}
}

// TestNewLeaderRestartsLeaseClocks: renewals on the leader are in memory
// only, so followers' clocks for a lease are old; a new leader restarts
// every lease's clock instead of expiring them at once, and expires the
// lease only after a full ttl without renewal.
func TestNewLeaderRestartsLeaseClocks(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	coord := c.client(leader)
	observer := c.client((leader + 1) % 3)
	ttl := 2 * time.Second
	id, err := coord.GrantLease(ctx, "ts-1", ttl, core.Fence{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, coord, "/ts/1", nil, core.CreateOptions{Mode: core.Ephemeral, Lease: id, MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	// Renew in memory on the leader for longer than the ttl: the
	// followers' clocks for the lease run out meanwhile.
	end := time.Now().Add(ttl + 500*time.Millisecond)
	for time.Now().Before(end) {
		if err := coord.RenewLease(ctx, id); err != nil {
			t.Fatalf("renew: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The new leader restarts the clocks when it takes over, which is
	// after the old leader stopped and at or before this test sees it
	// elected: the expiry must come at least a ttl after the stop.
	stopped := time.Now()
	c.stop(leader)
	var nl int
	testutil.WaitFor(t, 10*time.Second, "a new leader", func() bool { nl = c.leader(); return nl >= 0 })
	elected := time.Now()
	// Half a ttl after the election the lease must still be alive.
	time.Sleep(ttl / 2)
	if _, ok, err := core.Exists(ctx, observer, "/ts/1"); err != nil || !ok {
		t.Fatalf("lease expired %v after a new leader took over (exists %v, %v): its clock was not restarted", time.Since(elected), ok, err)
	}
	// Without renewals it expires after its ttl.
	testutil.WaitFor(t, 10*time.Second, "the unrenewed lease to expire", func() bool {
		_, ok, err := core.Exists(ctx, observer, "/ts/1")
		return err == nil && !ok
	})
	if d := time.Since(stopped); d < ttl {
		t.Fatalf("lease expired %v after the old leader stopped, before its ttl %v: the new leader did not restart its clock", d, ttl)
	}
}
