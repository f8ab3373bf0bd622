package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/core"
)

// canStopReport is `raft can-stop`'s answer.
type canStopReport struct {
	ID      string `json:"id"`
	CanStop bool   `json:"can_stop"`
	// Reason says why (or why not), in a sentence.
	Reason string `json:"reason"`
	// Leader: the member leads now (stopping it costs an election;
	// transfer the leadership first).
	Leader bool `json:"leader"`
	// Voters, VotersCaughtUp and Needed are the leader's view now;
	// CaughtUpAfter is how many voters stay caught up with the member
	// stopped, and FailureToleranceAfter how many more may then fail.
	Voters                int `json:"voters"`
	VotersCaughtUp        int `json:"voters_caught_up"`
	Needed                int `json:"needed"`
	CaughtUpAfter         int `json:"caught_up_after"`
	FailureToleranceAfter int `json:"failure_tolerance_after"`
}

// canStop judges, on the leader's view rep, whether member id may stop
// now: the voters (and witnesses) other than it that are caught up must
// still be a majority of all of them (the membership does not change when
// a member stops).
func canStop(rep *raftReport, id string) (canStopReport, error) {
	out := canStopReport{ID: id, Voters: rep.Voters, VotersCaughtUp: rep.VotersCaughtUp, Needed: rep.Voters/2 + 1}
	if rep.View != "LEADER" {
		return out, &CodedErr{Code: codeNoLeader, Err: fmt.Errorf("no member answers as leader, so whether member %s may stop cannot be told: %s", id, rep.Problem)}
	}
	var m *raftRow
	var behind []string
	for i := range rep.Members {
		r := &rep.Members[i]
		if r.ID == id {
			m = r
		} else if (r.Kind == string(core.MemberVoter) || r.Kind == string(core.MemberWitness)) && !r.CaughtUp {
			behind = append(behind, r.ID+": "+r.behind)
		}
	}
	if m == nil {
		return out, &CodedErr{Code: adminapi.CodeNotFound, Err: fmt.Errorf("member %s is not in the membership", id)}
	}
	out.Leader = m.Leader
	out.CaughtUpAfter = rep.VotersCaughtUp
	if m.Kind != string(core.MemberVoter) && m.Kind != string(core.MemberWitness) {
		out.CanStop, out.FailureToleranceAfter = true, rep.FailureTolerance
		out.Reason = fmt.Sprintf("member %s is %s: the quorum does not count it", id, m.Kind)
		return out, nil
	}
	if m.CaughtUp {
		out.CaughtUpAfter--
	}
	out.FailureToleranceAfter = max(out.CaughtUpAfter-out.Needed, 0)
	out.CanStop = out.CaughtUpAfter >= out.Needed
	switch {
	case out.CanStop:
		out.Reason = fmt.Sprintf("with member %s stopped, %d of the %d voters stay caught up (%d needed); then %s",
			id, out.CaughtUpAfter, out.Voters, out.Needed, toleranceText(out.FailureToleranceAfter))
		if m.Leader {
			out.Reason += fmt.Sprintf("; member %s leads: move the leadership first (metaplane raft transfer-leader) to spare the cluster an election", id)
		}
	default:
		out.Reason = fmt.Sprintf("with member %s stopped, %d of the %d voters would stay caught up, fewer than the %d a quorum needs to go on committing", id, out.CaughtUpAfter, out.Voters, out.Needed)
		if len(behind) > 0 {
			out.Reason += " (not caught up: " + strings.Join(behind, ", ") + ")"
		}
		out.Reason += ": wait until `metaplane raft status` shows them caught up, or bring back the members that are down"
	}
	return out, nil
}

func raftCanStop(r *RaftFlags) *cobra.Command {
	var id string
	cmd := &cobra.Command{Use: "can-stop", Args: NoArgs,
		Short: "tell whether member --id may stop now with a caught-up majority of the voters left (exit 0), or why not (exit 1)"}
	cmd.Flags().StringVar(&id, "id", "", "the `id` of the member to stop")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := validID("--id", id); err != nil {
			return err
		}
		answers, err := r.gather(cmd.Context())
		if err != nil {
			return err
		}
		out, err := canStop(buildReport(answers), id)
		if err != nil {
			return err
		}
		if r.json {
			if err := r.PrintJSON(cmd.OutOrStdout(), out); err != nil {
				return err
			}
		} else {
			verdict := "can stop"
			if !out.CanStop {
				verdict = "cannot stop now"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "member %s %s: %s\n", id, verdict, out.Reason)
		}
		if !out.CanStop {
			if r.json {
				return &CodedErr{Code: codeCannotStop, Err: errors.New(out.Reason)}
			}
			return ExitWith(ExitFailure)
		}
		return nil
	}
	return cmd
}
