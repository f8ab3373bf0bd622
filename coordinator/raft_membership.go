package coordinator

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// defaultCatchUpTimeout bounds AddRaftVoter's wait for the new member to
// catch up when the request names no bound.
const defaultCatchUpTimeout = 60 * time.Second

// membership is the backend's MembershipManager on the leader, or the
// status to answer with.
func (a *adminService) membership(rpc string) (*leaderState, core.MembershipManager, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, nil, err
	}
	mm, ok := core.Optional[core.MembershipManager](l.b)
	if !ok {
		return nil, nil, status.Errorf(codes.Unimplemented,
			"%s: the %q backend cannot change its membership (it does not declare Membership)", rpc, l.b.Capabilities().Name)
	}
	return l, mm, nil
}

// AddRaftVoter is ADD_RAFT_VOTER (leader only; a standby answers
// NOT_LEADER): the backend adds the member as non-voting, waits until it
// has caught up (bounded by the request's catch-up timeout), then promotes
// it to voter. A member that does not catch up is removed again.
func (a *adminService) AddRaftVoter(ctx context.Context, r *adminv1.AddRaftVoterRequest) (*adminv1.AddRaftVoterResponse, error) {
	l, mm, err := a.membership("AddRaftVoter")
	if err != nil {
		return nil, err
	}
	if r.Id == "" || r.Address == "" {
		return nil, status.Error(codes.InvalidArgument, "AddRaftVoter: id and address are required")
	}
	if r.CatchUpTimeoutMs < 0 {
		return nil, status.Error(codes.InvalidArgument, "AddRaftVoter: catch_up_timeout_ms must not be negative")
	}
	bound := defaultCatchUpTimeout
	if r.CatchUpTimeoutMs > 0 {
		bound = time.Duration(r.CatchUpTimeoutMs) * time.Millisecond
	}
	// The backend stops waiting MembershipChangeReserve before the
	// deadline, keeping that for promoting or removing the member.
	actx, cancel := context.WithTimeout(ctx, bound+core.MembershipChangeReserve)
	defer cancel()
	err = a.s.metrics.timeCall("AddVoter", func() error { return mm.AddVoter(actx, r.Id, r.Address) })
	if err != nil {
		return nil, err
	}
	out := &adminv1.AddRaftVoterResponse{}
	if st, err := l.b.Status(ctx); err == nil {
		for _, m := range st.Members {
			if m.ID == r.Id {
				out.AppliedIndex, out.Lag = m.MatchIndex, m.Lag
			}
		}
	}
	return out, nil
}

// RemoveRaftVoter is REMOVE_RAFT_VOTER (leader only): the backend removes
// the member, refusing the last voter, the leader itself, a removal that
// would leave the remaining voters without a reachable majority, and
// (unless force: core.ForceRemover) one that would leave them without a
// caught-up majority.
func (a *adminService) RemoveRaftVoter(ctx context.Context, r *adminv1.RemoveRaftVoterRequest) (*adminv1.RemoveRaftVoterResponse, error) {
	l, mm, err := a.membership("RemoveRaftVoter")
	if err != nil {
		return nil, err
	}
	if r.Id == "" {
		return nil, status.Error(codes.InvalidArgument, "RemoveRaftVoter: id is required")
	}
	remove := mm.RemoveVoter
	if r.Force {
		fr, ok := core.Optional[core.ForceRemover](l.b)
		if !ok {
			return nil, status.Errorf(codes.Unimplemented,
				"RemoveRaftVoter: the %q backend cannot force a removal (it does not implement ForceRemover)", l.b.Capabilities().Name)
		}
		remove = fr.ForceRemoveVoter
	}
	if err := a.s.metrics.timeCall("RemoveVoter", func() error { return remove(ctx, r.Id) }); err != nil {
		return nil, err
	}
	return &adminv1.RemoveRaftVoterResponse{}, nil
}
