package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// proc is a metaplane process started by a test, in its own process group
// (so that a group signal reaches its backend plugin too).
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{}
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Dir = t.TempDir()
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.group(syscall.SIGCONT)
		p.group(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("---- %s output ----\n%s", name, tail(p.out.String(), 60))
		}
	})
	return p
}

func (p *proc) group(sig syscall.Signal) { syscall.Kill(-p.cmd.Process.Pid, sig) }

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// haBackend says how to run coordinators and tablet servers on a backend.
type haBackend struct {
	name string
	// coordinatorArgs returns the -D flags of coordinator i (0-based) of n,
	// given the client addresses of all of them.
	coordinatorArgs func(t *testing.T, i int, clients []string) []string
	tabletArgs      func(t *testing.T, clients []string) []string
	// secure, when set, points the test's clients at TLS (haClientOptions,
	// dialCreds) until the test ends; grant then runs once a leader
	// serves (the tablet servers' ACLs).
	secure func(t *testing.T)
	// backend is the backend's name where it differs from name.
	backend string
	grant   func(t *testing.T, ctx context.Context, c *adminclient.Client)
}

// TestHA runs one failover scenario on each backend: three coordinators and
// two tablet servers as real processes (the backend in its plugin
// process); the leader is frozen (SIGSTOP of its process group), a standby
// takes over with the catalog intact, the tablet servers keep their
// registration and adopt the new epoch, and the old leader's write after it
// thaws is refused and leaves nothing.
func TestHA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	bin := testutil.Binary(t, "metaplane")
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	if zk := testutil.Binary(t, "metaplane-backend-zookeeper"); filepath.Dir(zk) != pluginDir {
		t.Fatalf("plugins built into different directories: %s, %s", pluginDir, zk)
	}
	common := []string{"--no-env", "-D", "metadata.backend.plugin.dir=" + pluginDir, "-D", "metrics.address=127.0.0.1:0"}

	raft := haBackend{name: "raft",
		coordinatorArgs: func(t *testing.T, i int, clients []string) []string {
			return []string{"-D", "coordinator.seed.nodes=" + strings.Join(clients, ","),
				"-D", "coordinator.raft.voters=" + raftVoters(t, len(clients)),
				"-D", "coordinator.raft.node.id=" + strconv.Itoa(i+1),
				"-D", "coordinator.raft.port=" + strconv.Itoa(raftPort(t, i)),
				"-D", "coordinator.raft.dir=" + filepath.Join(t.TempDir(), "raft"),
				"-D", "coordinator.tablet-server.session-timeout=6s"}
		},
		tabletArgs: func(t *testing.T, clients []string) []string {
			return []string{"-D", "coordinator.seed.nodes=" + strings.Join(clients, ",")}
		},
	}
	zookeeper := haBackend{name: "zookeeper",
		coordinatorArgs: func(t *testing.T, i int, clients []string) []string {
			return []string{"-D", "zookeeper.address=" + zkAddr(t), "-D", "zookeeper.client.session-timeout=3s"}
		},
		tabletArgs: func(t *testing.T, clients []string) []string {
			return []string{"-D", "zookeeper.address=" + zkAddr(t), "-D", "zookeeper.client.session-timeout=3s"}
		},
	}
	for _, b := range []haBackend{raft, zookeeper, securedHA(t, raft)} {
		t.Run(b.name, func(t *testing.T) {
			resetPorts()
			haScenario(t, bin, common, b)
		})
	}
}

var (
	portsMu   sync.Mutex
	raftPorts = map[int]int{}
	zkCluster *zktest.Cluster
)

func resetPorts() {
	portsMu.Lock()
	raftPorts = map[int]int{}
	portsMu.Unlock()
}

func raftPort(t *testing.T, i int) int {
	portsMu.Lock()
	defer portsMu.Unlock()
	if p, ok := raftPorts[i]; ok {
		return p
	}
	raftPorts[i] = testutil.FreePort(t)
	return raftPorts[i]
}

func raftVoters(t *testing.T, n int) string {
	var v []string
	for i := 0; i < n; i++ {
		v = append(v, fmt.Sprintf("%d@127.0.0.1:%d", i+1, raftPort(t, i)))
	}
	return strings.Join(v, ",")
}

func zkAddr(t *testing.T) string {
	portsMu.Lock()
	defer portsMu.Unlock()
	if zkCluster == nil {
		zkCluster = zktest.StartServer(t)
	}
	return zkCluster.ConnectString()
}

