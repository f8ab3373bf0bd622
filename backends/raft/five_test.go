package raft

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestFiveVoters, on a five-voter cluster (tiny LogDB, short ticks):
// removing a follower while the others have not reported their progress is
// refused as leaving no caught-up majority, voter set unchanged, and
// ForceRemoveVoter removes it; once every member reports, the leadership
// moves to a named voter at a higher term, a new member joins (non-voting,
// caught up, promoted) through the new leader, back to five voters, and
// every write made before is on it.
func TestFiveVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a five-voter cluster")
	}
	c := startCluster(t, 5, nil)
	l := c.waitLeader()
	cl := c.client(l)
	// One bound for the whole test, which restarts members several
	// times: generous on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := core.Create(ctx, cl, "/five", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	voterIDs := func(b core.MetadataBackend) string {
		st, err := b.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range st.Members {
			if m.Kind == core.MemberVoter {
				ids = append(ids, m.ID)
			}
		}
		return strings.Join(ids, ",")
	}
	before := voterIDs(cl)
	gone := fmt.Sprint((l+1)%5 + 1)
	err := cl.RemoveVoter(ctx, gone)
	if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "caught up") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("RemoveVoter with no follower caught up: %v, want a refusal naming caught up and --force", err)
	}
	if after := voterIDs(cl); after != before {
		t.Fatalf("a refused removal changed the voters from %s to %s", before, after)
	}
	if err := cl.ForceRemoveVoter(ctx, gone); err != nil {
		t.Fatalf("ForceRemoveVoter: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "four voters", func() bool { return len(strings.Split(voterIDs(cl), ",")) == 4 })
	goneIdx := (l + 1) % 5
	c.stop(goneIdx)

	// Every remaining member reports its progress through a client.
	clients := map[int]*Client{l: cl}
	for i := range c.members {
		if i != l && i != goneIdx {
			clients[i] = c.client(i)
		}
	}
	target := -1
	for i := range c.members {
		if i != l && i != goneIdx {
			target = i
			break
		}
	}
	var res core.LeadershipTransfer
	testutil.WaitFor(t, 20*time.Second, "a transfer to a named voter", func() bool {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err = cl.TransferLeadership(tctx, fmt.Sprint(target+1))
		if err != nil && !strings.Contains(err.Error(), "progress") {
			t.Fatalf("TransferLeadership: %v", err)
		}
		return err == nil
	})
	st0, _ := c.members[l].Status()
	if res.MemberID != fmt.Sprint(target+1) || res.Term < st0.Epoch {
		t.Fatalf("transfer: %+v (old term %d)", res, st0.Epoch)
	}
	if got := c.waitLeader(); got != target {
		t.Fatalf("leader %d after the transfer, want %d", got, target)
	}

	// A sixth member joins through the new leader: five voters again.
	nl := clients[target]
	v6 := Voter{ID: 6, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	o := testOptions(filepath.Join(t.TempDir(), "m6"), 6, append(append([]Voter(nil), c.voters...), v6))
	o.Join = true
	p6 := NewProvider(o)
	added := make(chan error, 1)
	go func() { added <- nl.AddVoter(ctx, "6", v6.Address) }()
	testutil.WaitFor(t, 20*time.Second, "member 6 in the membership", func() bool { return strings.Contains(memberIDs(t, nl), "6") })
	if err := p6.Start(ctx, nil); err != nil {
		t.Fatalf("start member 6: %v", err)
	}
	t.Cleanup(func() { p6.Close() })
	(&cluster{t: t, members: []*Provider{p6}}).client(0)
	if err := <-added; err != nil {
		t.Fatalf("AddVoter 6: %v", err)
	}
	if got := voterIDs(nl); len(strings.Split(got, ",")) != 5 || !strings.Contains(got, "6") {
		t.Fatalf("voters after the join: %s", got)
	}
	v, err := p6.m.nh.StaleRead(shardID, fsm.GetManyQuery{Paths: []string{"/five"}})
	if err != nil || v.(*fsm.GetManyAnswer).Results[0].Err != nil {
		t.Fatalf("member 6 lacks /five: %v", err)
	}
}

func memberIDs(t *testing.T, b core.MetadataBackend) string {
	t.Helper()
	st, err := b.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range st.Members {
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, ",")
}
