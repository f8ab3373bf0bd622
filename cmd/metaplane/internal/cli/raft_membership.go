package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// membershipReport is the answer of `raft add-voter` and `raft
// remove-voter`.
type membershipReport struct {
	ID      string `json:"id"`
	Address string `json:"address,omitempty"`
	// Kind is the member's kind now (voter), empty after a removal.
	Kind string `json:"kind,omitempty"`
	// AppliedIndex and Lag are the new voter's as last reported.
	AppliedIndex int64 `json:"applied_index,omitempty"`
	Lag          int64 `json:"lag,omitempty"`
	// TransferredTo is the member that leads after remove-voter --transfer
	// moved the leadership away from the member removed.
	TransferredTo string `json:"transferred_to,omitempty"`
	// Voters are the voters' ids in the leader's view afterwards.
	Voters []string `json:"voters"`
}

func validID(flag, id string) error {
	if n, err := strconv.ParseUint(id, 10, 64); err != nil || n == 0 {
		return UsageError("%s: want a member id (a positive integer), got %q", flag, id)
	}
	return nil
}

// leaderView is the leader's status answer, asked until one answers as
// leader and ok accepts it (nil ok: any), or ctx ends.
func (r *RaftFlags) leaderView(ctx context.Context, ok func(*adminv1.GetCoordinatorRaftStatusResponse) bool) (*adminv1.GetCoordinatorRaftStatusResponse, error) {
	for {
		answers, err := r.gather(ctx)
		var ue *usageErr
		if errors.As(err, &ue) {
			return nil, err
		}
		if la := leaderAnswer(answers); la != nil && (ok == nil || ok(la.resp)) {
			return la.resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func memberOf(st *adminv1.GetCoordinatorRaftStatusResponse, id string) *adminv1.RaftMember {
	for _, m := range st.GetMembers() {
		if m.Id == id {
			return m
		}
	}
	return nil
}

func votersOf(st *adminv1.GetCoordinatorRaftStatusResponse) []string {
	var out []string
	for _, m := range st.GetMembers() {
		if m.Kind == string(core.MemberVoter) {
			out = append(out, m.Id)
		}
	}
	return out
}

// callAdmin runs one admin call on the coordinator leader, keeping the
// ErrorDetail's code.
func (r *RaftFlags) callAdmin(ctx context.Context, call func(context.Context, adminv1.AdminServiceClient) error) error {
	client, err := r.tls.adminClient(r.bootstrap)
	if err != nil {
		return err
	}
	defer client.Close()
	var detail *adminv1.ErrorDetail
	err = client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		err := call(ctx, a)
		detail = adminapi.DetailOf(err)
		return err
	})
	if err != nil && detail != nil && ctx.Err() == nil {
		return &CodedErr{Err: err, Code: detail.Code}
	}
	return err
}

func raftAddVoter(r *RaftFlags) *cobra.Command {
	var id, address string
	var catchUp time.Duration
	cmd := &cobra.Command{Use: "add-voter", Args: NoArgs,
		Short: "add member --id at --address as non-voting, wait until it has caught up, then promote it to voter"}
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "the new member's `id` (its coordinator.raft.node.id)")
	f.StringVar(&address, "address", "", "the new member's Raft `host:port` (its coordinator.raft.voters entry)")
	f.DurationVar(&catchUp, "catch-up-timeout", 60*time.Second, "how long the new member may take to catch up before it is removed again")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := validID("--id", id); err != nil {
			return err
		}
		if _, _, err := net.SplitHostPort(address); err != nil || address == "" {
			return UsageError("--address: want the member's Raft host:port, got %q", address)
		}
		if catchUp <= 0 {
			return UsageError("--catch-up-timeout: want a positive duration, got %v", catchUp)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), catchUp+core.MembershipChangeReserve+15*time.Second)
		defer cancel()
		// Progress on stderr: the new member as the leader sees it, at
		// once and then every second (a join that is quick still shows
		// where it started).
		done := make(chan struct{})
		progressDone := make(chan struct{})
		go func() {
			defer close(progressDone)
			last := ""
			for first := true; ; first = false {
				if !first {
					select {
					case <-done:
						return
					case <-time.After(time.Second):
					}
				}
				answers, _ := r.gather(ctx)
				la := leaderAnswer(answers)
				if la == nil {
					continue
				}
				line := fmt.Sprintf("member %s: not in the membership yet", id)
				if m := memberOf(la.resp, id); m != nil {
					if m.MatchIndex == 0 {
						line = fmt.Sprintf("member %s: %s, waiting for its first progress report (leader commit %d)", id, m.Kind, la.resp.CommitIndex)
					} else {
						line = fmt.Sprintf("member %s: %s, applied %d, %d entries behind", id, m.Kind, m.MatchIndex, m.Lag)
					}
				}
				if line != last {
					fmt.Fprintln(cmd.ErrOrStderr(), line)
					last = line
				}
			}
		}()
		var resp *adminv1.AddRaftVoterResponse
		err := r.callAdmin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			var err error
			resp, err = a.AddRaftVoter(ctx, &adminv1.AddRaftVoterRequest{Id: id, Address: address, CatchUpTimeoutMs: catchUp.Milliseconds()})
			return err
		})
		close(done)
		<-progressDone
		if err != nil {
			return err
		}
		vctx, vcancel := context.WithTimeout(cmd.Context(), r.timeout+5*time.Second)
		defer vcancel()
		st, err := r.leaderView(vctx, func(st *adminv1.GetCoordinatorRaftStatusResponse) bool {
			m := memberOf(st, id)
			return m != nil && m.Kind == string(core.MemberVoter)
		})
		if err != nil {
			return &CodedErr{Code: codeNoLeader, Err: fmt.Errorf("member %s was promoted, but no leader answered listing it as a voter: %v", id, err)}
		}
		rep := membershipReport{ID: id, Address: address, Kind: string(core.MemberVoter), AppliedIndex: resp.AppliedIndex, Lag: resp.Lag, Voters: votersOf(st)}
		if r.json {
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "member %s at %s added: caught up as non-voting (applied %d, %d behind), promoted to voter; %d voters: %v\n",
			id, address, rep.AppliedIndex, rep.Lag, len(rep.Voters), rep.Voters)
		return nil
	}
	return cmd
}

