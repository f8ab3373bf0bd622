package raft

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestDiskFullPausesAndResumes: the leader's disk drops below
// coordinator.raft.disk.min-free (an injected measurement); it hands the
// leadership over and pauses, its writes are refused naming the condition,
// the other two voters keep serving, and once space is back it resumes and
// catches up by itself.
func TestDiskFullPausesAndResumes(t *testing.T) {
	const reserve = 64 << 20
	var free [3]atomic.Uint64
	for i := range free {
		free[i].Store(1 << 40)
	}
	c := startCluster(t, 3, func(i int, o *Options) {
		o.DiskMinFree = reserve
		o.diskFree = func(string) (uint64, error) { return free[i].Load(), nil }
	})
	l := c.waitLeader()
	full := c.client(l)
	ctx := ctxT(t)
	if _, _, err := core.Create(ctx, full, "/before", []byte("1"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	free[l].Store(1 << 20)
	var nl int
	testutil.WaitFor(t, 20*time.Second, "another voter leading", func() bool {
		nl = c.leader()
		return nl >= 0 && nl != l
	})
	testutil.WaitFor(t, 10*time.Second, "the full member's status naming the condition", func() bool {
		st, err := c.members[l].Status()
		return err == nil && strings.Contains(st.Details["diskFull"], "coordinator.raft.dir") && st.Role != core.RoleLeader
	})
	_, _, err := core.Create(ctx, full, "/refused", nil, core.CreateOptions{})
	if !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "disk full on voter") {
		t.Fatalf("write on the full member: %v, want unavailable naming the full disk", err)
	}
	other := c.client(nl)
	for _, p := range []string{"/during-1", "/during-2"} {
		if _, _, err := core.Create(ctx, other, p, []byte("x"), core.CreateOptions{}); err != nil {
			t.Fatalf("the remaining quorum refused %s: %v", p, err)
		}
	}
	if _, err := core.Get(ctx, other, "/refused"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the refused write exists: %v", err)
	}

	free[l].Store(1 << 40)
	testutil.WaitFor(t, 20*time.Second, "the full member resumed and caught up", func() bool {
		st, err := c.members[l].Status()
		if err != nil || st.Details["diskFull"] != "" {
			return false
		}
		lst, err := c.members[nl].Status()
		return err == nil && st.AppliedIndex >= lst.AppliedIndex && st.LeaderID != ""
	})
	testutil.WaitFor(t, 20*time.Second, "the resumed member serving a linearizable read", func() bool {
		n, err := core.Get(ctx, full, "/during-2")
		return err == nil && string(n.Data) == "x"
	})
}

// TestDiskFullAtStart: a new single-voter cluster whose disk is below the
// reserve when it starts starts with its replica paused (Start returns,
// the status names the condition) and bootstraps by itself once space is
// back.
func TestDiskFullAtStart(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 20)
	o := testOptions(t.TempDir(), 1, newVoters(t, 1))
	o.DiskMinFree = 64 << 20
	o.diskFree = func(string) (uint64, error) { return free.Load(), nil }
	p := NewProvider(o)
	if err := p.Start(ctxT(t), nil); err != nil {
		t.Fatalf("start on a full disk: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	st, err := p.Status()
	if err != nil || !strings.Contains(st.Details["diskFull"], "disk full on voter 1") || st.Role == core.RoleLeader {
		t.Fatalf("status on a full disk: %+v, %v", st, err)
	}
	free.Store(1 << 40)
	testutil.WaitFor(t, 20*time.Second, "the voter bootstrapped and leading", func() bool {
		st, err := p.Status()
		return err == nil && st.Role == core.RoleLeader && st.Details["diskFull"] == ""
	})
	c := &cluster{t: t, members: []*Provider{p}}
	cl := c.client(0)
	if _, _, err := core.Create(ctxT(t), cl, "/after", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
