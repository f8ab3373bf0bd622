package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

func init() { cli.Register(newConformanceCmd) }

const conformanceLong = `Runs the backend conformance suite against the backend plugin binary at
PATH: every property on a fresh store (a fresh plugin process, started with
the configuration), one line each ("PASS name (12ms)", "FAIL name: message",
"SKIP name: reason"), then a summary. The configuration is loaded as the
daemon loads it and handed to the plugin, so -D points a plugin at its
server, e.g. -D zookeeper.address=127.0.0.1:2181; a third-party plugin's own
keys (under its selector key's first segment, e.g. etcd.*) are accepted.
On a shared server, --unique KEY gives every store a fresh value of a
path-like key: --unique zookeeper.path.root runs each property under its
own chroot.

  metaplane conformance --list [--run REGEX] [--json]

lists the properties without running anything. A property still running
after --property-timeout (default 60s) fails, naming where it was
waiting, its plugin is stopped, and the run goes on; --timeout-scale F
multiplies that deadline and every wait inside the properties, for a slow
backend. SIGINT or SIGTERM
stops the run: the running property fails as interrupted, its plugin is
stopped and the summary so far is printed. Exit status: 0 every property
passed or was skipped, 1 a property failed, the run was interrupted or the
plugin could not be run, 2 usage error (including a bad configuration).
docs/writing-a-backend.md explains the suite.`

// conformanceFlags are the flags of `metaplane conformance`.
type conformanceFlags struct {
	path, run             string
	asJSON, verbose, list bool
	timeout               time.Duration
	scale                 float64
	unique                []string
	config                *cli.ConfigFlags
}

