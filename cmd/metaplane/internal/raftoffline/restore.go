package raftoffline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
)

// offlineFlags are the flags of the verbs that work on a data directory
// with no coordinator running: the configuration (as for metaplane
// coordinator) and --data-dir.
type offlineFlags struct {
	cf              *cli.ConfigFlags
	tool            *cli.ToolFlags
	dataDir, voters string
	nodeID          uint64
}

func addOfflineFlags(cmd *cobra.Command) *offlineFlags {
	o := &offlineFlags{cf: cli.AddConfigFlags(cmd.Flags()), tool: cli.AddToolFlags(cmd.Flags(), true)}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "the member's coordinator.raft.`DIR` (required; overrides the configuration's)")
	f.Uint64Var(&o.nodeID, "node-id", 0, "the member's `id` (overrides coordinator.raft.node.id)")
	f.StringVar(&o.voters, "voters", "", "the `id@host:port,...` voter list (overrides coordinator.raft.voters)")
	return o
}

// options are the member's Raft options from the configuration, with
// --data-dir as its directory. The member's log lines go nowhere (the
// verbs say what they do) unless --log-level asks for info or debug:
// then they are INFO records on stderr.
func (of *offlineFlags) options(cmd *cobra.Command) (raft.Options, error) {
	if of.dataDir == "" {
		return raft.Options{}, cli.UsageError("give the member's data directory with --data-dir DIR")
	}
	cfg, err := cli.LoadDaemonConfig(of.tool.Apply(of.cf.LoadOptions()))
	if err != nil {
		return raft.Options{}, err
	}
	if !cfg.KeepsRaftData() {
		return raft.Options{}, fmt.Errorf("%s works on the Raft backend's data, and the configuration selects %s (%s)", cmd.CommandPath(), cfg.Selected.Backend, cfg.Selected.SelectedBy)
	}
	settings := cfg.PluginSettings()
	settings["coordinator.raft.dir"] = of.dataDir
	if of.nodeID != 0 {
		settings["coordinator.raft.node.id"] = strconv.FormatUint(of.nodeID, 10)
	}
	if of.voters != "" {
		settings["coordinator.raft.voters"] = of.voters
	}
	o, err := raft.OptionsFromSettings(settings)
	if err != nil {
		return raft.Options{}, err
	}
	o.Logf = func(string, ...any) {}
	if logger := cli.NewLogger(cmd.ErrOrStderr(), "raft-offline", cfg.Log); of.tool.Level() != "" && logger.Enabled(context.Background(), slog.LevelInfo) {
		o.Logf = func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }
	}
	return o, nil
}

// offlineErr gives a refusal of an offline tool its --json code.
func offlineErr(err error) error {
	if errors.Is(err, raft.ErrDirInUse) {
		return &cli.CodedErr{Code: cli.CodeDirInUse, Err: err}
	}
	if errors.Is(err, raft.ErrSurvivorBehind) {
		return &cli.CodedErr{Code: cli.CodeSurvivorBehind, Err: err}
	}
	return err
}

// restoreReport is `raft snapshot restore`'s answer.
type restoreReport struct {
	File         string `json:"file"`
	DataDir      string `json:"data_dir"`
	ClusterID    string `json:"cluster_id"`
	NodeID       uint64 `json:"node_id"`
	Address      string `json:"address"`
	Nodes        int    `json:"nodes"`
	Revision     int64  `json:"source_revision"`
	Epoch        int64  `json:"source_epoch"`
	AppliedIndex uint64 `json:"applied_index"`
}

func raftSnapshotRestore(r *cli.RaftFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "restore FILE", Args: cli.ExactArgs(1),
		Short: cli.HelperShort("raft snapshot", "restore")}
	of := addOfflineFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if of.dataDir == "" {
			return cli.UsageError("give the new member's data directory with --data-dir DIR")
		}
		// Check the whole file before anything is written; then read it
		// again as the batches are written (one batch held, never the
		// tree).
		info, _, err := cli.CheckSnapshot(args[0])
		if err != nil {
			if ce, ok := errors.AsType[*cli.CodedErr](err); ok {
				return &cli.CodedErr{Code: ce.Code, Err: fmt.Errorf("%w (nothing was written)", ce.Err)}
			}
			return err
		}
		o, err := of.options(cmd)
		if err != nil {
			return err
		}
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		errStop := errors.New("stop")
		nodes := func(yield func(core.ImportNode, error) bool) {
			again, err := migrate.Scan(f, func(n *migrate.Node) error {
				if !yield(n.ImportNode(), nil) {
					return errStop
				}
				return nil
			})
			switch {
			case errors.Is(err, errStop):
			case err != nil:
				yield(core.ImportNode{}, &cli.CodedErr{Code: cli.CodeBadFile, Err: fmt.Errorf("%s changed after it was checked: %w", args[0], err)})
			case again.SHA256 != info.SHA256:
				yield(core.ImportNode{}, &cli.CodedErr{Code: cli.CodeBadFile, Err: fmt.Errorf("%s changed after it was checked (checksum %s, then %s)", args[0], info.SHA256, again.SHA256)})
			}
		}
		progress := of.tool.Progress(cmd.ErrOrStderr())
		res, err := raft.Restore(cmd.Context(), o, nodes, info.Nodes, func(done, total int) {
			fmt.Fprintf(progress, "restored %d of %d nodes\n", done, total)
		})
		if err != nil {
			if ce, ok := errors.AsType[*cli.CodedErr](err); ok {
				return &cli.CodedErr{Code: ce.Code, Err: fmt.Errorf("%w: the restore stopped; remove %s (an incomplete new cluster) and restore again", ce.Err, of.dataDir)}
			}
			return offlineErr(err)
		}
		rep := restoreReport{File: args[0], DataDir: of.dataDir, ClusterID: fmt.Sprint(res.ClusterID), NodeID: res.NodeID,
			Address: res.Address, Nodes: res.Nodes, Revision: info.Header.Revision, Epoch: info.Header.Epoch, AppliedIndex: res.AppliedIndex}
		if r.JSON() {
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "restored %d nodes (revision %d of %s cluster %s) into %s: a new cluster %s with member %d at %s as its only voter; its next epoch is above %d. Start its coordinator on %s, then add voters with `metaplane raft add-voter`\n",
			rep.Nodes, rep.Revision, info.Header.Source, cli.OrNone(info.Header.ClusterID), of.dataDir, rep.ClusterID, rep.NodeID, rep.Address, rep.Epoch, of.dataDir)
		return nil
	}
	return cmd
}
