package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
	"github.com/metaplane/metaplane/internal/ports"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

func init() { cli.Register(newDemoCmd) }

const demoLong = `Starts three coordinators (a 3-voter Raft quorum) and three tablet servers
as local processes on free loopback ports, creates a database and a table,
kills the leader coordinator, and shows the new leader, the table intact and
the tablet servers following. Then it kills a tablet server and shows its
buckets re-led by the others: what moved where, and how long it took. Every
process it started is stopped at the end, also on Ctrl-C. Data and logs live in a temporary directory (removed
unless --keep). Exit status: 0 the demo completed, 1 it failed or was
interrupted, 2 usage error.`

// demoProc is a process the demo started.
type demoProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

type demo struct {
	w     io.Writer
	exe   string
	dir   string
	mu    sync.Mutex
	procs []*demoProc
}

func freePort() (int, error) {
	// Below the kernel's ephemeral range: no outgoing connection takes
	// the port before the demo's process binds it.
	return ports.Free()
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.w, "\n==> "+format+"\n", args...)
}

func (d *demo) start(name string, args ...string) (*demoProc, error) {
	logPath := filepath.Join(d.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(d.exe, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = d.dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &demoProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	fmt.Fprintf(d.w, "    started %-15s pid %-7d log %s\n", name, cmd.Process.Pid, logPath)
	return p, nil
}

// stopAll stops every process: SIGTERM, then SIGKILL after a grace
// period; the tablet servers first, so that their controlled shutdown
// finds a coordinator leader to hand their buckets to.
func (d *demo) stopAll() {
	d.mu.Lock()
	procs := append([]*demoProc(nil), d.procs...)
	d.mu.Unlock()
	var tablets []*demoProc
	for _, p := range procs {
		if strings.HasPrefix(p.name, "tablet-server") {
			tablets = append(tablets, p)
		}
	}
	start := time.Now()
	d.signalAndWait(tablets)
	d.signalAndWait(procs)
	fmt.Fprintf(d.w, "    (stopping took %v)\n", time.Since(start).Round(time.Millisecond))
}

func (d *demo) signalAndWait(procs []*demoProc) {
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(10 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			fmt.Fprintf(d.w, "    %s did not stop within 10s of SIGTERM; killed\n", p.name)
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func newDemoCmd() *cobra.Command {
	var (
		keep    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: cli.HelperShort("", "demo"),
		Long:  demoLong,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), keep, timeout)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the data and logs directory")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "give up after this long")
	return cmd
}

func runDemo(ctx context.Context, w io.Writer, keep bool, timeout time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate the metaplane binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "metaplane-demo-")
	if err != nil {
		return err
	}
	d := &demo{w: w, exe: exe, dir: dir}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = d.run(ctx)
	d.step("cleaning up")
	d.stopAll()
	d.mu.Lock()
	fmt.Fprintf(d.w, "    stopped %d processes\n", len(d.procs))
	d.mu.Unlock()
	if keep || err != nil {
		fmt.Fprintf(d.w, "    data and logs kept in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return &cli.WithCause{Msg: "interrupted", Cause: err}
		}
		return err
	}
	fmt.Fprintln(d.w, "\ndemo complete.")
	return nil
}

func (d *demo) run(ctx context.Context) error {
	const n = 3
	clientPorts, raftPorts := make([]int, n), make([]int, n)
	for i := 0; i < n; i++ {
		var err error
		if clientPorts[i], err = freePort(); err != nil {
			return err
		}
		if raftPorts[i], err = freePort(); err != nil {
			return err
		}
	}
	var seeds, voters []string
	for i := 0; i < n; i++ {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", clientPorts[i]))
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, raftPorts[i]))
	}
	d.step("formatting 3 Raft data directories (what `metaplane raft bootstrap` does on each voter)")
	for i := 0; i < n; i++ {
		if _, err := raft.BootstrapSettings(ctx, map[string]string{
			"coordinator.raft.voters":  strings.Join(voters, ","),
			"coordinator.raft.node.id": strconv.Itoa(i + 1),
			"coordinator.raft.port":    strconv.Itoa(raftPorts[i]),
			"coordinator.raft.dir":     filepath.Join(d.dir, fmt.Sprintf("raft-%d", i+1)),
		}); err != nil {
			return fmt.Errorf("bootstrap Raft voter %d: %w", i+1, err)
		}
	}
	d.step("starting 3 coordinators (Raft voters %s)", strings.Join(voters, ", "))
	procs := map[string]*demoProc{} // client address -> process
	for i := 0; i < n; i++ {
		p, err := d.start(fmt.Sprintf("coordinator-%d", i+1), "coordinator", "--no-env",
			"-D", "bind.listeners=CLIENT://"+seeds[i],
			"-D", "coordinator.seed.nodes="+strings.Join(seeds, ","),
			"-D", "coordinator.raft.voters="+strings.Join(voters, ","),
			"-D", "coordinator.raft.node.id="+strconv.Itoa(i+1),
			"-D", "coordinator.raft.port="+strconv.Itoa(raftPorts[i]),
			"-D", "coordinator.raft.dir="+filepath.Join(d.dir, fmt.Sprintf("raft-%d", i+1)),
			"-D", "coordinator.tablet-server.session-timeout=6s",
			"-D", "metrics.address=127.0.0.1:0")
		if err != nil {
			return err
		}
		procs[seeds[i]] = p
	}
	client, err := adminclient.NewClient(seeds)
	if err != nil {
		return err
	}
	defer client.Close()

	d.step("waiting for a leader")
	start := time.Now()
	leader, err := d.waitLeader(ctx, client, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(d.w, "    leader %s at %s, epoch %d (after %v)\n", short(leader.LeaderId), leader.LeaderAddress, leader.Epoch, time.Since(start).Round(time.Millisecond))

	d.step("starting 3 tablet servers")
	tablets := map[int32]*demoProc{}
	for i := 1; i <= 3; i++ {
		p, err := d.start(fmt.Sprintf("tablet-server-%d", i), "tablet-server", "--no-env", "--id", strconv.Itoa(i),
			"-D", "coordinator.seed.nodes="+strings.Join(seeds, ","))
		if err != nil {
			return err
		}
		tablets[int32(i)] = p
	}
	servers, err := d.waitTablets(ctx, client, 3)
	if err != nil {
		return err
	}
	for _, s := range servers {
		fmt.Fprintf(d.w, "    tablet server %d registered at %s\n", s.Id, s.Listeners)
	}

	d.step("creating database demo and table demo.orders (6 buckets, 2 replicas each)")
	var created *adminv1.TableInfo
	if err := client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		if _, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "demo"}); err != nil {
			return err
		}
		r, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "demo", Table: "orders", Descriptor_: &adminv1.TableDescriptor{
			Columns:    []*adminv1.Column{{Name: "id", Type: "BIGINT"}, {Name: "customer", Type: "STRING"}, {Name: "amount", Type: "DECIMAL(10, 2)"}},
			PrimaryKey: []string{"id"}, BucketCount: 6, ReplicationFactor: 2}})
		if err == nil {
			created = r.Table
		}
		return err
	}); err != nil {
		return err
	}
	cli.DescribeTable(d.w, created)
	if err := d.showTablets(ctx, servers, created.TableId, leader.Epoch); err != nil {
		return err
	}

	old := procs[leader.LeaderAddress]
	if old == nil {
		return fmt.Errorf("the leader's address %s is none of the coordinators this demo started", leader.LeaderAddress)
	}
	d.step("killing the leader %s (pid %d) with SIGKILL", old.name, old.cmd.Process.Pid)
	old.cmd.Process.Kill()
	<-old.done
	killed := time.Now()
	var remaining []string
	for _, s := range seeds {
		if s != leader.LeaderAddress {
			remaining = append(remaining, s)
		}
	}
	client2, err := adminclient.NewClient(remaining)
	if err != nil {
		return err
	}
	defer client2.Close()
	nl, err := d.waitLeader(ctx, client2, leader.LeaderId)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.w, "    new leader %s at %s, epoch %d (elected %v after the kill)\n", short(nl.LeaderId), nl.LeaderAddress, nl.Epoch, time.Since(killed).Round(time.Millisecond))

	d.step("the table after the failover")
	var after *adminv1.TableInfo
	if err := client2.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "demo", Table: "orders"})
		if err == nil {
			after = r.Table
		}
		return err
	}); err != nil {
		return err
	}
	cli.DescribeTable(d.w, after)
	if after.TableId != created.TableId || string(after.SchemaJson) != string(created.SchemaJson) {
		return fmt.Errorf("the table changed across the failover: id %d -> %d", created.TableId, after.TableId)
	}
	fmt.Fprintln(d.w, "    intact: same table id, same schema bytes")

	d.step("the tablet servers follow the new leader")
	if _, err := d.waitTablets(ctx, client2, 3); err != nil {
		return err
	}
	if err := d.showTablets(ctx, servers, created.TableId, nl.Epoch); err != nil {
		return err
	}
	return d.killTablet(ctx, client2, tablets)
}

