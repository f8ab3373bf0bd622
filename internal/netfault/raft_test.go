package netfault_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/netfault"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// seed is METAPLANE_FAULTS_SEED, or one from the clock (logged).
func seed(t *testing.T) uint64 {
	if s := os.Getenv("METAPLANE_FAULTS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("METAPLANE_FAULTS_SEED=%q: %v", s, err)
		}
		return v
	}
	v := uint64(time.Now().UnixNano())
	t.Logf("seed %d (METAPLANE_FAULTS_SEED to repeat)", v)
	return v
}

// full says whether the whole set runs (make faults).
func full() bool { return os.Getenv("METAPLANE_FAULTS") != "" }

// hold is how long each fault of the whole set holds
// (METAPLANE_FAULTS_HOLD, a duration, default 5s).
func hold(t *testing.T) time.Duration {
	if s := os.Getenv("METAPLANE_FAULTS_HOLD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("METAPLANE_FAULTS_HOLD=%q: %v", s, err)
		}
		return d
	}
	return 5 * time.Second
}

// TestRaftFaultShort is the short scenario `make test` runs on the Raft
// backend: three coordinators, each in its own namespace, the leader's
// link to one follower refused with TCP resets both ways for three
// seconds (the leader keeps its majority: no leader change), under a
// checked history.
func TestRaftFaultShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three coordinators in network namespaces")
	}
	nt := netfault.New(t, 3)
	cs := nt.StartRaftCoordinators([]int{0, 1, 2})
	netfault.Scenario{Net: nt, Coords: cs, Fault: netfault.FaultByName("leader-follower-refuse-both"), Seed: seed(t),
		Warm: time.Second, Hold: 3 * time.Second, After: time.Second}.Run(t)
}

// TestRaftFaults runs every fault of the set on the Raft backend, each on
// a fresh cluster (make faults; METAPLANE_FAULTS=1).
func TestRaftFaults(t *testing.T) {
	if !full() {
		t.Skip("the whole set runs under make faults (METAPLANE_FAULTS=1)")
	}
	sd := seed(t)
	var rs []netfault.Result
	for i, f := range netfault.Faults() {
		t.Run(f.Name, func(t *testing.T) {
			nt := netfault.New(t, 3)
			cs := nt.StartRaftCoordinators([]int{0, 1, 2})
			rs = append(rs, netfault.Scenario{Net: nt, Coords: cs, Fault: f, Seed: sd + uint64(i),
				Warm: 2 * time.Second, Hold: hold(t), After: 2 * time.Second}.Run(t))
		})
	}
	t.Logf("raft summary (fault | leader changes | longest gap between acknowledged writes | operations | violations):\n%s", netfault.Summary(rs))
}

// TestRaftIsolatedLeaderStatus: a leader cut off from both followers
// (packets dropped both ways; the clients still reach it) never says it
// reaches a quorum: from the cut on, its NOT_LEADER answers either name no
// quorum or are not given yet (it still believes it leads), and within a
// few election timeouts both its answers and its Raft status name the two
// voters it cannot reach. After the heal a coordinator leads again.
func TestRaftIsolatedLeaderStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three coordinators in network namespaces")
	}
	nt := netfault.New(t, 3)
	cs := nt.StartRaftCoordinators([]int{0, 1, 2})
	admin, err := adminclient.NewClient(netfault.Addrs(cs))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	l, _ := netfault.WaitLeader(t, admin, cs, 90*time.Second)
	old := cs[l]
	cc, err := grpc.NewClient(old.Client, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	direct := adminv1.NewAdminServiceClient(cc)
	var others []string
	for i, c := range cs {
		if i != l {
			others = append(others, fmt.Sprintf("voter %s at %s", c.ID, c.Raft))
		}
	}
	if err := nt.Isolate(l, netfault.Drop); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	var answer string
	var view *adminv1.GetCoordinatorRaftStatusResponse
	testutil.WaitFor(t, 15*time.Second, "the isolated leader to name the voters it cannot reach", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := direct.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "isolated", IgnoreIfExists: true})
		if err != nil {
			answer = adminapi.FromStatus(err).Error()
			if strings.Contains(answer, "(a quorum)") {
				t.Fatalf("%v after the cut, the isolated leader says it reaches a quorum: %s", time.Since(cut).Round(time.Millisecond), answer)
			}
		} else {
			answer = "" // still served: it has not stepped down yet
		}
		view, err = admin.RaftStatusFrom(ctx, old.Client)
		if err != nil || view.GetRole() == "leader" {
			return false
		}
		unreachable := 0
		for _, m := range view.GetMembers() {
			if m.GetId() != view.GetMemberId() && m.GetKind() == "voter" && !m.GetReachable() {
				unreachable++
			}
		}
		if unreachable != 2 {
			return false
		}
		for _, o := range others {
			if !strings.Contains(answer, o) {
				return false
			}
		}
		return strings.Contains(answer, "has no quorum")
	})
	t.Logf("%v after the cut: %s", time.Since(cut).Round(time.Millisecond), answer)
	if err := nt.Heal(); err != nil {
		t.Fatal(err)
	}
	netfault.WaitLeader(t, admin, cs, 30*time.Second)
}
