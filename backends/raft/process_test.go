package raft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins"
)

// voterProcs is a cluster whose every voter is a real
// metaplane-backend-raft plugin process, launched (and restarted after a
// death) by a plugins.Plugin host in the test process.
type voterProcs struct {
	t       testing.TB
	bin     string
	cfgs    []map[string]string
	plugins []*plugins.Plugin
	// logs keeps the last lines each voter's host logged, the plugin's
	// own output included: what a failing test shows.
	logs []*tailLog
}

// tailLog keeps the last 400 lines written to it.
type tailLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *tailLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		l.lines = append(l.lines, line)
	}
	if len(l.lines) > 400 {
		l.lines = append([]string(nil), l.lines[len(l.lines)-400:]...)
	}
	return len(b), nil
}

func (l *tailLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// logger writes a host's log (info and up) to l, and to stderr as well
// with METAPLANE_TEST_VERBOSE.
func (l *tailLog) logger() *slog.Logger {
	var w io.Writer = l
	if os.Getenv("METAPLANE_TEST_VERBOSE") != "" {
		w = io.MultiWriter(l, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func voterConfigs(t testing.TB, n int) []map[string]string {
	ports := make([]int, n)
	items := make([]string, n)
	for i := range ports {
		ports[i] = testutil.FreePort(t)
		items[i] = fmt.Sprintf("%d@127.0.0.1:%d", i+1, ports[i])
	}
	root := t.TempDir()
	cfgs := make([]map[string]string, n)
	for i := range cfgs {
		cfgs[i] = map[string]string{
			"coordinator.raft.voters":                     strings.Join(items, ","),
			"coordinator.raft.node.id":                    strconv.Itoa(i + 1),
			"coordinator.raft.port":                       strconv.Itoa(ports[i]),
			"coordinator.raft.dir":                        filepath.Join(root, fmt.Sprintf("m%d", i+1)),
			"coordinator.raft.heartbeat.interval":         "50ms",
			"coordinator.raft.election.timeout":           "400ms",
			"coordinator.raft.first-election.timeout":     "100ms",
			"coordinator.raft.catchup.timeout":            "5s",
			"coordinator.raft.logdb.profile":              "tiny",
			"coordinator.raft.snapshot.trigger.threshold": "1000",
			"coordinator.tablet-server.session-timeout":   "2s",
		}
	}
	return cfgs
}

func quietLogger() *slog.Logger {
	if os.Getenv("METAPLANE_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func launch(ctx context.Context, bin string, cfg map[string]string) (*plugins.Plugin, error) {
	return launchLogged(ctx, bin, cfg, quietLogger())
}

func launchLogged(ctx context.Context, bin string, cfg map[string]string, log *slog.Logger) (*plugins.Plugin, error) {
	return plugins.Launch(ctx, plugins.LaunchOptions{
		Path: bin, Config: cfg, Logger: log, StartTimeout: 30 * time.Second,
		MaxFailures: 100, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: 200 * time.Millisecond,
	})
}

func startProcs(t testing.TB, n int) *voterProcs {
	t.Helper()
	return startProcsWith(t, voterConfigs(t, n))
}

// startProcsWith launches one voter process per configuration.
func startProcsWith(t testing.TB, cfgs []map[string]string) *voterProcs {
	t.Helper()
	n := len(cfgs)
	v := &voterProcs{t: t, bin: testutil.Binary(t, "metaplane-backend-raft"), cfgs: cfgs, plugins: make([]*plugins.Plugin, n), logs: make([]*tailLog, n)}
	for i := range v.logs {
		v.logs[i] = &tailLog{}
	}
	t.Cleanup(func() {
		for _, p := range v.plugins {
			if p != nil {
				_ = p.Close()
			}
		}
	})
	// Format every member's directory first, as an operator runs
	// `metaplane raft bootstrap` (the offline function it calls).
	if n > 1 {
		for i, cfg := range cfgs {
			if _, err := BootstrapSettings(context.Background(), cfg); err != nil {
				t.Fatalf("bootstrap voter %d: %v", i+1, err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range v.plugins {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			v.plugins[i], errs[i] = launchLogged(ctx, v.bin, v.cfgs[i], v.logs[i].logger())
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("launch voter %d: %v", i+1, err)
		}
	}
	return v
}

// openClient opens a client of a voter process with open. Its session grant is a
// Raft proposal: on a cluster still electing (slow on a loaded machine) it
// may time out, and is retried, bounded.
func openClient(open func(context.Context, core.ClientOptions) (core.MetadataBackend, error), opts core.ClientOptions) (core.MetadataBackend, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := open(ctx, opts)
		cancel()
		if err == nil || !errors.Is(err, core.ErrUnavailable) || time.Now().After(deadline) {
			return c, err
		}
	}
}

func (v *voterProcs) client(i int) core.MetadataBackend {
	v.t.Helper()
	c, err := openClient(v.plugins[i].NewClient, core.ClientOptions{Name: fmt.Sprintf("test-%d", i+1)})
	if err != nil {
		v.t.Fatalf("client of voter %d: %v", i+1, err)
	}
	v.t.Cleanup(func() { _ = c.Close() })
	return c
}

// leader finds the voter whose status says leader, using one client per
// voter.
func (v *voterProcs) leader(clients []core.MetadataBackend) int {
	for i, c := range clients {
		if c == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx)
		cancel()
		if err == nil && st.Role == core.RoleLeader {
			return i
		}
	}
	return -1
}

func (v *voterProcs) signal(i int, sig syscall.Signal) int {
	v.t.Helper()
	pid := v.plugins[i].Pid()
	if pid == 0 {
		v.t.Fatalf("voter %d has no process", i+1)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		v.t.Fatalf("signal %v to voter %d (pid %d): %v", sig, i+1, pid, err)
	}
	return pid
}

// waitRestarted waits until voter i runs a new process (after a kill).
func (v *voterProcs) waitRestarted(i, oldPid int) {
	v.t.Helper()
	testutil.WaitFor(v.t, 60*time.Second, fmt.Sprintf("voter %d to be restarted", i+1), func() bool {
		pid := v.plugins[i].Pid()
		return pid != 0 && pid != oldPid
	})
}

// procStore is a conformance store of n voter processes; clients go to the
// voters in turn.
type procStore struct {
	v    *voterProcs
	mu   sync.Mutex
	next int
	// voterOf is the voter (index) each client was opened on.
	voterOf map[core.MetadataBackend]int
}

func (s *procStore) NewClient(t conformance.T, opts conformance.ClientOptions) core.MetadataBackend {
	t.Helper()
	s.mu.Lock()
	i := s.next % len(s.v.plugins)
	s.next++
	s.mu.Unlock()
	// A conformance client: the plugin's backend, not the host, answers
	// calls with ended contexts and calls after Close.
	c, err := openClient(s.v.plugins[i].NewConformanceClient, core.ClientOptions{SessionTimeout: opts.SessionTimeout, Name: t.Name()})
	if err != nil {
		t.Fatalf("open a plugin client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s.mu.Lock()
	if s.voterOf == nil {
		s.voterOf = map[core.MetadataBackend]int{}
	}
	s.voterOf[c] = i
	s.mu.Unlock()
	return c
}

// silencingProcStore is a procStore of several voters that implements
// conformance.Silencer: a client lives in its voter's process, so a
// crashed client is a frozen process holding only that client.
type silencingProcStore struct{ *procStore }

// Silence freezes (SIGSTOP) the voter process holding c, which must hold
// no other client of the store; it is thawed (SIGCONT) at cleanup. Its
// sessions then get no renewal, and the other voters' leader (a new one
// if the frozen voter led) expires them by their timeout.
func (s silencingProcStore) Silence(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	s.mu.Lock()
	i, ok := s.voterOf[c]
	others := 0
	for o, j := range s.voterOf {
		if j == i && o != c {
			others++
		}
	}
	s.mu.Unlock()
	if !ok || others > 0 {
		t.Fatalf("cannot silence client %p alone: opened here %v, %d other clients on its voter", c, ok, others)
	}
	s.v.signal(i, syscall.SIGSTOP)
	t.Cleanup(func() { s.v.signal(i, syscall.SIGCONT) })
}

func (s *procStore) ExpireSession(t conformance.T, c core.MetadataBackend) {
	t.Helper()
	se, ok := core.Optional[core.SessionExpirer](c)
	if !ok {
		t.Fatalf("client %T cannot expire its session", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := se.ExpireSession(ctx); err != nil {
		t.Fatalf("expire session: %v", err)
	}
}

// SpareMember prepares one more voter process, joining the store's
// cluster (coordinator.raft.join) with the next id on a free port
// (conformance.SpareMaker, for Membership/AddRemove).
func (s *procStore) SpareMember(t conformance.T) (string, string, func() core.MetadataBackend) {
	t.Helper()
	tb := t.(testing.TB)
	id := strconv.Itoa(len(s.v.cfgs) + 1)
	port := testutil.FreePort(tb)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := maps.Clone(s.v.cfgs[0])
	cfg["coordinator.raft.voters"] += "," + id + "@" + addr
	cfg["coordinator.raft.node.id"] = id
	cfg["coordinator.raft.port"] = strconv.Itoa(port)
	cfg["coordinator.raft.dir"] = filepath.Join(tb.TempDir(), "spare")
	cfg["coordinator.raft.join"] = "true"
	return id, addr, func() core.MetadataBackend {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		p, err := launch(ctx, s.v.bin, cfg)
		if err != nil {
			t.Fatalf("launch the spare voter %s: %v", id, err)
		}
		t.Cleanup(func() { _ = p.Close() })
		for {
			// A member still catching up may time a session grant out.
			c, err := p.NewConformanceClient(ctx, core.ClientOptions{Name: t.Name() + "-spare"})
			if err == nil {
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			if !errors.Is(err, core.ErrUnavailable) || ctx.Err() != nil {
				t.Fatalf("client of the spare voter %s: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond) // back off from a member still joining
		}
	}
}

func procHarness(n int) conformance.Harness {
	return conformance.Harness{Name: fmt.Sprintf("raft (%d voter processes)", n), NewStore: func(t conformance.T) conformance.Store {
		tb, ok := t.(testing.TB)
		if !ok {
			t.Fatalf("conformance.T %T is not a testing.TB", t)
		}
		s := &procStore{v: startProcs(tb, n)}
		if n < 3 {
			// Freezing the only voter's process would stop the store.
			return s
		}
		return silencingProcStore{s}
	}}
}

// TestConformancePluginProcessOneVoter runs the suite on one voter that is
// a real plugin process.
func TestConformancePluginProcessOneVoter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a plugin process per property; skipped with -short")
	}
	conformance.Run(t, procHarness(1))
}

// TestConformancePluginProcessThreeVoters runs the suite on three voters,
// each a real plugin process.
func TestConformancePluginProcessThreeVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three plugin processes per property; skipped with -short")
	}
	conformance.Run(t, procHarness(3))
}

// TestProcessKillLeaderElects: SIGKILL of the leader's process; the two
// others elect a new leader that serves writes, and the killed voter comes
// back (restarted by its host) and catches up.
func TestProcessKillLeaderElects(t *testing.T) {
	v := startProcs(t, 3)
	clients := []core.MetadataBackend{v.client(0), v.client(1), v.client(2)}
	ctx := testutil.Context(t, 20*time.Second)
	var old int
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { old = v.leader(clients); return old >= 0 })
	if _, _, err := core.Create(ctx, clients[(old+1)%3], "/before-kill", nil, core.CreateOptions{}); err != nil {
		t.Fatalf("write before the kill: %v", err)
	}
	pid := v.signal(old, syscall.SIGKILL)
	killed := time.Now()
	survivors := []core.MetadataBackend{nil, nil, nil}
	for i := range clients {
		if i != old {
			survivors[i] = clients[i]
		}
	}
	var nl int
	testutil.WaitFor(t, 20*time.Second, "a new leader", func() bool { nl = v.leader(survivors); return nl >= 0 })
	t.Logf("new leader %d elected %v after SIGKILL of leader %d", nl+1, time.Since(killed), old+1)
	if _, _, err := core.Create(ctx, survivors[nl], "/after-kill", nil, core.CreateOptions{}); err != nil {
		t.Fatalf("write on the new leader: %v", err)
	}
	v.waitRestarted(old, pid)
	back := v.client(old)
	testutil.WaitFor(t, 30*time.Second, "the restarted voter to catch up", func() bool {
		res, err := back.GetMany(ctx, []string{"/before-kill", "/after-kill"}, core.ReadOptions{Stale: true})
		return err == nil && res[0].Err == nil && res[1].Err == nil
	})
}

// electionBound is the seeds' bound on an election after the leader's
// process is killed, at the default timing (election timeout 1s).
const electionBound = 5 * time.Second

// TestProcessKillLeaderElectsWithinBound: three voter processes at the
// default Raft timing (heartbeat 500ms, election timeout 1s); three times
// over, the leader's process is SIGKILLed and one of the two others must
// report itself leader within the seeds' 5 s bound, then serve a write;
// the killed voter, restarted by its host, catches up before the next
// round, so each round kills a leader of a whole three-voter quorum.
func TestProcessKillLeaderElectsWithinBound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three voter processes")
	}
	cfgs := voterConfigs(t, 3)
	for _, cfg := range cfgs {
		delete(cfg, "coordinator.raft.heartbeat.interval")
		delete(cfg, "coordinator.raft.election.timeout")
		delete(cfg, "coordinator.raft.first-election.timeout")
	}
	v := startProcsWith(t, cfgs)
	clients := []core.MetadataBackend{v.client(0), v.client(1), v.client(2)}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for round := 1; round <= 3; round++ {
		var old int
		testutil.WaitFor(t, 30*time.Second, "a leader", func() bool { old = v.leader(clients); return old >= 0 })
		path := fmt.Sprintf("/round-%d", round)
		if _, _, err := core.Create(ctx, clients[(old+1)%3], path+"-before", nil, core.CreateOptions{}); err != nil {
			t.Fatalf("round %d: write before the kill: %v", round, err)
		}
		sctx, sc := context.WithTimeout(ctx, time.Second)
		oldSt, err := clients[old].Status(sctx)
		sc()
		if err != nil {
			t.Fatalf("round %d: status of the leader: %v", round, err)
		}
		pid := v.signal(old, syscall.SIGKILL)
		killed := time.Now()
		// The harness restarts a killed voter at once, and at the default
		// timing the restarted one may win the election itself: a new
		// leader is any voter leading at a higher term, the restarted
		// one included (through a client of its new process).
		candidates := append([]core.MetadataBackend(nil), clients...)
		candidates[old] = nil
		var nl int
		testutil.WaitFor(t, 30*time.Second, "a new leader", func() bool {
			if candidates[old] == nil {
				if p := v.plugins[old].Pid(); p != 0 && p != pid {
					candidates[old] = v.client(old)
				}
			}
			nl = v.leader(candidates)
			if nl < 0 {
				return false
			}
			cctx, cc := context.WithTimeout(ctx, time.Second)
			st, err := candidates[nl].Status(cctx)
			cc()
			return err == nil && st.Epoch > oldSt.Epoch
		})
		took := time.Since(killed)
		t.Logf("round %d: voter %d elected %v after SIGKILL of leader %d", round, nl+1, took, old+1)
		if took >= electionBound {
			t.Errorf("round %d: voter %d elected %v after SIGKILL of leader %d, want under %v", round, nl+1, took, old+1, electionBound)
		}
		survivors := candidates
		if _, _, err := core.Create(ctx, survivors[nl], path+"-after", nil, core.CreateOptions{}); err != nil {
			t.Fatalf("round %d: write on the new leader: %v", round, err)
		}
		v.waitRestarted(old, pid)
		if candidates[old] == nil {
			candidates[old] = v.client(old)
		}
		clients[old] = candidates[old]
		back := clients[old]
		testutil.WaitFor(t, 60*time.Second, "the restarted voter to catch up", func() bool {
			res, err := back.GetMany(ctx, []string{path + "-after"}, core.ReadOptions{Stale: true})
			return err == nil && res[0].Err == nil
		})
	}
}

// TestProcessKillAllKeepsAcknowledged: SIGKILL of all three voters at once,
// then restart from disk: every acknowledged write is there.
func TestProcessKillAllKeepsAcknowledged(t *testing.T) {
	v := startProcs(t, 3)
	clients := []core.MetadataBackend{v.client(0), v.client(1), v.client(2)}
	ctx := testutil.Context(t, 20*time.Second)
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("/w%d-%04d", w, i)
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, _, err := core.Create(wctx, clients[w], p, []byte(p), core.CreateOptions{})
				cancel()
				if err != nil {
					return // the process died under us
				}
				mu.Lock()
				acked = append(acked, p)
				mu.Unlock()
			}
		}(w)
	}
	testutil.WaitFor(t, 20*time.Second, "some acknowledged writes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 60
	})
	pids := make([]int, 3)
	for i := range pids {
		pids[i] = v.signal(i, syscall.SIGKILL)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	want := append([]string(nil), acked...)
	mu.Unlock()
	for i := range pids {
		v.waitRestarted(i, pids[i])
	}
	reader := v.client(0)
	var res []core.GetResult
	testutil.WaitFor(t, 30*time.Second, "the restarted cluster to serve reads", func() bool {
		var err error
		res, err = reader.GetMany(ctx, want, core.ReadOptions{})
		return err == nil
	})
	for i, p := range want {
		if res[i].Err != nil || string(res[i].Node.Data) != p {
			t.Fatalf("acknowledged write %s lost after SIGKILL of all voters: %v", p, res[i].Err)
		}
	}
	t.Logf("%d acknowledged writes survived SIGKILL of all three voters", len(want))
}

// TestProcessStaleLeaderNeverCommits: the leader's process is frozen
// (SIGSTOP) while the others elect a new leader; once thawed, the old
// leader's write never commits and its fenced writes are refused with
// ErrFenced.
func TestProcessStaleLeaderNeverCommits(t *testing.T) {
	v := startProcs(t, 3)
	clients := []core.MetadataBackend{v.client(0), v.client(1), v.client(2)}
	ctx := testutil.Context(t, 20*time.Second)
	var old int
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { old = v.leader(clients); return old >= 0 })
	l1, err := clients[old].Campaign(ctx, core.Candidate{ID: "old", Address: "CLIENT://old:1"})
	if err != nil {
		t.Fatalf("campaign on the leader: %v", err)
	}
	v.signal(old, syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			v.signal(old, syscall.SIGCONT)
		}
	}()
	others := []core.MetadataBackend{nil, nil, nil}
	for i := range clients {
		if i != old {
			others[i] = clients[i]
		}
	}
	var nl int
	testutil.WaitFor(t, 20*time.Second, "a new leader in the majority", func() bool { nl = v.leader(others); return nl >= 0 })
	l2, err := others[nl].Campaign(ctx, core.Candidate{ID: "new", Address: "CLIENT://new:1"})
	if err != nil {
		t.Fatalf("campaign on the new leader: %v", err)
	}
	if l2.Epoch() <= l1.Epoch() {
		t.Fatalf("new epoch %d not above %d", l2.Epoch(), l1.Epoch())
	}
	// Thaw the old leader and write through it at once, with its old
	// fence: the write must not commit.
	v.signal(old, syscall.SIGCONT)
	stopped = false
	_, _, err = core.Create(ctx, clients[old], "/stale", nil, core.CreateOptions{Fence: l1.Fence()})
	if err == nil {
		t.Fatalf("the stale leader's fenced write was accepted")
	}
	if !errors.Is(err, core.ErrFenced) && !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("the stale leader's write: got %v, want ErrFenced or ErrUnavailable", err)
	}
	testutil.WaitFor(t, 20*time.Second, "the stale leader's fenced writes to be refused with ErrFenced", func() bool {
		_, _, err := core.Create(ctx, clients[old], "/stale-2", nil, core.CreateOptions{Fence: l1.Fence()})
		if err == nil {
			t.Fatalf("the stale leader's fenced write was accepted after rejoining")
		}
		return errors.Is(err, core.ErrFenced)
	})
	res, err := others[nl].GetMany(ctx, []string{"/stale", "/stale-2"}, core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !errors.Is(r.Err, core.ErrNotFound) {
			t.Fatalf("a stale leader's write committed: %+v", r)
		}
	}
	select {
	case <-l1.Lost():
	case <-time.After(10 * time.Second):
		t.Fatalf("the old leadership is not lost")
	}
}
