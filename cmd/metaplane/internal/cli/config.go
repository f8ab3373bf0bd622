package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/metaplane/metaplane/core/config"
)

func init() {
	Register(Command{
		Name:    "config",
		Summary: "check a configuration: `config validate` prints the backend it selects, or every problem",
		Run:     runConfig,
	})
}

const configUsage = `usage: metaplane config validate [--config FILE] [-D key=value ...] [--json] [--no-env] [--observer]

Loads the configuration as the daemon would (the defaults, then FILE, then
METAPLANE_* environment variables, then each -D in order), checks every key
and prints the backend it selects and what selected it, with warnings and
notes (the effective Raft timing). Exit status: 0 valid, 1 problems found
(one line each, "key: message"), 2 usage error. docs/configuration.md
lists every key.

flags:
`

func runConfig(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		io.WriteString(env.Stderr, configUsage)
		return ExitUsage
	}
	switch args[0] {
	case "validate":
		return runConfigValidate(env, args[1:])
	case "help", "-h", "-help", "--help":
		io.WriteString(env.Stdout, configUsage)
		return ExitOK
	default:
		fmt.Fprintf(env.Stderr, "metaplane config: unknown subcommand %q (want validate)\n", args[0])
		return ExitUsage
	}
}

// validateReport is the --json output; its field order is stable.
type validateReport struct {
	Valid      bool             `json:"valid"`
	Backend    string           `json:"backend"`
	SelectedBy string           `json:"selected_by"`
	Warnings   []string         `json:"warnings"`
	Notes      []string         `json:"notes"`
	Problems   []config.Problem `json:"problems"`
}

func runConfigValidate(env *Env, args []string) int {
	fs := flag.NewFlagSet("config validate", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	cf := AddConfigFlags(fs)
	asJSON := fs.Bool("json", false, "print the result as a JSON object")
	observer := fs.Bool("observer", false, "check as a tablet server (observer) would: skip the rules that only concern a Raft voter")
	if code, ok := parseFlags(env, fs, "metaplane config validate", configUsage, args); !ok {
		return code
	}
	opts := cf.LoadOptions()
	opts.Observer = *observer
	rep := validate(opts)
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(env.Stderr, "metaplane config validate: %v\n", err)
			return ExitFailure
		}
	} else {
		printReport(env.Stdout, rep)
	}
	if !rep.Valid {
		return ExitFailure
	}
	return ExitOK
}

// validate loads the configuration and gathers what the verb prints.
func validate(opts config.LoadOptions) validateReport {
	rep := validateReport{Warnings: []string{}, Notes: []string{}, Problems: []config.Problem{}}
	cfg, err := config.Load(opts)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			rep.Problems = ce.Problems
		} else {
			rep.Problems = []config.Problem{{Message: err.Error()}}
		}
		return rep
	}
	rep.Valid = true
	rep.Backend = cfg.Selected.Backend
	rep.SelectedBy = cfg.Selected.SelectedBy
	rep.Warnings = append(rep.Warnings, cfg.Selected.Warnings...)
	if rep.Backend == config.BackendRaft {
		rep.Notes = append(rep.Notes, raftNotes(cfg)...)
	}
	return rep
}

func raftNotes(cfg *config.Config) []string {
	var notes []string
	if len(cfg.Coordinator.Raft.Voters) == 0 {
		v := cfg.RaftVoters()[0]
		notes = append(notes, fmt.Sprintf("no coordinator.raft.voters: a single-voter embedded quorum, voter %s", v))
	} else {
		notes = append(notes, fmt.Sprintf("voters: %d, this node %d", len(cfg.RaftVoters()), cfg.RaftNodeID()))
	}
	if t, err := cfg.RaftTiming(); err == nil {
		notes = append(notes, t.Summary())
		if t.Note != "" {
			notes = append(notes, t.Note)
		}
	}
	return notes
}

func printReport(w io.Writer, rep validateReport) {
	if !rep.Valid {
		for _, p := range rep.Problems {
			fmt.Fprintln(w, p.String())
		}
		return
	}
	fmt.Fprintf(w, "valid: backend %s, selected by %s\n", rep.Backend, rep.SelectedBy)
	for _, s := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
	for _, s := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", s)
	}
}
