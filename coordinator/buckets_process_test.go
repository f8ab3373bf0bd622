package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestBucketLeadershipProcesses runs the coordinator's bucket leadership
// on real processes, on each backend: three coordinators and three
// reference tablet servers, a table of 12 buckets with three replicas.
// A SIGKILLed tablet server's buckets move to other ISR members with
// higher leader epochs within its session timeout plus 2 s; it comes
// back, its leaders take it back into their ISRs, and `admin
// elect-leaders --preferred` gives it its leaderships back; a SIGTERMed
// tablet server hands its leaderships over before it leaves, no bucket
// ever without a leader. Meanwhile a recorder checks the history: no
// leader epoch goes backwards, and no two tablet servers lead a bucket in
// one leader epoch.
func TestBucketLeadershipProcesses(t *testing.T) {
	runBucketBackends(t, 6*time.Second, 4*time.Second, bucketScenario)
}

// runBucketBackends runs scenario on Raft and on ZooKeeper, each in a
// subtest, with real coordinator and tablet-server processes: on Raft the
// coordinators grant tablet-server leases of raftSession, on ZooKeeper
// the tablet servers' sessions last zkSession. session is the one of the
// backend run.
func runBucketBackends(t *testing.T, raftSession, zkSession time.Duration,
	scenario func(t *testing.T, bin string, common []string, b haBackend, session time.Duration)) {
	if testing.Short() {
		t.Skip("starts real coordinator and tablet server processes")
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
				"-D", "coordinator.tablet-server.session-timeout=" + raftSession.String()}
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
			return []string{"-D", "zookeeper.address=" + zkAddr(t), "-D", "zookeeper.client.session-timeout=" + zkSession.String()}
		},
	}
	for _, tc := range []struct {
		b       haBackend
		session time.Duration
	}{{raft, raftSession}, {zookeeper, zkSession}} {
		t.Run(tc.b.name, func(t *testing.T) {
			resetPorts()
			if tc.b.name == "zookeeper" {
				portsMu.Lock()
				zkCluster = nil
				portsMu.Unlock()
				t.Cleanup(func() {
					portsMu.Lock()
					zkCluster = nil
					portsMu.Unlock()
				})
			}
			scenario(t, bin, common, tc.b, tc.session)
		})
	}
}

// bucketHistory records what a poller saw of every bucket's leadership,
// and the first violation of its invariants.
type bucketHistory struct {
	mu         sync.Mutex
	epoch      map[int32]int32             // bucket -> highest leader epoch seen
	leaderAt   map[[2]int32]int32          // (bucket, leader epoch) -> leader
	tabletAt   map[[2]int32]map[int32]bool // (bucket, leader epoch) -> tablet servers that said they lead it
	leaderless []string
	bad        []string
	polls      int
}

func newBucketHistory() *bucketHistory {
	return &bucketHistory{epoch: map[int32]int32{}, leaderAt: map[[2]int32]int32{}, tabletAt: map[[2]int32]map[int32]bool{}}
}

func (h *bucketHistory) record(buckets []*adminv1.ListedBucket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.polls++
	for _, lb := range buckets {
		b := lb.Bucket
		if prev, ok := h.epoch[b.Bucket]; ok && b.LeaderEpoch < prev {
			h.bad = append(h.bad, fmt.Sprintf("bucket %d: leader epoch went back from %d to %d", b.Bucket, prev, b.LeaderEpoch))
		}
		h.epoch[b.Bucket] = max(h.epoch[b.Bucket], b.LeaderEpoch)
		k := [2]int32{b.Bucket, b.LeaderEpoch}
		if l, ok := h.leaderAt[k]; ok && l != b.Leader {
			h.bad = append(h.bad, fmt.Sprintf("bucket %d leader epoch %d: leader %d, earlier %d", b.Bucket, b.LeaderEpoch, b.Leader, l))
		}
		h.leaderAt[k] = b.Leader
		if b.Leader < 0 {
			h.leaderless = append(h.leaderless, fmt.Sprintf("bucket %d at leader epoch %d", b.Bucket, b.LeaderEpoch))
		}
	}
}

