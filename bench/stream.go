package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/ports"
	"github.com/metaplane/metaplane/internal/procstat"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// The stream. rows: simulated tablet servers following the metadata
// stream of a three-coordinator cluster of real `metaplane coordinator`
// processes while a writer creates tables, once with every tablet server
// fetching from the leader and once spread over the coordinators.
const (
	streamFollowersFull  = 500
	streamFollowersQuick = 100
	streamTablesFull     = 100
	streamTablesQuick    = 30
	// streamTableEvery is the writer's pace: one createTable this often.
	streamTableEvery = 100 * time.Millisecond
	// streamGrace bounds the wait for the last deliveries after the writer.
	streamGrace = 10 * time.Second
	// streamStartBound bounds the simulated tablet servers' start.
	streamStartBound = time.Minute
	streamDB         = "streambench"
	// streamCoordinators is the cluster's size (always three voters).
	streamCoordinators = 3
)

// The two modes of the stream. rows.
const (
	StreamLeaderOnly = "leader-only"
	StreamAnyVoter   = "any-voter"
)

// Stream is what the stream. rows measured, for the targets.
type Stream struct {
	Modes []StreamMode `json:"modes"`
}

// StreamMode is one mode's measurement.
type StreamMode struct {
	Mode       string `json:"mode"`
	Followers  int    `json:"followers"`
	Tables     int    `json:"tables"`
	Deliveries int    `json:"deliveries"`
	// Missing counts (table, follower) pairs not delivered within the
	// grace period after the writer stopped.
	Missing int `json:"missing,omitempty"`
	// P50Micros and P99Micros are the propagation delay: from the
	// writer's acknowledgement of a createTable (committed and applied on
	// the leader) to the table's record arriving at a tablet server; a
	// record that arrives before the acknowledgement counts as 0.
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	// AllP99Micros is the p99 over tables of the delay until the last
	// follower had the table.
	AllP99Micros float64 `json:"all_p99_us"`
	WindowSec    float64 `json:"window_s"`
	// LeaderCPU is the leader coordinator's CPU (its process and its Raft
	// plugin's, utime+stime) over the window, in cores (CPU seconds per
	// second of the window).
	LeaderCPU float64 `json:"leader_cpu_cores"`
	// FollowerCPU is each follower coordinator's, likewise.
	FollowerCPU []float64 `json:"follower_cpu_cores"`
	// ClientCPU is the bench process's (the simulated tablet servers and
	// the writer), likewise: on one machine they compete with the
	// coordinators for the same cores.
	ClientCPU float64 `json:"client_cpu_cores"`
}

// Mode returns the measurement of mode, or nil.
func (s *Stream) Mode(mode string) *StreamMode {
	if s == nil {
		return nil
	}
	for i := range s.Modes {
		if s.Modes[i].Mode == mode {
			return &s.Modes[i]
		}
	}
	return nil
}

func streamSpecs() []rowSpec {
	const note = "measured once per run, after the other rows, on its own cluster of three coordinator processes (Raft)"
	return []rowSpec{
		{id: "stream.leader-only", title: "metadata stream: propagation, every tablet server on the leader", group: "metadata stream", metric: MetricP50, note: note, stream: true, backends: []string{Raft}},
		{id: "stream.any-voter", title: "metadata stream: propagation, spread over the coordinators", group: "metadata stream", metric: MetricP50, note: note, stream: true, backends: []string{Raft}},
	}
}

// runStream measures the stream. rows.
func runStream(ctx context.Context, env *runEnv, specs []rowSpec) ([]Row, *Stream) {
	fig := &Stream{}
	results := map[string]Result{}
	followers, tables := streamFollowersFull, streamTablesFull
	if env.opts.Quick {
		followers, tables = streamFollowersQuick, streamTablesQuick
	}
	why := ""
	if err := measureStream(ctx, env, followers, tables, results, fig); err != nil {
		why = err.Error()
		env.opts.logf("  stream: %v", err)
	}
	var rows []Row
	for _, s := range specs {
		mode := strings.TrimPrefix(s.id, "stream.")
		row := Row{ID: s.id, Title: s.title, Group: s.group, Metric: s.metric, Note: s.note}
		res, ok := results[s.id]
		if !ok {
			res = Result{Backend: Raft, Unavailable: "not measured"}
			if why != "" {
				res.Unavailable += ": " + why
			}
		}
		if m := fig.Mode(mode); m != nil {
			row.Note = fmt.Sprintf("%d simulated tablet servers%s, %d tables at one per %v; delay p99 until every follower had a table %s; leader CPU %.2f cores (coordinator + plugin), followers %s, the simulated tablet servers %.2f; %s",
				m.Followers, quickNote(env), m.Tables, streamTableEvery, FormatDuration(m.AllP99Micros), m.LeaderCPU, formatCores(m.FollowerCPU), m.ClientCPU, s.note)
			if m.Missing > 0 {
				row.Note += fmt.Sprintf("; %d deliveries missing after %v", m.Missing, streamGrace)
			}
		}
		row.Results = []Result{res}
		rows = append(rows, row)
	}
	if len(fig.Modes) == 0 {
		return rows, nil
	}
	return rows, fig
}

