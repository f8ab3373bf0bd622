package raft

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestTransferLeadership on a three-voter cluster of real NodeHosts: a
// follower refuses (ErrNotLeader); an unknown or leading target and a
// follower that has not reported its progress are refused with
// ErrInvalidArgument and the leader stays; a caught-up voter receives the
// leadership at a higher term; with no target, the most caught-up voter
// does.
func TestTransferLeadership(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(leader)
	follower := (leader + 1) % 3
	if _, err := c.client(follower).TransferLeadership(ctx, ""); !errors.Is(err, core.ErrNotLeader) {
		t.Errorf("on a follower: %v, want ErrNotLeader", err)
	}
	self := strconv.FormatUint(c.members[leader].m.replicaID, 10)
	for _, to := range []string{"9", self} {
		if _, err := cl.TransferLeadership(ctx, to); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("to %s: %v, want ErrInvalidArgument", to, err)
		}
	}
	// The third member has no client: it never reports its progress.
	silent := strconv.FormatUint(c.members[(leader+2)%3].m.replicaID, 10)
	if _, err := cl.TransferLeadership(ctx, silent); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "progress") {
		t.Errorf("to the silent member %s: %v, want ErrInvalidArgument about its progress", silent, err)
	}
	if now := c.leader(); now != leader {
		t.Fatalf("the leadership moved after refused transfers: %d, was %d", now, leader)
	}
	before, _ := cl.Status(ctx)
	target := strconv.FormatUint(c.members[follower].m.replicaID, 10)
	testutil.WaitFor(t, 10*time.Second, "member "+target+"'s progress on the leader", func() bool {
		st, err := cl.Status(ctx)
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == target {
				return m.MatchIndex > 0
			}
		}
		return false
	})
	res, err := cl.TransferLeadership(ctx, target)
	if err != nil {
		t.Fatalf("to %s: %v", target, err)
	}
	if res.MemberID != target || res.Term <= before.Epoch {
		t.Fatalf("transfer: %+v, want member %s above term %d", res, target, before.Epoch)
	}
	if now := c.leader(); now != follower {
		t.Fatalf("leader is member index %d, want %d", now, follower)
	}
	// No target: the old leader (whose client now renews by record) is
	// the only caught-up candidate once it has reported.
	ncl := c.client(follower)
	var res2 core.LeadershipTransfer
	testutil.WaitFor(t, 10*time.Second, "a transfer to the most caught-up voter", func() bool {
		res2, err = ncl.TransferLeadership(ctx, "")
		return err == nil
	})
	if res2.MemberID != self || res2.Term <= res.Term {
		t.Fatalf("transfer without a target: %+v, want member %s above term %d", res2, self, res.Term)
	}
}
