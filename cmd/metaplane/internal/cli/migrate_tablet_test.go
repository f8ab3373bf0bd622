package cli

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// tabletState waits until the tablet server at addr reports a state ok
// accepts, and returns it.
func tabletState(t *testing.T, tc adminv1.TabletServiceClient, what string, ok func(*adminv1.GetTabletServerStateResponse) bool) *adminv1.GetTabletServerStateResponse {
	t.Helper()
	var st *adminv1.GetTabletServerStateResponse
	testutil.WaitFor(t, 60*time.Second, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		st, err = tc.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
		return err == nil && ok(st)
	})
	return st
}

func tabletClient(t *testing.T, addr string) adminv1.TabletServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminv1.NewTabletServiceClient(cc)
}

// TestTabletServerFollowsTheMigration: a tablet server process that
// followed a ZooKeeper cluster (and saw its coordinator's epoch) accepts
// the epoch of the Raft coordinator elected on the live-migrated copy and
// refuses the ZooKeeper one afterwards; restarted with the Raft
// configuration, it registers through the Raft coordinator and follows
// its metadata (the migrated table in its view, the Raft epoch).
func TestTabletServerFollowsTheMigration(t *testing.T) {
	srv, bin, dir := migrationSetup(t)
	zkCfg, raftCfg := liveConfigs(t, srv, bin, dir, "/ts-test")

	bs, _ := coordinatorProc(t, dir, "--config", zkCfg)
	tsAddr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	ts, _, _ := startTabletServerProcess(t, "--config", zkCfg, "--id", "1", "--listen", tsAddr)
	tc := tabletClient(t, tsAddr)
	tabletState(t, tc, "the tablet server registers on ZooKeeper", func(st *adminv1.GetTabletServerStateResponse) bool { return st.Registered })
	mustCLI(t, "admin", "create-database", "shop", bs)
	mustCLI(t, "admin", "create-table", "shop.orders", "--column", "id:BIGINT", "--primary-key", "id", "--buckets", "3", bs)
	zkEpoch := jsonInt(t, mustCLI(t, "admin", "leader", "--json", bs), "epoch")
	tabletState(t, tc, "the tablet server follows the ZooKeeper coordinator", func(st *adminv1.GetTabletServerStateResponse) bool {
		return st.CoordinatorEpoch == zkEpoch && slices.Contains(st.Tables, "shop.orders")
	})

	out := mustCLI(t, "zk-to-raft-live-migrate", "--from", zkCfg, "--to", raftCfg, "--no-env", "--json")
	var res struct {
		SourceEpoch int64 `json:"source_epoch"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	rbs, _ := coordinatorProc(t, dir, "--config", raftCfg)
	raftEpoch := jsonInt(t, mustCLI(t, "admin", "leader", "--json", rbs), "epoch")
	if raftEpoch <= zkEpoch {
		t.Fatalf("the Raft leader's epoch %d is not above the ZooKeeper coordinator's %d", raftEpoch, zkEpoch)
	}

	// The tablet server that saw the ZooKeeper epoch takes the Raft
	// coordinator's request, and from then on refuses the ZooKeeper one.
	notify := func(epoch int64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := tc.NotifyLeaderAndIsr(ctx, &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: epoch, CoordinatorId: "raft-coordinator"})
		return adminapi.FromStatus(err)
	}
	if err := notify(raftEpoch); err != nil {
		t.Fatalf("the tablet server refused the Raft coordinator's epoch %d (it saw %d): %v", raftEpoch, zkEpoch, err)
	}
	var stale *adminapi.InvalidCoordinatorError
	if err := notify(zkEpoch); !errors.As(err, &stale) {
		t.Errorf("after the Raft epoch, the ZooKeeper coordinator's epoch %d: %v, want InvalidCoordinatorError", zkEpoch, err)
	}

	// Restarted with the Raft configuration, it follows the Raft metadata.
	ts.Process.Kill()
	seed := strings.TrimPrefix(rbs, "--bootstrap-servers=")
	tsAddr2 := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	startTabletServerProcess(t, "-D", "metadata.backend.plugin.dir="+bin, "-D", "coordinator.seed.nodes="+seed, "--id", "1", "--listen", tsAddr2)
	st := tabletState(t, tabletClient(t, tsAddr2), "the restarted tablet server follows the Raft coordinator", func(st *adminv1.GetTabletServerStateResponse) bool {
		return st.Registered && st.CoordinatorEpoch >= raftEpoch && slices.Contains(st.Tables, "shop.orders")
	})
	if st.Backend != "raft" {
		t.Errorf("the restarted tablet server's backend is %q", st.Backend)
	}
	if ls := mustCLI(t, "admin", "list-tablet-servers", rbs); !strings.Contains(ls, tsAddr2) {
		t.Errorf("the Raft coordinator does not list the re-registered tablet server:\n%s", ls)
	}
}
