package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
	"github.com/metaplane/metaplane/plugins"
)

func init() {
	Register(newMigrateCmd)
	for _, v := range []struct{ verb, short string }{
		{"export", "export a ZooKeeper cluster's tree to a file (migrate export, source zookeeper)"},
		{"import", "import a tree file into an empty Raft quorum (migrate import, target raft)"},
		{"validate", "validate a Raft quorum against a tree file (migrate validate, target raft)"},
	} {
		v := v
		want := config.BackendRaft
		if v.verb == "export" {
			want = config.BackendZooKeeper
		}
		Register(func() *cobra.Command {
			cmd := newMigrateVerb(v.verb, want)
			cmd.Use = "zk-to-raft-" + cmd.Use
			cmd.Short = v.short
			return cmd
		})
	}
}

const migrateLong = `Moves the metadata tree between backends, any to any, through the
backend contract: export a store's persistent nodes at one revision to a
tree file, import a tree file into an empty store (in bulk, keeping every
node's version, where the target can), and validate a store against a tree
file byte for byte. Ephemeral nodes are not copied: coordinators and tablet
servers recreate their own. The backend each verb works on is the one the
configuration selects (--config, -D, the environment), exactly as for
metaplane coordinator; stop the coordinators of the target before an
import. zk-to-raft-export, zk-to-raft-import and zk-to-raft-validate are
the same verbs, requiring ZooKeeper as the source and Raft as the target.
copy does export, import and validate in one between two configurations
(--from, --to); live copies a store that keeps serving, then fences it
(zk-to-raft-live-migrate is live from ZooKeeper to Raft); unfence removes
a live migration's marker. docs/migration.md gives the whole procedure
and how to roll back.`

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate <command>",
		Short: "export, import, validate, copy or live-migrate the metadata tree between backends",
		Long:  migrateLong,
	}
	markGroup(cmd, "command")
	for _, verb := range []string{"export", "import", "validate"} {
		cmd.AddCommand(newMigrateVerb(verb, ""))
	}
	cmd.AddCommand(newCopyCmd(), newLiveMigrateCmd("", ""), newUnfenceCmd())
	return cmd
}

// newMigrateVerb builds one verb; want, when set, is the backend the
// configuration must select.
func newMigrateVerb(verb, want string) *cobra.Command {
	var (
		out, pluginPath  string
		asJSON, resume   bool
		versions, nover  bool
		overwriteOutFile bool
	)
	cmd := &cobra.Command{}
	cf := AddConfigFlags(cmd.Flags())
	f := cmd.Flags()
	tf := AddToolFlags(f, true)
	f.BoolVar(&asJSON, "json", false, "print the result as a JSON object")
	f.StringVar(&pluginPath, "plugin", "", "run this backend plugin binary instead of metaplane-backend-<backend>")
	switch verb {
	case "export":
		cmd.Use, cmd.Short, cmd.Args = "export --out FILE", "export the selected backend's persistent nodes to a tree file", NoArgs
		f.StringVar(&out, "out", "", "the tree `FILE` to write (required; refused when it exists unless --force)")
		f.BoolVar(&overwriteOutFile, "force", false, "overwrite --out when it exists")
	case "import":
		cmd.Use, cmd.Short, cmd.Args = "import FILE", "import a tree file into the selected backend, which must be empty", ExactArgs(1)
		f.BoolVar(&resume, "resume", false, "complete an import that stopped: skip the nodes present with the same data")
	case "validate":
		cmd.Use, cmd.Short, cmd.Args = "validate FILE", "compare the selected backend with a tree file, node by node", ExactArgs(1)
		f.BoolVar(&versions, "versions", false, "compare versions too (default: when the target keeps them on import)")
		f.BoolVar(&nover, "no-versions", false, "compare data only, even on a target that keeps versions")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if verb == "export" && out == "" {
			return UsageError("give the tree file to write with --out FILE")
		}
		if versions && nover {
			return UsageError("--versions and --no-versions contradict each other")
		}
		var tree *os.File
		if verb != "export" {
			// Check the whole file before starting anything (streaming:
			// the tree is never held in memory).
			var err error
			if tree, err = checkTree(args[0]); err != nil {
				return err
			}
			defer tree.Close()
		} else if !overwriteOutFile {
			if _, err := os.Stat(out); err == nil {
				return fmt.Errorf("--out %s exists: choose another file, or pass --force to overwrite it", out)
			}
		}
		cfg, err := LoadDaemonConfig(tf.Apply(cf.LoadOptions()))
		if err != nil {
			return err
		}
		logWarnings(NewLogger(cmd.ErrOrStderr(), "migrate-"+verb, cfg.Log), cfg)
		if want != "" && cfg.Selected.Backend != want {
			return fmt.Errorf("%s needs the %s backend, and the configuration selects %s (%s)", cmd.CommandPath(), want, cfg.Selected.Backend, cfg.Selected.SelectedBy)
		}
		b, closeB, err := openBackend(cmd.Context(), cmd.ErrOrStderr(), cfg, pluginPath, "migrate-"+verb)
		if err != nil {
			return err
		}
		defer closeB()
		w := cmd.OutOrStdout()
		switch verb {
		case "export":
			return runExport(cmd.Context(), w, tf.Progress(cmd.ErrOrStderr()), b, out, asJSON)
		case "import":
			res, err := migrate.ImportFile(cmd.Context(), b, tree, migrate.Options{Progress: tf.Progress(cmd.ErrOrStderr()), Resume: resume})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(w, res)
			}
			fmt.Fprintf(w, "imported %d nodes into %s in %d batches", res.Nodes, cfg.Selected.Backend, res.Batches)
			if res.Skipped > 0 {
				fmt.Fprintf(w, " (%d already present, skipped)", res.Skipped)
			}
			switch {
			case res.KeptVersions:
				fmt.Fprintln(w, "; versions and times kept")
			default:
				fmt.Fprintf(w, "; %s cannot set versions: every node restarts at version 0 (conditional writes against old versions will fail)\n", cfg.Selected.Backend)
			}
			return nil
		default:
			check := versions || (!nover && b.Capabilities().ImportKeepsVersions)
			res, err := migrate.ValidateFile(cmd.Context(), b, tree, check)
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(w, res); err != nil {
					return err
				}
			} else {
				for _, d := range res.Differences {
					fmt.Fprintf(w, "%s: %s %s\n", d.Path, d.What, d.Detail)
				}
				if res.More > 0 {
					fmt.Fprintf(w, "... and %d more differences\n", res.More)
				}
			}
			if n := len(res.Differences) + res.More; n > 0 {
				if !asJSON {
					fmt.Fprintf(w, "not valid: %d differences between %s and the tree file (%d nodes)\n", n, cfg.Selected.Backend, res.Nodes)
				}
				return ExitWith(ExitFailure)
			}
			if !asJSON {
				what := "data"
				if check {
					what = "data and versions"
				}
				fmt.Fprintf(w, "valid: %s holds the tree file's %d nodes, %s equal, and nothing else\n", cfg.Selected.Backend, res.Nodes, what)
			}
			return nil
		}
	}
	return cmd
}