// killTablet kills the tablet server that leads the most buckets of
// demo.orders and shows its buckets re-led by the others.
func (d *demo) killTablet(ctx context.Context, c *adminclient.Client, tablets map[int32]*demoProc) error {
	list := func() ([]*adminv1.ListedBucket, error) {
		var out []*adminv1.ListedBucket
		err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.ListBuckets(ctx, &adminv1.ListBucketsRequest{Database: "demo", Table: "orders"})
			if err == nil {
				out = r.Buckets
			}
			return err
		})
		return out, err
	}
	before, err := list()
	if err != nil {
		return err
	}
	led := map[int32]int{}
	victim := int32(-1)
	for _, b := range before {
		led[b.Bucket.Leader]++
		if victim < 0 || led[b.Bucket.Leader] > led[victim] {
			victim = b.Bucket.Leader
		}
	}
	p := tablets[victim]
	if p == nil {
		return fmt.Errorf("no tablet server of this demo leads a bucket of demo.orders")
	}
	d.step("the buckets of demo.orders before")
	cli.PrintBuckets(d.w, "demo.orders", before)
	d.step("killing tablet server %d (pid %d, leads %d buckets) with SIGKILL", victim, p.cmd.Process.Pid, led[victim])
	p.cmd.Process.Kill()
	<-p.done
	killed := time.Now()
	fmt.Fprintln(d.w, "    its lease expires after coordinator.tablet-server.session-timeout (6s here); the leader then re-elects its buckets")
	var after []*adminv1.ListedBucket
	for {
		after, err = list()
		if err == nil && len(after) == len(before) && !slices.ContainsFunc(after, func(b *adminv1.ListedBucket) bool {
			return b.Bucket.Leader == victim || slices.Contains(b.Bucket.Isr, victim) || b.Offline
		}) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the buckets of tablet server %d were not re-led: %w (see the logs)", victim, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	took := time.Since(killed)
	d.step("its buckets re-led %v after the kill", took.Round(time.Millisecond))
	for i, b := range after {
		if before[i].Bucket.Leader == victim {
			fmt.Fprintf(d.w, "    bucket %d: leader %d -> %d (leader epoch %d -> %d), ISR %s -> %s\n", b.Bucket.Bucket, victim, b.Bucket.Leader,
				before[i].Bucket.LeaderEpoch, b.Bucket.LeaderEpoch, cli.Ints(before[i].Bucket.Isr), cli.Ints(b.Bucket.Isr))
		}
	}
	cli.PrintBuckets(d.w, "demo.orders", after)
	fmt.Fprintf(d.w, "    when tablet server %d comes back, `metaplane admin elect-leaders demo.orders --preferred` gives it its buckets back (docs/buckets.md)\n", victim)
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// waitLeader waits until a leader other than notID is known.
func (d *demo) waitLeader(ctx context.Context, c *adminclient.Client, notID string) (*adminv1.GetLeaderResponse, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := c.GetLeader(cctx)
		cancel()
		if err == nil && r.LeaderAddress != "" && r.LeaderId != notID {
			// Make sure it serves (the leader has loaded its image).
			err = c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
				return err
			})
			if err == nil {
				return r, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader elected: %w (see the logs)", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (d *demo) waitTablets(ctx context.Context, c *adminclient.Client, want int) ([]*adminv1.TabletServer, error) {
	for {
		var servers []*adminv1.TabletServer
		err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
			if err == nil {
				servers = r.Servers
			}
			return err
		})
		if err == nil && len(servers) >= want {
			return servers, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("tablet servers did not register: %w (see the logs)", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// showTablets waits until every tablet server's view has the table and
// the given coordinator epoch, then prints their states.
func (d *demo) showTablets(ctx context.Context, servers []*adminv1.TabletServer, tableID int64, epoch int64) error {
	for _, s := range servers {
		cc, err := grpc.NewClient(adminapi.HostPort(s.Listeners), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		tc := adminv1.NewTabletServiceClient(cc)
		var st *adminv1.GetTabletServerStateResponse
		for {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err = tc.GetTabletServerState(cctx, &adminv1.GetTabletServerStateRequest{})
			cancel()
			if err == nil && st.Registered && st.CoordinatorEpoch >= epoch && contains(st.Tables, "demo.orders") {
				break
			}
			select {
			case <-ctx.Done():
				cc.Close()
				return fmt.Errorf("tablet server %d did not catch up (last state %v, %v)", s.Id, st, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
		cc.Close()
		fmt.Fprintf(d.w, "    tablet server %d: registered, coordinator epoch %d, metadata offset %d, tables %v, leads %d buckets\n",
			st.ServerId, st.CoordinatorEpoch, st.MetadataOffset, st.Tables, st.BucketsLed)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
