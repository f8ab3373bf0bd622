package coordinator_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/gossip"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestGossip runs three Raft coordinators as real processes with gossip on
// (encrypted), each given only the first one as its seed; a tablet server
// and an admin client are each given ONE seed, the leader. Both learn
// every coordinator; when that seed's coordinator is killed, the admin
// client keeps working and the tablet server keeps following the metadata
// through another coordinator. A member that joins the gossip claiming to
// lead changes neither the voter set nor whom clients follow.
func TestGossip(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	resetPorts()
	bin := testutil.Binary(t, "metaplane")
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := bytes.Repeat([]byte{0x5a}, 32)
	keyB64 := base64.StdEncoding.EncodeToString(key)

	const n = 3
	clients := make([]string, n)
	gossipPorts := make([]int, n)
	for i := range clients {
		clients[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		gossipPorts[i] = testutil.FreePort(t)
	}
	common := []string{"--no-env", "-D", "metadata.backend.plugin.dir=" + pluginDir, "-D", "metrics.address=127.0.0.1:0"}
	coords := map[string]*proc{}
	var argv [][]string
	for i := 0; i < n; i++ {
		args := append([]string{"coordinator"}, common...)
		args = append(args, "-D", "bind.listeners=CLIENT://"+clients[i],
			"-D", "coordinator.seed.nodes="+clients[0], // a partial seed list
			"-D", "coordinator.raft.voters="+raftVoters(t, n),
			"-D", "coordinator.raft.node.id="+strconv.Itoa(i+1),
			"-D", "coordinator.raft.port="+strconv.Itoa(raftPort(t, i)),
			"-D", "coordinator.raft.dir="+filepath.Join(t.TempDir(), "raft"),
			"-D", "coordinator.tablet-server.session-timeout=6s",
			"-D", "coordinator.gossip.enabled=true",
			"-D", "coordinator.gossip.port="+strconv.Itoa(gossipPorts[i]),
			"-D", "coordinator.gossip.encryption-key="+keyB64)
		argv = append(argv, args)
	}
	testutil.RaftBootstrap(t, bin, argv...) // every directory before any member starts
	for i, args := range argv {
		coords[clients[i]] = startProc(t, fmt.Sprintf("coordinator-%d", i+1), bin, args...)
	}
	// Every coordinator hears of every other through the gossip, with its
	// client and gossip address.
	var wantGossip []string
	for _, p := range gossipPorts {
		wantGossip = append(wantGossip, fmt.Sprintf("127.0.0.1:%d", p))
	}
	sort.Strings(wantGossip)
	for _, c := range clients {
		a := dialAdmin(t, c)
		testutil.WaitFor(t, 60*time.Second, c+" lists every coordinator", func() bool {
			addrs, gossips := coordinatorsOf(ctx, a)
			return slices.Equal(addrs, sorted(clients)) && slices.Equal(gossips, wantGossip)
		})
	}
	all, err := adminclient.NewClient(clients)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	first := waitServingLeader(t, ctx, all, "")
	seed := first.LeaderAddress
	// `metaplane admin leader` prints the list when the coordinator gossips
	// (asked once a leader serves, until the answering one has heard of it:
	// the answer names it).
	var out []byte
	testutil.WaitFor(t, 30*time.Second, clients[1]+" names the leader", func() bool {
		out, err = exec.Command(bin, "admin", "leader", "--timeout", "5s", "--bootstrap-servers", clients[1]).CombinedOutput()
		return err == nil && strings.Contains(string(out), "leader "+first.LeaderId)
	})
	if !strings.Contains(string(out), "coordinators known to "+clients[1]+" (gossip):") {
		t.Errorf("admin leader: %v\n%s", err, out)
	}
	for i, c := range clients {
		if !strings.Contains(string(out), c) || !strings.Contains(string(out), wantGossip[i]) {
			t.Errorf("admin leader does not list %s / %s:\n%s", c, wantGossip[i], out)
		}
	}
	for _, p := range gossipPorts {
		if testutil.PortFree(p) {
			t.Errorf("gossip port %d is not bound with gossip on", p)
		}
	}

	voters := voterSet(t, ctx, seed)
	if len(voters) != n {
		t.Fatalf("voter set %v, want %d voters", voters, n)
	}

	// One seed each: the leader.
	one, err := adminclient.NewClientWithOptions([]string{seed}, adminclient.Options{RefreshInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	startProc(t, "tablet-server-1", bin, append(append([]string{"tablet-server", "--id", "1"}, common...),
		"-D", "coordinator.seed.nodes="+seed)...)
	waitTablets(t, ctx, all, 1)
	tabletAddr := tabletAddrsN(t, ctx, all, 1)[0]
	tc := dialTablet(t, tabletAddr)
	testutil.WaitFor(t, 30*time.Second, "the admin client and the tablet server learn every coordinator", func() bool {
		st, err := tc.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
		return err == nil && slices.Equal(sorted(st.Coordinators), sorted(clients)) && slices.Equal(sorted(one.Coordinators()), sorted(clients))
	})

	// A member that joins the gossip (with the key) and claims to lead at
	// a high epoch shows in the coordinators' lists, and changes nothing
	// else: not the voter set, not the leader.
	intruderAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) // nothing listens there
	meta, _ := json.Marshal(map[string]any{"id": "intruder", "address": intruderAddr, "role": "leader", "epoch": 1 << 40})
	intruder, err := gossip.Start(gossip.Options{Name: "intruder", BindAddr: "127.0.0.1", Key: key, Meta: meta, Fast: true,
		Logger: testutil.Logger(t), Seeds: func(context.Context) []string { return wantGossip[:1] }})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close(time.Second)
	testutil.WaitFor(t, 30*time.Second, "the coordinators list the gossip-only member", func() bool {
		addrs, _ := coordinatorsOf(ctx, dialAdmin(t, seed))
		return slices.Contains(addrs, intruderAddr)
	})
	if got := voterSet(t, ctx, seed); !slices.Equal(got, voters) {
		t.Fatalf("voter set after a gossip member joined: %v, want %v", got, voters)
	}
	if r, err := all.GetLeader(ctx); err != nil || r.LeaderAddress != seed || r.Epoch != first.Epoch {
		t.Fatalf("leader after a gossip member claimed to lead: %v, %v; want %s at epoch %d", r, err, seed, first.Epoch)
	}

	createGossipTable(t, ctx, one, "g", "t1", true)
	waitTabletState(t, ctx, tabletAddr, first.Epoch, "g.t1")

	// Kill the seed (the leader) with its plugin.
	dead := coords[seed]
	dead.group(syscall.SIGKILL)
	<-dead.done
	createGossipTable(t, ctx, one, "g", "t2", false) // through another coordinator
	var rest []string
	for _, c := range clients {
		if c != seed {
			rest = append(rest, c)
		}
	}
	restClient, err := adminclient.NewClient(rest)
	if err != nil {
		t.Fatal(err)
	}
	defer restClient.Close()
	second := waitServingLeader(t, ctx, restClient, first.LeaderId)
	if second.LeaderAddress == seed || second.Epoch <= first.Epoch {
		t.Fatalf("new leader %s at epoch %d after killing %s at epoch %d", second.LeaderAddress, second.Epoch, seed, first.Epoch)
	}
	waitTabletState(t, ctx, tabletAddr, second.Epoch, "g.t2")
	if !slices.ContainsFunc(listTablets(ctx, restClient), func(s *adminv1.TabletServer) bool { return s.Id == 1 }) {
		t.Fatalf("tablet server 1 not registered with the new leader")
	}
	// The dead coordinator leaves the gossip; the voter set stays the
	// configured one (a dead voter is still a voter).
	testutil.WaitFor(t, 30*time.Second, "the dead coordinator gone from the gossip", func() bool {
		addrs, _ := coordinatorsOf(ctx, dialAdmin(t, second.LeaderAddress))
		return len(addrs) > 0 && slices.Contains(addrs, second.LeaderAddress) && !slices.Contains(addrs, seed)
	})
	if got := voterSet(t, ctx, second.LeaderAddress); !slices.Equal(got, voters) {
		t.Fatalf("voter set after the seed died: %v, want %v", got, voters)
	}
}

// TestGossipOffBindsNothing: with coordinator.gossip.enabled at its
// default (false), nothing listens on coordinator.gossip.port, TCP or
// UDP, and GetLeader lists the coordinator alone, with no gossip address.
func TestGossipOffBindsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real coordinator process")
	}
	bin := testutil.Binary(t, "metaplane")
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	gport := testutil.FreePort(t)
	p := startProc(t, "coordinator", bin, "coordinator", "--no-env", "-D", "metadata.backend.plugin.dir="+pluginDir,
		"-D", "metrics.address=127.0.0.1:0", "-D", "bind.listeners=CLIENT://"+client,
		"-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)),
		"-D", "coordinator.raft.dir="+filepath.Join(t.TempDir(), "raft"),
		"-D", "coordinator.gossip.port="+strconv.Itoa(gport))
	c, err := adminclient.NewClient([]string{client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitServingLeader(t, ctx, c, "")
	if !testutil.PortFree(gport) {
		t.Fatalf("gossip port %d is bound with gossip off", gport)
	}
	r, err := c.GetLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Coordinators) != 1 || r.Coordinators[0].Address != client || r.Coordinators[0].GossipAddress != "" || r.Coordinators[0].Role != "leader" {
		t.Fatalf("coordinators with gossip off: %v, want this leader alone without a gossip address", r.Coordinators)
	}
	if strings.Contains(p.out.String(), "gossip:") {
		t.Errorf("the banner mentions gossip with gossip off:\n%s", p.out.String())
	}
}

// coordinatorsOf returns the sorted client and gossip addresses in a's
// GetLeader answer (nil on error).
func coordinatorsOf(ctx context.Context, a adminv1.AdminServiceClient) (addrs, gossips []string) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := a.GetLeader(cctx, &adminv1.GetLeaderRequest{})
	if err != nil {
		return nil, nil
	}
	for _, c := range r.Coordinators {
		addrs = append(addrs, c.Address)
		if c.GossipAddress != "" {
			gossips = append(gossips, c.GossipAddress)
		}
	}
	return sorted(addrs), sorted(gossips)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// voterSet returns "id@address kind" of every member in addr's Raft
// status, sorted.
func voterSet(t *testing.T, ctx context.Context, addr string) []string {
	t.Helper()
	var out []string
	testutil.WaitFor(t, 30*time.Second, "the Raft status of "+addr, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := dialAdmin(t, addr).GetCoordinatorRaftStatus(cctx, &adminv1.GetCoordinatorRaftStatusRequest{})
		if err != nil || len(st.Members) == 0 {
			return false
		}
		out = nil
		for _, m := range st.Members {
			out = append(out, m.Id+"@"+m.Address+" "+m.Kind)
		}
		sort.Strings(out)
		return true
	})
	return out
}

func createGossipTable(t *testing.T, ctx context.Context, c *adminclient.Client, db, table string, withDB bool) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if withDB {
		if err := c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: db, IgnoreIfExists: true})
			return err
		}); err != nil {
			t.Fatalf("create database %s: %v", db, err)
		}
	}
	if err := c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: db, Table: table, IgnoreIfExists: true, Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}, PrimaryKey: []string{"k"}, BucketCount: 1, ReplicationFactor: 1}})
		return err
	}); err != nil {
		t.Fatalf("create table %s.%s: %v", db, table, err)
	}
}

func tabletAddrsN(t *testing.T, ctx context.Context, c *adminclient.Client, want int) []string {
	t.Helper()
	var out []string
	for _, s := range listTablets(ctx, c) {
		out = append(out, adminapi.HostPort(s.Listeners))
	}
	if len(out) != want {
		t.Fatalf("tablet servers: %v, want %d", out, want)
	}
	return out
}
