package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/backends/raft/catchup"

	"github.com/lni/dragonboat/v4"

	"github.com/metaplane/metaplane/core"
)

// DefaultCatchUpTimeout bounds AddVoter's wait for the new member to catch
// up when ctx has no deadline.
const DefaultCatchUpTimeout = 60 * time.Second

func parseReplicaID(id string) (uint64, error) {
	rid, err := strconv.ParseUint(id, 10, 64)
	if err != nil || rid == 0 {
		return 0, fmt.Errorf("%w: member id %q: want a positive integer", core.ErrInvalidArgument, id)
	}
	return rid, nil
}

// AddVoter, on the Raft leader, adds the member id (its replica id in
// decimal) at address (its Raft host:port) as non-voting (Dragonboat's
// SyncRequestAddNonVoting), waits until it has caught up (a progress
// report, made with its coordinator's session renewals, at most
// catchup.MaxTransferLag entries behind, made after it was added), then promotes it
// to voter (SyncRequestAddReplica). The wait ends
// core.MembershipChangeReserve before ctx's deadline (after
// DefaultCatchUpTimeout when ctx has none); a member that does not
// catch up in time is removed again, so the voter set is unchanged. The new
// member must be started with coordinator.raft.join=true. Errors:
// ErrNotLeader, ErrInvalidArgument (a bad id, an id or address already in
// the membership or removed before, a member that did not catch up),
// ErrUnavailable (a membership change that did not commit; or the removal
// of a member that did not catch up failed, leaving it non-voting),
// ErrClosed.
func (c *Client) AddVoter(ctx context.Context, id string, address string) error {
	if err := c.check(); err != nil {
		return err
	}
	m := c.m
	rid, err := parseReplicaID(id)
	if err != nil {
		return err
	}
	if address == "" {
		return fmt.Errorf("%w: member %s: no Raft address", core.ErrInvalidArgument, id)
	}
	if !m.isLeader() {
		return m.notLeader()
	}
	st := m.status(ctx)
	for _, ms := range st.Members {
		if ms.ID == id {
			return fmt.Errorf("%w: member %s is in the membership already (%s at %s)", core.ErrInvalidArgument, id, ms.Kind, ms.Address)
		}
		if ms.Address == address {
			return fmt.Errorf("%w: address %s is member %s's (%s)", core.ErrInvalidArgument, address, ms.ID, ms.Kind)
		}
	}
	// The catch-up wait ends MembershipChangeReserve before ctx's
	// deadline (see core.MembershipChangeReserve), leaving the rest for
	// the promotion or the removal.
	waitUntil := time.Now().Add(DefaultCatchUpTimeout)
	if dl, ok := ctx.Deadline(); ok {
		reserve := core.MembershipChangeReserve
		if left := time.Until(dl); left < 2*reserve {
			reserve = left / 2
		}
		waitUntil = dl.Add(-reserve)
	}
	waitCtx, cancelWait := context.WithDeadline(ctx, waitUntil)
	defer cancelWait()
	added := time.Now()
	if err := m.changeMembership(ctx, "add non-voting member", func(cctx context.Context) error {
		return m.nh.SyncRequestAddNonVoting(cctx, shardID, rid, address, 0)
	}); err != nil {
		return err
	}
	m.opts.Logf("raft: member %d at %s added as non-voting; waiting for it to catch up", rid, address)
	// Wait for a fresh progress report of the new member at most
	// catchup.MaxTransferLag entries behind.
	var last *followerProgress
	for {
		m.mu.Lock()
		p, ok := m.progress[rid]
		closed, ch := m.closed, m.applyC
		m.mu.Unlock()
		if closed {
			return errClosed
		}
		if ok && p.at.After(added) {
			last = &p
			if p.lag <= catchup.MaxTransferLag {
				break
			}
		}
		select {
		case <-ch:
			continue
		case <-waitCtx.Done():
		}
		// Not caught up in time: take it out again.
		why := "it never reported its progress (is its coordinator running with coordinator.raft.join=true and this id, and did it get this cluster's id? a joining coordinator learns it from coordinator.seed.nodes or takes coordinator.raft.cluster-id, and otherwise derives it from coordinator.raft.voters without itself, which must then be the voters the cluster was bootstrapped with)"
		if last != nil {
			why = fmt.Sprintf("it was %d entries behind at its last report (at most %d)", last.lag, catchup.MaxTransferLag)
		}
		rctx, cancel := context.WithTimeout(context.Background(), m.opts.ProposalTimeout)
		defer cancel()
		if err := m.changeMembership(rctx, "remove the member that did not catch up", func(cctx context.Context) error {
			return m.nh.SyncRequestDeleteReplica(cctx, shardID, rid, 0)
		}); err != nil {
			return fmt.Errorf("%w: raft: member %s did not catch up in time (%s), and removing it again failed: %v; it may remain non-voting (never a voter): remove it with remove-voter",
				core.ErrUnavailable, id, why, err)
		}
		return fmt.Errorf("%w: member %s did not catch up in time: %s; it was removed again, the voter set is unchanged (a removed id cannot be reused)",
			core.ErrInvalidArgument, id, why)
	}
	m.opts.Logf("raft: member %d caught up (lag %d); promoting it to voter", rid, last.lag)
	return m.changeMembership(ctx, "promote to voter", func(cctx context.Context) error {
		return m.nh.SyncRequestAddReplica(cctx, shardID, rid, address, 0)
	})
}

