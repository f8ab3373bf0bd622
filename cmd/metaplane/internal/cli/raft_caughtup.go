package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/metaplane/metaplane/backends/raft/catchup"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/retry"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// caughtUp reports whether member m counts as caught up in the leader's
// view st, as the leader judges it for a transfer (maxLag
// catchup.MaxTransferLag) or a removal (catchup.MaxRemovalLag): the leader
// itself; a reachable witness (it has no state machine to be behind in);
// a reachable member with a recent progress report at most maxLag entries
// behind.
func caughtUp(st *adminv1.GetCoordinatorRaftStatusResponse, m *adminv1.RaftMember, maxLag int64) bool {
	switch {
	case m.Id == st.MemberId:
		return true
	case !m.Reachable:
		return false
	case m.Kind == string(core.MemberWitness):
		return true
	}
	return m.MatchIndex > 0 && m.Lag <= maxLag
}

// behindText says how member m falls short of caught up, by maxLag.
func behindText(m *adminv1.RaftMember, maxLag int64) string {
	switch {
	case !m.Reachable && m.LastContactAgeMs < 0:
		return "not heard from yet"
	case !m.Reachable:
		return "unreachable"
	case m.MatchIndex == 0:
		return "no progress report yet"
	}
	return fmt.Sprintf("%d entries behind, at most %d", m.Lag, maxLag)
}

// inQuorum reports whether m counts towards the quorum (a voter or a
// witness).
func inQuorum(m *adminv1.RaftMember) bool {
	return m.Kind == string(core.MemberVoter) || m.Kind == string(core.MemberWitness)
}

// catchingUp reports whether member m may become caught up by waiting:
// it is reachable, or the leader has not heard from it at all yet (a
// leader of a moment ago), but is not caught up by maxLag.
func catchingUp(st *adminv1.GetCoordinatorRaftStatusResponse, m *adminv1.RaftMember, maxLag int64) bool {
	return (m.Reachable || m.LastContactAgeMs < 0) && !caughtUp(st, m, maxLag)
}

// transferBehind says why the leader's view st does not have the transfer
// target caught up yet, when waiting can change that (catchingUp): the
// voter to, or with to empty every other voter. "" when the transfer's
// refusal is not about catching up (no such voter, it leads, it is
// unreachable after a contact, or a candidate is caught up already).
func transferBehind(st *adminv1.GetCoordinatorRaftStatusResponse, to string) string {
	if to != "" {
		m := memberOf(st, to)
		if m == nil || m.Kind != string(core.MemberVoter) || m.Id == st.MemberId || !catchingUp(st, m, catchup.MaxTransferLag) {
			return ""
		}
		return fmt.Sprintf("member %s is not caught up yet (%s)", to, behindText(m, catchup.MaxTransferLag))
	}
	var behind []string
	for _, m := range st.Members {
		if m.Id == st.MemberId || m.Kind != string(core.MemberVoter) {
			continue
		}
		if caughtUp(st, m, catchup.MaxTransferLag) {
			return ""
		}
		if catchingUp(st, m, catchup.MaxTransferLag) {
			behind = append(behind, m.Id+": "+behindText(m, catchup.MaxTransferLag))
		}
	}
	if len(behind) == 0 {
		return ""
	}
	return "no other voter is caught up yet (" + strings.Join(behind, "; ") + ")"
}

// removalBehind says why removing member id would leave too few caught-up
// voters in the leader's view st, when waiting can change that: a
// majority of the remaining voters is reachable but fewer are caught up
// (catchup.MaxRemovalLag). "" otherwise.
func removalBehind(st *adminv1.GetCoordinatorRaftStatusResponse, id string) string {
	if t := memberOf(st, id); t == nil || !inQuorum(t) || id == st.MemberId {
		return ""
	}
	remaining, reachable, caught := 0, 0, 0
	var behind []string
	for _, m := range st.Members {
		if m.Id == id || !inQuorum(m) {
			continue
		}
		remaining++
		if m.Reachable || m.Id == st.MemberId {
			reachable++
		}
		if caughtUp(st, m, catchup.MaxRemovalLag) {
			caught++
		} else if m.Reachable {
			behind = append(behind, m.Id+": "+behindText(m, catchup.MaxRemovalLag))
		}
	}
	need := remaining/2 + 1
	if reachable < need || caught >= need {
		return ""
	}
	return fmt.Sprintf("%d of the %d remaining voters are caught up, %d needed (%s)", caught, remaining, need, strings.Join(behind, "; "))
}

// retryWhileCatchingUp runs call until it succeeds, fails for good, or
// ctx ends. A refusal (INVALID_ARGUMENT) is asked again, with backoff,
// while behind, given the leader's view, says that members are still
// catching up (a cluster started a moment ago, a leader elected a moment
// ago whose followers have not reported their progress to it yet); the
// first such wait is said on stderr unless under --json. Any other error,
// or a refusal behind does not explain, is returned at once; at ctx's end
// the last refusal is returned, saying how long it waited.
func (r *RaftFlags) retryWhileCatchingUp(ctx context.Context, stderr io.Writer, wait time.Duration, call func() error,
	behind func(*adminv1.GetCoordinatorRaftStatusResponse) string) error {
	backoff := retry.New(100*time.Millisecond, time.Second)
	var refusal error // the last refusal waited on
	why := ""
	gaveUp := func() error {
		return &WithCause{Cause: refusal, Msg: fmt.Sprintf("%s (still so after waiting --wait %v: %s)", operatorMessage(refusal), wait, why)}
	}
	for {
		err := call()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil && refusal != nil:
			return gaveUp()
		case !errors.Is(err, core.ErrInvalidArgument) || ctx.Err() != nil:
			return err
		}
		vctx, cancel := context.WithTimeout(ctx, r.timeout)
		st, verr := r.leaderView(vctx, nil)
		cancel()
		if verr != nil {
			return err
		}
		if why = behind(st); why == "" {
			return err
		}
		if refusal == nil && !r.json {
			fmt.Fprintf(stderr, "%s: waiting for it, up to --wait %v\n", why, wait)
		}
		refusal = err
		if !retry.Sleep(ctx, backoff.Next()) {
			return gaveUp()
		}
	}
}