func quickNote(env *runEnv) string {
	if env.opts.Quick {
		return fmt.Sprintf(" (--quick: %d, not %d)", streamFollowersQuick, streamFollowersFull)
	}
	return ""
}

func formatCores(v []float64) string {
	var s []string
	for _, c := range v {
		s = append(s, fmt.Sprintf("%.2f", c))
	}
	return strings.Join(s, " / ")
}

// streamCoordinator is one `metaplane coordinator` process of the stream
// rows' cluster.
type streamCoordinator struct {
	client string // host:port
	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
}

func (c *streamCoordinator) stop() {
	if c.cmd.Process != nil {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	c.log.Close()
}

// cpu returns the CPU the process and its children (the Raft plugin) used
// so far.
func (c *streamCoordinator) cpu() time.Duration {
	pid := c.cmd.Process.Pid
	total := procstat.CPU(pid)
	for _, child := range procstat.Children(pid) {
		total += procstat.CPU(child)
	}
	return total
}

// startStreamCluster starts three coordinator processes on a new
// three-voter Raft cluster under dir.
func startStreamCluster(ctx context.Context, env *runEnv, dir string) ([]*streamCoordinator, error) {
	return startCoordinators(ctx, env, dir, clusterOptions{})
}

// clusterOptions are what startCoordinators varies.
type clusterOptions struct {
	// zooKeeper, when set, is the connect string of the ZooKeeper
	// ensemble the coordinators run on, under root; empty: a new
	// three-voter Raft cluster of their own.
	zooKeeper, root string
	// settings are further -D settings given to every coordinator.
	settings map[string]string
}

// startCoordinators starts three coordinator processes under dir, on a
// new three-voter Raft cluster or on ZooKeeper (o.zooKeeper).
func startCoordinators(ctx context.Context, env *runEnv, dir string, o clusterOptions) ([]*streamCoordinator, error) {
	tool, err := env.toolBinary()
	if err != nil {
		return nil, err
	}
	backend := Raft
	if o.zooKeeper != "" {
		backend = ZooKeeper
	}
	plugDir, err := env.binDir(backend)
	if err != nil {
		return nil, err
	}
	var voters, clients []string
	for i := 0; i < streamCoordinators; i++ {
		rp, err := ports.Free()
		if err != nil {
			return nil, err
		}
		cp, err := ports.Free()
		if err != nil {
			return nil, err
		}
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, rp))
		clients = append(clients, fmt.Sprintf("127.0.0.1:%d", cp))
	}
	var cs []*streamCoordinator
	fail := func(err error) ([]*streamCoordinator, error) {
		for _, c := range cs {
			c.stop()
		}
		return nil, err
	}
	for i := 0; i < streamCoordinators; i++ {
		cfg := map[string]string{}
		if backend == Raft {
			_, raddr, _ := strings.Cut(voters[i], "@")
			_, rport, _ := strings.Cut(raddr, ":")
			cfg = map[string]string{
				"coordinator.seed.nodes":              strings.Join(clients, ","),
				"coordinator.raft.voters":             strings.Join(voters, ","),
				"coordinator.raft.node.id":            strconv.Itoa(i + 1),
				"coordinator.raft.port":               rport,
				"coordinator.raft.dir":                filepath.Join(dir, fmt.Sprintf("coordinator%d", i+1)),
				"coordinator.raft.election.timeout":   raftElectionTimeout.String(),
				"coordinator.raft.heartbeat.interval": raftHeartbeat.String(),
			}
			if _, err := raft.BootstrapSettings(ctx, cfg); err != nil {
				return fail(fmt.Errorf("bootstrap coordinator %d: %w", i+1, err))
			}
		} else {
			cfg["zookeeper.address"] = o.zooKeeper
			cfg["zookeeper.path.root"] = o.root
		}
		for k, v := range o.settings {
			cfg[k] = v
		}
		args := []string{"coordinator", "--no-env", "--log-level", "warn",
			"-D", "metadata.backend.plugin.dir=" + plugDir, "-D", "metrics.address=127.0.0.1:0",
			"-D", "bind.listeners=CLIENT://" + clients[i]}
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			args = append(args, "-D", k+"="+cfg[k])
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("coordinator%d.log", i+1)))
		if err != nil {
			return fail(err)
		}
		cmd := exec.Command(tool, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		c := &streamCoordinator{client: clients[i], cmd: cmd, done: make(chan struct{}), log: logf}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return fail(fmt.Errorf("start coordinator %d: %w", i+1, err))
		}
		go func() { cmd.Wait(); close(c.done) }()
		cs = append(cs, c)
	}
	return cs, nil
}

