package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/procstat"
	"github.com/metaplane/metaplane/migrate"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The scale. rows (issue 34) measure the tools and a coordinator on a
// large Raft store: a tree in the original layout (the migrate. rows'
// shape, about 200 bytes a node) is written straight into a sorted tree
// file, then, each step a process of its own as an operator runs it,
// imported into a new single-voter Raft store (zk-to-raft-import),
// validated (zk-to-raft-validate), exported again (migrate export), and a
// coordinator started on the store: its cold start (until a catalog read
// answers), its resident memory once its image is loaded, a tablet
// server's full metadata snapshot from it (FETCH_METADATA_SNAPSHOT_STREAM,
// every part read and dropped) and raft snapshot save. All of it at
// --scale-nodes and at a tenth of that, so that the report says how each
// figure grows.

// Scale sizes.
const (
	scaleNodesFull  = 1_000_000
	scaleNodesQuick = 100_000
	// MinScaleNodes and MaxScaleNodes bound Options.ScaleNodes.
	MinScaleNodes = 10_000
	MaxScaleNodes = 10_000_000
)

// Scale is what the scale. rows measured: one entry per tree size, the
// smaller first.
type Scale struct {
	Sizes []ScaleSize `json:"sizes,omitempty"`
	// Failover is the scale.failover row's figures, the smaller size
	// first.
	Failover []ScaleFailover `json:"failover,omitempty"`
	// ZooKeeper and ZooKeeperFailover are the same figures on a
	// three-server ZooKeeper ensemble, each step bounded by
	// ZooKeeperBoundSec (a size past it says so in Unfinished, and no
	// larger size is tried).
	ZooKeeper         []ScaleSize     `json:"zookeeper,omitempty"`
	ZooKeeperFailover []ScaleFailover `json:"zookeeper_failover,omitempty"`
	ZooKeeperBoundSec float64         `json:"zookeeper_bound_s,omitempty"`
}

// ScaleSize is the figures at one tree size. RSS figures are the peak
// resident set (VmHWM) of the verb's own process (its plugin, the store,
// not counted; restore's helper process, which writes the store, is
// RestoreStoreRSSBytes); CoordinatorRSSBytes is the coordinator's resident set once
// its image is loaded and its memory stopped growing.
type ScaleSize struct {
	Nodes int `json:"nodes"`
	// DataBytes is the nodes' paths and data, all together.
	DataBytes           int64   `json:"data_bytes"`
	ImportSec           float64 `json:"import_s"`
	ImportRSSBytes      int64   `json:"import_rss_bytes"`
	ValidateSec         float64 `json:"validate_s"`
	ValidateRSSBytes    int64   `json:"validate_rss_bytes"`
	ExportSec           float64 `json:"export_s"`
	ExportRSSBytes      int64   `json:"export_rss_bytes"`
	ColdStartSec        float64 `json:"cold_start_s"`
	CoordinatorRSSBytes int64   `json:"coordinator_rss_bytes"`
	// CoordinatorHeapInuseBytes and CoordinatorNextGCBytes are the Go
	// runtime's heap in use and next collection goal when the RSS was
	// read (go_memstats_heap_inuse_bytes, go_memstats_next_gc_bytes).
	CoordinatorHeapInuseBytes int64   `json:"coordinator_heap_inuse_bytes,omitempty"`
	CoordinatorNextGCBytes    int64   `json:"coordinator_next_gc_bytes,omitempty"`
	TabletSnapshotSec         float64 `json:"tablet_snapshot_s"`
	TabletSnapshotNodes       int     `json:"tablet_snapshot_nodes"`
	SaveSec                   float64 `json:"snapshot_save_s,omitempty"`
	SaveRSSBytes              int64   `json:"snapshot_save_rss_bytes,omitempty"`
	RestoreSec                float64 `json:"snapshot_restore_s,omitempty"`
	RestoreRSSBytes           int64   `json:"snapshot_restore_rss_bytes,omitempty"`
	// RestoreStoreRSSBytes is the peak of the helper process the restore
	// runs in, which writes the store (Dragonboat and Pebble in process):
	// the store, as the plugin beside the other verbs, not counted above.
	RestoreStoreRSSBytes int64 `json:"snapshot_restore_store_rss_bytes,omitempty"`
	// AddVoterSec is `raft add-voter` of an empty member, from the call
	// to its return (caught up, promoted); JoinerRSSBytes the new
	// member's coordinator's resident set right when it returns (its
	// image may still be loading from the applied log).
	AddVoterSec    float64 `json:"add_voter_s,omitempty"`
	JoinerRSSBytes int64   `json:"joiner_rss_bytes,omitempty"`
	// The joined member's coordinator as a standby: JoinerWarmSec from
	// the add-voter call until it reports itself warm (its image loaded
	// from its own member's store, its bucket states built); then
	// StandbyWrites admin writes (CreateDatabase, one node each) on the
	// leader, and the CPU each coordinator process used per write while
	// the standby followed them (its plugin, the Raft member every voter
	// runs anyway, not counted), with the standby's CPU per second when
	// idle for comparison and its resident set once it followed them.
	JoinerWarmSec              float64 `json:"joiner_warm_s,omitempty"`
	StandbyWrites              int     `json:"standby_writes,omitempty"`
	StandbyCPUMicrosPerWrite   float64 `json:"standby_cpu_us_per_write,omitempty"`
	LeaderCPUMicrosPerWrite    float64 `json:"leader_cpu_us_per_write,omitempty"`
	StandbyIdleCPUMicrosPerSec float64 `json:"standby_idle_cpu_us_per_s,omitempty"`
	StandbyRSSBytes            int64   `json:"standby_rss_bytes,omitempty"`
	// Unfinished says which step did not finish within the bound
	// (ZooKeeper), the steps after it not run.
	Unfinished string `json:"unfinished,omitempty"`
}

