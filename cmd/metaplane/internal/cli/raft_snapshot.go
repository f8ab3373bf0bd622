package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Codes of the --json error object of the offline raft verbs.
const (
	codeDirInUse = "DIR_IN_USE" // a running process holds the data directory
	codeBadFile  = "BAD_FILE"   // a snapshot file that is not whole
	// codeSurvivorBehind: unsafe-recover on a member another survivor is ahead of.
	codeSurvivorBehind = "SURVIVOR_BEHIND"
)

// snapshotReport is what `raft snapshot save` wrote and what `raft
// snapshot status` read.
type snapshotReport struct {
	File      string    `json:"file"`
	Bytes     int64     `json:"bytes"`
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	Source    string    `json:"source"`
	ClusterID string    `json:"cluster_id"`
	Revision  int64     `json:"revision"`
	Epoch     int64     `json:"epoch"`
	Created   time.Time `json:"created"`
	Nodes     int       `json:"nodes"`
	SHA256    string    `json:"sha256"`
}

func newSnapshotReport(file string, size int64, t migrate.FileInfo) snapshotReport {
	h := t.Header
	return snapshotReport{File: file, Bytes: size, Format: migrate.Format, Version: migrate.FormatVersion,
		Source: h.Source, ClusterID: h.ClusterID, Revision: h.Revision, Epoch: h.Epoch, Created: h.Created,
		Nodes: t.Nodes, SHA256: t.SHA256}
}

// checkSnapshot checks a whole snapshot file without holding it
// (migrate.Scan).
func checkSnapshot(path string) (migrate.FileInfo, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return migrate.FileInfo{}, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return migrate.FileInfo{}, 0, err
	}
	info, err := migrate.Scan(f, nil)
	if err != nil {
		return info, 0, &codedErr{code: codeBadFile, error: fmt.Errorf("%s: %w", path, err)}
	}
	return info, fi.Size(), nil
}

func (rep snapshotReport) text(w io.Writer) {
	fmt.Fprintf(w, "file        %s (%d bytes)\nformat      %s version %d\nsource      %s, cluster %s\nrevision    %d\nepoch       %d\ncreated     %s\nnodes       %d persistent\nsha256      %s\n",
		rep.File, rep.Bytes, rep.Format, rep.Version, rep.Source, orNone(rep.ClusterID), rep.Revision, rep.Epoch,
		rep.Created.Format(time.RFC3339), rep.Nodes, rep.SHA256)
}

func raftSnapshot(r *raftFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot <verb>",
		Short: "save a backup of the tree from a running quorum, check one (status), make a new cluster from one (restore)"}
	markGroup(cmd, "verb")
	cmd.AddCommand(raftSnapshotSave(r), raftSnapshotStatus(r), raftSnapshotRestore(r))
	return cmd
}

func raftSnapshotSave(r *raftFlags) *cobra.Command {
	var force bool
	var wait time.Duration
	cmd := &cobra.Command{Use: "save FILE", Args: exactArgs(1),
		Short: "write a consistent backup of the tree (every persistent node at one revision) from the leader to FILE"}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "overwrite FILE when it exists")
	f.DurationVar(&wait, "wait", 5*time.Minute, "how long the whole transfer may take")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		out := args[0]
		if wait <= 0 {
			return usageError("--wait: want a positive duration, got %v", wait)
		}
		if !force {
			if _, err := os.Stat(out); err == nil {
				return usageError("%s exists: choose another file, or pass --force to overwrite it", out)
			}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		// The chunks stream to a file beside out (constant memory),
		// renamed into place once the whole file checked.
		tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".part-*")
		if err != nil {
			return err
		}
		defer func() { tmp.Close(); os.Remove(tmp.Name()) }()
		var got int64
		progress := cmd.ErrOrStderr()
		err = r.callAdmin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			// A retry on another leader starts over.
			if err := tmp.Truncate(0); err != nil {
				return err
			}
			if _, err := tmp.Seek(0, io.SeekStart); err != nil {
				return err
			}
			got = 0
			stream, err := a.SaveRaftSnapshot(ctx, &adminv1.SaveRaftSnapshotRequest{})
			if err != nil {
				return err
			}
			lastPct := -1
			for {
				m, err := stream.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if _, err := tmp.Write(m.Chunk); err != nil {
					return fmt.Errorf("write %s: %w", tmp.Name(), err)
				}
				got += int64(len(m.Chunk))
				if m.TotalBytes > 0 {
					if pct := int(got * 100 / m.TotalBytes); pct/10 != lastPct/10 {
						lastPct = pct
						fmt.Fprintf(progress, "received %d of %d bytes (%d%%, %d nodes at revision %d)\n", got, m.TotalBytes, pct, m.Nodes, m.Revision)
					}
				}
			}
		})
		if err != nil {
			return err
		}
		// Check the whole file (count and checksum) before it replaces
		// anything.
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return err
		}
		tree, err := migrate.Scan(tmp, nil)
		if err != nil {
			return &codedErr{code: codeBadFile, error: fmt.Errorf("the snapshot received is not whole: %w (nothing was written)", err)}
		}
		if err := tmp.Sync(); err != nil {
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			return err
		}
		rep := newSnapshotReport(out, got, tree)
		if r.json {
			return r.printJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "saved %d persistent nodes of %s cluster %s at revision %d (epoch %d) to %s, %d bytes, sha256 %s (ephemeral nodes are not saved)\n",
			rep.Nodes, rep.Source, orNone(rep.ClusterID), rep.Revision, rep.Epoch, out, rep.Bytes, rep.SHA256)
		return nil
	}
	return cmd
}