// recordTablet records that tablet server id says it leads these buckets.
func (h *bucketHistory) recordTablet(id int32, leading []*adminv1.NotifyLeaderAndIsrRequest_BucketState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range leading {
		k := [2]int32{b.Bucket, b.LeaderEpoch}
		if h.tabletAt[k] == nil {
			h.tabletAt[k] = map[int32]bool{}
		}
		h.tabletAt[k][id] = true
		if len(h.tabletAt[k]) > 1 {
			h.bad = append(h.bad, fmt.Sprintf("bucket %d leader epoch %d: led by tablet servers %v", b.Bucket, b.LeaderEpoch, h.tabletAt[k]))
		}
	}
}

func (h *bucketHistory) check(t *testing.T, allowLeaderless bool) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) > 0 {
		t.Fatalf("bucket history violations (%d polls): %s", h.polls, strings.Join(h.bad[:min(len(h.bad), 10)], "; "))
	}
	if !allowLeaderless && len(h.leaderless) > 0 {
		t.Fatalf("buckets without a leader during the scenario: %s", strings.Join(h.leaderless[:min(len(h.leaderless), 10)], "; "))
	}
	t.Logf("bucket history: %d polls, %d (bucket, leader epoch) pairs, no violation", h.polls, len(h.leaderAt))
}

// bucketCluster is three coordinator processes and three reference
// tablet servers on one backend.
type bucketCluster struct {
	bin, backend string
	clients      []string
	coords       map[string]*proc // by client address
	client       *adminclient.Client
	tablets      map[int32]*proc
	tabletArgs   func(id int32) []string
}

func startBucketCluster(t *testing.T, ctx context.Context, bin string, common []string, b haBackend) *bucketCluster {
	t.Helper()
	const n = 3
	c := &bucketCluster{bin: bin, backend: b.name, coords: map[string]*proc{}, tablets: map[int32]*proc{}}
	c.clients = make([]string, n)
	for i := range c.clients {
		c.clients[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	}
	argv := make([][]string, n)
	for i := 0; i < n; i++ {
		args := append([]string{"coordinator"}, common...)
		args = append(args, "-D", "bind.listeners=CLIENT://"+c.clients[i])
		argv[i] = append(args, b.coordinatorArgs(t, i, c.clients)...)
	}
	if b.name == "raft" {
		testutil.RaftBootstrap(t, bin, argv...)
	}
	for i, args := range argv {
		c.coords[c.clients[i]] = startProc(t, fmt.Sprintf("coordinator-%d", i+1), bin, args...)
	}
	var err error
	c.client, err = adminclient.NewClientWithOptions(c.clients, haClientOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.client.Close() })
	waitServingLeader(t, ctx, c.client, "")
	c.tabletArgs = func(id int32) []string {
		args := append([]string{"tablet-server", "--id", strconv.Itoa(int(id))}, common...)
		return append(args, b.tabletArgs(t, c.clients)...)
	}
	for id := int32(1); id <= 3; id++ {
		c.tablets[id] = startProc(t, fmt.Sprintf("tablet-server-%d", id), bin, c.tabletArgs(id)...)
	}
	waitTablets(t, ctx, c.client, 3)
	return c
}

// createTable creates ha.<table> (and the database ha when missing) with
// buckets buckets of rf replicas.
func (c *bucketCluster) createTable(t *testing.T, ctx context.Context, table string, buckets, rf int32) {
	t.Helper()
	if err := c.client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		if _, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "ha", IgnoreIfExists: true}); err != nil {
			return err
		}
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "ha", Table: table, Descriptor_: &adminv1.TableDescriptor{
			Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}, BucketCount: buckets, ReplicationFactor: rf}})
		return err
	}); err != nil {
		t.Fatalf("create table: %v", err)
	}
}

// tabletLeads reports whether the tablet server at addr says it leads
// exactly the buckets of want that name id as leader, at their epochs.
func tabletLeads(ctx context.Context, tc adminv1.TabletServiceClient, id int32, want []*adminv1.ListedBucket) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := tc.GetTabletServerState(cctx, &adminv1.GetTabletServerStateRequest{})
	if err != nil {
		return false
	}
	led := map[int32]int32{}
	for _, lb := range st.Leading {
		led[lb.Bucket] = lb.LeaderEpoch
	}
	n := 0
	for _, lb := range want {
		e, ok := led[lb.Bucket.Bucket]
		if (lb.Bucket.Leader == id) != ok || (ok && e != lb.Bucket.LeaderEpoch) {
			return false
		}
		if ok {
			n++
		}
	}
	return n == len(led)
}

