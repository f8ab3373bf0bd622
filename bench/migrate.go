package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
)

// The migrate. rows move a tree in the original (Fluss) layout from the
// run's ZooKeeper server to fresh Raft voters with the migrate engine, the
// way the zk-to-raft verbs do: each step is measured once per run (a
// migration is not a call that repeats), after the rounds of the other
// rows. The tree lives under its own ZooKeeper root, written by its own
// ZooKeeper plugin; every target is a new single-voter Raft store.

// Migration sizes: the tree of a full run and of a quick one; the tool's
// memory is also measured on a tree a tenth that size.
const (
	migrateNodesFull  = 100_000
	migrateNodesQuick = 10_000
	// MaxMigrateNodes bounds Options.MigrateNodes.
	MaxMigrateNodes = 1_000_000
	// MinMigrateNodes is the smallest tree Options.MigrateNodes takes.
	MinMigrateNodes = 1_000
)

// Migration is what the migrate. rows measured, for the targets.
type Migration struct {
	Nodes      int     `json:"nodes"`
	ExportSec  float64 `json:"export_s"`
	ImportSec  float64 `json:"import_s"`
	ValidSec   float64 `json:"validate_s"`
	PauseMS    int64   `json:"live_pause_ms"`
	LiveRounds int     `json:"live_rounds"`
	// FinalChanged is how many nodes the live migration's final scan
	// found changed after the fence; FinalUnchanged that it read nothing.
	FinalChanged   int  `json:"live_final_changed"`
	FinalUnchanged bool `json:"live_final_unchanged"`
	// FinalWatched says the final scan read the paths the source's watch
	// reported (FinalPaths of them), FinalWhy why not.
	FinalWatched bool   `json:"live_final_watched"`
	FinalPaths   int    `json:"live_final_paths"`
	FinalWhy     string `json:"live_final_why,omitempty"`
	// LiveSec is the whole live migration, rounds included.
	LiveSec float64 `json:"live_s"`
	// Tool is the peak resident memory of the export verb, a process of
	// its own, at two tree sizes.
	Tool []ToolMemory `json:"tool_memory,omitempty"`
}

// ToolMemory is the verbs' peak RSS on a tree of Nodes nodes: the export
// verb's (PeakRSSBytes), and the import and validate verbs' of its file
// into a new single-voter Raft store (0 when not measured).
type ToolMemory struct {
	Nodes                int   `json:"nodes"`
	PeakRSSBytes         int64 `json:"peak_rss_bytes"`
	ImportPeakRSSBytes   int64 `json:"import_peak_rss_bytes,omitempty"`
	ValidatePeakRSSBytes int64 `json:"validate_peak_rss_bytes,omitempty"`
}

func migrateSpecs() []rowSpec {
	const note = "measured once per run, after the other rows"
	return []rowSpec{
		{id: "migrate.export", title: "migrate: export from ZooKeeper (nodes/s)", group: "migration", metric: MetricThroughput, note: note, migration: true},
		{id: "migrate.import", title: "migrate: import into Raft (nodes/s)", group: "migration", metric: MetricThroughput, note: note, migration: true},
		{id: "migrate.validate", title: "migrate: validate Raft (nodes/s)", group: "migration", metric: MetricThroughput, note: note, migration: true},
		{id: "migrate.total", title: "migrate: export + import + validate (whole tree)", group: "migration", metric: MetricP50, note: note, migration: true},
		{id: "migrate.live-pause", title: "migrate: live-migrate write pause", group: "migration", metric: MetricP50, note: note + "; a leader writes on the source until the fence, then resigns", migration: true},
	}
}

// fixedResult is a Result of one measured step: duration d, ops nodes.
func fixedResult(backend string, d time.Duration, nodes int) Result {
	us := micros(d)
	r := Result{Backend: backend, N: 1, Ops: int64(nodes), P50Micros: us, P99Micros: us, MeanMicros: us, MinMicros: us, MaxMicros: us}
	if d > 0 {
		r.OpsPerSec = round3(float64(nodes) / d.Seconds())
	}
	return r
}

