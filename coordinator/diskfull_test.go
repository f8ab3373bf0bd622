package coordinator_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestRaftLeaderDiskFull: the leading coordinator's coordinator.raft.dir,
// on a small real tmpfs, is filled below coordinator.raft.disk.min-free by
// another file. It hands the leadership over and stays up as a standby
// answering NOT_LEADER, with metaplane_raft_disk_full 1; the other two
// serve writes; once the file is removed it resumes by itself
// (metaplane_raft_disk_full 0) and has the writes made meanwhile.
func TestRaftLeaderDiskFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mnt := testutil.MountTmpfs(t, 96<<20)
	dir := filepath.Join(mnt, "raft")
	ms := startRaftClusterWith(t, ctx, 3, func(i int) []string {
		if i != 0 {
			return nil
		}
		return []string{"-D", "coordinator.raft.dir=" + dir, "-D", "coordinator.raft.disk.min-free=16mb"}
	})
	if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
		t.Fatalf("coordinator 1 keeps nothing on the tmpfs (%v): the test would prove nothing", err)
	}
	full := ms[0]
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.client)
	}
	c, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Coordinator 1 leads first, so that the full disk costs a leader.
	testutil.WaitFor(t, 60*time.Second, "coordinator 1 leading", func() bool {
		st, err := raftStatusOf(ctx, full)
		if err == nil && st.GetRole() == "leader" && waitLeaderIs(ctx, c, full.client) {
			return true
		}
		_ = c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.TransferRaftLeadership(ctx, &adminv1.TransferRaftLeadershipRequest{ToId: full.id})
			return err
		})
		return false
	})
	create := func(name string) error {
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		err := c.Admin(wctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
			return err
		})
		if errors.Is(err, core.ErrNodeExists) {
			return nil // an earlier attempt with another request id applied it
		}
		return err
	}
	if err := create("before"); err != nil {
		t.Fatal(err)
	}

	filler := testutil.FillDisk(t, mnt, 8<<20)
	base := metricsURL(t, full)
	testutil.WaitFor(t, 30*time.Second, "coordinator 1 paused (metaplane_raft_disk_full 1)", func() bool {
		_, body := httpGet(t, base+"/metrics")
		return strings.Contains(body, "\nmetaplane_raft_disk_full 1")
	})
	testutil.WaitFor(t, 60*time.Second, "another coordinator serving", func() bool {
		return create("during") == nil && c.Leader() != full.client
	})
	testutil.WaitFor(t, 30*time.Second, "coordinator 1 answering NOT_LEADER naming the leader or its full disk", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := full.admin.CreateDatabase(cctx, &adminv1.CreateDatabaseRequest{Name: "refused"})
		addr, ok := adminapi.NotLeaderAddress(err)
		return ok && ((addr != "" && addr != full.client) || strings.Contains(err.Error(), "paused its Raft replica: disk full on voter 1"))
	})
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	gl, err := full.admin.GetLeader(gctx, &adminv1.GetLeaderRequest{})
	gcancel()
	if err != nil || gl.GetLeaderAddress() == full.client || gl.GetIsLeader() {
		t.Fatalf("the paused coordinator's GetLeader: %v, %v; want it not to name itself", gl, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, "coordinator 1 resumed (metaplane_raft_disk_full 0) and caught up", func() bool {
		_, body := httpGet(t, base+"/metrics")
		if !strings.Contains(body, "\nmetaplane_raft_disk_full 0") {
			return false
		}
		st, err := raftStatusOf(ctx, full)
		return err == nil && st.GetLeaderId() != "" && st.GetLeaderId() != full.id
	})
	var dbs *adminv1.ListDatabasesResponse
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		var err error
		dbs, err = a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		return err
	}); err != nil || strings.Join(dbs.GetNames(), ",") != "before,during" {
		t.Fatalf("databases after the resume: %v, %v; want before,during", dbs, err)
	}
	if _, err := full.admin.ListDatabases(ctx, &adminv1.ListDatabasesRequest{}); err != nil && !errors.Is(adminapi.FromStatus(err), core.ErrNotLeader) {
		t.Fatalf("the resumed coordinator answered %v, want an answer or NOT_LEADER", err)
	}
}

// waitLeaderIs reports whether the admin client's leader is addr after a
// read.
func waitLeaderIs(ctx context.Context, c *adminclient.Client, addr string) bool {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		return err
	})
	return err == nil && c.Leader() == addr
}