func bucketScenario(t *testing.T, bin string, common []string, b haBackend, session time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startBucketCluster(t, ctx, bin, common, b)
	clients, client, tablets, tabletArgs := c.clients, c.client, c.tablets, c.tabletArgs
	c.createTable(t, ctx, "t", 12, 3)
	list := func() []*adminv1.ListedBucket {
		var out []*adminv1.ListedBucket
		client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.ListBuckets(ctx, &adminv1.ListBucketsRequest{Database: "ha", Table: "t"})
			if err == nil {
				out = r.Buckets
			}
			return err
		})
		return out
	}
	addrs := map[int32]string{}
	for _, ts := range listTablets(ctx, client) {
		addrs[ts.Id] = adminapi.HostPort(ts.Listeners)
	}
	// Pollers record the history until the scenario ends: one reads the
	// records from the coordinators, one per tablet server what it says it
	// leads (at the address it has now).
	hist := newBucketHistory()
	var addrMu sync.Mutex
	setAddrs := func() {
		addrMu.Lock()
		defer addrMu.Unlock()
		for _, ts := range listTablets(ctx, client) {
			addrs[ts.Id] = adminapi.HostPort(ts.Listeners)
		}
	}
	pctx, pcancel := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	poll := func(every time.Duration, f func()) {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			tick := time.NewTicker(every) // the poller's cadence
			defer tick.Stop()
			for pctx.Err() == nil {
				f()
				select {
				case <-pctx.Done():
				case <-tick.C:
				}
			}
		}()
	}
	poll(50*time.Millisecond, func() {
		if l := list(); len(l) == 12 {
			hist.record(l)
		}
	})
	for id := int32(1); id <= 3; id++ {
		conns := map[string]adminv1.TabletServiceClient{}
		poll(50*time.Millisecond, func() {
			addrMu.Lock()
			addr := addrs[id]
			addrMu.Unlock()
			tc, ok := conns[addr]
			if !ok {
				tc = dialTablet(t, addr)
				conns[addr] = tc
			}
			cctx, cc := context.WithTimeout(pctx, 300*time.Millisecond)
			st, err := tc.GetTabletServerState(cctx, &adminv1.GetTabletServerStateRequest{})
			cc()
			if err == nil {
				hist.recordTablet(id, st.Leading)
			}
		})
	}
	stopPoller := func() { pcancel(); pwg.Wait() }
	defer stopPoller()

	// Every tablet server is told what it leads.
	waitLeading := func(what string) {
		t.Helper()
		testutil.WaitFor(t, 30*time.Second, what, func() bool {
			buckets := list()
			if len(buckets) != 12 {
				return false
			}
			addrMu.Lock()
			cur := maps.Clone(addrs)
			addrMu.Unlock()
			for id, addr := range cur {
				if tablets[id] != nil && !tabletLeads(ctx, dialTablet(t, addr), id, buckets) {
					return false
				}
			}
			return true
		})
	}
	waitLeading("every tablet server told the buckets it leads")
	before := list()
	led2 := 0
	for _, lb := range before {
		if lb.Bucket.Leader == 2 {
			led2++
		}
	}

	// SIGKILL tablet server 2: within its session timeout plus 2 s, every
	// bucket it led has another ISR member as leader, at a higher epoch.
	killed := time.Now()
	tablets[2].group(syscall.SIGKILL)
	<-tablets[2].done
	tablets[2] = nil
	var moved time.Duration
	testutil.WaitFor(t, session+30*time.Second, "no bucket led by the killed tablet server", func() bool {
		for _, lb := range list() {
			if lb.Bucket.Leader == 2 || slices.Contains(lb.Bucket.Isr, 2) || lb.Offline {
				return false
			}
		}
		moved = time.Since(killed)
		return true
	})
	t.Logf("%s: buckets of the SIGKILLed tablet server re-led %v after the kill (session timeout %v)", b.name, moved.Round(time.Millisecond), session)
	if limit := session + 2*time.Second; moved > limit {
		t.Errorf("%s: re-led %v after the kill, want within the session timeout plus 2 s (%v)", b.name, moved, limit)
	}
	after := list()
	for i, lb := range after {
		if before[i].Bucket.Leader == 2 && lb.Bucket.LeaderEpoch <= before[i].Bucket.LeaderEpoch {
			t.Errorf("bucket %d: leader epoch %d after its leader died, was %d", lb.Bucket.Bucket, lb.Bucket.LeaderEpoch, before[i].Bucket.LeaderEpoch)
		}
	}
	// `admin list-buckets --json` shows it.
	var listed struct {
		Buckets []struct {
			Offline bool `json:"offline"`
			Bucket  struct {
				Leader int32   `json:"leader"`
				Isr    []int32 `json:"isr"`
			} `json:"bucket"`
		} `json:"buckets"`
	}
	out := runCLI(t, ctx, bin, 0, "admin", "list-buckets", "ha.t", "--json", "--page-size", "5", "--bootstrap-servers", strings.Join(clients, ","), "--timeout", "20s")
	if err := json.Unmarshal(out, &listed); err != nil || len(listed.Buckets) != 12 {
		t.Fatalf("list-buckets --json: %v\n%s", err, out)
	}
	for _, lb := range listed.Buckets {
		if lb.Bucket.Leader == 2 || slices.Contains(lb.Bucket.Isr, 2) || lb.Offline {
			t.Fatalf("list-buckets --json after the kill: %s", out)
		}
	}
	waitLeading("survivors told the buckets they lead now")

	// Server 2 comes back: its buckets' leaders take it back into their
	// ISRs (AdjustIsr); a preferred election gives it its leaderships.
	tablets[2] = startProc(t, "tablet-server-2-restarted", bin, tabletArgs(2)...)
	waitTablets(t, ctx, client, 3)
	testutil.WaitFor(t, 60*time.Second, "server 2 back in the ISR of every bucket it replicates", func() bool {
		for _, lb := range list() {
			if !slices.Contains(lb.Bucket.Isr, 2) {
				return false
			}
		}
		return true
	})
	setAddrs()
	out = runCLI(t, ctx, bin, 0, "admin", "elect-leaders", "ha.t", "--preferred", "--json", "--bootstrap-servers", strings.Join(clients, ","), "--timeout", "20s")
	var elected struct {
		ElectedCount int32 `json:"elected_count"`
	}
	if err := json.Unmarshal(out, &elected); err != nil || int(elected.ElectedCount) != led2 {
		t.Fatalf("elect-leaders --preferred: %v; want %d elected\n%s", err, led2, out)
	}
	for _, lb := range list() {
		if lb.Bucket.Leader != lb.Bucket.Replicas[0] {
			t.Fatalf("bucket %d led by %d after the preferred election, want %d", lb.Bucket.Bucket, lb.Bucket.Leader, lb.Bucket.Replicas[0])
		}
	}
	waitLeading("every tablet server told its preferred leaderships")

	// The reference tablet server's test knob: as leader, server 1 takes
	// a lagging replica 3 out of its buckets' ISRs (AdjustIsr), and back
	// in once it has caught up; the other leaders' buckets keep it.
	addrMu.Lock()
	knob := dialTablet(t, addrs[1])
	addrMu.Unlock()
	isrs := func(want func(lb *adminv1.ListedBucket) bool) func() bool {
		return func() bool {
			for _, lb := range list() {
				if !want(lb) {
					return false
				}
			}
			return true
		}
	}
	if _, err := knob.SetReplicaLag(ctx, &adminv1.SetReplicaLagRequest{ReplicaId: 3, Lagging: true}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "replica 3 out of the ISRs of server 1's buckets only", isrs(func(lb *adminv1.ListedBucket) bool {
		return slices.Contains(lb.Bucket.Isr, 3) == (lb.Bucket.Leader != 1)
	}))
	if _, err := knob.SetReplicaLag(ctx, &adminv1.SetReplicaLagRequest{ReplicaId: 3, Lagging: false}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "replica 3 back in every ISR", isrs(func(lb *adminv1.ListedBucket) bool {
		return slices.Contains(lb.Bucket.Isr, 3)
	}))
	hist.check(t, false)

	// SIGTERM tablet server 1: it hands its leaderships over, then leaves;
	// no bucket is without a leader meanwhile.
	led1 := 0
	for _, lb := range list() {
		if lb.Bucket.Leader == 1 {
			led1++
		}
	}
	tablets[1].group(syscall.SIGTERM)
	select {
	case <-tablets[1].done:
	case <-time.After(30 * time.Second):
		t.Fatal("tablet server 1 did not stop within 30 s of SIGTERM")
	}
	if logs := tablets[1].out.String(); !strings.Contains(logs, fmt.Sprintf("moved=%d still_led=0", led1)) {
		t.Fatalf("tablet server 1 did not report its %d leaderships moved by its controlled shutdown:\n%s", led1, tail(logs, 20))
	}
	tablets[1] = nil
	testutil.WaitFor(t, 30*time.Second, "server 1 out of every ISR and gone", func() bool {
		for _, lb := range list() {
			if lb.Bucket.Leader == 1 || slices.Contains(lb.Bucket.Isr, 1) {
				return false
			}
		}
		return len(listTablets(ctx, client)) == 2
	})
	stopPoller()
	hist.check(t, false)
}

