package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/zktest"
)

// Options configure a run.
type Options struct {
	// Backends to measure, in order ("memory", "zookeeper", "raft").
	Backends []string
	// Voters is the number of Raft voters (and ZooKeeper servers) of the
	// measured quorum: 1 or 3. The leader-election rows use their own
	// members: 3 (election.sigkill) and 5 (election.sigkill-5).
	Voters int
	// Elections is the number of leader kills per election row and
	// backend, spread over the rounds (1 to MaxElections); 0:
	// DefaultElections, or DefaultQuickElections with Quick.
	Elections int
	// Quick runs fewer rounds and smaller batches (under two minutes).
	Quick bool
	// BinDir holds the plugin binaries (metaplane-backend-<name>); empty:
	// beside the running executable, then bin/ under the working directory.
	BinDir string
	// WorkDir is where data directories go; empty: a new temporary
	// directory, removed at the end.
	WorkDir string
	// HeapProfiles, when set, is a directory where the scale. rows write
	// each coordinator's heap profile once its memory settled (after a
	// collection): coordinator-heap-<backend>-<nodes>.pb.gz.
	HeapProfiles string
	// Rows, when set, runs only the rows whose id has one of these
	// prefixes.
	Rows []string
	// Progress receives the run's progress lines: the floors, each
	// system started, each row of each round, the migration and stream
	// rows. Nil: they go to Log.
	Progress io.Writer
	// Log receives the plugins' and coordinators' own records, and the
	// live migration's rounds; nil discards them.
	Log io.Writer
	// LogLevel is the lowest level of the plugins' and coordinators' own
	// records written to Log: "debug", "info", "warn" (empty) or "error".
	// At "debug" a Raft plugin also passes on Dragonboat's informational
	// records (elections, votes, connections).
	LogLevel string
	// MigrateNodes is the size of the migrate. rows' tree (at least
	// MinMigrateNodes, at most MaxMigrateNodes); 0: 100 000, or 10 000
	// with Quick.
	MigrateNodes int
	// ScaleNodes is the size of the scale. rows' tree (MinScaleNodes to
	// MaxScaleNodes); 0: 1 000 000, or 100 000 with Quick. The rows also
	// measure a tree a tenth that size.
	ScaleNodes int
	// Security adds the client-security rows (security.go): admin rows
	// measured again on the same leader's mutual-TLS listener and on its
	// mutual-TLS listener with the authorizer on, each noted with its
	// ratio to the plaintext row.
	Security bool
	// NoSettle starts every batch at once, without waiting for the other
	// backends' processes to go quiet (see settle.go).
	NoSettle bool
}

// plan holds the sizes a run uses, derived from Options.
type plan struct {
	rounds int
	// batch is the number of timed calls per backend, row and round for
	// cheap calls; slow rows scale it down.
	batch int
	// batchTime bounds one batch's wall time.
	batchTime time.Duration
	// throughputOps is the number of writes per worker per round in the
	// throughput rows.
	throughputOps int
	// elections is the number of leader kills per election row, backend
	// and round.
	elections  int
	partitions int
}

func newPlan(o Options) plan {
	p := plan{rounds: 5, batch: 2000, batchTime: 4 * time.Second, throughputOps: 150, partitions: 1000}
	kills := DefaultElections
	if o.Quick {
		p = plan{rounds: 3, batch: 200, batchTime: 700 * time.Millisecond, throughputOps: 30, partitions: 1000}
		kills = DefaultQuickElections
	}
	if o.Elections > 0 {
		kills = o.Elections
	}
	// At least the kills asked for, evenly over the rounds.
	p.elections = (kills + p.rounds - 1) / p.rounds
	return p
}

// workload is a row prepared on one backend.
type workload struct {
	// op runs one timed call (worker in [0, workers), i counts the
	// worker's calls) and returns how many operations it stood for.
	op func(ctx context.Context, worker, i int) (int64, error)
	// pre, when set, runs untimed before each call of op (e.g. creating
	// the table a timed drop removes).
	pre func(ctx context.Context, worker, i int) error
	// timed, when set instead of op, measures itself: it returns the
	// measured duration (e.g. kill to new leader).
	timed func(ctx context.Context, i int) (time.Duration, error)
	// workers > 1 runs op concurrently; ops/s is then the throughput.
	workers int
	// calls is the number of calls per worker per round; 0 means the
	// plan's batch.
	calls int
	// memory marks the write-throughput rows, under which peak RSS is
	// measured.
	memory bool
	// listAll lists every sample in the result, however many there are
	// (the election rows).
	listAll bool
	// detail, when set, adds the row's own figures to its result once
	// every round ran (the election rows' phases).
	detail func(res *Result)
	// begin, when set, runs before each batch (untimed) and end after
	// it: the election rows start their members for their batch and stop
	// them after it, so that no other row shares the machine with them.
	// A begin that fails counts as the batch's error and skips it.
	begin func(ctx context.Context) error
	end   func()
	close func()
}

