package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// raftMember is one coordinator process of a Raft cluster under test.
type raftMember struct {
	id     string // its Raft replica id
	client string // its client listener
	p      *proc
	admin  adminv1.AdminServiceClient
	health healthpb.HealthClient
}

// startRaftCluster starts n coordinators on the Raft backend as real
// processes (each with its plugin process) on loopback, and waits until
// one serves as leader.
func startRaftCluster(t *testing.T, ctx context.Context, n int) []*raftMember {
	t.Helper()
	return startRaftClusterWith(t, ctx, n, nil)
}

// startRaftClusterWith is startRaftCluster with extra(i) appended to the
// arguments of coordinator i (0-based; nil: none).
func startRaftClusterWith(t *testing.T, ctx context.Context, n int, extra func(i int) []string) []*raftMember {
	t.Helper()
	bin := testutil.Binary(t, "metaplane")
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	resetPorts()
	clients := make([]string, n)
	for i := range clients {
		clients[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	}
	argv := make([][]string, n)
	for i := 0; i < n; i++ {
		args := []string{"coordinator", "--no-env", "-D", "metadata.backend.plugin.dir=" + pluginDir,
			"-D", "metrics.address=127.0.0.1:0", "-D", "bind.listeners=CLIENT://" + clients[i],
			"-D", "coordinator.seed.nodes=" + strings.Join(clients, ","),
			"-D", "coordinator.raft.voters=" + raftVoters(t, n),
			"-D", "coordinator.raft.node.id=" + strconv.Itoa(i+1),
			"-D", "coordinator.raft.port=" + strconv.Itoa(raftPort(t, i)),
			"-D", "coordinator.raft.dir=" + filepath.Join(t.TempDir(), "raft")}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		argv[i] = args
	}
	if n > 1 {
		// Format every member's directory before any starts.
		testutil.RaftBootstrap(t, bin, argv...)
	}
	var ms []*raftMember
	for i, args := range argv {
		m := &raftMember{id: strconv.Itoa(i + 1), client: clients[i],
			p: startProc(t, fmt.Sprintf("coordinator-%d", i+1), bin, args...)}
		cc, err := grpc.NewClient(clients[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		m.admin, m.health = adminv1.NewAdminServiceClient(cc), healthpb.NewHealthClient(cc)
		ms = append(ms, m)
	}
	c, err := adminclient.NewClient(clients)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitServingLeader(t, ctx, c, "")
	return ms
}

func raftStatusOf(ctx context.Context, m *raftMember) (*adminv1.GetCoordinatorRaftStatusResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return m.admin.GetCoordinatorRaftStatus(cctx, &adminv1.GetCoordinatorRaftStatusRequest{})
}

func healthOf(ctx context.Context, m *raftMember, service string) healthpb.HealthCheckResponse_ServingStatus {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := m.health.Check(cctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return r.Status
}

// metricsURL is the base URL of the member's metrics listener, as it
// printed it.
func metricsURL(t *testing.T, m *raftMember) string {
	t.Helper()
	for _, line := range strings.Split(m.p.out.String(), "\n") {
		if i := strings.Index(line, "metrics:  "); i >= 0 {
			return strings.TrimSuffix(strings.TrimSpace(line[i+len("metrics:  "):]), "/metrics")
		}
	}
	t.Fatalf("%s printed no metrics address", m.p.name)
	return ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leaderOf waits until the members in alive agree on a leader among them
// that answers GetCoordinatorRaftStatus with view LEADER, and returns it.
func leaderOf(t *testing.T, ctx context.Context, alive []*raftMember) *raftMember {
	t.Helper()
	var leader *raftMember
	testutil.WaitFor(t, 60*time.Second, "a Raft leader answering as such", func() bool {
		leader = nil
		for _, m := range alive {
			st, err := raftStatusOf(ctx, m)
			if err != nil {
				return false
			}
			if st.View == adminv1.RaftStatusView_RAFT_STATUS_VIEW_LEADER {
				if st.MemberId != m.id || leader != nil {
					return false
				}
				leader = m
			}
		}
		return leader != nil
	})
	return leader
}

func without(ms []*raftMember, drop *raftMember) []*raftMember {
	var out []*raftMember
	for _, m := range ms {
		if m != drop {
			out = append(out, m)
		}
	}
	return out
}

// TestRaftStatusAndHealth runs a three-voter cluster of real coordinator
// processes: GetCoordinatorRaftStatus on every member, the health service
// and probes per role, the metrics by role; then the leader is SIGKILLed
// (the survivors answer, a new leader's view shows the dead member
// unreachable, health follows the new leader), then a second member (the
// last one answers with its own view, LOCAL, and reports no leader).
func TestRaftStatusAndHealth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ms := startRaftCluster(t, ctx, 3)
	leader := leaderOf(t, ctx, ms)

	// Every member answers, with one cluster id and the three voters.
	var clusterID string
	for _, m := range ms {
		st, err := raftStatusOf(ctx, m)
		if err != nil {
			t.Fatalf("status on %s: %v", m.id, err)
		}
		if st.MemberId != m.id || st.Backend != "raft" || st.Term <= 0 || st.ClusterId == "" {
			t.Errorf("status on %s: member %q backend %q term %d cluster %q", m.id, st.MemberId, st.Backend, st.Term, st.ClusterId)
		}
		if clusterID == "" {
			clusterID = st.ClusterId
		} else if st.ClusterId != clusterID {
			t.Errorf("status on %s: cluster id %s, another member said %s", m.id, st.ClusterId, clusterID)
		}
		if st.LeaderId != leader.id {
			t.Errorf("status on %s names leader %q, want %s", m.id, st.LeaderId, leader.id)
		}
		if want := adminv1.RaftStatusView_RAFT_STATUS_VIEW_LOCAL; m != leader && st.View != want {
			t.Errorf("status on follower %s: view %v, want %v", m.id, st.View, want)
		}
		if len(st.Members) != 3 {
			t.Fatalf("status on %s: %d members, want 3: %v", m.id, len(st.Members), st.Members)
		}
		for i, mm := range st.Members {
			if mm.Id != strconv.Itoa(i+1) || mm.Kind != "voter" || mm.Address == "" {
				t.Errorf("status on %s: member %d is %+v, want voter %d with an address", m.id, i, mm, i+1)
			}
			if mm.Id == m.id && (!mm.Reachable || mm.MatchIndex != st.AppliedIndex) {
				t.Errorf("status on %s: itself %+v, want reachable at its applied index %d", m.id, mm, st.AppliedIndex)
			}
		}
	}
	// The leader's view: every member reachable (once its connections are
	// up).
	testutil.WaitFor(t, 30*time.Second, "the leader seeing every member reachable", func() bool {
		st, err := raftStatusOf(ctx, leader)
		if err != nil {
			return false
		}
		for _, mm := range st.Members {
			if !mm.Reachable || mm.LastContactAgeMs < 0 {
				return false
			}
		}
		return true
	})

	// Health: overall SERVING everywhere, the admin service on the leader
	// only.
	checkHealth := func(alive []*raftMember, leader *raftMember) {
		t.Helper()
		testutil.WaitFor(t, 30*time.Second, "health by role", func() bool {
			for _, m := range alive {
				want := healthpb.HealthCheckResponse_NOT_SERVING
				if m == leader {
					want = healthpb.HealthCheckResponse_SERVING
				}
				if healthOf(ctx, m, "") != healthpb.HealthCheckResponse_SERVING || healthOf(ctx, m, coordinator.AdminServiceName) != want {
					return false
				}
			}
			return true
		})
	}
	checkHealth(ms, leader)
	for _, m := range ms {
		base := metricsURL(t, m)
		if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz: %d %s", m.id, code, body)
		}
		code, body := httpGet(t, base+"/readyz")
		wantBody := "standby; leader "
		if m == leader {
			wantBody = "leader"
		}
		if code != http.StatusOK || !strings.HasPrefix(body, wantBody) {
			t.Errorf("%s /readyz: %d %q, want 200 %q...", m.id, code, body, wantBody)
		}
		_, metrics := httpGet(t, base+"/metrics")
		for _, w := range []string{"metaplane_build_info{", "metaplane_raft_term ", "metaplane_raft_applied_index ",
			"metaplane_raft_commit_index ", "metaplane_raft_apply_lag_entries ", "metaplane_raft_disk_full 0", "metaplane_coordinator_leader_changes_total ",
			"metaplane_raft_proposals_failed_total ", `grpc_server_handling_seconds_bucket{grpc_method="GetCoordinatorRaftStatus"`} {
			if !strings.Contains(metrics, w) {
				t.Errorf("metrics of %s lack %q", m.id, w)
			}
		}
		// The gRPC request metrics counted the status calls made above.
		const handled = `grpc_server_handled_total{grpc_code="OK",grpc_method="GetCoordinatorRaftStatus",grpc_service="metaplane.admin.v1.AdminService",grpc_type="unary"} `
		if i := strings.Index(metrics, handled); i < 0 || strings.HasPrefix(metrics[i+len(handled):], "0\n") {
			t.Errorf("metrics of %s: no GetCoordinatorRaftStatus counted in grpc_server_handled_total", m.id)
		}
		role := "follower"
		if m == leader {
			role = "leader"
		}
		if w := fmt.Sprintf(`metaplane_raft_role{role=%q} 1`, role); !strings.Contains(metrics, w) {
			t.Errorf("metrics of %s lack %q", m.id, w)
		}
		if m != leader {
			for _, leaderOnly := range []string{"metaplane_raft_follower_lag_entries{", "metaplane_raft_follower_last_contact_seconds{", "raftFollowerLag{"} {
				if strings.Contains(metrics, leaderOnly) {
					t.Errorf("follower %s exports the leader-only %q", m.id, leaderOnly)
				}
			}
		} else if !strings.Contains(metrics, "metaplane_raft_follower_last_contact_seconds{") {
			t.Errorf("leader %s lacks metaplane_raft_follower_last_contact_seconds", m.id)
		}
	}

	// SIGKILL the leader: the survivors answer, a new leader's view shows
	// the dead member unreachable, health follows.
	dead := leader
	dead.p.group(syscall.SIGKILL)
	<-dead.p.done
	alive := without(ms, dead)
	leader = leaderOf(t, ctx, alive)
	if leader == dead {
		t.Fatalf("the dead member %s answers as leader", dead.id)
	}
	testutil.WaitFor(t, 30*time.Second, "the new leader seeing the dead member unreachable", func() bool {
		st, err := raftStatusOf(ctx, leader)
		if err != nil {
			return false
		}
		for _, mm := range st.Members {
			if mm.Reachable != (mm.Id != dead.id) {
				return false
			}
		}
		return true
	})
	checkHealth(alive, leader)
	// The new leader has seen at least two leaders: the first and itself.
	_, metrics := httpGet(t, metricsURL(t, leader)+"/metrics")
	if m := regexp.MustCompile(`(?m)^metaplane_coordinator_leader_changes_total (\d+)`).FindStringSubmatch(metrics); m == nil || atoi(m[1]) < 2 {
		t.Errorf("the new leader's metaplane_coordinator_leader_changes_total: %v, want at least 2", m)
	}

	// A second SIGKILL: the last member answers with its own view, no
	// leader, and its admin service and readiness say so.
	dead2 := leader
	dead2.p.group(syscall.SIGKILL)
	<-dead2.p.done
	last := without(alive, dead2)[0]
	testutil.WaitFor(t, 30*time.Second, "the last member answering with its own view and no leader", func() bool {
		st, err := raftStatusOf(ctx, last)
		return err == nil && st.View == adminv1.RaftStatusView_RAFT_STATUS_VIEW_LOCAL && st.LeaderId == "" && st.MemberId == last.id
	})
	if s := healthOf(ctx, last, coordinator.AdminServiceName); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("the last member's admin health: %v, want NOT_SERVING", s)
	}
	if s := healthOf(ctx, last, ""); s != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("the last member's overall health: %v, want SERVING (the process is up)", s)
	}
	if code, body := httpGet(t, metricsURL(t, last)+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("the last member's /readyz: %d %q, want 503", code, body)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// checkRaftStatusRPC: every coordinator answers GetCoordinatorRaftStatus
// on Raft; on ZooKeeper (no ConsensusStatus) each answers UNIMPLEMENTED
// naming the backend.
func checkRaftStatusRPC(t *testing.T, ctx context.Context, clients []string, backend string) {
	t.Helper()
	for _, addr := range clients {
		// A standby may still be opening its backend client (on Raft a
		// session through the quorum, slow on a loaded machine): it
		// answers UNAVAILABLE saying so until it has.
		var st *adminv1.GetCoordinatorRaftStatusResponse
		var err error
		a := dialAdmin(t, addr)
		testutil.WaitFor(t, 30*time.Second, "a backend client open on "+addr, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err = a.GetCoordinatorRaftStatus(cctx, &adminv1.GetCoordinatorRaftStatusRequest{})
			return status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no metadata backend client is open")
		})
		if backend == "raft" {
			if err != nil || st.Backend != "raft" || st.MemberId == "" {
				t.Errorf("GetCoordinatorRaftStatus on %s: %+v, %v", addr, st, err)
			}
			continue
		}
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), fmt.Sprintf("%q backend", backend)) {
			t.Errorf("GetCoordinatorRaftStatus on %s (%s): %v, want UNIMPLEMENTED naming the backend", addr, backend, err)
		}
	}
	checkMembershipRPCs(t, ctx, clients, backend)
}

