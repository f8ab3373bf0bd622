package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestAddVoterJoin: AddVoter adds a fourth member as non-voting, waits
// until it (started with coordinator.raft.join and a client, whose session
// renewals report its progress) has caught up, then promotes it to voter.
// A duplicate id or address, a follower's call, and a member that never
// starts are refused with the voter set unchanged; RemoveVoter refuses the
// leader and takes the fourth member out again.
func TestAddVoterJoin(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	cl := c.client(leader)
	ctx := testutil.Context(t, 20*time.Second)
	if _, _, err := core.Create(ctx, cl, "/before-join", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kinds := func() map[string]core.MemberKind {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]core.MemberKind{}
		for _, m := range st.Members {
			out[m.ID] = m.Kind
		}
		return out
	}
	v4 := Voter{ID: 4, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	if err := c.client((leader+1)%3).AddVoter(ctx, "4", v4.Address); !errors.Is(err, core.ErrNotLeader) {
		t.Fatalf("AddVoter on a follower: got %v, want ErrNotLeader", err)
	}
	for _, bad := range []struct{ id, addr, says string }{
		{"1", v4.Address, "in the membership already"},
		{"4", c.voters[0].Address, "is member 1's"},
	} {
		if err := cl.AddVoter(ctx, bad.id, bad.addr); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("AddVoter(%s, %s): %v, want ErrInvalidArgument %q", bad.id, bad.addr, err, bad.says)
		}
	}
	// A member that is never started does not catch up: removed again.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := cl.AddVoter(tctx, "9", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)))
	cancel()
	if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "did not catch up") {
		t.Fatalf("AddVoter of a member never started: %v", err)
	}
	if k := kinds(); len(k) != 3 || k["9"] != "" {
		t.Fatalf("members after a refused add: %v", k)
	}

	o := testOptions(filepath.Join(t.TempDir(), "m4"), 4, append(append([]Voter(nil), c.voters...), v4))
	o.Join = true
	p4 := NewProvider(o)
	added := make(chan error, 1)
	go func() { added <- cl.AddVoter(ctx, "4", v4.Address) }()
	testutil.WaitFor(t, 20*time.Second, "member 4 non-voting", func() bool { return kinds()["4"] == core.MemberNonVoting })
	if err := p4.Start(ctx, nil); err != nil {
		t.Fatalf("start the joining member: %v", err)
	}
	t.Cleanup(func() { p4.Close() })
	// Its client's session renewals report its progress.
	(&cluster{t: t, members: []*Provider{p4}}).client(0)
	if err := <-added; err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	if k := kinds(); len(k) != 4 || k["4"] != core.MemberVoter {
		t.Fatalf("members after the add: %v", k)
	}
	v, err := p4.m.nh.StaleRead(shardID, fsm.GetManyQuery{Paths: []string{"/before-join"}})
	if err != nil || v.(*fsm.GetManyAnswer).Results[0].Err != nil {
		t.Fatalf("the new voter lacks /before-join: %v", err)
	}
	// Once it has seen its promotion it drops its non-voting marker, and
	// restarts as a voter: it applies a write made while it was down.
	testutil.WaitFor(t, 10*time.Second, "member 4's non-voting marker removed", func() bool {
		_, err := os.Stat(filepath.Join(o.Dir, nonVotingFile))
		return errors.Is(err, os.ErrNotExist)
	})
	p4.Close()
	if _, _, err := core.Create(ctx, cl, "/while-4-down", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p4 = NewProvider(o)
	if err := p4.Start(ctx, nil); err != nil {
		t.Fatalf("restart member 4: %v", err)
	}
	t.Cleanup(func() { p4.Close() })
	testutil.WaitFor(t, 20*time.Second, "the restarted voter applying /while-4-down", func() bool {
		v, err := p4.m.nh.StaleRead(shardID, fsm.GetManyQuery{Paths: []string{"/while-4-down"}})
		return err == nil && v.(*fsm.GetManyAnswer).Results[0].Err == nil
	})
	if k := kinds(); k["4"] != core.MemberVoter {
		t.Fatalf("member 4 after its restart: %v", k)
	}
	if err := cl.RemoveVoter(ctx, fmt.Sprint(leader+1)); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "is the leader") {
		t.Errorf("RemoveVoter of the leader: %v", err)
	}
	if err := cl.RemoveVoter(ctx, "4"); err != nil {
		t.Fatalf("RemoveVoter: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "three members", func() bool { return len(kinds()) == 3 })
}

// TestJoinLearnsClusterID: a joiner whose coordinator.raft.voters is not
// the list the cluster was bootstrapped with (it also lists a member that
// never existed) joins when told the cluster's id
// (coordinator.raft.cluster-id, as its coordinator learns it from the
// running voters); restarted with another id, it refuses to start naming
// both, and its directory is left as it was.
func TestJoinLearnsClusterID(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	cl := c.client(leader)
	ctx := testutil.Context(t, 20*time.Second)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cid, err := strconv.ParseUint(st.ClusterID, 10, 64)
	if err != nil {
		t.Fatalf("cluster id %q: %v", st.ClusterID, err)
	}
	v4 := Voter{ID: 4, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	ghost := Voter{ID: 7, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	voters := append(append([]Voter(nil), c.voters...), ghost, v4)
	if deriveClusterID(voters[:4]) == cid {
		t.Fatal("the test's voter list derives the cluster's id: it proves nothing")
	}
	o := testOptions(filepath.Join(t.TempDir(), "m4"), 4, voters)
	o.Join, o.ClusterID = true, cid
	p4 := NewProvider(o)
	added := make(chan error, 1)
	go func() { added <- cl.AddVoter(ctx, "4", v4.Address) }()
	if err := p4.Start(ctx, nil); err != nil {
		t.Fatalf("start the joining member: %v", err)
	}
	(&cluster{t: t, members: []*Provider{p4}}).client(0)
	if err := <-added; err != nil {
		t.Fatalf("AddVoter of a joiner told the cluster id: %v", err)
	}
	if st, err := p4.Status(); err != nil || st.ClusterID != strconv.FormatUint(cid, 10) {
		t.Fatalf("joiner's cluster id: %+v, %v; want %d", st.ClusterID, err, cid)
	}
	p4.Close()

	wrong := o
	wrong.ClusterID = cid + 1
	err = NewProvider(wrong).Start(ctx, nil)
	if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprint(cid+1)) || !strings.Contains(err.Error(), fmt.Sprint(cid)) {
		t.Fatalf("restart with another cluster id: %v, want ErrInvalidArgument naming both", err)
	}
	if got, err := readClusterID(o.Dir); err != nil || got != cid {
		t.Fatalf("cluster id in the directory after the refusal: %d, %v; want %d", got, err, cid)
	}
	p4 = NewProvider(o)
	if err := p4.Start(ctx, nil); err != nil {
		t.Fatalf("restart with the right cluster id: %v", err)
	}
	t.Cleanup(func() { p4.Close() })
}
