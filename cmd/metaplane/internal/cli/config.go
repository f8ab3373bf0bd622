package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
)

func init() { Register(newConfigCmd) }

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config <command>",
		Short: "check a configuration: `config validate` prints the backend it selects, or every problem",
		Long: `Checks a configuration as the daemon would load it, without starting
anything. The configuration flags (--config, -D, --no-env) may come before
or after the command. docs/configuration.md lists every key.`,
	}
	markGroup(cmd, "command")
	cf := AddConfigFlags(cmd.PersistentFlags())
	cmd.AddCommand(newConfigValidateCmd(cf))
	return cmd
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

func newConfigValidateCmd(cf *ConfigFlags) *cobra.Command {
	var asJSON, observer bool
	var pluginPath string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "load the configuration, print the backend it selects and why, or every problem",
		Long: `Loads the configuration as the daemon would (the defaults, then FILE, then
METAPLANE_* environment variables, then each -D in order), checks every key
and prints the backend it selects and what selected it, with warnings and
notes (the effective Raft timing). With metadata.backend.plugin.sha256
set, it checks the digest against the plugin binary the daemon would run.
Exit status: 0 valid, 1 problems found (one line each, "key: message"),
2 usage error. docs/configuration.md lists every key.`,
		Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := cf.LoadOptions()
			opts.Observer = observer
			rep := validate(opts, pluginPath)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printReport(cmd.OutOrStdout(), rep)
			}
			if !rep.Valid {
				return ExitWith(ExitFailure) // the report names every problem
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as a JSON object")
	cmd.Flags().BoolVar(&observer, "observer", false, "check as a tablet server (observer) would: skip the rules that only concern a Raft voter")
	cmd.Flags().StringVar(&pluginPath, "plugin", "", "check metadata.backend.plugin.sha256 against the plugin binary at `PATH` (the daemon's --plugin) instead of metaplane-backend-<backend>")
	return cmd
}

// validate loads the configuration and gathers what the verb prints;
// pluginPath is the plugin binary the daemon would be told to run
// (--plugin), empty for the selected backend's.
func validate(opts config.LoadOptions, pluginPath string) validateReport {
	rep := validateReport{Warnings: []string{}, Notes: []string{}, Problems: []config.Problem{}}
	cfg, err := config.Load(opts)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				p.Message = sentinelWording().Replace(p.Message)
				rep.Problems = append(rep.Problems, p)
			}
		} else {
			rep.Problems = []config.Problem{{Message: operatorMessage(err)}}
		}
		return rep
	}
	if p := checkPluginSHA256(cfg, pluginPath, opts.Observer); p != nil {
		rep.Problems = append(rep.Problems, *p)
		return rep
	}
	rep.Valid = true
	rep.Backend = cfg.Selected.Backend
	rep.SelectedBy = cfg.Selected.SelectedBy
	rep.Warnings = append(rep.Warnings, cfg.Selected.Warnings...)
	rep.Notes = append(rep.Notes, cfg.BackendNotes()...)
	if cl, err := cfg.ClientListener(); err == nil && (len(cfg.BindListeners) > 1 || !strings.EqualFold(cl.Bind.Name, config.DefaultClientListenerName)) {
		// The choice matters: say which listener serves clients.
		rep.Notes = append(rep.Notes, fmt.Sprintf("client listener %s (%s); %d other listener(s) not bound", cl.Bind, cl.Reason, len(cl.Unbound)))
	}
	if g := cfg.Coordinator.Gossip; g.Enabled {
		enc := "unencrypted (no coordinator.gossip.encryption-key)"
		if g.EncryptionKey != "" || g.EncryptionKeyFile != "" {
			enc = "encrypted"
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("gossip: on, port %d tcp+udp, %s; it expands coordinator.seed.nodes for clients and never changes the voter set", g.Port, enc))
		if len(cfg.Coordinator.SeedNodes) == 0 {
			rep.Notes = append(rep.Notes, "gossip: no coordinator.seed.nodes to join through: this coordinator only waits to be joined")
		}
	}
	return rep
}

// checkPluginSHA256 checks metadata.backend.plugin.sha256, when set,
// against the plugin binary the daemon would run (pluginPath, else the
// selected backend's in metadata.backend.plugin.dir), as the coordinator
// does before it starts the plugin; nil when it matches or is not set, or
// when an observer runs no plugin (a tablet server of a backend whose
// tablet servers go through the coordinators).
func checkPluginSHA256(cfg *config.Config, pluginPath string, observer bool) *config.Problem {
	want := strings.ToLower(strings.TrimSpace(cfg.Metadata.Backend.PluginSHA256))
	if want == "" || (observer && cfg.Selected.Descriptor.TabletServers == core.TabletServersThroughCoordinator) {
		return nil
	}
	path, err := plugins.LaunchOptions{Path: pluginPath, Name: cfg.Selected.Backend, Dir: cfg.Metadata.Backend.PluginDir}.ResolvePath()
	if err != nil {
		return &config.Problem{Key: plugins.KeyPluginSHA256, Message: "cannot find the plugin binary to check: " + operatorMessage(err)}
	}
	got, err := plugins.FileSHA256(path)
	switch {
	case err != nil:
		return &config.Problem{Key: plugins.KeyPluginSHA256, Message: fmt.Sprintf("cannot check the plugin binary %s: %v (the coordinator would not start it)", path, err)}
	case got != want:
		return &config.Problem{Key: plugins.KeyPluginSHA256, Message: fmt.Sprintf("the plugin binary %s has SHA-256 %s, not %s: the coordinator would refuse to start it (set the key to the binary's digest, `sha256sum %s`, or install the binary it names)", path, got, want, path)}
	}
	return nil
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
