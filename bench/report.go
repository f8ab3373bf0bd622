package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Backend names as they appear in reports.
const (
	Memory    = "memory"
	ZooKeeper = "zookeeper"
	Raft      = "raft"
)

// Metric says which figure of a row is its headline (the one compared and
// charted).
type Metric string

const (
	// MetricP50 compares the median per-call latency (lower is better).
	MetricP50 Metric = "p50"
	// MetricMean compares the mean cost of one operation (lower is
	// better); used where a call stands for many operations (id blocks).
	MetricMean Metric = "mean"
	// MetricThroughput compares operations per second (higher is better).
	MetricThroughput Metric = "ops_per_sec"
)

// Report is the outcome of one `metaplane bench` run, as written to JSON.
type Report struct {
	// Schema versions this JSON layout.
	Schema  int       `json:"schema"`
	Machine Machine   `json:"machine"`
	Options RunConfig `json:"options"`
	Started time.Time `json:"started"`
	// DurationSeconds is the run's wall time.
	DurationSeconds float64 `json:"duration_seconds"`
	// Floors are the machine floors measured at the start of the run.
	Floors []Floor `json:"floors,omitempty"`
	Rows   []Row   `json:"rows"`
	// Memory holds the peak resident set (VmHWM) of every process the run
	// measured, read after the write-throughput rows.
	Memory  []ProcessMemory `json:"memory"`
	Targets []TargetResult  `json:"targets"`
	Notes   []string        `json:"notes,omitempty"`
	// Migration is what the migrate. rows measured, when they ran.
	Migration *Migration `json:"migration,omitempty"`
	// Stream is what the stream. rows measured, when they ran.
	Stream *Stream `json:"stream,omitempty"`
	// Buckets is what the buckets. rows measured, when they ran.
	Buckets *Buckets `json:"buckets,omitempty"`
	// Scale is what the scale. rows measured (issue 34), when they ran.
	Scale *Scale `json:"scale,omitempty"`
	// Settle is what waiting for the other backends to go quiet before
	// each batch cost; nil when the run did not wait (one backend, or
	// --no-settle).
	Settle *SettleSummary `json:"settle,omitempty"`
}

// ReportSchema is the current Report.Schema.
const ReportSchema = 1

// RunConfig is the part of the options recorded in the report.
type RunConfig struct {
	Backends []string `json:"backends"`
	Voters   int      `json:"voters"`
	Quick    bool     `json:"quick"`
	Rounds   int      `json:"rounds"`
	// ElectionsPerRow is the number of leader kills per election row and
	// backend.
	ElectionsPerRow int `json:"elections_per_row,omitempty"`
	// Settings are the backend settings the run used (timeouts, block
	// sizes), as key=value strings.
	Settings []string `json:"settings,omitempty"`
}

// Row is one line of the table: one measurement on every backend.
type Row struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Group  string `json:"group"`
	Metric Metric `json:"metric"`
	// Seed is the figure the design documents published for this row,
	// when they did.
	Seed    *SeedFigure `json:"seed,omitempty"`
	Results []Result    `json:"results"`
	// Ratio is the headline ZooKeeper/Raft ratio, oriented so that a value
	// above 1 means Raft is better: ZooKeeper latency / Raft latency, or
	// Raft ops/s / ZooKeeper ops/s. Absent when either side is missing.
	Ratio *float64 `json:"ratio_zk_over_raft,omitempty"`
	// Floor is what the row's median cannot go below on this machine (the
	// sum of the floors that apply to it), when one applies and was
	// measured.
	Floor *RowFloor `json:"floor,omitempty"`
	Note  string    `json:"note,omitempty"`
}

// RowFloor is the floor that applies to a row.
type RowFloor struct {
	// Floors are the Floor ids summed ("fsync", "plugin-hop", ...).
	Floors    []string `json:"floors"`
	P50Micros float64  `json:"p50_us"`
}

