package raft

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestAddVoterJoin: a fourth voter added on the leader and started with
// coordinator.raft.join catches up and becomes a member; RemoveVoter takes
// it out again. AddVoter on a follower fails with ErrNotLeader.
func TestAddVoterJoin(t *testing.T) {
	c := startCluster(t, 3, nil)
	leader := c.waitLeader()
	cl := c.client(leader)
	ctx := ctxT(t)
	if _, _, err := core.Create(ctx, cl, "/before-join", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v4 := Voter{ID: 4, Address: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	if err := c.client((leader+1)%3).AddVoter(ctx, "4", v4.Address); !errors.Is(err, core.ErrNotLeader) {
		t.Fatalf("AddVoter on a follower: got %v, want ErrNotLeader", err)
	}
	if err := cl.AddVoter(ctx, "4", v4.Address); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	o := testOptions(filepath.Join(t.TempDir(), "m4"), 4, append(append([]Voter(nil), c.voters...), v4))
	o.Join = true
	p4 := NewProvider(o)
	if err := p4.Start(ctx, nil); err != nil {
		t.Fatalf("start the joining voter: %v", err)
	}
	t.Cleanup(func() { p4.Close() })
	testutil.WaitFor(t, 20*time.Second, "the joined voter to catch up", func() bool {
		v, err := p4.m.nh.StaleRead(shardID, getManyQuery{paths: []string{"/before-join"}})
		return err == nil && v.(*getManyAnswer).results[0].Err == nil
	})
	st, err := cl.Status(ctx)
	if err != nil || len(st.Members) != 4 {
		t.Fatalf("members after the join: %+v %v", st.Members, err)
	}
	if err := cl.RemoveVoter(ctx, "4"); err != nil {
		t.Fatalf("RemoveVoter: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "three members", func() bool {
		st, err := cl.Status(ctx)
		return err == nil && len(st.Members) == 3
	})
}