// streamLeader waits (bounded) until the cluster has a leader that
// serves, and returns its index in cs.
func streamLeader(ctx context.Context, cs []*streamCoordinator, admin *adminclient.Client) (int, error) {
	deadline := time.Now().Add(initialElectionBound + 30*time.Second)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, c := range cs {
			select {
			case <-c.done:
				return -1, fmt.Errorf("coordinator %s exited (log: %s)", c.client, c.log.Name())
			default:
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := admin.GetLeader(cctx)
		cancel()
		if err == nil && r.LeaderAddress != "" {
			addr := adminapi.HostPort(r.LeaderAddress)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			self, err := admin.GetLeaderFrom(cctx, addr)
			cancel()
			for i, c := range cs {
				if c.client == addr && err == nil && self.IsLeader {
					return i, nil
				}
			}
			last = fmt.Errorf("leader %s is not serving yet (%v)", addr, err)
		} else if err != nil {
			last = err
		}
		time.Sleep(200 * time.Millisecond)
	}
	if last == nil {
		last = ctx.Err()
	}
	return -1, fmt.Errorf("no serving leader: %v", last)
}

func measureStream(ctx context.Context, env *runEnv, followers, tables int, results map[string]Result, fig *Stream) error {
	dir := filepath.Join(env.opts.WorkDir, "stream")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	env.opts.logf("  stream: starting three coordinator processes ...")
	cs, err := startStreamCluster(ctx, env, dir)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cs {
			c.stop()
		}
	}()
	var addrs []string
	for _, c := range cs {
		addrs = append(addrs, c.client)
	}
	admin, err := adminclient.NewClient(addrs)
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := streamLeader(ctx, cs, admin); err != nil {
		return err
	}
	// Three registered tablet servers (so that tables get assignments),
	// kept alive by heartbeats for the whole measurement.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	if err := registerStreamServers(ctx, hctx, admin); err != nil {
		return err
	}
	if err := retrySetup(ctx, func(ctx context.Context) error {
		return admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: streamDB, IgnoreIfExists: true})
			return err
		})
	}); err != nil {
		return fmt.Errorf("create database %s: %w", streamDB, err)
	}
	for _, mode := range []string{StreamLeaderOnly, StreamAnyVoter} {
		env.opts.logf("  stream: %s, %d followers, %d tables ...", mode, followers, tables)
		m, samples, err := measureStreamMode(ctx, cs, admin, addrs, mode, followers, tables)
		for attempt := 1; errors.Is(err, errLeaderChanged) && attempt < 3; attempt++ {
			env.opts.logf("    %v: measuring again", err)
			m, samples, err = measureStreamMode(ctx, cs, admin, addrs, mode, followers, tables)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		fig.Modes = append(fig.Modes, m)
		res := resultFromSummary(Raft, Summarize(samples, int64(len(samples)), time.Duration(m.WindowSec*float64(time.Second))), int64(len(samples)), m.Missing, nil)
		if m.Missing > 0 {
			res.FirstError = fmt.Sprintf("%d deliveries missing after %v", m.Missing, streamGrace)
		}
		results["stream."+mode] = res
		env.opts.logf("    p50 %s p99 %s, leader CPU %.2f cores, followers %s, simulated tablet servers %.2f", FormatDuration(m.P50Micros), FormatDuration(m.P99Micros), m.LeaderCPU, formatCores(m.FollowerCPU), m.ClientCPU)
	}
	return nil
}

