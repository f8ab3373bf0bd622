package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestRaftGrowToFiveAndBack grows a three-voter cluster of real coordinator
// processes to five with `raft add-voter` and shrinks it back to three with
// `raft remove-voter`, the operator path of docs/raft.md; the cluster keeps
// taking writes at every size and `raft status` reports every voter
// reachable.
func TestRaftGrowToFiveAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ps := startRaftCoordinators(t, 3)
	bs := bootstrapOf(ps)
	waitRaftHealthy(t, bs, 3)
	client, err := adminclient.NewClient(strings.Split(strings.TrimPrefix(bs, "--bootstrap-servers="), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	write := func(name string) {
		t.Helper()
		if err := createDatabase(context.Background(), client, name, 30*time.Second); err != nil {
			t.Fatalf("create database %s: %v", name, err)
		}
	}
	write("at3")

	// Each joining member lists the membership as it is when it joins
	// (the fifth lists the fourth too, which the cluster was not
	// bootstrapped with): its coordinator learns the cluster id from the
	// seeds (docs/raft.md, Restart, join, and the cluster id) instead of
	// deriving it from that list.
	var voters, seeds []string
	for _, p := range ps {
		voters = append(voters, p.id+"@"+p.raft)
		seeds = append(seeds, p.client)
	}
	var added []*raftProc
	for _, id := range []string{"4", "5"} {
		port := testutil.FreePort(t)
		p := &raftProc{id: id, client: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), raft: fmt.Sprintf("127.0.0.1:%d", port)}
		seeds = append(seeds, p.client)
		spawnRaftProc(t, p, strings.Join(seeds, ","), strings.Join(append(voters, id+"@"+p.raft), ","), port, "coordinator.raft.join=true")
		stdout, stderr, code := runCLI(t, "raft", "add-voter", "--id", id, "--address", p.raft, "--json", bs)
		var rep membershipReport
		if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Kind != "voter" {
			t.Fatalf("add-voter --id %s: exit %d\n%s%s", id, code, stdout, stderr)
		}
		added = append(added, p)
		voters = append(voters, id+"@"+p.raft)
		write("at" + id)
	}
	st := waitRaftHealthy(t, bs, 5)
	if got := raftVoters(t, bs); fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("voters after the joins: %v", got)
	}
	if len(st.Members) != 5 {
		t.Fatalf("status lists %d members, want 5: %+v", len(st.Members), st.Members)
	}

	// Back to three: a member counts as caught up once it has reported its
	// progress; until then the removal waits, within --wait.
	for i := len(added) - 1; i >= 0; i-- {
		p := added[i]
		stdout, stderr, code := runCLI(t, "raft", "remove-voter", "--id", p.id, "--transfer", "--wait", "60s", bs)
		if code != ExitOK || !strings.Contains(stdout, "member "+p.id+" removed") {
			t.Fatalf("remove-voter --id %s: exit %d\n%s%s", p.id, code, stdout, stderr)
		}
		p.kill()
	}
	waitRaftHealthy(t, bs, 3)
	if got := raftVoters(t, bs); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("voters after the removals: %v", got)
	}
	write("back3")
	var names []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		resp, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		if err == nil {
			names = resp.Names
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"at3", "at4", "at5", "back3"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("database %s missing after 3 -> 5 -> 3: %v", want, names)
		}
	}
}