func scaleSpecs() []rowSpec {
	const note = "measured once per run, after the other rows"
	return []rowSpec{
		{id: "scale.import", title: "scale: import into a new store (nodes/s)", group: "scale", metric: MetricThroughput, note: note, scale: true, backends: []string{ZooKeeper, Raft}},
		{id: "scale.cold-start", title: "scale: coordinator cold start to a catalog read", group: "scale", metric: MetricP50, note: note, scale: true, backends: []string{ZooKeeper, Raft}},
		{id: "scale.tablet-snapshot", title: "scale: a tablet server's full metadata snapshot", group: "scale", metric: MetricP50, note: note, scale: true, backends: []string{ZooKeeper, Raft}},
		{id: "scale.snapshot-save", title: "scale: raft snapshot save", group: "scale", metric: MetricP50, note: note, scale: true, backends: []string{Raft}},
		{id: "scale.restore", title: "scale: raft snapshot restore into a new store", group: "scale", metric: MetricP50, note: note, scale: true, backends: []string{Raft}},
		{id: "scale.add-voter", title: "scale: raft add-voter, an empty member until caught up and promoted", group: "scale", metric: MetricP50, note: note, scale: true, backends: []string{Raft}},
		{id: "scale.failover", title: "scale: failover, SIGKILL of the leader to the first acknowledged write (3 voters or servers)", group: "scale", metric: MetricP50,
			note: fmt.Sprintf("%d kills per size on Raft, %d on ZooKeeper, after the other rows", scaleFailoverKills, scaleZKFailoverKills), scale: true, backends: []string{ZooKeeper, Raft}},
	}
}