// runCLI runs the metaplane binary and returns its stdout, failing the
// test unless it exits with want.
func runCLI(t *testing.T, ctx context.Context, bin string, want int, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if code != want {
		t.Fatalf("metaplane %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// tryListBuckets lists every bucket of ha.<table> in pages of 1000, or
// fails.
func tryListBuckets(ctx context.Context, c *adminclient.Client, table string) ([]*adminv1.ListedBucket, error) {
	var out []*adminv1.ListedBucket
	req := &adminv1.ListBucketsRequest{Database: "ha", Table: table, PageSize: 1000}
	for {
		var page *adminv1.ListBucketsResponse
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) (err error) {
			page, err = a.ListBuckets(ctx, req)
			return err
		})
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, page.Buckets...)
		if page.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = page.NextPageToken
	}
}

// TestBucketLeadershipFailoverAndFlap: on each backend, with a table of
// 3000 buckets over three reference tablet servers, a tablet server
// killed and started again at once (a flap) ends with every bucket led
// and every server told what it leads; then a tablet server is killed and
// the coordinator leader is killed the moment it starts re-electing that
// server's buckets: once the new leader settles, no bucket names the dead
// server, none is offline, and the survivors are told.
func TestBucketLeadershipFailoverAndFlap(t *testing.T) {
	runBucketBackends(t, 4*time.Second, 4*time.Second, func(t *testing.T, bin string, common []string, b haBackend, _ time.Duration) {
		failoverScenario(t, bin, common, b)
	})
}

