package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	ratio := 4.0
	slow := 0.5
	return &Report{
		Schema:  ReportSchema,
		Machine: Machine{CPUModel: "Test CPU <x&y>", Cores: 2, MemoryBytes: 8 << 30, Kernel: "6.1.0", GoVersion: "go1.26", GoMaxProcs: 1, Date: "2026-11-29T18:00:00Z"},
		Options: RunConfig{Backends: []string{ZooKeeper, Raft}, Voters: 3, Rounds: 5},
		Started: time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC),
		Rows: []Row{
			{ID: "admin.create-table", Title: "createTable (admin API)", Metric: MetricP50,
				Seed:    &SeedFigure{ZooKeeperMicros: 40300, RaftMicros: 9300},
				Results: []Result{{Backend: ZooKeeper, N: 50, P50Micros: 20000, P99Micros: 30000}, {Backend: Raft, N: 50, P50Micros: 5000, P99Micros: 9000}},
				Ratio:   &ratio},
			{ID: "store.write-serial", Title: "single-key write, serial", Metric: MetricP50,
				Results: []Result{{Backend: ZooKeeper, N: 50, P50Micros: 2000}, {Backend: Raft, N: 50, P50Micros: 4000}},
				Ratio:   &slow},
			{ID: "store.write-64", Title: "write throughput, 64 clients", Metric: MetricThroughput,
				Results: []Result{{Backend: ZooKeeper, N: 500, OpsPerSec: 3000}, {Backend: Raft, N: 500, OpsPerSec: 12000, CPUMicrosPerOp: 125}}},
			{ID: "image.get-table", Title: "catalog read from the image", Metric: MetricP50,
				Results: []Result{{Backend: ZooKeeper, Unavailable: "coordinator not built yet"}, {Backend: Raft, N: 1000, P50Micros: 0.4}}},
		},
		Memory: []ProcessMemory{{Backend: Raft, Role: "plugin", PID: 42, PeakRSSBytes: 50 << 20}},
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	rep := sampleReport()
	rep.Targets = EvaluateTargets(rep)
	path := filepath.Join(t.TempDir(), "out.json")
	if err := rep.WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSONFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rep) {
		t.Errorf("round trip changed the report:\n got %+v\nwant %+v", got, rep)
	}
	b, _ := os.ReadFile(path)
	for _, key := range []string{`"cpu_model"`, `"cores"`, `"memory_bytes"`, `"kernel"`, `"go_version"`, `"go_maxprocs"`, `"date"`,
		`"p50_us"`, `"p99_us"`, `"ops_per_sec"`, `"ratio_zk_over_raft"`, `"peak_rss_bytes"`, `"unavailable"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestReadJSONFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{not json"), 0o644)
	if _, err := ReadJSONFile(bad); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("ReadJSONFile(garbage) = %v, want an error naming the file", err)
	}
	old := filepath.Join(dir, "old.json")
	os.WriteFile(old, []byte(`{"schema": 99}`), 0o644)
	if _, err := ReadJSONFile(old); err == nil || !strings.Contains(err.Error(), "schema 99") {
		t.Errorf("ReadJSONFile(schema 99) = %v, want a schema error", err)
	}
}

func TestWriteSVG(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := rep.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	// Well-formed XML throughout.
	dec := xml.NewDecoder(strings.NewReader(svg))
	rects := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// Background, 2 legend swatches, 7 measured bars.
	if rects != 10 {
		t.Errorf("SVG has %d rects, want 10 (background, 2 legend, 7 bars)", rects)
	}
	for _, want := range []string{
		"createTable (admin API)", "4.00x", "0.50x", "not available (coordinator not built yet)",
		"Test CPU &lt;x&amp;y&gt;", "write throughput, 64 clients", "12.0k/s", "seed zookeeper: 40.30ms",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestEvaluateTargets(t *testing.T) {
	rep := sampleReport()
	got := map[string]TargetResult{}
	for _, tr := range EvaluateTargets(rep) {
		got[tr.Target] = tr
	}
	check := func(prefix, status string) {
		t.Helper()
		for name, tr := range got {
			if strings.HasPrefix(name, prefix) {
				if tr.Status != status {
					t.Errorf("target %q: status %q (%s), want %q", name, tr.Status, tr.Detail, status)
				}
				return
			}
		}
		t.Errorf("no target starting %q", prefix)
	}
	check("Raft at least as fast", TargetNotMet) // the serial write row is 0.5x
	check("createTable", TargetMet)              // 4x
	check("sequence ids", TargetNotMeasured)     // no id rows
	check("catalog reads", TargetNotMeasured)    // ZooKeeper side unavailable
	check("write throughput", TargetMet)         // 12k/s with 3 voters
	check("leader election", TargetNotMeasured)  // no election row
	if tr := got["write throughput, 3 voters, 64 clients: at least 10,000 writes/s (Raft)"]; !strings.Contains(tr.Detail, "ceiling 16.0k/s on 2 cores") {
		t.Errorf("throughput target detail %q lacks the CPU ceiling", tr.Detail)
	}
	rep.Options.Voters = 1
	for _, tr := range EvaluateTargets(rep) {
		if strings.HasPrefix(tr.Target, "write throughput") && tr.Status != TargetNotMeasured {
			t.Errorf("throughput target with 1 voter: %q, want not measured", tr.Status)
		}
	}
	// A row of one backend by design (the raw ZooKeeper client) is not a
	// row Raft failed to be compared on.
	faster := 2.0
	rep.Rows = []Row{
		{ID: "store.get", Metric: MetricP50, Ratio: &faster, Results: []Result{{Backend: ZooKeeper, N: 5, P50Micros: 200}, {Backend: Raft, N: 5, P50Micros: 100}}},
		{ID: "zk.raw-get", Metric: MetricP50, Results: []Result{{Backend: ZooKeeper, N: 5, P50Micros: 90}}},
	}
	for _, tr := range EvaluateTargets(rep) {
		if strings.HasPrefix(tr.Target, "Raft at least as fast") && (tr.Status != TargetMet || strings.Contains(tr.Detail, "zk.raw-get")) {
			t.Errorf("every-row target with a raw ZooKeeper row: %q (%s), want met without it", tr.Status, tr.Detail)
		}
	}
}

func TestWriteTable(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// The CPU cost per write of the Raft throughput row, and the ceiling
	// it allows on the machine's 2 cores (2 s of CPU / 125 µs).
	for _, want := range []string{"createTable (admin API)", "20.00ms", "4.00x", "not available: coordinator not built yet", "50.0 MiB",
		"125µs/write", "ceiling 16.0k/s", "go1.26 (GOMAXPROCS 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestCPUPerWriteTarget: Raft's CPU per write against the raw ZooKeeper
// ensemble's, met only when Raft's is at most ZooKeeper's, and not
// measured without both figures.
func TestCPUPerWriteTarget(t *testing.T) {
	find := func(rep *Report) TargetResult {
		for _, tr := range EvaluateTargets(rep) {
			if strings.HasPrefix(tr.Target, "CPU per acknowledged write") {
				return tr
			}
		}
		t.Fatal("no CPU-per-write target")
		return TargetResult{}
	}
	rep := func(raftCPU, zkCPU float64) *Report {
		return &Report{Options: RunConfig{Voters: 3}, Rows: []Row{
			{ID: "store.write-16", Metric: MetricThroughput, Results: []Result{{Backend: Raft, N: 1, Ops: 100, OpsPerSec: 1000, CPUMicrosPerOp: raftCPU}}},
			{ID: "zk.raw-write-16", Metric: MetricThroughput, Results: []Result{{Backend: ZooKeeper, N: 1, Ops: 100, OpsPerSec: 1000, CPUMicrosPerOp: zkCPU}}},
		}}
	}
	if tr := find(rep(80, 120)); tr.Status != TargetMet || !strings.Contains(tr.Detail, "0.67x") {
		t.Errorf("Raft 80 µs, ZooKeeper 120 µs: %s (%s), want met at 0.67x", tr.Status, tr.Detail)
	}
	if tr := find(rep(150, 120)); tr.Status != TargetNotMet {
		t.Errorf("Raft 150 µs, ZooKeeper 120 µs: %s (%s), want not met", tr.Status, tr.Detail)
	}
	if tr := find(rep(0, 120)); tr.Status != TargetNotMeasured {
		t.Errorf("no Raft CPU figure: %s, want not measured", tr.Status)
	}
}
