package coordinator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/core"
)

// quorumNoteTTL is how long a standby reuses its consensus view: a standby
// may be asked often, and the view costs a Status call.
const quorumNoteTTL = time.Second

type quorumNote struct {
	at time.Time
	st core.Status
	ok bool
}

// notLeader is the NOT_LEADER answer of a standby that believes li leads.
// On a backend that reports its consensus view, a member that knows no
// leader now (its Raft leader died and it is campaigning, say) does not
// name the leader it last observed: it says what it sees of the quorum.
func (s *Server) notLeader(li core.LeaderInfo) error {
	if li.ID == s.id {
		li = core.LeaderInfo{} // stale: it lost the leadership
	}
	if st, ok := s.consensusView(); ok && st.LeaderID == "" {
		li = core.LeaderInfo{}
	}
	if li.Address == "" {
		return s.noLeader()
	}
	return &core.NotLeaderError{LeaderID: li.ID, LeaderAddress: li.Address}
}

// noLeader is the NOT_LEADER answer of a coordinator that knows no leader.
// On a backend that reports its consensus view (ConsensusStatus) it says
// what this member sees of the quorum, so that "no leader" after a quorum
// loss reads as what it is: "no quorum: 2 of 3 voters unreachable".
func (s *Server) noLeader() error {
	nl := &core.NotLeaderError{}
	if st, ok := s.consensusView(); ok {
		if note := quorumText(adminapi.HostPort(s.addr), st); note != "" {
			return fmt.Errorf("%w: %s", nl, note)
		}
	}
	return nl
}

// consensusView is this member's consensus status, reused for
// quorumNoteTTL; ok is false when the backend reports none or its status is
// not available.
func (s *Server) consensusView() (core.Status, bool) {
	if n := s.quorum.Load(); n != nil && time.Since(n.at) < quorumNoteTTL {
		return n.st, n.ok
	}
	ref := s.backend.Load()
	if ref == nil || !ref.b.Capabilities().ConsensusStatus {
		return core.Status{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := ref.b.Status(ctx)
	s.quorum.Store(&quorumNote{at: time.Now(), st: st, ok: err == nil})
	return st, err == nil
}

// quorumText is the statement about st's voters for the coordinator at
// addr.
func quorumText(addr string, st core.Status) string {
	if full := st.Details["diskFull"]; full != "" {
		// This member itself is out of the quorum (docs/raft.md, A full
		// disk): its view of the others says nothing then.
		return fmt.Sprintf("coordinator at %s has paused its Raft replica: %s", addr, full)
	}
	voters, reachable := 0, 0
	var cut []string
	for _, m := range st.Members {
		if m.Kind != core.MemberVoter {
			continue
		}
		voters++
		if m.Reachable {
			reachable++
		} else {
			cut = append(cut, fmt.Sprintf("%s at %s", m.ID, m.Address))
		}
	}
	if voters == 0 {
		return ""
	}
	which := ""
	if len(cut) > 0 {
		which = "; it cannot reach voter " + strings.Join(cut, ", voter ")
	}
	if need := voters/2 + 1; reachable < need {
		return fmt.Sprintf("coordinator at %s answers but has no quorum: %d of %d voters unreachable (%d of %d reachable, %d needed)%s",
			addr, voters-reachable, voters, reachable, voters, need, which)
	}
	return fmt.Sprintf("coordinator at %s reaches %d of %d voters (a quorum) and knows no leader yet: an election may be under way%s", addr, reachable, voters, which)
}