func failoverScenario(t *testing.T, bin string, common []string, b haBackend) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startBucketCluster(t, ctx, bin, common, b)
	const buckets = 3000
	c.createTable(t, ctx, "big", buckets, 2)
	// settled: every bucket online, none names a server of gone, and
	// every running tablet server says it leads exactly its buckets.
	var why string // what the last settled check found unsettled
	defer func() {
		if t.Failed() {
			t.Logf("last unsettled: %s", why)
		}
	}()
	settled := func(client *adminclient.Client, gone int32) func() bool {
		return func() bool {
			all, err := tryListBuckets(ctx, client, "big")
			if err != nil || len(all) != buckets {
				why = fmt.Sprintf("list: %d buckets, %v", len(all), err)
				return false
			}
			for _, lb := range all {
				if lb.Offline || lb.Bucket.Leader == gone || slices.Contains(lb.Bucket.Isr, gone) {
					why = fmt.Sprintf("bucket %v", lb)
					return false
				}
			}
			for _, ts := range listTablets(ctx, client) {
				if !tabletLeads(ctx, dialTablet(t, adminapi.HostPort(ts.Listeners)), ts.Id, all) {
					why = fmt.Sprintf("tablet server %d does not say it leads its buckets", ts.Id)
					return false
				}
			}
			return true
		}
	}
	testutil.WaitFor(t, 60*time.Second, "every tablet server told what it leads", settled(c.client, -1))

	// `admin reassign-buckets` moves bucket 0 to a list with the third
	// server: it joins the ISR (its leader asks), the old replica goes;
	// the verb waits for it. A list naming an unregistered server is
	// refused with nothing started.
	all, err := tryListBuckets(ctx, c.client, "big")
	if err != nil {
		t.Fatal(err)
	}
	b0 := all[0].Bucket
	var third int32
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(b0.Replicas, id) {
			third = id
		}
	}
	target := []int32{third, b0.Leader}
	bs := strings.Join(c.clients, ",")
	out := runCLI(t, ctx, bin, 1, "admin", "reassign-buckets", "ha.big", "--replicas", "0=99", "--bootstrap-servers", bs, "--timeout", "20s")
	if len(out) != 0 {
		t.Fatalf("refused reassignment printed an answer: %s", out)
	}
	out = runCLI(t, ctx, bin, 0, "admin", "reassign-buckets", "ha.big", "--replicas", fmt.Sprintf("0=%d,%d", target[0], target[1]),
		"--bootstrap-servers", bs, "--timeout", "60s")
	if !strings.Contains(string(out), "reassigned 1 bucket") {
		t.Fatalf("reassign-buckets: %s", out)
	}
	all, err = tryListBuckets(ctx, c.client, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got := all[0]; !slices.Equal(got.Bucket.Replicas, target) || len(got.TargetReplicas) != 0 || got.Bucket.Leader != b0.Leader ||
		!catalog.SameReplicas(got.Bucket.Isr, target) {
		t.Fatalf("bucket 0 after reassign-buckets to %v: %v", target, got)
	}

	// A flap: tablet server 1 killed and started again at once. On Raft
	// its new registration replaces the old one in one transaction: the
	// leader never sees it gone.
	first, err := c.client.GetLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldListeners := ""
	for _, ts := range listTablets(ctx, c.client) {
		if ts.Id == 1 {
			oldListeners = ts.Listeners
		}
	}
	c.tablets[1].group(syscall.SIGKILL)
	<-c.tablets[1].done
	c.tablets[1] = startProc(t, "tablet-server-1-restarted", bin, c.tabletArgs(1)...)
	// The flap is over once the restarted process is the one registered
	// (on ZooKeeper after the old session expired; on Raft at once): it
	// listens on another port.
	testutil.WaitFor(t, 60*time.Second, "the restarted tablet server 1 registered", func() bool {
		for _, ts := range listTablets(ctx, c.client) {
			if ts.Id == 1 && ts.Listeners != oldListeners {
				return true
			}
		}
		return false
	})
	waitTablets(t, ctx, c.client, 3)
	testutil.WaitFor(t, 60*time.Second, "after the flap: every bucket led and every server told", settled(c.client, -1))
	if logs := c.coords[first.LeaderAddress].out.String(); b.name == "raft" && strings.Contains(logs, "tablet server is gone") {
		t.Fatalf("raft: the leader took a tablet server that registered again at once for gone:\n%s", tail(logs, 10))
	}
	testutil.WaitFor(t, 60*time.Second, "after the flap: every ISR whole again", func() bool {
		all, err := tryListBuckets(ctx, c.client, "big")
		if err != nil {
			return false
		}
		for _, lb := range all {
			if !catalog.SameReplicas(lb.Bucket.Isr, lb.Bucket.Replicas) {
				why = fmt.Sprintf("bucket %v", lb)
				return false
			}
		}
		return true
	})

	// Kill tablet server 3, and the coordinator leader as it starts
	// re-electing its buckets.
	leader, err := c.client.GetLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lp := c.coords[leader.LeaderAddress]
	c.tablets[3].group(syscall.SIGKILL)
	<-c.tablets[3].done
	testutil.WaitFor(t, 60*time.Second, "the leader notices tablet server 3 gone", func() bool {
		return strings.Contains(lp.out.String(), `tablet server is gone`) && strings.Contains(lp.out.String(), "tablet_server=3")
	})
	lp.group(syscall.SIGKILL)
	<-lp.done
	var rest []string
	for _, a := range c.clients {
		if a != leader.LeaderAddress {
			rest = append(rest, a)
		}
	}
	client2, err := adminclient.NewClientWithOptions(rest, haClientOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	second := waitServingLeader(t, ctx, client2, leader.LeaderId)
	t.Logf("%s: leader %s killed while re-electing; new leader %s at epoch %d", b.name, leader.LeaderId, second.LeaderId, second.Epoch)
	testutil.WaitFor(t, 60*time.Second, "the new leader settles: no bucket names the dead server", settled(client2, 3))
}
