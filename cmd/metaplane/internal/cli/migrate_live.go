package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
)

func init() {
	Register(func() *cobra.Command {
		cmd := newLiveMigrateCmd(config.BackendZooKeeper, config.BackendRaft)
		cmd.Use = "zk-to-raft-live-migrate"
		cmd.Short = "migrate a serving ZooKeeper cluster to an empty Raft store (migrate live, source zookeeper, target raft)"
		return cmd
	})
}

// storeFlags are --from/--to and their overrides: two configurations in
// one verb.
type storeFlags struct {
	from, to         string
	fromSet, toSet   []string
	noEnv            bool
	fromPlug, toPlug string
	tool             *ToolFlags
}

// addStoreFlags registers the flags of the two stores and the output
// flags (--quiet too with quiet).
func addStoreFlags(cmd *cobra.Command, quiet bool) *storeFlags {
	s := &storeFlags{}
	f := cmd.Flags()
	s.tool = AddToolFlags(f, quiet)
	f.StringVar(&s.from, "from", "", "the source's YAML configuration `FILE` (required)")
	f.StringVar(&s.to, "to", "", "the target's YAML configuration `FILE` (required)")
	f.StringArrayVar(&s.fromSet, "from-set", nil, "set a key of the source's configuration, `key=value` (repeatable)")
	f.StringArrayVar(&s.toSet, "to-set", nil, "set a key of the target's configuration, `key=value` (repeatable)")
	f.BoolVar(&s.noEnv, "no-env", false, "ignore METAPLANE_* environment variables (they apply to both configurations otherwise)")
	f.StringVar(&s.fromPlug, "from-plugin", "", "run this backend plugin binary for the source")
	f.StringVar(&s.toPlug, "to-plugin", "", "run this backend plugin binary for the target")
	return s
}

// open loads both configurations and opens both stores; want* (when set)
// are the backends they must select.
func (s *storeFlags) open(ctx context.Context, stderr io.Writer, verb, wantFrom, wantTo string) (src, dst core.MetadataBackend, srcName, dstName string, closeAll func(), err error) {
	if s.from == "" || s.to == "" {
		return nil, nil, "", "", nil, UsageError("give both stores' configurations: --from FILE --to FILE")
	}
	if s.from == s.to && len(s.fromSet) == 0 && len(s.toSet) == 0 {
		return nil, nil, "", "", nil, UsageError("--from and --to are the same configuration: a store cannot be copied into itself")
	}
	for _, kv := range append(append([]string(nil), s.fromSet...), s.toSet...) {
		if _, _, err := config.ParseOverride(kv); err != nil {
			return nil, nil, "", "", nil, UsageError("%v", err)
		}
	}
	load := func(file string, set []string, want, role string) (*config.Config, error) {
		opts := s.tool.Apply(config.LoadOptions{File: file, Overrides: set, DiscoverBackends: discoverThirdParty})
		if !s.noEnv {
			opts.Env = os.Environ()
		}
		cfg, err := LoadDaemonConfig(opts)
		if err != nil {
			return nil, fmt.Errorf("the %s (%s): %w", role, file, err)
		}
		logWarnings(NewLogger(stderr, "migrate-"+role, cfg.Log), cfg)
		if want != "" && cfg.Selected.Backend != want {
			return nil, fmt.Errorf("%s needs the %s backend as its %s, and %s selects %s (%s)", verb, want, role, file, cfg.Selected.Backend, cfg.Selected.SelectedBy)
		}
		return cfg, nil
	}
	fromCfg, err := load(s.from, s.fromSet, wantFrom, "source")
	if err != nil {
		return nil, nil, "", "", nil, err
	}
	toCfg, err := load(s.to, s.toSet, wantTo, "target")
	if err != nil {
		return nil, nil, "", "", nil, err
	}
	src, closeSrc, err := openBackend(ctx, stderr, fromCfg, s.fromPlug, "migrate-source")
	if err != nil {
		return nil, nil, "", "", nil, fmt.Errorf("the source: %w", err)
	}
	dst, closeDst, err := openBackend(ctx, stderr, toCfg, s.toPlug, "migrate-target")
	if err != nil {
		closeSrc()
		return nil, nil, "", "", nil, fmt.Errorf("the target: %w", err)
	}
	return src, dst, fromCfg.Selected.Backend, toCfg.Selected.Backend, func() { closeDst(); closeSrc() }, nil
}