func raftSnapshotStatus(r *raftFlags) *cobra.Command {
	return &cobra.Command{Use: "status FILE", Aliases: []string{"inspect"}, Args: exactArgs(1),
		Short: "check a snapshot file whole (count, checksum) and print its source, revision, epoch and node count",
		RunE: func(cmd *cobra.Command, args []string) error {
			info, size, err := checkSnapshot(args[0])
			if err != nil {
				return err
			}
			rep := newSnapshotReport(args[0], size, info)
			if r.json {
				return r.printJSON(cmd.OutOrStdout(), rep)
			}
			rep.text(cmd.OutOrStdout())
			return nil
		}}
}

// offlineFlags are the flags of the verbs that work on a data directory
// with no coordinator running: the configuration (as for metaplane
// coordinator) and --data-dir.
type offlineFlags struct {
	cf              *ConfigFlags
	tool            *toolFlags
	dataDir, voters string
	nodeID          uint64
}

func addOfflineFlags(cmd *cobra.Command) *offlineFlags {
	o := &offlineFlags{cf: AddConfigFlags(cmd.Flags()), tool: addToolFlags(cmd.Flags(), true)}
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
		return raft.Options{}, usageError("give the member's data directory with --data-dir DIR")
	}
	cfg, err := loadDaemonConfig(of.tool.apply(of.cf.LoadOptions()))
	if err != nil {
		return raft.Options{}, err
	}
	if cfg.Selected.Backend != config.BackendRaft {
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
	if logger := newLogger(cmd.ErrOrStderr(), "raft-offline", cfg.Log); of.tool.level != "" && logger.Enabled(context.Background(), slog.LevelInfo) {
		o.Logf = func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }
	}
	return o, nil
}

// offlineErr gives a refusal of an offline tool its --json code.
func offlineErr(err error) error {
	if errors.Is(err, raft.ErrDirInUse) {
		return &codedErr{code: codeDirInUse, error: err}
	}
	if errors.Is(err, raft.ErrSurvivorBehind) {
		return &codedErr{code: codeSurvivorBehind, error: err}
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

func raftSnapshotRestore(r *raftFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "restore FILE", Args: exactArgs(1),
		Short: "offline: make the empty --data-dir a new single-voter cluster holding FILE's tree (versions and times kept, epochs continued)"}
	of := addOfflineFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if of.dataDir == "" {
			return usageError("give the new member's data directory with --data-dir DIR")
		}
		// Check the whole file before anything is written; then read it
		// again as the batches are written (one batch held, never the
		// tree).
		info, _, err := checkSnapshot(args[0])
		if err != nil {
			if ce, ok := errors.AsType[*codedErr](err); ok {
				return &codedErr{code: ce.code, error: fmt.Errorf("%w (nothing was written)", ce.error)}
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
				yield(core.ImportNode{}, &codedErr{code: codeBadFile, error: fmt.Errorf("%s changed after it was checked: %w", args[0], err)})
			case again.SHA256 != info.SHA256:
				yield(core.ImportNode{}, &codedErr{code: codeBadFile, error: fmt.Errorf("%s changed after it was checked (checksum %s, then %s)", args[0], info.SHA256, again.SHA256)})
			}
		}
		progress := of.tool.progress(cmd.ErrOrStderr())
		res, err := raft.Restore(cmd.Context(), o, nodes, info.Nodes, func(done, total int) {
			fmt.Fprintf(progress, "restored %d of %d nodes\n", done, total)
		})
		if err != nil {
			if ce, ok := errors.AsType[*codedErr](err); ok {
				return &codedErr{code: ce.code, error: fmt.Errorf("%w: the restore stopped; remove %s (an incomplete new cluster) and restore again", ce.error, of.dataDir)}
			}
			return offlineErr(err)
		}
		rep := restoreReport{File: args[0], DataDir: of.dataDir, ClusterID: fmt.Sprint(res.ClusterID), NodeID: res.NodeID,
			Address: res.Address, Nodes: res.Nodes, Revision: info.Header.Revision, Epoch: info.Header.Epoch, AppliedIndex: res.AppliedIndex}
		if r.json {
			return r.printJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "restored %d nodes (revision %d of %s cluster %s) into %s: a new cluster %s with member %d at %s as its only voter; its next epoch is above %d. Start its coordinator on %s, then add voters with `metaplane raft add-voter`\n",
			rep.Nodes, rep.Revision, info.Header.Source, orNone(info.Header.ClusterID), of.dataDir, rep.ClusterID, rep.NodeID, rep.Address, rep.Epoch, of.dataDir)
		return nil
	}
	return cmd
}