// SeedFigure is a published figure from the design documents (JVM, one
// host, loopback, one voter), in microseconds.
type SeedFigure struct {
	ZooKeeperMicros float64 `json:"zookeeper_us,omitempty"`
	RaftMicros      float64 `json:"raft_us,omitempty"`
	Note            string  `json:"note,omitempty"`
}

// Result is one row measured on one backend.
type Result struct {
	Backend string `json:"backend"`
	// Unavailable, when set, says why nothing was measured; every figure
	// is then zero.
	Unavailable string  `json:"unavailable,omitempty"`
	N           int     `json:"n"`
	Ops         int64   `json:"ops"`
	P50Micros   float64 `json:"p50_us"`
	P90Micros   float64 `json:"p90_us,omitempty"`
	P99Micros   float64 `json:"p99_us"`
	MeanMicros  float64 `json:"mean_us"`
	MinMicros   float64 `json:"min_us"`
	MaxMicros   float64 `json:"max_us"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	Errors      int     `json:"errors,omitempty"`
	// FloorRatio is P50Micros over the row's floor (1 would be the
	// machine's limit); 0 when the row has no floor.
	FloorRatio float64 `json:"floor_ratio,omitempty"`
	// CPUMicrosPerOp is, on the write-throughput rows, the CPU time (user
	// plus system) the system's processes and the bench process (clients,
	// coordinator) used per operation over the row's batches: what the
	// row would reach with the machine to itself is about
	// cores / CPUMicrosPerOp (CPUCeiling).
	CPUMicrosPerOp float64 `json:"cpu_us_per_op,omitempty"`
	// FirstError is the first error seen, when any call failed.
	FirstError string `json:"first_error,omitempty"`
	// SamplesMicros lists every sample, sorted, when there are at most
	// maxListedSamples of them (the election row), so that a p99 of few
	// samples can be read for what it is.
	SamplesMicros []float64 `json:"samples_us,omitempty"`
	// Election is the election rows' phase breakdown and every kill.
	Election *ElectionDetail `json:"election,omitempty"`
}

// CPUCeiling is the throughput the result's CPU cost allows on cores
// cores with nothing else running (0 when the cost was not measured).
func (r Result) CPUCeiling(cores int) float64 {
	if r.CPUMicrosPerOp <= 0 || cores <= 0 {
		return 0
	}
	return float64(cores) * 1e6 / r.CPUMicrosPerOp
}

// maxListedSamples is the most samples a Result lists.
const maxListedSamples = 50

// Available reports whether the result holds a measurement.
func (r Result) Available() bool { return r.Unavailable == "" && r.N > 0 }

// Value returns the result's figure for metric m.
func (r Result) Value(m Metric) float64 {
	switch m {
	case MetricMean:
		return r.MeanMicros
	case MetricThroughput:
		return r.OpsPerSec
	}
	return r.P50Micros
}

// ProcessMemory is the peak resident set of one process.
type ProcessMemory struct {
	Backend string `json:"backend"`
	// Role says what the process is ("bench process", "plugin (voter 1)",
	// "zookeeper server").
	Role string `json:"role"`
	PID  int    `json:"pid"`
	// PeakRSSBytes is VmHWM from /proc/<pid>/status; 0 when unreadable.
	PeakRSSBytes int64  `json:"peak_rss_bytes"`
	Note         string `json:"note,omitempty"`
}

// TargetResult is one of the targets checked against the run.
type TargetResult struct {
	Target string `json:"target"`
	// Status is "met", "not met" or "not measured".
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// result returns the row's result for backend, if any.
func (r *Row) result(backend string) (Result, bool) {
	for _, res := range r.Results {
		if res.Backend == backend {
			return res, true
		}
	}
	return Result{}, false
}

// computeRatio fills r.Ratio from the ZooKeeper and Raft results.
func (r *Row) computeRatio() {
	r.Ratio = nil
	zk, ok1 := r.result(ZooKeeper)
	rf, ok2 := r.result(Raft)
	if !ok1 || !ok2 || !zk.Available() || !rf.Available() {
		return
	}
	var v float64
	var ok bool
	if r.Metric == MetricThroughput {
		v, ok = Speedup(zk.OpsPerSec, rf.OpsPerSec)
		if ok {
			v = 1 / v
		}
	} else {
		v, ok = Speedup(zk.Value(r.Metric), rf.Value(r.Metric))
	}
	if ok {
		r.Ratio = &v
	}
}

// resultFromSummary converts a Summary into a Result.
func resultFromSummary(backend string, s Summary, ops int64, errs int, firstErr error) Result {
	res := Result{
		Backend:    backend,
		N:          s.N,
		Ops:        ops,
		P50Micros:  micros(s.P50),
		P90Micros:  micros(s.P90),
		P99Micros:  micros(s.P99),
		MeanMicros: micros(s.Mean),
		MinMicros:  micros(s.Min),
		MaxMicros:  micros(s.Max),
		OpsPerSec:  round3(s.OpsPerSec),
		Errors:     errs,
	}
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	return res
}

func micros(d time.Duration) float64 { return round3(float64(d) / 1e3) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteJSONFile writes the report to path.
func (rep *Report) WriteJSONFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// ReadJSONFile reads a report written by WriteJSONFile. Errors name the
// file and what is wrong with it.
func ReadJSONFile(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: not a benchmark report: %w", path, err)
	}
	if rep.Schema != ReportSchema {
		return nil, fmt.Errorf("%s: report schema %d, want %d", path, rep.Schema, ReportSchema)
	}
	return &rep, nil
}

// FormatDuration renders microseconds the way the table shows them.
func FormatDuration(us float64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 10:
		return fmt.Sprintf("%.2fµs", us)
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}

// FormatRate renders operations per second.
func FormatRate(v float64) string {
	switch {
	case v < 0:
		return "-"
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2f/s", v)
	case v < 1e4:
		return fmt.Sprintf("%.0f/s", v)
	case v < 1e6:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	}
	return fmt.Sprintf("%.2fM/s", v/1e6)
}

// WriteTable writes the report as a plain-text table.
func (rep *Report) WriteTable(w io.Writer) error {
	m := rep.Machine
	goVersion := m.GoVersion
	if m.GoMaxProcs > 0 {
		goVersion += fmt.Sprintf(" (GOMAXPROCS %d)", m.GoMaxProcs)
	}
	fmt.Fprintf(w, "machine: %s, %d cores, %s memory, Linux %s, %s, %s\n",
		m.CPUModel, m.Cores, formatBytes(m.MemoryBytes), m.Kernel, goVersion, m.Date)
	fmt.Fprintf(w, "run: backends %s, %d voter(s), quick=%v, %d rounds interleaved, %.0fs; load average %.2f at the start, %.2f at the end\n",
		strings.Join(rep.Options.Backends, ","), rep.Options.Voters, rep.Options.Quick, rep.Options.Rounds, rep.DurationSeconds, m.LoadAverage, m.LoadAverageEnd)
	if len(rep.Options.Settings) > 0 {
		fmt.Fprintf(w, "settings: %s\n", strings.Join(rep.Options.Settings, ", "))
	}
	if rep.Settle != nil {
		fmt.Fprintf(w, "settling: %s\n", rep.Settle)
	}
	if len(rep.Floors) > 0 {
		fmt.Fprintln(w, "\nmachine floors (measured in this run):")
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, f := range rep.Floors {
			if f.Unavailable != "" {
				fmt.Fprintf(tw, "  %s\t%s\tnot available: %s\n", f.ID, f.Title, f.Unavailable)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\tp50 %s\tp99 %s\n", f.ID, f.Title, FormatDuration(f.P50Micros), FormatDuration(f.P99Micros))
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "row\tbackend\tp50\tp99\tmean/op\tops/s\tn\tzk/raft\tx floor\tseed zk\tseed raft\t")
	for _, row := range rep.Rows {
		for i, res := range row.Results {
			title, ratio, sz, sr := "", "", "", ""
			if i == 0 {
				title = row.Title
				if row.Ratio != nil {
					ratio = fmt.Sprintf("%.2fx", *row.Ratio)
				}
				if row.Seed != nil {
					sz = FormatDuration(row.Seed.ZooKeeperMicros)
					sr = FormatDuration(row.Seed.RaftMicros)
				}
			}
			if !res.Available() {
				why := res.Unavailable
				if why == "" {
					why = "no samples"
				}
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t0\t%s\t\t%s\t%s\tnot available: %s\n", title, res.Backend, ratio, sz, sr, why)
				continue
			}
			floor := ""
			if res.FloorRatio > 0 {
				floor = fmt.Sprintf("%.1fx", res.FloorRatio)
			}
			errs := ""
			if res.Errors > 0 {
				errs = fmt.Sprintf("%d errors, first: %s", res.Errors, res.FirstError)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", title, res.Backend,
				FormatDuration(res.P50Micros), FormatDuration(res.P99Micros), FormatDuration(res.MeanMicros),
				FormatRate(res.OpsPerSec), res.N, ratio, floor, sz, sr, errs)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rep.writeElections(w)
	if len(rep.Memory) > 0 {
		fmt.Fprintln(w, "\npeak resident memory (VmHWM) after the write-throughput rows:")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, pm := range rep.Memory {
			fmt.Fprintf(tw, "  %s\t%s\tpid %d\t%s\t%s\n", pm.Backend, pm.Role, pm.PID, formatBytes(pm.PeakRSSBytes), pm.Note)
		}
		tw.Flush()
	}
	if cpu := rep.cpuLines(); len(cpu) > 0 {
		fmt.Fprintf(w, "\nCPU per write (user+system of the backend's processes and the bench process; ceiling: %d cores / CPU per write):\n", rep.Machine.Cores)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, l := range cpu {
			fmt.Fprintf(tw, "  %s\t%s\t%s/write\tceiling %s\n", l.title, l.backend, FormatDuration(l.perOp), FormatRate(l.ceiling))
		}
		tw.Flush()
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "\ntargets:")
		for _, t := range rep.Targets {
			fmt.Fprintf(w, "  [%s] %s: %s\n", t.Status, t.Target, t.Detail)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func formatBytes(b int64) string {
	switch {
	case b <= 0:
		return "?"
	case b < 1<<20:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

// WriteMarkdown writes the report's rows, memory and targets as Markdown
// tables (for docs/benchmarks.md).
func (rep *Report) WriteMarkdown(w io.Writer) error {
	bw := &strings.Builder{}
	backends := rep.backendOrder()
	if rep.Settle != nil {
		fmt.Fprintf(bw, "Settling: %s.\n\n", rep.Settle)
	}
	if len(rep.Floors) > 0 {
		fmt.Fprintln(bw, "| machine floor | p50 | p99 |")
		fmt.Fprintln(bw, "|---|---:|---:|")
		for _, f := range rep.Floors {
			if f.Unavailable != "" {
				fmt.Fprintf(bw, "| %s: %s | n/a | %s |\n", f.ID, f.Title, f.Unavailable)
				continue
			}
			fmt.Fprintf(bw, "| %s: %s | %s | %s |\n", f.ID, f.Title, FormatDuration(f.P50Micros), FormatDuration(f.P99Micros))
		}
		fmt.Fprintln(bw)
	}
	fmt.Fprint(bw, "| row |")
	for _, b := range backends {
		fmt.Fprintf(bw, " %s p50 | %s p99 | %s ops/s |", b, b, b)
	}
	fmt.Fprintln(bw, " ZK/Raft | floor (p50 of each backend over it) | seed ZK | seed Raft |")
	fmt.Fprint(bw, "|---|")
	for range backends {
		fmt.Fprint(bw, "---:|---:|---:|")
	}
	fmt.Fprintln(bw, "---:|---|---:|---:|")
	for _, r := range rep.Rows {
		title := r.Title
		if r.Metric == MetricMean {
			title += " (mean per id)"
		}
		fmt.Fprintf(bw, "| %s |", title)
		for _, b := range backends {
			res, ok := r.result(b)
			if !ok || !res.Available() {
				fmt.Fprint(bw, " n/a | | |")
				continue
			}
			p50, p99 := FormatDuration(res.P50Micros), FormatDuration(res.P99Micros)
			if r.Metric == MetricMean {
				// A call's p99 says nothing about the per-id cost.
				p50, p99 = FormatDuration(res.MeanMicros), "-"
			}
			fmt.Fprintf(bw, " %s | %s | %s |", p50, p99, FormatRate(res.OpsPerSec))
		}
		ratio, sz, sr := "", "", ""
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *r.Ratio)
		}
		if r.Seed != nil {
			sz, sr = FormatDuration(r.Seed.ZooKeeperMicros), FormatDuration(r.Seed.RaftMicros)
		}
		fmt.Fprintf(bw, " %s | %s | %s | %s |\n", ratio, r.floorCell(), sz, sr)
	}
	rep.writeElectionsMarkdown(bw)
	if len(rep.Memory) > 0 {
		fmt.Fprintln(bw, "\n| process | peak RSS (VmHWM) | measured |")
		fmt.Fprintln(bw, "|---|---:|---|")
		for _, m := range rep.Memory {
			fmt.Fprintf(bw, "| %s: %s | %s | %s |\n", m.Backend, m.Role, formatBytes(m.PeakRSSBytes), m.Note)
		}
	}
	if cpu := rep.cpuLines(); len(cpu) > 0 {
		fmt.Fprintf(bw, "\n| row | backend | CPU per write | ceiling on %d cores |\n", rep.Machine.Cores)
		fmt.Fprintln(bw, "|---|---|---:|---:|")
		for _, l := range cpu {
			fmt.Fprintf(bw, "| %s | %s | %s | %s |\n", l.title, l.backend, FormatDuration(l.perOp), FormatRate(l.ceiling))
		}
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintln(bw, "\n| target | status | measured |")
		fmt.Fprintln(bw, "|---|---|---|")
		for _, t := range rep.Targets {
			fmt.Fprintf(bw, "| %s | %s | %s |\n", t.Target, t.Status, t.Detail)
		}
	}
	_, err := io.WriteString(w, bw.String())
	return err
}

// floorCell is the Markdown cell of a row's floor: the floor and each
// backend's multiple of it ("fsync+plugin-hop 0.31ms: raft 4.2x, zookeeper 3.1x").
func (r *Row) floorCell() string {
	if r.Floor == nil {
		return ""
	}
	var parts []string
	for _, res := range r.Results {
		if res.FloorRatio > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1fx", res.Backend, res.FloorRatio))
		}
	}
	return r.Floor.label() + ": " + strings.Join(parts, ", ")
}

// cpuLine is one measured CPU cost per write.
type cpuLine struct {
	title, backend string
	perOp          float64 // µs
	ceiling        float64 // ops/s
}

// cpuLines lists the rows' CPU costs per write, in row order.
func (rep *Report) cpuLines() []cpuLine {
	var out []cpuLine
	for _, r := range rep.Rows {
		for _, res := range r.Results {
			if res.Available() && res.CPUMicrosPerOp > 0 {
				out = append(out, cpuLine{r.Title, res.Backend, res.CPUMicrosPerOp, res.CPUCeiling(rep.Machine.Cores)})
			}
		}
	}
	return out
}
