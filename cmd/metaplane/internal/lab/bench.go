package lab

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/bench"
	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
)

func init() { cli.Register(newBenchCmd) }

const benchLong = `Starts what it measures (a ZooKeeper server on loopback, Raft plugin
processes with data in a temporary directory, coordinators), runs the rows
of the seeds' table on every backend interleaved, and prints p50, p99,
ops/s per row and backend, the ZooKeeper/Raft ratio (above 1: Raft better),
peak memory, the CPU per write of the throughput rows and the targets.
--quick finishes in under two minutes. Progress (each system started,
each row of each round) goes to stderr; --quiet drops it, --verbose adds
the plugins' and coordinators' own records.

  metaplane bench --chart-from FILE.json [--svg FILE.svg] [--markdown]

draws the SVG chart of an earlier --json report without measuring anything.
Exit status: 0 the run completed (the targets are reported, not enforced),
1 it failed or was interrupted (the report so far is still printed), 2
usage error. docs/benchmarks.md explains the rows.`

// benchFlags are the flags of `metaplane bench`.
type benchFlags struct {
	backends, jsonOut, svgOut, chartFrom, rows, binDir  string
	voters, migrateNodes, scaleNodes, elections         int
	quick, markdown, verbose, quiet, security, noSettle bool
	logLevel, heapProfiles                              string
}

func newBenchCmd() *cobra.Command {
	var bf benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: cli.HelperShort("", "bench"),
		Long:  benchLong,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bf.chartFrom != "" {
				return benchChart(cmd, bf)
			}
			return benchRun(cmd, bf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&bf.backends, "backends", "zookeeper,raft", "comma-separated backends to measure: zookeeper, raft, memory")
	f.IntVar(&bf.voters, "voters", 1, "Raft voters and ZooKeeper servers of the measured quorum: 1 or 3 (the election rows use 3 and 5 members of their own)")
	f.IntVar(&bf.elections, "elections", 0, fmt.Sprintf("leader kills per election row and backend, 1 to %d (default %d; %d with --quick)", bench.MaxElections, bench.DefaultElections, bench.DefaultQuickElections))
	f.BoolVar(&bf.quick, "quick", false, "fewer rounds and smaller batches: under two minutes")
	f.StringVar(&bf.jsonOut, "json", "", "write the report as JSON to `FILE`")
	f.StringVar(&bf.svgOut, "svg", "", "write the chart as SVG to `FILE`")
	f.StringVar(&bf.chartFrom, "chart-from", "", "draw the chart of the JSON report in `FILE` (with --svg, and/or print it with --markdown) and measure nothing")
	f.BoolVar(&bf.markdown, "markdown", false, "print the table as Markdown instead of plain text")
	f.StringVar(&bf.rows, "rows", "", "run only the rows whose id starts with one of these comma-separated `PREFIXES` (e.g. store.,ids.)")
	f.StringVar(&bf.binDir, "bin-dir", "", "directory holding the metaplane-backend-<name> plugins (default: beside this binary, then ./bin)")
	f.IntVar(&bf.migrateNodes, "migrate-nodes", 0, fmt.Sprintf("persistent nodes of the migrate. rows' tree, %d to %d (default 100000; 10000 with --quick)", bench.MinMigrateNodes, bench.MaxMigrateNodes))
	f.IntVar(&bf.scaleNodes, "scale-nodes", 0, fmt.Sprintf("nodes of the scale. rows' tree, %d to %d (default 1000000; 100000 with --quick); they also measure a tree a tenth that size", bench.MinScaleNodes, bench.MaxScaleNodes))
	f.StringVar(&bf.heapProfiles, "heap-profiles", "", "write each scale. row coordinator's heap profile, once its memory settled, into `DIR` (coordinator-heap-<backend>-<nodes>.pb.gz; read with go tool pprof)")
	f.BoolVar(&bf.security, "security", false, "also measure admin rows over mutual TLS and over mutual TLS with the authorizer on (the same leader, certificates generated for the run), as ratios to plaintext")
	f.BoolVar(&bf.noSettle, "no-settle", false, "start every batch at once, without first waiting (at most 15 s) for the other backends' processes to go quiet after their own batch")
	f.BoolVarP(&bf.verbose, "verbose", "v", false, "also print the plugins' and coordinators' records (see --log-level) and the live migration's rounds to stderr")
	f.BoolVarP(&bf.quiet, "quiet", "q", false, "print no progress to stderr (errors still)")
	f.StringVar(&bf.logLevel, "log-level", "warn", "with --verbose, the lowest level of the plugins' and coordinators' records printed with the progress: debug (with Dragonboat's election and connection records), info, warn, error")
	for _, name := range []string{"json", "svg", "chart-from"} {
		cmd.MarkFlagFilename(name)
	}
	cmd.MarkFlagDirname("bin-dir")
	cmd.MarkFlagDirname("heap-profiles")
	return cmd
}