func haScenario(t *testing.T, bin string, common []string, b haBackend) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if b.name == "zookeeper" {
		portsMu.Lock()
		zkCluster = nil
		portsMu.Unlock()
		t.Cleanup(func() {
			portsMu.Lock()
			zkCluster = nil
			portsMu.Unlock()
		})
	}
	const n = 3
	clients := make([]string, n)
	for i := range clients {
		clients[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	}
	coords := map[string]*proc{}
	coordArgs := map[string][]string{}
	argv := make([][]string, n)
	for i := 0; i < n; i++ {
		args := append([]string{"coordinator"}, common...)
		args = append(args, "-D", "bind.listeners=CLIENT://"+clients[i])
		argv[i] = append(args, b.coordinatorArgs(t, i, clients)...)
	}
	if slices.ContainsFunc(argv[0], func(a string) bool { return strings.HasPrefix(a, "coordinator.raft.voters=") }) {
		// A multi-voter Raft cluster: format every member's directory
		// before any starts, as an operator does.
		testutil.RaftBootstrap(t, bin, argv...)
	}
	for i, args := range argv {
		coordArgs[clients[i]] = args
		coords[clients[i]] = startProc(t, fmt.Sprintf("coordinator-%d", i+1), bin, args...)
	}
	kind := b.name
	if b.backend != "" {
		kind = b.backend
	}
	if b.secure != nil {
		b.secure(t)
	}
	client, err := adminclient.NewClientWithOptions(clients, haClientOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	first := waitServingLeader(t, ctx, client, "")
	if b.grant != nil {
		b.grant(t, ctx, client)
	}
	t.Logf("%s: leader %s at %s, epoch %d", b.name, first.LeaderId, first.LeaderAddress, first.Epoch)

	for id := 1; id <= 2; id++ {
		args := append([]string{"tablet-server", "--id", strconv.Itoa(id)}, common...)
		args = append(args, b.tabletArgs(t, clients)...)
		startProc(t, fmt.Sprintf("tablet-server-%d", id), bin, args...)
	}
	waitTablets(t, ctx, client, 2)

	var created *adminv1.TableInfo
	if err := client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "ha"})
		return err
	}); err != nil {
		t.Fatalf("create database: %v", err)
	}
	// The create carries a request id of ours, so that it can be repeated
	// after the failover below (exactly-once admin writes).
	createT := &adminv1.CreateTableRequest{Database: "ha", Table: "t", Descriptor_: &adminv1.TableDescriptor{
		Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}, {Name: "v", Type: "STRING"}}, PrimaryKey: []string{"k"},
		BucketCount: 3, ReplicationFactor: 2}}
	const createID = "ha-create-t"
	if err := client.Admin(adminclient.WithRequestID(ctx, createID), func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.CreateTable(ctx, createT)
		if err == nil {
			created = r.Table
		}
		return err
	}); err != nil {
		t.Fatalf("create: %v", err)
	}
	servers := tabletAddrs(t, ctx, client)
	for _, addr := range servers {
		waitTabletState(t, ctx, addr, first.Epoch, "ha.t")
	}
	checkMetrics(t, coords[first.LeaderAddress], kind)
	checkTabletRPCs(t, ctx, client, kind)
	checkRaftStatusRPC(t, ctx, clients, kind)
	if b.name == "zookeeper" && !strings.Contains(coords[first.LeaderAddress].out.String(), "the ZooKeeper backend is deprecated") {
		t.Errorf("no deprecation warning at start on ZooKeeper")
	}

	// Freeze the leader (with its plugin): a standby takes over.
	old := coords[first.LeaderAddress]
	old.group(syscall.SIGSTOP)
	var rest []string
	for _, c := range clients {
		if c != first.LeaderAddress {
			rest = append(rest, c)
		}
	}
	client2, err := adminclient.NewClientWithOptions(rest, haClientOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	second := waitServingLeader(t, ctx, client2, first.LeaderId)
	t.Logf("%s: new leader %s at %s, epoch %d", b.name, second.LeaderId, second.LeaderAddress, second.Epoch)
	if second.Epoch <= first.Epoch {
		t.Fatalf("new epoch %d not above the old %d", second.Epoch, first.Epoch)
	}

	// The catalog is intact.
	var after *adminv1.TableInfo
	if err := client2.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "ha", Table: "t"})
		if err == nil {
			after = r.Table
		}
		return err
	}); err != nil {
		t.Fatalf("get table on the new leader: %v", err)
	}
	if after.TableId != created.TableId || !bytes.Equal(after.SchemaJson, created.SchemaJson) ||
		!bytes.Equal(after.RegistrationJson, created.RegistrationJson) || len(after.Buckets) != 3 {
		t.Fatalf("table after failover:\n got %v\nwant %v", after, created)
	}
	// The create repeated with its request id on the new leader (its
	// answer lost, as far as the caller knows) is answered with the
	// original table id, not "already exists"; the id with another body is
	// refused.
	var replayed *adminv1.CreateTableResponse
	if err := client2.Admin(adminclient.WithRequestID(ctx, createID), func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
		replayed, err = a.CreateTable(ctx, createT)
		return err
	}); err != nil {
		t.Fatalf("create repeated with its request id after the failover: %v", err)
	}
	if !replayed.Created || replayed.Table.TableId != created.TableId {
		t.Fatalf("repeated create: created=%v table id %d, want the original %d", replayed.Created, replayed.Table.TableId, created.TableId)
	}
	other := proto.Clone(createT).(*adminv1.CreateTableRequest)
	other.Table = "t2"
	if err := client2.Admin(adminclient.WithRequestID(ctx, createID), func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, other)
		return err
	}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("request id reused for another table: %v, want INVALID_ARGUMENT", err)
	}
	// The tablet servers keep (or regain) their registration and adopt the
	// new epoch.
	waitTablets(t, ctx, client2, 2)
	for _, addr := range servers {
		waitTabletState(t, ctx, addr, second.Epoch, "ha.t")
	}

	// Thaw the old leader: a write sent straight to it is refused, and
	// leaves nothing.
	old.group(syscall.SIGCONT)
	cc, err := grpc.NewClient(first.LeaderAddress, grpc.WithTransportCredentials(dialCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// Just thawed, the old leader may still be reconnecting to its peers:
	// an UNAVAILABLE answer (the outcome unknown, e.g. a proposal timeout)
	// proves nothing either way, so ask again until it answers for sure.
	wctx, wcancel := context.WithTimeout(ctx, 40*time.Second)
	for {
		_, err = adminv1.NewAdminServiceClient(cc).CreateDatabase(wctx, &adminv1.CreateDatabaseRequest{Name: "stale"})
		if d := adminapi.DetailOf(err); err == nil || d == nil || d.Code != adminapi.CodeUnavailable || wctx.Err() != nil {
			break
		}
		t.Logf("%s: old leader's write: %v; asking again", b.name, adminapi.FromStatus(err))
		select { // pace the retries
		case <-wctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	wcancel()
	if err == nil {
		t.Fatal("the old leader accepted a write after a new leader was elected")
	}
	t.Logf("%s: old leader's write refused: %v", b.name, adminapi.FromStatus(err))
	// The refusal must be the leadership's (NOT_LEADER, the original's
	// error 65, or FENCED): a timeout or an unavailable backend would leave
	// the write's fate unknown and prove nothing. The backend's fence
	// itself is exercised by TestStaleLeaderWritesAreFenced, where the old
	// leader has not yet noticed its loss.
	switch d := adminapi.DetailOf(err); {
	case d != nil && d.Code == adminapi.CodeNotLeader:
		if d.FlussErrorCode != adminapi.FlussNotCoordinatorLeader {
			t.Fatalf("old leader's NOT_LEADER carries error code %d, want %d", d.FlussErrorCode, adminapi.FlussNotCoordinatorLeader)
		}
		if d.LeaderAddress != "" && adminapi.HostPort(d.LeaderAddress) != second.LeaderAddress {
			t.Fatalf("old leader redirects to %s, want the new leader %s", d.LeaderAddress, second.LeaderAddress)
		}
	case d != nil && d.Code == adminapi.CodeFenced:
	default:
		t.Fatalf("old leader's write refused with %v (detail %+v), want NOT_LEADER or FENCED", err, d)
	}
	var dbs []string
	if err := client2.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		if err == nil {
			dbs = r.Names
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(dbs, ",") != "ha" {
		t.Fatalf("databases after the stale write: %v, want [ha]", dbs)
	}
	// Kill the old leader and start it again with the same configuration
	// (the same Raft directory): it rejoins as a standby that knows the new
	// leader.
	old.group(syscall.SIGKILL)
	<-old.done
	startProc(t, old.name+"-restarted", bin, coordArgs[first.LeaderAddress]...)
	back := dialAdmin(t, first.LeaderAddress)
	var lastLeader *adminv1.GetLeaderResponse
	var lastErr error
	defer func() {
		if t.Failed() {
			t.Logf("restarted coordinator's last GetLeader answer: %v, %v", lastLeader, lastErr)
		}
	}()
	testutil.WaitFor(t, 60*time.Second, "the restarted coordinator follows the new leader", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := back.GetLeader(cctx, &adminv1.GetLeaderRequest{})
		lastLeader, lastErr = r, err
		return err == nil && !r.IsLeader && r.LeaderAddress == second.LeaderAddress
	})

	// A stale coordinator epoch is refused by the tablet servers.
	for _, addr := range servers {
		tc := dialTablet(t, addr)
		_, err := tc.NotifyLeaderAndIsr(ctx, &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: first.Epoch, CoordinatorId: first.LeaderId})
		if d := adminapi.DetailOf(err); d == nil || d.Code != adminapi.CodeInvalidCoordinator {
			t.Fatalf("tablet %s accepted the old epoch %d: %v", addr, first.Epoch, err)
		}
	}
}

func waitServingLeader(t *testing.T, ctx context.Context, c *adminclient.Client, notID string) *adminv1.GetLeaderResponse {
	t.Helper()
	var leader *adminv1.GetLeaderResponse
	testutil.WaitFor(t, 60*time.Second, "a serving leader", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := c.GetLeader(cctx)
		if err != nil || r.LeaderAddress == "" || r.LeaderId == notID {
			return false
		}
		err = c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
			return err
		})
		if err != nil || c.Leader() != r.LeaderAddress {
			return false
		}
		// Whoever answered (a standby too) names the leader with its epoch.
		if r.Epoch < 0 {
			t.Fatalf("GetLeader from %s names leader %s at epoch %d", r.ThisAddress, r.LeaderId, r.Epoch)
		}
		leader = r
		return true
	})
	return leader
}