// changeMembership runs one membership change, bounded by the proposal
// timeout and ctx, mapping Dragonboat's refusal to ErrInvalidArgument.
func (m *member) changeMembership(ctx context.Context, op string, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, m.opts.ProposalTimeout)
	defer cancel()
	err := fn(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dragonboat.ErrRejected):
		return fmt.Errorf("%w: raft: %s: refused by Raft (an id that was removed before cannot be reused, nor an address in use)", core.ErrInvalidArgument, op)
	case errors.Is(err, dragonboat.ErrInvalidOperation), errors.Is(err, dragonboat.ErrInvalidAddress):
		return fmt.Errorf("%w: raft: %s: %v", core.ErrInvalidArgument, op, err)
	}
	return m.mapErr(ctx, op, err)
}

// RemoveVoter, on the Raft leader, removes the member id (a voter, a
// non-voting member or a witness). It refuses, changing nothing: an id not
// in the membership, the last voter, the leader itself (transfer the
// leadership first), removing a voter when the remaining voters (and
// witnesses) would not hold a majority of members reachable from the
// leader, and removing a voter when they would not hold a majority of
// caught-up members (the leader, and members reachable with a recent
// progress report at most catchup.MaxRemovalLag entries behind; ForceRemoveVoter
// waives this last check). Errors: ErrNotLeader, ErrInvalidArgument,
// ErrUnavailable, ErrClosed.
func (c *Client) RemoveVoter(ctx context.Context, id string) error {
	return c.removeVoter(ctx, id, false)
}

var _ core.ForceRemover = (*Client)(nil)

// ForceRemoveVoter is RemoveVoter without the caught-up majority check,
// for a member that is gone for good while the others are behind. See
// core.ForceRemover.
func (c *Client) ForceRemoveVoter(ctx context.Context, id string) error {
	return c.removeVoter(ctx, id, true)
}

