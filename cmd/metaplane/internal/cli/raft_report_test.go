package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// leaderAnswerOf is a leader's status answer naming members, member 1
// the leader, at commit index commit.
func leaderAnswerOf(commit int64, members ...*adminv1.RaftMember) []raftAnswer {
	leader := &adminv1.GetCoordinatorRaftStatusResponse{View: adminv1.RaftStatusView_RAFT_STATUS_VIEW_LEADER,
		ClusterId: "7", MemberId: "1", Role: "leader", Term: 2, LeaderId: "1", CommitIndex: commit, AppliedIndex: commit,
		Members: members}
	return []raftAnswer{{addr: "c1:9123", resp: leader}}
}

func member(id, kind string, reachable bool, match, lag int64) *adminv1.RaftMember {
	return &adminv1.RaftMember{Id: id, Address: "c" + id + ":9124", Role: "follower", Kind: kind, Reachable: reachable,
		MatchIndex: match, Lag: lag, LastContactAgeMs: 10}
}

// TestRaftStatusJSONHasProblem: `raft status --json` always has the
// problem key, empty when the quorum is healthy, as docs/raft.md lists
// it.
func TestRaftStatusJSONHasProblem(t *testing.T) {
	healthy := buildReport(leaderAnswerOf(100, member("1", "voter", true, 100, 0), member("2", "voter", true, 100, 0),
		member("3", "voter", true, 100, 0)))
	sick := buildReport(leaderAnswerOf(100, member("1", "voter", true, 100, 0), member("2", "voter", false, 0, 0),
		member("3", "voter", false, 0, 0)))
	for _, tt := range []struct {
		name    string
		rep     *raftReport
		healthy bool
	}{{"healthy", healthy, true}, {"no quorum", sick, false}} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.rep)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			p, ok := m["problem"].(string)
			if !ok {
				t.Fatalf("no problem string in %s", b)
			}
			if tt.healthy != (p == "") || m["healthy"] != tt.healthy {
				t.Errorf("healthy %v, problem %q; want healthy %v with a problem only when unhealthy", m["healthy"], p, tt.healthy)
			}
		})
	}
}

// TestMillisDuration: --interval takes a Go duration or a bare number of
// milliseconds.
func TestMillisDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"500", 500 * time.Millisecond, true},
		{" 2000 ", 2 * time.Second, true},
		{"2s", 2 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"0", 0, true},
		{"soon", 0, false},
		{"99999999999999999", 0, false},
	} {
		var d millisDuration
		err := d.Set(tt.in)
		if (err == nil) != tt.ok || (tt.ok && time.Duration(d) != tt.want) {
			t.Errorf("Set(%q) = %v, %v; want %v (ok %v)", tt.in, time.Duration(d), err, tt.want, tt.ok)
		}
	}
}

// TestCatchingUpIsWaitedFor: the transfer and removal verbs wait while
// the leader's view shows members catching up (no progress report yet,
// too far behind, not heard from yet) and give up at once on what
// waiting cannot change.
func TestCatchingUpIsWaitedFor(t *testing.T) {
	fresh := member("2", "voter", true, 0, 0)  // reachable, no progress report yet
	never := member("3", "voter", false, 0, 0) // not heard from since this leader began
	never.LastContactAgeMs = -1
	gone := member("3", "voter", false, 0, 0)        // unreachable after a contact
	behind := member("2", "voter", true, 50, 5000)   // reported, far behind
	ready := member("2", "voter", true, 100, 0)      // caught up
	learner := member("4", "non-voting", true, 0, 0) // not a voter
	leader := member("1", "voter", true, 100, 0)
	view := func(ms ...*adminv1.RaftMember) *adminv1.GetCoordinatorRaftStatusResponse {
		return leaderAnswerOf(100, append([]*adminv1.RaftMember{leader}, ms...)...)[0].resp
	}
	transfers := []struct {
		name, to string
		st       *adminv1.GetCoordinatorRaftStatusResponse
		wait     bool
	}{
		{"to a voter without a progress report", "2", view(fresh, gone), true},
		{"to a voter not heard from yet", "3", view(ready, never), true},
		{"to a voter far behind", "2", view(behind, gone), true},
		{"to a caught-up voter", "2", view(ready, gone), false},
		{"to an unreachable voter", "3", view(ready, gone), false},
		{"to the leader", "1", view(ready, gone), false},
		{"to a non-voting member", "4", view(ready, learner), false},
		{"to no member", "9", view(ready, gone), false},
		{"to any, none caught up yet", "", view(fresh, never), true},
		{"to any, one caught up", "", view(ready, never), false},
		{"to any, the others gone", "", view(gone), false},
	}
	for _, tt := range transfers {
		if got := transferBehind(tt.st, tt.to); (got != "") != tt.wait {
			t.Errorf("transfer %s: %q, want a wait %v", tt.name, got, tt.wait)
		}
	}
	removals := []struct {
		name, id string
		st       *adminv1.GetCoordinatorRaftStatusResponse
		wait     bool
	}{
		{"the others without progress reports", "4", view(fresh, member("3", "voter", true, 0, 0), member("4", "voter", true, 100, 0)), true},
		{"the others caught up", "4", view(ready, member("3", "voter", true, 100, 0), member("4", "voter", true, 0, 0)), false},
		{"too few reachable", "2", view(ready, gone), false},
		{"the leader", "1", view(fresh, gone), false},
		{"a non-voting member", "4", view(fresh, learner), false},
	}
	for _, tt := range removals {
		if got := removalBehind(tt.st, tt.id); (got != "") != tt.wait {
			t.Errorf("removal of %s: %q, want a wait %v", tt.name, got, tt.wait)
		}
	}
}