const liveLong = `Copies the source store into an empty target store while the source's
coordinators keep serving, then fences the source and copies the rest.

It marks both stores (` + "`/metaplane-migration`" + `): a second or concurrent run is
refused, and coordinators on the target do not lead until the copy is
complete. It copies in rounds, each comparing a snapshot of the source
with the previous one node by node ({path, create and modify revision}),
until a round changes at most --quiet nodes (at most --max-rounds rounds).
Then it fences the source: the fence node /metaplane-migration/fence and a
bump of /coordinators/epoch, in one transaction; every coordinator refuses
to lead while the fence exists and the leader resigns, so the source takes
no more catalog writes. A final scan copies what changed (it reads only
the paths a watch of the source, opened at the start, reported changed
since the last round; --no-watch, or a watch that was lost, reads every
node's stat instead: seconds per 100 000 nodes of pause), the target is
validated against the source's final state, the target's epoch node is
raised to the source's epoch, and the target's marker is removed. The
write pause (fence to validation) is reported.

Any failure reverts: the source's marker and fence are removed, so its
coordinators lead again; the target keeps its partial copy, marked failed,
which no coordinator leads: give the next run an empty store. Until the
cut-over the source's fence is an ephemeral node of this tool's session:
if the tool is killed, it goes when the session ends and the source's
coordinators lead again; the next run takes over the marker the dead run
left. After success the source stays fenced; start the coordinators on
the target. docs/migrate-zk-to-raft.md gives the procedure and the
rollback, docs/migration.md the engine.`

func newLiveMigrateCmd(wantFrom, wantTo string) *cobra.Command {
	var (
		asJSON, noWatch  bool
		maxRounds, quiet int
		fenceWait        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "live --from CONFIG --to CONFIG",
		Short: "copy a serving store into an empty one, then fence the source and finish (live migration)",
		Long:  liveLong,
		Args:  NoArgs,
	}
	sf := addStoreFlags(cmd, false)
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the result as a JSON object")
	f.IntVar(&maxRounds, "max-rounds", 10, "the most copy rounds before the fence (1 to 100)")
	f.IntVar(&quiet, "quiet", 100, "a round changing at most this many nodes ends the copy rounds (at least 0)")
	f.DurationVar(&fenceWait, "fence-wait", 30*time.Second, "how long to wait for the source's leader to step down once fenced")
	f.BoolVar(&noWatch, "no-watch", false, "do not watch the source: the final scan reads every node's stat (a longer pause; spares the source one more read of the tree)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if maxRounds < 1 || maxRounds > 100 {
			return UsageError("--max-rounds %d: want 1 to 100", maxRounds)
		}
		if quiet < 0 {
			return UsageError("--quiet %d: want at least 0", quiet)
		}
		if fenceWait <= 0 {
			return UsageError("--fence-wait must be positive")
		}
		src, dst, srcName, dstName, closeAll, err := sf.open(cmd.Context(), cmd.ErrOrStderr(), cmd.CommandPath(), wantFrom, wantTo)
		if err != nil {
			return err
		}
		defer closeAll()
		res, err := migrate.Live(cmd.Context(), src, dst, migrate.LiveOptions{Progress: cmd.ErrOrStderr(),
			MaxRounds: maxRounds, QuietNodes: max(quiet, 0), FenceWait: fenceWait, NoWatch: noWatch,
			BeforeFinal: testHold(cmd.ErrOrStderr(), "before-final"), AfterRound: testHoldAfterRound(cmd.ErrOrStderr())})
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if asJSON {
			return writeJSON(w, res)
		}
		fmt.Fprintf(w, "migrated %d persistent nodes from %s to %s in %d rounds and a final scan; write pause %d ms\n",
			res.Nodes, srcName, dstName, len(res.Rounds), res.PauseMS)
		fmt.Fprintf(w, "validated: no differences (%s)\n", map[bool]string{true: "data and versions", false: "data; versions restarted on the target"}[res.KeptVersions])
		fmt.Fprintf(w, "%d ephemeral nodes not copied: their owners recreate them on the target\n", res.Ephemerals)
		fmt.Fprintf(w, "epoch: the source's is %d; the target's leaders continue above %d\n", res.SourceEpoch, res.TargetEpoch)
		fmt.Fprintln(w, "the source stays fenced (its coordinators do not lead). Cut over now:")
		fmt.Fprintln(w, "  1. start the coordinators on the target's configuration")
		fmt.Fprintln(w, "  2. restart the tablet servers with the target's configuration")
		fmt.Fprintln(w, "  3. stop the source's coordinators (to roll back before writes on the target: metaplane migrate unfence on the source)")
		return nil
	}
	return cmd
}