func (c *Client) removeVoter(ctx context.Context, id string, force bool) error {
	if err := c.check(); err != nil {
		return err
	}
	m := c.m
	rid, err := parseReplicaID(id)
	if err != nil {
		return err
	}
	if !m.isLeader() {
		return m.notLeader()
	}
	st := m.status(ctx)
	var target *core.MemberStatus
	quorumMembers := 0
	for i, ms := range st.Members {
		if ms.ID == id {
			target = &st.Members[i]
		}
		if ms.Kind == core.MemberVoter || ms.Kind == core.MemberWitness {
			quorumMembers++
		}
	}
	if target == nil {
		return fmt.Errorf("%w: member %s is not in the membership", core.ErrInvalidArgument, id)
	}
	if target.Kind != core.MemberNonVoting {
		if target.Kind == core.MemberVoter && quorumMembers == 1 {
			return fmt.Errorf("%w: member %s is the last voter: removing it would leave no quorum", core.ErrInvalidArgument, id)
		}
		if id == st.MemberID {
			return fmt.Errorf("%w: member %s is the leader: transfer the leadership first (remove-voter --transfer does)", core.ErrInvalidArgument, id)
		}
		remaining, reachable, caughtUp := 0, 0, 0
		var behind []string
		for _, ms := range st.Members {
			if ms.ID == id || (ms.Kind != core.MemberVoter && ms.Kind != core.MemberWitness) {
				continue
			}
			remaining++
			if ms.Reachable {
				reachable++
			}
			// A witness has no state machine to be behind in.
			switch {
			case ms.ID == st.MemberID || (ms.Reachable && (ms.Kind == core.MemberWitness || (ms.MatchIndex > 0 && ms.Lag <= catchup.MaxRemovalLag))):
				caughtUp++
			case !ms.Reachable:
				behind = append(behind, ms.ID+" (unreachable)")
			case ms.MatchIndex == 0:
				behind = append(behind, ms.ID+" (no recent progress report)")
			default:
				behind = append(behind, fmt.Sprintf("%s (%d entries behind)", ms.ID, ms.Lag))
			}
		}
		need := remaining/2 + 1
		if reachable < need {
			return fmt.Errorf("%w: removing member %s would leave %d voters of which %d are reachable from the leader, fewer than the %d a quorum needs",
				core.ErrInvalidArgument, id, remaining, reachable, need)
		}
		if caughtUp < need && !force {
			return fmt.Errorf("%w: removing member %s would leave %d voters of which %d are caught up (the leader, and members with a recent progress report at most %d entries behind; not caught up: %s), fewer than the %d a quorum needs to go on committing at once: wait until they catch up, or, if member %s is gone for good, remove it with --force",
				core.ErrInvalidArgument, id, remaining, caughtUp, catchup.MaxRemovalLag, strings.Join(behind, ", "), need, id)
		}
	}
	if err := m.changeMembership(ctx, "remove member", func(cctx context.Context) error {
		return m.nh.SyncRequestDeleteReplica(cctx, shardID, rid, 0)
	}); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.progress, rid)
	m.mu.Unlock()
	return nil
}

// nonVotingFile, in coordinator.raft.dir, marks a member that joined as
// non-voting and has not yet seen its promotion to voter: it restarts
// non-voting while the file exists.
const nonVotingFile = "non-voting"

// nonVoting reports whether this member joined and has not yet seen its
// promotion (its nonVotingFile exists).
func (m *member) nonVoting() bool {
	_, err := os.Stat(filepath.Join(m.opts.Dir, nonVotingFile))
	return err == nil
}

func writeFileSync(p string, b []byte) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// awaitPromotion, on a member started non-voting, removes the marker once
// this member's latest snapshot records it as a voter, so that its next
// start is a voter's. Until then a restart must start non-voting: the Raft
// log after that snapshot replays this member's addition as non-voting
// (which Dragonboat accepts only on a non-voting replica) before its
// promotion. Once the membership lists it as a voter, it takes a snapshot
// of its own to get there sooner.
func (m *member) awaitPromotion(marker string) {
	defer m.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	requested := false
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if lr, err := m.nh.GetLogReader(shardID); err == nil {
			if ss := lr.Snapshot(); ss.Index > 0 {
				if _, ok := ss.Membership.Addresses[m.replicaID]; ok {
					if err := os.Remove(marker); err == nil || errors.Is(err, os.ErrNotExist) {
						m.opts.Logf("raft: member %d is a voter", m.replicaID)
						return
					}
				}
			}
		}
		if requested {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.ElectionTimeout)
		ms, err := m.nh.SyncGetShardMembership(ctx, shardID)
		cancel()
		if err != nil {
			continue
		}
		if _, ok := ms.Nodes[m.replicaID]; ok {
			ctx, cancel := context.WithTimeout(context.Background(), m.opts.ProposalTimeout)
			_, err := m.nh.SyncRequestSnapshot(ctx, shardID, dragonboat.SnapshotOption{})
			cancel()
			requested = err == nil
		}
	}
}