// TestFailureToleranceAndCanStop: raft status counts the caught-up voters
// and how many may fail with a caught-up majority left; raft can-stop
// allows a stop that keeps one and refuses, saying who is behind, one
// that does not.
func TestFailureToleranceAndCanStop(t *testing.T) {
	up := func(id string) *adminv1.RaftMember { return member(id, "voter", true, 100, 0) }
	fresh := member("3", "voter", true, 0, 0)
	three := buildReport(leaderAnswerOf(100, up("1"), up("2"), up("3")))
	five := buildReport(leaderAnswerOf(100, up("1"), up("2"), up("3"), up("4"), up("5")))
	lagging := buildReport(leaderAnswerOf(100, up("1"), up("2"), fresh, member("4", "non-voting", true, 0, 0)))
	for _, tt := range []struct {
		name                string
		rep                 *raftReport
		caughtUp, tolerance int
	}{{"three caught up", three, 3, 1}, {"five caught up", five, 5, 2}, {"one of three behind", lagging, 2, 0}} {
		if tt.rep.VotersCaughtUp != tt.caughtUp || tt.rep.FailureTolerance != tt.tolerance {
			t.Errorf("%s: %d caught up, tolerance %d; want %d, %d", tt.name, tt.rep.VotersCaughtUp, tt.rep.FailureTolerance, tt.caughtUp, tt.tolerance)
		}
	}
	var text bytes.Buffer
	three.text(&text)
	if !strings.Contains(text.String(), "3 caught up, 2 needed: 1 voter may fail") {
		t.Errorf("raft status text does not give the failure tolerance:\n%s", text.String())
	}
	for _, tt := range []struct {
		name, id string
		rep      *raftReport
		ok       bool
		says     string
	}{
		{"a follower of three caught up", "2", three, true, "2 of the 3 voters stay caught up (2 needed)"},
		{"the leader", "1", three, true, "transfer-leader"},
		{"a follower with another behind", "2", lagging, false, "3: no progress report yet"},
		{"the member behind", "3", lagging, true, "2 of the 3 voters stay caught up"},
		{"a non-voting member", "4", lagging, true, "the quorum does not count it"},
		{"two of five", "5", five, true, "then 1 voter may fail"},
	} {
		got, err := canStop(tt.rep, tt.id)
		if err != nil || got.CanStop != tt.ok || !strings.Contains(got.Reason, tt.says) {
			t.Errorf("can-stop %s (%s): %+v, %v; want can_stop %v saying %q", tt.id, tt.name, got, err, tt.ok, tt.says)
		}
	}
	if _, err := canStop(three, "9"); errorCode(err) != "NOT_FOUND" {
		t.Errorf("can-stop of no member: %v (code %s), want NOT_FOUND", err, errorCode(err))
	}
	local := buildReport([]raftAnswer{{addr: "c2:9123", resp: &adminv1.GetCoordinatorRaftStatusResponse{View: adminv1.RaftStatusView_RAFT_STATUS_VIEW_LOCAL,
		MemberId: "2", Role: "follower", Members: []*adminv1.RaftMember{up("1"), up("2"), up("3")}}}})
	if _, err := canStop(local, "2"); errorCode(err) != codeNoLeader {
		t.Errorf("can-stop without a leader: %v (code %s), want %s", err, errorCode(err), codeNoLeader)
	}
}