func raftRemoveVoter(r *RaftFlags) *cobra.Command {
	var id string
	var transfer, force bool
	var wait time.Duration
	cmd := &cobra.Command{Use: "remove-voter", Args: NoArgs,
		Short: "remove member --id (refused for the last voter, a quorum break, too few caught-up voters unless --force, and the leader unless --transfer)"}
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "the `id` of the member to remove")
	f.BoolVar(&force, "force", false, "remove a member gone for good even when the other voters are not caught up (still refused when too few are reachable for a quorum)")
	f.BoolVar(&transfer, "transfer", false, "when the member leads, transfer the leadership to the most caught-up other voter first")
	f.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the voters to catch up, a transfer, the removal, and the leader's view to show it")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := validID("--id", id); err != nil {
			return err
		}
		if wait <= 0 {
			return UsageError("--wait: want a positive duration, got %v", wait)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		rep := membershipReport{ID: id}
		if transfer {
			st, err := r.leaderView(ctx, nil)
			if err != nil {
				return &CodedErr{Code: codeNoLeader, Err: fmt.Errorf("no member answers as leader within --wait %v", wait)}
			}
			// The last voter is never transferred from: its removal is
			// refused as such.
			if st.MemberId == id && len(votersOf(st)) > 1 {
				var tr *adminv1.TransferRaftLeadershipResponse
				if err := r.retryWhileCatchingUp(ctx, cmd.ErrOrStderr(), wait, func() error {
					return r.callAdmin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
						var err error
						tr, err = a.TransferRaftLeadership(ctx, &adminv1.TransferRaftLeadershipRequest{})
						return err
					})
				}, func(st *adminv1.GetCoordinatorRaftStatusResponse) string { return transferBehind(st, "") }); err != nil {
					return err
				}
				rep.TransferredTo = tr.LeaderId
				if !r.json {
					fmt.Fprintf(cmd.ErrOrStderr(), "leadership moved from %s to %s, term %d\n", id, tr.LeaderId, tr.Term)
				}
			}
		}
		// After a transfer the coordinator leadership follows the Raft
		// leadership a moment later: retry while the answer is NOT_LEADER.
		// A new leader has no progress reports from its followers yet, so
		// a refusal for too few caught-up voters is waited out too.
		remove := func() error {
			for {
				err := r.callAdmin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
					_, err := a.RemoveRaftVoter(ctx, &adminv1.RemoveRaftVoterRequest{Id: id, Force: force})
					return err
				})
				if err == nil || rep.TransferredTo == "" || !errors.Is(err, core.ErrNotLeader) || ctx.Err() != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return err
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if err := r.retryWhileCatchingUp(ctx, cmd.ErrOrStderr(), wait, remove,
			func(st *adminv1.GetCoordinatorRaftStatusResponse) string {
				if force {
					return "" // --force waives the caught-up check: a refusal is about something else
				}
				return removalBehind(st, id)
			}); err != nil {
			return err
		}
		st, err := r.leaderView(ctx, func(st *adminv1.GetCoordinatorRaftStatusResponse) bool { return memberOf(st, id) == nil })
		if err != nil {
			return &CodedErr{Code: codeNoLeader, Err: fmt.Errorf("member %s was removed, but no leader answered without it within --wait %v", id, wait)}
		}
		rep.Voters = votersOf(st)
		if r.json {
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "member %s removed; %d voters: %v\n", id, len(rep.Voters), rep.Voters)
		return nil
	}
	return cmd
}