// rowSpec is one row of the table.
type rowSpec struct {
	id, title, group string
	metric           Metric
	seed             *SeedFigure
	note             string
	// coordinator marks rows that need the coordinator rig.
	coordinator bool
	// backends, when set, restricts the row to these backends.
	backends []string
	// prepare readies the row on one system; an error makes the row "not
	// available" on that backend with the error as the reason.
	prepare func(ctx context.Context, s *System, p plan) (*workload, error)
	// migration marks the migrate. rows: measured once, by runMigration,
	// not in the rounds (prepare is nil).
	migration bool
	// stream marks the stream. rows: measured once, by runStream, not in
	// the rounds (prepare is nil).
	stream bool
	// buckets marks the buckets. rows: measured once, by runBuckets, not
	// in the rounds (prepare is nil).
	buckets bool
	// scale marks the scale. rows: measured once, by runScale, not in the
	// rounds (prepare is nil).
	scale bool
}

// System is one backend under test and what the rows need of it. A part
// that is missing is nil, and Missing says why.
type System struct {
	Name string
	// NewClient opens a new client of the store, with a session of its
	// own, through the plugin boundary.
	NewClient func(ctx context.Context, name string) (core.MetadataBackend, error)
	// Processes lists the processes to profile (plugins, servers).
	Processes func() []ProcessMemory
	// Coordinator gives the coordinator-level rows (image, admin API).
	Coordinator CoordinatorRig
	// Election starts the leader-election rows' n candidates, each a
	// coordinator on a member of its own (n Raft voters; n ZooKeeper
	// clients of the ensemble).
	Election func(ctx context.Context, n int) (ElectionRig, error)
	// Missing says why a part is nil, by part name ("coordinator",
	// "election").
	Missing map[string]string
	// ZooKeeperAddress is the ensemble's connect string, on the ZooKeeper
	// system (the raw-client rows use it without the plugin).
	ZooKeeperAddress string
	// Settings are the settings this system runs with, key=value.
	Settings []string
	closers  []func() error
}

// onClose registers f to run (in reverse order) when the system closes.
func (s *System) onClose(f func() error) { s.closers = append(s.closers, f) }

// Close stops everything the system started. It returns the first error.
func (s *System) Close() error {
	var first error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	s.closers = nil
	return first
}

func (s *System) missing(part string) error {
	if why, ok := s.Missing[part]; ok && why != "" {
		return errors.New(why)
	}
	return fmt.Errorf("%s not available on %s", part, s.Name)
}

// CoordinatorRig is a coordinator running on a backend: its metadata
// image and its admin API.
type CoordinatorRig interface {
	// ImageGetTable reads one table's record from the coordinator's
	// in-process metadata image.
	ImageGetTable(db, table string) error
	// ImageGetNode reads the table's node from the image, undecoded.
	ImageGetNode(db, table string) error
	// Admin returns the admin API client of the coordinator leader.
	Admin() AdminAPI
	// Close stops the coordinator.
	Close() error
}

// AdminAPI is the admin calls the rows time, each one call of the admin
// gRPC API to the leader coordinator. Errors are the API's, translated back
// to core's sentinels (core.ErrNodeExists for an existing database, ...).
// Safe for concurrent use.
type AdminAPI interface {
	// CreateDatabase creates db; an existing db is not an error.
	CreateDatabase(ctx context.Context, db string) error
	// CreateTable creates db.table (3 columns, 3 buckets, replication
	// factor 3), partitioned by a string column when partitioned.
	CreateTable(ctx context.Context, db, table string, partitioned bool) error
	// DropTable drops db.table.
	DropTable(ctx context.Context, db, table string) error
	// CreatePartition creates a partition of a partitioned table.
	CreatePartition(ctx context.Context, db, table, partition string) error
	// GetTableInfo reads db.table's info.
	GetTableInfo(ctx context.Context, db, table string) error
	// ListTables lists db's tables and returns how many there are.
	ListTables(ctx context.Context, db string) (int, error)
	// ListPartitionInfos lists a table's partitions and returns how many.
	ListPartitionInfos(ctx context.Context, db, table string) (int, error)
}