// checkMembershipRPCs: AddRaftVoter and RemoveRaftVoter are leader-only (a
// standby answers NOT_LEADER); on the leader, Raft refuses an unknown
// member and a duplicate id with INVALID_ARGUMENT, and ZooKeeper (no
// Membership) answers UNIMPLEMENTED naming the backend.
func checkMembershipRPCs(t *testing.T, ctx context.Context, clients []string, backend string) {
	t.Helper()
	leaders := 0
	for _, addr := range clients {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, rerr := dialAdmin(t, addr).RemoveRaftVoter(cctx, &adminv1.RemoveRaftVoterRequest{Id: "99"})
		_, aerr := dialAdmin(t, addr).AddRaftVoter(cctx, &adminv1.AddRaftVoterRequest{Id: "1", Address: "127.0.0.1:1", CatchUpTimeoutMs: 1000})
		cancel()
		if _, ok := adminapi.NotLeaderAddress(rerr); ok {
			if _, ok := adminapi.NotLeaderAddress(aerr); !ok {
				t.Errorf("AddRaftVoter on the standby %s: %v, want NOT_LEADER", addr, aerr)
			}
			continue
		}
		leaders++
		for name, err := range map[string]error{"RemoveRaftVoter": rerr, "AddRaftVoter": aerr} {
			switch {
			case backend == "raft" && (status.Code(err) != codes.InvalidArgument ||
				!strings.Contains(err.Error(), map[string]string{"RemoveRaftVoter": "not in the membership", "AddRaftVoter": "in the membership already"}[name])):
				t.Errorf("%s on the leader %s: %v, want INVALID_ARGUMENT", name, addr, err)
			case backend != "raft" && (status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), fmt.Sprintf("%q backend", backend))):
				t.Errorf("%s on the leader %s (%s): %v, want UNIMPLEMENTED naming the backend", name, addr, backend, err)
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d coordinators answered the membership calls as leader, want 1", leaders)
	}
}

