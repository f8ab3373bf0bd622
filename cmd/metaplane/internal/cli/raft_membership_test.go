package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// raftVoters is the voter ids in the leader's view, sorted.
func raftVoters(t *testing.T, bs string) []string {
	t.Helper()
	var st raftReport
	testutil.WaitFor(t, 30*time.Second, "a leader's raft status", func() bool {
		stdout, _, _ := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		return json.Unmarshal([]byte(stdout), &st) == nil && st.View == "LEADER"
	})
	var ids []string
	for _, m := range st.Members {
		if m.Kind == "voter" {
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// refused runs a membership verb that must be refused with
// INVALID_ARGUMENT saying says, leaving the voters as they were.
func refused(t *testing.T, bs string, says string, args ...string) {
	t.Helper()
	before := raftVoters(t, bs)
	stdout, stderr, code := runCLI(t, append(append([]string{"raft"}, args...), "--json", bs)...)
	var je jsonError
	if code != ExitFailure || json.Unmarshal([]byte(lastLine(stderr)), &je) != nil || je.Code != "INVALID_ARGUMENT" || !strings.Contains(je.Error, says) {
		t.Errorf("raft %v: exit %d, stdout %q, stderr %q; want INVALID_ARGUMENT %q", args, code, stdout, stderr, says)
	}
	if after := raftVoters(t, bs); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("raft %v changed the voters from %v to %v", args, before, after)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestRaftMembership grows a three-voter cluster of real coordinator
// processes to four with `raft add-voter` while writes flow (every
// acknowledged write is there when the new member leads), removes the new
// member, a leader, with `remove-voter --transfer`, and checks every
// refusal (duplicate id and address, a member that does not catch up, the
// leader without --transfer, a quorum break, the last voter) leaves the
// voter set unchanged.
func TestRaftMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ps := startRaftCoordinators(t, 3)
	bs := bootstrapOf(ps)
	testutil.WaitFor(t, 60*time.Second, "raft status healthy with every voter reachable", func() bool {
		stdout, _, code := runCLI(t, "raft", "status", "--json", bs)
		var st raftReport
		return code == ExitOK && json.Unmarshal([]byte(stdout), &st) == nil && st.VotersReachable == 3
	})

	// Refusals of add-voter.
	free := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	refused(t, bs, "in the membership already", "add-voter", "--id", "1", "--address", free)
	refused(t, bs, "is member 1's", "add-voter", "--id", "4", "--address", ps[0].raft)
	refused(t, bs, "did not catch up", "add-voter", "--id", "9", "--address", free, "--catch-up-timeout", "2s")
	if _, stderr, code := runCLI(t, "raft", "add-voter", "--id", "4", bs); code != ExitUsage {
		t.Errorf("add-voter without --address: exit %d %s", code, stderr)
	}

	// Writes flow while the fourth member joins.
	client, err := adminclient.NewClient(strings.Split(strings.TrimPrefix(bs, "--bootstrap-servers="), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var (
		mu    sync.Mutex
		acked []string
	)
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("db%d", i)
			if err := createDatabase(context.Background(), client, name, 10*time.Second); err == nil {
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		}
	}()
	nAcked := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testutil.WaitFor(t, 30*time.Second, "writes before the join", func() bool { return nAcked() >= 20 })

	p4 := &raftProc{id: "4", client: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	port4 := testutil.FreePort(t)
	p4.raft = fmt.Sprintf("127.0.0.1:%d", port4)
	var voters, seeds []string
	for _, p := range ps {
		voters = append(voters, p.id+"@"+p.raft)
		seeds = append(seeds, p.client)
	}
	spawnRaftProc(t, p4, strings.Join(append(seeds, p4.client), ","), strings.Join(append(voters, "4@"+p4.raft), ","), port4,
		"coordinator.raft.join=true")
	before := nAcked()
	stdout, stderr, code := runCLI(t, "raft", "add-voter", "--id", "4", "--address", p4.raft, "--json", bs)
	duringJoin := nAcked()
	var rep membershipReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Kind != "voter" || len(rep.Voters) != 4 {
		t.Fatalf("add-voter: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "member 4: ") {
		t.Errorf("add-voter showed no progress on stderr: %q", stderr)
	}
	// Acknowledged writes went on during the join, and a few more after.
	testutil.WaitFor(t, 30*time.Second, "writes after the join", func() bool { return nAcked() >= before+20 })
	close(stop)
	<-wrote
	if duringJoin == before {
		t.Errorf("no write was acknowledged during the join")
	}
	refused(t, bs, "in the membership already", "add-voter", "--id", "4", "--address", free)

	// The new member leads: every acknowledged write is there.
	bs4 := bs + "," + p4.client
	if _, stderr, code := runCLI(t, "raft", "transfer-leader", "--to", "4", "--wait", "60s", bs4); code != ExitOK {
		t.Fatalf("transfer-leader --to 4: exit %d %s", code, stderr)
	}
	cc4, err := grpc.NewClient(p4.client, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc4.Close()
	var names map[string]bool
	testutil.WaitFor(t, 30*time.Second, "member 4's coordinator listing the databases as leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := adminv1.NewAdminServiceClient(cc4).ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		if err != nil {
			return false
		}
		names = map[string]bool{}
		for _, n := range resp.Names {
			names[n] = true
		}
		return true
	})
	if len(names) < len(acked) {
		t.Errorf("member 4 lists %d databases, %d were acknowledged", len(names), len(acked))
	}
	for _, n := range acked {
		if !names[n] {
			t.Errorf("acknowledged database %s is missing on the new member", n)
		}
	}

	// Removing the leader needs --transfer.
	refused(t, bs4, "is the leader", "remove-voter", "--id", "4")
	stdout, stderr, code = runCLI(t, "raft", "remove-voter", "--id", "4", "--transfer", "--json", bs4)
	rep = membershipReport{}
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep.TransferredTo == "" || rep.TransferredTo == "4" || len(rep.Voters) != 3 {
		t.Fatalf("remove-voter --id 4 --transfer: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := raftVoters(t, bs); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("voters after removing 4: %v", got)
	}
	p4.kill()

	// A quorum break: with one follower dead, removing the other would
	// leave two voters, one reachable.
	var st raftReport
	stdout, _, _ = runCLI(t, "raft", "status", "--json", bs)
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatal(err)
	}
	var followers []*raftProc
	for _, p := range ps {
		if p.id != st.LeaderID {
			followers = append(followers, p)
		}
	}
	dead, other := followers[0], followers[1]
	dead.kill()
	testutil.WaitFor(t, 30*time.Second, "the leader seeing member "+dead.id+" unreachable", func() bool {
		stdout, _, _ := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		if json.Unmarshal([]byte(stdout), &st) != nil || st.View != "LEADER" {
			return false
		}
		for _, m := range st.Members {
			if m.ID == dead.id {
				return !m.Reachable
			}
		}
		return false
	})
	refused(t, bs, "fewer than the 2 a quorum needs", "remove-voter", "--id", other.id)
	// The dead member can go; then the other follower; the last voter
	// cannot.
	// A member counts as caught up once it has reported its progress (a
	// former leader reports with its first session renewal as follower);
	// until then the removal is refused, saying so.
	for _, id := range []string{dead.id, other.id} {
		testutil.WaitFor(t, 30*time.Second, "remove-voter --id "+id, func() bool {
			stdout, stderr, code := runCLI(t, "raft", "remove-voter", "--id", id, bs)
			if code == ExitOK && strings.Contains(stdout, "member "+id+" removed") {
				return true
			}
			if !strings.Contains(stderr, "no recent progress report") {
				t.Fatalf("remove-voter --id %s: exit %d\n%s%s", id, code, stdout, stderr)
			}
			return false
		})
	}
	if got := raftVoters(t, bs); fmt.Sprint(got) != "["+st.LeaderID+"]" {
		t.Fatalf("voters: %v, want only %s", got, st.LeaderID)
	}
	refused(t, bs, "is the last voter", "remove-voter", "--id", st.LeaderID)
	refused(t, bs, "last voter", "remove-voter", "--id", st.LeaderID, "--transfer")
}

// TestRaftTransferRightAfterStart: on a three-voter cluster of real
// coordinator processes, a transfer asked as soon as a leader answers (its
// followers have not reported their progress to it yet) waits within
// --wait instead of being refused, and `remove-voter --transfer` of the
// leader, twice in a row (each time a leader of a moment ago), exits 0.
func TestRaftTransferRightAfterStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ps := startRaftCoordinators(t, 3)
	bs := bootstrapOf(ps)
	var lr leaderReport
	testutil.WaitFor(t, 60*time.Second, "a member answering as leader", func() bool {
		stdout, _, code := runCLI(t, "raft", "leader", "--json", bs)
		lr = leaderReport{}
		return code == ExitOK && json.Unmarshal([]byte(stdout), &lr) == nil
	})
	to := "1"
	if lr.LeaderID == "1" {
		to = "2"
	}
	stdout, stderr, code := runCLI(t, "raft", "transfer-leader", "--to", to, "--wait", "30s", "--json", bs)
	var tr transferReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &tr) != nil || tr.LeaderID != to {
		t.Fatalf("transfer-leader --to %s right after the start: exit %d\n%s%s", to, code, stdout, stderr)
	}
	byID := map[string]*raftProc{}
	for _, p := range ps {
		byID[p.id] = p
	}
	leader := to
	for round := 1; round <= 2; round++ {
		stdout, stderr, code := runCLI(t, "raft", "remove-voter", "--id", leader, "--transfer", "--wait", "30s", "--json", bs)
		var rep membershipReport
		if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep.TransferredTo == "" || rep.TransferredTo == leader ||
			len(rep.Voters) != 3-round {
			t.Fatalf("round %d: remove-voter --id %s --transfer: exit %d\n%s%s", round, leader, code, stdout, stderr)
		}
		byID[leader].kill()
		leader = rep.TransferredTo
	}
	if got := raftVoters(t, bs); fmt.Sprint(got) != "["+leader+"]" {
		t.Errorf("voters after two removals: %v, want [%s]", got, leader)
	}
}