// ElectionRig is a set of candidate coordinators, each on a member of a
// store of its own.
type ElectionRig interface {
	// KillLeaderAndWait SIGKILLs the leader coordinator's member (its
	// plugin process: the Raft voter, or the ZooKeeper client holding its
	// session) and returns the phases from the kill until another
	// coordinator's admin API answered as leader, then restores the
	// killed member.
	KillLeaderAndWait(ctx context.Context) (ElectionKill, error)
	Close() error
}

// logf writes a progress line.
func (o Options) logf(format string, args ...any) {
	w := o.Progress
	if w == nil {
		w = o.Log
	}
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// Run starts every backend of o, measures every row on each, interleaved
// (round by round, row by row, alternating the backends' order), and
// returns the report. It stops what it started before returning.
// Cancelling ctx stops the run between calls; Run then returns the report
// so far with ctx's error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Voters == 0 {
		o.Voters = 1
	}
	if o.Voters != 1 && o.Voters != 3 {
		return nil, fmt.Errorf("voters: %d: must be 1 or 3", o.Voters)
	}
	if o.Elections < 0 || o.Elections > MaxElections {
		return nil, fmt.Errorf("elections: %d: must be 1 to %d (0: the default)", o.Elections, MaxElections)
	}
	if len(o.Backends) == 0 {
		return nil, errors.New("backends: none given")
	}
	if o.ScaleNodes != 0 && (o.ScaleNodes < MinScaleNodes || o.ScaleNodes > MaxScaleNodes) {
		return nil, fmt.Errorf("scale nodes: %d: must be %d to %d", o.ScaleNodes, MinScaleNodes, MaxScaleNodes)
	}
	if o.MigrateNodes != 0 && (o.MigrateNodes < MinMigrateNodes || o.MigrateNodes > MaxMigrateNodes) {
		return nil, fmt.Errorf("migrate nodes: %d: must be %d to %d", o.MigrateNodes, MinMigrateNodes, MaxMigrateNodes)
	}
	switch o.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("log level: %q: must be debug, info, warn or error", o.LogLevel)
	}
	for _, b := range o.Backends {
		if _, ok := starters[b]; !ok {
			return nil, fmt.Errorf("backends: unknown backend %q (known: %s)", b, strings.Join(knownBackends(), ", "))
		}
	}
	p := newPlan(o)
	start := time.Now()
	rep := &Report{
		Schema:  ReportSchema,
		Machine: DescribeMachine(start),
		Options: RunConfig{Backends: o.Backends, Voters: o.Voters, Quick: o.Quick, Rounds: p.rounds, ElectionsPerRow: p.elections * p.rounds},
		Started: start.UTC(),
	}
	if o.WorkDir == "" {
		d, err := os.MkdirTemp("", "metaplane-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		o.WorkDir = d
	}
	rows := append(allRows(), migrateSpecs()...)
	rows = append(rows, streamSpecs()...)
	rows = append(rows, bucketsSpecs()...)
	rows = append(rows, scaleSpecs()...)
	if o.Security {
		rows = append(rows, securityRows()...)
	}
	specs := onRunBackends(selectRows(rows, o.Rows), o.Backends)
	var migSpecs, strSpecs, bktSpecs, sclSpecs []rowSpec
	for i := 0; i < len(specs); i++ {
		switch {
		case specs[i].migration:
			migSpecs = append(migSpecs, specs[i])
		case specs[i].stream:
			strSpecs = append(strSpecs, specs[i])
		case specs[i].buckets:
			bktSpecs = append(bktSpecs, specs[i])
		case specs[i].scale:
			sclSpecs = append(sclSpecs, specs[i])
		default:
			continue
		}
		specs = append(specs[:i], specs[i+1:]...)
		i--
	}
	env := &runEnv{opts: o, plan: p}
	o.logf("measuring the machine floors ...")
	rep.Floors = measureFloors(ctx, env, p.batch)
	for _, spec := range specs {
		env.needCoordinator = env.needCoordinator || spec.coordinator
	}

	// Start the systems.
	systems := map[string]*System{}
	startErr := map[string]error{}
	// The scale. and stream. rows start systems of their own: a run of
	// only those starts none here.
	needSystems := len(specs) > 0 || len(migSpecs) > 0 || len(bktSpecs) > 0
	for _, name := range o.Backends {
		if !needSystems {
			break
		}
		o.logf("starting %s ...", name)
		s, err := starters[name](ctx, env)
		if err != nil {
			o.logf("  %s not available: %v", name, err)
			startErr[name] = err
			continue
		}
		systems[name] = s
		rep.Options.Settings = append(rep.Options.Settings, s.Settings...)
		defer s.Close()
	}
	if v := zktest.JavaVersion(); v != "" && systems[ZooKeeper] != nil {
		rep.Machine.JavaVersion = v
	}

	// Prepare the rows.
	type cell struct {
		w        *workload
		samples  []time.Duration
		ops      int64
		wall     time.Duration
		errs     int
		firstErr error
		why      string
		// cpu is the CPU time used during the batches (throughput rows);
		// cpuErr why it could not be read.
		cpu    time.Duration
		cpuErr error
	}
	cells := make([]map[string]*cell, len(specs))
	for i, spec := range specs {
		cells[i] = map[string]*cell{}
		for _, name := range o.Backends {
			if len(spec.backends) > 0 && !contains(spec.backends, name) {
				continue
			}
			c := &cell{}
			cells[i][name] = c
			s := systems[name]
			if s == nil {
				c.why = "backend did not start: " + startErr[name].Error()
				continue
			}
			if err := ctx.Err(); err != nil {
				c.why = err.Error()
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			w, err := spec.prepare(pctx, s, p)
			cancel()
			if err != nil {
				c.why = err.Error()
				o.logf("  %s on %s: not available: %v", spec.id, name, err)
				continue
			}
			c.w = w
		}
	}
	defer func() {
		for _, m := range cells {
			for _, c := range m {
				if c.w != nil && c.w.close != nil {
					c.w.close()
				}
			}
		}
	}()

	// The rounds.
	var memProcs []ProcessMemory
	if !o.NoSettle && len(systems) > 1 {
		rep.Settle = newSettleSummary(defaultSettle)
	}
	for round := 0; round < p.rounds && ctx.Err() == nil; round++ {
		o.logf("round %d/%d (%s)", round+1, p.rounds, time.Since(start).Round(time.Second))
		last := round == p.rounds-1
		for i, spec := range specs {
			o.logf("  round %d/%d, row %d/%d: %s", round+1, p.rounds, i+1, len(specs), spec.id)
			order := append([]string(nil), o.Backends...)
			if (round+i)%2 == 1 {
				for l, r := 0, len(order)-1; l < r; l, r = l+1, r-1 {
					order[l], order[r] = order[r], order[l]
				}
			}
			for _, name := range order {
				c := cells[i][name]
				if c == nil || c.w == nil || ctx.Err() != nil {
					continue
				}
				if c.w.begin != nil {
					if err := c.w.begin(ctx); err != nil {
						c.errs++
						if c.firstErr == nil {
							c.firstErr = err
						}
						o.logf("  %s on %s: %v", spec.id, name, err)
						continue
					}
				}
				if rep.Settle != nil {
					waited, quiet := settle(ctx, othersThan(systems, o.Backends, name), defaultSettle)
					rep.Settle.add(waited, quiet)
					if !quiet && ctx.Err() == nil {
						o.logf("  %s on %s: the other backends were still busy after %v; the batch starts anyway", spec.id, name, waited.Round(time.Millisecond))
					}
				}
				if last && c.w.memory {
					resetPeaks(systems[name])
				}
				var cpu0 time.Duration
				if c.w.memory && c.cpuErr == nil {
					cpu0, c.cpuErr = systemCPU(systems[name])
				}
				samples, ops, wall, errs, firstErr := runBatch(ctx, c.w, p)
				if c.w.end != nil {
					c.w.end()
				}
				if c.w.memory && c.cpuErr == nil {
					var cpu1 time.Duration
					cpu1, c.cpuErr = systemCPU(systems[name])
					c.cpu += cpu1 - cpu0
				}
				c.samples = append(c.samples, samples...)
				c.ops += ops
				c.wall += wall
				c.errs += errs
				if c.firstErr == nil {
					c.firstErr = firstErr
				}
				if last && c.w.memory {
					memProcs = append(memProcs, readPeaks(systems[name], spec.title)...)
				}
			}
		}
	}

	// Summarize.
	for i, spec := range specs {
		row := Row{ID: spec.id, Title: spec.title, Group: spec.group, Metric: spec.metric, Seed: spec.seed, Note: spec.note}
		for _, name := range o.Backends {
			c := cells[i][name]
			if c == nil {
				continue
			}
			if c.w == nil {
				row.Results = append(row.Results, Result{Backend: name, Unavailable: c.why})
				continue
			}
			if len(c.samples) == 0 {
				why := "no successful call"
				if c.firstErr != nil {
					why += ": " + c.firstErr.Error()
				}
				if ctx.Err() != nil {
					why = "run cancelled"
				}
				row.Results = append(row.Results, Result{Backend: name, Unavailable: why, Errors: c.errs})
				continue
			}
			res := resultFromSummary(name, Summarize(c.samples, c.ops, c.wall), c.ops, c.errs, c.firstErr)
			if c.w.memory && c.cpuErr == nil && c.ops > 0 {
				res.CPUMicrosPerOp = round3(float64(c.cpu.Microseconds()) / float64(c.ops))
			} else if c.cpuErr != nil {
				o.logf("  %s on %s: CPU per operation not measured: %v", spec.id, name, c.cpuErr)
			}
			if len(c.samples) <= maxListedSamples || c.w.listAll {
				// Summarize sorted them.
				for _, d := range c.samples {
					res.SamplesMicros = append(res.SamplesMicros, micros(d))
				}
			}
			if c.w.detail != nil {
				c.w.detail(&res)
			}
			row.Results = append(row.Results, res)
		}
		row.computeRatio()
		rep.Rows = append(rep.Rows, row)
	}
	if len(migSpecs) > 0 && ctx.Err() == nil {
		o.logf("migration rows ... (%s)", time.Since(start).Round(time.Second))
		rows, fig := runMigration(ctx, env, migSpecs, systems[ZooKeeper])
		rep.Rows = append(rep.Rows, rows...)
		rep.Migration = fig
	}
	if len(strSpecs) > 0 && ctx.Err() == nil {
		o.logf("metadata stream rows ... (%s)", time.Since(start).Round(time.Second))
		rows, fig := runStream(ctx, env, strSpecs)
		rep.Rows = append(rep.Rows, rows...)
		rep.Stream = fig
	}
	if len(bktSpecs) > 0 && ctx.Err() == nil {
		o.logf("bucket leadership rows ... (%s)", time.Since(start).Round(time.Second))
		rows, fig := runBuckets(ctx, env, bktSpecs, systems)
		rep.Rows = append(rep.Rows, rows...)
		rep.Buckets = fig
	}
	if len(sclSpecs) > 0 && ctx.Err() == nil {
		o.logf("scale rows ... (%s)", time.Since(start).Round(time.Second))
		rows, fig := runScale(ctx, env, sclSpecs)
		rep.Rows = append(rep.Rows, rows...)
		rep.Scale = fig
	}
	applyFloors(rep)
	securityRatios(rep)
	rep.Memory = dedupeMemory(memProcs)
	rep.Targets = EvaluateTargets(rep)
	rep.DurationSeconds = round3(time.Since(start).Seconds())
	rep.Machine.LoadAverageEnd = loadAverage()
	return rep, ctx.Err()
}

// runEnv is what system starters get.
type runEnv struct {
	opts Options
	plan plan
	// needCoordinator is set when a selected row needs the coordinator.
	needCoordinator bool
}

// starters start a backend's system by name.
var starters = map[string]func(ctx context.Context, env *runEnv) (*System, error){}

func knownBackends() []string {
	var out []string
	for k := range starters {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// runBatch runs one batch of a workload: p.batch (or w.calls) calls per
// worker, bounded by p.batchTime.
func runBatch(ctx context.Context, w *workload, p plan) (samples []time.Duration, ops int64, wall time.Duration, errs int, firstErr error) {
	calls := w.calls
	if calls == 0 {
		calls = p.batch
	}
	workers := w.workers
	if workers < 1 {
		workers = 1
	}
	deadline := time.Now().Add(p.batchTime)
	var mu sync.Mutex
	record := func(d time.Duration, n int64, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		samples = append(samples, d)
		ops += n
	}
	start := time.Now()
	if w.timed != nil {
		for i := 0; i < calls && ctx.Err() == nil; i++ {
			d, err := w.timed(ctx, i)
			record(d, 1, err)
		}
		return samples, ops, time.Since(start), errs, firstErr
	}
	var wg sync.WaitGroup
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := 0; i < calls && ctx.Err() == nil; i++ {
				// Throughput rows run their fixed count; serial rows stop
				// at the batch's time bound.
				if workers == 1 && i > 0 && time.Now().After(deadline) {
					return
				}
				if w.pre != nil {
					if err := w.pre(ctx, k, i); err != nil {
						record(0, 0, fmt.Errorf("setup: %w", err))
						continue
					}
				}
				t0 := time.Now()
				n, err := w.op(ctx, k, i)
				record(time.Since(t0), n, err)
			}
		}(k)
	}
	wg.Wait()
	return samples, ops, time.Since(start), errs, firstErr
}

func selectRows(all []rowSpec, prefixes []string) []rowSpec {
	if len(prefixes) == 0 {
		return all
	}
	var out []rowSpec
	for _, r := range all {
		for _, p := range prefixes {
			if strings.HasPrefix(r.id, p) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// resetPeaks resets the peak RSS of the system's processes (writing 5 to
// /proc/<pid>/clear_refs), so that the next reading covers what follows.
func resetPeaks(s *System) {
	for _, pid := range systemPIDs(s) {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// systemPIDs lists the known process ids of the systems' processes (none
// for a system without processes: an in-process test double).
func systemPIDs(systems ...*System) []int {
	var pids []int
	for _, s := range systems {
		if s == nil || s.Processes == nil {
			continue
		}
		for _, p := range s.Processes() {
			if p.PID > 0 {
				pids = append(pids, p.PID)
			}
		}
	}
	return pids
}

// systemCPU is the CPU time used so far by the system's processes and by
// the bench process (the clients, the coordinator rigs).
func systemCPU(s *System) (time.Duration, error) {
	pids := append([]int{os.Getpid()}, systemPIDs(s)...)
	var total time.Duration
	for _, pid := range pids {
		d, err := ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// readPeaks reads the peak RSS of the system's processes.
func readPeaks(s *System, under string) []ProcessMemory {
	if s == nil || s.Processes == nil {
		return nil
	}
	var out []ProcessMemory
	for _, p := range s.Processes() {
		if p.PID <= 0 {
			continue
		}
		v, err := PeakRSS(p.PID)
		if err != nil {
			p.Note = err.Error()
		} else {
			p.PeakRSSBytes = v
			p.Note = "peak under: " + under
		}
		out = append(out, p)
	}
	return out
}

// dedupeMemory keeps, per process, the largest peak seen.
func dedupeMemory(in []ProcessMemory) []ProcessMemory {
	var out []ProcessMemory
	idx := map[int]int{}
	for _, p := range in {
		if j, ok := idx[p.PID]; ok {
			if p.PeakRSSBytes > out[j].PeakRSSBytes {
				out[j] = p
			}
			continue
		}
		idx[p.PID] = len(out)
		out = append(out, p)
	}
	if v, err := PeakRSS(os.Getpid()); err == nil {
		out = append(out, ProcessMemory{Backend: "all", Role: "bench process (clients, in-process coordinators)", PID: os.Getpid(), PeakRSSBytes: v, Note: "peak over the whole run"})
	}
	return out
}

// KnownBackends lists the backends Run can start, sorted.
func KnownBackends() []string { return knownBackends() }

// KnownBackend reports whether Run can start backend name.
func KnownBackend(name string) bool {
	_, ok := starters[name]
	return ok
}

// onRunBackends drops the rows restricted to backends the run does not
// measure (the raw ZooKeeper rows in a run without ZooKeeper).
func onRunBackends(specs []rowSpec, backends []string) []rowSpec {
	out := specs[:0:0]
	for _, s := range specs {
		keep := len(s.backends) == 0
		for _, b := range s.backends {
			keep = keep || contains(backends, b)
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}
