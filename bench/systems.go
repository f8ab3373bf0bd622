package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/ports"
	"github.com/metaplane/metaplane/internal/zktest"
	"github.com/metaplane/metaplane/plugins"
)

func init() {
	starters[Memory] = startMemory
	starters[ZooKeeper] = startZooKeeperSystem
	starters[Raft] = startRaft
}

// Timings the bench configures. The Raft election timeout is the seeds'
// default; the ZooKeeper session timeout of the election candidates is
// set to the same failure-detection budget so the election row compares
// like with like (ZooKeeper's own default, 60s, would make it 60x slower).
const (
	raftElectionTimeout  = time.Second
	raftHeartbeat        = 500 * time.Millisecond
	zkTick               = 500 * time.Millisecond
	zkElectionSession    = time.Second
	electionWaitBound    = 60 * time.Second
	memberRecoveryBound  = 60 * time.Second
	initialElectionBound = 90 * time.Second
)

// binDir returns where the plugin binaries are: Options.BinDir; else the
// directory of the running executable when it holds them; else ./bin.
func (env *runEnv) binDir(name string) (string, error) {
	file := plugins.BinaryPrefix + name
	var tried []string
	if d := env.opts.BinDir; d != "" {
		if _, err := os.Stat(filepath.Join(d, file)); err != nil {
			return "", fmt.Errorf("plugin %s not found in --bin-dir %s (run make build)", file, d)
		}
		return d, nil
	}
	if d, err := plugins.DefaultDir(); err == nil {
		if _, err := os.Stat(filepath.Join(d, file)); err == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	if abs, err := filepath.Abs("bin"); err == nil {
		if _, err := os.Stat(filepath.Join(abs, file)); err == nil {
			return abs, nil
		}
		tried = append(tried, abs)
	}
	return "", fmt.Errorf("plugin %s not found (looked in %s; run make build, or pass --bin-dir)", file, strings.Join(tried, ", "))
}

// logger is the plugins' logger: warnings and errors to the progress log.
func (env *runEnv) logger() *slog.Logger {
	var w io.Writer = io.Discard
	if env.opts.Log != nil {
		w = env.opts.Log
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// member is one plugin process: the memory or ZooKeeper plugin, or one
// Raft voter.
type member struct {
	label string
	opts  plugins.LaunchOptions

	mu sync.Mutex
	p  *plugins.Plugin
}

func (env *runEnv) newMember(name, label string, cfg map[string]string, restart bool) (*member, error) {
	dir, err := env.binDir(name)
	if err != nil {
		return nil, err
	}
	o := plugins.LaunchOptions{Name: name, Dir: dir, Config: cfg, Logger: env.logger()}
	if !restart {
		// The election row restarts a killed member itself, after
		// measuring; the host must not do it first.
		o.MaxFailures = 1
	}
	return &member{label: label, opts: o}, nil
}

func (m *member) start(ctx context.Context) error {
	p, err := plugins.Launch(ctx, m.opts)
	if err != nil {
		return fmt.Errorf("%s: %w", m.label, err)
	}
	m.mu.Lock()
	m.p = p
	m.mu.Unlock()
	return nil
}

func (m *member) plugin() *plugins.Plugin {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p
}

func (m *member) pid() int {
	if p := m.plugin(); p != nil {
		return p.Pid()
	}
	return 0
}

func (m *member) client(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	p := m.plugin()
	if p == nil {
		return nil, fmt.Errorf("%s: not running", m.label)
	}
	return p.NewClient(ctx, opts)
}

func (m *member) close() error {
	m.mu.Lock()
	p := m.p
	m.p = nil
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Close()
}

func memberProcesses(backend string, ms []*member) []ProcessMemory {
	var out []ProcessMemory
	for _, m := range ms {
		if pid := m.pid(); pid > 0 {
			out = append(out, ProcessMemory{Backend: backend, Role: m.label, PID: pid})
		}
	}
	return out
}

// ---- memory ----

func startMemory(ctx context.Context, env *runEnv) (*System, error) {
	m, err := env.newMember(Memory, "memory plugin", nil, true)
	if err != nil {
		return nil, err
	}
	if err := m.start(ctx); err != nil {
		return nil, err
	}
	s := &System{
		Name: Memory,
		NewClient: func(ctx context.Context, name string) (core.MetadataBackend, error) {
			return m.client(ctx, core.ClientOptions{Name: name})
		},
		Processes: func() []ProcessMemory { return memberProcesses(Memory, []*member{m}) },
		Missing: map[string]string{
			"election": "the memory backend is one process: killing it loses the store, so there is no election to time",
		},
	}
	s.onClose(m.close)
	attachCoordinator(ctx, env, s)
	return s, nil
}

// ---- ZooKeeper ----

func startZooKeeperSystem(ctx context.Context, env *runEnv) (*System, error) {
	if _, err := env.binDir(ZooKeeper); err != nil {
		return nil, err
	}
	// Production: forceSync=yes and a normal JIT, so that the comparison
	// with Raft is fair (the test harness runs without either).
	zk, err := zktest.Start(zktest.Options{
		Servers: env.opts.Voters, TickTime: zkTick, Production: true,
		Dir: filepath.Join(env.opts.WorkDir, "zookeeper"), StartTimeout: 90 * time.Second,
		Logf: env.opts.logf,
	})
	if err != nil {
		return nil, err
	}
	s := &System{Name: ZooKeeper, Missing: map[string]string{}, ZooKeeperAddress: zk.ConnectString()}
	s.onClose(func() error { zk.Close(); return nil })
	s.Settings = append(s.Settings,
		fmt.Sprintf("zookeeper.servers=%d", env.opts.Voters),
		"zookeeper.forceSync=yes",
		fmt.Sprintf("zookeeper.tickTime=%v", zkTick),
		fmt.Sprintf("zookeeper.election-candidates.session-timeout=%v", zkElectionSession))
	cfg := map[string]string{"zookeeper.address": zk.ConnectString()}
	m, err := env.newMember(ZooKeeper, "ZooKeeper plugin (all clients)", cfg, true)
	if err != nil {
		s.Close()
		return nil, err
	}
	if err := m.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.onClose(m.close)
	s.NewClient = func(ctx context.Context, name string) (core.MetadataBackend, error) {
		return m.client(ctx, core.ClientOptions{Name: name})
	}
	s.Processes = func() []ProcessMemory {
		return append(memberProcesses(ZooKeeper, []*member{m}), zkProcesses(zk)...)
	}
	s.Election = func(ctx context.Context) (ElectionRig, error) {
		// Its own root: the bench's coordinator already leads the main
		// tree's election.
		ecfg := map[string]string{
			"zookeeper.address":                cfg["zookeeper.address"],
			"zookeeper.path.root":              "/metaplane-bench-election",
			"zookeeper.client.session-timeout": zkElectionSession.String(),
		}
		var ms []*member
		for i := 1; i <= 3; i++ {
			em, err := env.newMember(ZooKeeper, fmt.Sprintf("ZooKeeper candidate %d", i), ecfg, false)
			if err != nil {
				return nil, err
			}
			ms = append(ms, em)
		}
		return newElectionRig(ctx, ZooKeeper, ms, core.ClientOptions{SessionTimeout: zkElectionSession}, nil)
	}
	attachCoordinator(ctx, env, s)
	return s, nil
}

// ---- Raft ----

// raftCluster is n Raft voters, each a plugin process with its data in
// its own directory (formatted with raft.BootstrapSettings when n > 1).
func raftCluster(ctx context.Context, env *runEnv, dir string, n int) ([]*member, error) {
	var voters []string
	for i := 1; i <= n; i++ {
		port, err := ports.Free()
		if err != nil {
			return nil, err
		}
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i, port))
	}
	var ms []*member
	for i := 1; i <= n; i++ {
		_, addr, _ := strings.Cut(voters[i-1], "@")
		_, port, _ := strings.Cut(addr, ":")
		cfg := map[string]string{
			"coordinator.raft.voters":             strings.Join(voters, ","),
			"coordinator.raft.node.id":            fmt.Sprint(i),
			"coordinator.raft.port":               port,
			"coordinator.raft.dir":                filepath.Join(dir, fmt.Sprintf("voter%d", i)),
			"coordinator.raft.election.timeout":   raftElectionTimeout.String(),
			"coordinator.raft.heartbeat.interval": raftHeartbeat.String(),
		}
		if n > 1 {
			// A new multi-voter cluster: format each voter's directory
			// first, as `metaplane raft bootstrap` does.
			if _, err := raft.BootstrapSettings(ctx, cfg); err != nil {
				return nil, fmt.Errorf("bootstrap Raft voter %d: %w", i, err)
			}
		}
		m, err := env.newMember(Raft, fmt.Sprintf("Raft voter %d", i), cfg, true)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// startRaftCluster starts n voters under dir. A port picked free can be
// taken by another process before the voter binds it: the cluster is then
// started again on new ports, at most three times.
func startRaftCluster(ctx context.Context, env *runEnv, dir string, n int) ([]*member, error) {
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		ms, err := raftCluster(ctx, env, filepath.Join(dir, fmt.Sprintf("attempt%d", attempt)), n)
		if err != nil {
			return nil, err
		}
		if last = startMembers(ctx, ms); last == nil {
			return ms, nil
		}
		for _, m := range ms {
			m.close()
		}
		if ctx.Err() != nil || !strings.Contains(last.Error(), "address already in use") {
			break
		}
		env.opts.logf("  Raft voter port taken, retrying on new ports: %v", last)
	}
	return nil, last
}

// startMembers starts every member at once (a Raft voter waits for its
// peers before it can elect).
func startMembers(ctx context.Context, ms []*member) error {
	errc := make(chan error, len(ms))
	for _, m := range ms {
		go func(m *member) { errc <- m.start(ctx) }(m)
	}
	var first error
	for range ms {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func startRaft(ctx context.Context, env *runEnv) (*System, error) {
	if _, err := env.binDir(Raft); err != nil {
		return nil, err
	}
	n := env.opts.Voters
	ms, err := startRaftCluster(ctx, env, filepath.Join(env.opts.WorkDir, "raft"), n)
	if err != nil {
		return nil, err
	}
	s := &System{Name: Raft, Missing: map[string]string{}}
	s.Settings = append(s.Settings,
		fmt.Sprintf("coordinator.raft.voters=%d", n),
		fmt.Sprintf("coordinator.raft.election.timeout=%v", raftElectionTimeout),
		fmt.Sprintf("coordinator.raft.heartbeat.interval=%v", raftHeartbeat))
	for _, m := range ms {
		s.onClose(m.close)
	}
	// Clients go to the leader's voter, as a leader coordinator's would.
	leader, err := raftLeader(ctx, ms, initialElectionBound)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.NewClient = func(ctx context.Context, name string) (core.MetadataBackend, error) {
		return leader.client(ctx, core.ClientOptions{Name: name})
	}
	s.Processes = func() []ProcessMemory { return memberProcesses(Raft, ms) }
	s.Election = func(ctx context.Context) (ElectionRig, error) {
		ems, err := startRaftCluster(ctx, env, filepath.Join(env.opts.WorkDir, "raft-election"), 3)
		if err != nil {
			return nil, err
		}
		for _, m := range ems {
			// The rig restarts a killed voter itself, after measuring.
			m.opts.MaxFailures = 1
		}
		return newElectionRig(ctx, Raft, ems, core.ClientOptions{}, func(context.Context, []*member) error { return nil })
	}
	attachCoordinator(ctx, env, s)
	return s, nil
}

// raftLeader waits until one voter reports itself Raft leader.
func raftLeader(ctx context.Context, ms []*member, bound time.Duration) (*member, error) {
	if len(ms) == 1 {
		return ms[0], nil
	}
	probes := make([]core.MetadataBackend, len(ms))
	defer func() {
		for _, c := range probes {
			if c != nil {
				c.Close()
			}
		}
	}()
	deadline := time.Now().Add(bound)
	var last error
	for time.Now().Before(deadline) {
		for i, m := range ms {
			if probes[i] == nil {
				c, err := m.client(ctx, core.ClientOptions{Name: "bench-probe"})
				if err != nil {
					last = err
					continue
				}
				probes[i] = c
			}
			st, err := probes[i].Status(ctx)
			if err != nil {
				last = err
				continue
			}
			if st.Role == core.RoleLeader {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no Raft leader among %d voters after %v (last error: %v)", len(ms), bound, last)
}

// ---- election ----

// electionRig is three candidates, each on its own member (plugin
// process), all campaigning in one store.
type electionRig struct {
	backend string
	members []*member
	copts   core.ClientOptions

	mu      sync.Mutex
	clients []core.MetadataBackend
	cancels []context.CancelFunc
	leader  int
	gen     int
	wins    chan win
	done    chan struct{}
	closed  bool
	// restoreErr is why the last killed member could not be restored.
	restoreErr error
	restoreIdx int
}

type win struct {
	idx int
	at  time.Time
}

func newElectionRig(ctx context.Context, backend string, ms []*member, copts core.ClientOptions, start func(context.Context, []*member) error) (*electionRig, error) {
	r := &electionRig{backend: backend, members: ms, copts: copts, leader: -1,
		clients: make([]core.MetadataBackend, len(ms)), cancels: make([]context.CancelFunc, len(ms)),
		wins: make(chan win, 16), done: make(chan struct{})}
	var err error
	if start != nil {
		err = start(ctx, ms)
	} else {
		err = startMembers(ctx, ms)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	for i := range ms {
		if err := r.campaign(ctx, i); err != nil {
			r.Close()
			return nil, err
		}
	}
	select {
	case w := <-r.wins:
		r.leader = w.idx
	case <-time.After(initialElectionBound):
		r.Close()
		return nil, fmt.Errorf("no candidate elected within %v", initialElectionBound)
	case <-ctx.Done():
		r.Close()
		return nil, ctx.Err()
	}
	return r, nil
}

// campaign opens a client on member i and campaigns in the background.
func (r *electionRig) campaign(ctx context.Context, i int) error {
	c, err := r.members[i].client(ctx, r.copts)
	if err != nil {
		return fmt.Errorf("%s: open client: %w", r.members[i].label, err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.gen++
	id := fmt.Sprintf("bench-candidate-%d-%d", i+1, r.gen)
	r.clients[i], r.cancels[i] = c, cancel
	r.mu.Unlock()
	go func() {
		_, err := c.Campaign(cctx, core.Candidate{ID: id, Address: "CLIENT://127.0.0.1:0"})
		if err == nil {
			select {
			case r.wins <- win{idx: i, at: time.Now()}:
			case <-r.done:
			}
		}
	}()
	return nil
}

// KillLeaderAndWait SIGKILLs the leader's plugin process, times the
// election of another candidate, then restarts the killed member and lets
// it campaign again.
func (r *electionRig) KillLeaderAndWait(ctx context.Context) (time.Duration, error) {
	// Catch up on wins that happened in between.
	for {
		select {
		case w := <-r.wins:
			r.leader = w.idx
			continue
		default:
		}
		break
	}
	if r.restoreErr != nil {
		// Try once more before giving up on this kill.
		if err := r.restore(ctx, r.restoreIdx); err != nil {
			return 0, fmt.Errorf("the previous kill's member could not be restored: %w (first attempt: %v)", err, r.restoreErr)
		}
		r.restoreErr = nil
	}
	l := r.leader
	if l < 0 {
		return 0, errors.New("no current leader")
	}
	pid := r.members[l].pid()
	if pid <= 0 {
		return 0, fmt.Errorf("%s: no process to kill", r.members[l].label)
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %s (pid %d): %w", r.members[l].label, pid, err)
	}
	var took time.Duration
	timer := time.NewTimer(electionWaitBound)
	defer timer.Stop()
wait:
	for {
		select {
		case w := <-r.wins:
			if w.idx == l {
				continue // a stale win of the killed candidate
			}
			took = w.at.Sub(t0)
			r.leader = w.idx
			break wait
		case <-timer.C:
			return 0, fmt.Errorf("no new leader within %v of killing %s", electionWaitBound, r.members[l].label)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	// Restore the killed member, outside the measurement. The measurement
	// stands either way; a rig that could not be restored fails the next
	// kill with this reason.
	r.restoreErr, r.restoreIdx = r.restore(ctx, l), l
	return took, nil
}

func (r *electionRig) restore(ctx context.Context, i int) error {
	r.mu.Lock()
	if r.cancels[i] != nil {
		r.cancels[i]()
	}
	c := r.clients[i]
	r.clients[i] = nil
	r.mu.Unlock()
	if c != nil {
		c.Close()
	}
	r.members[i].close()
	rctx, cancel := context.WithTimeout(ctx, memberRecoveryBound)
	defer cancel()
	if err := r.members[i].start(rctx); err != nil {
		return err
	}
	if err := r.campaign(rctx, i); err != nil {
		return err
	}
	if r.backend == Raft {
		// Wait until the restarted voter has applied what the new leader
		// has committed (at least the new leader's own record, which it
		// can only have received after rejoining), so the next kill
		// leaves a working quorum. A restarted voter reports the leader
		// it knew from disk at once, so its leader id proves nothing.
		r.mu.Lock()
		lc, rc := r.clients[r.leader], r.clients[i]
		r.mu.Unlock()
		lst, err := lc.Status(rctx)
		if err != nil {
			return fmt.Errorf("leader status: %w", err)
		}
		for {
			st, err := rc.Status(rctx)
			if err == nil && st.AppliedIndex >= lst.CommitIndex && st.LeaderID != "" {
				return nil
			}
			select {
			case <-rctx.Done():
				return fmt.Errorf("%s did not catch up with the leader: %w", r.members[i].label, rctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Close stops every candidate and member.
func (r *electionRig) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	cancels := append([]context.CancelFunc(nil), r.cancels...)
	clients := append([]core.MetadataBackend(nil), r.clients...)
	r.mu.Unlock()
	for _, c := range cancels {
		if c != nil {
			c()
		}
	}
	for _, c := range clients {
		if c != nil {
			c.Close()
		}
	}
	for _, m := range r.members {
		m.close()
	}
	return nil
}

// zkProcesses lists the ZooKeeper server JVMs for the memory profile.
func zkProcesses(zk *zktest.Cluster) []ProcessMemory {
	var out []ProcessMemory
	for i := 0; i < zk.Size(); i++ {
		if pid := zk.Pid(i); pid != 0 {
			out = append(out, ProcessMemory{Backend: ZooKeeper, Role: fmt.Sprintf("ZooKeeper server %d (JVM)", i+1), PID: pid})
		}
	}
	return out
}
