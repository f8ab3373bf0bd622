package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
)

// quorumNoteTTL is how long a standby reuses its quorum statement: a
// standby without a leader may be asked often, and the statement costs a
// Status call.
const quorumNoteTTL = time.Second

type quorumNote struct {
	at   time.Time
	text string
}

// noLeader is the NOT_LEADER answer of a coordinator that knows no leader.
// On a backend that reports its consensus view (ConsensusStatus) it says
// what this member sees of the quorum, so that "no leader" after a quorum
// loss reads as what it is: "no quorum: 2 of 3 voters unreachable".
func (s *Server) noLeader() error {
	nl := &core.NotLeaderError{}
	if note := s.quorumStatement(); note != "" {
		return fmt.Errorf("%w: %s", nl, note)
	}
	return nl
}

// quorumStatement describes the quorum as this member sees it, "" when its
// backend reports no consensus view or its status is not available.
func (s *Server) quorumStatement() string {
	if n := s.quorum.Load(); n != nil && time.Since(n.at) < quorumNoteTTL {
		return n.text
	}
	ref := s.backend.Load()
	if ref == nil || !ref.b.Capabilities().ConsensusStatus {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := ref.b.Status(ctx)
	if err != nil {
		return ""
	}
	text := quorumText(adminclient.HostPort(s.addr), st)
	s.quorum.Store(&quorumNote{at: time.Now(), text: text})
	return text
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
	for _, m := range st.Members {
		if m.Kind != core.MemberVoter {
			continue
		}
		voters++
		if m.Reachable {
			reachable++
		}
	}
	if voters == 0 {
		return ""
	}
	if need := voters/2 + 1; reachable < need {
		return fmt.Sprintf("coordinator at %s answers but has no quorum: %d of %d voters unreachable (%d of %d reachable, %d needed)",
			addr, voters-reachable, voters, reachable, voters, need)
	}
	return fmt.Sprintf("coordinator at %s reaches %d of %d voters (a quorum) and knows no leader yet: an election may be under way", addr, reachable, voters)
}