func waitTablets(t *testing.T, ctx context.Context, c *adminclient.Client, want int) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d tablet servers registered", want), func() bool {
		return len(listTablets(ctx, c)) == want
	})
}

func listTablets(ctx context.Context, c *adminclient.Client) []*adminv1.TabletServer {
	var out []*adminv1.TabletServer
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
		if err == nil {
			out = r.Servers
		}
		return err
	})
	return out
}

func tabletAddrs(t *testing.T, ctx context.Context, c *adminclient.Client) []string {
	return tabletAddrsN(t, ctx, c, 2)
}

func dialTablet(t *testing.T, addr string) adminv1.TabletServiceClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(dialCreds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminv1.NewTabletServiceClient(cc)
}

func waitTabletState(t *testing.T, ctx context.Context, addr string, epoch int64, table string) {
	t.Helper()
	tc := dialTablet(t, addr)
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("tablet %s at epoch %d with %s", addr, epoch, table), func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := tc.GetTabletServerState(cctx, &adminv1.GetTabletServerStateRequest{})
		if err != nil {
			return false
		}
		for _, tb := range st.Tables {
			if tb == table {
				// NotifiedEpoch: the leader's own NotifyLeaderAndIsr
				// reached it (on a secured cluster: over TLS, as a
				// principal the tablet service allows).
				return st.Registered && st.CoordinatorEpoch == epoch && st.NotifiedEpoch == epoch
			}
		}
		return false
	})
}