// errLeaderChanged: a mode's window saw a change of leader, so the CPU
// of "the leader" means nothing; the mode is measured again.
var errLeaderChanged = errors.New("leader changed")

// retrySetup runs f until it succeeds, at most a minute (the machine may
// be slow, not broken).
func retrySetup(ctx context.Context, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func registerStreamServers(ctx, keep context.Context, admin *adminclient.Client) error {
	for id := int32(1); id <= benchTabletServers; id++ {
		if err := registerLeased(ctx, keep, admin, id, fmt.Sprintf("CLIENT://127.0.0.1:%d", 19000+id)); err != nil {
			return err
		}
	}
	return nil
}

// registerLeased registers tablet server id (at listeners) through the
// coordinator leader (RegisterTabletServer: a lease, on backends with
// leases) and heartbeats its lease until keep ends: then the lease
// expires after its session timeout.
func registerLeased(ctx, keep context.Context, admin *adminclient.Client, id int32, listeners string) error {
	var reg *adminv1.RegisterTabletServerResponse
	err := retrySetup(ctx, func(ctx context.Context) error {
		return admin.Tablets(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
			var err error
			reg, err = t.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: id, Listeners: listeners})
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("register tablet server %d: %w", id, err)
	}
	go func(lease int64, every time.Duration) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-keep.Done():
				return
			case <-t.C:
			}
			hctx, cancel := context.WithTimeout(keep, every)
			admin.Tablets(hctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
				_, err := t.TabletServerHeartbeat(ctx, &adminv1.TabletServerHeartbeatRequest{ServerId: id, LeaseId: lease})
				return err
			})
			cancel()
		}
	}(reg.LeaseId, max(time.Duration(reg.SessionTimeoutMs)*time.Millisecond/3, 100*time.Millisecond))
	return nil
}

// streamFollower is one simulated tablet server: its own client of the
// coordinators and the tablet server's metadata source, recording when
// each bench table's record arrived.
type streamFollower struct {
	client *adminclient.Client
	src    *tabletserver.MetadataSource

	mu      sync.Mutex
	arrived map[string]time.Time
	ready   chan struct{} // closed once following (snapshot taken)
	err     error
}