func newCopyCmd() *cobra.Command {
	var asJSON, resume bool
	cmd := &cobra.Command{
		Use:   "copy --from CONFIG --to CONFIG",
		Short: "export, import and validate in one: copy a store into an empty one (writes stopped)",
		Long: `Reads the source at one revision, imports it into the target (which must be
empty, as for import) and validates the target against what was read: the
export, import and validate verbs in one, without a file. Stop the
source's coordinators first (or use live for a serving source). Ephemeral
nodes are not copied and are counted in the result.`,
		Args: NoArgs,
	}
	sf := addStoreFlags(cmd, true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as a JSON object")
	cmd.Flags().BoolVar(&resume, "resume", false, "complete a copy that stopped: skip the nodes present with the same data")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		src, dst, srcName, dstName, closeAll, err := sf.open(cmd.Context(), cmd.ErrOrStderr(), cmd.CommandPath(), "", "")
		if err != nil {
			return err
		}
		defer closeAll()
		progress := sf.tool.Progress(cmd.ErrOrStderr())
		fmt.Fprintf(progress, "reading the tree of %s ...\n", srcName)
		// The tree streams through a temporary tree file (constant
		// memory), removed at the end.
		tmp, err := os.CreateTemp("", "metaplane-copy-*.jsonl")
		if err != nil {
			return err
		}
		defer func() { tmp.Close(); os.Remove(tmp.Name()) }()
		tree, err := migrate.ExportFile(cmd.Context(), src, tmp, progress)
		if errors.Is(err, core.ErrUnavailable) {
			// A source whose revision keeps moving (a serving Raft
			// quorum's session renewals): one snapshot of it instead.
			fmt.Fprintf(progress, "%v; reading one snapshot of the source instead\n", err)
			if err = tmp.Truncate(0); err == nil {
				if _, err = tmp.Seek(0, io.SeekStart); err == nil {
					tree, err = migrate.ExportSnapshot(cmd.Context(), src, tmp, migrate.ExportOptions{})
				}
			}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(progress, "read %d persistent nodes at revision %d (%d ephemeral nodes skipped)\n", tree.Nodes, tree.Header.Revision, tree.Ephemerals)
		imp, err := migrate.ImportFile(cmd.Context(), dst, tmp, migrate.Options{Progress: progress, Resume: resume})
		if err != nil {
			return err
		}
		val, err := migrate.ValidateFile(cmd.Context(), dst, tmp, imp.KeptVersions)
		if err != nil {
			return err
		}
		res := struct {
			Source     string                 `json:"source"`
			Target     string                 `json:"target"`
			Revision   int64                  `json:"revision"`
			Ephemerals int                    `json:"ephemerals_skipped"`
			Import     migrate.ImportResult   `json:"import"`
			Validate   migrate.ValidateResult `json:"validate"`
		}{srcName, dstName, tree.Header.Revision, tree.Ephemerals, imp, val}
		n := len(val.Differences) + val.More
		w := cmd.OutOrStdout()
		if asJSON {
			if err := writeJSON(w, res); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(w, "copied %d nodes of %s (revision %d) into %s; %d ephemeral nodes not copied (their owners recreate them)\n",
				tree.Nodes, srcName, tree.Header.Revision, dstName, tree.Ephemerals)
			if !imp.KeptVersions {
				fmt.Fprintf(w, "%s cannot set versions: every node restarts at version 0\n", dstName)
			}
			for _, d := range val.Differences {
				fmt.Fprintf(w, "%s: %s %s\n", d.Path, d.What, d.Detail)
			}
			if n == 0 {
				fmt.Fprintln(w, "valid: the target holds every copied node, equal, and nothing else")
			} else {
				fmt.Fprintf(w, "not valid: %d differences\n", n)
			}
		}
		if n > 0 {
			return ExitWith(ExitFailure)
		}
		return nil
	}
	return cmd
}

func newUnfenceCmd() *cobra.Command {
	var asJSON bool
	var pluginPath string
	cmd := &cobra.Command{
		Use:   "unfence",
		Short: "remove a live migration's marker and fence from the selected store (roll back, or clear an interrupted run)",
		Long: `Removes /metaplane-migration and its fence from the store the configuration
selects, so its coordinators lead again: the rollback of a live migration's
source (before the target took writes), or the clearing of a marker an
interrupted run left. It prints the marker it removed.`,
		Args: NoArgs,
	}
	cf := AddConfigFlags(cmd.Flags())
	tf := AddToolFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as a JSON object")
	cmd.Flags().StringVar(&pluginPath, "plugin", "", "run this backend plugin binary instead of metaplane-backend-<backend>")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := LoadDaemonConfig(tf.Apply(cf.LoadOptions()))
		if err != nil {
			return err
		}
		logWarnings(NewLogger(cmd.ErrOrStderr(), "migrate-unfence", cfg.Log), cfg)
		b, closeB, err := openBackend(cmd.Context(), cmd.ErrOrStderr(), cfg, pluginPath, "migrate-unfence")
		if err != nil {
			return err
		}
		defer closeB()
		removed, err := migrate.Unfence(cmd.Context(), b)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if asJSON {
			return writeJSON(w, struct {
				Removed string `json:"removed"`
			}{removed})
		}
		if removed == "" {
			fmt.Fprintf(w, "%s carries no migration marker: nothing to remove\n", cfg.Selected.Backend)
			return nil
		}
		fmt.Fprintf(w, "removed %s; its coordinators lead again\n", removed)
		return nil
	}
	return cmd
}

// testHoldEnv is a test-only hook: set to "after-round-1", live holds
// after its first copy round (before the fence); set to "before-final",
// after the fence at the start of the final scan. It holds until killed,
// having said so on stderr, so that a test can SIGKILL the tool at that
// point by waiting on the line.
const testHoldEnv = "METAPLANE_TEST_MIGRATE_HOLD"

func testHold(stderr io.Writer, at string) func(context.Context) error {
	if os.Getenv(testHoldEnv) != at {
		return nil
	}
	return func(ctx context.Context) error {
		fmt.Fprintf(stderr, "test hook (%s=%s): holding\n", testHoldEnv, at)
		<-ctx.Done()
		return ctx.Err()
	}
}

func testHoldAfterRound(stderr io.Writer) func(context.Context, int) error {
	hold := testHold(stderr, "after-round-1")
	if hold == nil {
		return nil
	}
	return func(ctx context.Context, r int) error {
		if r != 1 {
			return nil
		}
		return hold(ctx)
	}
}