// flussTree is the paths of a tree of at least n persistent nodes in the
// original layout (ancestors included), parents first: tables of 2
// partitions of 3 buckets, each with its schema, assignments and
// LeaderAndIsr.
func flussTree(n int) []string {
	set := map[string]bool{}
	add := func(p string) {
		for ; p != "/" && !set[p]; p = core.ParentPath(p) {
			set[p] = true
		}
	}
	pid := int64(0)
	for t := int64(1); len(set) < n; t++ {
		name := fmt.Sprintf("t%05d", t)
		add(catalog.SchemaPath("bench", name, 1))
		add(catalog.TableAssignmentPath(t))
		for p := 0; p < 2; p++ {
			pid++
			part := fmt.Sprintf("p%d", p)
			add(catalog.PartitionPath("bench", name, part))
			add(catalog.PartitionAssignmentPath(pid))
			for b := int32(0); b < 3; b++ {
				add(catalog.LeaderAndIsrPath(t, pid, b))
			}
		}
	}
	paths := make([]string, 0, len(set))
	for p := range set {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool {
		di, dj := strings.Count(paths[i], "/"), strings.Count(paths[j], "/")
		if di != dj {
			return di < dj
		}
		return paths[i] < paths[j]
	})
	return paths
}

// fillTree writes paths into c in transactions of 500 creates, each node
// holding ~200 bytes. A transaction that fails unavailable (a timeout on
// a loaded machine: its outcome unknown) is retried unless its first node
// exists (a transaction applies whole or not at all), a few times with a
// growing pause.
func fillTree(ctx context.Context, c core.MetadataBackend, paths []string) error {
	data := []byte(`{"version":1,"schema_id":1,"bucket_count":3,"properties":{"table.replication.factor":"3"},"custom_properties":{},"comment":"bench table","created_time":1700000000000,"modified_time":1700000000000}`)
	for i := 0; i < len(paths); i += 500 {
		var ops []core.Op
		for _, p := range paths[i:min(i+500, len(paths))] {
			ops = append(ops, core.CreateOp(p, data, core.Persistent))
		}
		_, err := c.Txn(ctx, ops, core.TxnOptions{})
		for try := 1; try <= 5 && errors.Is(err, core.ErrUnavailable) && ctx.Err() == nil; try++ {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try) * time.Second):
			}
			rs, gerr := c.GetMany(ctx, []string{ops[0].Path}, core.ReadOptions{})
			if gerr == nil && rs[0].Err == nil {
				err = nil // it was applied
				break
			}
			_, err = c.Txn(ctx, ops, core.TxnOptions{})
		}
		if err != nil {
			return fmt.Errorf("fill the tree (%s...): %w", ops[0].Path, err)
		}
	}
	return nil
}

// migrationSource starts a ZooKeeper plugin on its own root holding a
// tree; it returns a client and a way to open more through the plugin.
func (env *runEnv) migrationSource(ctx context.Context, zkAddr, root string, nodes int) (core.MetadataBackend, func(context.Context) (core.MetadataBackend, error), func(), error) {
	m, err := env.newMember(ZooKeeper, "ZooKeeper plugin (migration source "+root+")", map[string]string{"zookeeper.address": zkAddr, "zookeeper.path.root": root}, true)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := m.start(ctx); err != nil {
		return nil, nil, nil, err
	}
	c, err := m.client(ctx, core.ClientOptions{Name: "bench-migrate"})
	if err != nil {
		m.close()
		return nil, nil, nil, err
	}
	closeAll := func() { c.Close(); m.close() }
	env.opts.logf("  writing a %d-node tree under ZooKeeper %s ...", nodes, root)
	if err := fillTree(ctx, c, flussTree(nodes)); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	open := func(ctx context.Context) (core.MetadataBackend, error) {
		return m.client(ctx, core.ClientOptions{Name: "bench-migrate-coordinator"})
	}
	return c, open, closeAll, nil
}

