package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/core/config"
	"github.com/metaplane/metaplane/plugins"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

func init() {
	Register(Command{
		Name:    "conformance",
		Summary: "run the backend conformance suite against a plugin binary",
		Run:     runConformance,
	})
}

const conformanceUsage = `usage: metaplane conformance --plugin PATH [--run REGEX] [--json] [--timeout D]
                             [--unique KEY ...] [--config FILE] [-D key=value ...] [--no-env]
       metaplane conformance --list [--run REGEX] [--json]

Runs the backend conformance suite against the backend plugin binary at
PATH: every property on a fresh store (a fresh plugin process, started with
the configuration), one line each ("PASS name (12ms)", "FAIL name: message",
"SKIP name: reason"), then a summary. The configuration is loaded as the
daemon loads it and handed to the plugin, so -D points a plugin at its
server, e.g. -D zookeeper.address=127.0.0.1:2181; a third-party plugin's own
keys (under its selector key's first segment, e.g. etcd.*) are accepted.
On a shared server, --unique KEY gives every store a fresh value of a
path-like key: --unique zookeeper.path.root runs each property under its
own chroot. Exit status: 0 every property passed or was skipped, 1 a
property failed or the plugin could not be run, 2 usage error (including a
bad configuration).
docs/writing-a-backend.md explains the suite.

flags:
`

// conformanceReport is the --json output.
type conformanceReport struct {
	Plugin  string               `json:"plugin"`
	Backend string               `json:"backend"`
	Passed  int                  `json:"passed"`
	Failed  int                  `json:"failed"`
	Skipped int                  `json:"skipped"`
	Results []conformance.Result `json:"results"`
}

func runConformance(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	path := fs.String("plugin", "", "the backend plugin binary `PATH` (required)")
	run := fs.String("run", "", "run only the properties whose name matches `REGEX`")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	timeout := fs.Duration("timeout", conformance.PropertyTimeout, "bound each property to `D`")
	verbose := fs.Bool("v", false, "print every property's log, and the plugin's warnings, on stderr")
	var unique []string
	fs.Func("unique", "give every store its own value of the path-like configuration `KEY` (its value plus /metaplane-conformance-<run>-<n>), e.g. zookeeper.path.root on a shared server (repeatable)", func(s string) error {
		if s == "" || strings.ContainsAny(s, "= ") {
			return fmt.Errorf("--unique needs a configuration KEY")
		}
		unique = append(unique, s)
		return nil
	})
	list := fs.Bool("list", false, "list the properties (name, what it needs, what it checks) and exit; no --plugin needed")
	cf := AddConfigFlags(fs)
	if code, ok := parseFlags(env, fs, "metaplane conformance", conformanceUsage, args); !ok {
		return code
	}
	if *list {
		return listProperties(env, *run, *asJSON)
	}
	if *path == "" {
		fmt.Fprintln(env.Stderr, "metaplane conformance: --plugin PATH is required")
		fs.Usage()
		return ExitUsage
	}
	if st, err := os.Stat(*path); err != nil || st.IsDir() {
		if err == nil {
			err = errors.New("is a directory")
		}
		fmt.Fprintf(env.Stderr, "metaplane conformance: --plugin %s: %v\n", *path, err)
		return ExitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(env.Stderr, "metaplane conformance: --timeout %v: must be positive\n", *timeout)
		return ExitUsage
	}

	desc, err := plugins.Describe(ctx, *path)
	if err != nil {
		fmt.Fprintf(env.Stderr, "metaplane conformance: %v\n", err)
		return ExitFailure
	}
	lo := cf.LoadOptions()
	if desc.SelectorKey != "" && !isBuiltinBackend(desc.Name) {
		lo.ExtraBackends = []core.BackendDescriptor{desc}
	}
	cfg, err := config.Load(lo)
	if err != nil {
		fmt.Fprintf(env.Stderr, "metaplane conformance: configuration: %v\n", err)
		return ExitUsage
	}

	level := slog.LevelError
	if *verbose {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	flat := cfg.Flatten()
	opts := plugintest.Options{Config: flat, Logger: logger}
	if len(unique) > 0 {
		known := map[string]bool{}
		for _, k := range config.Keys() {
			known[k] = true
		}
		for _, k := range unique {
			if _, extra := flat[k]; !known[k] && !extra {
				fmt.Fprintf(env.Stderr, "metaplane conformance: --unique %s: not a configuration key (set it with -D to use a plugin's own key)\n", k)
				return ExitUsage
			}
		}
		run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
		opts.PerStore = func(n int) map[string]string {
			out := map[string]string{}
			for _, k := range unique {
				out[k] = fmt.Sprintf("%s/metaplane-conformance-%s-%d", strings.TrimRight(flat[k], "/"), run, n)
			}
			return out
		}
	}
	h := plugintest.Harness(*path, opts)

	out := env.Stdout
	if !*asJSON {
		fmt.Fprintf(out, "conformance of %s (backend %q)\n", *path, desc.Name)
	}
	results, err := conformance.RunStandalone(h, conformance.StandaloneOptions{
		Run:     *run,
		Timeout: *timeout,
		OnResult: func(r conformance.Result) {
			if !*asJSON {
				printResult(out, r, *verbose)
			}
		},
	})
	if err != nil {
		fmt.Fprintf(env.Stderr, "metaplane conformance: %v\n", err)
		return ExitUsage
	}
	if len(results) == 0 {
		fmt.Fprintf(env.Stderr, "metaplane conformance: --run %q matches no property\n", *run)
		return ExitUsage
	}
	rep := conformanceReport{Plugin: *path, Backend: desc.Name, Results: results}
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
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(env.Stderr, "metaplane conformance: %v\n", err)
			return ExitFailure
		}
	} else {
		fmt.Fprintf(out, "conformance: %d passed, %d failed, %d skipped\n", rep.Passed, rep.Failed, rep.Skipped)
	}
	if rep.Failed > 0 {
		return ExitFailure
	}
	return ExitOK
}

// propertyInfo is one property in --list --json.
type propertyInfo struct {
	Name        string `json:"name"`
	Needs       string `json:"needs,omitempty"`
	Description string `json:"description"`
}

// listProperties prints the suite's properties (those matching run).
func listProperties(env *Env, run string, asJSON bool) int {
	var re *regexp.Regexp
	if run != "" {
		var err error
		if re, err = regexp.Compile(run); err != nil {
			fmt.Fprintf(env.Stderr, "metaplane conformance: bad --run expression %q: %v\n", run, err)
			return ExitUsage
		}
	}
	var out []propertyInfo
	for _, p := range conformance.Properties() {
		if re == nil || re.MatchString(p.Name) {
			out = append(out, propertyInfo{Name: p.Name, Needs: p.Needs, Description: p.Description})
		}
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return ExitOK
	}
	for _, p := range out {
		needs := ""
		if p.Needs != "" {
			needs = " [needs " + p.Needs + "]"
		}
		fmt.Fprintf(env.Stdout, "%s%s: %s\n", p.Name, needs, p.Description)
	}
	return ExitOK
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
// with its first failure message (and the others indented below), SKIP
// with its reason.
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
		fmt.Fprintf(w, "FAIL %s: %s (%v)\n", r.Name, lastMessage(r.Messages, "failed"), d)
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
