package cli

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/bench"
	"github.com/metaplane/metaplane/internal/testutil"
)

func runBenchCmd(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(ctx, &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}, append([]string{"bench"}, args...))
	return code, out.String(), errb.String()
}

// TestBenchQuickMemory runs `metaplane bench --quick` end to end over the
// memory plugin (a real plugin process) and checks the table, the JSON
// report and the chart it writes.
func TestBenchQuickMemory(t *testing.T) {
	plugin := testutil.Binary(t, "metaplane-backend-memory")
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	svgPath := filepath.Join(dir, "out.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, errOut := runBenchCmd(t, ctx, "--backends", "memory", "--quick",
		"--bin-dir", filepath.Dir(plugin), "--json", jsonPath, "--svg", svgPath)
	if code != ExitOK {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"store get (through the plugin)", "write throughput, 64 clients", "peak resident memory", "targets:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Progress goes to stderr without --verbose: the systems started and
	// every row of every round.
	for _, want := range []string{"starting memory ...", "round 1/3 (", "round 3/3, row 1/", ": store.write-64\n"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress on stderr lacks %q:\n%s", want, errOut)
		}
	}

	rep, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Machine.Cores < 1 || rep.Machine.GoVersion == "" || rep.Machine.Date == "" {
		t.Errorf("machine not described: %+v", rep.Machine)
	}
	measured := map[string]bench.Result{}
	for _, row := range rep.Rows {
		if strings.HasPrefix(row.ID, "migrate.") {
			// The migration rows move a ZooKeeper tree: with memory alone
			// they say so instead of measuring.
			if len(row.Results) != 1 || row.Results[0].Available() || !strings.Contains(row.Results[0].Unavailable, "zookeeper") {
				t.Errorf("row %s: results %+v, want one saying it needs zookeeper", row.ID, row.Results)
			}
			continue
		}
		if len(row.Results) != 1 || row.Results[0].Backend != bench.Memory {
			t.Fatalf("row %s: results %+v, want one for memory", row.ID, row.Results)
		}
		measured[row.ID] = row.Results[0]
	}
	// The store rows run on the memory plugin and must measure something.
	for _, id := range []string{"store.get", "store.write-serial", "store.write-16", "store.write-64", "ids.block-1", "ids.block-1000"} {
		res, ok := measured[id]
		if !ok || !res.Available() {
			t.Errorf("row %s not measured on memory: %+v", id, res)
			continue
		}
		if res.Errors > 0 {
			t.Errorf("row %s: %d errors, first %s", id, res.Errors, res.FirstError)
		}
		if res.P50Micros <= 0 || res.P99Micros < res.P50Micros || res.OpsPerSec <= 0 {
			t.Errorf("row %s: implausible figures %+v", id, res)
		}
	}
	// The election row cannot run on a one-process store and says why.
	if res := measured["election.sigkill"]; res.Available() || res.Unavailable == "" {
		t.Errorf("election on memory: %+v, want not available with a reason", res)
	}
	// Peak RSS of the plugin process under the throughput rows.
	found := false
	for _, pm := range rep.Memory {
		if pm.Backend == bench.Memory && pm.PeakRSSBytes > 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("no peak RSS for the memory plugin in %+v", rep.Memory)
	}

	// The chart, and the chart redrawn from the JSON alone.
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, svg)
	svg2Path := filepath.Join(dir, "again.svg")
	if code, out, errOut := runBenchCmd(t, ctx, "--chart-from", jsonPath, "--svg", svg2Path); code != ExitOK {
		t.Fatalf("--chart-from exited %d: %s%s", code, out, errOut)
	}
	code, md, errOut := runBenchCmd(t, ctx, "--chart-from", jsonPath, "--markdown")
	if code != ExitOK || !strings.Contains(md, "| store get (through the plugin) |") {
		t.Errorf("--chart-from --markdown: exit %d, stdout %q, stderr %q", code, md, errOut)
	}
	svg2, err := os.ReadFile(svg2Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(svg, svg2) {
		t.Errorf("chart from the JSON differs from the chart of the run")
	}
}

// TestBenchQuiet runs one row with --quiet: the table on stdout, nothing
// on stderr.
func TestBenchQuiet(t *testing.T) {
	plugin := testutil.Binary(t, "metaplane-backend-memory")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, errOut := runBenchCmd(t, ctx, "--backends", "memory", "--quick", "--rows", "store.get", "--quiet",
		"--bin-dir", filepath.Dir(plugin))
	if code != ExitOK {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "store get (through the plugin)") {
		t.Errorf("table lacks the row:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("--quiet wrote to stderr:\n%s", errOut)
	}
}

func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("SVG not well-formed: %v", err)
		}
	}
}

func TestBenchUsageErrors(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--voters", "2"}, "--voters 2: must be 1 or 3"},
		{[]string{"--elections", "-1"}, "--elections -1: must be 1 to 1000"},
		{[]string{"--elections", "1001"}, "--elections 1001: must be 1 to 1000"},
		{[]string{"--log-level", "verbose"}, `--log-level "verbose": must be debug, info, warn or error`},
		{[]string{"--quiet", "--verbose"}, "--quiet and --verbose: choose one"},
		{[]string{"--backends", "etcd"}, `unknown backend "etcd"`},
		{[]string{"--backends", ","}, "no backend named"},
		{[]string{"--chart-from", "x.json"}, "--chart-from needs --svg FILE or --markdown"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := runBenchCmd(t, ctx, tt.args...)
		if code != ExitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errOut, ExitUsage, tt.want)
		}
	}
	code, _, errOut := runBenchCmd(t, ctx, "--chart-from", filepath.Join(t.TempDir(), "missing.json"), "--svg", filepath.Join(t.TempDir(), "x.svg"))
	if code != ExitFailure || !strings.Contains(errOut, "missing.json") {
		t.Errorf("--chart-from a missing file: exit %d, stderr %q; want exit 1 naming the file", code, errOut)
	}
}