// runScale measures the selected scale. rows at the configured size (the
// rows' results) and at a tenth of it (in the figures only), on Raft and,
// when the run has it, on ZooKeeper.
func runScale(ctx context.Context, env *runEnv, specs []rowSpec) ([]Row, *Scale) {
	nodes := env.opts.ScaleNodes
	if nodes == 0 {
		nodes = scaleNodesFull
		if env.opts.Quick {
			nodes = scaleNodesQuick
		}
	}
	sizes := []int{nodes / 10, nodes}
	fig := &Scale{}
	results := map[string]map[string]Result{}
	set := func(id, backend string, r Result) {
		if results[id] == nil {
			results[id] = map[string]Result{}
		}
		results[id][backend] = r
	}
	// why[backend] and failWhy[backend]: why the rows (the failover row)
	// were not measured.
	why, failWhy := map[string]string{}, map[string]string{}
	tool, toolErr := env.toolBinary()
	main, failover := false, false
	for _, s := range specs {
		if s.id == "scale.failover" {
			failover = true
		} else {
			main = true
		}
	}
	onRaft, onZK := contains(env.opts.Backends, Raft), contains(env.opts.Backends, ZooKeeper)
	for _, b := range []string{Raft, ZooKeeper} {
		err := toolErr
		if err == nil {
			_, err = env.binDir(b)
		}
		if err != nil {
			why[b], failWhy[b] = err.Error(), err.Error()
		}
	}
	for _, n := range sizes {
		if why[Raft] != "" || !main || !onRaft {
			break
		}
		env.opts.logf("  scale: %d nodes ...", n)
		sz, err := measureScale(ctx, env, tool, n)
		if err != nil {
			why[Raft] = err.Error()
			env.opts.logf("  scale: %v", err)
			break
		}
		fig.Sizes = append(fig.Sizes, sz)
		if n == nodes {
			set("scale.import", Raft, fixedResult(Raft, secs(sz.ImportSec), sz.Nodes))
			set("scale.cold-start", Raft, fixedResult(Raft, secs(sz.ColdStartSec), sz.Nodes))
			set("scale.tablet-snapshot", Raft, fixedResult(Raft, secs(sz.TabletSnapshotSec), sz.TabletSnapshotNodes))
			set("scale.snapshot-save", Raft, fixedResult(Raft, secs(sz.SaveSec), sz.Nodes))
			set("scale.restore", Raft, fixedResult(Raft, secs(sz.RestoreSec), sz.Nodes))
			set("scale.add-voter", Raft, fixedResult(Raft, secs(sz.AddVoterSec), sz.Nodes))
		}
	}
	killResult := func(backend string, f ScaleFailover, detail *ElectionDetail) Result {
		ds := make([]time.Duration, len(f.Kills))
		for i, k := range f.Kills {
			ds[i] = time.Duration(k.TotalMicros * 1e3)
		}
		res := resultFromSummary(backend, Summarize(ds, int64(len(ds)), 0), int64(len(ds)), 0, nil)
		res.Election = detail
		return res
	}
	for _, n := range sizes {
		if failWhy[Raft] != "" || !failover || !onRaft || ctx.Err() != nil {
			break
		}
		env.opts.logf("  scale.failover: %d nodes ...", n)
		f, detail, err := measureFailover(ctx, env, n)
		if err != nil {
			failWhy[Raft] = err.Error()
			env.opts.logf("  scale.failover: %v", err)
			break
		}
		fig.Failover = append(fig.Failover, f)
		if n == nodes {
			set("scale.failover", Raft, killResult(Raft, f, detail))
		}
	}
	if onZK && why[ZooKeeper] == "" {
		fig.ZooKeeperBoundSec = scaleZKBound.Seconds()
	}
	for _, n := range sizes {
		if why[ZooKeeper] != "" || !onZK || ctx.Err() != nil {
			break
		}
		env.opts.logf("  scale (zookeeper): %d nodes ...", n)
		// The failover row is not tried again at a larger size once it
		// did not finish.
		sz, f, detail, err := measureScaleZK(ctx, env, tool, n, main, failover && failWhy[ZooKeeper] == "")
		if err != nil {
			why[ZooKeeper], failWhy[ZooKeeper] = err.Error(), err.Error()
			env.opts.logf("  scale (zookeeper): %v", err)
			break
		}
		if main {
			fig.ZooKeeper = append(fig.ZooKeeper, sz)
		}
		if f != nil {
			fig.ZooKeeperFailover = append(fig.ZooKeeperFailover, *f)
		}
		if n == nodes {
			if sz.ImportSec > 0 {
				set("scale.import", ZooKeeper, fixedResult(ZooKeeper, secs(sz.ImportSec), sz.Nodes))
			}
			if sz.ColdStartSec > 0 {
				set("scale.cold-start", ZooKeeper, fixedResult(ZooKeeper, secs(sz.ColdStartSec), sz.Nodes))
			}
			if sz.TabletSnapshotSec > 0 {
				set("scale.tablet-snapshot", ZooKeeper, fixedResult(ZooKeeper, secs(sz.TabletSnapshotSec), sz.TabletSnapshotNodes))
			}
			if f != nil && f.Unfinished == "" {
				set("scale.failover", ZooKeeper, killResult(ZooKeeper, *f, detail))
			}
		}
		// Past the bound: the rows not measured say where, and no larger
		// tree is tried.
		if sz.Unfinished != "" {
			why[ZooKeeper] = fmt.Sprintf("at %d nodes: %s", sz.Nodes, sz.Unfinished)
			failWhy[ZooKeeper] = why[ZooKeeper]
			break
		}
		if f != nil && f.Unfinished != "" {
			failWhy[ZooKeeper] = fmt.Sprintf("at %d nodes: %s", f.Nodes, f.Unfinished)
		}
	}
	rows := scaleRows(specs, env.opts.Backends, nodes, results, why, failWhy)
	if len(fig.Sizes) == 0 && len(fig.Failover) == 0 && len(fig.ZooKeeper) == 0 && len(fig.ZooKeeperFailover) == 0 {
		return rows, nil
	}
	return rows, fig
}

