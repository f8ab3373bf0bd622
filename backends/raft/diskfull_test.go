package raft

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/metaplane/metaplane/backends/raft/logstore"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// quotas gives each member of a cluster its own quota filesystem, made on
// first use (Bootstrap and Start see the same one).
type quotas struct {
	mu sync.Mutex
	qs map[int]*quotaFS
}

func (q *quotas) mutate(reserve, quota int64) func(i int, o *Options) {
	return func(i int, o *Options) {
		o.DiskMinFree = reserve
		o.storage = q.of(i, o.Dir, quota).storage()
	}
}

func (q *quotas) of(i int, dir string, quota int64) *quotaFS {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qs == nil {
		q.qs = map[int]*quotaFS{}
	}
	if q.qs[i] == nil {
		q.qs[i] = newQuotaFS(dir, quota)
	}
	return q.qs[i]
}

// noENOSPC fails the test if a write of a store hit the quota.
func noENOSPC(t *testing.T, what string, q *quotaFS) {
	t.Helper()
	if r := q.refusals(); len(r) > 0 {
		t.Fatalf("%s: %d writes got ENOSPC from the quota filesystem (the guard paused too late), first %s", what, len(r), r[0])
	}
}

// TestDiskFullPausesAndResumes: every store of each voter (Dragonboat's
// LogDB and snapshots, the state machine's Pebble store) writes through a
// quota filesystem that reports the quota's free space and fails writes
// past it with ENOSPC. The leader's quota is lowered below
// coordinator.raft.disk.min-free: it hands the leadership over and pauses
// before any store write hits ENOSPC, its writes are refused naming the
// condition, the other two voters keep serving; once the quota is raised
// it resumes and catches up by itself, with every write in its own store.
func TestDiskFullPausesAndResumes(t *testing.T) {
	const reserve = 4 << 20
	var qs quotas
	c := startCluster(t, 3, qs.mutate(reserve, 1<<40))
	l := c.waitLeader()
	q := qs.of(l, "", 0)
	full := c.client(l)
	ctx := testutil.Context(t, 20*time.Second)
	if _, _, err := core.Create(ctx, full, "/before", []byte("1"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Half the reserve left: below it, with room for what the member
	// writes until its next check.
	used, _ := q.usage()
	q.setQuota(used + reserve/2)
	var nl int
	testutil.WaitFor(t, 20*time.Second, "another voter leading", func() bool {
		nl = c.leader()
		return nl >= 0 && nl != l
	})
	testutil.WaitFor(t, 10*time.Second, "the full member's status naming the condition", func() bool {
		st, err := c.members[l].Status()
		return err == nil && strings.Contains(st.Details["diskFull"], "coordinator.raft.dir") && st.Role != core.RoleLeader
	})
	// The free space it reports is the quota's as of its last check: below
	// the reserve, and no less than what is left now (it may have written
	// since).
	st, _ := c.members[l].Status()
	used, quota := q.usage()
	if f, err := strconv.ParseInt(st.Details["diskFree"], 10, 64); err != nil || f >= reserve || f < quota-used {
		t.Fatalf("status diskFree %s, want the quota's: below %d, at least %d", st.Details["diskFree"], reserve, quota-used)
	}
	_, _, err := core.Create(ctx, full, "/refused", nil, core.CreateOptions{})
	if !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "disk full on voter") {
		t.Fatalf("write on the full member: %v, want unavailable naming the full disk", err)
	}
	other := c.client(nl)
	var during []string
	for i := 0; i < 20; i++ {
		p := fmt.Sprintf("/during-%02d", i)
		if _, _, err := core.Create(ctx, other, p, []byte(p), core.CreateOptions{}); err != nil {
			t.Fatalf("the remaining quorum refused %s: %v", p, err)
		}
		during = append(during, p)
	}
	if _, err := core.Get(ctx, other, "/refused"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the refused write exists: %v", err)
	}
	noENOSPC(t, "paused member", q)

	q.setQuota(1 << 40)
	testutil.WaitFor(t, 20*time.Second, "the full member resumed and caught up", func() bool {
		st, err := c.members[l].Status()
		if err != nil || st.Details["diskFull"] != "" {
			return false
		}
		lst, err := c.members[nl].Status()
		return err == nil && st.AppliedIndex >= lst.AppliedIndex && st.LeaderID != ""
	})
	// The resumed member's own store (a stale read answers from it) has
	// every write, the one before the pause included.
	want := append([]string{"/before"}, during...)
	res, err := full.GetMany(ctx, want, core.ReadOptions{Stale: true})
	if err != nil {
		t.Fatalf("stale read on the resumed member: %v", err)
	}
	for i, r := range res {
		if r.Err != nil || (i > 0 && string(r.Node.Data) != want[i]) {
			t.Fatalf("resumed member's %s: %+v", want[i], r)
		}
	}
	testutil.WaitFor(t, 20*time.Second, "the resumed member serving a linearizable read", func() bool {
		n, err := core.Get(ctx, full, during[len(during)-1])
		return err == nil && string(n.Data) == during[len(during)-1]
	})
	for i := range c.members {
		qi := qs.of(i, "", 0)
		noENOSPC(t, fmt.Sprintf("member %d", i+1), qi)
		// Both stores wrote through the quota.
		for _, sub := range []string{nodeHostDir, "state"} {
			if !qi.wrote(filepath.Join(c.dirs[i], sub)) {
				t.Fatalf("member %d wrote nothing under %s through its quota filesystem", i+1, sub)
			}
		}
	}
}

// TestDiskFullAtStart: a new single-voter cluster whose quota filesystem
// has less than the reserve free when it starts starts with its replica
// paused (Start returns, the status names the condition) and bootstraps by
// itself once the quota is raised.
func TestDiskFullAtStart(t *testing.T) {
	const reserve = 4 << 20
	dir := t.TempDir()
	q := newQuotaFS(dir, reserve/2)
	o := testOptions(dir, 1, newVoters(t, 1))
	o.DiskMinFree = reserve
	o.storage = q.storage()
	p := NewProvider(o)
	if err := p.Start(testutil.Context(t, 20*time.Second), nil); err != nil {
		t.Fatalf("start on a full disk: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	st, err := p.Status()
	if err != nil || !strings.Contains(st.Details["diskFull"], "disk full on voter 1") || st.Role == core.RoleLeader {
		t.Fatalf("status on a full disk: %+v, %v", st, err)
	}
	q.setQuota(1 << 40)
	testutil.WaitFor(t, 20*time.Second, "the voter bootstrapped and leading", func() bool {
		st, err := p.Status()
		return err == nil && st.Role == core.RoleLeader && st.Details["diskFull"] == ""
	})
	c := &cluster{t: t, members: []*Provider{p}}
	cl := c.client(0)
	if _, _, err := core.Create(testutil.Context(t, 20*time.Second), cl, "/after", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	noENOSPC(t, "voter", q)
	if used, _ := q.usage(); used == 0 {
		t.Fatal("nothing was written through the quota filesystem")
	}
}

// blockingLogDB is a LogDB whose SaveRaftState waits for release.
type blockingLogDB struct {
	raftio.ILogDB
	entered chan struct{}
	release chan struct{}
}

func (b blockingLogDB) SaveRaftState([]pb.Update, uint64) error {
	close(b.entered)
	<-b.release
	return nil
}

// TestLazyCommitWritingSince: a hard-state write in flight is seen, from
// when it began, until it returns.
func TestLazyCommitWritingSince(t *testing.T) {
	b := blockingLogDB{entered: make(chan struct{}), release: make(chan struct{})}
	c := logstore.NewLazyCommit(b)
	if _, ok := c.WritingSince(); ok {
		t.Fatal("a write in flight before any write")
	}
	before := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- c.SaveRaftState([]pb.Update{{ShardID: shardID, ReplicaID: 1, EntriesToSave: []pb.Entry{{Index: 1, Term: 1}}}}, 1)
	}()
	<-b.entered
	began, ok := c.WritingSince()
	if !ok || began.Before(before) || began.After(time.Now()) {
		t.Fatalf("write in flight: %v, %v; want one begun after %v", began, ok, before)
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := c.WritingSince(); ok {
		t.Fatal("a write still in flight after it returned")
	}
}

// TestResumeEndsAStuckLogWrite: a running member's guard asked to resume
// (Dragonboat refuses: the replica is loaded) ends the process only when a
// Raft log write begun before the pause stopped the replica has been in
// flight for stuckWriteAfter; otherwise it logs and waits for the next
// check.
func TestResumeEndsAStuckLogWrite(t *testing.T) {
	dir := t.TempDir()
	p := NewProvider(testOptions(dir, 1, newVoters(t, 1)))
	if err := p.Start(testutil.Context(t, 20*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	testutil.WaitFor(t, 20*time.Second, "the voter leading", func() bool {
		st, err := p.Status()
		return err == nil && st.Role == core.RoleLeader
	})
	m := p.m
	c := m.logdb.Load()
	if c == nil {
		t.Fatal("the member did not keep its LogDB")
	}
	// Hold the LogDB's lock: no real write sets or clears the write in
	// flight meanwhile.
	setWriting, release := c.HoldForTest()
	g := m.disk
	var ended []string
	g.fatal = func(msg string) { ended = append(ended, msg) }
	stoppedAt := time.Now()
	g.mu.Lock()
	g.stopped = stoppedAt
	g.mu.Unlock()
	for _, tc := range []struct {
		name  string
		began time.Time // zero: no write in flight
		ends  bool
	}{
		{"no write in flight", time.Time{}, false},
		{"a write begun after the stop", stoppedAt.Add(time.Millisecond), false},
		{"a write begun before the stop, in flight less than the bound", stoppedAt.Add(-time.Second), false},
		{"a write begun before the stop, in flight past the bound", stoppedAt.Add(-stuckWriteAfter - time.Second), true},
	} {
		ended = nil
		setWriting(tc.began)
		g.resume()
		if got := len(ended) == 1; got != tc.ends {
			t.Fatalf("%s: process ended: %v (%q), want %v", tc.name, got, ended, tc.ends)
		}
		if tc.ends && !strings.Contains(ended[0], "member 1 cannot resume its replica: a Raft log write begun") {
			t.Fatalf("%s: message %q", tc.name, ended[0])
		}
	}
	release()
	if st, err := p.Status(); err != nil || st.Role != core.RoleLeader {
		t.Fatalf("the member after the refused resumes: %+v, %v", st, err)
	}
}