func (f *streamFollower) follow(ctx context.Context) {
	prefix := catalog.TablesPath(streamDB) + "/"
	readyOnce := sync.Once{}
	defer readyOnce.Do(func() { close(f.ready) })
	for ctx.Err() == nil {
		snap, err := f.src.Snapshot(ctx, catalog.TablesPath(streamDB))
		if err != nil {
			f.mu.Lock()
			f.err = err
			f.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		readyOnce.Do(func() { close(f.ready) })
		ch, err := f.src.Watch(ctx, "/", snap.Revision+1)
		if err != nil {
			continue
		}
		for resp := range ch {
			now := time.Now()
			if resp.Err != nil {
				f.mu.Lock()
				f.err = resp.Err
				f.mu.Unlock()
				break
			}
			for _, ev := range resp.Events {
				name, ok := strings.CutPrefix(ev.Path, prefix)
				if !ok || ev.Type != core.EventCreated || strings.Contains(name, "/") {
					continue
				}
				f.mu.Lock()
				if _, seen := f.arrived[name]; !seen {
					f.arrived[name] = now
				}
				f.mu.Unlock()
			}
		}
	}
}

func (f *streamFollower) has(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.arrived[name]
	return ok
}

func measureStreamMode(ctx context.Context, cs []*streamCoordinator, admin *adminclient.Client, addrs []string, mode string, followers, tables int) (StreamMode, []time.Duration, error) {
	m := StreamMode{Mode: mode, Followers: followers, Tables: tables}
	// The whole mode is bounded: the followers' start, the writer (at
	// most four times its pace), the grace.
	ctx, cancelMode := context.WithTimeout(ctx, streamStartBound+4*time.Duration(tables)*streamTableEvery+streamGrace+10*time.Second)
	defer cancelMode()
	fctx, fcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	fs := make([]*streamFollower, followers)
	defer func() {
		fcancel()
		wg.Wait()
		for _, f := range fs {
			if f != nil {
				f.client.Close()
			}
		}
	}()
	from := tabletserver.StreamFromAny
	if mode == StreamLeaderOnly {
		from = tabletserver.StreamFromLeader
	}
	for i := range fs {
		c, err := adminclient.NewClient(addrs)
		if err != nil {
			return m, nil, err
		}
		src, err := tabletserver.NewMetadataSource(c, tabletserver.SourceOptions{From: from, Spread: i, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			c.Close()
			return m, nil, err
		}
		fs[i] = &streamFollower{client: c, src: src, arrived: map[string]time.Time{}, ready: make(chan struct{})}
	}
	// Start them a few at a time: 500 snapshots at once would measure the
	// start, not the stream.
	for i, f := range fs {
		wg.Add(1)
		go func() { defer wg.Done(); f.follow(fctx) }()
		if i%25 == 24 {
			<-f.ready
		}
	}
	wait := time.NewTimer(streamStartBound)
	defer wait.Stop()
	for _, f := range fs {
		select {
		case <-f.ready:
		case <-wait.C:
			return m, nil, fmt.Errorf("the simulated tablet servers did not all start following within %v (%v)", streamStartBound, f.err)
		}
	}
	leader, err := streamLeader(ctx, cs, admin)
	if err != nil {
		return m, nil, err
	}
	before := make([]time.Duration, len(cs))
	for i, c := range cs {
		before[i] = c.cpu()
	}
	selfBefore := procstat.CPU(os.Getpid())
	start := time.Now()
	// The writer: one createTable per streamTableEvery, its
	// acknowledgement time recorded.
	acked := map[string]time.Time{}
	var names []string
	tick := time.NewTicker(streamTableEvery)
	writeUntil := time.Now().Add(4 * time.Duration(tables) * streamTableEvery)
	for i := 0; i < tables && ctx.Err() == nil && time.Now().Before(writeUntil); i++ {
		name := nextName("s")
		err := retrySetup(ctx, func(ctx context.Context) error {
			return admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: streamDB, Table: name, Descriptor_: benchDescriptor(false)})
				return err
			})
		})
		if err != nil {
			tick.Stop()
			return m, nil, fmt.Errorf("create table %s: %w", name, err)
		}
		acked[name] = time.Now()
		names = append(names, name)
		<-tick.C
	}
	tick.Stop()
	m.Tables = len(names)
	if len(names) == 0 {
		return m, nil, fmt.Errorf("no table created")
	}
	// The last deliveries.
	grace := time.Now().Add(streamGrace)
	for _, f := range fs {
		for time.Now().Before(grace) && !f.has(names[len(names)-1]) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	window := time.Since(start)
	var samples []time.Duration
	var allDelays []time.Duration
	for _, name := range names {
		var last time.Duration
		complete := true
		for _, f := range fs {
			f.mu.Lock()
			at, ok := f.arrived[name]
			f.mu.Unlock()
			if !ok {
				m.Missing++
				complete = false
				continue
			}
			d := max(at.Sub(acked[name]), 0)
			samples = append(samples, d)
			last = max(last, d)
		}
		if complete {
			allDelays = append(allDelays, last)
		}
	}
	after := make([]time.Duration, len(cs))
	for i, c := range cs {
		after[i] = c.cpu()
	}
	m.ClientCPU = round3((procstat.CPU(os.Getpid()) - selfBefore).Seconds() / window.Seconds())
	if now, err := streamLeader(ctx, cs, admin); err != nil || now != leader {
		return m, nil, fmt.Errorf("%w: the leader changed during the window (coordinator %d, then %d: %v)", errLeaderChanged, leader+1, now+1, err)
	}
	m.Deliveries = len(samples)
	m.WindowSec = round3(window.Seconds())
	for i := range cs {
		cores := round3((after[i] - before[i]).Seconds() / window.Seconds())
		if i == leader {
			m.LeaderCPU = cores
		} else {
			m.FollowerCPU = append(m.FollowerCPU, cores)
		}
	}
	if len(samples) == 0 {
		return m, nil, fmt.Errorf("no delivery within %v", streamGrace)
	}
	sum := Summarize(samples, int64(len(samples)), window)
	m.P50Micros, m.P99Micros = micros(sum.P50), micros(sum.P99)
	if len(allDelays) > 0 {
		m.AllP99Micros = micros(Summarize(allDelays, int64(len(allDelays)), window).P99)
	}
	return m, samples, nil
}
