package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// GetCoordinatorRaftStatus is GET_COORDINATOR_RAFT_STATUS: the backend
// member's consensus view. Every coordinator answers it, leader or not and
// with or without a quorum: the Raft leader with view LEADER, any other
// member with its own view, flagged LOCAL. A backend that does not declare
// ConsensusStatus answers UNIMPLEMENTED; a coordinator with no backend
// client open (starting, or restarting its plugin) answers UNAVAILABLE.
func (a *adminService) GetCoordinatorRaftStatus(ctx context.Context, _ *adminv1.GetCoordinatorRaftStatusRequest) (*adminv1.GetCoordinatorRaftStatusResponse, error) {
	ref := a.s.backend.Load()
	if ref == nil || !a.s.backendOpen.Load() {
		return nil, fmt.Errorf("%w: coordinator: no metadata backend client is open (starting, or the plugin is being restarted)", core.ErrUnavailable)
	}
	caps := ref.b.Capabilities()
	if !caps.ConsensusStatus {
		return nil, status.Errorf(codes.Unimplemented,
			"GetCoordinatorRaftStatus: the %q backend does not report a consensus status (it does not declare ConsensusStatus)", caps.Name)
	}
	st, err := ref.b.Status(ctx)
	if err != nil {
		return nil, adminapi.ToStatus(err)
	}
	return raftStatusToProto(st, a.s.id, time.Now()), nil
}

// raftStatusToProto is the RPC's answer for st, as seen at now.
func raftStatusToProto(st core.Status, coordinatorID string, now time.Time) *adminv1.GetCoordinatorRaftStatusResponse {
	out := &adminv1.GetCoordinatorRaftStatusResponse{
		View: adminv1.RaftStatusView_RAFT_STATUS_VIEW_LOCAL, Backend: st.Backend, ClusterId: st.ClusterID,
		MemberId: st.MemberID, CoordinatorId: coordinatorID, Role: string(st.Role), Term: st.Epoch,
		LeaderId: st.LeaderID, LeaderAddress: adminapi.HostPort(st.LeaderAddress),
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, SnapshotIndex: st.SnapshotIndex,
	}
	if st.Role == core.RoleLeader {
		out.View = adminv1.RaftStatusView_RAFT_STATUS_VIEW_LEADER
	}
	for _, m := range st.Members {
		pm := &adminv1.RaftMember{
			Id: m.ID, Address: m.Address, Role: string(m.Role), Kind: string(m.Kind), Reachable: m.Reachable,
			LastContactAgeMs: -1, MatchIndex: m.MatchIndex, Lag: m.Lag, SnapshotIndex: m.SnapshotIndex,
		}
		if !m.LastContact.IsZero() {
			pm.LastContactUnixMs = m.LastContact.UnixMilli()
			pm.LastContactAgeMs = max(now.Sub(m.LastContact).Milliseconds(), 0)
		}
		out.Members = append(out.Members, pm)
	}
	return out
}

// transferTimeout bounds a leadership transfer on the leader.
const transferTimeout = 15 * time.Second

// TransferRaftLeadership hands the backend's consensus leadership to a
// voter (leader only; a standby answers NOT_LEADER). The leadership of
// this coordinator ends with it; the coordinator on the target campaigns
// and leads at the new term.
func (a *adminService) TransferRaftLeadership(ctx context.Context, r *adminv1.TransferRaftLeadershipRequest) (*adminv1.TransferRaftLeadershipResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	lt, ok := core.Optional[core.LeadershipTransferer](l.b)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented,
			"TransferRaftLeadership: the %q backend cannot transfer its leadership (it does not declare LeadershipTransfer)", l.b.Capabilities().Name)
	}
	prev := ""
	if st, err := l.b.Status(ctx); err == nil {
		prev = st.MemberID
	}
	tctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	var res core.LeadershipTransfer
	err = a.s.metrics.timeCall("TransferLeadership", func() error {
		var err error
		res, err = lt.TransferLeadership(tctx, r.ToId)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.TransferRaftLeadershipResponse{PreviousLeaderId: prev, LeaderId: res.MemberID, Term: res.Term}, nil
}