// checkMetrics scrapes the leader's /metrics and checks the coordinator's
// gauges (and, on Raft, the raft* gauges).
func checkMetrics(t *testing.T, p *proc, backend string) {
	t.Helper()
	var url string
	for _, line := range strings.Split(p.out.String(), "\n") {
		if i := strings.Index(line, "metrics:  "); i >= 0 {
			url = strings.TrimSpace(line[i+len("metrics:  "):])
		}
	}
	if url == "" {
		t.Fatalf("%s printed no metrics address", p.name)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := []string{"metaplane_coordinator_leader 1", "metaplane_tablet_servers_registered 2", "metaplane_backend_call_seconds_bucket"}
	if backend == "raft" {
		want = append(want, "raftTerm ", "raftCommitIndex ", "raftAppliedIndex ", "raftApplyLag ", `raftRole{role="leader"} 3`,
			"metaplane_raft_term ", "metaplane_raft_commit_index ", "metaplane_raft_applied_index ",
			"metaplane_raft_apply_lag_entries ", `metaplane_raft_role{role="leader"} 1`, `metaplane_raft_role{role="follower"} 0`,
			"metaplane_coordinator_leader_changes_total ", "metaplane_build_info{")
	}
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			t.Errorf("metrics of %s lack %q", p.name, w)
		}
	}
}

// checkTabletRPCs: on ZooKeeper the tablet-server RPCs answer
// UNIMPLEMENTED with a message saying why; on Raft they are served.
func checkTabletRPCs(t *testing.T, ctx context.Context, c *adminclient.Client, backend string) {
	t.Helper()
	err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) error {
		_, err := tc.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
		return err
	})
	if backend == "zookeeper" {
		if !errors.Is(err, adminapi.ErrUnimplemented) || !strings.Contains(err.Error(), "tablet servers follow it directly") {
			t.Errorf("tablet-server RPC on ZooKeeper: got %v, want UNIMPLEMENTED", err)
		}
		return
	}
	if err != nil {
		t.Errorf("tablet-server RPC on %s: %v", backend, err)
	}
}

// haClientOptions and dialCreds are how the tests' admin clients and
// dialAdmin connect: plaintext, unless a secured scenario set them.
var (
	haClientOptions adminclient.Options
	dialCreds       = insecure.NewCredentials()
)

func dialAdmin(t *testing.T, addr string) adminv1.AdminServiceClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(dialCreds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminv1.NewAdminServiceClient(cc)
}