// benchChart is `bench --chart-from`: it draws an earlier report.
func benchChart(cmd *cobra.Command, bf benchFlags) error {
	if bf.svgOut == "" && !bf.markdown {
		return cli.UsageError("--chart-from needs --svg FILE or --markdown")
	}
	rep, err := bench.ReadJSONFile(bf.chartFrom)
	if err != nil {
		return fmt.Errorf("--chart-from: %w", err)
	}
	if bf.markdown {
		if err := rep.WriteMarkdown(cmd.OutOrStdout()); err != nil {
			return err
		}
	}
	if bf.svgOut != "" {
		if err := rep.WriteSVGFile(bf.svgOut); err != nil {
			return fmt.Errorf("--svg: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s from %s\n", bf.svgOut, bf.chartFrom)
	}
	return nil
}

// benchRun measures and writes the report: the table on stdout, and the
// --json and --svg files. An interrupted run still writes the report so
// far and fails.
func benchRun(cmd *cobra.Command, bf benchFlags) error {
	if bf.voters != 1 && bf.voters != 3 {
		return cli.UsageError("--voters %d: must be 1 or 3", bf.voters)
	}
	if bf.migrateNodes != 0 && (bf.migrateNodes < bench.MinMigrateNodes || bf.migrateNodes > bench.MaxMigrateNodes) {
		return cli.UsageError("--migrate-nodes %d: must be %d to %d", bf.migrateNodes, bench.MinMigrateNodes, bench.MaxMigrateNodes)
	}
	if bf.scaleNodes != 0 && (bf.scaleNodes < bench.MinScaleNodes || bf.scaleNodes > bench.MaxScaleNodes) {
		return cli.UsageError("--scale-nodes %d: must be %d to %d", bf.scaleNodes, bench.MinScaleNodes, bench.MaxScaleNodes)
	}
	if bf.elections < 0 || bf.elections > bench.MaxElections {
		return cli.UsageError("--elections %d: must be 1 to %d", bf.elections, bench.MaxElections)
	}
	list := cli.SplitList(bf.backends)
	if len(list) == 0 {
		return cli.UsageError("--backends: no backend named")
	}
	for _, b := range list {
		if !bench.KnownBackend(b) {
			return cli.UsageError("--backends: unknown backend %q (known: %s)", b, strings.Join(bench.KnownBackends(), ", "))
		}
	}
	opts := bench.Options{Backends: list, Voters: bf.voters, Quick: bf.quick, BinDir: bf.binDir, MigrateNodes: bf.migrateNodes, ScaleNodes: bf.scaleNodes, HeapProfiles: bf.heapProfiles, Security: bf.security, Elections: bf.elections, NoSettle: bf.noSettle}
	switch bf.logLevel {
	case "debug", "info", "warn", "error":
		opts.LogLevel = bf.logLevel
	default:
		return cli.UsageError("--log-level %q: must be debug, info, warn or error", bf.logLevel)
	}
	if bf.rows != "" {
		opts.Rows = strings.Split(bf.rows, ",")
	}
	if bf.quiet && bf.verbose {
		return cli.UsageError("--quiet and --verbose: choose one")
	}
	if !bf.quiet {
		opts.Progress = cmd.ErrOrStderr()
	}
	if bf.verbose {
		opts.Log = cmd.ErrOrStderr()
	}
	rep, err := bench.Run(cmd.Context(), opts)
	if rep == nil {
		return err
	}
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("interrupted: %w (the report so far is on stdout)", err))
	}
	write := rep.WriteTable
	if bf.markdown {
		write = rep.WriteMarkdown
	}
	if werr := write(cmd.OutOrStdout()); werr != nil {
		errs = append(errs, werr)
	}
	if bf.jsonOut != "" {
		if werr := rep.WriteJSONFile(bf.jsonOut); werr != nil {
			errs = append(errs, fmt.Errorf("--json: %w", werr))
		}
	}
	if bf.svgOut != "" {
		if werr := rep.WriteSVGFile(bf.svgOut); werr != nil {
			errs = append(errs, fmt.Errorf("--svg: %w", werr))
		}
	}
	return errors.Join(errs...)
}