// TestRaftUnformattedDirRefused: a coordinator of a three-voter cluster
// started on an empty coordinator.raft.dir exits non-zero, saying to run
// `metaplane raft bootstrap`, and writes no Raft state; after the
// bootstrap the same command line starts (it waits for the other voters).
// A single voter with no configured voters (`make run`) formats its empty
// directory itself and serves as leader.
func TestRaftUnformattedDirRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	bin := testutil.Binary(t, "metaplane")
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	resetPorts()
	dir := filepath.Join(t.TempDir(), "raft")
	args := []string{"coordinator", "--no-env", "-D", "metadata.backend.plugin.dir=" + pluginDir,
		"-D", "metrics.address=127.0.0.1:0", "-D", fmt.Sprintf("bind.listeners=CLIENT://127.0.0.1:%d", testutil.FreePort(t)),
		"-D", "coordinator.raft.voters=" + raftVoters(t, 3), "-D", "coordinator.raft.node.id=1",
		"-D", "coordinator.raft.port=" + strconv.Itoa(raftPort(t, 0)), "-D", "coordinator.raft.dir=" + dir}
	p := startProc(t, "coordinator-unformatted", bin, args...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("a three-voter coordinator on an empty dir is still running after 60s")
	}
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("exit code 0 on an empty dir; output:\n%s", p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, "run `metaplane raft bootstrap --data-dir "+dir+"`") {
		t.Fatalf("the refusal does not name metaplane raft bootstrap:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster-id")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start wrote a cluster id (%v)", err)
	}
	testutil.RaftBootstrap(t, bin, args)
	p = startProc(t, "coordinator-bootstrapped", bin, args...)
	testutil.WaitFor(t, 60*time.Second, "the bootstrapped coordinator's banner", func() bool {
		select {
		case <-p.done:
			t.Fatalf("the bootstrapped coordinator exited:\n%s", p.out.String())
		default:
		}
		return strings.Contains(p.out.String(), "  listener: ")
	})

	client := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	single := filepath.Join(t.TempDir(), "single")
	startProc(t, "coordinator-single", bin, "coordinator", "--no-env", "-D", "metadata.backend.plugin.dir="+pluginDir,
		"-D", "metrics.address=127.0.0.1:0", "-D", "bind.listeners=CLIENT://"+client,
		"-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)), "-D", "coordinator.raft.dir="+single)
	c, err := adminclient.NewClient([]string{client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitServingLeader(t, ctx, c, "")
	if _, err := os.Stat(filepath.Join(single, "cluster-id")); err != nil {
		t.Fatalf("the single voter did not format its dir: %v", err)
	}
}
