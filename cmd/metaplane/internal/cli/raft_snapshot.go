package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/migrate"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Codes of the --json error object of the offline raft verbs.
const (
	CodeDirInUse = "DIR_IN_USE" // a running process holds the data directory
	CodeBadFile  = "BAD_FILE"   // a snapshot file that is not whole
	// CodeSurvivorBehind: unsafe-recover on a member another survivor is ahead of.
	CodeSurvivorBehind = "SURVIVOR_BEHIND"
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

// CheckSnapshot checks a whole snapshot file without holding it
// (migrate.Scan).
func CheckSnapshot(path string) (migrate.FileInfo, int64, error) {
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
		return info, 0, &CodedErr{Code: CodeBadFile, Err: fmt.Errorf("%s: %w", path, err)}
	}
	return info, fi.Size(), nil
}

func (rep snapshotReport) text(w io.Writer) {
	fmt.Fprintf(w, "file        %s (%d bytes)\nformat      %s version %d\nsource      %s, cluster %s\nrevision    %d\nepoch       %d\ncreated     %s\nnodes       %d persistent\nsha256      %s\n",
		rep.File, rep.Bytes, rep.Format, rep.Version, rep.Source, OrNone(rep.ClusterID), rep.Revision, rep.Epoch,
		rep.Created.Format(time.RFC3339), rep.Nodes, rep.SHA256)
}

func raftSnapshot(r *RaftFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot <verb>",
		Short: "save a backup of the tree from a running quorum, check one (status), make a new cluster from one (restore)"}
	markGroup(cmd, "verb")
	cmd.AddCommand(raftSnapshotSave(r), raftSnapshotStatus(r))
	addRegisteredVerbs(cmd, "raft snapshot", r)
	return cmd
}

func raftSnapshotSave(r *RaftFlags) *cobra.Command {
	var force bool
	var wait time.Duration
	cmd := &cobra.Command{Use: "save FILE", Args: ExactArgs(1),
		Short: "write a consistent backup of the tree (every persistent node at one revision) from the leader to FILE"}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "overwrite FILE when it exists")
	f.DurationVar(&wait, "wait", 5*time.Minute, "how long the whole transfer may take")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		out := args[0]
		if wait <= 0 {
			return UsageError("--wait: want a positive duration, got %v", wait)
		}
		if !force {
			if _, err := os.Stat(out); err == nil {
				return UsageError("%s exists: choose another file, or pass --force to overwrite it", out)
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
			return &CodedErr{Code: CodeBadFile, Err: fmt.Errorf("the snapshot received is not whole: %w (nothing was written)", err)}
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
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "saved %d persistent nodes of %s cluster %s at revision %d (epoch %d) to %s, %d bytes, sha256 %s (ephemeral nodes are not saved)\n",
			rep.Nodes, rep.Source, OrNone(rep.ClusterID), rep.Revision, rep.Epoch, out, rep.Bytes, rep.SHA256)
		return nil
	}
	return cmd
}

func raftSnapshotStatus(r *RaftFlags) *cobra.Command {
	return &cobra.Command{Use: "status FILE", Aliases: []string{"inspect"}, Args: ExactArgs(1),
		Short: "check a snapshot file whole (count, checksum) and print its source, revision, epoch and node count",
		RunE: func(cmd *cobra.Command, args []string) error {
			info, size, err := CheckSnapshot(args[0])
			if err != nil {
				return err
			}
			rep := newSnapshotReport(args[0], size, info)
			if r.json {
				return r.PrintJSON(cmd.OutOrStdout(), rep)
			}
			rep.text(cmd.OutOrStdout())
			return nil
		}}
}
