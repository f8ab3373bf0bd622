package netfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The ports every ZooKeeper server listens on, each on its own node's
// address.
const (
	ZooKeeperClientPort   = 2181
	ZooKeeperPeerPort     = 2888
	ZooKeeperElectionPort = 3888
)

// ZooKeeper is a ZooKeeper ensemble whose servers run on nodes of a Net.
type ZooKeeper struct {
	Nodes []int   // the servers' node indexes, server i+1 on Nodes[i]
	Procs []*Proc // the servers' processes
	nt    *Net
}

// ConnectString is the ensemble's host:port list.
func (z *ZooKeeper) ConnectString() string {
	var a []string
	for _, n := range z.Nodes {
		a = append(a, z.nt.Nodes[n].Addr(ZooKeeperClientPort))
	}
	return strings.Join(a, ",")
}

// Mode is server i's role ("leader", "follower", ...), asked from the root
// namespace ("srvr"); empty when it does not answer.
func (z *ZooKeeper) Mode(i int) string {
	out, err := zktest.FourLetter(z.nt.Nodes[z.Nodes[i]].Addr(ZooKeeperClientPort), "srvr", time.Second)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// StartZooKeeper starts one ZooKeeper server on each of nodes (an
// ensemble of len(nodes), each bound to its node's address) and waits
// until every one serves. It skips t where java or the ZooKeeper jars are
// missing (fails it under CI=true; scripts/ensure-test-deps.sh installs
// them).
func (nt *Net) StartZooKeeper(nodes []int) *ZooKeeper {
	t := nt.t
	t.Helper()
	java, args, err := zktest.ServerCommand()
	testutil.RequireOrSkip(t, err == nil, "ZooKeeper server: %v", err)
	z := &ZooKeeper{Nodes: nodes, nt: nt}
	var servers strings.Builder
	for i, n := range nodes {
		fmt.Fprintf(&servers, "server.%d=%s:%d:%d\n", i+1, nt.Nodes[n].IP, ZooKeeperPeerPort, ZooKeeperElectionPort)
	}
	for i, n := range nodes {
		dir := filepath.Join(t.TempDir(), "zookeeper")
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		// Test timing (zktest's): a tick of 200 ms, session timeouts from
		// two ticks; no fsync per transaction.
		cfg := fmt.Sprintf("tickTime=%d\ninitLimit=25\nsyncLimit=10\ndataDir=%s\n"+
			"clientPort=%d\nclientPortAddress=%s\nquorumListenOnAllIPs=false\n"+
			"minSessionTimeout=400\nmaxSessionTimeout=60000\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"+
			"preAllocSize=1024\nforceSync=no\nmaxClientCnxns=0\nstandaloneEnabled=false\nreconfigEnabled=false\n%s",
			zktest.DefaultTickTime.Milliseconds(), filepath.Join(dir, "data"), ZooKeeperClientPort, nt.Nodes[n].IP, servers.String())
		if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		z.Procs = append(z.Procs, nt.Start(nt.Nodes[n], fmt.Sprintf("zookeeper %d", i+1), java, append(args, filepath.Join(dir, "zoo.cfg"))...))
	}
	for i := range nodes {
		testutil.WaitFor(t, 90*time.Second, fmt.Sprintf("ZooKeeper server %d to serve", i+1), func() bool {
			select {
			case <-z.Procs[i].Done():
				t.Fatalf("ZooKeeper server %d exited during start-up:\n%s", i+1, z.Procs[i].Out.String())
			default:
			}
			return z.Mode(i) != ""
		})
	}
	return z
}

// ZooKeeperFaults is the fault set against coordinators on the ZooKeeper
// backend (on nodes 0..2) and the ensemble z (on other nodes). The
// coordinators talk to ZooKeeper, not to each other, so the faults cut
// coordinators from the ensemble, and ensemble servers from each other.
func ZooKeeperFaults(z *ZooKeeper) []Fault {
	cutLeader := func(mode Mode) func(context.Context, *Net, int, []int) error {
		return func(_ context.Context, nt *Net, l int, _ []int) error { return nt.Partition([]int{l}, z.Nodes, mode) }
	}
	return []Fault{
		// The old leader's session expires; another coordinator takes over
		// at a higher epoch. Fencing: the old one writes nothing after.
		{Name: "zk-leader-cut-from-ensemble-drop", Inject: cutLeader(Drop), Fences: true},
		{Name: "zk-leader-cut-from-ensemble-refuse", Inject: cutLeader(Refuse), Fences: true},
		// A standby cut from the ensemble: the leader is not touched.
		{Name: "zk-follower-cut-from-ensemble-drop", Steady: true, Inject: func(_ context.Context, nt *Net, _ int, o []int) error {
			return nt.Partition([]int{o[0]}, z.Nodes, Drop)
		}},
		// The ZooKeeper leader cut from the other servers: the ensemble
		// elects another; sessions move to the servers of the quorum.
		{Name: "zk-server-leader-isolated-drop", Inject: func(_ context.Context, nt *Net, _ int, _ []int) error {
			for i, n := range z.Nodes {
				if z.Mode(i) == "leader" {
					var rest []int
					for _, m := range z.Nodes {
						if m != n {
							rest = append(rest, m)
						}
					}
					return nt.Partition([]int{n}, rest, Drop)
				}
			}
			return errors.New("netfault: no ZooKeeper server says it leads")
		}},
	}
}

// fence is what the fencing check saw: writes sent to the old leader
// directly (no redirect) once another coordinator led at a higher epoch.
type fence struct {
	acked, refused []string
	stale          []string // acknowledged while the old leader did not lead at a newer epoch
}

// fencing checks FIP-9 fencing during a fault that cuts the leader old
// from the ensemble (Fault.Fences): once another coordinator leads at a
// higher epoch, it sends writes (database creations) to the old leader
// directly until ctx ends. A write the old leader acknowledges while it
// does not lead again at a newer epoch is stale; one it refuses (not the
// leader, fenced) must never appear (checked after the heal by check).
func fencing(ctx context.Context, admin *adminclient.Client, cs []*Coordinator, old int, oldEpoch int64, tag string) (*fence, error) {
	var newEpoch int64
	for newEpoch == 0 {
		for _, v := range Views(ctx, admin, cs, 500*time.Millisecond) {
			if v.Err == nil && v.IsLeader && v.Index != old && v.Epoch > oldEpoch {
				newEpoch = v.Epoch
			}
		}
		if newEpoch == 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("fencing: no coordinator but %s led at an epoch above %d during the fault", cs[old].ID, oldEpoch)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	cc, err := grpc.NewClient(cs[old].Client, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	direct := adminv1.NewAdminServiceClient(cc)
	f := &fence{}
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("fence_%s_%d", tag, i)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := direct.CreateDatabase(cctx, &adminv1.CreateDatabaseRequest{Name: name})
		cancel()
		switch err = adminapi.FromStatus(err); {
		case err == nil:
			f.acked = append(f.acked, name)
			lctx, lc := context.WithTimeout(context.Background(), time.Second)
			r, lerr := admin.GetLeaderFrom(lctx, cs[old].Client)
			lc()
			if lerr != nil || !r.IsLeader || r.Epoch <= oldEpoch {
				f.stale = append(f.stale, fmt.Sprintf("%s (the old leader then: %v, error %v)", name, r, lerr))
			}
		case errors.Is(err, core.ErrNotLeader), errors.Is(err, core.ErrFenced):
			f.refused = append(f.refused, name)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return f, nil
}

// check lists the databases after the heal: every write the old leader
// acknowledged is there, none it refused is.
func (f *fence) check(ctx context.Context, admin *adminclient.Client) []string {
	have := map[string]bool{}
	err := admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		token := ""
		for {
			r, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{PageToken: token})
			if err != nil {
				return err
			}
			for _, n := range r.Names {
				have[n] = true
			}
			if token = r.NextPageToken; token == "" {
				return nil
			}
		}
	})
	if err != nil {
		return []string{fmt.Sprintf("fencing: list the databases after the heal: %v", err)}
	}
	var bad []string
	for _, s := range f.stale {
		bad = append(bad, "acknowledged by the old leader at a stale epoch: "+s)
	}
	for _, n := range f.acked {
		if !have[n] {
			bad = append(bad, "acknowledged by the old leader, missing after the heal: "+n)
		}
	}
	for _, n := range f.refused {
		if have[n] {
			bad = append(bad, "refused by the old (fenced) leader, present after the heal: "+n)
		}
	}
	return bad
}
