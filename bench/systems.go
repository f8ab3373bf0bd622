package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// logger is the plugins' and coordinators' logger: records at
// Options.LogLevel and above (warnings by default) to the progress log.
func (env *runEnv) logger() *slog.Logger {
	var w io.Writer = io.Discard
	if env.opts.Log != nil {
		w = env.opts.Log
	}
	level := slog.LevelWarn
	if env.opts.LogLevel != "" {
		_ = level.UnmarshalText([]byte(env.opts.LogLevel)) // checked by Run
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
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
	s.Election = func(ctx context.Context, n int) (ElectionRig, error) {
		// Its own root: the bench's coordinator already leads the main
		// tree's election.
		ecfg := map[string]string{
			"zookeeper.address":                cfg["zookeeper.address"],
			"zookeeper.path.root":              fmt.Sprintf("/metaplane-bench-election-%d", n),
			"zookeeper.client.session-timeout": zkElectionSession.String(),
		}
		var ms []*member
		for i := 1; i <= n; i++ {
			em, err := env.newMember(ZooKeeper, fmt.Sprintf("ZooKeeper candidate %d", i), ecfg, false)
			if err != nil {
				return nil, err
			}
			ms = append(ms, em)
		}
		return newElectionRig(ctx, env, ZooKeeper, ms, core.ClientOptions{SessionTimeout: zkElectionSession}, false, initialElectionBound)
	}
	attachCoordinator(ctx, env, s)
	return s, nil
}

// ---- Raft ----

// raftCluster is n Raft voters, each a plugin process with its data in
// its own directory (formatted with raft.BootstrapSettings when n > 1).
func raftCluster(ctx context.Context, env *runEnv, dir string, n int, restart bool) ([]*member, error) {
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
		m, err := env.newMember(Raft, fmt.Sprintf("Raft voter %d", i), cfg, restart)
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
	return startRaftMembers(ctx, env, dir, n, true)
}

// startRaftMembers is startRaftCluster; restart false launches voters
// whose host never restarts them (the election rows restart a killed
// voter themselves, after measuring).
func startRaftMembers(ctx context.Context, env *runEnv, dir string, n int, restart bool) ([]*member, error) {
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		ms, err := raftCluster(ctx, env, filepath.Join(dir, fmt.Sprintf("attempt%d", attempt)), n, restart)
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
	rigs := 0
	s.Election = func(ctx context.Context, n int) (ElectionRig, error) {
		// Voters the host does not restart: the rig restarts a killed voter
		// itself, after measuring (a voter restarted by the host during
		// the election would rejoin in the middle of it). Each rig is a
		// new cluster, in a directory of its own.
		rigs++
		ems, err := startRaftMembers(ctx, env, filepath.Join(env.opts.WorkDir, fmt.Sprintf("raft-election-%d-%d", n, rigs)), n, false)
		if err != nil {
			return nil, err
		}
		return newElectionRig(ctx, env, Raft, ems, core.ClientOptions{}, true, initialElectionBound)
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