// sourceLeader leads the migration source as a coordinator does, through
// a client of its own (its own ZooKeeper session): it campaigns, writes
// with its fence (a node of its own, every 20 ms: a source that changes
// during the copy rounds), and resigns as soon as the migration fence
// appears (its resignation deletes its election node: a write after the
// fence, as a coordinator's is). The metaplane coordinator itself is
// not used: on a 100 000-node ZooKeeper tree its metadata image takes
// longer to load than the bench waits. stop ends it; writes counts its
// acknowledged writes.
func sourceLeader(ctx context.Context, open func(context.Context) (core.MetadataBackend, error)) (stop func() (writes int, err error), err error) {
	c, err := open(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, initialElectionBound)
	lead, err := c.Campaign(lctx, core.Candidate{ID: "bench-source-leader"})
	cancel()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("campaign on the source: %w", err)
	}
	const p = catalog.MetadataRoot + "/bench-live-writes"
	if _, _, err := core.Create(ctx, c, p, []byte("0"), core.CreateOptions{Fence: lead.Fence()}); err != nil {
		c.Close()
		return nil, fmt.Errorf("write on the source: %w", err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	writes := 0
	var werr error
	go func() {
		defer close(done)
		for i := 1; rctx.Err() == nil; i++ {
			rs, err := c.GetMany(rctx, []string{catalog.MigrationFencePath}, core.ReadOptions{})
			if err == nil && rs[0].Err == nil {
				lead.Resign(rctx)
				return
			}
			if _, err := core.Set(rctx, c, p, []byte(fmt.Sprint(i)), core.AnyVersion, lead.Fence()); err == nil {
				writes++
			} else if !errors.Is(err, core.ErrFenced) && rctx.Err() == nil {
				werr = err
				return
			}
			select {
			case <-rctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() (int, error) { rcancel(); <-done; c.Close(); return writes, werr }, nil
}

// raftTarget starts a fresh single-voter Raft store and opens a client.
func (env *runEnv) raftTarget(ctx context.Context, name string) (core.MetadataBackend, func(), error) {
	ms, err := startRaftCluster(ctx, env, filepath.Join(env.opts.WorkDir, name), 1)
	if err != nil {
		return nil, nil, err
	}
	leader, err := raftLeader(ctx, ms, initialElectionBound)
	if err == nil {
		var c core.MetadataBackend
		if c, err = leader.client(ctx, core.ClientOptions{Name: "bench-migrate"}); err == nil {
			return c, func() { c.Close(); ms[0].close() }, nil
		}
	}
	ms[0].close()
	return nil, nil, err
}

// runMigration measures the selected migrate. rows; it returns them (a
// row unavailable, with the reason, when a step could not run) and the
// figures.
func runMigration(ctx context.Context, env *runEnv, specs []rowSpec, zk *System) ([]Row, *Migration) {
	nodes := env.opts.MigrateNodes
	if nodes == 0 {
		nodes = migrateNodesFull
		if env.opts.Quick {
			nodes = migrateNodesQuick
		}
	}
	results := map[string]Result{}
	fig := &Migration{}
	why := func() string {
		if zk == nil {
			return "needs the zookeeper backend in --backends"
		}
		if _, err := env.binDir(Raft); err != nil {
			return err.Error()
		}
		return ""
	}()
	if why == "" {
		if err := measureMigration(ctx, env, zk.ZooKeeperAddress, nodes, results, fig); err != nil {
			why = err.Error()
			env.opts.logf("  migrate: %v", err)
		}
	}
	var rows []Row
	for _, s := range specs {
		row := Row{ID: s.id, Title: s.title, Group: s.group, Metric: s.metric, Note: fmt.Sprintf("%s; a %d-node tree", s.note, fig.Nodes)}
		res, ok := results[s.id]
		if !ok {
			backend := Raft
			if s.id == "migrate.export" {
				backend = ZooKeeper
			}
			res = Result{Backend: backend, Unavailable: "not measured: " + why}
			if why == "" {
				res.Unavailable = "not measured"
			}
		}
		row.Results = []Result{res}
		rows = append(rows, row)
	}
	if fig.Nodes == 0 {
		return rows, nil
	}
	return rows, fig
}

func measureMigration(ctx context.Context, env *runEnv, zkAddr string, nodes int, results map[string]Result, fig *Migration) error {
	src, openSrc, closeSrc, err := env.migrationSource(ctx, zkAddr, "/metaplane-bench-migrate", nodes)
	if err != nil {
		return err
	}
	defer closeSrc()

	env.opts.logf("  migrate: export ...")
	t0 := time.Now()
	path := filepath.Join(env.opts.WorkDir, "migrate-tree.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	er, err := migrate.ExportFile(ctx, src, f, nil)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	exp := time.Since(t0)
	fig.Nodes = er.Nodes
	results["migrate.export"] = fixedResult(ZooKeeper, exp, fig.Nodes)
	f, err = os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()

	dst, closeDst, err := env.raftTarget(ctx, "migrate-import")
	if err != nil {
		return fmt.Errorf("the Raft target: %w", err)
	}
	defer closeDst()
	env.opts.logf("  migrate: import %d nodes ...", fig.Nodes)
	t0 = time.Now()
	ir, err := migrate.ImportFile(ctx, dst, f, migrate.Options{})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	imp := time.Since(t0)
	results["migrate.import"] = fixedResult(Raft, imp, fig.Nodes)
	env.opts.logf("  migrate: validate ...")
	t0 = time.Now()
	vr, err := migrate.ValidateFile(ctx, dst, f, ir.KeptVersions)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	if n := len(vr.Differences) + vr.More; n > 0 {
		return fmt.Errorf("validate: %d differences", n)
	}
	val := time.Since(t0)
	results["migrate.validate"] = fixedResult(Raft, val, fig.Nodes)
	results["migrate.total"] = fixedResult(Raft, exp+imp+val, fig.Nodes)
	fig.ExportSec, fig.ImportSec, fig.ValidSec = round3(exp.Seconds()), round3(imp.Seconds()), round3(val.Seconds())

	// The tool's memory: the export verb, a process of its own, on this
	// tree and on one a tenth its size.
	if tool, err := env.toolBinary(); err != nil {
		env.opts.logf("  migrate: tool memory not measured: %v", err)
	} else {
		smallN := len(flussTree(max(nodes/10, 100)))
		_, _, closeSmall, err := env.migrationSource(ctx, zkAddr, "/metaplane-bench-migrate-small", smallN)
		if err != nil {
			return err
		}
		closeSmall()
		for i, m := range []struct {
			root  string
			nodes int
		}{{"/metaplane-bench-migrate-small", smallN}, {"/metaplane-bench-migrate", fig.Nodes}} {
			tm, err := env.verbsPeakRSS(ctx, tool, zkAddr, m.root, i)
			if err != nil {
				return fmt.Errorf("the verbs' memory: %w", err)
			}
			tm.Nodes = m.nodes
			fig.Tool = append(fig.Tool, tm)
		}
	}

	live, closeLive, err := env.raftTarget(ctx, "migrate-live")
	if err != nil {
		return fmt.Errorf("the live target: %w", err)
	}
	defer closeLive()
	// The source serves: a leader writes on it until the fence.
	stopLeader, err := sourceLeader(ctx, openSrc)
	if err != nil {
		return fmt.Errorf("live-migrate: %w", err)
	}
	env.opts.logf("  migrate: live-migrate (a leader writing on the source until the fence) ...")
	t0 = time.Now()
	lr, err := migrate.Live(ctx, src, live, migrate.LiveOptions{FenceWait: 10 * time.Second, Progress: env.opts.Log})
	fig.LiveSec = round3(time.Since(t0).Seconds())
	writes, werr := stopLeader()
	if err == nil && werr != nil {
		err = fmt.Errorf("the source's leader: %w", werr)
	}
	if err == nil && writes == 0 {
		err = fmt.Errorf("the source's leader wrote nothing during the copy rounds")
	}
	if err != nil {
		return fmt.Errorf("live-migrate: %w", err)
	}
	if _, err := migrate.Unfence(ctx, src); err != nil {
		env.opts.logf("  migrate: unfence the bench's source: %v", err)
	}
	fig.PauseMS, fig.LiveRounds, fig.FinalChanged, fig.FinalUnchanged = lr.PauseMS, len(lr.Rounds), lr.Final.Changed, lr.FinalUnchanged
	fig.FinalWatched, fig.FinalPaths, fig.FinalWhy = lr.FinalWatched, lr.FinalPaths, lr.FinalWhy
	results["migrate.live-pause"] = fixedResult(Raft, time.Duration(lr.PauseMS)*time.Millisecond, lr.Nodes)
	return nil
}

// toolBinary is the metaplane binary beside the plugins.
func (env *runEnv) toolBinary() (string, error) {
	dir, err := env.binDir(ZooKeeper)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "metaplane")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found (make build)", p)
	}
	return p, nil
}

// verbsPeakRSS runs `metaplane zk-to-raft-export` on root, then
// `zk-to-raft-import` and `zk-to-raft-validate` of its file into a new
// single-voter Raft store (the verb's own plugin), and returns each
// process's peak resident set (its plugin is a process of its own, not
// counted).
func (env *runEnv) verbsPeakRSS(ctx context.Context, tool, zkAddr, root string, n int) (ToolMemory, error) {
	var tm ToolMemory
	dir, err := env.binDir(ZooKeeper)
	if err != nil {
		return tm, err
	}
	out := filepath.Join(env.opts.WorkDir, "migrate-rss.jsonl")
	os.Remove(out)
	if tm.PeakRSSBytes, err = peakRSS(ctx, tool, "zk-to-raft-export", "--no-env", "--out", out,
		"-D", "metadata.backend.plugin.dir="+dir, "-D", "zookeeper.address="+zkAddr, "-D", "zookeeper.path.root="+root); err != nil {
		return tm, err
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return tm, err
	}
	raft := []string{"--no-env", "-D", "metadata.backend.plugin.dir=" + dir,
		"-D", "coordinator.raft.dir=" + filepath.Join(env.opts.WorkDir, fmt.Sprintf("migrate-rss-raft-%d", n)),
		"-D", "coordinator.raft.port=" + strconv.Itoa(port)}
	if tm.ImportPeakRSSBytes, err = peakRSS(ctx, tool, append([]string{"zk-to-raft-import", out}, raft...)...); err != nil {
		return tm, err
	}
	if tm.ValidatePeakRSSBytes, err = peakRSS(ctx, tool, append([]string{"zk-to-raft-validate", out}, raft...)...); err != nil {
		return tm, err
	}
	return tm, nil
}

// peakRSS runs tool with args and returns its peak resident set: its
// VmHWM, sampled every 10 ms while it runs (the last sample before it
// exits). Not the rusage of the waited child: on Linux a child's ru_maxrss
// starts from the RSS of the process that started it (the exec inherits
// the parent's high-water mark), so every verb would report the bench's
// own size.
func peakRSS(ctx context.Context, tool string, args ...string) (int64, error) {
	own, _, err := peakRSSOf(ctx, false, tool, args...)
	return own, err
}

// peakRSSTree is peakRSS and, beside it, the sum of the peaks of the
// processes the verb starts (for a verb that runs in a helper binary).
func peakRSSTree(ctx context.Context, tool string, args ...string) (own, started int64, err error) {
	return peakRSSOf(ctx, true, tool, args...)
}

// descendants lists the processes below pid (from /proc/<pid>/task/*/children).
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, w := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(w); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

func peakRSSOf(ctx context.Context, tree bool, tool string, args ...string) (int64, int64, error) {
	cmd := exec.CommandContext(ctx, tool, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("%s: %v", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	kids := map[int]int64{} // peak of each process below the verb
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, err := PeakRSS(cmd.Process.Pid); err == nil {
			peak = max(peak, v)
		}
		if tree {
			for _, c := range descendants(cmd.Process.Pid) {
				if v, err := PeakRSS(c); err == nil {
					kids[c] = max(kids[c], v)
				}
			}
		}
		select {
		case err := <-done:
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %v: %s", args[0], err, stderr.String())
			}
			if peak == 0 {
				return 0, 0, fmt.Errorf("%s exited before its memory could be read", args[0])
			}
			var started int64
			for _, v := range kids {
				started += v
			}
			return peak, started, nil
		case <-tick.C:
		}
	}
}

// freeLoopbackPort is a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
