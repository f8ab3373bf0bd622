package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/metaplane/metaplane/bench"
)

func init() {
	Register(Command{
		Name:    "bench",
		Summary: "measure ZooKeeper against Raft side by side (the seeds' table)",
		Run:     runBench,
	})
}

const benchUsage = `usage: metaplane bench [--backends zookeeper,raft] [--voters 1|3] [--quick]
                       [--json FILE] [--svg FILE] [--rows PREFIX,...] [--bin-dir DIR]
       metaplane bench --chart-from FILE.json [--svg FILE.svg] [--markdown]

Starts what it measures (a ZooKeeper server on loopback, Raft plugin
processes with data in a temporary directory, coordinators), runs the rows
of the seeds' table on every backend interleaved, and prints p50, p99,
ops/s per row and backend, the ZooKeeper/Raft ratio (above 1: Raft better),
peak memory and the targets. --quick finishes in under two minutes.
--chart-from draws the SVG chart of an earlier --json report without
measuring anything.

flags:
`

func runBench(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	backends := fs.String("backends", "zookeeper,raft", "comma-separated backends to measure: zookeeper, raft, memory")
	voters := fs.Int("voters", 1, "Raft voters and ZooKeeper servers of the measured quorum: 1 or 3 (the election row always uses 3)")
	quick := fs.Bool("quick", false, "fewer rounds and smaller batches: under two minutes")
	jsonOut := fs.String("json", "", "write the report as JSON to `FILE`")
	svgOut := fs.String("svg", "", "write the chart as SVG to `FILE`")
	chartFrom := fs.String("chart-from", "", "draw the chart of the JSON report in `FILE` (with --svg, and/or print it with --markdown) and measure nothing")
	markdown := fs.Bool("markdown", false, "print the table as Markdown instead of plain text")
	rows := fs.String("rows", "", "run only the rows whose id starts with one of these comma-separated `PREFIXES` (e.g. store.,ids.)")
	binDir := fs.String("bin-dir", "", "directory holding the metaplane-backend-<name> plugins (default: beside this binary, then ./bin)")
	verbose := fs.Bool("v", false, "print progress to stderr")
	if code, ok := parseFlags(env, fs, "metaplane bench", benchUsage, args); !ok {
		return code
	}

	if *chartFrom != "" {
		if *svgOut == "" && !*markdown {
			fmt.Fprintln(env.Stderr, "metaplane bench: --chart-from needs --svg FILE or --markdown")
			return ExitUsage
		}
		rep, err := bench.ReadJSONFile(*chartFrom)
		if err != nil {
			fmt.Fprintf(env.Stderr, "metaplane bench: --chart-from: %v\n", err)
			return ExitFailure
		}
		if *markdown {
			if err := rep.WriteMarkdown(env.Stdout); err != nil {
				fmt.Fprintf(env.Stderr, "metaplane bench: %v\n", err)
				return ExitFailure
			}
		}
		if *svgOut != "" {
			if err := rep.WriteSVGFile(*svgOut); err != nil {
				fmt.Fprintf(env.Stderr, "metaplane bench: --svg: %v\n", err)
				return ExitFailure
			}
			fmt.Fprintf(env.Stderr, "wrote %s from %s\n", *svgOut, *chartFrom)
		}
		return ExitOK
	}

	if *voters != 1 && *voters != 3 {
		fmt.Fprintf(env.Stderr, "metaplane bench: --voters %d: must be 1 or 3\n", *voters)
		return ExitUsage
	}
	var list []string
	for _, b := range strings.Split(*backends, ",") {
		if b = strings.TrimSpace(b); b != "" {
			list = append(list, b)
		}
	}
	if len(list) == 0 {
		fmt.Fprintln(env.Stderr, "metaplane bench: --backends: no backend named")
		return ExitUsage
	}
	for _, b := range list {
		if !bench.KnownBackend(b) {
			fmt.Fprintf(env.Stderr, "metaplane bench: --backends: unknown backend %q (known: %s)\n", b, strings.Join(bench.KnownBackends(), ", "))
			return ExitUsage
		}
	}
	opts := bench.Options{Backends: list, Voters: *voters, Quick: *quick, BinDir: *binDir}
	if *rows != "" {
		opts.Rows = strings.Split(*rows, ",")
	}
	if *verbose {
		opts.Log = env.Stderr
	}
	rep, err := bench.Run(ctx, opts)
	if rep == nil {
		fmt.Fprintf(env.Stderr, "metaplane bench: %v\n", err)
		return ExitFailure
	}
	code := ExitOK
	if err != nil {
		fmt.Fprintf(env.Stderr, "metaplane bench: interrupted: %v (report so far follows)\n", err)
		code = ExitFailure
	}
	write := rep.WriteTable
	if *markdown {
		write = rep.WriteMarkdown
	}
	if werr := write(env.Stdout); werr != nil {
		fmt.Fprintf(env.Stderr, "metaplane bench: %v\n", werr)
		code = ExitFailure
	}
	if *jsonOut != "" {
		if werr := rep.WriteJSONFile(*jsonOut); werr != nil {
			fmt.Fprintf(env.Stderr, "metaplane bench: --json: %v\n", werr)
			code = ExitFailure
		}
	}
	if *svgOut != "" {
		if werr := rep.WriteSVGFile(*svgOut); werr != nil {
			fmt.Fprintf(env.Stderr, "metaplane bench: --svg: %v\n", werr)
			code = ExitFailure
		}
	}
	return code
}