func runExport(ctx context.Context, w, progress io.Writer, b core.MetadataBackend, out string, asJSON bool) error {
	fmt.Fprintf(progress, "reading the tree of %s ...\n", b.Capabilities().Name)
	// Write beside the target and rename, so a failed export never
	// leaves a file that looks whole; the nodes stream to it as they are
	// read (constant memory).
	tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	er, err := migrate.ExportFile(ctx, b, tmp, progress)
	if err != nil {
		tmp.Close()
		return fmt.Errorf("export to %s: %w", out, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	res := struct {
		File       string `json:"file"`
		Source     string `json:"source"`
		Revision   int64  `json:"revision"`
		Nodes      int    `json:"nodes"`
		Ephemerals int    `json:"ephemerals_skipped"`
	}{out, er.Header.Source, er.Header.Revision, er.Nodes, er.Ephemerals}
	if asJSON {
		return writeJSON(w, res)
	}
	fmt.Fprintf(w, "exported %d persistent nodes of %s at revision %d to %s (%d ephemeral nodes are not exported)\n", res.Nodes, res.Source, res.Revision, out, res.Ephemerals)
	return nil
}

// checkTree opens the tree file at path and checks all of it
// (migrate.Scan: format, order, count, checksum), reading it once without
// holding it; it returns the file to read again.
func checkTree(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if _, err := migrate.Scan(f, nil); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w (nothing was written)", path, err)
	}
	return f, nil
}

// openBackend launches the selected backend's plugin and opens one client
// of it; closing closes both.
func openBackend(ctx context.Context, stderr io.Writer, cfg *config.Config, pluginPath, name string) (core.MetadataBackend, func(), error) {
	logger := NewLogger(stderr, name, cfg.Log)
	p, err := plugins.Launch(ctx, plugins.LaunchOptions{Path: pluginPath, Name: cfg.Selected.Backend,
		Dir: cfg.Metadata.Backend.PluginDir, SHA256: cfg.Metadata.Backend.PluginSHA256, Config: cfg.PluginSettings(), Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("start the %s backend plugin: %w", cfg.Selected.Backend, err)
	}
	c, err := p.NewClient(ctx, core.ClientOptions{Name: name})
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("open a client of %s: %w", cfg.Selected.Backend, err)
	}
	return c, func() { c.Close(); p.Close() }, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
