package raft

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/backends/raft/catchup"

	"github.com/metaplane/metaplane/core"
)

var _ core.LeadershipTransferer = (*Client)(nil)

// TransferLeadership, on the Raft leader, hands the leadership to the voter
// to (its replica id in decimal; empty: the most caught-up other voter,
// the smallest lag, then the highest reported index, then the lowest id)
// and waits, bounded by ctx, until that voter is Raft leader. A target
// must be a voter other than this one, reachable, with a recent progress
// report at most catchup.MaxTransferLag entries behind. Errors: ErrNotLeader,
// ErrInvalidArgument, ErrUnavailable (the leadership did not move before
// ctx ended; it may still move), ErrClosed.
func (c *Client) TransferLeadership(ctx context.Context, to string) (core.LeadershipTransfer, error) {
	if err := c.check(); err != nil {
		return core.LeadershipTransfer{}, err
	}
	m := c.m
	if !m.isLeader() {
		return core.LeadershipTransfer{}, m.notLeader()
	}
	st := m.status(ctx)
	caughtUp := func(ms core.MemberStatus) error {
		switch {
		case !ms.Reachable:
			return fmt.Errorf("%w: member %s is not reachable from the leader", core.ErrInvalidArgument, ms.ID)
		case ms.MatchIndex == 0:
			return fmt.Errorf("%w: member %s has not reported its progress recently; it may not be caught up", core.ErrInvalidArgument, ms.ID)
		case ms.Lag > catchup.MaxTransferLag:
			return fmt.Errorf("%w: member %s is %d entries behind (at most %d for a transfer)", core.ErrInvalidArgument, ms.ID, ms.Lag, catchup.MaxTransferLag)
		}
		return nil
	}
	var target *core.MemberStatus
	if to != "" {
		for i := range st.Members {
			if st.Members[i].ID == to {
				target = &st.Members[i]
			}
		}
		switch {
		case target == nil:
			return core.LeadershipTransfer{}, fmt.Errorf("%w: member %s is not in the membership", core.ErrInvalidArgument, to)
		case target.Kind != core.MemberVoter:
			return core.LeadershipTransfer{}, fmt.Errorf("%w: member %s is %s, not a voter", core.ErrInvalidArgument, to, target.Kind)
		case to == st.MemberID:
			return core.LeadershipTransfer{}, fmt.Errorf("%w: member %s leads already", core.ErrInvalidArgument, to)
		}
		if err := caughtUp(*target); err != nil {
			return core.LeadershipTransfer{}, err
		}
	} else {
		var cands []core.MemberStatus
		for _, ms := range st.Members {
			if ms.ID != st.MemberID && ms.Kind == core.MemberVoter && caughtUp(ms) == nil {
				cands = append(cands, ms)
			}
		}
		if len(cands) == 0 {
			return core.LeadershipTransfer{}, fmt.Errorf("%w: no other voter is reachable and caught up", core.ErrInvalidArgument)
		}
		sort.Slice(cands, func(i, j int) bool {
			a, b := cands[i], cands[j]
			if a.Lag != b.Lag {
				return a.Lag < b.Lag
			}
			if a.MatchIndex != b.MatchIndex {
				return a.MatchIndex > b.MatchIndex
			}
			x, _ := strconv.ParseUint(a.ID, 10, 64)
			y, _ := strconv.ParseUint(b.ID, 10, 64)
			return x < y
		})
		target = &cands[0]
	}
	rid, err := strconv.ParseUint(target.ID, 10, 64)
	if err != nil {
		return core.LeadershipTransfer{}, fmt.Errorf("%w: member id %q", core.ErrInvalidArgument, target.ID)
	}
	// Raft abandons a transfer that does not complete within an election
	// timeout (the target was slow to catch up, or its campaign was lost):
	// ask again while this member still leads, until ctx ends.
	retry := time.NewTicker(2 * m.opts.ElectionTimeout)
	defer retry.Stop()
	request := true
	for {
		m.mu.Lock()
		leader, term, closed, ch := m.raftLeader, m.raftTerm, m.closed, m.changeC
		m.mu.Unlock()
		if closed {
			return core.LeadershipTransfer{}, errClosed
		}
		if leader == rid {
			return core.LeadershipTransfer{MemberID: target.ID, Term: int64(term)}, nil
		}
		if request && leader == m.replicaID {
			if err := m.nh.RequestLeaderTransfer(shardID, rid); err != nil {
				return core.LeadershipTransfer{}, m.mapErr(ctx, "transfer leadership", err)
			}
		}
		request = false
		select {
		case <-ch:
		case <-retry.C:
			request = true
		case <-ctx.Done():
			return core.LeadershipTransfer{}, fmt.Errorf("%w: raft: leadership did not move to member %s before the call ended (it may still move): %v",
				core.ErrUnavailable, target.ID, ctx.Err())
		}
	}
}