func newConformanceCmd() *cobra.Command {
	var cf conformanceFlags
	cmd := &cobra.Command{
		Use:   "conformance --plugin PATH",
		Short: cli.HelperShort("", "conformance"),
		Long:  conformanceLong,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cf.list {
				return listProperties(cmd.OutOrStdout(), cf.run, cf.asJSON)
			}
			return runConformance(cmd, cf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cf.path, "plugin", "", "the backend plugin binary `PATH` (required)")
	f.StringVar(&cf.run, "run", "", "run only the properties whose name matches `REGEX`")
	f.BoolVar(&cf.asJSON, "json", false, "print the results as one JSON object")
	f.DurationVar(&cf.timeout, "property-timeout", conformance.PropertyTimeout, "bound each property to `D`: it fails then, naming where it waited, and the run goes on")
	// --timeout is the flag's first name, kept for existing scripts.
	f.DurationVar(&cf.timeout, "timeout", conformance.PropertyTimeout, "the old name of --property-timeout")
	_ = f.MarkHidden("timeout")
	f.Float64Var(&cf.scale, "timeout-scale", 1, "multiply the property deadline and every wait inside the properties (20s) by `F` (at least 1), for a slow backend")
	f.BoolVarP(&cf.verbose, "verbose", "v", false, "print every property's log, and the plugin's warnings, on stderr")
	f.Func("unique", "give every store its own value of the path-like configuration `KEY` (its value plus /metaplane-conformance-<run>-<n>), e.g. zookeeper.path.root on a shared server (repeatable)", func(s string) error {
		if s == "" || strings.ContainsAny(s, "= ") {
			return fmt.Errorf("--unique needs a configuration KEY")
		}
		cf.unique = append(cf.unique, s)
		return nil
	})
	f.BoolVar(&cf.list, "list", false, "list the properties (name, what it needs, what it checks) and exit; no --plugin needed")
	cf.config = cli.AddConfigFlags(f)
	cmd.MarkFlagFilename("plugin")
	return cmd
}

// conformanceReport is the --json output.
type conformanceReport struct {
	Plugin  string `json:"plugin"`
	Backend string `json:"backend"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	// Interrupted: a signal ended the run; Results are those so far.
	Interrupted bool                 `json:"interrupted,omitempty"`
	Results     []conformance.Result `json:"results"`
}

func runConformance(cmd *cobra.Command, cf conformanceFlags) error {
	if cf.path == "" {
		return cli.UsageError("--plugin PATH is required")
	}
	if st, err := os.Stat(cf.path); err != nil || st.IsDir() {
		if err == nil {
			err = errors.New("is a directory")
		}
		return cli.UsageError("--plugin %s: %v", cf.path, err)
	}
	if cf.timeout <= 0 {
		return cli.UsageError("--property-timeout %v: must be positive", cf.timeout)
	}
	if !(cf.scale >= 1) {
		return cli.UsageError("--timeout-scale %v: must be at least 1", cf.scale)
	}

	ctx := cmd.Context()
	desc, err := plugins.Describe(ctx, cf.path)
	if err != nil {
		return err
	}
	lo := cf.config.LoadOptions()
	if desc.SelectorKey != "" && !isBuiltinBackend(desc.Name) {
		lo.ExtraBackends = []core.BackendDescriptor{desc}
	}
	cfg, err := config.Load(lo)
	if err != nil {
		return cli.UsageError("configuration: %v", err)
	}

	level := slog.LevelError
	if cf.verbose {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	flat := cfg.PluginSettings()
	opts := plugintest.Options{Config: flat, Logger: logger}
	if len(cf.unique) > 0 {
		known := map[string]bool{}
		for _, k := range config.Keys() {
			known[k] = true
		}
		for _, k := range cf.unique {
			if _, extra := flat[k]; !known[k] && !extra {
				return cli.UsageError("--unique %s: not a configuration key (set it with -D to use a plugin's own key)", k)
			}
		}
		run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
		opts.PerStore = func(n int) map[string]string {
			out := map[string]string{}
			for _, k := range cf.unique {
				out[k] = fmt.Sprintf("%s/metaplane-conformance-%s-%d", strings.TrimRight(flat[k], "/"), run, n)
			}
			return out
		}
	}
	h := plugintest.Harness(cf.path, opts)
	h.TimeScale = cf.scale

	out := cmd.OutOrStdout()
	if !cf.asJSON {
		fmt.Fprintf(out, "conformance of %s (backend %q)\n", cf.path, desc.Name)
	}
	// The run ends with ctx (SIGINT, SIGTERM): the running property fails
	// as interrupted, its plugin is stopped, and the summary so far is
	// printed.
	results, err := conformance.RunStandalone(h, conformance.StandaloneOptions{
		Run:     cf.run,
		Timeout: cf.timeout,
		Context: ctx,
		OnResult: func(r conformance.Result) {
			if !cf.asJSON {
				printResult(out, r, cf.verbose)
			}
		},
	})
	interrupted := errors.Is(err, conformance.ErrInterrupted)
	if err != nil && !interrupted {
		return cli.UsageError("%v", err)
	}
	if len(results) == 0 && !interrupted {
		return cli.UsageError("--run %q matches no property", cf.run)
	}
	rep := conformanceReport{Plugin: cf.path, Backend: desc.Name, Interrupted: interrupted, Results: results}
	for _, r := range results {
		switch r.Status {
		case conformance.Passed:
			rep.Passed++
		case conformance.Failed:
			rep.Failed++
		case conformance.Skipped:
			rep.Skipped++
		}
	}
	if cf.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "conformance: %d passed, %d failed, %d skipped\n", rep.Passed, rep.Failed, rep.Skipped)
	}
	if interrupted {
		fmt.Fprintf(cmd.ErrOrStderr(), "conformance: interrupted (%v) after %d properties\n", context.Cause(ctx), len(results))
		return cli.ExitWith(cli.ExitFailure)
	}
	if rep.Failed > 0 {
		return cli.ExitWith(cli.ExitFailure) // the report names every failure
	}
	return nil
}

// propertyInfo is one property in --list --json.
type propertyInfo struct {
	Name        string `json:"name"`
	Needs       string `json:"needs,omitempty"`
	Description string `json:"description"`
}

// listProperties prints the suite's properties (those matching run).
func listProperties(w io.Writer, run string, asJSON bool) error {
	var re *regexp.Regexp
	if run != "" {
		var err error
		if re, err = regexp.Compile(run); err != nil {
			return cli.UsageError("bad --run expression %q: %v", run, err)
		}
	}
	var out []propertyInfo
	for _, p := range conformance.Properties() {
		if re == nil || re.MatchString(p.Name) {
			out = append(out, propertyInfo{Name: p.Name, Needs: p.Needs, Description: p.Description})
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, p := range out {
		needs := ""
		if p.Needs != "" {
			needs = " [needs " + p.Needs + "]"
		}
		fmt.Fprintf(w, "%s%s: %s\n", p.Name, needs, p.Description)
	}
	return nil
}

func isBuiltinBackend(name string) bool {
	for _, d := range config.BuiltinBackends() {
		if d.Name == name {
			return true
		}
	}
	return false
}

// printResult prints one property's line: PASS with its duration, FAIL
// with why its context ended (a deadline, a signal) or else its last
// message (and all of them indented below), SKIP with its reason.
func printResult(w io.Writer, r conformance.Result, verbose bool) {
	d := r.Duration.Round(time.Millisecond)
	switch r.Status {
	case conformance.Passed:
		fmt.Fprintf(w, "PASS %s (%v)\n", r.Name, d)
		if verbose {
			printMessages(w, r.Messages)
		}
	case conformance.Skipped:
		fmt.Fprintf(w, "SKIP %s: %s\n", r.Name, lastMessage(r.Messages, "skipped"))
	default:
		msg := lastMessage(r.Messages, "failed")
		if r.Ended != "" {
			msg = r.Ended // the deadline or the signal, and where it waited
		}
		fmt.Fprintf(w, "FAIL %s: %s (%v)\n", r.Name, msg, d)
		printMessages(w, r.Messages)
	}
}

func lastMessage(ms []string, none string) string {
	if len(ms) == 0 {
		return none
	}
	return firstLineOf(ms[len(ms)-1])
}

func printMessages(w io.Writer, ms []string) {
	if len(ms) <= 1 {
		return
	}
	for _, m := range ms {
		for _, line := range strings.Split(m, "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