// scaleRows makes the scale. rows from what was measured (results, by row
// id and backend): a row has a result for each of its backends the run
// has, measured or not measured with the reason (why, by backend; failWhy
// for the failover row).
func scaleRows(specs []rowSpec, backends []string, nodes int, results map[string]map[string]Result, why, failWhy map[string]string) []Row {
	var rows []Row
	for _, s := range specs {
		row := Row{ID: s.id, Title: s.title, Group: s.group, Metric: s.metric, Note: fmt.Sprintf("%s; a %d-node tree", s.note, nodes)}
		for _, b := range backends {
			if !contains(s.backends, b) {
				continue
			}
			res, ok := results[s.id][b]
			if !ok {
				res = Result{Backend: b, Unavailable: "not measured"}
				w := why[b]
				if s.id == "scale.failover" {
					w = failWhy[b]
				}
				if w != "" {
					res.Unavailable += ": " + w
				}
			}
			row.Results = append(row.Results, res)
		}
		row.computeRatio()
		rows = append(rows, row)
	}
	return rows
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// measureScale runs the steps on a tree of about n nodes; every file and
// store it makes is removed before it returns.
func measureScale(ctx context.Context, env *runEnv, tool string, n int) (ScaleSize, error) {
	var sz ScaleSize
	dir := filepath.Join(env.opts.WorkDir, fmt.Sprintf("scale-%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sz, err
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree.jsonl")
	var err error
	if sz.Nodes, sz.DataBytes, err = writeScaleTree(tree, n); err != nil {
		return sz, fmt.Errorf("write the tree file: %w", err)
	}
	plugDir, _ := env.binDir(Raft)
	port, err := freeLoopbackPort()
	if err != nil {
		return sz, err
	}
	store := []string{"--no-env", "--quiet", "-D", "metadata.backend.plugin.dir=" + plugDir,
		"-D", "coordinator.raft.dir=" + filepath.Join(dir, "raft"), "-D", "coordinator.raft.port=" + strconv.Itoa(port)}
	if err := scaleVerbs(ctx, &sz, tool, dir, tree, store, raftVerb, 0, false); err != nil {
		return sz, err
	}
	co, err := startScaleCoordinator(ctx, &sz, tool, dir, store, 10*time.Minute)
	if err != nil {
		return sz, err
	}
	defer co.stop()
	co.profile = env.heapProfile(Raft, sz.Nodes)
	if err := co.measure(ctx, &sz); err != nil {
		return sz, err
	}
	addr := co.addr
	save := filepath.Join(dir, "backup.jsonl")
	t0 := time.Now()
	if sz.SaveRSSBytes, err = peakRSS(ctx, tool, "raft", "snapshot", "save", save, "--bootstrap-servers", addr, "--wait", "30m"); err != nil {
		return sz, err
	}
	sz.SaveSec = round3(time.Since(t0).Seconds())
	// The saved file restored offline into a new single-voter store, as an
	// operator rebuilds a cluster from a backup.
	rport, err := freeLoopbackPort()
	if err != nil {
		return sz, err
	}
	rdir := filepath.Join(dir, "restored")
	t0 = time.Now()
	sz.RestoreRSSBytes, sz.RestoreStoreRSSBytes, err = peakRSSTree(ctx, tool, "raft", "snapshot", "restore", save, "--data-dir", rdir, "--no-env",
		"--voters", "1@127.0.0.1:"+strconv.Itoa(rport), "--node-id", "1", "-D", "coordinator.raft.port="+strconv.Itoa(rport),
		"-D", "metadata.backend.plugin.dir="+plugDir)
	sz.RestoreSec = round3(time.Since(t0).Seconds())
	if err != nil {
		return sz, fmt.Errorf("raft snapshot restore: %w", err)
	}
	if err := measureAddVoter(ctx, &sz, co, tool, dir, plugDir, port); err != nil {
		return sz, fmt.Errorf("raft add-voter: %w", err)
	}
	return sz, nil
}

// errScaleBound marks a ZooKeeper step of the scale. rows that did not
// finish within scaleZKBound.
var errScaleBound = errors.New("bound reached")

// The import and validate verbs of the scale rows: the ones that require a
// Raft target, and the generic ones (any backend: ZooKeeper's store).
func raftVerb(v string) []string    { return []string{"zk-to-raft-" + v} }
func genericVerb(v string) []string { return []string{"migrate", v} }

// scaleVerbs runs the tree file's import into the store the flags in store
// select (empty) and, unless importOnly, its validation (both with verb's
// command) and an export of the store, each timed with its peak RSS.
// bound > 0 bounds each verb (errScaleBound after).
func scaleVerbs(ctx context.Context, sz *ScaleSize, tool, dir, tree string, store []string, verb func(string) []string, bound time.Duration, importOnly bool) error {
	timed := func(rss *int64, sec *float64, args ...string) error {
		vctx, cancel := ctx, context.CancelFunc(func() {})
		if bound > 0 {
			vctx, cancel = context.WithTimeout(ctx, bound)
		}
		defer cancel()
		t0 := time.Now()
		v, err := peakRSS(vctx, tool, args...)
		if err != nil && ctx.Err() == nil && vctx.Err() != nil {
			return fmt.Errorf("%s did not finish within %v: %w", args[0]+" "+args[1], bound, errScaleBound)
		}
		*rss, *sec = v, round3(time.Since(t0).Seconds())
		return err
	}
	if err := timed(&sz.ImportRSSBytes, &sz.ImportSec, append(append(verb("import"), tree), store...)...); err != nil || importOnly {
		return err
	}
	if err := timed(&sz.ValidateRSSBytes, &sz.ValidateSec, append(append(verb("validate"), tree), store...)...); err != nil {
		return err
	}
	out := filepath.Join(dir, "export.jsonl")
	defer os.Remove(out)
	return timed(&sz.ExportRSSBytes, &sz.ExportSec, append([]string{"migrate", "export", "--out", out}, store...)...)
}

// scaleCoordinator is a coordinator process on a scale store.
type scaleCoordinator struct {
	cmd  *exec.Cmd
	addr string
	// metrics is its metrics listener's address.
	metrics string
	// profile, when set, is the file settledRSS writes the heap profile
	// to (Options.HeapProfiles).
	profile string
	admin   *adminclient.Client
	exited  chan struct{}
	log     *os.File
}

// startScaleCoordinator starts a coordinator on the store the flags in
// store select and waits, at most bound, until it answers a catalog read
// (its image loaded): sz.ColdStartSec. Past the bound: errScaleBound.
func startScaleCoordinator(ctx context.Context, sz *ScaleSize, tool, dir string, store []string, bound time.Duration) (*scaleCoordinator, error) {
	ln, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	mp, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	co := &scaleCoordinator{addr: "127.0.0.1:" + strconv.Itoa(ln), metrics: "127.0.0.1:" + strconv.Itoa(mp), exited: make(chan struct{})}
	if co.log, err = os.Create(filepath.Join(dir, "coordinator.log")); err != nil {
		return nil, err
	}
	co.cmd = exec.Command(tool, append([]string{"coordinator", "-D", "bind.listeners=CLIENT://" + co.addr, "-D", "metrics.address=" + co.metrics, "-D", "metrics.pprof=true"}, store...)...)
	co.cmd.Stdout, co.cmd.Stderr = co.log, co.log
	co.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := co.cmd.Start(); err != nil {
		co.log.Close()
		return nil, fmt.Errorf("start the coordinator: %w", err)
	}
	go func() { co.cmd.Wait(); close(co.exited) }()
	if co.admin, err = adminclient.NewClient([]string{co.addr}); err != nil {
		co.stop()
		return nil, err
	}
	deadline := t0.Add(bound)
	for {
		select {
		case <-co.exited:
			co.stop()
			return nil, fmt.Errorf("the coordinator exited (log: %s)", co.log.Name())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := co.admin.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
			return err
		})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			co.stop()
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			co.stop()
			return nil, fmt.Errorf("the coordinator did not answer a catalog read within %v (%v): %w", bound, err, errScaleBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sz.ColdStartSec = round3(time.Since(t0).Seconds())
	return co, nil
}

// measure reads the coordinator's memory once its image stopped growing
// and times a tablet server's full snapshot from it.
func (co *scaleCoordinator) measure(ctx context.Context, sz *ScaleSize) error {
	if err := co.settledRSS(ctx, sz); err != nil {
		return err
	}
	return co.tabletSnapshot(ctx, sz)
}

// settledRSS is the coordinator's resident set once its image stopped
// growing: sz.CoordinatorRSSBytes.
func (co *scaleCoordinator) settledRSS(ctx context.Context, sz *ScaleSize) error {
	// Four samples in a row within 1% (a second apart; at most two
	// minutes).
	var rss int64
	for same, i := 0, 0; same < 4 && i < 120; i++ {
		v, err := residentSet(co.cmd.Process.Pid)
		if err != nil {
			return err
		}
		if rss > 0 && v-rss < rss/100 {
			same++
		} else {
			same = 0
		}
		rss = v
		time.Sleep(time.Second)
	}
	sz.CoordinatorRSSBytes = rss
	// What the Go runtime says of it (its metrics listener): the live
	// heap as of the last collection is about half of the next
	// collection's goal at the default GOGC.
	if v, err := readMetric(ctx, co.metrics, "go_memstats_heap_inuse_bytes"); err == nil {
		sz.CoordinatorHeapInuseBytes = int64(v)
	}
	if v, err := readMetric(ctx, co.metrics, "go_memstats_next_gc_bytes"); err == nil {
		sz.CoordinatorNextGCBytes = int64(v)
	}
	if co.profile != "" {
		if err := co.writeHeapProfile(ctx); err != nil {
			return fmt.Errorf("the coordinator's heap profile: %w", err)
		}
	}
	return nil
}

// heapProfile is the file the coordinator's heap profile at nodes on
// backend goes to, or "" without Options.HeapProfiles.
func (env *runEnv) heapProfile(backend string, nodes int) string {
	if env.opts.HeapProfiles == "" {
		return ""
	}
	return filepath.Join(env.opts.HeapProfiles, fmt.Sprintf("coordinator-heap-%s-%d.pb.gz", backend, nodes))
}

// writeHeapProfile saves the coordinator's heap profile, taken after a
// collection, to co.profile.
func (co *scaleCoordinator) writeHeapProfile(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+co.metrics+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/heap: %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(co.profile), 0o755); err != nil {
		return err
	}
	f, err := os.Create(co.profile)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tabletSnapshot times a tablet server's full snapshot from the
// coordinator (FETCH_METADATA_SNAPSHOT_STREAM): every part read, none
// kept.
func (co *scaleCoordinator) tabletSnapshot(ctx context.Context, sz *ScaleSize) error {
	t0 := time.Now()
	err := co.admin.Tablets(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
		sz.TabletSnapshotNodes = 0
		st, err := t.FetchMetadataSnapshotStream(ctx, &adminv1.FetchMetadataSnapshotRequest{})
		if err != nil {
			return err
		}
		for {
			part, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			sz.TabletSnapshotNodes += len(part.Nodes)
		}
	})
	if err != nil {
		return fmt.Errorf("a tablet server's snapshot: %w", err)
	}
	sz.TabletSnapshotSec = round3(time.Since(t0).Seconds())
	if sz.TabletSnapshotNodes < sz.Nodes {
		return fmt.Errorf("a tablet server's snapshot had %d nodes, the tree %d", sz.TabletSnapshotNodes, sz.Nodes)
	}
	return nil
}

// stop ends the coordinator (SIGTERM, SIGKILL after 30 s).
func (co *scaleCoordinator) stop() {
	if co.admin != nil {
		co.admin.Close()
	}
	co.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-co.exited:
	case <-time.After(30 * time.Second):
		syscall.Kill(-co.cmd.Process.Pid, syscall.SIGKILL)
		<-co.exited
	}
	co.log.Close()
}

// measureAddVoter starts a coordinator on an empty directory as a joining
// member 2 of the single-voter cluster whose coordinator is co (its Raft
// member on 127.0.0.1:port) and times `raft add-voter` until it returns:
// the member received the store (a snapshot and the log's tail), caught
// up and was promoted. Then the new coordinator as a standby: until it is
// warm, and its CPU while it follows the leader's writes.
func measureAddVoter(ctx context.Context, sz *ScaleSize, co *scaleCoordinator, tool, dir, plugDir string, port int) error {
	rport, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	cport, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	mport, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	raftAddr := "127.0.0.1:" + strconv.Itoa(rport)
	logf, err := os.Create(filepath.Join(dir, "joiner.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(tool, "coordinator", "--no-env", "--quiet",
		"-D", "metadata.backend.plugin.dir="+plugDir, "-D", "metrics.address=127.0.0.1:"+strconv.Itoa(mport),
		"-D", "bind.listeners=CLIENT://127.0.0.1:"+strconv.Itoa(cport), "-D", "coordinator.seed.nodes="+co.addr,
		"-D", "coordinator.raft.voters=1@127.0.0.1:"+strconv.Itoa(port)+",2@"+raftAddr, "-D", "coordinator.raft.node.id=2",
		"-D", "coordinator.raft.port="+strconv.Itoa(rport), "-D", "coordinator.raft.dir="+filepath.Join(dir, "joiner"),
		"-D", "coordinator.raft.join=true")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the joining coordinator: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, tool, "raft", "add-voter", "--id", "2", "--address", raftAddr,
		"--bootstrap-servers", co.addr, "--catch-up-timeout", "30m", "--timeout", "30s", "--json").CombinedOutput()
	sz.AddVoterSec = round3(time.Since(t0).Seconds())
	if err != nil {
		return fmt.Errorf("%v: %s (the joiner's log: %s)", err, strings.TrimSpace(string(out)), logf.Name())
	}
	if v, err := residentSet(cmd.Process.Pid); err == nil {
		sz.JoinerRSSBytes = v
	}
	standby := "127.0.0.1:" + strconv.Itoa(mport)
	if err := waitMetric(ctx, standby, "metaplane_coordinator_warm", func(v float64) bool { return v == 1 }, 10*time.Minute); err != nil {
		return fmt.Errorf("the joined coordinator: %w (its log: %s)", err, logf.Name())
	}
	sz.JoinerWarmSec = round3(time.Since(t0).Seconds())
	return measureStandby(ctx, sz, co, cmd.Process.Pid, standby)
}

// standbyWrites is the admin writes of the standby measurement, and
// standbyIdleWindow how long its idle CPU is measured.
const (
	standbyWrites     = 1000
	standbyIdleWindow = 3 * time.Second
)

// measureStandby measures the standby coordinator (pid, metrics on
// standby) while it follows co's writes: standbyWrites CreateDatabase
// calls, one at a time, until the standby's image applied the last; and,
// before them, its CPU per second over standbyIdleWindow of idling.
func measureStandby(ctx context.Context, sz *ScaleSize, co *scaleCoordinator, pid int, standby string) error {
	idle0, t0 := procstat.CPU(pid), time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(standbyIdleWindow):
	}
	sz.StandbyIdleCPUMicrosPerSec = round3(float64((procstat.CPU(pid) - idle0).Microseconds()) / time.Since(t0).Seconds())
	s0, l0 := procstat.CPU(pid), procstat.CPU(co.cmd.Process.Pid)
	err := co.admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		for i := 0; i < standbyWrites; i++ {
			if _, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: fmt.Sprintf("standby_%d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writes on the leader: %w", err)
	}
	rev, err := readMetric(ctx, co.metrics, "metaplane_image_revision")
	if err != nil {
		return err
	}
	if err := waitMetric(ctx, standby, "metaplane_image_revision", func(v float64) bool { return v >= rev }, time.Minute); err != nil {
		return fmt.Errorf("the standby did not follow the writes: %w", err)
	}
	sz.StandbyWrites = standbyWrites
	sz.StandbyCPUMicrosPerWrite = round3(float64((procstat.CPU(pid) - s0).Microseconds()) / standbyWrites)
	sz.LeaderCPUMicrosPerWrite = round3(float64((procstat.CPU(co.cmd.Process.Pid) - l0).Microseconds()) / standbyWrites)
	if v, err := residentSet(pid); err == nil {
		sz.StandbyRSSBytes = v
	}
	return nil
}

// readMetric reads one unlabelled metric from a coordinator's metrics
// listener at addr.
func readMetric(ctx context.Context, addr, name string) (float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in %s/metrics", name, addr)
}

// waitMetric polls a metric until ok holds, at most bound.
func waitMetric(ctx context.Context, addr, name string, ok func(float64) bool, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var last error
	for {
		v, err := readMetric(ctx, addr, name)
		if err == nil && ok(v) {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("%s is %v", name, v)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %v", bound, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// residentSet is process pid's resident set (VmRSS), in bytes.
func residentSet(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// writeScaleTree writes flussTree(n) (with fillTree's values) to path as a
// sorted tree file, and returns its node count and its paths' and data's
// bytes.
func writeScaleTree(path string, n int) (int, int64, error) {
	paths := flussTree(n)
	sort.Strings(paths)
	data := []byte(`{"version":1,"schema_id":1,"bucket_count":3,"properties":{"table.replication.factor":"3"},"custom_properties":{},"comment":"bench table","created_time":1700000000000,"modified_time":1700000000000}`)
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw, err := migrate.NewWriter(bw, migrate.Header{Source: "bench", Revision: 1, Created: time.Now().UTC(), Sorted: true})
	if err != nil {
		return 0, 0, err
	}
	var bytes int64
	for _, p := range paths {
		if err := tw.Node(&migrate.Node{Path: p, Data: data}); err != nil {
			return 0, 0, err
		}
		bytes += int64(len(p) + len(data))
	}
	if err := tw.Close(); err != nil {
		return 0, 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, 0, err
	}
	return len(paths), bytes, f.Close()
}

// scaleTargets are issue 34's targets the scale. rows measure: the tools'
// memory flat in the tree size (10x the nodes: at most 1.5x the peak
// RSS), a tablet server's full snapshot at 1 000 000 nodes under 10 s, a
// coordinator's cold start at 1 000 000 nodes under 20 s, and the
// coordinator's image at most 400 bytes per node above the data.
func scaleTargets(s *Scale) []TargetResult {
	flat := TargetResult{Target: "tools' memory flat in the tree size (import, validate, export, raft snapshot save and restore; 10x the nodes: at most 1.5x the peak RSS)"}
	snap := TargetResult{Target: "a tablet server's full metadata snapshot at 1,000,000 nodes under 10 s"}
	cold := TargetResult{Target: "coordinator cold start at 1,000,000 nodes under 20 s"}
	image := TargetResult{Target: "coordinator image at most 400 bytes per node above the data"}
	all := []*TargetResult{&flat, &snap, &cold, &image}
	if s == nil || len(s.Sizes) == 0 {
		for _, t := range all {
			t.Status, t.Detail = TargetNotMeasured, "the scale. rows did not run"
		}
		return []TargetResult{flat, snap, cold, image, failoverTarget(s)}
	}
	big := s.Sizes[len(s.Sizes)-1]
	at := func(t *TargetResult, pick func(ScaleSize) float64, bound float64) {
		t.Detail = fmt.Sprintf("%.2f s at %d nodes", pick(big), big.Nodes)
		if len(s.Sizes) == 2 {
			t.Detail += fmt.Sprintf(" (%.2f s at %d nodes)", pick(s.Sizes[0]), s.Sizes[0].Nodes)
		}
		if big.Nodes < 1_000_000 {
			t.Status = TargetNotMeasured
			t.Detail += "; the tree is smaller than 1,000,000 nodes"
			return
		}
		t.Status = status(pick(big) < bound)
	}
	at(&snap, func(z ScaleSize) float64 { return z.TabletSnapshotSec }, 10)
	at(&cold, func(z ScaleSize) float64 { return z.ColdStartSec }, 20)
	if len(s.Sizes) != 2 {
		flat.Status, flat.Detail = TargetNotMeasured, "measured at one size only"
		image.Status, image.Detail = TargetNotMeasured, "measured at one size only"
		return []TargetResult{flat, snap, cold, image, failoverTarget(s)}
	}
	a, b := s.Sizes[0], s.Sizes[1]
	ok := true
	var parts []string
	for _, v := range []struct {
		verb string
		a, b int64
	}{{"import", a.ImportRSSBytes, b.ImportRSSBytes}, {"validate", a.ValidateRSSBytes, b.ValidateRSSBytes},
		{"export", a.ExportRSSBytes, b.ExportRSSBytes}, {"snapshot save", a.SaveRSSBytes, b.SaveRSSBytes},
		{"snapshot restore", a.RestoreRSSBytes, b.RestoreRSSBytes}} {
		if v.a <= 0 {
			continue
		}
		ratio := float64(v.b) / float64(v.a)
		ok = ok && ratio <= 1.5
		parts = append(parts, fmt.Sprintf("%s %s at %d nodes, %s at %d nodes (%.2fx)", v.verb, formatBytes(v.a), a.Nodes, formatBytes(v.b), b.Nodes, ratio))
	}
	flat.Detail = "peak RSS: " + strings.Join(parts, "; ")
	if a.RestoreStoreRSSBytes > 0 {
		flat.Detail += fmt.Sprintf(" (restore's helper process, which writes the store, not counted, as the plugins are not: %s and %s)",
			formatBytes(a.RestoreStoreRSSBytes), formatBytes(b.RestoreStoreRSSBytes))
	}
	flat.Status = status(ok)
	dn := float64(b.Nodes - a.Nodes)
	perNode := float64(b.CoordinatorRSSBytes-a.CoordinatorRSSBytes) / dn
	dataPerNode := float64(b.DataBytes-a.DataBytes) / dn
	image.Detail = fmt.Sprintf("%.0f bytes of RSS per node (coordinator %s at %d nodes, %s at %d), %.0f of them the nodes' paths and data: %.0f above",
		perNode, formatBytes(a.CoordinatorRSSBytes), a.Nodes, formatBytes(b.CoordinatorRSSBytes), b.Nodes, dataPerNode, perNode-dataPerNode)
	image.Status = status(perNode-dataPerNode <= 400)
	return []TargetResult{flat, snap, cold, image, failoverTarget(s)}
}
